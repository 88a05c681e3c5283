#!/usr/bin/env python3
"""test_chaos.py CHAOS -- the checks behind tools/chaos (issue 13), on crafted
input: the round log line parser (only the site's own commit lines, eval
suffix, other lines ignored), the fork finder (a round two sites committed
with different theta, or one site twice across a restart, is a fork; equal
hashes are not), the ALOUTER1 theta hash (header skipped, momentum not
hashed, another file refused), the liveness measure on synthetic timelines
(issue 32: a majority connected or not under one-way cuts, stops and
partitions; the longest stall inside the connected stretches), and bad
command lines (exit 2, one message).
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
    A.faults = "cut-link,stop-site"
    only = ch.Soak(A)
    only.t_sched = soak.t_sched
    check("due: a kind left out by --faults is never due", only.due() is None)
    A.faults = None

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

# liveness (issue 32): a majority connected or not, the stretches, the stall
S = ["a", "b", "c"]
F = frozenset
check("majority: every site up, no cut", ch.majority_connected(S, F(), F()))
check("majority: one site down, the other two connected", ch.majority_connected(S, F("a"), F()))
check("majority: one site stopped and a cut between the other two: none",
      not ch.majority_connected(S, F("a"), F({("b", "c")})))
check("majority: a one-way cut b->c with a down: none",
      not ch.majority_connected(S, F("a"), F({("c", "b")})))
check("majority: a one-way cut b->c, every site up: {a, b} or {a, c}",
      ch.majority_connected(S, F(), F({("b", "c")})))
check("majority: one-way cuts a->b and c->a, all up: {b, c}",
      ch.majority_connected(S, F(), F({("a", "b"), ("c", "a")})))
check("majority: one-way cuts a->b, b->c, c->a: every pair cut one way: none",
      not ch.majority_connected(S, F(), F({("a", "b"), ("b", "c"), ("c", "a")})))
part = F({("a", "b"), ("b", "a"), ("a", "c"), ("c", "a")})
check("majority: partition {a} | {b, c}: {b, c}", ch.majority_connected(S, F(), part))
check("majority: partition {a} | {b, c} with b stopped: none", not ch.majority_connected(S, F("b"), part))
check("majority: two sites down: none", not ch.majority_connected(S, F("ab"), F()))
S5 = ["a", "b", "c", "d", "e"]
check("majority of 5: {c, d, e} with a, b cut from all",
      ch.majority_connected(S5, F(), F((x, y) for x in "ab" for y in "cde")))
check("majority of 5: c<->d cut too: none",
      not ch.majority_connected(S5, F(), F([(x, y) for x in "ab" for y in "cde"] + [("c", "d")])))

# a run: up 0-10, a stopped 10-40 (b, c connected), then b->c cut 20-30 (none),
# everyone down 50-60 (kill-all), up again until 100
tl = [(0, F(), F()), (10, F("a"), F()), (20, F("a"), F({("b", "c")})), (30, F("a"), F()),
      (40, F(), F()), (50, F("abc"), F()), (60, F(), F())]
spans = ch.connected_stretches(S, tl, 100)
check("stretches: majority broken by the cut while a is stopped and by the kill-all",
      spans == [(0, 20), (30, 50), (60, 100)], spans)
check("stretches: clipped at t_end", ch.connected_stretches(S, tl, 25) == [(0, 20)])
commits = [1, 2, 3, 15, 45, 64, 65, 80, 92]
st = ch.longest_stall(spans, commits)
check("stall: 30-45, from the cut's heal (15-45 spans the cut, 45-64 the kill-all: neither counts)",
      st == (15, 30, 45), st)
check("stall: a stretch with no commit is a stall from its start to its end",
      ch.longest_stall([(0, 5), (10, 40)], [1, 2, 3, 4]) == (30, 10, 40))
check("stall: a stretch's start to its first commit counts", ch.longest_stall([(30, 50)], [45]) == (15, 30, 45))
check("stall: no stretch, no stall", ch.longest_stall([], [1, 2]) == (0.0, None, None))
check("median_spacing: the median gap between rounds' first commits (later sites' commits ignored)",
      ch.median_spacing([(0, 0), (0.3, 0), (1, 1), (1.2, 1), (3, 2), (4, 3)]) == 1, 
      ch.median_spacing([(0, 0), (0.3, 0), (1, 1), (1.2, 1), (3, 2), (4, 3)]))
check("median_spacing: one round: none", ch.median_spacing([(5, 3), (6, 3)]) is None)

with tempfile.TemporaryDirectory() as d:
    ev = os.path.join(d, "events.jsonl")
    with open(ev, "w") as f:
        f.write('{"event": "up", "site": "a", "t": 1.0}\n')
        f.write('{"event": "round", "round": 3, "t": 1700000000.25, "theta": "00"}\n')
        f.write('{"event": "round", "round": 4, "t": "x"}\n')
        f.write('{"event": "round", "round": 5, "t": 17')
    check("event_commits: round records with their time only",
          ch.event_commits(ev) == [(1700000000.25, 3)], ch.event_commits(ev))

    class B:
        seed, dir, pace, at_least, set = 1, d, 1, 1, []
    soak = ch.Soak(B)
    soak.proxies = {}
    soak.t0 = 1000.0
    soak.t_sched = (1000.0, 1080.0)
    soak.t_stop = 1100.0
    soak.timeline = [(1000.0, F(), F()), (1020.0, F("a"), F({("b", "c"), ("c", "b")})), (1060.0, F(), F())]
    for site, ts in (("a", [1010, 1011, 1012]), ("b", [1011, 1090])):
        os.makedirs(os.path.join(d, "run-" + site))
        with open(os.path.join(d, "run-" + site, "events.jsonl"), "w") as f:
            for i, t in enumerate(ts):
                f.write('{"event": "round", "round": %d, "t": %g}\n' % (10 + i, t))
    live = soak.liveness()
    check("liveness: the stall 1060-1090 (not 1012-1090: a down and b<->c cut in between)",
          live["longest_s"] == 30 and live["at_s"] == [60, 90], live)
    check("liveness: connected from the first commit (1010), less the 40 s without a majority",
          live["connected_s"] == 50, live)
    check("liveness: rounds per minute from the schedule's start", live["rounds"] == 3
          and live["rounds_per_minute"] == 1.8, live)
    soak.mark()
    check("mark: an unchanged state adds nothing", len(soak.timeline) == 3)
    soak.held = {("a", "b")}
    soak.stopped = {"c": 0}
    soak.mark()
    check("mark: a stop and a held link noted", soak.timeline[-1][1:] == (F("c"), F({("a", "b")})))

    # stop-site on real processes: the group (agent and a worker) stops, then continues
    def state(pid):
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    procs = {x: subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True) for x in S}
    try:
        ch.time.sleep(0.3)
        soak.agents = procs
        soak.stopped = {}
        soak.t0 = ch.time.time()
        soak.fault_kind("stop-site", "b", "a", 1.0)
        ch.time.sleep(0.3)
        kids = soak.workers_of("b")
        f = soak.faults[-1]
        check("stop-site: the site and its child stopped, for 10-60 s",
              state(procs["b"].pid) == "T" and kids and all(state(k) == "T" for k in kids)
              and 10 <= f["for_s"] <= 60 and "b" in soak.stopped, (f, kids))
        soak.mark()
        check("stop-site: the timeline has b unavailable", "b" in soak.timeline[-1][1])
        soak.stopped["b"] = 0  # due
        soak.down = {}
        soak.killed = set()
        soak.supervise()
        ch.time.sleep(0.3)
        check("stop-site: SIGCONT when due, b available again",
              state(procs["b"].pid) in "SR" and all(state(k) in "SR" for k in kids)
              and not soak.stopped and "b" not in soak.timeline[-1][1])
    finally:
        for p in procs.values():
            ch.os.killpg(p.pid, 9)
            p.wait()

check("fault_mix: the default leaves stop-site out",
      "stop-site" not in dict(ch.fault_mix("default")) and dict(ch.fault_mix(None)) == dict(ch.FAULT_WEIGHTS))
check("fault_mix: all has stop-site", "stop-site" in dict(ch.fault_mix("all")))
check("fault_mix: by name, heal added to a cut",
      [k for k, _ in ch.fault_mix("stop-site,cut-oneway")] == ["cut-oneway", "heal", "stop-site"])
check("parse_links: 20mbit,30ms", ch.parse_links("20mbit,30ms") == (20.0, 30.0))
check("parse_links: 500kbit,0.1s", ch.parse_links("500kbit,0.1s") == (0.5, 100.0))
check("peer_timeout: from --set, else 5", ch.peer_timeout(["round.peer_timeout_s=2.5"]) == 2.5
      and ch.peer_timeout(["round.min_sites=2"]) == 5.0)

for argv, want in [(["--faults", "nope"], "unknown fault nope"), (["--links", "20mb"], "expected RATE"),
                   (["--minutes", "0"], "must be > 0"), (["--bin", "/nonexistent"], "not an executable"),
                   (["--pace", "x"], "invalid float")]:
    r = subprocess.run([sys.executable, CHAOS] + argv, capture_output=True, text=True)
    check("bad command line %s: exit 2 naming it" % argv, r.returncode == 2 and want in r.stderr,
          r.stderr.strip().splitlines()[-1:])

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
