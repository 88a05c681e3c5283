/*
 * client.c -- one channel to one peer, used by one thread at a time.
 *
 * Every call is driven synchronously on the client's own pluck completion
 * queue: the status batch is started first (so a server's refusal is seen
 * while we are still streaming), then messages go out one at a time, each
 * waited for before the next is packed. A chunk's payload is never copied:
 * the message is its other fields, packed, then the payload field's key and
 * length and the caller's bytes themselves (gRPC reads them in place, and the
 * call waits for the send to finish before the caller may touch them).
 *
 * Retries. UNAVAILABLE (peer down, connection cut, TLS refused), a deadline,
 * CANCELLED, ABORTED and DATA_LOSS are retried up to max_attempts with capped
 * exponential backoff and full jitter (sleep uniform in [0, min(max, b*2^k)]);
 * anything else is the peer's considered answer and is returned at once.
 */
#include "grpc_util.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "al_codec.h"
#include "wire.h"

struct al_client {
    al_client_cfg cfg;
    char target[256], site[AL_SITE_MAX + 1], peer[AL_SITE_MAX + 1];
    grpc_channel *ch;
    grpc_completion_queue *cq;
    int last_status;
    char last_details[512];
    uint64_t tx, rx;
    al_rng rng;
    /* al_client_cancel, from another thread: it bumps cancel_gen and cancels
     * `call`; an operation that began at op_gen (op_begin) makes no call and
     * no retry once they differ. Under mu: call, cancel_gen. */
    pthread_mutex_t mu;
    grpc_call *call;
    uint64_t cancel_gen, op_gen;
};

/* An operation (with its retries) begins: al_client_cancel calls after this
 * one end it. */
static void op_begin(al_client *c) {
    pthread_mutex_lock(&c->mu);
    c->op_gen = c->cancel_gen;
    pthread_mutex_unlock(&c->mu);
}

static int op_cancelled(al_client *c) {
    pthread_mutex_lock(&c->mu);
    int x = c->cancel_gen != c->op_gen;
    pthread_mutex_unlock(&c->mu);
    return x;
}

void al_client_cancel(al_client *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->cancel_gen++;
    if (c->call)
        grpc_call_cancel_with_status(c->call, GRPC_STATUS_CANCELLED, "cancelled here", NULL);
    pthread_mutex_unlock(&c->mu);
}

enum { TAG_STATUS = 1, TAG_SEND, TAG_CLOSE, TAG_RECV };

/* What a call sends and how it takes the replies. */
typedef struct call_io {
    /* next message to send: 1 with *bb set, 0 when done */
    int (*next)(void *u, grpc_byte_buffer **bb);
    /* one reply message: 0, or an al_status to abandon the call */
    int (*reply)(void *u, const uint8_t *data, size_t len, char *why, size_t n);
    void *u;
} call_io;

static grpc_event pluck(al_client *c, intptr_t tag, gpr_timespec until) {
    return grpc_completion_queue_pluck(c->cq, (void *)tag, until, NULL);
}

/* Run one call; returns its gRPC status and leaves it in last_status/details. */
static int call_run(al_client *c, const char *method, double deadline_s, call_io *io) {
    grpc_slice m = tu_method(method);
    grpc_call *call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq, m, NULL,
                                               tu_deadline(deadline_s), NULL);
    grpc_slice_unref(m);
    pthread_mutex_lock(&c->mu); /* al_client_cancel reaches it from here on */
    c->call = call;
    if (c->cancel_gen != c->op_gen)
        grpc_call_cancel_with_status(call, GRPC_STATUS_CANCELLED, "cancelled here", NULL);
    pthread_mutex_unlock(&c->mu);
    grpc_metadata_array md_init, md_trail;
    grpc_metadata_array_init(&md_init);
    grpc_metadata_array_init(&md_trail);
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op st_ops[2] = {{.op = GRPC_OP_RECV_INITIAL_METADATA},
                         {.op = GRPC_OP_RECV_STATUS_ON_CLIENT}};
    st_ops[0].data.recv_initial_metadata.recv_initial_metadata = &md_init;
    st_ops[1].data.recv_status_on_client.trailing_metadata = &md_trail;
    st_ops[1].data.recv_status_on_client.status = &status;
    st_ops[1].data.recv_status_on_client.status_details = &details;
    int status_done = 0, abandon = 0;
    char why[400] = "";
    grpc_call_start_batch(call, st_ops, 2, (void *)(intptr_t)TAG_STATUS, NULL);

    /* send: initial metadata with the first message, then one message at a time */
    int first = 1;
    for (;;) {
        grpc_byte_buffer *bb = NULL;
        int more = io->next ? io->next(io->u, &bb) : 0;
        grpc_op ops[2] = {{.op = GRPC_OP_SEND_INITIAL_METADATA}, {.op = GRPC_OP_SEND_MESSAGE}};
        ops[1].data.send_message.send_message = bb;
        size_t nops = more ? 2 : 1;
        if (!first && !more) break;
        size_t len = bb ? grpc_byte_buffer_length(bb) : 0; /* before gRPC takes the slices */
        grpc_call_start_batch(call, ops + (first ? 0 : 1), first ? nops : 1,
                              (void *)(intptr_t)TAG_SEND, NULL);
        grpc_event ev = pluck(c, TAG_SEND, gpr_inf_future(GPR_CLOCK_MONOTONIC));
        if (ev.success) c->tx += len; /* a message that never left is not counted */
        if (bb) grpc_byte_buffer_destroy(bb);
        first = 0;
        if (!ev.success || !more) break;
        /* the server may have answered already (a refusal): stop streaming */
        if (pluck(c, TAG_STATUS, gpr_time_0(GPR_CLOCK_MONOTONIC)).type == GRPC_OP_COMPLETE) {
            status_done = 1;
            break;
        }
    }
    if (!status_done) {
        grpc_op op = {.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT};
        grpc_call_start_batch(call, &op, 1, (void *)(intptr_t)TAG_CLOSE, NULL);
        pluck(c, TAG_CLOSE, gpr_inf_future(GPR_CLOCK_MONOTONIC));
    }
    /* receive replies until the end of the stream */
    for (;;) {
        grpc_byte_buffer *bb = NULL;
        grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
        op.data.recv_message.recv_message = &bb;
        grpc_call_start_batch(call, &op, 1, (void *)(intptr_t)TAG_RECV, NULL);
        grpc_event ev = pluck(c, TAG_RECV, gpr_inf_future(GPR_CLOCK_MONOTONIC));
        if (!ev.success || !bb) {
            if (bb) grpc_byte_buffer_destroy(bb);
            break;
        }
        grpc_slice s = tu_flatten(bb);
        grpc_byte_buffer_destroy(bb);
        c->rx += GRPC_SLICE_LENGTH(s);
        int st = io->reply ? io->reply(io->u, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s), why,
                                       sizeof why)
                           : 0;
        grpc_slice_unref(s);
        if (st) {
            abandon = st;
            grpc_call_cancel_with_status(call, (grpc_status_code)st, why, NULL);
            break;
        }
    }
    if (!status_done) pluck(c, TAG_STATUS, gpr_inf_future(GPR_CLOCK_MONOTONIC));
    int result = abandon ? abandon : (int)status;
    if (abandon)
        snprintf(c->last_details, sizeof c->last_details, "reply refused: %s", why);
    else
        snprintf(c->last_details, sizeof c->last_details, "%.*s", (int)GRPC_SLICE_LENGTH(details),
                 (const char *)GRPC_SLICE_START_PTR(details));
    c->last_status = result;
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&md_init);
    grpc_metadata_array_destroy(&md_trail);
    pthread_mutex_lock(&c->mu);
    c->call = NULL;
    pthread_mutex_unlock(&c->mu);
    grpc_call_unref(call);
    return result;
}

/* ---- unary calls -------------------------------------------------------------------- */

typedef struct unary_io {
    const ProtobufCMessage *req;
    int sent;
    const ProtobufCMessageDescriptor *rep_desc;
    ProtobufCMessage *rep; /* the unpacked reply */
} unary_io;

static int unary_next(void *u, grpc_byte_buffer **bb) {
    unary_io *x = u;
    if (x->sent) return 0;
    x->sent = 1;
    *bb = tu_pack(x->req, NULL);
    return 1;
}

static int unary_reply(void *u, const uint8_t *data, size_t len, char *why, size_t n) {
    unary_io *x = u;
    if (x->rep) return AL_ST_INVALID_ARGUMENT; /* a unary call has one reply */
    return wire_unpack(x->rep_desc, data, len, &x->rep, why, n);
}

/* RESOURCE_EXHAUSTED too: a server whose call slots for this site are full
 * (al_server_cfg.per_peer_calls) frees one when a call ends or is idle, and
 * an idle call of ours it evicted to make room ends so (server.c) */
static int retryable(int st) {
    return st == AL_ST_UNAVAILABLE || st == AL_ST_DEADLINE_EXCEEDED || st == AL_ST_CANCELLED ||
           st == AL_ST_ABORTED || st == AL_ST_DATA_LOSS || st == AL_ST_RESOURCE_EXHAUSTED;
}

/* Retry after status st on this attempt? Not once the operation was cancelled. */
static int may_retry(al_client *c, int st, int attempt) {
    return retryable(st) && attempt + 1 < c->cfg.max_attempts && !op_cancelled(c);
}

static void backoff_sleep(al_client *c, int attempt, const char *method) {
    double cap = c->cfg.backoff_s * pow(2.0, attempt);
    if (cap > c->cfg.backoff_max_s) cap = c->cfg.backoff_max_s;
    double d = cap * al_rng_uniform(&c->rng); /* full jitter */
    if (c->cfg.log)
        al_logf(c->cfg.log, AL_LOG_WARN, "grpc %s -> %s: %s: %s; retry %d/%d in %.2f s", method,
                c->peer, al_status_name(c->last_status), c->last_details, attempt + 1,
                c->cfg.max_attempts - 1, d);
    al_sleep(d);
}

static int fail_status(al_client *c, const char *method, al_err *err) {
    return al_errf(err, c->last_status == AL_ST_DEADLINE_EXCEEDED ? AL_ETIMEOUT : AL_EPEER,
                   "grpc %s -> %s (%s): %s: %s", method, c->peer, c->target,
                   al_status_name(c->last_status), c->last_details);
}

/* A unary call with retries; on success *rep holds the reply (free it). */
static int unary(al_client *c, const char *method, const ProtobufCMessage *req,
                 const ProtobufCMessageDescriptor *rep_desc, ProtobufCMessage **rep, al_err *err) {
    for (int attempt = 0;; attempt++) {
        unary_io x = {.req = req, .rep_desc = rep_desc};
        call_io io = {unary_next, unary_reply, &x};
        int st = call_run(c, method, c->cfg.control_deadline_s, &io);
        if (st == AL_ST_OK && !x.rep) {
            st = c->last_status = AL_ST_INTERNAL;
            snprintf(c->last_details, sizeof c->last_details, "no reply message");
        }
        if (st == AL_ST_OK) {
            *rep = x.rep;
            return 0;
        }
        if (x.rep) protobuf_c_message_free_unpacked(x.rep, NULL);
        if (!may_retry(c, st, attempt)) return fail_status(c, method, err);
        backoff_sleep(c, attempt, method);
    }
}

int al_client_hello(al_client *c, const al_hello *mine, al_hello *theirs, al_err *err) {
    char *members[16];
    Autoloco__V1__Handshake h;
    al_hello me = *mine;
    snprintf(me.site, sizeof me.site, "%s", c->site);
    wire_hello_to(&h, &me, members);
    Autoloco__V1__HandshakeReply *rep = NULL;
    op_begin(c);
    int rc = unary(c, "Hello", &h.base, &autoloco__v1__handshake_reply__descriptor,
                   (ProtobufCMessage **)&rep, err);
    if (rc) return rc;
    char why[300];
    if (!rep->server || wire_check_hello(rep->server, why, sizeof why)) {
        rc = al_errf(err, AL_EPEER, "grpc Hello -> %s: invalid reply: %s", c->peer,
                     rep->server ? why : "no handshake");
    } else if (strcmp(rep->server->site, c->peer)) {
        rc = al_errf(err, AL_EPEER, "grpc Hello -> %s: the server says it is '%s'", c->peer,
                     rep->server->site);
    } else {
        wire_hello_from(theirs, rep->server);
    }
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return rc;
}

/* (within an operation: a push's resume point) */
static int query_shard(al_client *c, const al_shard_meta *m, uint64_t *received, int *complete,
                       al_err *err) {
    Autoloco__V1__ShardQuery q = AUTOLOCO__V1__SHARD_QUERY__INIT;
    q.schema = AL_SCHEMA;
    q.site = c->site;
    q.round = m->round;
    q.epoch = m->epoch;
    q.phase = (Autoloco__V1__Phase)m->phase;
    q.shard_id = m->shard_id;
    Autoloco__V1__ShardAck *ack = NULL;
    int rc = unary(c, "QueryShard", &q.base, &autoloco__v1__shard_ack__descriptor,
                   (ProtobufCMessage **)&ack, err);
    if (rc) return rc;
    *received = ack->received_bytes;
    *complete = ack->complete;
    protobuf_c_message_free_unpacked(&ack->base, NULL);
    if (*received > m->total_bytes)
        return al_errf(err, AL_EPEER, "grpc QueryShard -> %s: holds %llu of a %llu-byte shard",
                       c->peer, (unsigned long long)*received, (unsigned long long)m->total_bytes);
    return 0;
}

int al_client_query_shard(al_client *c, const al_shard_meta *m, uint64_t *received, int *complete,
                          al_err *err) {
    op_begin(c);
    return query_shard(c, m, received, complete, err);
}

int al_client_push_stats(al_client *c, const al_stats *s, al_err *err) {
    Autoloco__V1__Stats m = AUTOLOCO__V1__STATS__INIT;
    m.schema = AL_SCHEMA;
    m.site = c->site;
    m.round = s->round;
    m.epoch = s->epoch;
    m.mean_loss = s->mean_loss;
    m.grad_norm = s->grad_norm;
    m.delta_sq_norm = s->delta_sq_norm;
    m.inner_lr_sum = s->inner_lr_sum;
    m.tokens = s->tokens;
    m.compute_s = s->compute_s;
    m.comm_s = s->comm_s;
    m.steps = s->steps;
    Autoloco__V1__Ack *ack = NULL;
    op_begin(c);
    int rc = unary(c, "PushStats", &m.base, &autoloco__v1__ack__descriptor,
                   (ProtobufCMessage **)&ack, err);
    if (!rc) protobuf_c_message_free_unpacked(&ack->base, NULL);
    return rc;
}

int al_client_ping(al_client *c, uint64_t round, uint64_t epoch, uint64_t *peer_ms, al_err *err) {
    Autoloco__V1__Heartbeat m = AUTOLOCO__V1__HEARTBEAT__INIT;
    m.schema = AL_SCHEMA;
    m.site = c->site;
    m.round = round;
    m.epoch = epoch;
    Autoloco__V1__Heartbeat *rep = NULL;
    uint64_t tx = c->tx, rx = c->rx;
    op_begin(c);
    int rc = unary(c, "Ping", &m.base, &autoloco__v1__heartbeat__descriptor,
                   (ProtobufCMessage **)&rep, err);
    c->tx = tx; /* heartbeats are control traffic: in neither side's byte counts */
    c->rx = rx;
    if (rc) return rc;
    char why[200];
    if (wire_check_heartbeat(rep, why, sizeof why))
        rc = al_errf(err, AL_EPEER, "grpc Ping -> %s: invalid reply: %s", c->peer, why);
    else if (peer_ms)
        *peer_ms = rep->sent_unix_ms;
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return rc;
}

int al_client_status(al_client *c, const al_peer_status *mine, al_peer_status *theirs,
                     al_err *err) {
    Autoloco__V1__Heartbeat m = AUTOLOCO__V1__HEARTBEAT__INIT;
    m.schema = AL_SCHEMA;
    m.site = c->site;
    wire_status_to(&m, mine);
    Autoloco__V1__Heartbeat *rep = NULL;
    uint64_t tx = c->tx, rx = c->rx;
    op_begin(c);
    int rc = unary(c, "Ping", &m.base, &autoloco__v1__heartbeat__descriptor,
                   (ProtobufCMessage **)&rep, err);
    c->tx = tx; /* control traffic, as al_client_ping */
    c->rx = rx;
    if (rc) return rc;
    char why[200];
    if (wire_check_heartbeat(rep, why, sizeof why))
        rc = al_errf(err, AL_EPEER, "grpc Ping -> %s: invalid reply: %s", c->peer, why);
    else
        wire_status_from(theirs, rep);
    protobuf_c_message_free_unpacked(&rep->base, NULL);
    return rc;
}

/* ---- shards: a client stream of chunks, resumable ------------------------------------- */

typedef struct shard_io {
    al_client *c;
    const al_shard_meta *m;
    const uint8_t *data;
    uint64_t off;
    Autoloco__V1__ShardAck *ack;
} shard_io;

static int shard_next(void *u, grpc_byte_buffer **bb) {
    shard_io *x = u;
    if (x->off >= x->m->total_bytes) return 0;
    size_t n = (size_t)AL_MIN((uint64_t)x->c->cfg.chunk_bytes, x->m->total_bytes - x->off);
    Autoloco__V1__ShardChunk ch = AUTOLOCO__V1__SHARD_CHUNK__INIT;
    ch.schema = AL_SCHEMA;
    ch.site = x->c->site;
    ch.round = x->m->round;
    ch.epoch = x->m->epoch;
    ch.phase = (Autoloco__V1__Phase)x->m->phase;
    ch.shard_id = x->m->shard_id;
    ch.num_shards = x->m->num_shards;
    ch.offset = x->off;
    ch.total_bytes = x->m->total_bytes;
    ch.codec = (Autoloco__V1__Codec)x->m->codec;
    ch.zstd = x->m->zstd;
    const uint8_t *payload = x->data + x->off;
    ch.checksum = al_xxh64(payload, n, 0);
    ch.shard_checksum = x->m->shard_checksum;
    *bb = tu_pack_with_payload(&ch.base, WIRE_CHUNK_PAYLOAD_FIELD, payload, n);
    x->off += n;
    return 1;
}

static int shard_reply(void *u, const uint8_t *data, size_t len, char *why, size_t n) {
    shard_io *x = u;
    if (x->ack) return AL_ST_INVALID_ARGUMENT;
    return wire_unpack(&autoloco__v1__shard_ack__descriptor, data, len,
                       (ProtobufCMessage **)&x->ack, why, n);
}

int al_client_push_shard(al_client *c, const al_shard_meta *m, const uint8_t *data, al_err *err) {
    uint64_t from = 0;
    op_begin(c);
    for (int attempt = 0;; attempt++) {
        /* The first try starts at offset 0 without asking (a round trip less
         * per shard: on a WAN the exchange's cost is mostly round trips). A
         * shard the server holds whole answers ALREADY_EXISTS; one it holds
         * in part (an older stream: a sender that restarted) refuses the first
         * chunk with OUT_OF_RANGE before anything is written, since chunks
         * must continue where it stands; then the next try asks. */
        if (attempt > 0) {
            /* where to start or resume (a stream that broke, a sender that
             * restarted); this also fences off any older stream of the shard */
            int complete = 0;
            al_err qerr = {0};
            if (query_shard(c, m, &from, &complete, &qerr)) {
                if (!may_retry(c, c->last_status, attempt))
                    return al_errf(err, qerr.code, "%s", qerr.msg);
                backoff_sleep(c, attempt, "QueryShard");
                continue;
            }
            if (complete) return 0; /* it all arrived: only the ack was lost */
            if (from && c->cfg.log)
                al_logf(c->cfg.log, AL_LOG_INFO, "grpc PushShard -> %s: resuming at %llu of %llu",
                        c->peer, (unsigned long long)from, (unsigned long long)m->total_bytes);
        }
        shard_io x = {.c = c, .m = m, .data = data, .off = from};
        call_io io = {shard_next, shard_reply, &x};
        /* a deadline that grows with the bytes: at least 10 MB/s on top of the base */
        double dl = c->cfg.deadline_s + (double)(m->total_bytes - from) / 1e7;
        int st = call_run(c, "PushShard", dl, &io);
        int ok = st == AL_ST_OK && x.ack && x.ack->complete;
        if (x.ack) protobuf_c_message_free_unpacked(&x.ack->base, NULL);
        if (ok) return 0;
        if (st == AL_ST_OK) {
            c->last_status = AL_ST_INTERNAL;
            snprintf(c->last_details, sizeof c->last_details, "no complete acknowledgement");
        }
        if (attempt == 0 && c->last_status == AL_ST_OUT_OF_RANGE) continue; /* ask, above */
        if (!may_retry(c, c->last_status, attempt)) return fail_status(c, "PushShard", err);
        backoff_sleep(c, attempt, "PushShard");
    }
}

/* ---- state: a server stream ----------------------------------------------------------- */

typedef struct state_io {
    const ProtobufCMessage *req;
    int sent;
    uint32_t part;
    uint64_t max, got, total;
    uint8_t *buf;
} state_io;

static int state_reply(void *u, const uint8_t *data, size_t len, char *why, size_t n) {
    state_io *x = u;
    Autoloco__V1__StateChunk *m;
    int st = wire_unpack(&autoloco__v1__state_chunk__descriptor, data, len, (ProtobufCMessage **)&m,
                         why, n);
    if (st) return st;
    if (!(st = wire_check_state_chunk(m, x->max, why, n))) {
        if ((uint32_t)m->part != x->part || m->offset != x->got ||
            (x->buf && m->total_bytes != x->total)) {
            snprintf(why, n, "state chunk out of order (offset %llu, expected %llu)",
                     (unsigned long long)m->offset, (unsigned long long)x->got);
            st = AL_ST_OUT_OF_RANGE;
        } else {
            if (!x->buf) {
                x->total = m->total_bytes;
                x->buf = malloc(x->total ? x->total : 1);
                if (!x->buf) {
                    snprintf(why, n, "out of memory for %llu bytes", (unsigned long long)x->total);
                    st = AL_ST_RESOURCE_EXHAUSTED;
                }
            }
            if (!st) {
                memcpy(x->buf + x->got, m->payload.data, m->payload.len);
                x->got += m->payload.len;
            }
        }
    }
    protobuf_c_message_free_unpacked(&m->base, NULL);
    return st;
}

static int state_next(void *u, grpc_byte_buffer **bb) {
    state_io *x = u;
    if (x->sent) return 0;
    x->sent = 1;
    *bb = tu_pack(x->req, NULL);
    return 1;
}

static int pull(al_client *c, uint32_t part, const uint8_t *hash, uint64_t max_bytes,
                uint8_t **data, uint64_t *len, al_err *err) {
    Autoloco__V1__StateRequest r = AUTOLOCO__V1__STATE_REQUEST__INIT;
    r.schema = AL_SCHEMA;
    r.site = c->site;
    r.run_id = (char *)c->cfg.run_id;
    r.part = (Autoloco__V1__StatePart)part;
    if (hash) {
        r.candidate.data = (uint8_t *)hash;
        r.candidate.len = 32;
    }
    *data = NULL;
    *len = 0;
    op_begin(c);
    for (int attempt = 0;; attempt++) {
        state_io x = {.req = &r.base, .part = part, .max = max_bytes};
        call_io io = {state_next, state_reply, &x};
        int st = call_run(c, "PullState", c->cfg.deadline_s + (double)max_bytes / 1e7, &io);
        if (st == AL_ST_OK && x.buf && x.got == x.total) {
            *data = x.buf;
            *len = x.total;
            return 0;
        }
        free(x.buf);
        if (st == AL_ST_OK) {
            c->last_status = AL_ST_DATA_LOSS;
            snprintf(c->last_details, sizeof c->last_details, "state ended at %llu of %llu bytes",
                     (unsigned long long)x.got, (unsigned long long)x.total);
        }
        if (!may_retry(c, c->last_status, attempt)) return fail_status(c, "PullState", err);
        backoff_sleep(c, attempt, "PullState");
    }
}

int al_client_pull_state(al_client *c, uint32_t part, uint64_t max_bytes, uint8_t **data,
                         uint64_t *len, al_err *err) {
    return pull(c, part, NULL, max_bytes, data, len, err);
}

int al_client_pull_candidate(al_client *c, uint32_t part, const uint8_t *hash, uint64_t max_bytes,
                             uint8_t **data, uint64_t *len, al_err *err) {
    return pull(c, part, hash, max_bytes, data, len, err);
}

/* ---- raw calls (tests, tools) ------------------------------------------------------------ */

typedef struct raw_io {
    const uint8_t *const *msgs;
    const size_t *lens;
    size_t n, i;
    uint8_t *reply;
    size_t reply_len;
    int got;
} raw_io;

static int raw_next(void *u, grpc_byte_buffer **bb) {
    raw_io *x = u;
    if (x->i >= x->n) return 0;
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)x->msgs[x->i], x->lens[x->i]);
    *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    x->i++;
    return 1;
}

static int raw_reply(void *u, const uint8_t *data, size_t len, char *why, size_t n) {
    raw_io *x = u;
    (void)why;
    (void)n;
    if (x->got++) return 0; /* keep the first */
    x->reply = malloc(len ? len : 1);
    if (x->reply) memcpy(x->reply, data, len);
    x->reply_len = len;
    return 0;
}

int al_client_call_raw(al_client *c, const char *method, const uint8_t *const *msgs,
                       const size_t *lens, size_t n, uint8_t **reply, size_t *reply_len,
                       al_err *err) {
    (void)err;
    raw_io x = {.msgs = msgs, .lens = lens, .n = n};
    call_io io = {raw_next, raw_reply, &x};
    op_begin(c);
    int st = call_run(c, method, c->cfg.deadline_s, &io);
    if (reply) {
        *reply = x.reply;
        *reply_len = x.reply_len;
    } else {
        free(x.reply);
    }
    return st;
}

/* ---- life cycle -------------------------------------------------------------------------- */

int al_client_new(const al_client_cfg *cfg, al_client **out, al_err *err) {
    *out = NULL;
    if (!cfg->target || !*cfg->target || strlen(cfg->target) >= 256)
        return al_errf(err, AL_ECONFIG, "grpc client: target missing or too long");
    if (!al_site_name_ok(cfg->site) || !al_site_name_ok(cfg->peer))
        return al_errf(err, AL_ECONFIG, "grpc client: site '%s' or peer '%s' is not a valid name",
                       cfg->site ? cfg->site : "", cfg->peer ? cfg->peer : "");
    al_client *c = calloc(1, sizeof *c);
    if (!c) return al_errf(err, AL_ENOMEM, "grpc client: out of memory");
    pthread_mutex_init(&c->mu, NULL);
    c->cfg = *cfg;
    snprintf(c->target, sizeof c->target, "%s", cfg->target);
    snprintf(c->site, sizeof c->site, "%s", cfg->site);
    snprintf(c->peer, sizeof c->peer, "%s", cfg->peer);
    c->cfg.target = c->target;
    c->cfg.site = c->site;
    c->cfg.peer = c->peer;
    c->cfg.run_id = cfg->run_id ? cfg->run_id : "";
    if (!c->cfg.chunk_bytes) c->cfg.chunk_bytes = AL_DEFAULT_CHUNK;
    /* what we send, and what a server may send us (state parts): up to the
     * largest chunk any side uses by default */
    if (!c->cfg.max_message)
        c->cfg.max_message = AL_MAX(c->cfg.chunk_bytes, AL_DEFAULT_MAX_CHUNK) + AL_MSG_OVERHEAD;
    if (c->cfg.deadline_s <= 0) c->cfg.deadline_s = 60;
    if (c->cfg.control_deadline_s <= 0 || c->cfg.control_deadline_s > c->cfg.deadline_s)
        c->cfg.control_deadline_s = c->cfg.deadline_s;
    if (c->cfg.max_attempts <= 0) c->cfg.max_attempts = 6;
    if (c->cfg.backoff_s <= 0) c->cfg.backoff_s = 0.1;
    if (c->cfg.backoff_max_s <= 0) c->cfg.backoff_max_s = 5;
    al_rng_seed(&c->rng, cfg->seed ^ al_fnv1a64(c->site, strlen(c->site), 1469598103934665603ull));
    grpc_init();
    grpc_channel_credentials *creds = NULL;
    int rc = tu_channel_creds(&cfg->tls, cfg->insecure, &creds, err);
    if (rc) {
        free(c);
        grpc_shutdown();
        return rc;
    }
    tu_args args;
    tu_args_init(&args, c->cfg.max_message, cfg->insecure ? NULL : c->peer, 0);
    c->ch = grpc_channel_create(c->target, creds, &args.args);
    grpc_channel_credentials_release(creds);
    c->cq = grpc_completion_queue_create_for_pluck(NULL);
    *out = c;
    return 0;
}

void al_client_free(al_client *c) {
    if (!c) return;
    grpc_channel_destroy(c->ch);
    grpc_completion_queue_shutdown(c->cq);
    grpc_completion_queue_pluck(c->cq, NULL, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    grpc_completion_queue_destroy(c->cq);
    pthread_mutex_destroy(&c->mu);
    free(c);
    grpc_shutdown();
}

int al_client_last_status(const al_client *c) {
    return c->last_status;
}

const char *al_client_last_details(const al_client *c) {
    return c->last_details;
}

void al_client_bytes(const al_client *c, uint64_t *tx, uint64_t *rx) {
    *tx = c->cfg.uncounted ? 0 : c->tx;
    *rx = c->cfg.uncounted ? 0 : c->rx;
}
