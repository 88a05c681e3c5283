/*
 * server.c -- the site's gRPC server (C core).
 *
 * Threads. `threads` workers, each with its own completion queue registered
 * with the server. A worker asks the server for the next call on its queue,
 * then serves that call to the end, synchronously, with at most one batch in
 * flight besides the RECV_CLOSE_ON_SERVER that every call keeps open. No call
 * state is shared between threads, so only the shard table needs a lock.
 *
 * Shards. The table keys a transfer by (site, round, epoch, phase, shard id)
 * and remembers how many bytes arrived in order. A chunk must continue exactly
 * there; a broken stream's sender asks QueryShard where to resume, which also
 * fences off the old stream (its generation no longer matches), so an old and
 * a new stream can never both write the same shard.
 */
#include "grpc_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "al_codec.h"
#include "server_slots.h"
#include "wire.h"

enum { TAG_NEW = 1, TAG_OP, TAG_CLOSE, TAG_SHUTDOWN };

typedef struct shard_entry {
    al_shard_meta meta;
    uint8_t *dst;
    uint64_t received;
    al_xxh64_state hash; /* of dst[0, received): checked against shard_checksum at the end */
    uint64_t gen;
    int complete;
} shard_entry;

typedef struct peer_bytes {
    char site[AL_SITE_MAX + 1];
    _Atomic uint64_t rx, tx;
    slot_table slots; /* its calls in progress (server_slots.h) */
} peer_bytes;

typedef struct worker {
    struct al_server *srv;
    grpc_completion_queue *cq;
    pthread_t th;
    int started;
} worker;

struct al_server {
    al_server_cfg cfg;
    char site[AL_SITE_MAX + 1], run_id[AL_RUN_ID_MAX + 1];
    grpc_server *server;
    int port;
    worker *workers;
    int nworkers;
    peer_bytes *peers;
    size_t npeers;
    wire_limits lim;
    _Atomic uint64_t refusals[17];

    pthread_mutex_t mu; /* guards everything below */
    uint64_t round, epoch;
    al_hello hello;
    shard_entry *shards;
    size_t nshards, capshards;
};

/* One call being served by one worker. */
typedef struct call_ctx {
    worker *w;
    grpc_call *call;
    gpr_timespec deadline;
    int close_seen, cancelled, md_sent;
    peer_bytes *peer;      /* who the certificate says it is (NULL until known) */
    uint64_t unattributed; /* bytes read before the peer was known */
    char cn[AL_SITE_MAX + 1];
    char cn_why[200]; /* why cn is empty: the certificate names no site unambiguously */
    slot_call slot;   /* its claim on one of peer's slots (until its status is sent) */
    int control;      /* a heartbeat (Ping) or statistics: control traffic, in no count */
    int cut;          /* this server cancelled it (no progress; its client's deadline) */
    int stale;        /* its client gave up (its deadline passed, or it cancelled): no
                       * refusal to log, only a debug line */
} call_ctx;

/* Has the client's deadline for this call passed? A call queued while this
 * process was stopped (SIGSTOP) is served after its client gave up on it. */
static int call_expired(const call_ctx *c) {
    gpr_timespec d = gpr_convert_clock_type(c->deadline, GPR_CLOCK_MONOTONIC);
    return gpr_time_cmp(d, gpr_now(GPR_CLOCK_MONOTONIC)) < 0;
}

static void logf_(const al_server *s, al_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void logf_(const al_server *s, al_log_level lvl, const char *fmt, ...) {
    if (!s->cfg.log) return;
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    al_logf(s->cfg.log, lvl, "grpc server %s: %s", s->site, buf);
}

/* ---- one call: waiting, reading, answering ------------------------------------- */

/* Wait for `tag`; the RECV_CLOSE completion may arrive meanwhile. 0 if the op
 * succeeded, -1 if it failed or the idle timeout passed (call cancelled). */
static int wait_op(call_ctx *c, intptr_t want) {
    int timed_out = 0;
    for (;;) {
        /* never past the client's own deadline (+ 1 s): a call whose client
         * gave up must not hold a worker, or one of the peer's per_peer_calls
         * slots, until the idle timeout (after a SIGSTOP/SIGCONT the stale
         * calls held both slots of each peer for [round] deadline_s, and the
         * site back from the freeze refused every new call of its peers) */
        gpr_timespec until = tu_deadline(c->w->srv->cfg.idle_timeout_s);
        gpr_timespec cd = gpr_time_add(gpr_convert_clock_type(c->deadline, GPR_CLOCK_MONOTONIC),
                                       gpr_time_from_millis(1000, GPR_TIMESPAN));
        int by_client = gpr_time_cmp(cd, until) < 0;
        if (by_client) until = cd;
        grpc_event ev = grpc_completion_queue_next(c->w->cq, until, NULL);
        if (ev.type == GRPC_QUEUE_TIMEOUT) {
            /* cancel, then keep draining until the op we wait for completes */
            grpc_call_cancel_with_status(c->call, GRPC_STATUS_DEADLINE_EXCEEDED,
                                         by_client ? "the client's deadline passed"
                                                   : "idle timeout: no progress from the client",
                                         NULL);
            if (by_client) c->stale = 1;
            c->cut = 1;
            timed_out = 1;
            continue;
        }
        if (ev.type != GRPC_OP_COMPLETE) return -1;
        if ((intptr_t)ev.tag == TAG_CLOSE) {
            c->close_seen = 1;
            if (want == TAG_CLOSE) return timed_out ? -1 : 0;
            continue;
        }
        if ((intptr_t)ev.tag == TAG_OP)
            return (ev.success && !timed_out && want == TAG_OP) ? 0 : -1;
    }
}

/* Next message of the call: 1 and its bytes in *s, 0 at the client's
 * half-close, -1 if the call failed (cut, cancelled, too large). */
static int read_msg(call_ctx *c, grpc_slice *s) {
    grpc_byte_buffer *bb = NULL;
    grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
    op.data.recv_message.recv_message = &bb;
    if (grpc_call_start_batch(c->call, &op, 1, (void *)(intptr_t)TAG_OP, NULL) != GRPC_CALL_OK)
        return -1;
    if (wait_op(c, TAG_OP)) {
        if (bb) grpc_byte_buffer_destroy(bb);
        return -1;
    }
    if (!bb) return grpc_call_failed_before_recv_message(c->call) ? -1 : 0;
    *s = tu_flatten(bb);
    grpc_byte_buffer_destroy(bb);
    slot_activity(&c->slot, 1);
    if (c->control)
        ;
    else if (c->peer)
        atomic_fetch_add(&c->peer->rx, GRPC_SLICE_LENGTH(*s));
    else
        c->unattributed += GRPC_SLICE_LENGTH(*s);
    return 1;
}

static int send_msg(call_ctx *c, const ProtobufCMessage *m) {
    grpc_op ops[2] = {{.op = GRPC_OP_SEND_INITIAL_METADATA}, {.op = GRPC_OP_SEND_MESSAGE}};
    size_t len;
    ops[1].data.send_message.send_message = tu_pack(m, &len);
    size_t first = c->md_sent ? 1 : 0;
    c->md_sent = 1;
    grpc_call_error e =
        grpc_call_start_batch(c->call, ops + first, 2 - first, (void *)(intptr_t)TAG_OP, NULL);
    int rc = e == GRPC_CALL_OK ? wait_op(c, TAG_OP) : -1;
    grpc_byte_buffer_destroy(ops[1].data.send_message.send_message);
    if (rc == 0) slot_activity(&c->slot, 0);
    if (c->peer && !c->control) atomic_fetch_add(&c->peer->tx, len);
    return rc;
}

/* ---- a peer's call slots (server_slots.h) ------------------------------------------ */

static void slot_release(call_ctx *c) {
    if (c->peer) slots_release(&c->peer->slots, &c->slot);
}

/* Take a slot of c->peer for c, evicting an idle call of the peer if its
 * slots are full: AL_ST_OK, or AL_ST_RESOURCE_EXHAUSTED with why. */
static int slot_take(call_ctx *c, const char *method, char *why, size_t n) {
    al_server *s = c->w->srv;
    peer_bytes *p = c->peer;
    char msg[200];
    snprintf(msg, sizeof msg,
             "site: %s opened another call while its %d calls here were all in use, and this "
             "one was idle: it gave up its slot",
             p->site, s->cfg.per_peer_calls);
    slot_eviction ev;
    int rc = slots_take(&p->slots, &c->slot, s->cfg.evict_idle_s, msg, &ev);
    if (rc < 0) {
        snprintf(why, n,
                 "site: %s already has %d calls in progress here (the most one peer may hold), "
                 "none idle",
                 p->site, s->cfg.per_peer_calls);
        return AL_ST_RESOURCE_EXHAUSTED;
    }
    if (rc > 0) {
        atomic_fetch_add(&s->refusals[AL_ST_RESOURCE_EXHAUSTED], 1);
        if (ev.log) /* at most a line a second per peer: an attacker reopens at once */
            logf_(s, AL_LOG_WARN,
                  "refused %s: RESOURCE_EXHAUSTED: %s (%s for %.1f s; taken by a %s call; %d "
                  "more such since the last line)",
                  p->site, msg, ev.nothing_received ? "nothing received" : "silent", ev.idle_s,
                  method, ev.quiet);
    }
    return AL_ST_OK;
}

/* End the call with a status (and its reason), counting refusals. */
static void finish(call_ctx *c, int st, const char *why) {
    al_server *s = c->w->srv;
    /* uncount before the status leaves: a client that starts its next call on
     * receiving it must not find this one still counted */
    slot_release(c);
    grpc_slice details = grpc_slice_from_copied_string(why ? why : "");
    grpc_op ops[2] = {{.op = GRPC_OP_SEND_INITIAL_METADATA},
                      {.op = GRPC_OP_SEND_STATUS_FROM_SERVER}};
    ops[1].data.send_status_from_server.status = (grpc_status_code)st;
    ops[1].data.send_status_from_server.status_details = &details;
    size_t first = c->md_sent ? 1 : 0;
    c->md_sent = 1;
    if (grpc_call_start_batch(c->call, ops + first, 2 - first, (void *)(intptr_t)TAG_OP, NULL) ==
        GRPC_CALL_OK)
        wait_op(c, TAG_OP);
    grpc_slice_unref(details);
    if (!st) return;
    /* A refusal is logged once the call is closed, which says whether its
     * client had cancelled it: then nobody waited for the answer (a stale
     * call served after a SIGSTOP/SIGCONT, refused for the peer's call slots
     * or cut short) and it is no refusal, only a debug line. */
    if (!c->close_seen) wait_op(c, TAG_CLOSE);
    if (atomic_load(&c->slot.evicted)) return; /* logged by the call that took its slot */
    if (c->stale || (c->cancelled && !c->cut)) {
        logf_(s, AL_LOG_DEBUG, "dropped a call of %s its client gave up on (%s: %s)",
              c->cn[0] ? c->cn : "(unknown peer)", al_status_name(st), why);
    } else {
        atomic_fetch_add(&s->refusals[st > 16 ? 2 : st], 1);
        logf_(s, AL_LOG_WARN, "refused %s: %s: %s", c->cn[0] ? c->cn : "(unknown peer)",
              al_status_name(st), why);
    }
}

/* ---- identity ------------------------------------------------------------------------ */

static peer_bytes *find_peer(al_server *s, const char *site) {
    for (size_t i = 0; i < s->npeers; i++)
        if (!strcmp(s->peers[i].site, site)) return &s->peers[i];
    return NULL;
}

/* The site the peer's certificate names (al_cert_site), once per call; if it
 * names none unambiguously, c->cn stays empty and c->cn_why says why. */
static void read_cn(call_ctx *c) {
    grpc_auth_context *ctx = grpc_call_auth_context(c->call);
    if (!ctx) return;
    grpc_auth_property_iterator it =
        grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_PEM_CERT_PROPERTY_NAME);
    const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
    al_err e = {0};
    if (!p)
        snprintf(c->cn_why, sizeof c->cn_why, "identity: no peer certificate");
    else if (al_cert_site(p->value, p->value_length, c->cn, &e))
        snprintf(c->cn_why, sizeof c->cn_why, "%.190s", e.msg);
    grpc_auth_context_release(ctx);
}

/* A message claiming `site` is accepted only from that site's certificate,
 * and only if the site is one of our peers. */
static int check_identity(call_ctx *c, const char *site, char *why, size_t n) {
    al_server *s = c->w->srv;
    if (!s->cfg.insecure && !c->cn[0]) {
        snprintf(why, n, "site: message claims '%.64s' but %s", site,
                 c->cn_why[0] ? c->cn_why : "the certificate names no site");
        return AL_ST_PERMISSION_DENIED;
    }
    if (!s->cfg.insecure && strcmp(c->cn, site)) {
        snprintf(why, n, "site: message claims '%.64s' but the certificate is for '%.64s'", site,
                 c->cn);
        return AL_ST_PERMISSION_DENIED;
    }
    peer_bytes *p = find_peer(s, site);
    if (!p) {
        snprintf(why, n, "site: '%.64s' is not a listed peer of %s", site, s->site);
        return AL_ST_PERMISSION_DENIED;
    }
    if (c->peer && c->peer != p) {
        snprintf(why, n, "site: changed from '%s' to '%.64s' within a call", c->peer->site, site);
        return AL_ST_PERMISSION_DENIED;
    }
    if (!c->peer) { /* the message naming the peer was read before we knew it: count it now */
        atomic_fetch_add(&p->rx, c->unattributed);
        c->unattributed = 0;
    }
    c->peer = p;
    return AL_ST_OK;
}

/* Unpack one message of type `desc`; INVALID_ARGUMENT when malformed. */
static int unpack(grpc_slice *sl, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **m,
                  char *why, size_t n) {
    int st = wire_unpack(desc, GRPC_SLICE_START_PTR(*sl), GRPC_SLICE_LENGTH(*sl), m, why, n);
    grpc_slice_unref(*sl);
    return st;
}

/* ---- shard table ----------------------------------------------------------------------- */

static int same_key(const al_shard_meta *a, const al_shard_meta *b) {
    return a->round == b->round && a->epoch == b->epoch && a->phase == b->phase &&
           a->shard_id == b->shard_id && !strcmp(a->site, b->site);
}

static shard_entry *find_shard(al_server *s, const al_shard_meta *k) {
    for (size_t i = 0; i < s->nshards; i++)
        if (same_key(&s->shards[i].meta, k)) return &s->shards[i];
    return NULL;
}

static void release_shard(al_server *s, shard_entry *e, int complete) {
    if (e->dst && s->cfg.hooks.shard_done)
        s->cfg.hooks.shard_done(s->cfg.hooks.user, &e->meta, e->dst, complete);
    e->dst = NULL;
}

static void remove_shard(al_server *s, shard_entry *e) {
    release_shard(s, e, 0);
    *e = s->shards[--s->nshards];
}

/* round r or r + 1 of epoch e (a fast peer may already send the next round) */
static int check_round(al_server *s, uint64_t round, uint64_t epoch, char *why, size_t n) {
    if (s->cfg.attempts) epoch = s->epoch; /* an attempt tag: the hooks judge it */
    if (epoch < s->epoch || (epoch == s->epoch && round < s->round)) {
        snprintf(why, n, "round: (round %llu, epoch %llu) is stale: this site is at (%llu, %llu)",
                 (unsigned long long)round, (unsigned long long)epoch, (unsigned long long)s->round,
                 (unsigned long long)s->epoch);
        return AL_ST_FAILED_PRECONDITION;
    }
    if (epoch > s->epoch || round > s->round + 1) {
        snprintf(why, n, "round: (round %llu, epoch %llu) is ahead of this site's (%llu, %llu)",
                 (unsigned long long)round, (unsigned long long)epoch, (unsigned long long)s->round,
                 (unsigned long long)s->epoch);
        return AL_ST_FAILED_PRECONDITION;
    }
    return AL_ST_OK;
}

/* Place one validated chunk. *gen is the stream's claim on the entry (0 before
 * its first chunk). Runs under the lock: a chunk copy is a few milliseconds. */
static int place_chunk(al_server *s, const Autoloco__V1__ShardChunk *m, uint64_t *gen,
                       int *complete, char *why, size_t n) {
    al_shard_meta k;
    wire_meta_from(&k, m);
    pthread_mutex_lock(&s->mu);
    int st = check_round(s, k.round, k.epoch, why, n);
    shard_entry *e = st ? NULL : find_shard(s, &k);
    if (st) goto out;
    if (e && e->complete) {
        snprintf(why, n, "shard: %u of (round %llu, epoch %llu) from %s already arrived whole",
                 k.shard_id, (unsigned long long)k.round, (unsigned long long)k.epoch, k.site);
        st = AL_ST_ALREADY_EXISTS;
        goto out;
    }
    if (!e) {
        if (m->offset != 0) {
            snprintf(why, n, "offset: %llu, but nothing of this shard is held yet",
                     (unsigned long long)m->offset);
            st = AL_ST_OUT_OF_RANGE;
            goto out;
        }
        uint8_t *dst = NULL;
        if (s->cfg.hooks.shard_open &&
            (st = s->cfg.hooks.shard_open(s->cfg.hooks.user, &k, &dst, why, n)))
            goto out;
        if (!dst) {
            snprintf(why, n, "shard: no destination for %llu bytes",
                     (unsigned long long)k.total_bytes);
            st = AL_ST_RESOURCE_EXHAUSTED;
            goto out;
        }
        if (s->nshards == s->capshards) {
            size_t cap = s->capshards ? 2 * s->capshards : 16;
            shard_entry *ns = realloc(s->shards, cap * sizeof *ns);
            if (!ns) {
                s->cfg.hooks.shard_done(s->cfg.hooks.user, &k, dst, 0);
                snprintf(why, n, "shard table: out of memory");
                st = AL_ST_RESOURCE_EXHAUSTED;
                goto out;
            }
            s->shards = ns;
            s->capshards = cap;
        }
        e = &s->shards[s->nshards++];
        *e = (shard_entry){.meta = k, .dst = dst, .gen = 1};
        al_xxh64_init(&e->hash, 0);
    }
    if (k.total_bytes != e->meta.total_bytes || k.num_shards != e->meta.num_shards) {
        snprintf(why, n, "total_bytes: %llu, but this shard was opened with %llu",
                 (unsigned long long)k.total_bytes, (unsigned long long)e->meta.total_bytes);
        st = AL_ST_OUT_OF_RANGE;
        goto out;
    }
    if (k.codec != e->meta.codec || k.zstd != e->meta.zstd ||
        k.shard_checksum != e->meta.shard_checksum) {
        snprintf(why, n, "codec: codec or shard checksum changed within a shard");
        st = AL_ST_INVALID_ARGUMENT;
        goto out;
    }
    if (*gen == 0) *gen = e->gen;
    if (*gen != e->gen) {
        snprintf(why, n, "stream: superseded by a resumed transfer of the same shard");
        st = AL_ST_ABORTED;
        goto out;
    }
    if (m->offset != e->received) {
        snprintf(why, n, "offset: %llu, but %llu bytes are held: chunks must continue there",
                 (unsigned long long)m->offset, (unsigned long long)e->received);
        st = AL_ST_OUT_OF_RANGE;
        goto out;
    }
    memcpy(e->dst + m->offset, m->payload.data, m->payload.len);
    /* the shard's hash grows chunk by chunk (chunks arrive in offset order),
     * over the bytes just copied while they are still in cache */
    al_xxh64_update(&e->hash, e->dst + m->offset, m->payload.len);
    e->received += m->payload.len;
    if (e->received == e->meta.total_bytes) {
        if (al_xxh64_digest(&e->hash) != e->meta.shard_checksum) {
            snprintf(why, n, "shard_checksum: the assembled shard does not match; send it again");
            remove_shard(s, e); /* the sender restarts from offset 0 */
            st = AL_ST_DATA_LOSS;
            goto out;
        }
        e->complete = 1;
        release_shard(s, e, 1);
    }
    *complete = e->complete;
out:
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* ---- the methods ----------------------------------------------------------------------- */

#define WHY 400

static void do_push_shard(call_ctx *c) {
    al_server *s = c->w->srv;
    char why[WHY] = "";
    uint64_t gen = 0, received = 0, total = 0;
    int complete = 0, st = AL_ST_OK, r;
    grpc_slice sl;
    while ((r = read_msg(c, &sl)) == 1) {
        Autoloco__V1__ShardChunk *m;
        /* the payload stays in the received slice: one copy, into the shard */
        st = wire_unpack_chunk(GRPC_SLICE_START_PTR(sl), GRPC_SLICE_LENGTH(sl), &m, why, WHY);
        if (st) {
            grpc_slice_unref(sl);
            break;
        }
        if (!(st = wire_check_chunk(m, &s->lim, why, WHY)) &&
            !(st = check_identity(c, m->site, why, WHY)))
            st = place_chunk(s, m, &gen, &complete, why, WHY);
        received = m->offset + m->payload.len;
        total = m->total_bytes;
        wire_free_chunk(m);
        grpc_slice_unref(sl);
        if (st) break;
    }
    if (r < 0) {
        finish(c, AL_ST_CANCELLED, "stream broken");
        return;
    }
    if (!st && !complete) {
        snprintf(why, WHY, "total_bytes: the stream ended at %llu of %llu bytes",
                 (unsigned long long)received, (unsigned long long)total);
        st = gen ? AL_ST_OUT_OF_RANGE : AL_ST_INVALID_ARGUMENT;
        if (!gen) snprintf(why, WHY, "stream: no chunk");
    }
    if (st) {
        finish(c, st, why);
        return;
    }
    Autoloco__V1__ShardAck ack = AUTOLOCO__V1__SHARD_ACK__INIT;
    ack.received_bytes = received;
    ack.complete = 1;
    if (send_msg(c, &ack.base) == 0) finish(c, AL_ST_OK, "");
}

/* Read the single request of a unary call. */
static int read_unary(call_ctx *c, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **m,
                      char *why) {
    grpc_slice sl;
    int r = read_msg(c, &sl);
    if (r <= 0) {
        /* a call its client cancelled or gave up on (a stale call after a
         * freeze: the server reads its headers, with a fresh deadline, and
         * its cancellation only when it wakes) ends without a message: not
         * the client's error. A cancellation completes the close at once. */
        if (!c->close_seen) {
            grpc_event ev = grpc_completion_queue_next(c->w->cq, tu_deadline(0.2), NULL);
            if (ev.type == GRPC_OP_COMPLETE && (intptr_t)ev.tag == TAG_CLOSE) c->close_seen = 1;
        }
        if (c->cancelled || call_expired(c)) c->stale = 1;
        snprintf(why, WHY, r < 0 ? "stream broken" : "no request message");
        return r < 0 || c->stale ? AL_ST_CANCELLED : AL_ST_INVALID_ARGUMENT;
    }
    return unpack(&sl, desc, m, why, WHY);
}

static void do_query(call_ctx *c) {
    al_server *s = c->w->srv;
    char why[WHY] = "";
    Autoloco__V1__ShardQuery *m = NULL;
    int st = read_unary(c, &autoloco__v1__shard_query__descriptor, (ProtobufCMessage **)&m, why);
    if (!st && !(st = wire_check_query(m, &s->lim, why, WHY)))
        st = check_identity(c, m->site, why, WHY);
    Autoloco__V1__ShardAck ack = AUTOLOCO__V1__SHARD_ACK__INIT;
    if (!st) {
        al_shard_meta k = {.round = m->round,
                           .epoch = m->epoch,
                           .phase = (uint32_t)m->phase,
                           .shard_id = m->shard_id};
        snprintf(k.site, sizeof k.site, "%s", m->site);
        pthread_mutex_lock(&s->mu);
        shard_entry *e = find_shard(s, &k);
        if (e) {
            e->gen++; /* fence off the stream that was cut: the resumer takes over */
            ack.received_bytes = e->received;
            ack.complete = e->complete;
        }
        pthread_mutex_unlock(&s->mu);
    }
    if (m) protobuf_c_message_free_unpacked(&m->base, NULL);
    if (st) {
        finish(c, st, why);
        return;
    }
    if (send_msg(c, &ack.base) == 0) finish(c, AL_ST_OK, "");
}

static void do_hello(call_ctx *c) {
    al_server *s = c->w->srv;
    char why[WHY] = "";
    Autoloco__V1__Handshake *m = NULL;
    int st = read_unary(c, &autoloco__v1__handshake__descriptor, (ProtobufCMessage **)&m, why);
    if (!st && !(st = wire_check_hello(m, why, WHY)) &&
        !(st = check_identity(c, m->site, why, WHY)) && strcmp(m->run_id, s->run_id)) {
        snprintf(why, WHY, "run_id: '%.128s', this site runs '%s'", m->run_id, s->run_id);
        st = AL_ST_FAILED_PRECONDITION;
    }
    uint8_t theirs[32] = {0};
    if (!st) memcpy(theirs, m->config_hash.data, 32);
    if (m) protobuf_c_message_free_unpacked(&m->base, NULL);
    if (st) {
        finish(c, st, why);
        return;
    }
    al_hello mine;
    pthread_mutex_lock(&s->mu);
    mine = s->hello;
    pthread_mutex_unlock(&s->mu);
    /* the run configuration's lines only to a client whose hash differs: it
     * names the key; a matching handshake stays small */
    if (!memcmp(theirs, mine.config_hash, 32)) mine.run_config[0] = '\0';
    char *members[16];
    Autoloco__V1__Handshake h;
    wire_hello_to(&h, &mine, members);
    Autoloco__V1__HandshakeReply rep = AUTOLOCO__V1__HANDSHAKE_REPLY__INIT;
    rep.server = &h;
    if (send_msg(c, &rep.base) == 0) finish(c, AL_ST_OK, "");
}

static void do_stats(call_ctx *c) {
    al_server *s = c->w->srv;
    char why[WHY] = "";
    Autoloco__V1__Stats *m = NULL;
    int st = read_unary(c, &autoloco__v1__stats__descriptor, (ProtobufCMessage **)&m, why);
    if (!st && !(st = wire_check_stats(m, why, WHY)) &&
        !(st = check_identity(c, m->site, why, WHY))) {
        pthread_mutex_lock(&s->mu);
        st = check_round(s, m->round, m->epoch, why, WHY);
        pthread_mutex_unlock(&s->mu);
    }
    al_stats a;
    if (!st) {
        wire_stats_from(&a, m);
        if (s->cfg.hooks.stats) st = s->cfg.hooks.stats(s->cfg.hooks.user, &a, why, WHY);
    }
    Autoloco__V1__Ack ack = AUTOLOCO__V1__ACK__INIT;
    if (m) {
        ack.round = m->round;
        ack.epoch = m->epoch;
        protobuf_c_message_free_unpacked(&m->base, NULL);
    }
    if (st) {
        finish(c, st, why);
        return;
    }
    if (send_msg(c, &ack.base) == 0) finish(c, AL_ST_OK, "");
}

static void do_ping(call_ctx *c) {
    al_server *s = c->w->srv;
    char why[WHY] = "";
    Autoloco__V1__Heartbeat *m = NULL;
    int st = read_unary(c, &autoloco__v1__heartbeat__descriptor, (ProtobufCMessage **)&m, why);
    if (!st && !(st = wire_check_heartbeat(m, why, WHY))) st = check_identity(c, m->site, why, WHY);
    al_peer_status theirs, mine;
    memset(&mine, 0, sizeof mine);
    if (!st) wire_status_from(&theirs, m);
    if (!st && s->cfg.hooks.status)
        s->cfg.hooks.status(s->cfg.hooks.user, c->peer->site, &theirs, &mine);
    if (m) protobuf_c_message_free_unpacked(&m->base, NULL);
    if (st) {
        finish(c, st, why);
        return;
    }
    Autoloco__V1__Heartbeat rep = AUTOLOCO__V1__HEARTBEAT__INIT;
    rep.schema = AL_SCHEMA;
    rep.site = s->site;
    if (s->cfg.hooks.status) {
        wire_status_to(&rep, &mine);
    } else {
        pthread_mutex_lock(&s->mu);
        rep.round = s->round;
        rep.epoch = s->epoch;
        pthread_mutex_unlock(&s->mu);
    }
    /* the peer's wall clock, informational (shown by a ping; no deadline uses it) */
    rep.sent_unix_ms = (uint64_t)(al_wall_now() * 1000.0);
    if (send_msg(c, &rep.base) == 0) finish(c, AL_ST_OK, "");
}

static void stream_state(call_ctx *c, uint32_t part, const uint8_t *data, uint64_t len);

static void do_pull_state(call_ctx *c) {
    al_server *s = c->w->srv;
    char why[WHY] = "";
    Autoloco__V1__StateRequest *m = NULL;
    int st = read_unary(c, &autoloco__v1__state_request__descriptor, (ProtobufCMessage **)&m, why);
    if (!st && !(st = wire_check_state_request(m, why, WHY)) &&
        !(st = check_identity(c, m->site, why, WHY)) && strcmp(m->run_id, s->run_id)) {
        snprintf(why, WHY, "run_id: '%.128s', this site runs '%s'", m->run_id, s->run_id);
        st = AL_ST_FAILED_PRECONDITION;
    }
    const uint8_t *data = NULL;
    uint64_t len = 0;
    void *ref = NULL;
    uint32_t part = m ? (uint32_t)m->part : 0;
    char who[AL_SITE_MAX + 1] = "";
    if (m && m->site) snprintf(who, sizeof who, "%s", m->site);
    uint8_t cand[32];
    int want_cand = !st && m && m->candidate.len == 32;
    if (want_cand) memcpy(cand, m->candidate.data, 32);
    if (m) protobuf_c_message_free_unpacked(&m->base, NULL);
    if (!st && want_cand) {
        if (!s->cfg.hooks.candidate) {
            snprintf(why, WHY, "state: this site serves no candidate");
            st = AL_ST_UNIMPLEMENTED;
        } else {
            st = s->cfg.hooks.candidate(s->cfg.hooks.user, who, part, cand, &data, &len, &ref, why,
                                        WHY);
        }
    } else if (!st) {
        if (!s->cfg.hooks.state) {
            snprintf(why, WHY, "state: this site serves no state");
            st = AL_ST_UNIMPLEMENTED;
        } else {
            st = s->cfg.hooks.state(s->cfg.hooks.user, who, part, &data, &len, &ref, why, WHY);
        }
    }
    if (st) {
        finish(c, st, why);
        return;
    }
    stream_state(c, part, data, len);
    if (s->cfg.hooks.state_done) s->cfg.hooks.state_done(s->cfg.hooks.user, ref);
}

/* Stream a state part in chunks; the caller releases it afterwards. */
static void stream_state(call_ctx *c, uint32_t part, const uint8_t *data, uint64_t len) {
    al_server *s = c->w->srv;
    pthread_mutex_lock(&s->mu);
    uint64_t round = s->round, epoch = s->epoch;
    pthread_mutex_unlock(&s->mu);
    /* the default chunk, as clients send: any client accepts that much */
    size_t chunk = AL_MIN((size_t)AL_DEFAULT_CHUNK, s->cfg.max_message - AL_MSG_OVERHEAD);
    uint64_t off = 0;
    do { /* at least one chunk, so that an empty part still arrives */
        Autoloco__V1__StateChunk ch = AUTOLOCO__V1__STATE_CHUNK__INIT;
        size_t n = (size_t)AL_MIN((uint64_t)chunk, len - off);
        ch.schema = AL_SCHEMA;
        ch.round = round;
        ch.epoch = epoch;
        ch.part = (Autoloco__V1__StatePart)part;
        ch.offset = off;
        ch.total_bytes = len;
        ch.payload.data = (uint8_t *)data + off;
        ch.payload.len = n;
        ch.checksum = al_xxh64(data + off, n, 0);
        if (send_msg(c, &ch.base)) {
            finish(c, AL_ST_CANCELLED, "stream broken");
            return;
        }
        off += n;
    } while (off < len);
    finish(c, AL_ST_OK, "");
}

static void serve_call(worker *w, grpc_call *call, const grpc_call_details *d) {
    call_ctx c = {.w = w, .call = call, .deadline = d->deadline, .slot.call = call};
    grpc_op close_op = {.op = GRPC_OP_RECV_CLOSE_ON_SERVER};
    close_op.data.recv_close_on_server.cancelled = &c.cancelled;
    if (grpc_call_start_batch(call, &close_op, 1, (void *)(intptr_t)TAG_CLOSE, NULL) !=
        GRPC_CALL_OK)
        return;
    read_cn(&c);
    if (c.cn[0]) c.peer = find_peer(w->srv, c.cn); /* count bytes from the first message on */
    /* Identity and share of the threads, before the call can hold one: an
     * unlisted certificate is refused at once (not after its first message,
     * which it may never send), and a listed peer gets at most per_peer_calls
     * calls at a time. */
    al_server *srv = w->srv;
    char why[WHY] = "";
    int st = AL_ST_OK;
    if (call_expired(&c)) { /* queued while we were stopped: its client gave up */
        c.stale = 1;
        snprintf(why, sizeof why, "its deadline passed before it was served");
        st = AL_ST_DEADLINE_EXCEEDED;
    } else if (!srv->cfg.insecure && !c.cn[0]) {
        snprintf(why, sizeof why, "%s", c.cn_why[0] ? c.cn_why : "identity: no site named");
        st = AL_ST_PERMISSION_DENIED;
    } else if (!srv->cfg.insecure && !c.peer) {
        snprintf(why, sizeof why, "site: '%.64s' is not a listed peer of %s", c.cn, srv->site);
        st = AL_ST_PERMISSION_DENIED;
    } else if (c.peer) {
        char meth[32];
        size_t ml = GRPC_SLICE_LENGTH(d->method), pl = strlen(AL_METHOD_PREFIX);
        snprintf(meth, sizeof meth, "%.*s", ml > pl ? (int)AL_MIN(ml - pl, 31) : 0,
                 (const char *)GRPC_SLICE_START_PTR(d->method) + (ml > pl ? pl : 0));
        st = slot_take(&c, meth, why, sizeof why);
    }
    if (st) {
        finish(&c, st, why);
        if (!c.close_seen) wait_op(&c, TAG_CLOSE);
        return;
    }
    static const struct {
        const char *name;
        void (*fn)(call_ctx *);
    } methods[] = {
        {"PushShard", do_push_shard}, {"QueryShard", do_query}, {"Hello", do_hello},
        {"PushStats", do_stats},      {"Ping", do_ping},        {"PullState", do_pull_state}};
    size_t plen = strlen(AL_METHOD_PREFIX), mlen = GRPC_SLICE_LENGTH(d->method);
    const char *mp = (const char *)GRPC_SLICE_START_PTR(d->method);
    int found = 0;
    for (size_t i = 0; i < AL_ARRAY_LEN(methods) && !found; i++) {
        size_t nl = strlen(methods[i].name);
        if (mlen == plen + nl && !memcmp(mp, AL_METHOD_PREFIX, plen) &&
            !memcmp(mp + plen, methods[i].name, nl)) {
            found = 1;
            c.control = methods[i].fn == do_ping || methods[i].fn == do_stats;
            methods[i].fn(&c);
        }
    }
    if (!found) finish(&c, AL_ST_UNIMPLEMENTED, "method: unknown");
    slot_release(&c); /* (a call that never finished) */
    if (!c.close_seen) wait_op(&c, TAG_CLOSE);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    pthread_setname_np(pthread_self(), "al-grpc-server");
    for (;;) {
        grpc_call *call = NULL;
        grpc_call_details details;
        grpc_metadata_array md;
        grpc_call_details_init(&details);
        grpc_metadata_array_init(&md);
        grpc_call_error e = grpc_server_request_call(w->srv->server, &call, &details, &md, w->cq,
                                                     w->cq, (void *)(intptr_t)TAG_NEW);
        int ok = 0;
        if (e == GRPC_CALL_OK) {
            grpc_event ev =
                grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
            ok = ev.type == GRPC_OP_COMPLETE && ev.success;
        }
        if (ok) serve_call(w, call, &details);
        if (call) grpc_call_unref(call);
        grpc_call_details_destroy(&details);
        grpc_metadata_array_destroy(&md);
        if (!ok) break; /* the server is shutting down */
    }
    return NULL;
}

/* ---- life cycle ------------------------------------------------------------------------ */

static void free_server(al_server *s) {
    for (int i = 0; i < s->nworkers; i++) {
        if (!s->workers[i].cq) continue;
        grpc_completion_queue_shutdown(s->workers[i].cq);
        while (
            grpc_completion_queue_next(s->workers[i].cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL)
                .type != GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(s->workers[i].cq);
    }
    while (s->nshards) remove_shard(s, &s->shards[0]);
    free(s->shards);
    free(s->workers);
    for (size_t i = 0; s->peers && i < s->npeers; i++) slots_free(&s->peers[i].slots);
    free(s->peers);
    pthread_mutex_destroy(&s->mu);
    free(s);
    grpc_shutdown();
}

int al_server_start(const al_server_cfg *cfg, al_server **out, al_err *err) {
    *out = NULL;
    if (!al_site_name_ok(cfg->site))
        return al_errf(err, AL_ECONFIG, "grpc server: site '%s' is not a valid name",
                       cfg->site ? cfg->site : "");
    if (!cfg->run_id || !*cfg->run_id || strlen(cfg->run_id) > AL_RUN_ID_MAX)
        return al_errf(err, AL_ECONFIG, "grpc server: run id missing or too long");
    al_server *s = calloc(1, sizeof *s);
    if (!s) return al_errf(err, AL_ENOMEM, "grpc server: out of memory");
    grpc_init();
    pthread_mutex_init(&s->mu, NULL);
    s->cfg = *cfg;
    snprintf(s->site, sizeof s->site, "%s", cfg->site);
    snprintf(s->run_id, sizeof s->run_id, "%s", cfg->run_id);
    s->cfg.site = s->site;
    s->cfg.run_id = s->run_id;
    s->cfg.peers = NULL;
    if (s->cfg.threads <= 0) s->cfg.threads = 4;
    if (s->cfg.per_peer_calls <= 0) s->cfg.per_peer_calls = 2;
    if (!s->cfg.max_message) s->cfg.max_message = AL_DEFAULT_MAX_CHUNK + AL_MSG_OVERHEAD;
    if (s->cfg.max_message <= AL_MSG_OVERHEAD) s->cfg.max_message = AL_MSG_OVERHEAD + 1024;
    if (!s->cfg.num_shards) s->cfg.num_shards = 1;
    if (!s->cfg.max_shard_bytes) s->cfg.max_shard_bytes = (UINT64_C(1) << 30) + AL_MSG_OVERHEAD;
    if (s->cfg.idle_timeout_s <= 0) s->cfg.idle_timeout_s = 30;
    if (s->cfg.evict_idle_s <= 0) s->cfg.evict_idle_s = AL_MIN(1.0, s->cfg.idle_timeout_s);
    s->lim = (wire_limits){.num_shards = s->cfg.num_shards,
                           .max_shard_bytes = s->cfg.max_shard_bytes,
                           .max_payload = s->cfg.max_message - AL_MSG_OVERHEAD / 2};
    snprintf(s->hello.site, sizeof s->hello.site, "%s", s->site);
    snprintf(s->hello.run_id, sizeof s->hello.run_id, "%s", s->run_id);
    s->hello.next_interval = 1;
    int rc = 0;
    s->peers = calloc(cfg->npeers ? cfg->npeers : 1, sizeof *s->peers);
    s->workers = calloc((size_t)s->cfg.threads, sizeof *s->workers);
    if (!s->peers || !s->workers) {
        rc = al_errf(err, AL_ENOMEM, "grpc server: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < cfg->npeers; i++) {
        if (!al_site_name_ok(cfg->peers[i])) {
            rc = al_errf(err, AL_ECONFIG, "grpc server: peer '%s' is not a valid name",
                         cfg->peers[i]);
            goto fail;
        }
        snprintf(s->peers[i].site, sizeof s->peers[i].site, "%s", cfg->peers[i]);
        if (slots_init(&s->peers[i].slots, s->cfg.per_peer_calls)) {
            rc = al_errf(err, AL_ENOMEM, "grpc server: out of memory");
            goto fail;
        }
        s->npeers = i + 1; /* (free_server: those set up so far) */
    }
    s->npeers = cfg->npeers;
    grpc_server_credentials *creds = NULL;
    if ((rc = tu_server_creds(&cfg->tls, cfg->insecure, &creds, err))) goto fail;
    tu_args args;
    tu_args_init(&args, s->cfg.max_message, NULL, 1);
    s->server = grpc_server_create(&args.args, NULL);
    s->nworkers = s->cfg.threads;
    for (int i = 0; i < s->nworkers; i++) {
        s->workers[i].srv = s;
        s->workers[i].cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(s->server, s->workers[i].cq, NULL);
    }
    const char *listen = cfg->listen ? cfg->listen : "127.0.0.1:0";
    s->port = grpc_server_add_http2_port(s->server, listen, creds);
    grpc_server_credentials_release(creds);
    if (s->port <= 0) {
        rc = al_errf(err, AL_EIO, "grpc server: cannot listen on %s", listen);
        grpc_server_destroy(s->server);
        goto fail;
    }
    grpc_server_start(s->server);
    for (int i = 0; i < s->nworkers; i++) {
        if (pthread_create(&s->workers[i].th, NULL, worker_main, &s->workers[i])) break;
        s->workers[i].started = 1;
    }
    logf_(s, AL_LOG_INFO, "listening on port %d (%s, %d threads)", s->port,
          cfg->insecure ? "INSECURE" : "mTLS", s->nworkers);
    *out = s;
    return 0;
fail:
    free_server(s);
    return rc;
}

int al_server_port(const al_server *s) {
    return s->port;
}

void al_server_set_round(al_server *s, uint64_t round, uint64_t epoch) {
    pthread_mutex_lock(&s->mu);
    s->round = round;
    s->epoch = epoch;
    for (size_t i = 0; i < s->nshards;) {
        shard_entry *e = &s->shards[i];
        if ((!s->cfg.attempts && e->meta.epoch != epoch) || e->meta.round < round)
            remove_shard(s, e);
        else
            i++;
    }
    pthread_mutex_unlock(&s->mu);
}

void al_server_set_hello(al_server *s, const al_hello *mine) {
    pthread_mutex_lock(&s->mu);
    s->hello = *mine;
    snprintf(s->hello.site, sizeof s->hello.site, "%s", s->site);
    snprintf(s->hello.run_id, sizeof s->hello.run_id, "%s", s->run_id);
    pthread_mutex_unlock(&s->mu);
}

void al_server_bytes(al_server *s, const char *peer, uint64_t *rx, uint64_t *tx) {
    peer_bytes *p = find_peer(s, peer);
    *rx = p ? atomic_load(&p->rx) : 0;
    *tx = p ? atomic_load(&p->tx) : 0;
}

uint64_t al_server_refusals(al_server *s, al_status st) {
    return (unsigned)st < AL_ARRAY_LEN(s->refusals) ? atomic_load(&s->refusals[st]) : 0;
}

void al_server_stop(al_server *s) {
    if (!s) return;
    grpc_completion_queue *scq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_server_shutdown_and_notify(s->server, scq, (void *)(intptr_t)TAG_SHUTDOWN);
    grpc_server_cancel_all_calls(s->server);
    grpc_completion_queue_pluck(scq, (void *)(intptr_t)TAG_SHUTDOWN,
                                gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    for (int i = 0; i < s->nworkers; i++)
        if (s->workers[i].started) pthread_join(s->workers[i].th, NULL);
    grpc_server_destroy(s->server);
    grpc_completion_queue_shutdown(scq);
    grpc_completion_queue_pluck(scq, NULL, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    grpc_completion_queue_destroy(scq);
    logf_(s, AL_LOG_INFO, "stopped");
    free_server(s);
}
