#!/usr/bin/env bash
# test_prometheus.sh METRICS_PAGE SRCDIR -- the operations side of /metrics
# against Prometheus's own tool (Debian's `prometheus` package; SKIP, 77,
# without promtool): a real /metrics page (tests/metrics_page.c: the agent's
# registry and HTTP server, a 3-site run's values) passes `promtool check
# metrics` and carries the alerting gauges with sane values;
# tools/prometheus/alerts.yml passes `promtool check rules`, each alert fires
# on the series it is for (`promtool test rules` on alerts_test.yml), and
# every autoloco_* metric an alert queries is on the page.
set -u
page_bin=${1:?usage: test_prometheus.sh METRICS_PAGE SRCDIR}
src=${2:?usage: test_prometheus.sh METRICS_PAGE SRCDIR}
if ! command -v promtool >/dev/null 2>&1; then
    echo "SKIP: promtool not installed (Debian: apt-get install prometheus; tools/setup does)"
    exit 77
fi
tmp=$(mktemp -d /tmp/al-test-prometheus.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
no() { echo "FAIL: $*"; fail=$((fail + 1)); }

if "$page_bin" >"$tmp/metrics.txt"; then ok "GET /metrics ($(wc -l <"$tmp/metrics.txt") lines)"; else no "metrics_page"; fi
# promtool check metrics: format errors fail it; lint problems (names, units,
# help) are printed, and any line at all is a failure here
out=$(promtool check metrics <"$tmp/metrics.txt" 2>&1)
if [[ $? -eq 0 && -z $out ]]; then ok "promtool check metrics: clean"; else no "promtool check metrics: $out"; fi

# the gauges alerts need: ages computed when the page is rendered
value() { awk -v n="$1" 'index($0, n) == 1 { print $NF; exit }' "$tmp/metrics.txt"; }
check() { # NAME{LABELS PREDICATE-ON-v
    local v
    v=$(value "$1")
    if [[ -n $v ]] && python3 -c "import sys; v=float(sys.argv[1]); sys.exit(0 if ($2) else 1)" "$v"; then
        ok "$1 = $v ($2)"
    else
        no "$1 = '${v}' (want $2)"
    fi
}
check 'autoloco_seconds_since_commit{site="a"}' '0 <= v < 60'
check 'autoloco_checkpoint_age_seconds{site="a"}' '0 <= v < 60'
check 'autoloco_no_quorum{site="a"}' 'v == 1'
check 'autoloco_peer_last_seen_age_seconds{site="a",peer="b"}' '0 <= v < 60'
check 'autoloco_peer_last_seen_age_seconds{site="a",peer="c"}' '0 <= v < 60'
check 'autoloco_peer_last_seen_timestamp_seconds{site="a",peer="b"}' 'v > 1.6e9'
check 'autoloco_peer_up{site="a",peer="c"}' 'v == 0'
if grep -q '^autoloco_peer_last_seen_seconds' "$tmp/metrics.txt"; then
    no "the old name autoloco_peer_last_seen_seconds (a timestamp named like an age) is still exported"
else
    ok "no autoloco_peer_last_seen_seconds (renamed *_timestamp_seconds)"
fi

rules=$src/tools/prometheus/alerts.yml
out=$(promtool check rules "$rules" 2>&1)
if [[ $? -eq 0 ]]; then ok "promtool check rules: $(echo "$out" | grep -o '[0-9]* rules found')"; else no "promtool check rules: $out"; fi
out=$(cd "$src/tools/prometheus" && promtool test rules alerts_test.yml 2>&1)
if [[ $? -eq 0 ]]; then ok "promtool test rules: every alert fires where it should"; else no "promtool test rules: $out"; fi
# every alert appears in the rule tests, and every autoloco_* name it queries
# is exported ('up' and node_* come from Prometheus and node_exporter)
for a in $(grep -o 'alert: [A-Za-z]*' "$rules" | cut -d' ' -f2); do
    if grep -q "alertname: $a\$" "$src/tools/prometheus/alerts_test.yml"; then ok "alert $a is tested"; else no "alert $a has no case in alerts_test.yml"; fi
done
for n in $(grep -o 'autoloco_[a-z_]*' "$rules" | sort -u); do
    if grep -q "^# TYPE $n " "$tmp/metrics.txt"; then ok "alerts.yml's $n is exported"; else no "alerts.yml queries $n, which /metrics does not export"; fi
done
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
