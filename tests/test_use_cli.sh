#!/usr/bin/env bash
# test_use_cli.sh AUTOLOCO -- sample, eval, export and import from the command
# line: help, a seeded sample that repeats, eval equal to what train printed,
# export -> import bit-identical, and every bad input ending with exit status 1
# and one line "autoloco: error: ..." naming the problem.
set -u
bin=${1:?usage: test_use_cli.sh path/to/autoloco}
tmp=$(mktemp -d /tmp/al-test-use-cli.XXXXXX)
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

# expect STATUS PATTERN -- ARGS...: run autoloco, check status and stderr
expect() {
    local want=$1 pat=$2
    shift 3
    local err rc lines
    err=$("$bin" "$@" 2>&1 >/dev/null)
    rc=$?
    lines=$(printf '%s\n' "$err" | grep -c .)
    if [[ $rc -ne $want ]]; then
        bad "autoloco $* -> exit $rc, want $want; stderr: $err"
    elif [[ $want -eq 1 && ($lines -ne 1 || ! $err =~ ^autoloco:\ error:) ]]; then
        bad "autoloco $* -> not one error line: $err"
    elif ! grep -qiE -- "$pat" <<<"$err"; then
        bad "autoloco $* -> stderr lacks /$pat/: $err"
    else
        ok "autoloco $* -> $rc: $(head -c 160 <<<"$err")"
    fi
}

mkdir -p "$tmp/in"
for i in $(seq 1 300); do
    printf 'fortune %d: the early bird gets the worm %d times\n%%\n' "$i" $((i * 3))
done >"$tmp/in/fort"
"$bin" data prep --format fortune -o "$tmp/data" "$tmp/in" >/dev/null || {
    echo "FAIL: data prep"
    exit 1
}
out=$("$bin" train --set model.preset=tiny --set data.train="$tmp/data/train.bin" \
    --set data.val="$tmp/data/val.bin" --set inner.batch=4 --set inner.steps=60 \
    --set inner.warmup=5 --set inner.threads=1 --set checkpoint.dir="$tmp/ck" 2>&1) || {
    echo "FAIL: train: $out"
    exit 1
}
ck=$tmp/ck

# help
for c in sample eval export import; do
    h=$("$bin" $c --help 2>&1)
    if [[ $? -eq 0 && $h == usage:\ autoloco\ $c* ]]; then ok "$c --help"; else bad "$c --help: $h"; fi
done

# sample: seeded runs repeat, another seed differs, text starts with the prompt
s1=$("$bin" sample --ckpt "$ck" --prompt "fortune" --seed 5 --tokens 20 2>/dev/null)
s2=$("$bin" sample --ckpt "$ck" --prompt "fortune" --seed 5 --tokens 20 2>/dev/null)
s3=$("$bin" sample --ckpt "$ck" --prompt "fortune" --seed 6 --tokens 20 2>/dev/null)
[[ -n $s1 && $s1 == "$s2" ]] && ok "sample --seed 5 twice: same text '$s1'" || bad "sample repeat: '$s1' vs '$s2'"
[[ $s1 != "$s3" ]] && ok "sample --seed 6: other text '$s3'" || bad "sample seeds 5 and 6 gave the same text"
[[ $s1 == fortune* ]] && ok "sample prints the prompt, then the continuation" || bad "sample: '$s1'"
speed=$("$bin" sample --ckpt "$ck" --tokens 5 2>&1 >/dev/null)
[[ $speed =~ tokens/s ]] && ok "sample reports speed on stderr: $speed" || bad "sample speed: $speed"
js=$("$bin" sample --ckpt "$ck" --prompt "for" --seed 5 --tokens 8 --json 2>/dev/null)
python3 -c 'import json,sys; o=json.loads(sys.argv[1]); assert o["preset"]=="tiny" and len(o["tokens"])==8 and o["prompt"]=="for", o' "$js" &&
    ok "sample --json: $js" || bad "sample --json: $js"
# a vocabulary file (llm.c's tokenizer format) decodes through its pieces
python3 - "$tmp/vocab.bin" 257 <<'EOF'
import struct, sys
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256I", 20240328, 2, int(sys.argv[2]), 256, *([0] * 252)))
    for i in range(int(sys.argv[2])):
        p = b"<%d>" % i
        f.write(bytes([len(p)]) + p)
EOF
sv=$("$bin" sample --ckpt "$ck" --prompt "f" --seed 5 --tokens 3 --vocab "$tmp/vocab.bin" 2>/dev/null)
[[ $sv =~ ^\<102\>(\<[0-9]+\>){3}$ ]] && ok "sample --vocab: $sv" || bad "sample --vocab: '$sv'"

# eval equals train's final eval (printed with 4 decimals)
want=$(sed -n 's/^eval  step .*val loss \([0-9.]*\)$/\1/p' <<<"$out" | tail -1)
got=$("$bin" eval --ckpt "$ck" --data "$tmp/data/val.bin" --batch 4 --json | python3 -c 'import json,sys; print("%.4f" % json.load(sys.stdin)["loss"])')
[[ -n $want && $want == "$got" ]] && ok "eval = train's eval ($got)" || bad "eval $got, train printed $want"

# export -> import: the same parameters, byte for byte
"$bin" export --format hf --ckpt "$ck" -o "$tmp/hf" >/dev/null || bad "export"
"$bin" import --format hf "$tmp/hf" -o "$tmp/back" >/dev/null || bad "import"
if cmp -s "$ck"/step-*/model.safetensors "$tmp/back/step-00000000/model.safetensors"; then
    ok "export -> import: model.safetensors byte-identical"
else
    bad "export -> import differs"
fi
s4=$("$bin" sample --ckpt "$tmp/back" --prompt "fortune" --seed 5 --tokens 20 2>/dev/null)
[[ $s4 == "$s1" ]] && ok "the imported checkpoint samples the same text" || bad "imported sample '$s4'"

# bad input
expect 1 "--ckpt PATH is required" -- sample
expect 1 "no checkpoint .step-.. in" -- sample --ckpt "$tmp"
expect 1 "longer than the model's context \(T = 32\)" -- sample --ckpt "$ck" --prompt "$(printf 'x%.0s' $(seq 1 40))"
expect 1 "--temperature: -1 is out of range" -- sample --ckpt "$ck" --temperature -1
expect 1 "--theta: unknown value 'both'" -- sample --ckpt "$ck" --theta both
expect 1 "no theta_global .outer.bin.: not an agent's checkpoint" -- sample --ckpt "$ck" --theta global
expect 1 "vocabulary 50257, the model has 257" -- sample --ckpt "$ck" --vocab <(python3 -c 'import struct,sys; sys.stdout.buffer.write(struct.pack("<256I",20240328,2,50257,50256,*([0]*252)))')
expect 1 "not an llm.c tokenizer file" -- sample --ckpt "$ck" --vocab "$tmp/data/val.bin"
expect 2 "usage" -- sample --bogus
expect 1 "--data FILE.bin are required" -- eval --ckpt "$ck"
expect 1 "nothing.bin.*cannot open" -- eval --ckpt "$ck" --data "$tmp/nothing.bin"
# a GPT-2 token file (llm.c header: vocabulary 0 = 50257) for a byte model
python3 -c 'import struct,sys; sys.stdout.buffer.write(struct.pack("<256i",20240520,1,64,*([0]*253)) + struct.pack("<64H",*([50256]*64)))' >"$tmp/gpt2.bin"
expect 1 "vocabulary 50257.*expects 257" -- eval --ckpt "$ck" --data "$tmp/gpt2.bin"
expect 1 "unknown packing 'rows'" -- eval --ckpt "$ck" --data "$tmp/data/val.bin" --packing rows
expect 1 "--format: unknown format 'onnx' \(known: hf\)" -- export --format onnx --ckpt "$ck" -o "$tmp/x"
expect 1 "--format is required" -- export --ckpt "$ck" -o "$tmp/x"
expect 1 "--format: unknown format 'gguf'" -- import --format gguf "$tmp/hf" -o "$tmp/x"
expect 1 "a model of preset 'tiny', not 'demo'" -- import --format hf "$tmp/hf" -o "$tmp/x" --preset demo
# a checkpoint whose manifest names another preset than its tensors
cp -r "$ck" "$tmp/ckdemo"
sed -i 's/"preset": "tiny"/"preset": "demo"/' "$tmp"/ckdemo/step-*/manifest.json
expect 1 "manifest says preset 'demo' with [0-9]+ parameters, but 'demo' has 454144" -- sample --ckpt "$tmp/ckdemo"
# a config of no preset, a missing tensor, a wrong dtype, a truncated file
cp -r "$tmp/hf" "$tmp/hf3"
sed -i 's/"n_layer": 2/"n_layer": 3/' "$tmp/hf3/config.json"
expect 1 "n_layer 3, n_embd 32.*match no preset" -- import --format hf "$tmp/hf3" -o "$tmp/x"
cp -r "$tmp/hf" "$tmp/hfm"
LC_ALL=C sed -i 's/transformer.h.1.ln_2.bias/transformer.h.1.ln_2.biaX/' "$tmp/hfm/model.safetensors"
expect 1 "tensor 'transformer.h.1.ln_2.bias' is missing" -- import --format hf "$tmp/hfm" -o "$tmp/x"
cp -r "$tmp/hf" "$tmp/hfd"
LC_ALL=C sed -i 's/"dtype":"F32","shape":\[32\]}/"dtype":"F16","shape":[32]}/' "$tmp/hfd/model.safetensors"
expect 1 "is F16 \[32\], expected F32 \[32\]" -- import --format hf "$tmp/hfd" -o "$tmp/x"
cp -r "$tmp/hf" "$tmp/hft"
head -c 6 "$tmp/hf/model.safetensors" >"$tmp/hft/model.safetensors"
expect 1 "truncated safetensors header" -- import --format hf "$tmp/hft" -o "$tmp/x"
cp -r "$tmp/hf" "$tmp/hfg"
sed -i 's/"model_type": "gpt2"/"model_type": "llama"/' "$tmp/hfg/config.json"
expect 1 "model_type 'llama', only 'gpt2'" -- import --format hf "$tmp/hfg" -o "$tmp/x"
expect 1 "config.json: unreadable" -- import --format hf "$tmp/nothing" -o "$tmp/x"

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
