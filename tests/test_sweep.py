#!/usr/bin/env python3
"""test_sweep.py SWEEP -- the arithmetic behind tools/sweep's verdict (issue 12):
the front's envelope, its loss at a number of syncs and the syncs it needs for
a loss (both linear in log syncs), the saving, and the per-seed paired
difference, against values computed by hand; plus resuming (a run already in
the raw file is not repeated) with a stand-in binary that counts its calls.
"""
import importlib.machinery
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile

SWEEP = sys.argv[1]
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

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
