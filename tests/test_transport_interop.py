#!/usr/bin/python3
"""An independent client against the C server: Debian's python3-grpcio and
python3-protobuf, messages generated from transport/proto/autoloco.proto by
Debian's protoc. Sends a handshake and shard chunks over mutual TLS, checks
the replies, then provokes each refusal of issue 4 and checks its status.

usage: test_transport_interop.py AUTOLOCO TEST_SERVER PROTO_DIR
Exits 77 (meson's "skipped") when grpcio, protobuf or protoc is missing.
"""
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77


def skip(why):
    print("SKIP:", why)
    sys.exit(SKIP)


try:
    import grpc
    import google.protobuf  # noqa: F401
except ImportError as e:  # run under /usr/bin/python3 with Debian's packages
    skip(f"{e} (apt-get install python3-grpcio python3-protobuf)")
if not shutil.which("protoc"):
    skip("protoc not found (apt-get install protobuf-compiler)")

AUTOLOCO, SERVER, PROTO_DIR = sys.argv[1:4]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from xxh64 import xxh64  # noqa: E402

failures = []


def check(what, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + what + (f"  [{detail}]" if detail else ""))
    if not cond:
        failures.append(what)


def main():
    tmp = tempfile.mkdtemp(prefix="al-interop-")
    try:
        run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s):", ", ".join(failures))
        sys.exit(1)
    print("all interop checks passed")


def run(tmp):
    certs, other = os.path.join(tmp, "certs"), os.path.join(tmp, "other")
    subprocess.run([AUTOLOCO, "certs", "--dir", certs, "--sites", "a,b,c,mallory"], check=True)
    subprocess.run([AUTOLOCO, "certs", "--dir", other, "--sites", "b"], check=True)
    gen = os.path.join(tmp, "gen")
    os.mkdir(gen)
    subprocess.run(["protoc", f"--python_out={gen}", f"--proto_path={PROTO_DIR}",
                    os.path.join(PROTO_DIR, "autoloco.proto")], check=True)
    sys.path.insert(0, gen)
    import autoloco_pb2 as pb

    max_msg = (1 << 20) + (64 << 10)
    srv = subprocess.Popen([SERVER, certs, "a", "b,c", "run-1", str(max_msg)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = srv.stdout.readline().split()
        if len(line) != 2 or line[0] != "PORT":
            raise RuntimeError(f"server did not start: {line}")
        target = f"127.0.0.1:{line[1]}"
        exercise(pb, certs, other, target, srv)
    finally:
        srv.stdin.close()
        rest = srv.stdout.read()
        rc = srv.wait(timeout=60)
        check("server stops cleanly when asked", rc == 0 and "STOPPED" in rest, f"rc={rc}")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def channel(certs_ca, certs, site, target):
    cert = (read(os.path.join(certs, f"{site}.key")), read(os.path.join(certs, f"{site}.pem"))) \
        if site else (None, None)
    creds = grpc.ssl_channel_credentials(read(os.path.join(certs_ca, "ca.pem")), *cert)
    opts = [("grpc.ssl_target_name_override", "a"),
            ("grpc.max_send_message_length", 8 << 20),
            ("grpc.max_receive_message_length", 8 << 20)]
    return grpc.secure_channel(target, creds, options=opts)


def code_of(fn):
    try:
        fn()
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()


def exercise(pb, certs, other, target, srv):
    ch = channel(certs, certs, "b", target)
    ident = (lambda b: b)
    hello = ch.unary_unary("/autoloco.v1.Site/Hello", request_serializer=pb.Handshake.SerializeToString,
                           response_deserializer=pb.HandshakeReply.FromString)
    push = ch.stream_unary("/autoloco.v1.Site/PushShard",
                           request_serializer=pb.ShardChunk.SerializeToString,
                           response_deserializer=pb.ShardAck.FromString)
    ping = ch.unary_unary("/autoloco.v1.Site/Ping", request_serializer=pb.Heartbeat.SerializeToString,
                          response_deserializer=pb.Heartbeat.FromString)
    raw_hello = ch.unary_unary("/autoloco.v1.Site/Hello", request_serializer=ident,
                               response_deserializer=ident)

    def handshake(site="b"):
        return pb.Handshake(schema=1, site=site, run_id="run-1", round=10, epoch=2,
                            theta_hash=bytes(32), config_hash=bytes(32), next_interval=20,
                            members=["a", "b"])

    rep = hello(handshake(), timeout=20)
    check("handshake answered by site a", rep.server.site == "a" and rep.server.next_interval == 25,
          f"site={rep.server.site} H={rep.server.next_interval}")

    data = bytes((i * 31 + (i >> 9)) & 0xFF for i in range(2_500_000))
    total, cs = len(data), xxh64(data)

    def chunks(d=data, shard=1, step=1 << 20, **over):
        for off in range(0, len(d), step):
            part = d[off:off + step]
            fields = dict(schema=1, site="b", round=10, epoch=2, phase=pb.PHASE_REDUCE,
                          shard_id=shard, num_shards=4, offset=off, total_bytes=len(d),
                          codec=pb.CODEC_INT4, zstd=True, payload=part, checksum=xxh64(part),
                          shard_checksum=xxh64(d))
            fields.update(over)
            yield pb.ShardChunk(**fields)

    ack = push(chunks(), timeout=60)
    check("shard of 3 chunks acknowledged", ack.complete and ack.received_bytes == total,
          f"received={ack.received_bytes}")
    got = srv.stdout.readline().split()
    check("server assembled the same bytes", got == ["SHARD", "b", "1", str(total), f"{cs:016x}"],
          " ".join(got))

    small = bytes(range(256)) * 4
    wrong_run = handshake()
    wrong_run.run_id = "run-2"
    cases = [
        ("duplicate shard", lambda: push(chunks(), timeout=20), grpc.StatusCode.ALREADY_EXISTS),
        ("malformed protobuf", lambda: raw_hello(b"\xff\xff\xff\xff\x0f", timeout=20),
         grpc.StatusCode.INVALID_ARGUMENT),
        ("wrong offset", lambda: push(chunks(small, shard=0, offset=64, total_bytes=2048), timeout=20),
         grpc.StatusCode.OUT_OF_RANGE),
        ("wrong shard size", lambda: push(chunks(small, shard=0, total_bytes=4096), timeout=20),
         grpc.StatusCode.OUT_OF_RANGE),
        ("shard id out of range", lambda: push(chunks(small, shard=4), timeout=20),
         grpc.StatusCode.OUT_OF_RANGE),
        ("stale round", lambda: push(chunks(small, shard=0, round=9), timeout=20),
         grpc.StatusCode.FAILED_PRECONDITION),
        ("stale epoch", lambda: push(chunks(small, shard=0, epoch=1), timeout=20),
         grpc.StatusCode.FAILED_PRECONDITION),
        ("unknown codec", lambda: push(chunks(small, shard=0, codec=7), timeout=20),
         grpc.StatusCode.UNIMPLEMENTED),
        ("bad checksum", lambda: push(chunks(small, shard=0, checksum=12345), timeout=20),
         grpc.StatusCode.DATA_LOSS),
        ("oversize message", lambda: push(chunks(bytes(2 << 20), shard=0, step=2 << 20), timeout=20),
         grpc.StatusCode.RESOURCE_EXHAUSTED),
        ("another site's name", lambda: hello(handshake("c"), timeout=20),
         grpc.StatusCode.PERMISSION_DENIED),
        ("wrong run id", lambda: hello(wrong_run, timeout=20), grpc.StatusCode.FAILED_PRECONDITION),
    ]
    for what, fn, want in cases:
        code, details = code_of(fn)
        check(f"{what} -> {want.name}", code == want, f"{code.name}: {details}")

    for what, ca_dir, cert_dir, site in [("client certificate from another CA", certs, other, "b"),
                                         ("no client certificate", certs, certs, None)]:
        bad = channel(ca_dir, cert_dir, site, target)
        f = bad.unary_unary("/autoloco.v1.Site/Hello",
                            request_serializer=pb.Handshake.SerializeToString,
                            response_deserializer=pb.HandshakeReply.FromString)
        code, details = code_of(lambda: f(handshake(), timeout=10))
        check(f"{what} -> UNAVAILABLE", code == grpc.StatusCode.UNAVAILABLE, f"{code.name}: {details}")
        bad.close()

    mal = channel(certs, certs, "mallory", target)
    f = mal.unary_unary("/autoloco.v1.Site/Hello", request_serializer=pb.Handshake.SerializeToString,
                        response_deserializer=pb.HandshakeReply.FromString)
    code, details = code_of(lambda: f(handshake("mallory"), timeout=10))
    check("unlisted site -> PERMISSION_DENIED", code == grpc.StatusCode.PERMISSION_DENIED,
          f"{code.name}: {details}")
    mal.close()

    identity_cases(pb, certs, target, handshake)
    idle_streams(pb, certs, target)

    # meanwhile the server kept serving: a heartbeat and a second good shard
    hb = ping(pb.Heartbeat(schema=1, site="b", round=10, epoch=2), timeout=20)
    check("heartbeat answered after the refusals", hb.site == "a" and hb.sent_unix_ms > 0)
    ack = push(chunks(small, shard=2), timeout=20)
    check("a good shard still accepted", ack.complete and ack.received_bytes == len(small))
    got = srv.stdout.readline().split()
    check("and assembled", got[:4] == ["SHARD", "b", "2", str(len(small))], " ".join(got))
    ch.close()


def idle_streams(pb, certs, target):
    """Streams that are opened and then send nothing (issue 17): from an
    unlisted certificate they are refused at once, and a listed peer holds at
    most per_peer_calls (2) of the server's 3 threads; either way another
    peer's heartbeat is answered meanwhile."""
    import threading
    import time

    def held(release):
        release.wait(30)
        return
        yield  # a generator that sends nothing until released

    def open_streams(site, n):
        ch = channel(certs, certs, site, target)
        push = ch.stream_unary("/autoloco.v1.Site/PushShard",
                               request_serializer=pb.ShardChunk.SerializeToString,
                               response_deserializer=pb.ShardAck.FromString)
        release = threading.Event()
        futs = [push.future(held(release), timeout=40) for _ in range(n)]
        return ch, release, futs

    def ping_as(site):
        ch = channel(certs, certs, site, target)
        ping = ch.unary_unary("/autoloco.v1.Site/Ping",
                              request_serializer=pb.Heartbeat.SerializeToString,
                              response_deserializer=pb.Heartbeat.FromString)
        t0 = time.time()
        code, details = code_of(lambda: ping(pb.Heartbeat(schema=1, site=site, round=10, epoch=2),
                                             timeout=10))
        ch.close()
        return code, time.time() - t0

    # an unlisted identity: every stream ends with PERMISSION_DENIED at once
    ch, release, futs = open_streams("mallory", 8)
    t0 = time.time()
    def outcome(f, wait):
        try:
            e = f.exception(timeout=wait)
        except grpc.FutureTimeoutError:
            return "still open"
        return e.code() if e else grpc.StatusCode.OK

    codes = [outcome(f, 3) for f in futs]
    dt = time.time() - t0
    check("8 idle streams from an unlisted certificate -> PERMISSION_DENIED within 3 s",
          all(c == grpc.StatusCode.PERMISSION_DENIED for c in codes) and dt < 3,
          f"{[getattr(c, 'name', c) for c in codes]} after {dt:.1f} s")
    code, dt = ping_as("b")
    check("meanwhile b's heartbeat answered within 2 s", code == grpc.StatusCode.OK and dt < 2,
          f"{code.name} after {dt:.1f} s")
    release.set()
    ch.close()

    # a listed peer: 2 of its 8 idle streams are held, 6 end at once (each newer
    # one takes the slot of an idle older one: transport/server_slots.h)
    ch, release, futs = open_streams("b", 8)
    time.sleep(1.0)
    refused = [f for f in futs if f.done() and f.exception() is not None and
               f.exception().code() == grpc.StatusCode.RESOURCE_EXHAUSTED]
    pending = [f for f in futs if not f.done()]
    check("8 idle streams from b: 6 refused RESOURCE_EXHAUSTED, 2 held",
          len(refused) == 6 and len(pending) == 2,
          f"refused {len(refused)}, pending {len(pending)}")
    code, dt = ping_as("c")
    check("meanwhile c's heartbeat answered within 2 s", code == grpc.StatusCode.OK and dt < 2,
          f"{code.name} after {dt:.1f} s")
    # and b's own: a new call of b takes the slot of an idle one (issue 32:
    # refused, idle streams from b's certificate kept b itself out)
    code, dt = ping_as("b")
    # the evicted stream's RESOURCE_EXHAUSTED travels on its own call: it may
    # reach this client a moment after the ping's answer (CI saw 2 still held
    # right after the answer), so give it up to 2 s
    deadline = time.time() + 2
    still = [f for f in futs if not f.done()]
    while len(still) > 1 and time.time() < deadline:
        time.sleep(0.05)
        still = [f for f in futs if not f.done()]
    check("meanwhile b's own heartbeat answered within 2 s, taking an idle stream's slot",
          code == grpc.StatusCode.OK and dt < 2 and len(still) == 1,
          f"{code.name} after {dt:.1f} s, {len(still)} idle stream(s) still held")
    release.set()
    for f in futs:
        outcome(f, 20)
    ch.close()
    code, dt = ping_as("b")
    check("once its streams ended, b is served again", code == grpc.StatusCode.OK,
          f"{code.name} after {dt:.1f} s")


def forge(certs, out, name, cns, dns):
    """A certificate signed by the run's CA (so TLS accepts it) whose subject
    holds the CNs `cns` (raw strings, NUL bytes allowed) and DNS SANs `dns`,
    written as out/name.pem and out/name.key. None when `cryptography` is
    missing (Debian's python3-cryptography)."""
    try:
        import datetime
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        return None
    ca_cert = x509.load_pem_x509_certificate(read(os.path.join(certs, "ca.pem")))
    ca_key = serialization.load_pem_private_key(read(os.path.join(certs, "ca.key")), None)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "autoloco")] +
                        [x509.NameAttribute(NameOID.COMMON_NAME, cn) for cn in cns])
    now = datetime.datetime.utcnow()
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(hours=1))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH,
                                               x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                        critical=False))
    if dns:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]),
                            critical=False)
    cert = b.sign(ca_key, hashes.SHA256())
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{name}.pem"), "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(os.path.join(out, f"{name}.key"), "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return name


def identity_cases(pb, certs, target, handshake):
    """Issue 17: the site is the certificate's single CN, compared with its
    length, confirmed by a DNS SAN when there are any; ambiguity is refused."""
    out = os.path.join(os.path.dirname(certs), "forged")
    cases = [("a certificate made here for b (control)", "ok", ["b"], ["b"], grpc.StatusCode.OK, ""),
             ("CN 'b\\0evil' claiming b", "nul", ["b\x00evil"], [], grpc.StatusCode.PERMISSION_DENIED,
              "NUL"),
             ("two CNs, b and c, claiming b", "two", ["b", "c"], [], grpc.StatusCode.PERMISSION_DENIED,
              "2 CNs"),
             ("CN b whose only DNS SAN is c", "san", ["b"], ["c"], grpc.StatusCode.PERMISSION_DENIED,
              "no DNS name")]
    for what, name, cns, dns, want, words in cases:
        if not forge(certs, out, name, cns, dns):
            check(f"{what}: cannot forge a certificate (python3-cryptography missing)", False)
            return
        ch = channel(certs, out, name, target)
        f = ch.unary_unary("/autoloco.v1.Site/Hello",
                           request_serializer=pb.Handshake.SerializeToString,
                           response_deserializer=pb.HandshakeReply.FromString)
        code, details = code_of(lambda: f(handshake("b"), timeout=10))
        check(f"{what} -> {want.name}", code == want and words in details,
              f"{code.name}: {details}")
        ch.close()


if __name__ == "__main__":
    main()
