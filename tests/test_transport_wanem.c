/*
 * test_transport_wanem.c -- a 256 MiB shard through the WAN emulator, which
 * cuts every connection (RST) once 96 MiB have passed and then refuses new
 * connections for a moment. The client must reconnect, ask where to resume,
 * and finish: the server's copy must hash like the sender's (no duplicate,
 * no missing byte), and the bytes sent must show a resume, not a restart.
 * Also: the proxy passes TLS through untouched with latency and jitter.
 */
#include "al_test.h"

#include <string.h>
#include <unistd.h>

#include "al_codec.h"
#include "al_transport.h"
#include "al_wanem.h"

static char dir[64];
static uint8_t *received;
static int completed;

static int open_shard(void *u, const al_shard_meta *m, uint8_t **dst, char *why, size_t n) {
    (void)u, (void)why, (void)n;
    *dst = received = malloc(m->total_bytes);
    return 0;
}

static void done_shard(void *u, const al_shard_meta *m, uint8_t *dst, int complete) {
    (void)u, (void)m, (void)dst;
    completed += complete;
}

static const char *P(const char *name) {
    static char buf[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void push_through(uint64_t n, al_wanem_cfg *wc, int expect_cut) {
    const char *peers[] = {"b"};
    al_server_cfg cfg = {.site = "a",
                         .run_id = "r",
                         .peers = peers,
                         .npeers = 1,
                         .tls = {P("ca.pem"), P("a.pem"), P("a.key")},
                         .threads = 2,
                         .max_shard_bytes = n,
                         .hooks = {.shard_open = open_shard, .shard_done = done_shard}};
    al_server *s;
    al_err err = {0};
    if (al_server_start(&cfg, &s, &err)) fail_msg("%s", err.msg);
    char target[64], via[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", al_server_port(s));
    wc->target = target;
    al_wanem *w;
    if (al_wanem_start(wc, &w, &err)) fail_msg("%s", err.msg);
    snprintf(via, sizeof via, "127.0.0.1:%d", al_wanem_port(w));

    uint8_t *data = malloc(n);
    al_rng r;
    al_rng_seed(&r, 11);
    for (uint64_t i = 0; i < n; i += 8) {
        uint64_t v = al_rng_u64(&r);
        memcpy(data + i, &v, 8);
    }
    al_log log;
    al_log_init(&log, AL_LOG_INFO, stderr);
    al_client_cfg cc = {.target = via,
                        .site = "b",
                        .peer = "a",
                        .tls = {P("ca.pem"), P("b.pem"), P("b.key")},
                        .max_attempts = 10,
                        .backoff_s = 0.2,
                        .backoff_max_s = 1,
                        .log = &log};
    al_client *c;
    if (al_client_new(&cc, &c, &err)) fail_msg("%s", err.msg);
    al_shard_meta m = {.phase = AL_PHASE_REDUCE,
                       .num_shards = 1,
                       .total_bytes = n,
                       .codec = AL_CODEC_FP32,
                       .shard_checksum = al_xxh64(data, n, 0)};
    snprintf(m.site, sizeof m.site, "b");
    completed = 0;
    if (al_client_push_shard(c, &m, data, &err)) fail_msg("%s", err.msg);
    uint64_t tx, rx;
    al_client_bytes(c, &tx, &rx);
    al_wanem_stats st;
    al_wanem_stats_get(w, &st);
    print_message("    %llu bytes: client sent %llu, wanem %llu up in %d connection(s), %d cut(s), "
                  "%d refused\n",
                  (unsigned long long)n, (unsigned long long)tx, (unsigned long long)st.up,
                  st.connections, st.cuts, st.refused);
    assert_int_equal(completed, 1);
    assert_true(al_xxh64(received, n, 0) == al_xxh64(data, n, 0)); /* nothing lost or doubled */
    assert_memory_equal(received, data, n);
    if (expect_cut) {
        assert_int_equal(st.cuts, 1);
        assert_true(st.connections >= 2);
        /* a restart from 0 would have sent n + 96 MiB; a resume re-sends only what was
         * in flight (socket buffers, the proxy's queue, gRPC's flow-control window) */
        assert_true(tx < n + (48u << 20));
    }
    al_client_free(c);
    al_wanem_stop(w);
    al_server_stop(s);
    free(data);
    free(received);
    received = NULL;
}

static void test_cut_and_resume_256mib(void **state) {
    (void)state;
    al_wanem_cfg wc = {.listen = "127.0.0.1:0", .cut_after_bytes = 96u << 20, .refuse_s = 0.5};
    push_through(256u << 20, &wc, 1);
}

static void test_latency_and_jitter(void **state) {
    (void)state;
    al_wanem_cfg wc = {
        .listen = "127.0.0.1:0", .delay_ms = 20, .jitter_ms = 10, .rate_mbit = 400, .seed = 3};
    push_through(8u << 20, &wc, 0);
}

static void test_bad_config(void **state) {
    (void)state;
    al_wanem *w;
    al_err err = {0};
    al_wanem_cfg wc = {.target = "nowhere"};
    assert_int_equal(al_wanem_start(&wc, &w, &err), AL_ECONFIG);
    wc = (al_wanem_cfg){.target = "127.0.0.1:1", .delay_ms = 1, .jitter_ms = 2};
    assert_int_equal(al_wanem_start(&wc, &w, &err), AL_ECONFIG);
    print_message("    %s\n", err.msg);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/al-wanem-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const char *sites[] = {"a", "b"};
    al_err err = {0};
    if (al_certs_create(dir, sites, 2, 2, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_latency_and_jitter),
        cmocka_unit_test(test_cut_and_resume_256mib),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    al_remove_tree(dir, &err);
    return rc;
}
