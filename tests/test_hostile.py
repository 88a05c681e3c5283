#!/usr/bin/python3
"""A hostile peer against real agents (issue 17). Sites a and b run `autoloco
agent` with c listed as their third site; c is this script, with c's valid
certificate (and mallory's, a certificate of the run's CA for no listed
site). While a and b train, c:
  - pushes a reduce shard announcing 64 MiB, far more than a shard of this
    model can take encoded: refused OUT_OF_RANGE before anything is allocated;
  - forges a gather: pushes b a valid encoded "mean" of shard 0 of {a, b} (a's
    shard: 50.0 in every value), for the round in progress and the next. It is
    stored in c's own slot and never read: b takes a's shard only from a;
  - pulls a's θ state slowly: takes the first 1 MiB chunk, waits (within the
    server's 10 s idle timeout) until a has committed another round and
    replaced the snapshot being streamed, then reads the rest: the state
    arrives whole (its SHA-256 trailer holds);
  - opens 8 PushShard streams that send nothing: 2 are held, 6 end at once
    RESOURCE_EXHAUSTED (each newer one takes the slot of an idle older one:
    server.c, issue 32), and a and b go on;
  - opens 8 such streams as mallory: all refused at once (PERMISSION_DENIED);
  - never sends statistics, so a and b leave it out of every round.
Then a and b must finish with status 0 and the same theta, their logs naming
c, within a time that shows the idle streams did not hold their rounds, and
the rounds committed while c's idle streams were open may take no more than
one heartbeat (1 s) longer than the rounds before them did, beyond a's own
training (a's commit spacing less its compute_s, 90th percentile: a held
server thread would delay every round).

usage: test_hostile.py AUTOLOCO PROTO_DIR
Exits 77 (meson's "skipped") when grpcio, protobuf or protoc is missing.
"""
import json
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from free_port import free_port  # noqa: E402  (below the ephemeral range: see there)

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
preset = demo
[data]
train = {tmp}/data/train.bin
val = {tmp}/data/val.bin
[inner]
batch = 4
seq = 32
steps = 800
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


def channel(tmp, site, port, extra=(), server="a"):
    creds = grpc.ssl_channel_credentials(read(f"{tmp}/certs/ca.pem"), read(f"{tmp}/certs/{site}.key"),
                                         read(f"{tmp}/certs/{site}.pem"))
    return grpc.secure_channel(f"127.0.0.1:{port}", creds,
                               options=[("grpc.ssl_target_name_override", server)] + list(extra))


def encode_int8_const(v, n, block=128):
    """n copies of v in the codec's int8 encoding (outer/al_codec.h), without
    zstd: a 48-byte header, the blocks' fp32 scales (absmax / 127), then the
    quantised values (all 127). The run's codec is int8: a shard must fit its
    bound (an fp32 one is refused OUT_OF_RANGE before allocation)."""
    import struct
    from xxh64 import xxh64
    nb = (n + block - 1) // block
    body = struct.pack(f"<{nb}f", *([v / 127.0] * nb)) + bytes([127]) * n
    return struct.pack("<IBBBBIIQQQQ", 0x44434C41, 1, 3, 0, 0, block, 0, n, len(body), len(body),
                       xxh64(body)) + body


def forge_gather(pb, tmp, ports, nparams):
    """c pushes b the mean of a's shard (shard 0 of the 2 members a, b)."""
    from xxh64 import xxh64
    ch = channel(tmp, "c", ports["b"], server="b")
    push = ch.stream_unary("/autoloco.v1.Site/PushShard",
                           request_serializer=pb.ShardChunk.SerializeToString,
                           response_deserializer=pb.ShardAck.FromString)
    ping = ch.unary_unary("/autoloco.v1.Site/Ping", request_serializer=pb.Heartbeat.SerializeToString,
                          response_deserializer=pb.Heartbeat.FromString)
    enc = encode_int8_const(50.0, nparams // 2)  # shard 0 of 2: [0, P/2)
    sums = (xxh64(enc), xxh64(enc))
    # for the round after b's current one (b takes rounds r and r + 1; rounds
    # here last half a second, so try again if b moved on meanwhile)
    codes = []
    for _ in range(5):
        r = ping(pb.Heartbeat(schema=1, site="c", round=0, epoch=0), timeout=10).round + 1
        # the attempt of epoch 0 with members a, b: epoch << 16 | 0b011; shard 0 (a's)
        msg = pb.ShardChunk(schema=1, site="c", round=r, epoch=0b011, phase=pb.PHASE_GATHER,
                            shard_id=0, num_shards=16,
                            offset=0, total_bytes=len(enc), codec=pb.CODEC_INT8, zstd=False,
                            payload=enc, checksum=sums[0], shard_checksum=sums[1])
        try:
            push(iter([msg]), timeout=20)
            codes.append(f"round {r}: OK")
            break
        except grpc.RpcError as e:
            codes.append(f"round {r}: {e.code().name}: {e.details()}")
    ch.close()
    check("a forged mean of a's shard (50.0 everywhere), pushed to b, is taken (into c's slot)",
          codes[-1].endswith(": OK"), " | ".join(codes))


def slow_pull(pb, tmp, port):
    """Pull a's θ state, stalling after the first chunk until a commits a round
    (a reader stalled longer than the idle timeout is cut off, by design);
    returns the number of parameters the state holds."""
    import hashlib
    import struct
    ch = channel(tmp, "c", port, [("grpc.http2.lookahead_bytes", 16384), ("grpc.http2.bdp_probe", 0)])
    pull = ch.unary_stream("/autoloco.v1.Site/PullState",
                           request_serializer=pb.StateRequest.SerializeToString,
                           response_deserializer=pb.StateChunk.FromString)
    ping = ch.unary_unary("/autoloco.v1.Site/Ping", request_serializer=pb.Heartbeat.SerializeToString,
                          response_deserializer=pb.Heartbeat.FromString)
    hb = pb.Heartbeat(schema=1, site="c", round=0, epoch=0)
    t_end = time.time() + 60
    while ping(hb, timeout=10).round < 1 and time.time() < t_end:  # past the start: rounds commit
        time.sleep(0.1)
    it = pull(pb.StateRequest(schema=1, site="c", run_id="hostile", part=pb.STATE_THETA), timeout=120)
    first = next(it)
    r0 = ping(pb.Heartbeat(schema=1, site="c", round=0, epoch=0), timeout=10).round
    t_end = time.time() + 2  # the agent's idle timeout is its round deadline, 3 s
    while time.time() < t_end:
        if ping(pb.Heartbeat(schema=1, site="c", round=0, epoch=0), timeout=10).round >= r0 + 1:
            break
        time.sleep(0.1)
    r1 = ping(pb.Heartbeat(schema=1, site="c", round=0, epoch=0), timeout=10).round
    buf = bytearray(first.payload)
    chunks = 1
    for c in it:
        assert c.offset == len(buf), (c.offset, len(buf))
        buf += c.payload
        chunks += 1
    ch.close()
    n = struct.unpack_from("<Q", buf, 16)[0]
    whole = len(buf) == first.total_bytes == 56 + 8 * n + 64  # header, θ and momentum, trailer
    sha_ok = hashlib.sha256(bytes(buf[:-64])).hexdigest().encode() == bytes(buf[-64:])
    check(f"a {len(buf)} B state read slowly ({chunks} chunks) while a went from round {r0} to {r1}:"
          " whole, its SHA-256 trailer holds", whole and sha_ok and chunks > 1 and r1 >= r0 + 1,
          f"total {first.total_bytes}, n {n}, sha {'ok' if sha_ok else 'BAD'}")
    return n


def outcome(f, wait):
    try:
        e = f.exception(timeout=wait)
    except grpc.FutureTimeoutError:
        return "still open"
    return e.code() if e else grpc.StatusCode.OK


def attack(pb, tmp, ports):
    port = ports["a"]
    ch = channel(tmp, "c", port)
    push = ch.stream_unary("/autoloco.v1.Site/PushShard",
                           request_serializer=pb.ShardChunk.SerializeToString,
                           response_deserializer=pb.ShardAck.FromString)
    ping = ch.unary_unary("/autoloco.v1.Site/Ping", request_serializer=pb.Heartbeat.SerializeToString,
                          response_deserializer=pb.Heartbeat.FromString)
    hb = ping(pb.Heartbeat(schema=1, site="c", round=0, epoch=0), timeout=10)
    # shard 0 of the 3 members a, b, c (attempt tag: epoch << 16 | 0b111), announcing 64 MiB
    part = bytes(1024)
    big = pb.ShardChunk(schema=1, site="c", round=hb.round, epoch=hb.epoch << 16 | 0b111,
                        phase=pb.PHASE_REDUCE, shard_id=0, num_shards=16,
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
    check("a 64 MiB shard for a model of 454,144 parameters -> OUT_OF_RANGE, before allocation",
          code == grpc.StatusCode.OUT_OF_RANGE and "more than such a shard can take" in details,
          f"{code.name}: {details}")

    forge_gather(pb, tmp, ports, slow_pull(pb, tmp, port))

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
    t_idle = time.time()
    chc, relc, futc = idle("c", 8)
    time.sleep(1.0)
    refused = sum(1 for f in futc if outcome(f, 0.01) == grpc.StatusCode.RESOURCE_EXHAUSTED)
    check("8 idle streams as c -> 6 refused RESOURCE_EXHAUSTED, 2 held", refused == 6,
          f"refused {refused}")
    ch.close()
    return chc, relc, futc, t_idle


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
        held = attack(pb, tmp, ports)
        rcs = [p.wait(timeout=280) for p in procs]
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
        # 80 rounds, each waiting at most deadline_s (3 s) for c's statistics;
        # idle streams holding threads would add deadlines on top
        check("the run took no longer than its rounds' deadlines allow", dt < 80 * 3 + 40,
              f"{dt:.1f} s")
        # and per round: c's 2 idle streams (held to the end) and the 6 refused
        # delay no round by more than one heartbeat (1 s). A round's spacing
        # from the one before is a's training (compute_s) and the rest: the
        # exchange, the vote, waiting for b. A held server thread would add to
        # the rest of every round, so the check is on that rest while the
        # streams are open against before they were opened. (Not on the raw
        # spacing: that follows the training's speed, which drifts -- it grew
        # ninefold over this run while subnormal floats were not flushed.) One
        # slow round is this machine's load (CI runs this beside other
        # tests), so the bound is on the 90th percentile; the worst is shown.
        recs = [json.loads(ln) for ln in open(f"{tmp}/run-a/events.jsonl") if '"round"' in ln]
        recs = [r for r in recs if r.get("event", "round") == "round"]
        # (commit time, spacing from the one before, that spacing less a's training)
        rounds = [(r1["t"], r1["t"] - r0["t"], r1["t"] - r0["t"] - r1["compute_s"])
                  for r0, r1 in zip(recs, recs[1:])]
        spacing = [sp for _, sp, _ in rounds]
        before = [rest for t, _, rest in rounds if t < held[3]]
        during = [rest for t, sp, rest in rounds if t - sp > held[3] + 1.0]
        med = statistics.median(before) if before else float("nan")
        p90 = statistics.quantiles(during, n=10)[-1] if len(during) >= 2 else float("nan")
        worst = max(during) if during else float("nan")
        check("idle streams delay no round by more than one heartbeat (1 s)",
              len(before) >= 1 and len(during) >= 10 and p90 - med <= 1.0,
              f"a round's spacing less a's training, before the idle streams: median "
              f"{med:.3f} s of {len(before)}; while they are open: 90th percentile {p90:.3f} s, "
              f"worst {worst:.3f} s, of {len(during)} (spacing: median "
              f"{statistics.median(spacing):.3f} s)")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
