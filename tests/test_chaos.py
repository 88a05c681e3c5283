#!/usr/bin/env python3
"""test_chaos.py CHAOS -- the checks behind tools/chaos (issue 13), on crafted
input: the round log line parser (only the site's own commit lines, eval
suffix, other lines ignored), the fork finder (a round two sites committed
with different theta, or one site twice across a restart, is a fork; equal
hashes are not), the ALOUTER1 theta hash (header skipped, momentum not
hashed, another file refused), and bad command lines (exit 2, one message).
The soak itself runs real agents for minutes: docs/results/reliability.md.
"""
import hashlib
import importlib.machinery
import importlib.util
import os
import struct
import subprocess
import sys
import tempfile

CHAOS = sys.argv[1]
loader = importlib.machinery.SourceFileLoader("chaos", CHAOS)
spec = importlib.util.spec_from_loader("chaos", loader)
ch = importlib.util.module_from_spec(spec)
loader.exec_module(ch)

passed = failed = 0


def check(what, cond, detail=""):
    global passed, failed
    print(("ok: " if cond else "FAIL: ") + what + (f"  [{detail}]" if detail else ""))
    if cond:
        passed += 1
    else:
        failed += 1


log = """[info] site a: 2 workers forked once (process threads: 1)
[info] site a | round 0 | step 100 | H 100 -> 100 | sites 3 | loss 4.1234 | sent 6700 B | theta 0123456789ab
[warn] round 1: c unreachable, leaving it out: grpc PushStats -> c: UNAVAILABLE
[info] site b | round 1 | step 200 | H 100 -> 100 | sites 2 | loss 3.0 | sent 1 B | theta ffffffffffff
[info] site a | round 1 | step 200 | H 100 -> 100 | sites 2 | loss 3.5000 (eval) | sent 67 B | theta abcdefabcdef
[info] site a: saved checkpoint /x/run-a/step-00000200 (round 2, step 200)
"""
rows = ch.parse_rounds(log, "a")
check("parse_rounds: the site's own commits, in order",
      rows == [(0, 100, 3, "0123456789ab"), (1, 200, 2, "abcdefabcdef")], rows)

same = {"a": [(0, 100, 3, "h0"), (1, 200, 3, "h1")], "b": [(0, 100, 3, "h0"), (1, 200, 3, "h1")],
        "c": [(1, 200, 3, "h1")]}
check("find_forks: equal hashes are no fork", ch.find_forks(same) == {})
check("shared_rounds counts rounds committed more than once", ch.shared_rounds(same) == 2)
split = {"a": [(5, 500, 1, "aa")], "b": [(5, 500, 2, "bb")], "c": [(5, 500, 2, "bb")]}
check("find_forks: {a} | {b, c} committing round 5 apart is a fork",
      ch.find_forks(split) == {5: {"aa": ["a(1)"], "bb": ["b(2)", "c(2)"]}}, ch.find_forks(split))
again = {"a": [(7, 700, 3, "x"), (7, 700, 3, "y")], "b": [], "c": []}
check("find_forks: one site committing a round twice with another theta is a fork",
      list(ch.find_forks(again)) == [7])

with tempfile.TemporaryDirectory() as d:
    n = 16384 + 3  # a whole chunk of theta's hash and 3 values
    theta = struct.pack("<%df" % n, *[(i % 97) * 0.25 - 3 for i in range(n)])
    blob = b"ALOUTER1" + struct.pack("<IIQq3d", 1, 1, n, 9, 0.7, 0.9, 100.0) + theta
    blob += struct.pack("<%df" % n, *([7.0] * n)) + b"0" * 64  # momentum, trailer
    p = os.path.join(d, "outer.bin")
    open(p, "wb").write(blob)
    want = hashlib.sha256(hashlib.sha256(theta[:65536]).digest() +
                          hashlib.sha256(theta[65536:]).digest()).hexdigest()
    check("outer_theta_hash: the hash of theta's two chunks, theta only",
          ch.outer_theta_hash(p) == want)
    open(p, "wb").write(b"NOTOUTER" + blob[8:])
    try:
        ch.outer_theta_hash(p)
        check("outer_theta_hash refuses another file", False)
    except ValueError as e:
        check("outer_theta_hash refuses another file", "not an ALOUTER1" in str(e), e)

# whole-run faults (issue 31): events.jsonl round records, the --at-least quota, a stale restart
with tempfile.TemporaryDirectory() as d:
    ev = os.path.join(d, "events.jsonl")
    with open(ev, "w") as f:
        f.write('{"event": "up", "site": "a"}\n')
        f.write('{"round": 3, "members": 3, "theta": "00112233445566778899aabb"}\n')
        f.write('{"round": 4, "mem')  # cut by a SIGKILL
    rows = ch.event_rounds(ev)
    check("event_rounds: round records only, a cut line skipped", rows == [(3, 0, 3, "001122334455")], rows)
    check("event_rounds: no file, no rows", ch.event_rounds(os.path.join(d, "none")) == [])
    check("find_forks: an event log's theta against another site's log line",
          list(ch.find_forks({"a": [(3, 0, 3, "001122334455")], "b:events": [(3, 0, 3, "ffffffffffff")]})) == [3])

    class A:
        seed, dir, pace, at_least = 1, d, 1, 3
    soak = ch.Soak(A)
    now = ch.time.time()
    soak.t_sched = (now, now + 100)
    check("due: nothing at the start", soak.due() is None)
    soak.t_sched = (now - 50, now + 50)  # half way: 2 of 3 due (by 80 %: all 3)
    check("due: half way, kill-all first", soak.due() == "kill-all")
    soak.faults = [dict(kind=k) for k in ("kill-all", "kill-all", "kill-two", "kill-two")]
    check("due: half way, stale-restart short of 2", soak.due() == "stale-restart")
    soak.faults += [dict(kind="stale-restart"), dict(kind="stale-restart", skipped="x")]
    check("due: a skipped fault does not count", soak.due() == "stale-restart")
    soak.faults.append(dict(kind="stale-restart"))
    check("due: 2 of each half way: none", soak.due() is None)
    soak.t_sched = (now - 90, now + 10)
    check("due: at 90 %, the third kill-all", soak.due() == "kill-all")

    check("progressed: every final state past the heal's round",
          ch.progressed({"a": {"round": 1531}, "b": {"round": 1531}}, 1529))
    check("progressed: a site still at the heal's round is no progress",
          not ch.progressed({"a": {"round": 1531}, "b": {"round": 1530}}, 1529))
    check("progressed: a site without a checkpoint is no progress",
          not ch.progressed({"a": {"round": 1531}, "b": {"error": "no checkpoint"}}, 1529))

    run = os.path.join(d, "run-a")
    for k, r in ((5, 1), (10, 2), (15, 3)):
        os.makedirs(os.path.join(run, "step-%08d" % k))
        with open(os.path.join(run, "step-%08d" % k, "agent.json"), "w") as f:
            f.write('{"round": %d}' % r)
    for keep in ("hard.json", "commit-00000003.bin"):
        open(os.path.join(run, keep), "w").write("x")
    soak.t0 = now
    soak.make_stale("a")
    check("make_stale: the oldest checkpoint only, hard state and commit files kept",
          sorted(os.listdir(run)) == ["commit-00000003.bin", "hard.json", "step-00000005"], os.listdir(run))

    # a proxy that exited is a link cut for good: dead_proxies names it with
    # its status (the check proxies_alive rests on it), a running one is not
    gone = subprocess.Popen(["sh", "-c", "exit 3"])
    alive = subprocess.Popen(["sleep", "30"])
    gone.wait()
    soak.proxies = {("a", "b"): gone, ("b", "a"): alive}
    try:
        check("dead_proxies: the exited proxy, with its status, not the running one",
              soak.dead_proxies() == {"a->b": 3}, soak.dead_proxies())
    finally:
        alive.kill()
        alive.wait()

for argv, want in [(["--minutes", "0"], "must be > 0"), (["--bin", "/nonexistent"], "not an executable"),
                   (["--pace", "x"], "invalid float")]:
    r = subprocess.run([sys.executable, CHAOS] + argv, capture_output=True, text=True)
    check("bad command line %s: exit 2 naming it" % argv, r.returncode == 2 and want in r.stderr,
          r.stderr.strip().splitlines()[-1:])

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
