#!/usr/bin/env bash
# test_agent_floor.sh AUTOLOCO -- the policies' bandwidth floor in real agents
# (issue 12, "Done when" 4): two sites whose every link runs through an
# `autoloco wanem` proxy at 20 Mbit/s with 10 ms of delay. With `fixed`
# H_base = 4 and [policy] max_comm_fraction = 0.5, the first two intervals are
# the rule's (no exchange measured yet) and from the third on H is raised to
# the floor the measured exchange and step times imply; both sites run the
# same H history and end with the same theta. A control run without the floor
# over the same proxies keeps H = 4.
. "$(dirname "$0")/shell_lib.sh"
al_test_start test-floor "${1:-}"

cd "$tmp" || exit 1
mkdir in
for i in $(seq 1 300); do
    printf 'fortune %d: a slow link between %d sites is %d times slower\n%%\n' "$i" $((i % 5)) $((i * 3))
done >in/f
"$bin" data prep --format fortune -o data in >/dev/null || { echo "FAIL: data prep"; exit 1; }
"$bin" certs --dir certs --sites a,b >/dev/null || { echo "FAIL: certs"; exit 1; }

# run NAME FRACTION -- sites a and b, each reaching the other only through a proxy
run() {
    local name=$1 frac=$2 me peer
    local pa pb wa wb
    pa=$(port) pb=$(port) wa=$(port) wb=$(port)
    mkdir -p "$name"
    # a's link to b: wa -> pb; b's link to a: wb -> pa
    "$bin" wanem --listen 127.0.0.1:$wa --to 127.0.0.1:$pb --rate-mbit 20 --delay-ms 10 \
        --duration 300 >"$name/wanem-a.log" 2>&1 &
    pids+=($!)
    "$bin" wanem --listen 127.0.0.1:$wb --to 127.0.0.1:$pa --rate-mbit 20 --delay-ms 10 \
        --duration 300 >"$name/wanem-b.log" 2>&1 &
    pids+=($!)
    for me in a b; do
        if [[ $me == a ]]; then peer="b = 127.0.0.1:$wa" listen=$pa; else peer="a = 127.0.0.1:$wb" listen=$pb; fi
        cat >"$name/$me.ini" <<EOF
[site]
name = $me
listen = 127.0.0.1:$listen
run_id = floor-$name
[peers]
$peer
[tls]
ca = $tmp/certs/ca.pem
cert = $tmp/certs/$me.pem
key = $tmp/certs/$me.key
[model]
preset = tiny
[data]
train = $tmp/data/train.bin
val = $tmp/data/val.bin
[inner]
batch = 4
seq = 32
steps = 480
warmup = 5
threads = 1
eval_every = 0
eval_batches = 2
[outer]
codec = fp32
[policy]
name = fixed
h_base = 4
h_max = 2000
max_comm_fraction = $frac
[round]
deadline_s = ${AL_TEST_DEADLINE:-10}
[checkpoint]
dir = $tmp/$name/run-$me
every = 0
EOF
    done
    sleep 0.3 # the proxies listen
    local p1 p2 rc=0
    "$bin" agent -c "$name/a.ini" >"$name/a.log" 2>&1 &
    p1=$!
    pids+=($p1)
    "$bin" agent -c "$name/b.ini" >"$name/b.log" 2>&1 &
    p2=$!
    pids+=($p2)
    for p in $p1 $p2; do
        for ((i = 0; i < 2400; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$p" 2>/dev/null && { kill -KILL "$p"; rc=124; }
        wait "$p" || rc=1
    done
    return $rc
}

# h_hist NAME SITE -- "h1 h2 ..." from the site's event log
h_hist() {
    python3 -c '
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if "\"round\"" in l]
print(" ".join(str(r["h"]) for r in rs if "h" in r))' "$1/run-$2/events.jsonl" 2>/dev/null
}

# the two runs side by side (they mostly wait on the proxies' rate)
run floor 0.5 >floor.out 2>&1 &
p_floor=$!
run control 0 >control.out 2>&1 &
p_control=$!
wait $p_floor
rc_floor=$?
wait $p_control
rc_control=$?
cat floor.out control.out

if [[ $rc_floor -eq 0 ]]; then
    ha=$(h_hist floor a) hb=$(h_hist floor b)
    read -r -a H <<<"$ha"
    echo "  with the floor: H = $ha"
    if [[ ${#H[@]} -ge 3 && ${H[0]} -eq 4 && ${H[1]} -eq 4 && ${H[2]} -gt 8 ]]; then
        ok "max_comm_fraction 0.5 over a 20 Mbit/s proxy raised H from 4 to ${H[2]} at the third interval"
    else
        no "the floor did not take effect: H = $ha"
    fi
    [[ -n $ha && $ha == "$hb" ]] && ok "both sites ran the same H history" ||
        no "H histories differ: a: $ha, b: $hb"
    python3 - floor/run-a/events.jsonl <<'EOF' && ok "rounds under the floor project <= 0.5 of their time to the link" || no "projected fraction above the setting"
import json, sys
rs = [r for r in map(json.loads, open(sys.argv[1])) if r["event"] == "round"]
# what the policy saw (the round's statistics): the last exchange's seconds t_c
# and the compute seconds of the H steps; its projection for the next interval
# t_c/(t_c + h_next*t_s) must not exceed f = 0.5 wherever the floor was active
worst, n, prev_step = 0, 0, 0
for r in rs:
    steps = r["step"] - prev_step  # what ran (the last interval may be cut short)
    prev_step = r["step"]
    if not r.get("comm_floor"):
        continue
    tc, ts = r["policy_comm_s"], r["policy_compute_s"] / steps
    assert r["h_next"] >= min(r["comm_floor"], 2000), r
    worst = max(worst, tc / (tc + r["h_next"] * ts))
    n += 1
print(f"  {n} rounds with a floor; largest projected comm fraction {worst:.3f} (setting 0.5)")
sys.exit(0 if n >= 1 and 0 < worst <= 0.5 + 1e-9 else 1)
EOF
else
    no "the run with the floor failed: $(grep -h error floor/*.log | head -3)"
fi

if [[ $rc_control -eq 0 ]]; then
    hc=$(h_hist control a)
    [[ -n $hc && -z $(tr ' ' '\n' <<<"$hc" | grep -v '^4$') ]] && ok "without the floor H stays 4 over the same link" ||
        no "control run: H = $hc"
else
    no "the control run failed: $(grep -h error control/*.log | head -3)"
fi

al_test_end
