#!/usr/bin/env bash
# test_odc_cli.sh AUTOLOCO -- `autoloco train --workers` and `bench odc` from
# the command line: both modes train and checkpoint; SIGKILL of one worker
# process ends the run within seconds with one error line naming the worker
# and leaves nothing in /dev/shm; SIGTERM (to the parent, or to the whole
# process group as a terminal or systemd sends it) stops the workers after one
# step and saves a checkpoint at that step, exit 0; stopped so and resumed, a
# 2-worker run ends bit-identical to an uninterrupted one (a wrong data position
# would not), its checkpoint loads with 1 worker (a warning) and one without
# the worker state is refused; bench odc --json ends with the keys the
# results page relies on.
set -u
bin=${1:?usage: test_odc_cli.sh path/to/autoloco}
tmp=$(mktemp -d /tmp/al-test-odc-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
no() { echo "FAIL: $*"; fail=$((fail + 1)); }

mkdir -p "$tmp/in"
for i in $(seq 1 300); do
    printf 'fortune %d: %s\n%%\n' "$i" "$(head -c $((i % 97 + 3)) /dev/zero | tr '\0' 'x')"
done >"$tmp/in/f"
"$bin" data prep --format fortune -o "$tmp/data" "$tmp/in" >/dev/null || no "data prep"
common=(--set model.preset=tiny --set data.train="$tmp/data/train.bin"
    --set data.val="$tmp/data/val.bin" --set inner.batch=6 --set inner.threads=1
    --set inner.eval_batches=2 --set checkpoint.dir="$tmp/ck")

for mode in odc fsdp; do
    out=$("$bin" train "${common[@]}" --fresh --steps 6 --workers 2 --mode "$mode" 2>&1)
    if [[ $? -ne 0 || $out != *"saved checkpoint"* || $out != *"step      6/6"* ]]; then
        no "train --workers 2 --mode $mode: $out"
    else echo "ok: train --workers 2 --mode $mode"; fi
done

# kill one worker of a long run
"$bin" train "${common[@]}" --fresh --steps 1000000 --workers 2 >"$tmp/out" 2>"$tmp/err" &
pid=$!
# a watchdog, so that a hang fails this test instead of leaving processes
# (workers die with their parent)
(sleep 30 && kill -KILL $pid 2>/dev/null) >/dev/null 2>&1 &
watchdog=$!
victim=""
for _ in $(seq 1 100); do
    victim=$(cat /proc/$pid/task/*/children 2>/dev/null | awk '{print $2}')
    [[ -n $victim ]] && break
    sleep 0.05
done
if [[ -z $victim ]]; then
    no "no worker processes appeared"
    kill -KILL $pid 2>/dev/null
else
    sleep 0.3
    t0=$(date +%s.%N)
    kill -KILL "$victim"
    wait $pid
    rc=$?
    dt=$(echo "$(date +%s.%N) - $t0" | bc)
    err=$(cat "$tmp/err")
    if [[ $rc -ne 1 || $err != "autoloco: error: worker 1 (pid $victim) was killed by signal 9"* ]]; then
        no "killed worker: exit $rc, stderr: $err"
    elif (($(echo "$dt > 5" | bc))); then
        no "killed worker: took $dt s"
    else echo "ok: killed worker -> exit $rc after ${dt}s: $err"; fi
fi
kill $watchdog 2>/dev/null
left=$(ls /dev/shm | grep -c "^autoloco\.train\.$pid\." || true)
[[ $left -eq 0 ]] || no "$left segment(s) left in /dev/shm"

# SIGTERM: to the parent only, then to the whole process group
for target in parent group; do
    ck="$tmp/ck-term-$target"
    setsid "$bin" train "${common[@]}" --set checkpoint.dir="$ck" --set inner.log_every=1 \
        --steps 1000000 --workers 2 >"$tmp/out" 2>"$tmp/err" &
    pid=$!
    (sleep 60 && kill -KILL -- -$pid $pid 2>/dev/null) >/dev/null 2>&1 &
    watchdog=$!
    for _ in $(seq 1 200); do grep -q "^step *5/" "$tmp/out" 2>/dev/null && break; sleep 0.05; done
    if [[ $target == parent ]]; then kill -TERM $pid; else kill -TERM -- -$pid; fi
    wait $pid
    rc=$?
    kill $watchdog 2>/dev/null
    at=$(sed -n 's/^signal 15: stopping after step \([0-9]*\)$/\1/p' "$tmp/out")
    saved=$(ls -d "$ck"/step-* 2>/dev/null | tail -n 1)
    mstep=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' \
        "$saved/manifest.json" 2>/dev/null)
    if [[ $rc -eq 0 && -n $at && $at -ge 5 && $mstep == "$at" ]] && grep -q "saved checkpoint" "$tmp/out"; then
        echo "ok: SIGTERM to the $target: stopped after step $at, checkpoint at step $mstep, exit 0"
    else
        no "SIGTERM to the $target: exit $rc, stop line '$at', checkpoint step '$mstep': $(tail -n 3 "$tmp/out") $(cat "$tmp/err")"
    fi
done

# exact resume with 2 workers (issue 13): N steps uninterrupted; the same run
# stopped by SIGTERM after a few steps and resumed to N ends with the same
# parameters and AdamW state, byte for byte (the SHA-256 the manifests list)
n=1000
nn=$(printf %08d $n)
files_of() {
    python3 -c 'import json,sys; f=json.load(open(sys.argv[1]))["files"]; print(f["model.safetensors"][:16], f["optim.safetensors"][:16])' \
        "$1/manifest.json" 2>/dev/null
}
w2=("${common[@]}" --set inner.log_every=1 --steps $n --workers 2)
"$bin" train "${w2[@]}" --set checkpoint.dir="$tmp/ck-full" >"$tmp/out" 2>&1 || no "uninterrupted run: $(tail -n 2 "$tmp/out")"
ref=$(files_of "$tmp/ck-full/step-$nn")
ck="$tmp/ck-res"
"$bin" train "${w2[@]}" --set checkpoint.dir="$ck" >"$tmp/out" 2>&1 &
pid=$!
(sleep 60 && kill -KILL $pid 2>/dev/null) >/dev/null 2>&1 &
watchdog=$!
for _ in $(seq 1 200); do grep -q "^step *5/" "$tmp/out" 2>/dev/null && break; sleep 0.05; done
kill -TERM $pid
wait $pid
kill $watchdog 2>/dev/null
at=$(sed -n 's/^signal 15: stopping after step \([0-9]*\)$/\1/p' "$tmp/out")
if [[ -z $at ]] || ((at >= n)); then
    no "resume: the run was not stopped before step $n (stop line '$at'): $(tail -n 2 "$tmp/out")"
    at=0
fi
mid="$ck/step-$(printf %08d "$at")"
"$bin" train "${w2[@]}" --set checkpoint.dir="$ck" --resume "$ck" >"$tmp/out" 2>"$tmp/err"
rc=$?
got=$(files_of "$ck/step-$nn")
if [[ $rc -eq 0 && -n $ref && $got == "$ref" && ! -s $tmp/err ]] &&
    grep -q "^resumed from $mid at step $at$" "$tmp/out"; then
    echo "ok: W=2 stopped after step $at, resumed to $n: model/optim SHA-256 $got, as uninterrupted ($ref)"
else
    no "W=2 resume not exact: status $rc, uninterrupted '$ref', resumed '$got': $(cat "$tmp/err") $(grep resumed "$tmp/out")"
fi
# the same comparison fails when the data position is not the workers' (the
# start of the data instead): what the checkpoint's data position is for
cp -r "$mid" "$tmp/ck-wrong"
python3 - "$tmp/ck-wrong/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["data"] = {"epoch": 0, "next": 0, "offset": 0}
json.dump(m, open(sys.argv[1], "w"))
PY
"$bin" train "${w2[@]}" --set checkpoint.dir="$tmp/ck-wrong-out" --resume "$tmp/ck-wrong" >/dev/null 2>&1
wrong=$(files_of "$tmp/ck-wrong-out/step-$nn")
[[ -n $wrong && $wrong != "$ref" ]] && echo "ok: resumed at the wrong data position: $wrong, not $ref" ||
    no "a wrong data position gave '$wrong' (uninterrupted '$ref')"
# another worker count: loads with a warning and goes on from the same step
out=$("$bin" train "${common[@]}" --set inner.log_every=1 --steps $((at + 2)) --workers 1 \
    --set checkpoint.dir="$tmp/ck-w1" --resume "$mid" 2>&1)
if [[ $? -eq 0 && $out == *"saved by 2 worker(s), this run has 1: "*"not bit-identical"* &&
    $out == *"resumed from $mid at step $at"* && $out == *"step $(printf %6d $((at + 2)))/"* ]]; then
    echo "ok: a W=2 checkpoint resumed with 1 worker: $(grep -o 'saved by 2.*' <<<"$out" | head -c 120)"
else
    no "W=2 checkpoint with 1 worker: $out"
fi
# a checkpoint without the worker state (saved before it was) is refused
cp -r "$mid" "$tmp/ck-old"
python3 - "$tmp/ck-old/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
del m["workers"]
json.dump(m, open(sys.argv[1], "w"))
PY
err=$("$bin" train "${w2[@]}" --set checkpoint.dir="$tmp/ck-old-out" --resume "$tmp/ck-old" 2>&1 >/dev/null)
rc=$?
if [[ $rc -eq 1 && $err == "autoloco: error: $tmp/ck-old/manifest.json: no worker state"*"cannot resume 2 workers exactly" ]]; then
    echo "ok: no worker state: $err"
else
    no "a checkpoint without worker state: status $rc: $err"
fi

# a data position outside the data is refused, naming the checkpoint
cp -r "$mid" "$tmp/ck-far"
python3 - "$tmp/ck-far/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["data"]["next"] = 10**9
json.dump(m, open(sys.argv[1], "w"))
PY
# (stderr also has the warning that the configuration differs: checkpoint.dir)
err=$("$bin" train "${w2[@]}" --set checkpoint.dir="$tmp/ck-far-out" --resume "$tmp/ck-far" 2>&1 >/dev/null)
rc=$?
err=$(grep '^autoloco: error:' <<<"$err")
if [[ $rc -eq 1 && $err == "autoloco: error: $tmp/ck-far: loader state (doc 1000000000) beyond "*"train.bin (290 documents)" ]]; then
    echo "ok: data position outside the data: $err"
else
    no "a data position outside the data: status $rc: $err"
fi

# bench odc on the same tiny data: the JSON keys
line=$("$bin" bench odc --preset tiny --data "$tmp/data/train.bin" --docs 4 --steps 1 --rounds 1 \
    --json 2>&1 | tail -1)
for k in speedup_odc_vs_fsdp_skewed speedup_odc_vs_fsdp_fixed idle_fsdp_skewed idle_odc_skewed \
    peak_gathered_bytes; do
    [[ $line == "{"*"\"$k\":"*"}" ]] || no "bench odc --json lacks $k: $line"
done
line=$("$bin" bench odc --preset tiny --data "$tmp/data/train.bin" --simulate --json 2>&1 | tail -1)
[[ $line == *'"W":64'* ]] || no "bench odc --simulate --json: $line"
"$bin" bench odc --workers 0 2>/dev/null && no "bench odc --workers 0 accepted"

echo "$fail failure(s)"
[[ $fail -eq 0 ]]
