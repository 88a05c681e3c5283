#!/usr/bin/env bash
# test_layers.sh LIBAUTOLOCO -- the agent's parts call each other one way only
# (issue 13): agent.c -> agent_round.c -> agent_net.c, agent_hb.c; agent_hb.c
# -> agent_net.c; agent_net.c, agent_ckpt.c and the round state machine
# (round.c) call none of the others. Read from the symbols each object of the
# static library defines and uses (nm), so a new call against the grain fails.
set -u
lib=${1:?usage: test_layers.sh path/to/libautoloco.a}
parts="agent agent_round agent_net agent_hb agent_ckpt round"
declare -A allowed=(
    [agent]="agent_round agent_net agent_hb agent_ckpt round"
    [agent_round]="agent_net agent_hb agent_ckpt round"
    [agent_hb]="agent_net"
    [agent_net]=""
    [agent_ckpt]=""
    [round]=""
)
nm -A "$lib" 2>/dev/null >/tmp/layers.$$ || { echo "FAIL: nm $lib"; exit 1; }
trap 'rm -f /tmp/layers.$$' EXIT
obj() { grep -E "[:/]runtime_agent_$1\.c\.o:|[:/]runtime_round_$1\.c\.o:" /tmp/layers.$$; }
fail=0 edges=0
for f in $parts; do
    [[ -n $(obj "$f") ]] || { echo "FAIL: no object for runtime/$f.c in $lib"; fail=1; continue; }
    used=$(obj "$f" | awk '$2 == "U" {print $3}' | sort -u)
    for g in $parts; do
        [[ $f == "$g" ]] && continue
        defs=$(obj "$g" | awk '$2 ~ /^[TDBR]$/ {print $3}' | sort -u)
        calls=$(comm -12 <(echo "$used") <(echo "$defs") | tr '\n' ' ')
        [[ -z $calls ]] && continue
        edges=$((edges + 1))
        if [[ " ${allowed[$f]} " == *" $g "* ]]; then
            echo "ok: $f -> $g ($calls)"
        else
            echo "FAIL: runtime/$f.c calls runtime/$g.c against the layering: $calls"
            fail=1
        fi
    done
done
[[ $edges -ge 5 ]] || { echo "FAIL: only $edges calls between the parts found: is nm reading $lib?"; fail=1; }
exit $fail
