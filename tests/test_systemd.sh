#!/usr/bin/env bash
# test_systemd.sh AUTOLOCO UNIT -- the systemd unit example
# (tools/systemd/autoloco-agent@.service) passes `systemd-analyze verify`
# with no warning at all, as instance "a", its /usr/local/bin/autoloco
# pointed at the built binary (verify checks that commands exist). SKIP (77)
# where systemd-analyze is missing or cannot verify even a trivial unit here
# (some containers lack what it loads).
set -u
bin=${1:?usage: test_systemd.sh AUTOLOCO UNIT}
unit=${2:?usage: test_systemd.sh AUTOLOCO UNIT}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "SKIP: systemd-analyze not installed (Debian: the systemd package)"
    exit 77
fi
tmp=$(mktemp -d /tmp/al-test-systemd.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
printf '[Service]\nExecStart=/bin/true\n' >"$tmp/trivial.service"
if ! why=$(systemd-analyze verify "$tmp/trivial.service" 2>&1) || [[ -n $why ]]; then
    echo "SKIP: systemd-analyze cannot verify even a trivial unit in this environment: $why"
    exit 77
fi
pass=0
fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
no() { echo "FAIL: $*"; fail=$((fail + 1)); }

sed "s#/usr/local/bin/autoloco#$bin#g" "$unit" >"$tmp/autoloco-agent@a.service"
out=$(cd "$tmp" && systemd-analyze verify "autoloco-agent@a.service" 2>&1)
if [[ $? -eq 0 && -z $out ]]; then ok "systemd-analyze verify autoloco-agent@a.service: clean"; else no "systemd-analyze verify: $out"; fi
# the verifier itself: a misspelt key or a missing command is reported
sed 's/^KillSignal=/KillSignall=/' "$tmp/autoloco-agent@a.service" >"$tmp/bad1@a.service"
sed "s#$bin#/nonexistent/autoloco#g" "$tmp/autoloco-agent@a.service" >"$tmp/bad2@a.service"
for b in bad1 bad2; do
    out=$(cd "$tmp" && systemd-analyze verify "$b@a.service" 2>&1)
    if [[ -n $out ]]; then ok "$b is reported: $(echo "$out" | head -1)"; else no "$b passed verify"; fi
done
# what the unit runs: the agent's usage names --resume auto
if "$bin" agent --help | grep -q -- "--resume auto"; then ok "agent --help documents --resume auto"; else no "agent --help: no --resume auto"; fi
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
