/*
 * test_transport.c -- the gRPC server and client over real mutual TLS on
 * loopback, with certificates made by al_certs_create in a temporary folder.
 *
 * Site "a" serves; "b" and "c" are its listed peers; "mallory" holds a valid
 * certificate of the same CA but is not listed; "b" also has a certificate
 * from another CA. Every refusal of issue 4's list is provoked, its status
 * checked, and after all of them a good transfer still succeeds.
 */
#include "al_test.h"

#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "al_codec.h"
#include "al_transport.h"
#include "autoloco.pb-c.h"

/* ---- a sink that keeps completed shards ------------------------------------------------ */

typedef struct sink {
    pthread_mutex_t mu;
    int opened, completed, abandoned;
    uint8_t *last; /* the last completed shard (owned) */
    uint64_t last_len;
    char puller[AL_SITE_MAX + 1]; /* who pulled state last */
    int lent, returned;           /* state parts handed to the server, and given back */
    uint8_t state[300000];
} sink;

static int sink_open(void *u, const al_shard_meta *m, uint8_t **dst, char *why, size_t n) {
    sink *s = u;
    (void)why;
    (void)n;
    *dst = malloc(m->total_bytes);
    pthread_mutex_lock(&s->mu);
    s->opened++;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void sink_done(void *u, const al_shard_meta *m, uint8_t *dst, int complete) {
    sink *s = u;
    pthread_mutex_lock(&s->mu);
    if (complete) {
        s->completed++;
        free(s->last);
        s->last = dst;
        s->last_len = m->total_bytes;
    } else {
        s->abandoned++;
        free(dst);
    }
    pthread_mutex_unlock(&s->mu);
}

static int sink_state(void *u, const char *site, uint32_t part, const uint8_t **data, uint64_t *len,
                      void **ref, char *why, size_t n) {
    sink *s = u;
    pthread_mutex_lock(&s->mu);
    snprintf(s->puller, sizeof s->puller, "%s", site);
    pthread_mutex_unlock(&s->mu);
    if (part != AL_STATE_THETA) {
        snprintf(why, n, "part %u: none here", part);
        return AL_ST_NOT_FOUND;
    }
    *data = s->state;
    *len = sizeof s->state;
    pthread_mutex_lock(&s->mu);
    s->lent++;
    pthread_mutex_unlock(&s->mu);
    *ref = s->state;
    return 0;
}

/* The carry: the candidate whose hash is 32 bytes of 0x5a is the state above. */
static int sink_candidate(void *u, const char *site, uint32_t part, const uint8_t *hash,
                          const uint8_t **data, uint64_t *len, void **ref, char *why, size_t n) {
    uint8_t want[32];
    memset(want, 0x5a, sizeof want);
    if (memcmp(hash, want, 32) != 0) {
        snprintf(why, n, "no such candidate");
        return AL_ST_NOT_FOUND;
    }
    return sink_state(u, site, part, data, len, ref, why, n);
}

static void sink_state_done(void *u, void *ref) {
    sink *s = u;
    pthread_mutex_lock(&s->mu);
    if (ref == s->state) s->returned++;
    pthread_mutex_unlock(&s->mu);
}

/* ---- fixture ------------------------------------------------------------------------------ */

typedef struct fx {
    char dir[256], other[300];
    char path[8][300];
    sink sk;
    al_server *srv;
    char target[64];
    al_log log;
} fx;

static fx F;

static const char *P(const char *dir, const char *name) {
    static char buf[8][300];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static int setup(void **state) {
    (void)state;
    memset(&F, 0, sizeof F);
    al_log_init(&F.log, AL_LOG_WARN, stderr);
    snprintf(F.dir, sizeof F.dir, "/tmp/al-transport-XXXXXX");
    if (!mkdtemp(F.dir)) return -1;
    snprintf(F.other, sizeof F.other, "%s/other", F.dir);
    const char *sites[] = {"a", "b", "c", "mallory"};
    const char *others[] = {"b"};
    al_err err = {0};
    if (al_certs_create(F.dir, sites, 4, 30, &err) ||
        al_certs_create(F.other, others, 1, 30, &err)) {
        print_error("certs: %s\n", err.msg);
        return -1;
    }
    pthread_mutex_init(&F.sk.mu, NULL);
    for (size_t i = 0; i < sizeof F.sk.state; i++) F.sk.state[i] = (uint8_t)(i * 7 + 3);
    const char *peers[] = {"b", "c"};
    al_server_cfg cfg = {.listen = "127.0.0.1:0",
                         .site = "a",
                         .run_id = "run-1",
                         .peers = peers,
                         .npeers = 2,
                         .tls = {P(F.dir, "ca.pem"), P(F.dir, "a.pem"), P(F.dir, "a.key")},
                         .threads = 3,
                         .max_message = (1u << 20) + (64u << 10),
                         .num_shards = 4,
                         .max_shard_bytes = 64u << 20,
                         .idle_timeout_s = 20,
                         .hooks = {.user = &F.sk,
                                   .shard_open = sink_open,
                                   .shard_done = sink_done,
                                   .state = sink_state,
                                   .state_done = sink_state_done,
                                   .candidate = sink_candidate},
                         .log = &F.log};
    if (al_server_start(&cfg, &F.srv, &err)) {
        print_error("server: %s\n", err.msg);
        return -1;
    }
    al_server_set_round(F.srv, 10, 2);
    snprintf(F.target, sizeof F.target, "127.0.0.1:%d", al_server_port(F.srv));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    al_server_stop(F.srv);
    free(F.sk.last);
    pthread_mutex_destroy(&F.sk.mu);
    al_err err = {0};
    al_remove_tree(F.dir, &err);
    return 0;
}

/* A client of site `site` holding the certificate of `cert_site` from `dir`. */
static al_client *client_as(const char *site, const char *dir, const char *cert_site) {
    char cert[64], key[64];
    snprintf(cert, sizeof cert, "%s.pem", cert_site);
    snprintf(key, sizeof key, "%s.key", cert_site);
    al_client_cfg cfg = {.target = F.target,
                         .site = site,
                         .peer = "a",
                         .run_id = "run-1",
                         .tls = {P(F.dir, "ca.pem"), cert_site ? P(dir, cert) : NULL,
                                 cert_site ? P(dir, key) : NULL},
                         .chunk_bytes = 1u << 20,
                         .deadline_s = 20,
                         .max_attempts = 2,
                         .backoff_s = 0.01,
                         .backoff_max_s = 0.05,
                         .seed = 1};
    al_client *c = NULL;
    al_err err = {0};
    if (al_client_new(&cfg, &c, &err)) fail_msg("client: %s", err.msg);
    return c;
}

static al_shard_meta meta_for(const char *site, uint32_t shard, const uint8_t *data, uint64_t n) {
    al_shard_meta m = {.round = 10,
                       .epoch = 2,
                       .phase = AL_PHASE_REDUCE,
                       .shard_id = shard,
                       .num_shards = 4,
                       .total_bytes = n,
                       .codec = AL_CODEC_INT8,
                       .zstd = 1,
                       .shard_checksum = al_xxh64(data, n, 0)};
    snprintf(m.site, sizeof m.site, "%s", site);
    return m;
}

static uint8_t *pattern(uint64_t n, uint64_t seed) {
    uint8_t *p = malloc(n);
    al_rng r;
    al_rng_seed(&r, seed);
    for (uint64_t i = 0; i < n; i += 8) {
        uint64_t v = al_rng_u64(&r);
        memcpy(p + i, &v, AL_MIN(8, n - i));
    }
    return p;
}

/* A raw chunk of shard 0 from site b, round 10 epoch 2, customised by the caller. */
static Autoloco__V1__ShardChunk chunk_of(const uint8_t *payload, size_t len) {
    Autoloco__V1__ShardChunk ch = AUTOLOCO__V1__SHARD_CHUNK__INIT;
    ch.schema = AL_SCHEMA;
    ch.site = (char *)"b";
    ch.round = 10;
    ch.epoch = 2;
    ch.phase = AUTOLOCO__V1__PHASE__PHASE_REDUCE;
    ch.shard_id = 0;
    ch.num_shards = 4;
    ch.offset = 0;
    ch.total_bytes = len;
    ch.codec = AUTOLOCO__V1__CODEC__CODEC_INT8;
    ch.payload.data = (uint8_t *)payload;
    ch.payload.len = len;
    ch.checksum = al_xxh64(payload, len, 0);
    ch.shard_checksum = al_xxh64(payload, len, 0);
    return ch;
}

/* Send raw chunks to PushShard; return the status and print the details. */
static int push_raw(al_client *c, Autoloco__V1__ShardChunk *chunks, size_t n) {
    uint8_t *bufs[4];
    size_t lens[4];
    for (size_t i = 0; i < n; i++) {
        lens[i] = protobuf_c_message_get_packed_size(&chunks[i].base);
        bufs[i] = malloc(lens[i]);
        protobuf_c_message_pack(&chunks[i].base, bufs[i]);
    }
    al_err err = {0};
    int st =
        al_client_call_raw(c, "PushShard", (const uint8_t *const *)bufs, lens, n, NULL, NULL, &err);
    print_message("    PushShard -> %s: %s\n", al_status_name(st), al_client_last_details(c));
    for (size_t i = 0; i < n; i++) free(bufs[i]);
    return st;
}

/* ---- tests ------------------------------------------------------------------------------------
 */

static void test_hello_and_ping(void **state) {
    (void)state;
    al_hello mine = {.round = 10, .epoch = 2, .next_interval = 40, .n_members = 2};
    snprintf(mine.run_id, sizeof mine.run_id, "run-1");
    snprintf(mine.members[0], sizeof mine.members[0], "a");
    snprintf(mine.members[1], sizeof mine.members[1], "b");
    memset(mine.theta_hash, 0xAB, 32);
    al_hello srv = mine;
    srv.next_interval = 41;
    al_server_set_hello(F.srv, &srv);
    al_client *c = client_as("b", F.dir, "b");
    al_hello theirs;
    al_err err = {0};
    int rc = al_client_hello(c, &mine, &theirs, &err);
    if (rc) fail_msg("%s", err.msg);
    assert_string_equal(theirs.site, "a");
    assert_int_equal(theirs.next_interval, 41);
    assert_int_equal(theirs.theta_hash[31], 0xAB);
    uint64_t ms = 0;
    assert_int_equal(al_client_ping(c, 10, 2, &ms, &err), 0);
    assert_true(ms > 0);
    /* another run id */
    snprintf(mine.run_id, sizeof mine.run_id, "run-2");
    assert_int_equal(al_client_hello(c, &mine, &theirs, &err), AL_EPEER);
    assert_int_equal(al_client_last_status(c), AL_ST_FAILED_PRECONDITION);
    al_client_free(c);
}

static void test_push_shard(void **state) {
    (void)state;
    uint64_t n = (10u << 20) + 12345; /* 10 chunks and a bit */
    uint8_t *data = pattern(n, 5);
    al_client *c = client_as("b", F.dir, "b");
    al_shard_meta m = meta_for("b", 1, data, n);
    al_err err = {0};
    int rc = al_client_push_shard(c, &m, data, &err);
    if (rc) fail_msg("%s", err.msg);
    assert_int_equal(F.sk.last_len, n);
    assert_memory_equal(F.sk.last, data, n);
    uint64_t rx, tx, ctx, crx;
    al_server_bytes(F.srv, "b", &rx, &tx);
    al_client_bytes(c, &ctx, &crx);
    print_message("    server rx %llu tx %llu from/to b; client tx %llu rx %llu\n",
                  (unsigned long long)rx, (unsigned long long)tx, (unsigned long long)ctx,
                  (unsigned long long)crx);
    assert_true(rx >= n && ctx >= n);
    /* the same shard again: a duplicate */
    assert_int_equal(al_client_push_shard(c, &m, data, &err), AL_EPEER);
    assert_int_equal(al_client_last_status(c), AL_ST_ALREADY_EXISTS);
    uint64_t got;
    int complete;
    assert_int_equal(al_client_query_shard(c, &m, &got, &complete, &err), 0);
    assert_true(complete && got == n);
    al_client_free(c);
    free(data);
}

static void expect_refused(al_client *c, int status) {
    al_hello mine = {.round = 10, .epoch = 2, .next_interval = 1};
    snprintf(mine.run_id, sizeof mine.run_id, "run-1");
    al_hello theirs;
    al_err err = {0};
    assert_true(al_client_hello(c, &mine, &theirs, &err) < 0);
    print_message("    %s\n", err.msg);
    assert_int_equal(al_client_last_status(c), status);
}

static void test_identity_refusals(void **state) {
    (void)state;
    al_client *c = client_as("b", F.dir, NULL); /* no client certificate */
    expect_refused(c, AL_ST_UNAVAILABLE);
    al_client_free(c);
    c = client_as("b", F.other, "b"); /* a certificate from another CA */
    expect_refused(c, AL_ST_UNAVAILABLE);
    al_client_free(c);
    c = client_as("c", F.dir, "b"); /* b's certificate claiming to be c */
    expect_refused(c, AL_ST_PERMISSION_DENIED);
    al_client_free(c);
    c = client_as("mallory", F.dir, "mallory"); /* valid, but not a listed peer */
    expect_refused(c, AL_ST_PERMISSION_DENIED);
    al_client_free(c);
    /* a refusal is counted once its call has closed on the server's thread,
     * which may be after the client saw it: wait for the count (at most 5 s) */
    for (int i = 0; i < 500 && al_server_refusals(F.srv, AL_ST_PERMISSION_DENIED) < 2; i++)
        al_sleep(0.01);
    assert_true(al_server_refusals(F.srv, AL_ST_PERMISSION_DENIED) >= 2);
}

static void test_message_refusals(void **state) {
    (void)state;
    al_client *c = client_as("b", F.dir, "b");
    uint8_t payload[1000];
    for (int i = 0; i < 1000; i++) payload[i] = (uint8_t)i;

    /* malformed protobuf, to a unary and to a streaming method */
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
    const uint8_t *msgs[] = {junk};
    size_t lens[] = {sizeof junk};
    al_err err = {0};
    assert_int_equal(al_client_call_raw(c, "Hello", msgs, lens, 1, NULL, NULL, &err),
                     AL_ST_INVALID_ARGUMENT);
    assert_int_equal(al_client_call_raw(c, "PushShard", msgs, lens, 1, NULL, NULL, &err),
                     AL_ST_INVALID_ARGUMENT);
    assert_int_equal(al_client_call_raw(c, "NoSuchMethod", msgs, lens, 1, NULL, NULL, &err),
                     AL_ST_UNIMPLEMENTED);

    Autoloco__V1__ShardChunk ch[2];
    /* wrong offset: nothing held yet, chunk claims offset 100 */
    ch[0] = chunk_of(payload, 1000);
    ch[0].total_bytes = 2000;
    ch[0].offset = 100;
    assert_int_equal(push_raw(c, ch, 1), AL_ST_OUT_OF_RANGE);
    /* wrong size: the total changes between chunks */
    ch[0] = chunk_of(payload, 500);
    ch[0].total_bytes = 1000;
    ch[0].shard_id = 2;
    ch[1] = ch[0];
    ch[1].offset = 500;
    ch[1].total_bytes = 1500;
    assert_int_equal(push_raw(c, ch, 2), AL_ST_OUT_OF_RANGE);
    /* wrong size: the stream ends before total_bytes */
    ch[0] = chunk_of(payload, 500);
    ch[0].total_bytes = 1000;
    ch[0].shard_id = 3;
    assert_int_equal(push_raw(c, ch, 1), AL_ST_OUT_OF_RANGE);
    /* wrong size: larger than the server accepts */
    ch[0] = chunk_of(payload, 1000);
    ch[0].total_bytes = 1u << 30;
    assert_int_equal(push_raw(c, ch, 1), AL_ST_OUT_OF_RANGE);
    /* payload past the end */
    ch[0] = chunk_of(payload, 1000);
    ch[0].total_bytes = 600;
    assert_int_equal(push_raw(c, ch, 1), AL_ST_OUT_OF_RANGE);
    /* shard id out of range, shard count not this run's */
    ch[0] = chunk_of(payload, 1000);
    ch[0].shard_id = 4;
    assert_int_equal(push_raw(c, ch, 1), AL_ST_OUT_OF_RANGE);
    ch[0] = chunk_of(payload, 1000);
    ch[0].num_shards = 8;
    assert_int_equal(push_raw(c, ch, 1), AL_ST_OUT_OF_RANGE);
    /* stale round, stale epoch, a round too far ahead */
    ch[0] = chunk_of(payload, 1000);
    ch[0].round = 9;
    assert_int_equal(push_raw(c, ch, 1), AL_ST_FAILED_PRECONDITION);
    ch[0] = chunk_of(payload, 1000);
    ch[0].epoch = 1;
    assert_int_equal(push_raw(c, ch, 1), AL_ST_FAILED_PRECONDITION);
    ch[0] = chunk_of(payload, 1000);
    ch[0].round = 12;
    assert_int_equal(push_raw(c, ch, 1), AL_ST_FAILED_PRECONDITION);
    /* unknown codec */
    ch[0] = chunk_of(payload, 1000);
    ch[0].codec = (Autoloco__V1__Codec)9;
    assert_int_equal(push_raw(c, ch, 1), AL_ST_UNIMPLEMENTED);
    /* bad chunk checksum; bad checksum of the assembled shard */
    ch[0] = chunk_of(payload, 1000);
    ch[0].checksum ^= 1;
    assert_int_equal(push_raw(c, ch, 1), AL_ST_DATA_LOSS);
    ch[0] = chunk_of(payload, 1000);
    ch[0].shard_checksum ^= 1;
    assert_int_equal(push_raw(c, ch, 1), AL_ST_DATA_LOSS);
    /* an old schema, a bad site name */
    ch[0] = chunk_of(payload, 1000);
    ch[0].schema = 7;
    assert_int_equal(push_raw(c, ch, 1), AL_ST_FAILED_PRECONDITION);
    ch[0] = chunk_of(payload, 1000);
    ch[0].site = (char *)"b/../c";
    assert_int_equal(push_raw(c, ch, 1), AL_ST_INVALID_ARGUMENT);
    /* non-finite statistics */
    al_stats s = {.round = 10, .epoch = 2, .mean_loss = NAN, .steps = 10};
    assert_int_equal(al_client_push_stats(c, &s, &err), AL_EPEER);
    assert_int_equal(al_client_last_status(c), AL_ST_INVALID_ARGUMENT);
    s.mean_loss = 2.5;
    assert_int_equal(al_client_push_stats(c, &s, &err), 0);
    al_client_free(c);

    /* oversize: a client allowed to send 2 MiB messages against a 1 MiB server */
    al_client_cfg cfg = {.target = F.target,
                         .site = "b",
                         .peer = "a",
                         .run_id = "run-1",
                         .tls = {P(F.dir, "ca.pem"), P(F.dir, "b.pem"), P(F.dir, "b.key")},
                         .chunk_bytes = 2u << 20,
                         .max_attempts = 1};
    assert_int_equal(al_client_new(&cfg, &c, &err), 0);
    uint64_t n = 3u << 20;
    uint8_t *data = pattern(n, 9);
    al_shard_meta m = meta_for("b", 3, data, n);
    assert_int_equal(al_client_push_shard(c, &m, data, &err), AL_EPEER);
    print_message("    %s\n", err.msg);
    assert_int_equal(al_client_last_status(c), AL_ST_RESOURCE_EXHAUSTED);
    al_client_free(c);

    /* and the server still serves: a good shard from c */
    c = client_as("c", F.dir, "c");
    m = meta_for("c", 3, data, n);
    if (al_client_push_shard(c, &m, data, &err)) fail_msg("%s", err.msg);
    assert_memory_equal(F.sk.last, data, n);
    al_client_free(c);
    free(data);
}

static void test_resume_and_rounds(void **state) {
    (void)state;
    uint8_t payload[3000];
    for (int i = 0; i < 3000; i++) payload[i] = (uint8_t)(i * 13);
    al_client *c = client_as("b", F.dir, "b");
    /* a stream that stops after the first 1000 of 3000 bytes */
    Autoloco__V1__ShardChunk ch = chunk_of(payload, 1000);
    ch.total_bytes = 3000;
    ch.shard_id = 1;
    ch.round = 11;
    ch.shard_checksum = al_xxh64(payload, 3000, 0);
    assert_int_equal(push_raw(c, &ch, 1), AL_ST_OUT_OF_RANGE);
    al_shard_meta m = meta_for("b", 1, payload, 3000);
    m.round = 11;
    m.codec = AL_CODEC_INT8;
    m.zstd = 0;
    uint64_t got;
    int complete;
    al_err err = {0};
    assert_int_equal(al_client_query_shard(c, &m, &got, &complete, &err), 0);
    assert_int_equal(got, 1000);
    /* push_shard resumes at 1000 */
    int done0 = F.sk.completed;
    if (al_client_push_shard(c, &m, payload, &err)) fail_msg("%s", err.msg);
    assert_int_equal(F.sk.completed, done0 + 1);
    assert_memory_equal(F.sk.last, payload, 3000);
    /* a sender that restarted pushes a shard its old stream left half-sent,
     * without asking first: the server refuses the first try's chunk at offset
     * 0 before writing it, and the next try asks and resumes at 1000 */
    ch.shard_id = 3;
    assert_int_equal(push_raw(c, &ch, 1), AL_ST_OUT_OF_RANGE);
    al_client *c2 = client_as("b", F.dir, "b");
    m.shard_id = 3;
    done0 = F.sk.completed;
    if (al_client_push_shard(c2, &m, payload, &err)) fail_msg("%s", err.msg);
    assert_int_equal(F.sk.completed, done0 + 1);
    assert_memory_equal(F.sk.last, payload, 3000);
    assert_int_equal(al_client_query_shard(c2, &m, &got, &complete, &err), 0);
    assert_true(complete && got == 3000);
    al_client_free(c2);
    /* a half-sent shard of round 11 is abandoned when the round moves on */
    ch.shard_id = 2;
    assert_int_equal(push_raw(c, &ch, 1), AL_ST_OUT_OF_RANGE);
    int ab0 = F.sk.abandoned;
    al_server_set_round(F.srv, 12, 2);
    assert_true(F.sk.abandoned > ab0);
    al_server_set_round(F.srv, 10, 2);
    al_client_free(c);
}

static void test_state_pull(void **state) {
    (void)state;
    al_client *c = client_as("b", F.dir, "b");
    uint8_t *data;
    uint64_t len;
    al_err err = {0};
    if (al_client_pull_state(c, AL_STATE_THETA, 1u << 20, &data, &len, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(len, sizeof F.sk.state);
    assert_memory_equal(data, F.sk.state, len);
    assert_string_equal(F.sk.puller, "b"); /* the hook is told the authenticated caller */
    free(data);
    assert_int_equal(al_client_pull_state(c, AL_STATE_MOMENTUM, 1u << 20, &data, &len, &err),
                     AL_EPEER);
    assert_int_equal(al_client_last_status(c), AL_ST_NOT_FOUND);
    assert_int_equal(al_client_pull_state(c, AL_STATE_THETA, 1000, &data, &len, &err), AL_EPEER);
    assert_int_equal(al_client_last_status(c), AL_ST_OUT_OF_RANGE); /* larger than we accept */
    uint8_t h[32]; /* a candidate by its hash: served when held, NOT_FOUND when not */
    memset(h, 0x5a, sizeof h);
    if (al_client_pull_candidate(c, AL_STATE_THETA, h, 1u << 20, &data, &len, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(len, sizeof F.sk.state);
    assert_memory_equal(data, F.sk.state, len);
    free(data);
    h[0] ^= 1;
    assert_int_equal(al_client_pull_candidate(c, AL_STATE_THETA, h, 1u << 20, &data, &len, &err),
                     AL_EPEER);
    assert_int_equal(al_client_last_status(c), AL_ST_NOT_FOUND);
    al_client_free(c);
    /* every part the hook lent came back once the server stopped reading it
     * (the refused pull too: its stream broke); the NOT_FOUND lent none */
    int lent = 0, returned = -1;
    for (int i = 0; i < 200 && lent != returned; i++) {
        pthread_mutex_lock(&F.sk.mu);
        lent = F.sk.lent;
        returned = F.sk.returned;
        pthread_mutex_unlock(&F.sk.mu);
        if (lent != returned) usleep(10000);
    }
    assert_true(lent >= 2);
    assert_int_equal(returned, lent);
}

/* al_cert_site on the run's own certificates (the CN, confirmed by the DNS
 * SAN al_certs_create writes) and on input that is not a certificate; the
 * forged cases (a NUL in the CN, two CNs, a SAN that contradicts the CN) are in
 * test_transport_interop.py, which can build such certificates. */
static void test_cert_site(void **state) {
    (void)state;
    al_err err = {0};
    char site[AL_SITE_MAX + 1] = "";
    FILE *f = fopen(P(F.dir, "mallory.pem"), "r");
    assert_non_null(f);
    char pem[8192];
    size_t n = fread(pem, 1, sizeof pem, f);
    fclose(f);
    assert_int_equal(al_cert_site(pem, n, site, &err), 0);
    assert_string_equal(site, "mallory");
    strcpy(site, "unchanged");
    assert_int_equal(al_cert_site("not a certificate", 17, site, &err), AL_EPERM);
    assert_non_null(strstr(err.msg, "does not parse"));
    assert_string_equal(site, "unchanged");
    assert_int_equal(al_cert_site(pem, n / 2, site, &err), AL_EPERM); /* cut short */
}

static void test_keys_and_certs(void **state) {
    (void)state;
    al_err err = {0};
    const char *sites[] = {"b"};
    assert_int_equal(al_certs_create(F.dir, sites, 1, 30, &err), AL_EIO); /* no overwrite */
    print_message("    %s\n", err.msg);
    struct stat st;
    assert_int_equal(stat(P(F.dir, "b.key"), &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    const char *bad[] = {"../x"};
    assert_int_equal(al_certs_create(F.dir, bad, 1, 30, &err), AL_EINVAL);
    /* a key readable by others is refused, on both sides */
    assert_int_equal(chmod(P(F.dir, "c.key"), 0644), 0);
    al_client_cfg cfg = {.target = F.target,
                         .site = "c",
                         .peer = "a",
                         .tls = {P(F.dir, "ca.pem"), P(F.dir, "c.pem"), P(F.dir, "c.key")}};
    al_client *c = NULL;
    assert_int_equal(al_client_new(&cfg, &c, &err), AL_ECONFIG);
    print_message("    %s\n", err.msg);
    al_server_cfg scfg = {.site = "c",
                          .run_id = "r",
                          .tls = {P(F.dir, "ca.pem"), P(F.dir, "c.pem"), P(F.dir, "c.key")}};
    al_server *s = NULL;
    assert_int_equal(al_server_start(&scfg, &s, &err), AL_ECONFIG);
    assert_int_equal(chmod(P(F.dir, "c.key"), 0600), 0);
}

static void test_insecure(void **state) {
    (void)state;
    const char *peers[] = {"b"};
    al_server_cfg cfg = {
        .site = "a",
        .run_id = "run-1",
        .peers = peers,
        .npeers = 1,
        .insecure = 1,
        .hooks = {.user = &F.sk, .shard_open = sink_open, .shard_done = sink_done}};
    al_server *s;
    al_err err = {0};
    assert_int_equal(al_server_start(&cfg, &s, &err), 0);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", al_server_port(s));
    al_client_cfg ccfg = {.target = target, .site = "b", .peer = "a", .insecure = 1};
    al_client *c;
    assert_int_equal(al_client_new(&ccfg, &c, &err), 0);
    uint8_t *data = pattern(100000, 3);
    al_shard_meta m = meta_for("b", 0, data, 100000);
    m.round = 0;
    m.epoch = 0;
    m.num_shards = 1;
    if (al_client_push_shard(c, &m, data, &err)) fail_msg("%s", err.msg);
    assert_memory_equal(F.sk.last, data, 100000);
    al_client_free(c);
    al_server_stop(s);
    free(data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_and_ping),    cmocka_unit_test(test_push_shard),
        cmocka_unit_test(test_identity_refusals), cmocka_unit_test(test_message_refusals),
        cmocka_unit_test(test_resume_and_rounds), cmocka_unit_test(test_state_pull),
        cmocka_unit_test(test_cert_site),         cmocka_unit_test(test_keys_and_certs),
        cmocka_unit_test(test_insecure),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
