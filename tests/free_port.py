#!/usr/bin/env python3
"""tests/free_port.py -- a free TCP port on 127.0.0.1 for an agent to listen on.

Not port 0's choice: the kernel hands out listening ports from the ephemeral
range (net.ipv4.ip_local_port_range, 32768-60999 by default), the same range
every outgoing connection's local port comes from. Between the moment a test
picks a port and the moment its agent binds it, a gRPC client of another test
running beside it (meson runs the multi-site suites in parallel) could take it
as its local port, and the agent then fails with "cannot listen" (CI saw it).
Ports are drawn at random from the 12,000 below that range (read from the
kernel) and checked by binding.

A port checked free is not yet taken: the agent binds it a moment later (and a
killed agent restarted with --resume binds its port again seconds later). So
that no test running beside (meson runs the agent sections in parallel) is
handed the same port meanwhile, each port handed out is reserved for
RESERVE_S seconds by a file created exclusively in a folder shared by all
tests of this user ($TMPDIR/al-ports.UID); a reservation older than that is
taken over.

usage: free_port.py   (prints one port)
"""
import os
import random
import socket
import tempfile
import time

RESERVE_S = 3600  # longer than any test (meson's longest timeout x the sanitizer run's 4)


def ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def reserve(d, p):
    """True if port p is now ours: its file created here, or an expired one taken over."""
    f = os.path.join(d, str(p))
    try:
        os.close(os.open(f, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        return True
    except FileExistsError:
        pass
    try:
        if time.time() - os.stat(f).st_mtime < RESERVE_S:
            return False
        # expired: take it over by renaming a fresh file onto it; of two
        # takers the one whose file stays won (the other sees its inode gone)
        mine = f"{f}.{os.getpid()}"
        os.close(os.open(mine, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644))
        ino = os.stat(mine).st_ino
        os.replace(mine, f)
        time.sleep(0.01)
        return os.stat(f).st_ino == ino
    except OSError:
        return False


def free_port():
    high = ephemeral_low() - 1
    low = max(1024, high - 12000)
    d = os.path.join(tempfile.gettempdir(), f"al-ports.{os.getuid()}")
    os.makedirs(d, exist_ok=True)
    for _ in range(1000):
        p = random.randint(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
        if reserve(d, p):
            return p
    raise RuntimeError(f"no free port in {low}..{high} after 1000 tries")


if __name__ == "__main__":
    print(free_port())
