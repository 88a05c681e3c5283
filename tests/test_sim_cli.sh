#!/usr/bin/env bash
# test_sim_cli.sh AUTOLOCO -- `autoloco sim` on the command line: bad input ends
# with exit status 1 and one "autoloco: error:" line naming the problem; a
# short real run prints, last, one JSON line with syncs, bytes,
# final_eval_loss and h_history.
set -u
bin=${1:?usage: test_sim_cli.sh path/to/autoloco}
tmp=$(mktemp -d /tmp/al-test-sim-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

expect() { # expect PATTERN ARGS...: exit 1, one error line matching PATTERN
    local pat=$1
    shift
    local err rc
    err=$("$bin" sim "$@" 2>&1 >/dev/null)
    rc=$?
    if [[ $rc -ne 1 || $(printf '%s\n' "$err" | grep -c .) -ne 1 ]] ||
        ! grep -qE -- "^autoloco: error: .*$pat" <<<"$err"; then
        echo "FAIL: sim $* -> exit $rc: $err"
        fail=$((fail + 1))
    else
        echo "ok: sim $* -> $err"
        pass=$((pass + 1))
    fi
}

mkdir -p "$tmp/in"
for i in $(seq 1 300); do
    printf 'fortune %d: the quick brown fox jumps over %d lazy dogs\n%%\n' "$i" $((i * 3))
done >"$tmp/in/fort"
"$bin" data prep --format fortune -o "$tmp/data" "$tmp/in" >/dev/null || exit 1
d=(--set data.train="$tmp/data/train.bin" --set data.val="$tmp/data/val.bin")

printf '[sim]\nsites = 0\n' >"$tmp/a.ini"
expect "a.ini:2: \[sim\] sites: 0 is out of range" -c "$tmp/a.ini"
printf '[policy]\nname = fixed\n\n; the interval\nh = soon\n' >"$tmp/b.ini"
expect "b.ini:5: \[policy\] h: .*'soon' is not a finite number" -c "$tmp/b.ini"
printf '[outer]\ncorrection = maybe\n' >"$tmp/c.ini"
expect "c.ini:2: .*correction.*'maybe'" -c "$tmp/c.ini"
printf '[wan]\nlatency = 3\n' >"$tmp/d.ini"
expect "d.ini:2: \[wan\] latency: unknown key" -c "$tmp/d.ini"
expect "unknown policy 'nope'" --policy nope
expect "unknown key 'h'" --policy autoloco --h 5
expect "codec 'int3' is unknown" --codec int3
expect "codec: codec 'int3' is unknown" --set sim.codec=int3
expect "max_delta_ratio: 0.5 would leave out the median site itself" --set outer.max_delta_ratio=0.5
expect "\[sim\] progress: 'time' is not one of steps\|lr" --set sim.progress=time
expect "missing.bin: cannot open" --set data.train="$tmp/missing.bin"
expect "unexpected argument 'extra'" "${d[@]}" extra
expect "overlap: 'soon' is not one of none\|delayed\|delayed-mid\|streaming \(sim also: delayed-mean\)" --overlap soon
expect "\[outer\] fragments: 0 is out of range" --set outer.fragments=0
expect "\\[outer\\] overlap_steps: '-2' is not one of half\\|sync" --set outer.overlap_steps=-2
expect "\[outer\] overlap_steps: .*soon" --set outer.overlap_steps=soon
expect "\[outer\] stream_eager: 'maybe' is not true or false" --set outer.stream_eager=maybe
expect "\[sim\] iid: 'perhaps' is not true or false" --set sim.iid=perhaps
expect "\[outer\] s_ref: -1 is out of range" --set outer.s_ref=-1
printf '[outer]\noverlap = streaming\nfragments = many\n' >"$tmp/e.ini"
expect "e.ini:3: \[outer\] fragments" -c "$tmp/e.ini"

out=$("$bin" sim "${d[@]}" --steps 40 --set policy.h_base=8 --sites 3 --json --jsonl "$tmp/r.jsonl")
last=$(tail -n 1 <<<"$out")
if python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert all(k in d for k in ("syncs","bytes","final_eval_loss","h_history","projected_s")); assert d["syncs"]==len(d["h_history"])' "$last" &&
    [[ $(wc -l <"$tmp/r.jsonl") -eq $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["syncs"])' "$last") ]]; then
    echo "ok: sim --json: $(head -c 120 <<<"$last")..."
    pass=$((pass + 1))
else
    echo "FAIL: sim --json: $out"
    fail=$((fail + 1))
fi
# overlap_steps = sync: the merge at the next fragment's sync, named so in the JSON
out=$("$bin" sim "${d[@]}" --steps 16 --set policy.h_base=8 --sites 2 --overlap streaming \
    --set outer.fragments=2 --set outer.overlap_steps=sync --json)
last=$(tail -n 1 <<<"$out")
if python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["overlap_steps"]=="sync" and d["syncs"]==2' "$last"; then
    echo "ok: sim overlap_steps=sync: $(head -c 120 <<<"$last")..."
    pass=$((pass + 1))
else
    echo "FAIL: sim overlap_steps=sync: $out"
    fail=$((fail + 1))
fi
# the languages scenario: the train file's groups (data prep --groups), one site per group
expect "scenario languages: \[data\] train .*train.bin has no groups file .*train.groups: prepare it with .autoloco data prep --groups" \
    "${d[@]}" --scenario languages
mkdir -p "$tmp/de"
for i in $(seq 1 120); do
    printf 'Grüße %d aus Köln, schöne Straße\n%%\n' "$i"
done >"$tmp/de/fort"
"$bin" data prep --format fortune --groups -o "$tmp/lang" en="$tmp/in" de="$tmp/de" >/dev/null || exit 1
l=(--set data.train="$tmp/lang/train.bin" --set data.val="$tmp/lang/val.bin")
expect "scenario languages: .*train.groups has 2 groups but \[sim\] sites = 3 \(one site per group: --sites 2\)" \
    "${l[@]}" --scenario languages --sites 3
out=$("$bin" sim "${l[@]}" --scenario languages --sites 2 --steps 16 --set policy.h_base=8 --json)
last=$(tail -n 1 <<<"$out")
if python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["scenario"]=="languages" and d["groups"]==["en","de"] and d["syncs"]==2' "$last"; then
    echo "ok: sim --scenario languages: $(head -c 160 <<<"$last")..."
    pass=$((pass + 1))
else
    echo "FAIL: sim --scenario languages: $out"
    fail=$((fail + 1))
fi
# the keys only sim reads: train and agent refuse them, naming the key (issue 36)
for kv in sim.sites=2 wan.rtt_ms=10 outer.stream_eager=false; do
    err=$("$bin" train --set "$kv" --steps 1 2>&1 >/dev/null)
    if [[ $? -eq 1 ]] && grep -q "only autoloco sim reads this key" <<<"$err"; then
        echo "ok: train --set $kv -> $err"
        pass=$((pass + 1))
    else
        echo "FAIL: train --set $kv -> $err"
        fail=$((fail + 1))
    fi
done
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
