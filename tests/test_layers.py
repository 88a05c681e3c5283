#!/usr/bin/env python3
"""test_layers.py SRCROOT LIBAUTOLOCO -- the parts call each other one way only.

runtime/ is in rooms, lowest first (docs/ARCHITECTURE.md, "Layout"):

    base < store, round, monitor < sim < agent < cli

and the model-side modules (inner/, outer/, policies/, transport/) sit below
every room but base. Inside agent/ the files are layered the same way: the
driver (agent_round.c feeding the round machine through agent_machine.c) over
services that never call back up (AGENT_RANK below).

Checked two ways, so that neither a new #include nor a new call against the
grain gets through:
  includes  every `#include "x.h"` in a room names a header of its own room,
            a lower room's one public header (al_<room>.h), or a model-side
            header; model-side code includes no runtime header but al_base.h;
  calls     read from the static library (nm): a symbol an object uses that
            an object of another room (or agent file) defines must be in a
            lower room (rank).
Within agent/, every ag_* function a file exports is declared in that file's
own header (agent_X.h for agent_X.c), and agent_impl.h (the shared state)
declares no function that is not inline.
"""
import os
import re
import subprocess
import sys

ROOM_RANK = {"base": 0, "store": 1, "round": 1, "monitor": 1, "sim": 2, "agent": 3, "cli": 4}
MODEL_SIDE = ["inner", "outer", "policies", "transport"]

# agent/: a file may call (and include the header of) files of a lower rank only.
AGENT_RANK = {
    "agent_hash": 0,     # θ's hashes, the published snapshot's seal
    "agent_events": 0,   # the event log and membership events
    "agent_members": 0,  # the sites this site hears (one membership per attempt)
    "agent_stream": 1,   # streaming's fragment schedule
    "agent_net": 2,      # server hooks, clients, state pulls
    "agent_ckpt": 2,     # checkpoints
    "agent_hard": 2,     # the protocol's hard state: votes, candidates, commits
    "agent_train": 2,    # the interval's training (inline or its own thread)
    "agent_exchange": 3, # the round's Δ exchange (reduce-scatter, all-gather)
    "agent_carry": 3,    # the carry: the candidate kept for peers, fetched, held
    "agent_hb": 3,       # heartbeats (send statistics through agent_net)
    "agent_machine": 4,  # the driver's side of the round machine
    "agent_round": 5,    # the driver
    "agent": 6,          # set-up and the run
}

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def room_of(path):
    """runtime/<room>/file -> room; model-side top folder -> 'model'; else None."""
    parts = path.split(os.sep)
    if parts[0] == "runtime" and len(parts) >= 3 and parts[1] in ROOM_RANK:
        return parts[1]
    if parts[0] in MODEL_SIDE:
        return "model"
    return None


def main():
    if len(sys.argv) != 3:
        print("usage: test_layers.py SRCROOT LIBAUTOLOCO", file=sys.stderr)
        return 2
    root, lib = sys.argv[1], os.path.abspath(sys.argv[2])  # (meson passes it relative)
    os.chdir(root)
    try:
        # tracked files and new ones not yet added (but not ignored ones)
        files = subprocess.check_output(["git", "ls-files", "--cached", "--others",
                                         "--exclude-standard", "*.c", "*.h"], text=True,
                                        stderr=subprocess.DEVNULL).split()
        files = [f for f in files if os.path.exists(f)]
    except (OSError, subprocess.CalledProcessError):
        files = []
    if not files:  # not a git checkout (a tarball): walk the tree
        for top in ["runtime"] + MODEL_SIDE:
            for d, _, names in os.walk(top):
                files += [os.path.join(d, n) for n in names if n.endswith((".c", ".h"))]
    # where each header lives (names are unique across the tree)
    header_room = {}
    for f in files:
        if f.endswith(".h"):
            header_room.setdefault(os.path.basename(f), (room_of(f), f))

    # ---- rooms must exist with their public header
    for room in ROOM_RANK:
        pub = "runtime/%s/al_%s.h" % (room, room)
        if not os.path.exists(pub):
            fail("%s: the room's public header is missing" % pub)
    loose = [f for f in files if f.startswith("runtime/") and f.count("/") == 1]
    if loose:
        fail("files directly in runtime/ (put them in a room): " + " ".join(loose))

    # ---- includes
    n_inc = 0
    for f in files:
        mine = room_of(f)
        if mine is None:
            continue
        for ln, text in enumerate(open(f, encoding="utf-8"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', text)
            if not m:
                continue
            h = os.path.basename(m.group(1))
            if h not in header_room:
                continue  # generated (autoloco.pb-c.h) or system
            theirs, hpath = header_room[h]
            n_inc += 1
            if theirs is None or theirs == mine:
                pass
            elif mine == "model":
                if h != "al_base.h":
                    fail("%s:%d: model-side code includes runtime's %s" % (f, ln, hpath))
            elif theirs == "model":
                pass
            elif ROOM_RANK[theirs] >= ROOM_RANK[mine]:
                fail("%s:%d: runtime/%s includes %s of runtime/%s (not a lower room)"
                     % (f, ln, mine, hpath, theirs))
            elif h != "al_%s.h" % theirs:
                fail("%s:%d: includes %s, an internal header of runtime/%s (use al_%s.h)"
                     % (f, ln, hpath, theirs, theirs))
            # inside agent/: only headers of lower-ranked files (and the shared state)
            base = os.path.splitext(os.path.basename(f))[0]
            if mine == "agent" == theirs and base in AGENT_RANK:
                hb = os.path.splitext(h)[0]
                if hb in AGENT_RANK and hb != base and AGENT_RANK[hb] >= AGENT_RANK[base]:
                    fail("%s:%d: includes %s, which is not below %s.c" % (f, ln, h, base))
    print("includes checked: %d" % n_inc)

    # ---- calls, from the library's symbols
    try:
        out = subprocess.check_output(["nm", "-A", lib], text=True, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError) as e:
        fail("nm %s: %s" % (lib, e))
        return 1
    defs, uses = {}, {}
    for line in out.splitlines():
        m = re.match(r".*[:/]([A-Za-z0-9_.-]+)\.c\.o:\s*(?:[0-9a-f]+)?\s+([A-Za-z])\s+(\S+)$", line)
        if not m:
            continue
        obj, kind, sym = m.groups()
        if kind in "TDBR":
            defs[sym] = obj
        elif kind == "U":
            uses.setdefault(obj, set()).add(sym)

    def obj_room(obj):
        # meson names objects by their path: runtime_agent_agent_net, inner_model, ...
        for room in ROOM_RANK:
            if obj.startswith("runtime_%s_" % room):
                return room, obj[len("runtime_%s_" % room):]
        for top in MODEL_SIDE:
            if obj.startswith(top + "_"):
                return "model", obj
        return None, obj

    n_calls = 0
    for obj, syms in sorted(uses.items()):
        r1, f1 = obj_room(obj)
        if r1 is None:
            continue
        for sym in sorted(syms):
            if sym not in defs or defs[sym] == obj:
                continue
            r2, f2 = obj_room(defs[sym])
            if r2 is None or r2 == "model":
                continue
            n_calls += 1
            if r1 == "model":
                if r2 != "base":
                    fail("%s calls %s of runtime/%s" % (obj, sym, r2))
            elif r1 != r2 and ROOM_RANK[r2] >= ROOM_RANK[r1]:
                fail("runtime/%s/%s.c calls %s of runtime/%s/%s.c (not a lower room)"
                     % (r1, f1, sym, r2, f2))
            elif r1 == r2 == "agent":
                if f1 not in AGENT_RANK or f2 not in AGENT_RANK:
                    fail("agent/%s.c or agent/%s.c has no rank in test_layers.py" % (f1, f2))
                elif AGENT_RANK[f2] >= AGENT_RANK[f1]:
                    fail("agent/%s.c calls %s of agent/%s.c, which is not below it"
                         % (f1, sym, f2))
    print("calls between parts checked: %d" % n_calls)
    if n_calls < 50 or n_inc < 50:
        fail("too few includes (%d) or calls (%d) found: is nm reading %s?" % (n_inc, n_calls, lib))

    # ---- agent/: each file's exported ag_* functions in its own header
    for obj, f in [(o, obj_room(o)[1]) for o in set(defs.values()) if obj_room(o)[0] == "agent"]:
        if f not in AGENT_RANK:
            fail("agent/%s.c has no rank in test_layers.py" % f)
            continue
        exported = sorted(s for s, o in defs.items() if o == obj and s.startswith("ag_"))
        hdr = "runtime/agent/%s.h" % f
        text = open(hdr, encoding="utf-8").read() if os.path.exists(hdr) else ""
        for s in exported:
            if not re.search(r"\b%s\s*\(" % re.escape(s), text):
                fail("agent/%s.c exports %s, not declared in %s" % (f, s, hdr))
    impl = "runtime/agent/agent_impl.h"
    if os.path.exists(impl):
        for ln, text in enumerate(open(impl, encoding="utf-8"), 1):
            if re.match(r"^(?!static|typedef|#|\s|/|\*|}).*\b(ag_\w+)\s*\(.*\)\s*;", text):
                fail("%s:%d declares a function: declare it in its service's header" % (impl, ln))

    if failures:
        print("%d layering failure(s)" % len(failures))
        return 1
    print("layers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
