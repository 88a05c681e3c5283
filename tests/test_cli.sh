#!/usr/bin/env bash
# test_cli.sh AUTOLOCO -- the command line on bad input: every case must end
# with exit status 1 (2 for usage), exactly one line on stderr that starts with
# "autoloco: error:" and names the problem, and no crash (no signal, no
# sanitizer report). Then a short real run: data prep, train, resume.
set -u
bin=${1:?usage: test_cli.sh path/to/autoloco}
tmp=$(mktemp -d /tmp/al-test-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0

# expect STATUS PATTERN -- ARGS...: run autoloco, check status and stderr
expect() {
    local want=$1 pat=$2
    shift 3
    local err rc
    err=$("$bin" "$@" 2>&1 >/dev/null)
    rc=$?
    local lines
    lines=$(printf '%s\n' "$err" | grep -c .)
    if [[ $rc -ne $want ]]; then
        echo "FAIL: autoloco $* -> exit $rc, want $want; stderr: $err"
        fail=$((fail + 1))
    elif [[ $want -eq 1 && ($lines -ne 1 || ! $err =~ ^autoloco:\ error:) ]]; then
        echo "FAIL: autoloco $* -> not one error line: $err"
        fail=$((fail + 1))
    elif ! grep -qiE -- "$pat" <<<"$err"; then
        echo "FAIL: autoloco $* -> stderr lacks /$pat/: $err"
        fail=$((fail + 1))
    else
        echo "ok: autoloco $* -> $rc: $(head -c 160 <<<"$err")"
        pass=$((pass + 1))
    fi
}

# a small corpus
mkdir -p "$tmp/in"
for i in $(seq 1 200); do
    printf 'fortune number %d says: the quick brown fox %d\n%%\n' "$i" $((i * 7))
done >"$tmp/in/fort"
"$bin" data prep --format fortune -o "$tmp/data" "$tmp/in" >/dev/null || {
    echo "FAIL: data prep"
    exit 1
}
common=(--set data.train="$tmp/data/train.bin" --set data.val="$tmp/data/val.bin"
    --set checkpoint.dir="$tmp/ck" --set model.preset=tiny --set inner.batch=2 --set inner.seq=32)

# token files
expect 1 "missing.bin.*cannot open" -- train "${common[@]}" --set data.train="$tmp/missing.bin"
head -c 1500 "$tmp/data/train.bin" >"$tmp/trunc.bin"
expect 1 "trunc.bin.*truncated" -- train "${common[@]}" --set data.train="$tmp/trunc.bin"
cp "$tmp/data/train.bin" "$tmp/magic.bin"
printf '\x01\x02\x03\x04' | dd of="$tmp/magic.bin" conv=notrunc status=none
expect 1 "magic.bin.*wrong magic" -- train "${common[@]}" --set data.train="$tmp/magic.bin"
expect 1 "vocabulary 257.*expects 50257" -- train "${common[@]}" --set model.preset=gpt2-124m --set inner.seq=32
# presets and config
expect 1 "preset.*'huge' is not one of" -- train "${common[@]}" --set model.preset=huge
printf '[inner]\nsteps = 10\nlr = fast\n' >"$tmp/bad.ini"
expect 1 "bad.ini:3: \[inner\] lr: 'fast' is not a number" -- train -c "$tmp/bad.ini"
printf '[inner]\nstepz = 10\n' >"$tmp/bad2.ini"
expect 1 "bad2.ini:2: \[inner\] stepz: unknown key" -- train -c "$tmp/bad2.ini"
expect 1 "missing.ini: cannot open" -- train -c "$tmp/missing.ini"
expect 1 "^autoloco: error: --steps: \[inner\] steps: 'ten' is not an integer" -- train "${common[@]}" --steps ten
expect 1 "seq: 64 exceeds" -- train "${common[@]}" --set inner.seq=64
# checkpoints
touch "$tmp/afile"
expect 1 "checkpoint.*afile" -- train "${common[@]}" --set checkpoint.dir="$tmp/afile/ck"
expect 1 "no checkpoint" -- train "${common[@]}" --resume "$tmp"
# usage errors
expect 2 "usage" -- train --bogus
expect 2 "unknown command" -- frobnicate
expect 1 "unknown benchmark" -- bench nothing
# bench overlap and demo --overlap refuse bad values before starting anything
expect 1 "--mbit: 0 is not in \(0, 100000\]" -- bench overlap --mbit 0
expect 1 "--sites: .*4" -- bench overlap --sites 4
expect 2 "usage: autoloco bench overlap" -- bench overlap --frobnicate
expect 1 "--overlap: none is not an overlapped mode the agents run" -- bench overlap --overlap none
expect 1 "--overlap: overlap 'later': expected none, delayed" -- bench overlap --overlap later
expect 1 "--fragments: 0" -- bench overlap --fragments 0
expect 1 "--overlap-steps: 'later' is not half or sync" -- bench overlap --overlap-steps later
expect 1 "--seq 999 exceeds preset 'demo' context 128" -- bench subnormal --seq 999
expect 1 "--repeats: 0 is out of range" -- bench subnormal --repeats 0
expect 2 "usage: autoloco bench subnormal" -- bench subnormal --frobnicate
expect 1 "demo: --overlap: delayed-mean is the simulator's only" -- demo --overlap delayed-mean
expect 1 "demo: --overlap: delayed-mean is the simulator's only" -- demo --overlap delayed-mean
expect 1 "demo: --overlap: overlap 'sometimes': expected none, delayed, delayed-mean, delayed-mid or streaming" -- demo --overlap sometimes
expect 1 "unknown input format" -- data prep --format xml -o "$tmp/x" "$tmp/in"
expect 1 "does not exist" -- data prep --format text -o "$tmp/x" "$tmp/nothing"
mkdir -p "$tmp/empty"
expect 1 "found 0 documents" -- data prep --format text -o "$tmp/x" "$tmp/empty"
printf '{"text": "a"}\n{"txt": 1}\n' >"$tmp/bad.jsonl"
expect 1 "bad.jsonl:2: no string field" -- data prep --format jsonl -o "$tmp/x" "$tmp/bad.jsonl"
printf '{"text": "a"}\n{"text": \n' >"$tmp/bad2.jsonl"
expect 1 "bad2.jsonl:2: bad JSON" -- data prep --format jsonl -o "$tmp/x" "$tmp/bad2.jsonl"
# a folder's links to its own files (or below it) are aliases, passed over (Debian's
# fortunes-it links its files into fortunes/); a link that leaves the folder is read
mkdir -p "$tmp/lf/sub"
printf 'alpha one\n\nalpha two\n\nalpha three\n' >"$tmp/lf/a"
printf 'beta\n' >"$tmp/lf/sub/b"
printf 'gamma one\n\ngamma two\n' >"$tmp/ext"
ln -s sub/b "$tmp/lf/c" && ln -s a "$tmp/lf/d" && ln -s "$tmp/ext" "$tmp/lf/e"
out=$("$bin" data prep --format text -o "$tmp/lfo" "$tmp/lf" 2>&1)
if [[ $out == *"data prep: 2 files, 5 documents"* ]]; then
    echo "ok: data prep: links inside the folder passed over, one leaving it read"
    pass=$((pass + 1))
else
    echo "FAIL: data prep over links: expected 2 files, 5 documents: $out"
    fail=$((fail + 1))
fi
# --groups: each input a group (NAME=PATH, or PATH named by its last component), written
# to train.groups (the sim's languages scenario); tests/test_groups.c checks the contents
expect 1 "data prep --groups: input '=$tmp/in': expected NAME=PATH or PATH" -- data prep \
    --format fortune --groups -o "$tmp/x" "=$tmp/in"
expect 1 "group name 'a b' must be" -- data prep --format fortune --groups -o "$tmp/x" \
    "a b=$tmp/in" "$tmp/lf"
out=$("$bin" data prep --format fortune --groups -o "$tmp/grp" "one=$tmp/in" "$tmp/lf/" 2>&1)
if [[ $out == *"train.groups: 2 groups"* ]] && grep -q "^one 0 " "$tmp/grp/train.groups" &&
    grep -q "^lf " "$tmp/grp/train.groups"; then
    echo "ok: data prep --groups: train.groups names 'one' and 'lf'"
    pass=$((pass + 1))
else
    echo "FAIL: data prep --groups: $out; $(cat "$tmp/grp/train.groups" 2>&1)"
    fail=$((fail + 1))
fi
# the device: one clear line without a usable GPU (or a CUDA build); with one, a short run
expect 1 "device: 'gpu' is not one of cpu\|cuda" -- train "${common[@]}" --device gpu
if "$bin" bench gpu --preset tiny --batch 1 --seq 8 --steps 1 >"$tmp/gpu.out" 2>&1; then
    if "$bin" train "${common[@]}" --device cuda --steps 2 --set checkpoint.dir="$tmp/ckg" \
        >"$tmp/gpu-train.out" 2>&1 && grep -q "saved checkpoint" "$tmp/gpu-train.out"; then
        echo "ok: a GPU is usable: train --device cuda ran 2 steps and saved"
        pass=$((pass + 1))
    else
        echo "FAIL: train --device cuda on a usable GPU: $(tail -3 "$tmp/gpu-train.out")"
        fail=$((fail + 1))
    fi
else
    nogpu="this build has no CUDA backend \(configure with -Dcuda=enabled\)|no CUDA device: "
    expect 1 "$nogpu" -- train "${common[@]}" --device cuda --steps 1
    expect 1 "$nogpu" -- train "${common[@]}" --device cuda --steps 1 --workers 2
    expect 1 "$nogpu" -- bench gpu --preset tiny --steps 1
    expect 1 "$nogpu" -- bench inner --device cuda --preset tiny --seq 8 --steps 1
    expect 1 "$nogpu" -- bench odc --device cuda --preset tiny --steps 1 --rounds 1 \
        --data "$tmp/data/train.bin"
fi
expect 1 "unknown device 'tpu'" -- bench odc --device tpu

# a real short run, then resume from its checkpoint
if out=$("$bin" train "${common[@]}" --steps 6 --set inner.log_every=3 2>&1) &&
    grep -q "step      6/6" <<<"$out" && grep -q "val loss" <<<"$out" &&
    [[ -f "$tmp/ck/step-00000006/manifest.json" ]]; then
    echo "ok: train 6 steps wrote $tmp/ck/step-00000006"
    pass=$((pass + 1))
else
    echo "FAIL: train run: $out"
    fail=$((fail + 1))
fi
if out=$("$bin" train "${common[@]}" --steps 9 --set inner.log_every=3 --resume "$tmp/ck" 2>&1) &&
    grep -q "resumed from .*step-00000006 at step 6" <<<"$out" && grep -q "step      9/9" <<<"$out"; then
    echo "ok: resume continued to step 9"
    pass=$((pass + 1))
else
    echo "FAIL: resume: $out"
    fail=$((fail + 1))
fi

# a start that would lose checkpoints (issue 36): train and agent without
# --resume in a folder that holds some are refused, naming the folder and both
# flags; --resume with --fresh is refused too; --fresh starts over at step 0
expect 1 "train: \[checkpoint\] dir '$tmp/ck' holds checkpoints .*--resume $tmp/ck continues.*--fresh starts over" -- \
    train "${common[@]}" --steps 3
expect 1 "say one of them" -- train "${common[@]}" --steps 3 --fresh --resume "$tmp/ck"
printf '[site]\nname = a\n[checkpoint]\ndir = %s\n' "$tmp/ck" >"$tmp/agent-ck.ini"
expect 1 "agent: \[checkpoint\] dir '$tmp/ck' holds checkpoints .*--resume $tmp/ck continues.*--fresh starts over" -- \
    agent -c "$tmp/agent-ck.ini"
expect 1 "say one of them" -- agent -c "$tmp/agent-ck.ini" --fresh --resume "$tmp/ck"
if out=$("$bin" train "${common[@]}" --steps 3 --set inner.log_every=3 --fresh 2>&1) &&
    grep -q "step      3/3" <<<"$out" && ! grep -q "resumed from" <<<"$out"; then
    echo "ok: train --fresh in a folder with checkpoints starts over at step 0"
    pass=$((pass + 1))
else
    echo "FAIL: train --fresh: $out"
    fail=$((fail + 1))
fi

# a bench that is stopped leaves no agent behind (they held its ports and
# cores after the bench ended: PR_SET_PDEATHSIG)
"$bin" bench overlap --steps 2000 --h 200 --runs 1 --dir "$tmp/bo" >"$tmp/bo.log" 2>&1 &
bp=$!
kids=""
for _ in $(seq 1 600); do
    kids=$(pgrep -P "$bp" -f " agent -c ")
    [[ $(wc -w <<<"$kids") -ge 2 ]] && break
    sleep 0.05
done
kill -TERM "$bp"
wait "$bp" 2>/dev/null
left=""
for _ in $(seq 1 100); do
    left=""
    for k in $kids; do kill -0 "$k" 2>/dev/null && left="$left $k"; done
    [[ -z $left ]] && break
    sleep 0.05
done
if [[ $(wc -w <<<"$kids") -ge 2 && -z $left ]]; then
    echo "ok: bench overlap stopped by SIGTERM: its agents ($(wc -w <<<"$kids")) ended with it"
    pass=$((pass + 1))
else
    echo "FAIL: bench overlap stopped: agents '$kids', still running '$left': $(tail -n 3 "$tmp/bo.log")"
    for k in $left; do kill -KILL "$k"; done
    fail=$((fail + 1))
fi

# bench subnormal, short: after 150 steps on text of one repeated letter the
# IEEE thread's attention gradient holds subnormals, the flushing thread's
# none, and both reach the same loss (to the 6 digits printed)
sn=$("$bin" bench subnormal --warm 150 --steps 2 --repeats 1 --json 2>&1 | tail -n 1)
if python3 -c 'import json, sys
j = json.loads(sys.argv[1])
assert j["ieee_subnormal_dqkv"] > 0 and j["flushed_subnormal_dqkv"] == 0, j
assert j["flushed_subnormal_state"] == 0 and j["ieee_loss"] == j["flushed_loss"], j' "$sn" 2>/dev/null; then
    echo "ok: bench subnormal: subnormals in the IEEE thread's attention gradient, none flushed, same loss"
    pass=$((pass + 1))
else
    echo "FAIL: bench subnormal: $sn"
    fail=$((fail + 1))
fi

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
