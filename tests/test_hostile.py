#!/usr/bin/python3
"""A hostile peer against real agents (issue 17). Sites a and b run `autoloco
agent` with c listed as their third site; c is this script, with c's valid
certificate (and mallory's, a certificate of the run's CA for no listed
site). While a and b train, c:
  - pushes a reduce shard announcing 64 MiB, far more than a shard of this
    model can take encoded: refused OUT_OF_RANGE before anything is allocated;
  - opens 8 PushShard streams that send nothing: 2 are held, 6 refused at once
    (RESOURCE_EXHAUSTED), and a and b go on;
  - opens 8 such streams as mallory: all refused at once (PERMISSION_DENIED);
  - never sends statistics, so a and b leave it out of every round.
Then a and b must finish with status 0 and the same theta, their logs naming
c, within a time that shows the idle streams did not hold their rounds.

usage: test_hostile.py AUTOLOCO PROTO_DIR
Exits 77 (meson's "skipped") when grpcio, protobuf or protoc is missing.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
try:
    import grpc
    import google.protobuf  # noqa: F401
except ImportError as e:
    print(f"SKIP: {e} (apt-get install python3-grpcio python3-protobuf)")
    sys.exit(SKIP)
if not shutil.which("protoc"):
    print("SKIP: protoc not found (apt-get install protobuf-compiler)")
    sys.exit(SKIP)

AUTOLOCO, PROTO_DIR = os.path.abspath(sys.argv[1]), sys.argv[2]
failures = 0


def check(what, cond, detail=""):
    global failures
    print(f"{'ok  ' if cond else 'FAIL'} {what}" + (f"  [{detail}]" if detail else ""), flush=True)
    failures += 0 if cond else 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def conf(tmp, me, ports):
    peers = "\n".join(f"{s} = 127.0.0.1:{ports[s]}" for s in "abc" if s != me)
    return f"""[site]
name = {me}
listen = 127.0.0.1:{ports[me]}
run_id = hostile
[peers]
{peers}
[tls]
ca = {tmp}/certs/ca.pem
cert = {tmp}/certs/{me}.pem
key = {tmp}/certs/{me}.key
[model]
preset = tiny
[data]
train = {tmp}/data/train.bin
val = {tmp}/data/val.bin
[inner]
batch = 4
seq = 32
steps = 60
warmup = 5
lr = 1e-2
threads = 1
eval_every = 0
eval_batches = 4
[outer]
codec = int8+zstd
[policy]
name = fixed
h_base = 10
[round]
deadline_s = 3
[checkpoint]
dir = {tmp}/run-{me}
every = 0
"""


def read(path):
    with open(path, "rb") as f:
        return f.read()


def channel(tmp, site, port):
    creds = grpc.ssl_channel_credentials(read(f"{tmp}/certs/ca.pem"), read(f"{tmp}/certs/{site}.key"),
                                         read(f"{tmp}/certs/{site}.pem"))
    return grpc.secure_channel(f"127.0.0.1:{port}", creds,
                               options=[("grpc.ssl_target_name_override", "a")])


def outcome(f, wait):
    try:
        e = f.exception(timeout=wait)
    except grpc.FutureTimeoutError:
        return "still open"
    return e.code() if e else grpc.StatusCode.OK


def attack(pb, tmp, port):
    ch = channel(tmp, "c", port)
    push = ch.stream_unary("/autoloco.v1.Site/PushShard",
                           request_serializer=pb.ShardChunk.SerializeToString,
                           response_deserializer=pb.ShardAck.FromString)
    ping = ch.unary_unary("/autoloco.v1.Site/Ping", request_serializer=pb.Heartbeat.SerializeToString,
                          response_deserializer=pb.Heartbeat.FromString)
    hb = ping(pb.Heartbeat(schema=1, site="c", round=0, epoch=0), timeout=10)
    # shard 0 of 3 members (id M(M-1)/2 + k = 3), announcing 64 MiB
    part = bytes(1024)
    big = pb.ShardChunk(schema=1, site="c", round=hb.round, epoch=hb.epoch, phase=pb.PHASE_REDUCE,
                        shard_id=3, num_shards=136,  # AG_SHARD_SPACE
                        offset=0, total_bytes=64 << 20,
                        codec=pb.CODEC_INT8, zstd=True, payload=part, checksum=0,
                        shard_checksum=0)
    from xxh64 import xxh64
    big.checksum = xxh64(part)
    try:
        push(iter([big]), timeout=20)
        code, details = grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        code, details = e.code(), e.details()
    check("a 64 MiB shard for a model of 36,736 parameters -> OUT_OF_RANGE, before allocation",
          code == grpc.StatusCode.OUT_OF_RANGE and "more than such a shard can take" in details,
          f"{code.name}: {details}")

    def idle(site, n):
        c2 = channel(tmp, site, port)
        p2 = c2.stream_unary("/autoloco.v1.Site/PushShard",
                             request_serializer=pb.ShardChunk.SerializeToString,
                             response_deserializer=pb.ShardAck.FromString)
        release = threading.Event()

        def held():
            release.wait(60)
            return
            yield

        return c2, release, [p2.future(held(), timeout=90) for _ in range(n)]

    chm, relm, futm = idle("mallory", 8)
    codes = [outcome(f, 3) for f in futm]
    check("8 idle streams as mallory -> all PERMISSION_DENIED at once",
          all(c == grpc.StatusCode.PERMISSION_DENIED for c in codes),
          str([getattr(c, "name", c) for c in codes]))
    relm.set()
    chm.close()
    chc, relc, futc = idle("c", 8)
    time.sleep(1.0)
    refused = sum(1 for f in futc if outcome(f, 0.01) == grpc.StatusCode.RESOURCE_EXHAUSTED)
    check("8 idle streams as c -> 6 refused RESOURCE_EXHAUSTED, 2 held", refused == 6,
          f"refused {refused}")
    ch.close()
    return chc, relc, futc


def main():
    tmp = tempfile.mkdtemp(prefix="al-test-hostile.")
    procs = []
    try:
        inp = os.path.join(tmp, "in")
        os.mkdir(inp)
        with open(os.path.join(inp, "f"), "w") as f:
            for i in range(300):
                f.write(f"fortune {i}: " + "x" * (i % 97 + 3) + "\n%\n")
        subprocess.run([AUTOLOCO, "data", "prep", "--format", "fortune", "-o", f"{tmp}/data", inp],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([AUTOLOCO, "certs", "--dir", f"{tmp}/certs", "--sites", "a,b,c,mallory"],
                       check=True, stdout=subprocess.DEVNULL)
        gen = os.path.join(tmp, "gen")
        os.mkdir(gen)
        subprocess.run(["protoc", f"--python_out={gen}", f"--proto_path={PROTO_DIR}",
                        os.path.join(PROTO_DIR, "autoloco.proto")], check=True)
        sys.path.insert(0, gen)
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import autoloco_pb2 as pb

        ports = {s: free_port() for s in "abc"}
        for s in "ab":
            with open(f"{tmp}/{s}.ini", "w") as f:
                f.write(conf(tmp, s, ports))
        t0 = time.time()
        for s in "ab":
            log = open(f"{tmp}/{s}.log", "w")
            procs.append(subprocess.Popen([AUTOLOCO, "agent", "-c", f"{tmp}/{s}.ini"], stdout=log,
                                          stderr=subprocess.STDOUT))
        # wait until a's server answers, then attack it
        for _ in range(200):
            if "listening on port" in open(f"{tmp}/a.log").read():
                break
            time.sleep(0.1)
        held = attack(pb, tmp, ports["a"])
        rcs = [p.wait(timeout=240) for p in procs]
        dt = time.time() - t0
        held[1].set()
        held[0].close()
        logs = {s: open(f"{tmp}/{s}.log").read() for s in "ab"}
        sums = [json.load(open(f"{tmp}/run-{s}/summary.json")) for s in "ab"]
        check("a and b finish with status 0 and the same theta",
              rcs == [0, 0] and sums[0]["theta_hash"] == sums[1]["theta_hash"],
              f"status {rcs}")
        refusals = [ln for ln in logs["a"].splitlines() if "refused" in ln]
        check("a's log names c and mallory and why",
              any("refused c: OUT_OF_RANGE" in ln and "more than such a shard" in ln
                  for ln in refusals) and
              any("refused c: RESOURCE_EXHAUSTED" in ln for ln in refusals) and
              any("refused mallory: PERMISSION_DENIED" in ln for ln in refusals),
              " | ".join(sorted(set(ln[:110] for ln in refusals))))
        # 6 rounds, each waiting at most deadline_s (3 s) for c's statistics;
        # idle streams holding threads would add deadlines on top
        check("the run took no longer than its rounds' deadlines allow", dt < 6 * 3 + 40,
              f"{dt:.1f} s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
