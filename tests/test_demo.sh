#!/usr/bin/env bash
# test_demo.sh AUTOLOCO -- `autoloco demo --preset P`: the microbatch follows
# the preset (tiny and demo run to the end), the summary separates the syncs
# avoided against DiLoCo at H_base from the bytes the codec saved, the run
# ends with a sample from the final theta_global (the same text `autoloco
# sample` gives for the command it names), and a corpus that does not fit
# the preset (gpt2-124m on bytes) is refused in one line before any site starts.
set -u
bin=${1:?usage: test_demo.sh path/to/autoloco}
tmp=$(mktemp -d /tmp/al-test-demo.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() {
    echo "ok: $1"
    pass=$((pass + 1))
}
bad() {
    echo "FAIL: $1"
    fail=$((fail + 1))
}

mkdir -p "$tmp/in"
for i in $(seq 1 400); do
    printf 'fortune %d: look before you leap, %d times over\n%%\n' "$i" $((i * 7))
done >"$tmp/in/fort"
"$bin" data prep --format fortune -o "$tmp/data" "$tmp/in" >/dev/null || {
    echo "FAIL: data prep"
    exit 1
}
data=(--train "$tmp/data/train.bin" --val "$tmp/data/val.bin")

# run_demo NAME PRESET BATCH SEQ STEPS
run_demo() {
    local name=$1 preset=$2 batch=$3 seq=$4 steps=$5
    local out
    out=$("$bin" demo --preset "$preset" --sites 2 --workers 1 --steps "$steps" --h-base 10 \
        "${data[@]}" --dir "$tmp/$name" --json 2>&1)
    local rc=$?
    if [[ $rc -ne 0 ]]; then
        bad "demo --preset $preset: exit $rc: $(tail -3 <<<"$out")"
        return
    fi
    ok "demo --preset $preset ran ($steps steps)"
    grep -q "preset $preset (microbatch ${batch}x${seq})" <<<"$out" &&
        ok "microbatch ${batch}x${seq} follows the preset" || bad "microbatch line: $(head -1 <<<"$out")"
    grep -qE "^syncs: [0-9]+ made; DiLoCo at H_base=10 makes [0-9.]+: [0-9.-]+ avoided" <<<"$out" &&
        ok "summary: $(grep '^syncs:' <<<"$out")" || bad "no syncs-avoided line"
    grep -qE "^codec int8\+zstd: [0-9]+ bytes sent for [0-9]+ bytes of fp32 shards: [0-9]+ saved" <<<"$out" &&
        ok "summary: $(grep '^codec' <<<"$out")" || bad "no codec line"
    tail -1 <<<"$out" >"$tmp/$name.json"
    python3 - "$tmp/$name.json" <<'EOF' && ok "JSON: the two savings add up to the saving vs DiLoCo" || bad "JSON savings: $(cat "$tmp/$name.json")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["syncs_avoided"] == o["syncs_diloco_equiv"] - o["syncs"], o
assert o["bytes_saved_by_codec"] == o["bytes_raw"] - o["bytes_sent"] > 0, o
# DiLoCo's bytes = (syncs avoided + syncs made) x fp32 bytes per sync; the raw
# bytes are the syncs made at the same price
per_sync = o["bytes_raw"] / o["syncs"]
assert abs(o["bytes_diloco_equiv"] - o["syncs_diloco_equiv"] * per_sync) <= 1e-6 * o["bytes_diloco_equiv"], o
total = o["bytes_diloco_equiv"] - o["bytes_sent"]
assert abs(o["savings_vs_diloco"] * o["bytes_diloco_equiv"] - total) <= 1e-6 * total, o
assert isinstance(o["sample"], str) and o["sample"], o
EOF
    grep -q "^sample from the final theta_global (autoloco sample --ckpt $tmp/$name/site-a --temperature 0.8 --seed 1337):" <<<"$out" &&
        ok "the demo prints a sample" || bad "no sample line"
    local want got
    want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sample"])' "$tmp/$name.json")
    got=$("$bin" sample --ckpt "$tmp/$name/site-a" --temperature 0.8 --seed 1337 --tokens $((seq - 1 < 160 ? seq - 1 : 160)) --json 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["text"])')
    [[ -n $want && $want == "$got" ]] && ok "autoloco sample on site a's theta_global gives the demo's text" ||
        bad "sample '$got' vs demo '$want'"
}

run_demo tiny tiny 64 32 60
run_demo demo demo 16 128 30

# bad input: one line, before any site starts
expect() {
    local pat=$1
    shift
    local err rc
    err=$("$bin" "$@" 2>&1 >/dev/null)
    rc=$?
    if [[ $rc -eq 1 && $(grep -c . <<<"$err") -eq 1 && $err =~ ^autoloco:\ error: ]] && grep -qE -- "$pat" <<<"$err"; then
        ok "autoloco $* -> $err"
    else
        bad "autoloco $* -> exit $rc: $err"
    fi
}
expect "preset 'gpt2-124m' reads a vocabulary of 50257 tokens, .*train.bin has 257 \(give GPT-2 token files with --train and --val\)" \
    demo --preset gpt2-124m "${data[@]}" --dir "$tmp/g"
[[ ! -e $tmp/g/site-a.log ]] && ok "no site started for gpt2-124m" || bad "a site started"
expect "unknown model preset 'huge'" demo --preset huge "${data[@]}" --dir "$tmp/h"
expect "--train and --val go together" demo --train "$tmp/data/train.bin" --dir "$tmp/h"

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
