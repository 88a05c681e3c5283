#!/usr/bin/env python3
"""test_clock_check.py SRCROOT -- no deadline or timed wait counts on the wall clock.

A step of the system clock (NTP, `date -s`, a VM resumed) moves every deadline
computed from CLOCK_REALTIME: a round's deadline would pass at once, or hours
late (issue 32). So every deadline, timeout, timed wait and sleep in the C code
of runtime/, transport/, outer/, inner/, policies/ and tools/ counts on the
monotonic clock, through runtime/base's helpers (al_base.h, "time"):

    al_now()                  monotonic seconds: deadlines, waits, durations
    al_cond_init()            a condition variable whose timed waits are monotonic
    al_cond_wait_until(d)     wait until al_now() >= d
    al_sleep(s)               a monotonic sleep
    al_wall_now()             Unix seconds, for display and files only

This test reads the sources (comments and string literals removed) and fails
on any use of a wall-clock read or of a wait that would count on the wall
clock -- CLOCK_REALTIME, GPR_CLOCK_REALTIME, gettimeofday, time(), ftime,
timespec_get, a condition variable made without al_cond_init (its clock is
CLOCK_REALTIME), pthread_cond_timedwait outside al_cond_wait_until, the
timed waits that only exist on CLOCK_REALTIME (sem_timedwait,
pthread_mutex_timedlock, ...) -- and on every call of al_wall_now, unless the
use is in ALLOWED below: (file, function, name), each with the reason it is a
stamp a person or a file reads and not a deadline. An entry that no longer
matches anything fails too, so the list stays exact.
"""
import os
import re
import sys

SCOPE = ["runtime", "transport", "outer", "inner", "policies", "tools"]
EXTS = (".c", ".h", ".cc", ".cpp", ".cu", ".cuh")

# name -> what is wrong with it
FORBIDDEN = [
    (r"\bCLOCK_REALTIME\w*", "reads the wall clock (use al_now; for display al_wall_now)"),
    (r"\bGPR_CLOCK_REALTIME\b", "a gRPC deadline on the wall clock (use GPR_CLOCK_MONOTONIC)"),
    (r"\bgettimeofday\s*\(", "reads the wall clock (use al_now; for display al_wall_now)"),
    (r"(?<![\w.>])time\s*\(", "time() reads the wall clock (use al_now; for display al_wall_now)"),
    (r"\bftime\s*\(", "reads the wall clock"),
    (r"\btimespec_get\s*\(", "TIME_UTC is the wall clock"),
    (r"\bpthread_cond_init\s*\(", "a condition variable on the default clock, CLOCK_REALTIME "
     "(use al_cond_init)"),
    (r"\bPTHREAD_COND_INITIALIZER\b", "a condition variable on CLOCK_REALTIME (use al_cond_init)"),
    (r"\bpthread_condattr_setclock\s*\(", "condition variables' clocks are set in al_cond_init"),
    (r"\bpthread_cond_timedwait\s*\(", "a timed wait with an absolute timespec (use "
     "al_cond_wait_until on a condition variable from al_cond_init)"),
    (r"\bsem_timedwait\s*\(", "its deadline is on CLOCK_REALTIME"),
    (r"\bpthread_mutex_timedlock\s*\(", "its deadline is on CLOCK_REALTIME"),
    (r"\bpthread_rwlock_timed\w+\s*\(", "its deadline is on CLOCK_REALTIME"),
    (r"\bpthread_timedjoin_np\s*\(", "its deadline is on CLOCK_REALTIME"),
    (r"\bmq_timed\w+\s*\(", "its deadline is on CLOCK_REALTIME"),
    (r"\bal_wall_now\s*\(", "the wall clock: only for stamps shown or written (add it to "
     "ALLOWED with the reason, or use al_now)"),
]

# (file, function, name): why this use is a stamp and not a deadline
ALLOWED = {
    # the helpers themselves
    ("runtime/base/base.c", "al_wall_now", "CLOCK_REALTIME"):
        "the one wall-clock read for display, behind the helper",
    ("runtime/base/base.c", "al_cond_init", "pthread_cond_init"):
        "the helper: initialised with a CLOCK_MONOTONIC attribute",
    ("runtime/base/base.c", "al_cond_init", "pthread_condattr_setclock"):
        "the helper: sets CLOCK_MONOTONIC",
    ("runtime/base/base.c", "al_cond_wait_until", "pthread_cond_timedwait"):
        "the helper: the timespec is on CLOCK_MONOTONIC (al_cond_init's condition variables)",
    # stamps shown to people or written to files
    ("runtime/base/base.c", "log_line", "CLOCK_REALTIME"):
        "every log line's timestamp (ISO-8601 UTC, ms), read by people and log tools",
    ("runtime/monitor/metrics.c", "wall_now", "al_wall_now"):
        "/metrics' and the dashboard's timestamps (uptime, last commit, last checkpoint) and "
        "events.jsonl's `t`: read by people and Prometheus, never waited on",
    ("runtime/agent/agent_round.c", "round_record", "al_wall_now"):
        "the round record's `t` (events.jsonl, /metrics' last commit): a stamp in a file",
    ("transport/server.c", "do_ping", "al_wall_now"):
        "Heartbeat.sent_unix_ms, the replying site's clock for a person comparing clocks; "
        "no site derives a deadline from it",
    # an identity, not a time to wait for
    ("runtime/agent/agent_machine.c", "incarnation", "CLOCK_REALTIME"):
        "a start's incarnation number, ordered across restarts and reboots (the monotonic "
        "clock restarts at boot); compared with peers' numbers, never waited on",
}


def strip(text):
    """C text with comments and string/char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


HEADER = re.compile(r"^[A-Za-z_][^;]*?\b(\w+)\s*\(")


def hits(text):
    """(line number, enclosing function or '', matched name, reason) for each use."""
    fn = ""
    lines = strip(text).split("\n")
    for no, line in enumerate(lines, 1):
        m = HEADER.match(line) if not line.startswith(("typedef", "#")) else None
        declared = m.group(1) if m else None  # a function declared or defined here
        if m:
            rest = "\n".join(lines[no - 1:no + 20])
            body, semi = rest.find("{"), rest.find(";")
            if body >= 0 and (semi < 0 or body < semi):
                fn = declared  # a definition: its body follows
        elif line.startswith("}"):
            fn = ""
        for pat, why in FORBIDDEN:
            for h in re.finditer(pat, line):
                name = re.match(r"\w+", h.group(0)).group(0)
                if name != declared:
                    yield no, fn, name, why


def selftest():
    src = """/* pthread_cond_timedwait in a comment, time(NULL) too */
static int wait_a_bit(pthread_cond_t *cv, pthread_mutex_t *mu) {
    const char *s = "CLOCK_REALTIME in a string";
    x->time(3);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return pthread_cond_timedwait(cv, mu, &ts);
}
double stamp(void) { return (double)time(NULL); }
"""
    got = [(no, fn, name) for no, fn, name, _ in hits(src)]
    want = [(6, "wait_a_bit", "CLOCK_REALTIME"), (7, "wait_a_bit", "pthread_cond_timedwait"),
            (9, "stamp", "time")]
    if got != want:
        sys.exit(f"clock_check self-test: found {got}, expected {want}")


def main():
    root = sys.argv[1]
    selftest()
    bad, used = [], set()
    for top in SCOPE:
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(EXTS):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                for no, fn, name, why in hits(text):
                    key = (rel, fn, name)
                    if key in ALLOWED:
                        used.add(key)
                    else:
                        bad.append(f"{rel}:{no}: in {fn or '(file scope)'}: {name}: {why}")
    for key in sorted(set(ALLOWED) - used):
        bad.append(f"tests/test_clock_check.py: allow-list entry {key} matches nothing "
                   f"(remove it, or follow the code it meant)")
    if bad:
        print("wall-clock uses outside the allow-list (deadlines and waits must be monotonic, "
              "runtime/base/al_base.h \"time\"):")
        for b in bad:
            print("  " + b)
        return 1
    print(f"clock_check: {len(used)} allowed wall-clock uses, none else in {', '.join(SCOPE)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
