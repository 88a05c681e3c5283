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

usage: free_port.py   (prints one port)
"""
import random
import socket


def ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port():
    high = ephemeral_low() - 1
    low = max(1024, high - 12000)
    for _ in range(1000):
        p = random.randint(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
            return p
    raise RuntimeError(f"no free port in {low}..{high} after 1000 tries")


if __name__ == "__main__":
    print(free_port())
