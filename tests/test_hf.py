#!/usr/bin/python3
"""test_hf.py AUTOLOCO [torch|transformers|gpt2 TOKENIZER_DIR] -- the Hugging
Face export, checked by code that is not the project's.

Trains a tiny model for a few steps, exports it with `autoloco export --format
hf`, then
  torch:        reads config.json and model.safetensors by hand (the format's
                published layout: u64 header length, JSON header, raw data)
                and runs GPT-2 as Hugging Face's GPT2LMHeadModel documents it
                (Conv1D weights [in, out]: y = x W + b; tanh GELU; LayerNorm
                eps from the config; lm_head tied to wte) in PyTorch;
  transformers: loads the folder with GPT2LMHeadModel.from_pretrained
                (skipped, exit 77, where `transformers` cannot be imported).
  gpt2:         the torch check on a GPT-2-vocabulary model (preset
                tiny-gpt2) trained on text that `data prep --tokenizer gpt2`
                encoded with GPT-2's BPE from TOKENIZER_DIR; the export must
                also hold the tokenizer (vocab.json and merges.txt equal to
                GPT-2's files as tiktoken reads them, the tokenizer config).
Each must give `autoloco eval --packing stream`'s loss to 1e-5 relative.

Why stream packing: autoloco's docs packing restarts positions at every
document and masks attention across documents, which a stock GPT-2 does not
do. Stream packing evaluates fixed windows of the token stream (row k = tokens
[k*T, k*T + T), targets shifted by one, positions 0..T-1, plain causal
attention): exactly what GPT-2 computes for a window. Run with /usr/bin/python3
(Debian's python3-torch)."""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)

autoloco = os.path.abspath(sys.argv[1])
mode = sys.argv[2] if len(sys.argv) > 2 else "torch"
gpt2 = mode == "gpt2"
if gpt2:
    tokdir = sys.argv[3]
    if not os.path.isfile(os.path.join(tokdir, "encoder.json")):
        skip(f"{tokdir}/encoder.json is missing: tools/setup fetches it (npm ci in tools/npm)")
try:
    import torch
except ImportError as e:
    skip(f"python3-torch is not importable ({e}); apt-get install python3-torch, run /usr/bin/python3")
if mode == "transformers":
    try:
        import transformers
    except ImportError as e:
        skip(f"the transformers package is not importable ({e}): Debian 12 does not package it")

tmp = tempfile.mkdtemp(prefix="al-test-hf.")
failed = 0

def check(ok, what):
    global failed
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    failed += 0 if ok else 1

def run(*args):
    r = subprocess.run([autoloco, *args], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL: autoloco {' '.join(args)}: {r.stderr.strip()}")
        shutil.rmtree(tmp, ignore_errors=True)
        sys.exit(1)
    return r.stdout

B, T = (2, 64) if gpt2 else (3, 32)  # tiny: T = 32; tiny-gpt2: T = 64
V = 50257 if gpt2 else 257
try:
    os.makedirs(f"{tmp}/in")
    with open(f"{tmp}/in/fort", "w") as f:
        for i in range(300):
            f.write(f"fortune {i}: a stitch in time saves {i * 9 % 97} and the cat sat\n%\n")
    tok = ["--tokenizer", "gpt2", "--set", f"data.tokenizer_dir={tokdir}"] if gpt2 else []
    run("data", "prep", "--format", "fortune", "-o", f"{tmp}/data", *tok, f"{tmp}/in")
    run("train", "--set", f"model.preset={'tiny-gpt2' if gpt2 else 'tiny'}", "--set",
        f"data.train={tmp}/data/train.bin", "--set", f"data.val={tmp}/data/val.bin", "--set",
        f"inner.batch={2 if gpt2 else 4}", "--set", f"inner.steps={25 if gpt2 else 40}", "--set",
        "inner.warmup=5", "--set", "inner.threads=1", "--set", "inner.eval_every=0", "--set",
        f"checkpoint.dir={tmp}/ck")
    run("export", "--format", "hf", "--ckpt", f"{tmp}/ck", "-o", f"{tmp}/hf",
        *(["--set", f"data.tokenizer_dir={tokdir}"] if gpt2 else []))
    if gpt2:
        # the tokenizer beside the weights: GPT-2's own files, under Hugging Face's names
        vocab = json.load(open(f"{tmp}/hf/vocab.json", encoding="utf-8"))
        check(vocab == json.load(open(f"{tokdir}/encoder.json", encoding="utf-8")),
              f"vocab.json is GPT-2's encoder.json ({len(vocab)} tokens)")
        merges = open(f"{tmp}/hf/merges.txt", encoding="utf-8").read()
        check(merges == open(f"{tokdir}/vocab.bpe", encoding="utf-8").read(),
              f"merges.txt is GPT-2's vocab.bpe ({merges.count(chr(10)) - 1} merges)")
        tc = json.load(open(f"{tmp}/hf/tokenizer_config.json"))
        check(tc.get("tokenizer_class") == "GPT2Tokenizer" and tc.get("eos_token") == "<|endoftext|>"
              and tc.get("model_max_length") == T, f"tokenizer_config.json: {tc}")
    data = f"{tmp}/data/train.bin"
    # GPT-2's vocabulary: 4 microbatches (their logits are 50257 wide)
    nb = ["--batches", "4"] if gpt2 else []
    got = json.loads(run("eval", "--ckpt", f"{tmp}/ck", "--data", data, "--packing", "stream",
                         "--batch", str(B), "--seq", str(T), *nb, "--json").strip().splitlines()[-1])
    want_loss = got["loss"]

    # the token file (llm.c format): 256 int32 header, then uint16 tokens
    raw = open(data, "rb").read()
    hdr = struct.unpack("<256i", raw[:1024])
    assert hdr[0] == 20240520 and hdr[1] == 1, "not a token file"
    toks = torch.frombuffer(bytearray(raw[1024:1024 + 2 * hdr[2]]), dtype=torch.int16)
    toks = toks.to(torch.int64) & 0xFFFF
    batches = max(1, (len(toks) - 1) // (B * T))
    if gpt2:
        batches = min(batches, 4)
    rows = batches * B
    x = torch.stack([toks[k * T:k * T + T] for k in range(rows)])
    y = torch.stack([toks[k * T + 1:k * T + T + 1] for k in range(rows)])

    if mode in ("torch", "gpt2"):
        cfg = json.load(open(f"{tmp}/hf/config.json"))
        check(cfg["model_type"] == "gpt2" and cfg["n_positions"] == T and cfg["vocab_size"] == V,
              f"config.json: gpt2, n_positions {cfg['n_positions']}, vocab_size {cfg['vocab_size']}")
        blob = open(f"{tmp}/hf/model.safetensors", "rb").read()
        (hl,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + hl])
        check(header.get("__metadata__", {}).get("format") == "pt", "safetensors metadata format pt")
        W = {}
        for name, e in header.items():
            if name == "__metadata__":
                continue
            b, en = e["data_offsets"]
            assert e["dtype"] == "F32"
            W[name] = torch.frombuffer(bytearray(blob[8 + hl + b:8 + hl + en]),
                                       dtype=torch.float32).reshape(e["shape"])
        C, L, NH = cfg["n_embd"], cfg["n_layer"], cfg["n_head"]
        eps = cfg["layer_norm_epsilon"]
        check(W["transformer.wte.weight"].shape == (V, C), "wte cut back to the vocabulary")
        check(W["transformer.h.0.attn.c_attn.weight"].shape == (C, 3 * C)
              and W["transformer.h.0.mlp.c_proj.weight"].shape == (4 * C, C),
              "Conv1D weights stored [in, out]")
        check("lm_head.weight" not in W, "lm_head tied (not stored)")

        def ln(h, p):
            return torch.nn.functional.layer_norm(h, (C,), W[p + ".weight"], W[p + ".bias"], eps)

        def conv1d(h, p):
            return h @ W[p + ".weight"] + W[p + ".bias"]

        def gelu_new(h):
            return 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))

        with torch.no_grad():
            h = W["transformer.wte.weight"][x] + W["transformer.wpe.weight"][torch.arange(T)]
            mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
            hs = C // NH
            for i in range(L):
                p = f"transformer.h.{i}"
                q, k, v = conv1d(ln(h, p + ".ln_1"), p + ".attn.c_attn").split(C, dim=2)
                q, k, v = (t.view(rows, T, NH, hs).transpose(1, 2) for t in (q, k, v))
                att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
                att = att.masked_fill(~mask, float("-inf")).softmax(-1)
                a = (att @ v).transpose(1, 2).reshape(rows, T, C)
                h = h + conv1d(a, p + ".attn.c_proj")
                m = gelu_new(conv1d(ln(h, p + ".ln_2"), p + ".mlp.c_fc"))
                h = h + conv1d(m, p + ".mlp.c_proj")
            logits = ln(h, "transformer.ln_f") @ W["transformer.wte.weight"].T
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1)).item()
        what = "a GPT-2 written from the Hugging Face layout"
    else:
        model = transformers.GPT2LMHeadModel.from_pretrained(f"{tmp}/hf")
        model.eval()
        with torch.no_grad():
            logits = model(x).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     y.reshape(-1)).item()
        what = "transformers' GPT2LMHeadModel.from_pretrained"
    rel = abs(loss - want_loss) / abs(want_loss)
    check(rel <= 1e-5, f"{what}: loss {loss:.7f} over {rows} windows of {T}; autoloco eval "
          f"{want_loss:.7f} (relative difference {rel:.2e}, at most 1e-5)")
    # and it is a trained model, not a uniform one (ln 257 = 5.55, ln 50257 = 10.8)
    bound = 9.0 if gpt2 else 5.0
    check(want_loss < bound, f"the model learned something (loss {want_loss:.3f} < {bound})")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
sys.exit(1 if failed else 0)
