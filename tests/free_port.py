#!/usr/bin/env python3
"""tests/free_port.py -- a free TCP port on 127.0.0.1 for an agent to listen on.

Not port 0's choice: the kernel hands out listening ports from the ephemeral
range (net.ipv4.ip_local_port_range, 32768-60999 by default), the same range
every outgoing connection's local port comes from. Between the moment a test
picks a port and the moment its agent binds it, a gRPC client of another test
running beside it (meson runs the multi-site suites in parallel) could take it
as its local port, and the agent then fails with "cannot listen" (CI saw it).
Ports are drawn at random from below that range and checked by binding.

usage: free_port.py [N]   (prints N ports, one per line; default 1)
"""
import random
import socket
import sys

LOW, HIGH = 20000, 32000  # below the ephemeral range


def free_port():
    for _ in range(1000):
        p = random.randint(LOW, HIGH)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
            return p
    raise RuntimeError(f"no free port in {LOW}..{HIGH} after 1000 tries")


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    seen = set()
    while len(seen) < n:
        seen.add(free_port())
    print("\n".join(str(p) for p in seen))
