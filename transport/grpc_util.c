/* grpc_util.c -- credentials, channel arguments and byte buffers for the gRPC
 * C core (Debian's libgrpc 1.51). */
#include "grpc_util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>

int tu_read_pem(const char *path, int is_key, char **out, al_err *err) {
    *out = NULL;
    if (!path || !*path)
        return al_errf(err, AL_ECONFIG, "tls: a %s path is missing",
                       is_key ? "key" : "certificate");
    struct stat st;
    if (stat(path, &st))
        return al_errf(err, AL_EIO, "tls: %s: cannot stat: %s", path, strerror(errno));
    if (is_key && (st.st_mode & (S_IRWXG | S_IRWXO)))
        return al_errf(err, AL_ECONFIG,
                       "tls: key %s has mode %04o: others may read it; chmod 600 it first", path,
                       (unsigned)(st.st_mode & 07777));
    size_t len;
    int rc = al_read_file(path, out, &len, err);
    if (rc) return rc;
    if (!strstr(*out, "-----BEGIN ")) {
        free(*out);
        *out = NULL;
        return al_errf(err, AL_EFORMAT, "tls: %s is not a PEM file", path);
    }
    return 0;
}

int tu_server_creds(const al_tls_paths *tls, int insecure, grpc_server_credentials **out,
                    al_err *err) {
    if (insecure) {
        *out = grpc_insecure_server_credentials_create();
        return 0;
    }
    char *ca = NULL, *cert = NULL, *key = NULL;
    int rc;
    if ((rc = tu_read_pem(tls->ca, 0, &ca, err)) || (rc = tu_read_pem(tls->cert, 0, &cert, err)) ||
        (rc = tu_read_pem(tls->key, 1, &key, err)))
        goto done;
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    /* REQUEST_AND_REQUIRE...AND_VERIFY: no client certificate, or one not
     * signed by our CA, and the TLS handshake fails. */
    *out = grpc_ssl_server_credentials_create_ex(
        ca, &pair, 1, GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY, NULL);
    if (!*out) rc = al_errf(err, AL_ECONFIG, "tls: gRPC refused the server credentials");
done:
    free(ca);
    free(cert);
    free(key);
    return rc;
}

int tu_channel_creds(const al_tls_paths *tls, int insecure, grpc_channel_credentials **out,
                     al_err *err) {
    if (insecure) {
        *out = grpc_insecure_credentials_create();
        return 0;
    }
    char *ca = NULL, *cert = NULL, *key = NULL;
    int rc = tu_read_pem(tls->ca, 0, &ca, err);
    if (rc) goto done;
    /* A client without a certificate is allowed to exist (tests use one to
     * check that the server refuses it); a real site always has both. */
    if (tls->cert || tls->key) {
        if ((rc = tu_read_pem(tls->cert, 0, &cert, err)) ||
            (rc = tu_read_pem(tls->key, 1, &key, err)))
            goto done;
    }
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    *out = grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL);
    if (!*out) rc = al_errf(err, AL_ECONFIG, "tls: gRPC refused the channel credentials");
done:
    free(ca);
    free(cert);
    free(key);
    return rc;
}

static grpc_arg int_arg(const char *key, int v) {
    grpc_arg a = {.type = GRPC_ARG_INTEGER, .key = (char *)key};
    a.value.integer = v;
    return a;
}

void tu_args_init(tu_args *t, size_t max_message, const char *peer, int server) {
    size_t n = 0;
    int maxm = max_message > (size_t)INT32_MAX ? INT32_MAX : (int)max_message;
    /* the default receive limit is 4 MiB: both sides must raise it */
    t->a[n++] = int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, maxm);
    t->a[n++] = int_arg(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, maxm);
    /* our own retry loop resumes shards; gRPC's would buffer messages */
    t->a[n++] = int_arg("grpc.enable_retries", 0);
    /* the largest HTTP/2 DATA frame we accept (announced in SETTINGS; the peer
     * frames what it sends to us by it). The default, 16 KiB, cuts a 1 MiB
     * chunk into 64 frames, each a separate trip through the frame parser and
     * the TLS endpoint; 1 MiB frames took mTLS over loopback from ~430 to
     * ~520 MB/s here (docs/results/transport.md). */
    t->a[n++] = int_arg(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, AL_HTTP2_MAX_FRAME);
    if (server) {
        /* no SO_REUSEPORT (gRPC's default): a second server on our port must
         * fail to start, not silently take half of our incoming connections
         * (two agents given one port; tests picking ports concurrently) */
        t->a[n++] = int_arg(GRPC_ARG_ALLOW_REUSEPORT, 0);
        /* accept the clients' keepalive pings (every 20 s) without GOAWAY */
        t->a[n++] = int_arg(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
        t->a[n++] = int_arg(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
        t->a[n++] = int_arg(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
        t->a[n++] = int_arg(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    } else {
        /* a dead peer is noticed within keepalive time + timeout */
        t->a[n++] = int_arg(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
        t->a[n++] = int_arg(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
        t->a[n++] = int_arg(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
        /* reconnect quickly after a cut; our retries add their own backoff. (gRPC
         * also uses the *minimum* backoff as the connect timeout -- TCP + TLS +
         * HTTP/2 SETTINGS -- so it must allow a few WAN round trips.) */
        t->a[n++] = int_arg(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 10000);
        t->a[n++] = int_arg(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
        t->a[n++] = int_arg(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
        if (peer) {
            /* the server's certificate must name the peer we mean to reach */
            grpc_arg a = {.type = GRPC_ARG_STRING,
                          .key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG};
            a.value.string = (char *)peer;
            t->a[n++] = a;
        }
    }
    t->args.num_args = n;
    t->args.args = t->a;
}

grpc_byte_buffer *tu_pack(const ProtobufCMessage *m, size_t *len) {
    size_t n = protobuf_c_message_get_packed_size(m);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    if (len) *len = n;
    return bb;
}

/* v as a protobuf varint at p (7 bits a byte, low first); returns its length */
static size_t put_varint(uint8_t *p, uint64_t v) {
    size_t w = 0;
    for (; v >= 0x80; v >>= 7) p[w++] = (uint8_t)(v | 0x80);
    p[w++] = (uint8_t)v;
    return w;
}

grpc_byte_buffer *tu_pack_with_payload(const ProtobufCMessage *m, uint32_t field,
                                       const uint8_t *payload, size_t len) {
    /* fields may come in any order on the wire, so the bytes field can follow
     * the others: key (field << 3 | 2, length-delimited), varint length, bytes */
    size_t n = protobuf_c_message_get_packed_size(m);
    grpc_slice head = grpc_slice_malloc(n + 20);
    uint8_t *p = GRPC_SLICE_START_PTR(head);
    protobuf_c_message_pack(m, p);
    size_t w = n + put_varint(p + n, (uint64_t)field << 3 | 2);
    w += put_varint(p + w, len);
    head = grpc_slice_sub_no_ref(head, 0, w);
    grpc_slice parts[2] = {head, grpc_slice_from_static_buffer(payload, len)};
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(parts, 2);
    grpc_slice_unref(head);
    return bb;
}

grpc_slice tu_flatten(grpc_byte_buffer *bb) {
    /* one uncompressed slice (common for small messages): share it, no copy */
    if (bb->type == GRPC_BB_RAW && bb->data.raw.compression == GRPC_COMPRESS_NONE &&
        bb->data.raw.slice_buffer.count == 1)
        return grpc_slice_ref(bb->data.raw.slice_buffer.slices[0]);
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return grpc_empty_slice();
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    return s;
}

gpr_timespec tu_deadline(double seconds) {
    if (seconds <= 0) return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis((int64_t)(seconds * 1000.0), GPR_TIMESPAN));
}

grpc_slice tu_method(const char *name) {
    char buf[128];
    snprintf(buf, sizeof buf, AL_METHOD_PREFIX "%s", name);
    return grpc_slice_from_copied_string(buf);
}
