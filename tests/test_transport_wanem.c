/*
 * test_transport_wanem.c -- a 256 MiB shard through the WAN emulator, which
 * cuts every connection (RST) once 96 MiB have passed and then refuses new
 * connections for a moment. The client must reconnect, ask where to resume,
 * and finish: the server's copy must hash like the sender's (no duplicate,
 * no missing byte), and the bytes sent must show a resume, not a restart.
 * Also: the proxy passes TLS through untouched with latency and jitter; on
 * hold (al_wanem_hold, SIGUSR1 in `autoloco wanem`) a connection is cut and
 * new ones are refused until the hold is released, then accepted again.
 */
#include "al_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
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

/* ---- hold: cut, refuse until released, accept again --------------------------------- */

static int tcp_listen(int *port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 8), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

static int tcp_connect(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* 1 if fd is readable within ms */
static int ready(int fd, int ms) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1;
}

/* A byte sent on one side arrives on the other within 2 s. */
static void passes(int from, int to) {
    char c = 'x', got = 0;
    assert_int_equal(write(from, &c, 1), 1);
    assert_true(ready(to, 2000));
    assert_int_equal(read(to, &got, 1), 1);
    assert_int_equal(got, 'x');
}

/* The proxy closed fd: a read gives EOF or a reset within 2 s. */
static void closed(int fd) {
    char c;
    assert_true(ready(fd, 2000));
    ssize_t n = read(fd, &c, 1);
    assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
}

/* A TCP server on *lfd behind a proxy at rate_mbit (0: unlimited), and one
 * connection through it: *c the client's end, *sfd the server's. */
static al_wanem *proxied(double rate_mbit, int *lfd, int *c, int *sfd) {
    int port;
    *lfd = tcp_listen(&port);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    al_wanem_cfg wc = {.listen = "127.0.0.1:0", .target = target, .rate_mbit = rate_mbit};
    al_wanem *w;
    al_err err = {0};
    if (al_wanem_start(&wc, &w, &err)) fail_msg("%s", err.msg);
    *c = tcp_connect(al_wanem_port(w));
    assert_true(ready(*lfd, 2000));
    *sfd = accept(*lfd, NULL, NULL);
    assert_true(*sfd >= 0);
    return w;
}

static void test_hold(void **state) {
    (void)state;
    int lfd, c1, s1;
    al_wanem *w = proxied(0, &lfd, &c1, &s1);
    passes(c1, s1);
    passes(s1, c1);

    al_wanem_hold(w, 1); /* the open connection is cut on both sides */
    closed(c1);
    closed(s1);
    for (int i = 0; i < 3; i++) { /* refused (accepted, then reset): nothing reaches the server */
        int c = tcp_connect(al_wanem_port(w));
        closed(c);
        close(c);
    }
    assert_false(ready(lfd, 300));

    al_wanem_hold(w, 0); /* accepted and forwarded again */
    int c2 = tcp_connect(al_wanem_port(w));
    assert_true(ready(lfd, 2000));
    int s2 = accept(lfd, NULL, NULL);
    passes(c2, s2);
    passes(s2, c2);

    al_wanem_stats st;
    al_wanem_stats_get(w, &st);
    print_message("    hold: %d connections, %d cut(s), %d refused\n", st.connections, st.cuts,
                  st.refused);
    assert_int_equal(st.connections, 2);
    assert_int_equal(st.cuts, 1);
    assert_int_equal(st.refused, 3);
    al_wanem_stop(w);
    close(c1), close(s1), close(c2), close(s2), close(lfd);
}

/* ---- pacing: the rate holds, in lumps a NIC would deliver -------------------------- */

/* 32 KiB through a 1 Mbit/s link: it takes at least the rate's time (0.26 s:
 * the bucket starts empty), and arrives in a few lumps of ≥ 4 KiB, not in
 * hundreds of small writes (byte-wise pacing: 956 reads for these bytes). */
static void test_pacing(void **state) {
    (void)state;
    int lfd, c, sfd;
    al_wanem *w = proxied(1, &lfd, &c, &sfd);
    static char buf[32 << 10];
    memset(buf, 'p', sizeof buf);
    double t0 = al_now();
    assert_int_equal(write(c, buf, sizeof buf), (ssize_t)sizeof buf);
    size_t got = 0;
    int reads = 0;
    while (got < sizeof buf) {
        assert_true(ready(sfd, 5000));
        ssize_t n = read(sfd, buf, sizeof buf);
        assert_true(n > 0);
        got += (size_t)n;
        reads++;
    }
    double dt = al_now() - t0;
    print_message("    pacing: 32 KiB at 1 Mbit/s in %.3f s, %d reads\n", dt, reads);
    assert_true(dt >= 0.2);
    assert_true(reads <= 16);
    al_wanem_stop(w);
    close(c), close(sfd), close(lfd);
}

/* An idle link banks nothing: 16 KiB sent after a pause still take
 * 16 KiB / rate to cross (a token bucket with a 16 KiB burst passed them at
 * once, so an exchange of small pieces ran at twice the link's rate), and a
 * small message takes its own bytes' time, not a whole write quantum's. */
static void test_pacing_after_idle(void **state) {
    (void)state;
    int lfd, c, sfd;
    al_wanem *w = proxied(1, &lfd, &c, &sfd);
    static char buf[16 << 10];
    memset(buf, 'i', sizeof buf);
    struct timespec pause = {0, 300 * 1000000};
    nanosleep(&pause, NULL);
    double t0 = al_now();
    assert_int_equal(write(c, buf, 200), 200);
    size_t got = 0;
    while (got < 200) {
        assert_true(ready(sfd, 5000));
        ssize_t n = read(sfd, buf, sizeof buf);
        assert_true(n > 0);
        got += (size_t)n;
    }
    double small = al_now() - t0;
    nanosleep(&pause, NULL);
    t0 = al_now();
    assert_int_equal(write(c, buf, sizeof buf), (ssize_t)sizeof buf);
    got = 0;
    while (got < sizeof buf) {
        assert_true(ready(sfd, 5000));
        ssize_t n = read(sfd, buf, sizeof buf);
        assert_true(n > 0);
        got += (size_t)n;
    }
    double dt = al_now() - t0, need = sizeof buf * 8 / 1e6;
    print_message("    after 0.3 s idle at 1 Mbit/s: 200 B in %.4f s, 16 KiB in %.3f s (%.3f s of "
                  "link time)\n",
                  small, dt, need);
    assert_true(dt >= 0.95 * need);
    assert_true(dt < need + 0.5);
    assert_true(small < 0.030); /* 1.6 ms of link time, not a 4 KiB quantum (33 ms) */
    al_wanem_stop(w);
    close(c), close(sfd), close(lfd);
}

/* al_client_cancel from another thread ends a push to a peer that accepted
 * the connection and then froze (it never answers): the push returns at once
 * with CANCELLED and makes no retry, not after its 20 s deadline and 3
 * attempts; an operation begun after the cancel is not cancelled (it runs to
 * its own, short, deadline). */
static void *cancel_later(void *u) {
    struct timespec d = {0, 300 * 1000000};
    nanosleep(&d, NULL);
    al_client_cancel(u);
    return NULL;
}

static void test_client_cancel(void **state) {
    (void)state;
    int port, lfd = tcp_listen(&port);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    al_client_cfg cc = {.target = target,
                        .site = "b",
                        .peer = "a",
                        .tls = {P("ca.pem"), P("b.pem"), P("b.key")},
                        .deadline_s = 20,
                        .control_deadline_s = 0.5,
                        .max_attempts = 3,
                        .backoff_s = 0.05,
                        .backoff_max_s = 0.1};
    al_client *c;
    al_err err = {0};
    if (al_client_new(&cc, &c, &err)) fail_msg("%s", err.msg);
    static uint8_t data[4096];
    al_shard_meta m = {.phase = AL_PHASE_REDUCE,
                       .num_shards = 1,
                       .total_bytes = sizeof data,
                       .codec = AL_CODEC_FP32,
                       .shard_checksum = al_xxh64(data, sizeof data, 0)};
    snprintf(m.site, sizeof m.site, "b");
    pthread_t th;
    double t0 = al_now();
    assert_int_equal(pthread_create(&th, NULL, cancel_later, c), 0);
    int rc = al_client_push_shard(c, &m, data, &err);
    double dt = al_now() - t0;
    pthread_join(th, NULL);
    print_message("    push to a frozen peer, cancelled after 0.3 s: returned after %.2f s: %s\n",
                  dt, err.msg);
    assert_int_not_equal(rc, 0);
    assert_int_equal(al_client_last_status(c), AL_ST_CANCELLED);
    assert_true(dt < 3.0);
    t0 = al_now();
    uint64_t ms;
    assert_int_not_equal(al_client_ping(c, 0, 0, &ms, &err), 0);
    dt = al_now() - t0;
    print_message("    a ping after it: %s after %.2f s\n",
                  al_status_name(al_client_last_status(c)), dt);
    assert_int_equal(al_client_last_status(c), AL_ST_DEADLINE_EXCEEDED);
    assert_true(dt >= 0.4);
    al_client_free(c);
    close(lfd);
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
        cmocka_unit_test(test_hold),
        cmocka_unit_test(test_pacing),
        cmocka_unit_test(test_pacing_after_idle),
        cmocka_unit_test(test_client_cancel),
        cmocka_unit_test(test_latency_and_jitter),
        cmocka_unit_test(test_cut_and_resume_256mib),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    al_remove_tree(dir, &err);
    return rc;
}
