#!/usr/bin/env python3
"""test_sweep.py SWEEP -- the arithmetic behind tools/sweep's verdict (issues 12,
33): the front's envelope, its loss at a number of syncs and the syncs it needs
for a loss (both linear in log syncs, extended beyond the best point when asked),
the saving, the per-seed paired difference, the saving against the DiLoCo-only
front with its per-seed spread and bootstrap, the gap in standard deviations,
and the ceiling's search, against values computed by hand on fabricated
records; plus resuming (a run already in the raw file is not repeated), the
configurations that run in some scenarios only, the languages scenario's data,
and a whole `--ceiling` search, with stand-in binaries that count their calls.
"""
import importlib.machinery
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile

SWEEP = os.path.abspath(sys.argv[1])
loader = importlib.machinery.SourceFileLoader("sweep", SWEEP)
spec = importlib.util.spec_from_loader("sweep", loader)
sw = importlib.util.module_from_spec(spec)
loader.exec_module(sw)

passed = failed = 0


def check(what, cond, detail=""):
    global passed, failed
    print(("ok: " if cond else "FAIL: ") + what + (f"  [{detail}]" if detail else ""))
    if cond:
        passed += 1
    else:
        failed += 1


def near(a, b, tol=1e-9):
    return a is not None and b is not None and abs(a - b) <= tol


# The envelope keeps a point only if it beats every point with fewer syncs:
# (12, 1.90) (30, 1.875) (60, 1.805) (120, 1.766), and (75, 1.85) is dominated
# by (60, 1.805); of two points at 30 syncs the better one stays.
env = sw.envelope([(75, 1.85), (12, 1.90), (30, 1.88), (60, 1.805), (120, 1.766), (30, 1.875)])
check("envelope drops dominated points and keeps the best at equal syncs",
      env == [(12, 1.90), (30, 1.875), (60, 1.805), (120, 1.766)], str(env))

# Between (30, 1.875) and (60, 1.805), at 40 syncs: t = ln(40/30)/ln 2 = 0.415037,
# loss 1.875 − 0.07·t = 1.8459474
t = math.log(40 / 30) / math.log(2)
check("front loss at 40 syncs, linear in log syncs", near(sw.front_loss_at(env, 40), 1.875 - 0.07 * t),
      str(sw.front_loss_at(env, 40)))
check("front loss below its fewest syncs is undefined", sw.front_loss_at(env, 10) is None)
check("front loss beyond its most syncs is its best", near(sw.front_loss_at(env, 500), 1.766))
check("front loss at a point is the point", near(sw.front_loss_at(env, 60), 1.805))

# The syncs for loss 1.84: between 30 and 60, t = (1.875 − 1.84)/0.07 = 0.5,
# syncs = 30·2^0.5 = 42.426; a rule reaching 1.84 with 30 syncs saves 1 − 30/42.426
s = sw.front_syncs_at(env, 1.84)
check("front syncs for 1.84 = 30·sqrt(2)", near(s, 30 * math.sqrt(2)), str(s))
check("saving 29.3%", near(1 - 30 / s, 1 - 1 / math.sqrt(2)))
check("a loss no fixed H reaches has no front syncs", sw.front_syncs_at(env, 1.7) is None)
check("a loss worse than the fewest-syncs point needs that many",
      near(sw.front_syncs_at(env, 1.95), 12))

# versus_front and its paired difference, on records of two report seeds.
def rec(tag, seed, syncs, loss, report=True, scenario="iid"):
    return {"tag": tag, "seed": seed, "syncs": syncs, "final_eval_loss": loss, "report": report,
            "scenario": scenario, "bytes": 1.0, "projected_100m_s": 1.0, "cmd": "x"}


runs = [rec("diloco-100", 1, 30, 1.88), rec("diloco-100", 2, 30, 1.87),
        rec("diloco-50", 1, 60, 1.81), rec("diloco-50", 2, 60, 1.80),
        rec("autoloco", 1, 30, 1.85), rec("autoloco", 2, 30, 1.83),
        rec("autoloco", 101, 10, 9.9, report=False)]  # a tuning record: never counted
v = sw.versus_front(runs, "iid", "autoloco")
check("tuning records stay out of the summary", v["s"]["n"] == 2 and v["s"]["seeds"] == [1, 2])
# mean front (30, 1.875) (60, 1.805); autoloco mean 1.84 at 30 syncs → as above
check("saving against the mean front", near(v["saving"], 1 - 1 / math.sqrt(2), 1e-9), str(v["saving"]))
# paired: seed 1 front at 30 is 1.88 → −0.03; seed 2: 1.87 → −0.04; mean −0.035, std 0.00707
check("paired difference to each seed's own front",
      near(v["paired"][0], -0.035, 1e-12) and near(v["paired"][1], math.sqrt(0.00005), 1e-12),
      str(v["paired"]))

# Resuming: a stand-in binary that appends a line to a log per call and prints
# a sim-like JSON line; a second sweep over the same raw file runs nothing new.
with tempfile.TemporaryDirectory() as tmp:
    fake = os.path.join(tmp, "autoloco")
    calls = os.path.join(tmp, "calls")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\necho \"$*\" >> " + calls + "\n"
                "echo '{\"scenario\":\"iid\",\"preset\":\"demo\",\"policy\":\"fixed\","
                "\"correction\":\"none\",\"syncs\":30,\"final_eval_loss\":1.9,\"h_history\":[100],"
                "\"bytes\":1,\"projected_100m_s\":1}'\n")
    os.chmod(fake, 0o755)
    raw = os.path.join(tmp, "raw.jsonl")
    args = [sys.executable, SWEEP, "--bin", fake, "--raw", raw, "--out", os.path.join(tmp, "r.md"),
            "--seeds", "101", "--scenarios", "iid", "--only", "diloco-100,diloco-50", "--jobs", "1"]
    p1 = subprocess.run(args, capture_output=True, text=True)
    n1 = len(open(calls).read().splitlines()) if os.path.exists(calls) else 0
    p2 = subprocess.run(args, capture_output=True, text=True)
    n2 = len(open(calls).read().splitlines())
    lines = [json.loads(x) for x in open(raw)]
    check("first sweep ran both configurations", p1.returncode == 0 and n1 == 2, p1.stderr[-300:])
    check("second sweep resumed: nothing run again", p2.returncode == 0 and n2 == 2)
    check("records carry tag, seed, report: false, commit",
          all(r["seed"] == 101 and r["report"] is False and r["commit"] and r["tag"] for r in lines))
    bad = subprocess.run(args[:-6] + ["--seeds", "1"], capture_output=True, text=True)
    check("report seeds refused without --report-seeds", bad.returncode != 0 and
          "report seeds" in bad.stderr, bad.stderr.strip())

# ---- issue 33 ----------------------------------------------------------------------------

# Beyond the best point, asked to: the last segment (60, 1.805)-(120, 1.766) goes on in log
# syncs: loss 1.75 needs 120·2^((1.766 − 1.75)/0.039) syncs
check("front syncs extrapolated beyond the best point",
      near(sw.front_syncs_at(env, 1.75, extrapolate=True), 120 * 2 ** (0.016 / 0.039)),
      str(sw.front_syncs_at(env, 1.75, extrapolate=True)))
check("without extrapolate, still None", sw.front_syncs_at(env, 1.75) is None)
v, ext = sw.saving_at(env, 60, 1.75)
check("saving_at flags the extrapolation", ext and near(v, 1 - 60 / (120 * 2 ** (0.016 / 0.039))))
v, ext = sw.saving_at(env, 30, 1.84)
check("saving_at inside the front", not ext and near(v, 1 - 1 / math.sqrt(2)))

# The DiLoCo-only front ignores the corrected fixed H. Seeds 1..3, diloco-100 at 30 syncs
# and diloco-50 at 60 (losses 1.88/1.87/1.875 and 1.81/1.80/1.805), a fixedc-100 far better
# (1.83 at 30: the corrected front), autoloco at 30 syncs with 1.845/1.835/1.84.
runs3 = []
for sd, (l100, l50, la) in {1: (1.88, 1.81, 1.845), 2: (1.87, 1.80, 1.835),
                            3: (1.875, 1.805, 1.84)}.items():
    runs3 += [rec("diloco-100", sd, 30, l100), rec("diloco-50", sd, 60, l50),
              rec("fixedc-100", sd, 30, 1.83), rec("autoloco", sd, 30, la)]
d = sw.versus_diloco(runs3, "iid", "autoloco", n_boot=500)
# means: DiLoCo (30, 1.875) (60, 1.805); autoloco 1.84 → 30·sqrt(2) syncs, saving 1 − 1/sqrt 2
check("saving against the DiLoCo front (means)", near(d["saving"], 1 - 1 / math.sqrt(2)),
      str(d["saving"]))
# per seed: each seed's autoloco loss is its diloco-100 loss − 0.035, the same place between
# its two points (t = 0.5): every seed saves 1 − 1/sqrt 2, std 0; so does every bootstrap draw
check("per-seed savings against each seed's own DiLoCo front",
      len(d["per_seed"]) == 3 and all(near(x, 1 - 1 / math.sqrt(2)) for x in d["per_seed"])
      and near(d["per_seed_ms"][1], 0, 1e-12), str(d["per_seed"]))
check("bootstrap interval (500 draws) collapses when every seed saves the same",
      d["boot_n"] == 500 and near(d["boot"][0], d["boot"][1], 1e-12) and
      near(d["boot"][0], 1 - 1 / math.sqrt(2)), str(d["boot"]))
vc = sw.versus_front(runs3, "iid", "autoloco")
check("the corrected front (fixedc-100 at 1.83) leaves autoloco no saving",
      vc["front_syncs"] == 30 and near(vc["saving"], 0))
# seed 3 saves more (loss 1.82: t = 55/70 of the way), so the draws spread
runs3b = [r for r in runs3 if not (r["tag"] == "autoloco" and r["seed"] == 3)] + \
    [rec("autoloco", 3, 30, 1.82)]
d = sw.versus_diloco(runs3b, "iid", "autoloco", n_boot=500)
s3 = 1 - 1 / 2 ** (55 / 70)
check("per-seed spread: seed 3's own saving", near(max(d["per_seed"]), s3), str(d["per_seed"]))
check("bootstrap interval within the per-seed extremes and around the means' saving",
      d["boot"][0] < d["saving"] < d["boot"][1] and d["boot"][0] >= min(d["per_seed"]) - 1e-9
      and d["boot"][1] <= s3 + 1e-9, f"{d['boot']} {d['saving']}")

# The gap in standard deviations (item 4): autoloco-h50's losses 1.86, 1.84 at 30 syncs
# against the corrected front at 30 (1.83): gap 0.02, std 0.01414, z = 1.414
runs4 = runs3 + [rec("autoloco-h50", 1, 30, 1.86), rec("autoloco-h50", 2, 30, 1.84)]
z = sw.versus_front_sd(runs4, "iid", "autoloco-h50")
check("gap / std", near(z["gap"], 0.02, 1e-12) and near(z["z"], 0.02 / math.sqrt(2e-4), 1e-9),
      f"{z['gap']} {z['z']}")
check("autoloco-hN only in iid and languages; the others everywhere",
      sw.config_scenarios("autoloco-h50") == ["iid", "languages"] and
      sw.config_scenarios("autoloco") == sw.SCENARIOS and "languages" in sw.SCENARIOS)

# The ceiling's search on a known objective: the saving is 0.10 − 0.02·Σ_i (log2 H_i − log2
# H*_i)² with H* = (50, 100, 400). Constant schedules: (100,100,100) is best (0.10 − 0.02·(1 +
# 0 + 4) = 0); so the search starts there, then stage 1 → 50 (+0.02), stage 3 → 200 (+0.06),
# next pass stage 3 → 400 (+0.02), then a pass with no change.
opt = (50, 100, 400)


def f_true(s):
    return 0.10 - 0.02 * sum((math.log2(h) - math.log2(o)) ** 2 for h, o in zip(s, opt))


measured = set()
calls = []


def saving_of(s):
    calls.append(s)
    return f_true(s) if s in measured else None


rounds = 0
while True:
    r = sw.ceiling_search(saving_of)
    if not r["pending"]:
        break
    rounds += 1
    measured.update(r["pending"])
check("the search reaches the optimum", r["best"] == opt and near(r["saving"], f_true(opt)),
      str(r))
check("its path: start at the best fixed H, then one stage at a time",
      [p[0] for p in r["path"]] == [(100, 100, 100), (50, 100, 100), (50, 100, 200),
                                    (50, 100, 400)], str([p[0] for p in r["path"]]))
# 5 constants; pass 1: 2 + 2 + 2 neighbours; pass 2: 2 + 2 + 1 new ((50, 100, 100) is known);
# pass 3: 2 + 2 + 0 ((50, 100, 200) known, 400 has no larger neighbour): 20
check("it measures the constant schedules, then only neighbours (no schedule twice)",
      len(measured) == 20, f"{len(measured)}: {sorted(measured)}")
# a gain below MIN_GAIN is not taken
r2 = sw.ceiling_search(lambda s: 0.005 if s == (50, 100, 100) else 0.0)
check("a change that gains less than MIN_GAIN (0.01) is not kept",
      r2["best"] == (100, 100, 100) and not r2["pending"], str(r2["best"]))
check("the start: ties go to the H nearest H_base, then the larger",
      sw.ceiling_start({25: 0, 50: -0.1, 100: 0, 200: 0, 400: 0}) == 100 and
      sw.ceiling_start({25: 0, 50: 0, 100: -1, 200: 0, 400: -1}) == 200 and
      sw.ceiling_start({25: 0.2, 50: 0, 100: 0, 200: 0, 400: 0}) == 25)
check("a constant schedule is the corrected fixed H",
      sw.sched_config((50, 50, 50))[0] == "fixedc-50" and
      sw.sched_config((50, 100, 50))[0] == "sched-50-100-50" and
      "policy.at2=2000" in " ".join(sw.sched_config((50, 100, 50))[1]))


# Stand-in binaries in Python: the calls go to a log; syncs and loss follow from the
# arguments (a schedule's syncs over the three stages; loss lower with more syncs, the
# first stage's syncs worth more, DiLoCo a little worse).
FAKE = r"""#!PYTHON -S
import json, math, sys
a = sys.argv[1:]
open(LOG, "a").write(" ".join(a) + "\n")
def val(k):
    for i, x in enumerate(a):
        if x.startswith(k + "="):
            return x.split("=", 1)[1]
        if x == k:
            return a[i + 1]
pol = val("--policy")
if pol == "schedule":
    hs = [int(val("policy.h1")), int(val("policy.h2")), int(val("policy.h3"))]
elif val("--h"):
    hs = [int(val("--h"))] * 3
else:
    hs = [int(val("policy.h_base"))] * 3
syncs = sum(1000 / h for h in hs)
loss = 1.70 + 0.05 * (0.6 * math.log2(hs[0]) + 0.3 * math.log2(hs[1]) + 0.1 * math.log2(hs[2]))
loss += 0.01 if val("--correction") == "none" else 0
loss += 0.001 * (int(val("--seed")) % 3)
print(json.dumps({"scenario": val("--scenario"), "preset": "demo", "policy": pol,
                  "correction": val("--correction"), "syncs": round(syncs),
                  "final_eval_loss": loss, "h_history": hs, "bytes": 1, "projected_100m_s": 1}))
"""


def fake_bin(tmp):
    path = os.path.join(tmp, "autoloco-fake")
    with open(path, "w") as f:
        f.write(FAKE.replace("LOG", repr(os.path.join(tmp, "calls"))).replace("PYTHON",
                                                                              sys.executable))
    os.chmod(path, 0o755)
    return path


with tempfile.TemporaryDirectory() as tmp:
    fb = fake_bin(tmp)
    raw = os.path.join(tmp, "raw.jsonl")
    common = [sys.executable, SWEEP, "--bin", fb, "--raw", raw, "--out",
              os.path.join(tmp, "r.md"), "--jobs", "4"]
    # autoloco-h50 runs in iid only of iid, noniid; languages wants its data
    p = subprocess.run(common + ["--seeds", "101", "--scenarios", "iid,noniid", "--only",
                                 "autoloco-h50"], capture_output=True, text=True, cwd=tmp)
    lines = [json.loads(x) for x in open(raw)] if os.path.exists(raw) else []
    check("autoloco-h50 ran in iid, not in noniid", p.returncode == 0 and
          [(r["tag"], r["scenario"]) for r in lines] == [("autoloco-h50", "iid")], p.stderr[-300:])
    p = subprocess.run(common + ["--seeds", "101", "--scenarios", "languages", "--only",
                                 "diloco-100"], capture_output=True, text=True, cwd=tmp)
    check("languages without data/languages: refused, saying how to make it",
          p.returncode != 0 and "data/languages/train.groups is missing: run tools/setup"
          in p.stderr, p.stderr.strip()[-300:])
    os.makedirs(os.path.join(tmp, "data", "languages"))
    open(os.path.join(tmp, "data", "languages", "train.groups"), "w").write("en 0 1\n")
    p = subprocess.run(common + ["--seeds", "101", "--scenarios", "languages", "--only",
                                 "diloco-100"], capture_output=True, text=True, cwd=tmp)
    last = open(os.path.join(tmp, "calls")).read().splitlines()[-1]
    check("a languages run reads data/languages", p.returncode == 0 and
          "--scenario languages" in last and "data.train=data/languages/train.bin" in last and
          "data.val=data/languages/val.bin" in last, last)

    # A whole ceiling search, then again: nothing new runs, and the report replays it
    os.remove(raw)
    os.remove(os.path.join(tmp, "calls"))
    p1 = subprocess.run(common + ["--ceiling", "iid"], capture_output=True, text=True, cwd=tmp)
    n1 = len(open(os.path.join(tmp, "calls")).read().splitlines())
    recs = [json.loads(x) for x in open(raw)]
    p2 = subprocess.run(common + ["--ceiling", "iid"], capture_output=True, text=True, cwd=tmp)
    n2 = len(open(os.path.join(tmp, "calls")).read().splitlines())
    check("--ceiling ran the front, the rule and the search on the tuning seeds only",
          p1.returncode == 0 and all(r["report"] is False and r["seed"] in (101, 102, 103)
                                     for r in recs) and
          {"diloco-25", "fixedc-25", "fixedc-400", "autoloco"} <= {r["tag"] for r in recs} and
          any(r["tag"].startswith("sched-") for r in recs), p1.stderr[-500:] + p1.stdout[-300:])
    check("--ceiling resumes: nothing run twice", p2.returncode == 0 and n2 == n1 and
          len({(r["tag"], r["seed"]) for r in recs}) == len(recs), f"{n1} {n2}")
    runs_c = sw.load_raw(raw)
    so, envc = sw.ceiling_saving_of(runs_c, "iid")
    res = sw.ceiling_search(so)
    best = res["best"]
    nb = [best[:i] + (h,) + best[i + 1:] for i in range(3) for h in sw.GRID if h != best[i]
          and abs(sw.GRID.index(h) - sw.GRID.index(best[i])) == 1]
    check("the search stopped at a schedule no single-stage neighbour beats by MIN_GAIN",
          not res["pending"] and all(so(x) is not None and so(x) < res["saving"] + sw.MIN_GAIN
                                     for x in nb), f"{best} {res['saving']}")
    rep = open(os.path.join(tmp, "r.md")).read()
    check("the report names the ceiling and the rule's share",
          f"The ceiling: {'/'.join(map(str, best))}" in rep and "share of the ceiling" in rep,
          rep[rep.find("## The ceiling"):][:600])
    bad = subprocess.run(common + ["--ceiling", "iid", "--report-seeds"], capture_output=True,
                         text=True, cwd=tmp)
    check("--ceiling refuses report seeds", bad.returncode != 0 and "tuning seeds alone" in
          bad.stderr, bad.stderr.strip()[-200:])

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
