#!/usr/bin/env bash
# test_tokenizer_cli.sh AUTOLOCO TOKENIZER_DIR -- GPT-2's text path from the
# command line (issue 35):
#   data prep --tokenizer gpt2 -> train (preset tiny-gpt2) -> sample prints
#   text -> export --format hf (with the tokenizer) -> import -> export again:
#   every file byte-identical, and sample of the import prints the same text
#   without any configuration (the checkpoint carries its tokenizer);
# and bad input, each a documented behaviour or one clear error line:
#   invalid UTF-8 and NUL bytes encode (GPT-2 encodes any bytes) and decode
#   back; a 100 MB single line encodes (in pieces, on several threads) to
#   its sentence's ids repeated; an empty file is refused (no documents); a
#   missing or corrupted vocabulary is refused naming the file.
# SKIP (77) without tools/setup's GPT-2 files.
set -u
bin=$(realpath "${1:?usage: test_tokenizer_cli.sh path/to/autoloco TOKENIZER_DIR}")
tokdir=${2:?usage: test_tokenizer_cli.sh path/to/autoloco TOKENIZER_DIR}
[[ -f $tokdir/encoder.json ]] || {
    echo "SKIP: $tokdir/encoder.json is missing: tools/setup fetches it (npm ci in tools/npm)"
    exit 77
}
tmp=$(mktemp -d /tmp/al-test-tokenizer-cli.XXXXXX)
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
tok=(--set "data.tokenizer_dir=$tokdir")

# expect STATUS PATTERN -- ARGS...: exit status, one "autoloco: error:" line
expect() {
    local want=$1 pat=$2
    shift 3
    local err rc
    err=$("$bin" "$@" 2>&1 >/dev/null)
    rc=$?
    if [[ $rc -ne $want ]]; then
        bad "autoloco $* -> exit $rc, want $want; stderr: $err"
    elif [[ $(grep -c . <<<"$err") -ne 1 || ! $err =~ ^autoloco:\ error: ]]; then
        bad "autoloco $* -> not one error line: $err"
    elif ! grep -qiE -- "$pat" <<<"$err"; then
        bad "autoloco $* -> stderr lacks /$pat/: $err"
    else
        ok "autoloco ${*:1:3}... -> $rc: $(head -c 200 <<<"$err")"
    fi
}

# ---- the text path end to end
mkdir -p "$tmp/in"
for i in $(seq 1 300); do
    printf 'Fortune %d: the early bird gets the worm, %d times. Café, naïve!\n%%\n' "$i" $((i * 3))
done >"$tmp/in/fort"
out=$("$bin" data prep --format fortune --tokenizer gpt2 "${tok[@]}" -o "$tmp/data" "$tmp/in" 2>&1)
[[ $? -eq 0 && $out == *"gpt2 tokenizer:"*MB/s* ]] && ok "data prep --tokenizer gpt2: $(grep gpt2 <<<"$out")" ||
    bad "data prep --tokenizer gpt2: $out"
hdr=$(python3 -c 'import struct,sys; print(*struct.unpack("<5i",open(sys.argv[1],"rb").read(20)))' "$tmp/data/train.bin")
[[ $hdr == "20240520 1 "*" 50257 50256" ]] && ok "train.bin: llm.c header, vocabulary 50257, EOT 50256 ($hdr)" ||
    bad "train.bin header: $hdr"
out=$("$bin" train --set model.preset=tiny-gpt2 --set data.train="$tmp/data/train.bin" \
    --set data.val="$tmp/data/val.bin" --set inner.batch=2 --set inner.steps=20 \
    --set inner.warmup=5 --set inner.threads=1 --set inner.eval_every=0 \
    --set checkpoint.dir="$tmp/ck" 2>&1) || {
    echo "FAIL: train: $out"
    exit 1
}
s1=$("$bin" sample --ckpt "$tmp/ck" "${tok[@]}" --prompt "Fortune 7:" --seed 3 --tokens 12 2>/dev/null)
[[ $s1 == "Fortune 7:"* && ! $s1 =~ ^[0-9\ ]+$ ]] && ok "sample prints text: '$s1'" || bad "sample: '$s1'"
js=$("$bin" sample --ckpt "$tmp/ck" "${tok[@]}" --prompt "Fortune 7:" --seed 3 --tokens 12 --json 2>/dev/null)
python3 -c 'import json,sys; o=json.loads(sys.argv[1]); assert o["prompt"]=="Fortune 7:" and 1 <= len(o["tokens"]) <= 12 and o["text"], o' "$js" &&
    ok "sample --json: the prompt and the continuation as text" || bad "sample --json: $js"
"$bin" export --format hf --ckpt "$tmp/ck" -o "$tmp/hf" "${tok[@]}" >/dev/null &&
    "$bin" import --format hf "$tmp/hf" -o "$tmp/ck2" >/dev/null &&
    "$bin" export --format hf --ckpt "$tmp/ck2" -o "$tmp/hf2" >/dev/null || bad "export -> import -> export"
for f in config.json model.safetensors vocab.json merges.txt tokenizer_config.json special_tokens_map.json; do
    if [[ -f $tmp/hf/$f ]] && cmp -s "$tmp/hf/$f" "$tmp/hf2/$f"; then
        ok "export -> import -> export: $f byte-identical"
    else
        bad "export -> import -> export: $f differs or is missing"
    fi
done
cmp -s "$tmp"/ck/step-*/model.safetensors "$tmp"/ck2/step-*/model.safetensors &&
    ok "the imported checkpoint's parameters are the trained ones, byte for byte" || bad "checkpoint differs"
# the import carries its tokenizer: the configured folder (here none) is not needed
s2=$("$bin" sample --ckpt "$tmp/ck2" --set data.tokenizer_dir="$tmp/nowhere" --prompt "Fortune 7:" --seed 3 --tokens 12 2>/dev/null)
[[ $s2 == "$s1" ]] && ok "sample of the import, with its own tokenizer: the same text" || bad "sample of the import: '$s2' vs '$s1'"
# no tokenizer anywhere (the default folder, relative, absent here): ids, and a note why
s3=$(cd "$tmp" && "$bin" sample --ckpt "$tmp/ck" --tokens 5 --seed 3 2>"$tmp/note")
[[ $s3 =~ ^[0-9\ ]+$ ]] && grep -q "printing token ids" "$tmp/note" && ok "no tokenizer: ids ('$s3'); $(head -c 100 "$tmp/note")" ||
    bad "no tokenizer: '$s3' $(cat "$tmp/note")"
expect 1 "tokenizer_dir.*no encoder.json" -- export --format hf --ckpt "$tmp/ck" -o "$tmp/hf3" --set data.tokenizer_dir="$tmp/nowhere"

# ---- bad input
# invalid UTF-8, NUL bytes, a lone continuation byte, <|endoftext|> as text: encoded, decoded back
printf 'caf\xc3\xa9 \xff\xfe broken \xe2\x82 utf-8\n\nnul \x00 inside\x00\n\nthe <|endoftext|> text\n\n\x80\x80\x80' >"$tmp/odd.txt"
cat >"$tmp/decode.py" <<'PY'
import json, struct, sys
out, src, vj = sys.argv[1:4]
vocab = json.load(open(vj, encoding="utf-8"))
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, k = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + k); k += 1
dec = {chr(c): b for b, c in zip(bs, cs)}
inv = {i: t for t, i in vocab.items()}
docs = []
for split in ["train", "val"]:
    b = open(f"{out}/{split}.bin", "rb").read()
    n = struct.unpack("<i", b[8:12])[0]
    cur = None
    for t in struct.unpack(f"<{n}H", b[1024:1024 + 2 * n]):
        if t == 50256:
            if cur is not None:
                docs.append(cur)
            cur = b""
        else:
            cur += bytes(dec[ch] for ch in inv[t])
want = [d.strip(b" \t\r\n") for d in open(src, "rb").read().split(b"\n\n")]
assert sorted(docs) == sorted(want), (docs, want)
print(f"{len(docs)} documents decoded back")
PY
"$bin" data prep --format text --tokenizer gpt2 "${tok[@]}" --val-frac 0.5 -o "$tmp/odd" "$tmp/odd.txt" >/dev/null 2>&1 &&
    python3 "$tmp/decode.py" "$tmp/odd" "$tmp/odd.txt" "$tmp/hf/vocab.json" &&
    ok "invalid UTF-8 and NUL bytes: encoded, decoded back byte for byte; <|endoftext|> as text is not EOT" ||
    bad "invalid UTF-8 / NUL bytes"
# a 100 MB single line: encoded in ~1 MB pieces by two threads; its ids are its sentence's repeated
{ yes "the quick brown fox jumps over the lazy dog, isn't it? 42 times" | tr '\n' ' ' | head -c 100000000; printf '\n\nend\n'; } >"$tmp/big.txt"
t0=$(date +%s%N)
out=$("$bin" data prep --format text --tokenizer gpt2 "${tok[@]}" --val-frac 0.5 --threads 2 -o "$tmp/big" "$tmp/big.txt" 2>&1)
rc=$?
secs=$((($(date +%s%N) - t0) / 1000000))
rm -f "$tmp/big.txt"
printf 'the quick brown fox jumps over the lazy dog, isn'"'"'t it? 42 times\n\nend\n' >"$tmp/small.txt"
"$bin" data prep --format text --tokenizer gpt2 "${tok[@]}" --val-frac 0.5 -o "$tmp/small" "$tmp/small.txt" >/dev/null 2>&1
cat >"$tmp/big.py" <<'PY'
import struct, sys
def toks(p):
    b = open(p, "rb").read()
    n = struct.unpack("<i", b[8:12])[0]
    return struct.unpack(f"<{n}H", b[1024:1024 + 2 * n])
big = max((toks(f"{sys.argv[1]}/{s}.bin") for s in ["train", "val"]), key=len)
small = max((toks(f"{sys.argv[2]}/{s}.bin") for s in ["train", "val"]), key=len)
sent = small[1:-1]  # the 64-byte sentence alone: 16 tokens
assert len(sent) == 16, sent
body = big[1:-1]  # "<sentence> <sentence> ...": the first, then " the ..." repeated
assert body[:15] == sent[:15], (body[:20], sent)
period = body[15:31]
assert all(body[i] == period[(i - 15) % 16] for i in range(15, len(body) - 32)), "not periodic"
assert len(body) >= 1_562_000 * 16, len(body)
print(f"{len(body)} tokens, periodic")
PY
res=$(python3 "$tmp/big.py" "$tmp/big" "$tmp/small" 2>&1)
[[ $rc -eq 0 && $res == *periodic ]] &&
    ok "a 100 MB single line: $res, in $secs ms; $(grep -o 'gpt2 tokenizer.*' <<<"$out")" ||
    bad "a 100 MB single line: exit $rc, $out; $res"
rm -rf "$tmp/big"
# an empty file, and one of blank lines: no documents
: >"$tmp/empty.txt"
expect 1 "found 0 documents" -- data prep --format text --tokenizer gpt2 "${tok[@]}" -o "$tmp/e" "$tmp/empty.txt"
printf '\n\n  \n\t\n' >"$tmp/blank.txt"
expect 1 "found 0 documents" -- data prep --format text --tokenizer gpt2 "${tok[@]}" -o "$tmp/e" "$tmp/blank.txt"
# invalid UTF-8 in JSONL is invalid JSON: refused naming the line
printf '{"text": "fine"}\n{"text": "caf\xe9"}\n' >"$tmp/bad.jsonl"
expect 1 "bad.jsonl:2:.*(UTF-8|JSON)" -- data prep --format jsonl --tokenizer gpt2 "${tok[@]}" -o "$tmp/e" "$tmp/bad.jsonl"
# a missing or corrupted vocabulary
expect 1 "tokenizer_dir.*no encoder.json" -- data prep --format text --tokenizer gpt2 --set data.tokenizer_dir="$tmp/nowhere" -o "$tmp/e" "$tmp/odd.txt"
mkdir -p "$tmp/corrupt"
head -c 300000 "$tokdir/encoder.json" >"$tmp/corrupt/encoder.json"
cp "$tokdir/vocab.bpe" "$tmp/corrupt/"
expect 1 "encoder.json.*not JSON" -- data prep --format text --tokenizer gpt2 --set data.tokenizer_dir="$tmp/corrupt" -o "$tmp/e" "$tmp/odd.txt"
cp "$tokdir/encoder.json" "$tmp/corrupt/"
head -c 200000 "$tokdir/vocab.bpe" >"$tmp/corrupt/vocab.bpe"
printf '\nzz qq\n' >>"$tmp/corrupt/vocab.bpe"
expect 1 "vocab.bpe:[0-9]+:.*not two tokens" -- data prep --format text --tokenizer gpt2 --set data.tokenizer_dir="$tmp/corrupt" -o "$tmp/e" "$tmp/odd.txt"
expect 1 "unknown tokenizer" -- data prep --format text --tokenizer gpt3 -o "$tmp/e" "$tmp/odd.txt"
# a corrupted tokenizer in a folder to import
cp -r "$tmp/hf" "$tmp/hfbad"
printf '{"a": 0}' >"$tmp/hfbad/vocab.json"
expect 1 "import.*vocab.json" -- import --format hf "$tmp/hfbad" -o "$tmp/ck3"

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
