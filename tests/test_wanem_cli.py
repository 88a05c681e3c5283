"""test_wanem_cli.py AUTOLOCO -- `autoloco wanem`'s runtime control: a connection
through the proxy is cut on SIGUSR1, new ones are refused (accepted, then reset:
nothing reaches the server) until SIGUSR2, and accepted and forwarded after it;
SIGTERM then stops the proxy, which counts 2 connections, 1 cut, >= 3 refused.
Then a server that closes while its client keeps sending (a killed agent): the
proxy must live on (it died of SIGPIPE and took its link down for good) and
forward a new connection."""
import select
import signal
import socket
import struct
import subprocess
import sys
import time

binary = sys.argv[1]
fails = 0


def check(cond, what):
    global fails
    print(("ok: " if cond else "FAIL: ") + what)
    fails += 0 if cond else 1
    return cond


def ready(s, secs):
    return bool(select.select([s], [], [], secs)[0])


def passes(a, b):
    a.sendall(b"x")
    return ready(b, 2) and b.recv(1) == b"x"


def closed(s):
    """the proxy closed s: EOF or a reset within 2 s"""
    if not ready(s, 2):
        return False
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


target = socket.socket()
target.bind(("127.0.0.1", 0))
target.listen(8)
proc = subprocess.Popen([binary, "wanem", "--to", "127.0.0.1:%d" % target.getsockname()[1],
                         "--duration", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                        text=True)
try:
    first = proc.stdout.readline()  # "wanem: 127.0.0.1:PORT -> ..." once the signals are blocked
    port = int(first.split()[1].split(":")[1])
    c1 = socket.create_connection(("127.0.0.1", port))
    check(ready(target, 2), "a connection through the proxy reaches the server")
    s1, _ = target.accept()
    check(passes(c1, s1) and passes(s1, c1), "bytes pass both ways")
    proc.send_signal(signal.SIGUSR1)
    check(closed(c1) and closed(s1), "SIGUSR1 cuts the open connection on both sides")
    refused = 0
    for _ in range(3):
        c = socket.create_connection(("127.0.0.1", port))
        refused += closed(c)
        c.close()
    check(refused == 3 and not ready(target, 0.3),
          "while held, new connections are reset and never reach the server (%d of 3)" % refused)
    proc.send_signal(signal.SIGUSR2)
    # SIGUSR2 is handled asynchronously: retry until the proxy forwards again
    s2 = None
    for _ in range(20):
        c2 = socket.create_connection(("127.0.0.1", port))
        if ready(target, 0.5):
            s2, _ = target.accept()
            break
        c2.close()
    check(s2 is not None and passes(c2, s2) and passes(s2, c2),
          "after SIGUSR2 a new connection is accepted and forwarded")
    # a server gone while its client still sends: closed gracefully (the
    # proxy's next writes after the server's RST raise SIGPIPE with write(2))
    # and reset at once (SO_LINGER 0), twice each
    for k in range(4):
        try:
            c3 = socket.create_connection(("127.0.0.1", port))
        except ConnectionRefusedError:
            break  # the proxy is gone (checked below)
        if not ready(target, 2):
            break
        s3, _ = target.accept()
        if k % 2:
            s3.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s3.close()
        try:
            for _ in range(200):
                c3.send(b"x" * 4096)
                time.sleep(0.001)
        except OSError:
            pass
        c3.close()
    time.sleep(0.3)
    alive = check(proc.poll() is None,
                  "it lives on after servers closed under a sending client (rc %s)" % proc.poll())
    s4 = None
    if alive:
        c4 = socket.create_connection(("127.0.0.1", port))
        if ready(target, 2):
            s4, _ = target.accept()
    check(s4 is not None and passes(c4, s4) and passes(s4, c4),
          "and forwards a new connection after them")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    check(proc.returncode == 0, "SIGTERM stops it with status 0 (got %s)" % proc.returncode)
    # "wanem: U bytes up, D down, N connections, C cuts, R refused"; a retry above may add refusals
    words = out.strip().splitlines()[-1].replace(",", "").split()
    n, cuts, refused = int(words[6]), int(words[8]), int(words[10])
    check(n == 7 and cuts == 1 and refused >= 3,
          "it counts 7 connections, 1 cut, >= 3 refused: %s" % out.strip().splitlines()[-1])
    check("refusing until released" in err and "accepting connections again" in err,
          "its log says so: %s" % " / ".join(err.strip().splitlines()))
finally:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
print("%s" % ("all passed" if fails == 0 else "%d failed" % fails))
sys.exit(1 if fails else 0)
