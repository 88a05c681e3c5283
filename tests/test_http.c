/*
 * test_http.c -- the agent's HTTP server and metrics renderings, over real
 * sockets on 127.0.0.1:
 *  - /metrics parses as the Prometheus text format, line by line (names, HELP
 *    and TYPE lines before samples, label quoting and escapes, values), and
 *    its counters equal what was recorded;
 *  - /api/v1/status and /api/v1/rounds are JSON with the recorded values;
 *  - unknown paths are 404, other methods 405, a huge URL or header is refused
 *    and the server keeps serving;
 *  - many slow clients holding connections open neither block metric updates
 *    nor stop a normal request from being answered.
 */
#include "al_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ctype.h>
#include <jansson.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "al_monitor.h"

static int connect_local(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Send a raw request, read the whole response; returns the status code. */
static int http_raw(int port, const char *req, size_t reqlen, char **body) {
    int fd = connect_local(port);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < reqlen) {
        ssize_t w = send(fd, req + off, reqlen - off, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += (size_t)w;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    ssize_t r;
    while ((r = recv(fd, buf + n, cap - n, 0)) > 0) {
        n += (size_t)r;
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
    }
    buf[n] = '\0';
    close(fd);
    int code = -1;
    sscanf(buf, "HTTP/1.%*d %d", &code);
    char *b = strstr(buf, "\r\n\r\n");
    if (body) *body = strdup(b ? b + 4 : "");
    free(buf);
    return code;
}

static int http_get(int port, const char *path, char **body) {
    char req[512];
    int n =
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    return http_raw(port, req, (size_t)n, body);
}

/* ---- a Prometheus text-format checker -------------------------------------------- */

static int metric_name_ok(const char *s, size_t n) {
    if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == ':')) return 0;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == ':')) return 0;
    return 1;
}

/* Returns NULL if the text is valid, else a static description. Also counts samples. */
static const char *check_prometheus(const char *text, int *samples, char *why, size_t cap) {
    char typed[128][128];
    int ntyped = 0;
    *samples = 0;
    int lineno = 0;
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        if (!eol) return "last line not terminated by a newline";
        size_t len = (size_t)(eol - p);
        lineno++;
        char line[2048];
        if (len >= sizeof line) return "line too long";
        memcpy(line, p, len);
        line[len] = '\0';
        p = eol + 1;
        if (len == 0) continue;
        if (line[0] == '#') {
            char kw[16], name[128], rest[1024] = "";
            int k = sscanf(line, "# %15s %127s %1023[^\n]", kw, name, rest);
            if (k >= 2 && !strcmp(kw, "TYPE")) {
                if (!metric_name_ok(name, strlen(name))) return "bad name in TYPE";
                if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram") &&
                    strcmp(rest, "summary") && strcmp(rest, "untyped"))
                    return "bad TYPE";
                for (int i = 0; i < ntyped; i++)
                    if (!strcmp(typed[i], name)) return "TYPE given twice";
                snprintf(typed[ntyped++], sizeof typed[0], "%s", name);
            } else if (k >= 2 && !strcmp(kw, "HELP")) {
                if (!metric_name_ok(name, strlen(name))) return "bad name in HELP";
            }
            continue;
        }
        /* sample: name[{labels}] value */
        size_t i = 0;
        while (line[i] && line[i] != '{' && line[i] != ' ') i++;
        if (!metric_name_ok(line, i)) {
            snprintf(why, cap, "line %d: bad metric name", lineno);
            return why;
        }
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)i, line);
        /* its family must have been TYPEd before (histogram suffixes allowed) */
        int found = 0;
        for (int t = 0; t < ntyped && !found; t++) {
            size_t tl = strlen(typed[t]);
            if (!strcmp(name, typed[t]))
                found = 1;
            else if (!strncmp(name, typed[t], tl) &&
                     (!strcmp(name + tl, "_bucket") || !strcmp(name + tl, "_sum") ||
                      !strcmp(name + tl, "_count")))
                found = 1;
        }
        if (!found) {
            snprintf(why, cap, "line %d: sample %s before its TYPE", lineno, name);
            return why;
        }
        if (line[i] == '{') {
            i++;
            while (line[i] != '}') {
                size_t s = i;
                while (isalnum((unsigned char)line[i]) || line[i] == '_') i++;
                if (i == s || isdigit((unsigned char)line[s]) || line[i] != '=' ||
                    line[i + 1] != '"') {
                    snprintf(why, cap, "line %d: bad label", lineno);
                    return why;
                }
                i += 2;
                while (line[i] && line[i] != '"') {
                    if (line[i] == '\\') {
                        if (line[i + 1] != '\\' && line[i + 1] != '"' && line[i + 1] != 'n') {
                            snprintf(why, cap, "line %d: bad escape", lineno);
                            return why;
                        }
                        i++;
                    }
                    i++;
                }
                if (line[i] != '"') return "unterminated label value";
                i++;
                if (line[i] == ',')
                    i++;
                else if (line[i] != '}')
                    return "bad label separator";
            }
            i++;
        }
        if (line[i] != ' ') return "no space before value";
        const char *v = line + i + 1;
        char *end;
        strtod(v, &end);
        if (end == v && strcmp(v, "NaN") && strcmp(v, "+Inf") && strcmp(v, "-Inf")) {
            snprintf(why, cap, "line %d: bad value '%s'", lineno, v);
            return why;
        }
        (*samples)++;
    }
    return NULL;
}

/* value of the sample line starting with `prefix` */
static double sample(const char *text, const char *prefix) {
    const char *p = strstr(text, prefix);
    if (!p) fail_msg("no sample %s", prefix);
    p = strchr(p, ' ');
    return strtod(p + 1, NULL);
}

static al_metrics g_m;
static al_http *g_h;

static int setup(void **state) {
    (void)state;
    al_err err = {0};
    if (al_metrics_init(&g_m, "site-\"a\"", &err)) return -1;
    al_http_cfg cfg = {.address = "127.0.0.1",
                       .port = 0,
                       .max_connections = 64,
                       .timeout_s = 3,
                       .head_timeout_s = 2};
    if (al_http_start(&g_h, &cfg, &g_m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    /* a plausible run: 3 rounds */
    for (int r = 1; r <= 3; r++) {
        al_round_record rec = {0};
        rec.round = r;
        rec.step = 50L * r;
        rec.h = 50;
        rec.h_next = 50 + 10 * r;
        rec.members = 2;
        rec.nsites = 2;
        snprintf(rec.sites[0], 32, "a");
        snprintf(rec.sites[1], 32, "b");
        rec.site_loss[0] = 3.0 - 0.1 * r;
        rec.site_loss[1] = 3.1 - 0.1 * r;
        rec.train_loss = rec.site_loss[0];
        rec.eval_loss = r == 3 ? 2.5 : NAN;
        rec.bytes_sent = 1000.0 * r;
        rec.bytes_diloco = 1500.0 * r;
        rec.bytes_ddp = 100000.0 * r;
        rec.bytes_raw = 7000.0 * r;
        rec.compute_s = 1.0;
        rec.comm_s = 0.2;
        rec.wait_s = 0.05;
        assert_int_equal(al_metrics_add_round(&g_m, &rec, &err), 0);
        al_metrics_round_duration(&g_m, 1.25);
    }
    al_metrics_set(&g_m, AL_M_BYTES_SENT, 3000);
    al_metrics_set(&g_m, AL_M_BYTES_DILOCO, 4500);
    al_metrics_set(&g_m, AL_M_BYTES_DDP, 300000);
    al_metrics_set(&g_m, AL_M_BYTES_RAW, 21000);
    al_metrics_add(&g_m, AL_M_SYNCS, 3);
    al_metrics_peer(&g_m, "b", 3000, 2900, 0.5);
    char *line = al_metrics_event(&g_m, "drop", "b", 2, 100); /* the event log's line */
    int ok = line && strstr(line, "\"event\":\"drop\"") && strstr(line, "\"site\":\"b\"");
    free(line);
    al_metrics_peer_up(&g_m, "b", 0);
    return ok ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    al_http_stop(g_h);
    al_metrics_free(&g_m);
    return 0;
}

static void test_metrics_format(void **state) {
    (void)state;
    int port = al_http_port(g_h);
    char *body;
    assert_int_equal(http_get(port, "/metrics", &body), 200);
    int samples;
    char why[256];
    const char *bad = check_prometheus(body, &samples, why, sizeof why);
    if (bad) fail_msg("not Prometheus text: %s", bad);
    print_message("  /metrics: %d samples, valid\n", samples);
    assert_true(samples >= AL_M_COUNT + 2 + 14);
    /* the site label's quote was escaped, and the counters are what we recorded */
    assert_non_null(strstr(body, "site=\"site-\\\"a\\\"\""));
    assert_true(sample(body, "autoloco_sent_bytes_total{") == 3000);
    assert_true(sample(body, "autoloco_syncs_total{") == 3);
    /* membership: b was left out, one drop so far */
    assert_true(sample(body, "autoloco_peer_up{") == 0);
    assert_true(sample(body, "autoloco_events_total{") == 1);
    assert_non_null(strstr(body, "kind=\"drop\""));
    assert_true(sample(body, "autoloco_peer_received_bytes_total{") == 2900);
    assert_true(sample(body, "autoloco_round_duration_seconds_count{") == 3);
    assert_true(
        sample(body, "autoloco_round_duration_seconds_bucket{site=\"site-\\\"a\\\"\",le=\"1\"}") ==
        0);
    assert_true(
        sample(body,
               "autoloco_round_duration_seconds_bucket{site=\"site-\\\"a\\\"\",le=\"2.5\"}") == 3);
    free(body);
    /* the checker itself rejects what it should */
    const char *wrong[] = {"x 1\n",
                           "# TYPE x counter\nx{a=\"b} 1\n",
                           "# TYPE x counter\nx 1",
                           "# TYPE x counter\nx{a=\"\\q\"} 1\n",
                           "# TYPE x blob\n",
                           "# TYPE x counter\nx abc\n",
                           "# TYPE 9x counter\n"};
    for (size_t i = 0; i < AL_ARRAY_LEN(wrong); i++)
        assert_non_null(check_prometheus(wrong[i], &samples, why, sizeof why));
}

static void test_json_api(void **state) {
    (void)state;
    int port = al_http_port(g_h);
    char *body;
    assert_int_equal(http_get(port, "/api/v1/status", &body), 200);
    json_t *s = json_loads(body, 0, NULL);
    assert_non_null(s);
    assert_true(json_real_value(json_object_get(s, "bytes_sent")) == 3000);
    double pct = json_real_value(json_object_get(s, "savings_vs_diloco_pct"));
    assert_true(fabs(pct - 100.0 * (1 - 3000.0 / 4500.0)) < 1e-9);
    assert_true(fabs(json_real_value(json_object_get(s, "compression_ratio")) - 7.0) < 1e-12);
    json_decref(s);
    free(body);
    assert_int_equal(http_get(port, "/api/v1/rounds", &body), 200);
    json_t *r = json_loads(body, 0, NULL);
    assert_non_null(r);
    json_t *rounds = json_object_get(r, "rounds");
    assert_int_equal(json_array_size(rounds), 3);
    json_t *last = json_array_get(rounds, 2);
    assert_true(fabs(json_real_value(json_object_get(json_object_get(last, "losses"), "b")) -
                     (3.1 - 0.1 * 3)) < 1e-12);
    assert_true(json_is_null(json_object_get(json_array_get(rounds, 0), "eval_loss")));
    assert_int_equal(json_array_size(json_object_get(r, "events")), 1);
    json_decref(r);
    free(body);
    assert_int_equal(http_get(port, "/", &body), 200);
    assert_non_null(strstr(body, "<title>autoloco dashboard</title>"));
    free(body);
}

static void test_bad_requests(void **state) {
    (void)state;
    int port = al_http_port(g_h);
    char *body;
    assert_int_equal(http_get(port, "/nope", &body), 404);
    free(body);
    assert_int_equal(http_get(port, "/metrics/../etc/passwd", &body), 404);
    free(body);
    const char post[] = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                        "Connection: close\r\n\r\nhi";
    assert_int_equal(http_raw(port, post, sizeof post - 1, &body), 405);
    free(body);
    /* a 100 KB URL and a 100 KB header: refused with an error status */
    size_t big = 100000;
    char *req = malloc(big + 200);
    int n = sprintf(req, "GET /");
    memset(req + n, 'a', big);
    n += (int)big;
    n += sprintf(req + n, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    int code = http_raw(port, req, (size_t)n, &body);
    print_message("  100 KB URL -> %d\n", code);
    assert_true(code == 414 || code == 431 || code == 400);
    free(body);
    n = sprintf(req, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(req + n, 'b', big);
    n += (int)big;
    n += sprintf(req + n, "\r\nConnection: close\r\n\r\n");
    code = http_raw(port, req, (size_t)n, &body);
    print_message("  100 KB header -> %d\n", code);
    assert_true(code == 431 || code == 413 || code == 400);
    free(body);
    free(req);
    /* garbage that is not HTTP */
    code = http_raw(port, "\x01\x02\x03\r\n\r\n", 7, &body);
    assert_true(code == 400 || code == -1);
    free(body);
    /* still serving */
    assert_int_equal(http_get(port, "/api/v1/status", &body), 200);
    free(body);
}

/* Slow clients (issue 17): 80 connections from one address that each send a
 * header line every 0.3 s and never finish their head (more than the 64
 * slots). The metrics keep updating without waiting on them; the server
 * shuts each down when its head is not complete 2 s (head_timeout_s) after it
 * opened, however often it sends, so a normal request from the same address
 * is answered soon after; with an idle timeout alone they would hold every
 * slot for as long as they keep talking (checked: with head_timeout_s = 1000
 * this test fails, 6 still held). */
static void test_slow_clients(void **state) {
    (void)state;
    int port = al_http_port(g_h);
    enum { SLOW = 80 };
    int fds[SLOW];
    double t_open = al_now();
    for (int i = 0; i < SLOW; i++) {
        fds[i] = connect_local(port);
        if (fds[i] >= 0) send(fds[i], "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL);
    }
    /* the training side keeps updating without waiting on any client */
    double worst = 0;
    for (int i = 0; i < 20000; i++) {
        double t0 = al_now();
        al_metrics_add(&g_m, AL_M_INNER_STEPS, 1);
        double dt = al_now() - t0;
        if (dt > worst) worst = dt;
    }
    print_message("  %d slow clients: worst metric update %.3f ms\n", SLOW, worst * 1e3);
    assert_true(worst < 0.1); /* 100 ms: nothing blocks on the slow sockets */
    /* keep talking for 3 head deadlines: those that waited in the listen
     * backlog while the first 64 held the slots get their own 2 s from their
     * accept, so by then every one of them has been cut */
    double answered = -1, t_end = t_open + 3 * 2.0;
    while (al_now() < t_end) {
        for (int i = 0; i < SLOW; i++) /* keep talking, never finish */
            if (fds[i] >= 0) send(fds[i], "X-Slow: 1\r\n", 11, MSG_NOSIGNAL);
        char *body = NULL;
        if (answered < 0 && http_get(port, "/api/v1/status", &body) == 200)
            answered = al_now() - t_open;
        free(body);
        struct timespec nap = {0, 300 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    print_message("  a normal request from the same address answered %.1f s after they came\n",
                  answered);
    assert_true(answered >= 0);
    /* and every slow connection has been closed by the server by now */
    int open_ = 0;
    for (int i = 0; i < SLOW; i++) {
        if (fds[i] < 0) continue;
        struct timeval tv = {0, 500 * 1000};
        setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char c;
        ssize_t r = recv(fds[i], &c, 1, 0);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) open_++; /* still held */
        close(fds[i]);
    }
    print_message("  slow connections still held: %d of %d\n", open_, SLOW);
    assert_int_equal(open_, 0);
}

/* More slow clients than the connection limit, from the page's own address,
 * with a head deadline too long to help (1000 s): each connection accepted
 * beyond the limit sheds the one that has waited longest for its request
 * head, so a normal request is answered at once and the server holds no more
 * than its limit. Without the shedding (checked: shed_oldest returning at
 * once) the request waits in the listen queue and this test fails. */
static void test_shed_at_limit(void **state) {
    (void)state;
    enum { LIMIT = 16, SLOW = 40 };
    al_err err = {0};
    al_metrics m;
    al_http *h = NULL;
    al_http_cfg cfg = {.address = "127.0.0.1",
                       .port = 0,
                       .max_connections = LIMIT,
                       .timeout_s = 1000,
                       .head_timeout_s = 1000};
    assert_int_equal(al_metrics_init(&m, "a", &err), 0);
    assert_int_equal(al_http_start(&h, &cfg, &m, &err), 0);
    int port = al_http_port(h), fds[SLOW];
    static const char head[] = "GET / HTTP/1.1\r\nX-Slow: 1\r\n"; /* and never the blank line */
    for (int i = 0; i < SLOW; i++) {
        fds[i] = connect_local(port);
        if (fds[i] >= 0) send(fds[i], head, sizeof head - 1, MSG_NOSIGNAL);
    }
    struct timespec nap = {0, 300 * 1000 * 1000}; /* the server has accepted them all */
    nanosleep(&nap, NULL);
    double t0 = al_now();
    char *body = NULL;
    int code = http_get(port, "/api/v1/status", &body);
    double took = al_now() - t0;
    free(body);
    al_http_count c;
    al_http_counts(h, &c);
    print_message("  %d slow clients, limit %d: a normal request answered in %.3f s (%d), "
                  "%lu shed, %d open\n",
                  SLOW, LIMIT, took, code, c.shed, c.open);
    assert_int_equal(code, 200);
    assert_true(took < 2.0);
    assert_true(c.shed >= SLOW - LIMIT);
    assert_true(c.open <= LIMIT);
    assert_int_equal(c.head_cut, 0);
    for (int i = 0; i < SLOW; i++)
        if (fds[i] >= 0) close(fds[i]);
    al_http_stop(h);
    al_metrics_free(&m);
}

/* The saving in its parts (issue 36: the lead figure credited the policy
 * with the codec's saving): the policy's is DiLoCo's syncs and fp32 bytes
 * less ours, the codec's the fp32 bytes less those sent; a part below zero
 * stays a signed cost; nothing to compare with gives 0, not a division by 0. */
static void test_savings(void **state) {
    (void)state;
    double v[AL_M_COUNT] = {0};
    v[AL_M_SYNCS] = 12;
    v[AL_M_SYNCS_DILOCO] = 15;
    v[AL_M_BYTES_DILOCO] = 15000;
    v[AL_M_BYTES_RAW] = 12000;
    v[AL_M_BYTES_SENT] = 3000;
    v[AL_M_BYTES_DDP] = 600000;
    al_savings s;
    al_savings_of(v, &s);
    assert_true(s.syncs_avoided == 3);
    assert_true(s.policy_bytes == 3000 && s.policy_pct == 20 && s.other_bytes == 0);
    assert_true(s.codec_bytes == 9000 && s.codec_pct == 75);
    assert_true(s.total_bytes == 12000 && s.total_pct == 80);
    assert_true(s.ddp_bytes == 597000 && s.ddp_pct == 99.5);
    /* H = H_base: the policy saved nothing, the codec all of it (the user's
     * 75.6% "saved vs DiLoCo" with 0 syncs avoided) */
    v[AL_M_SYNCS] = 15;
    v[AL_M_BYTES_RAW] = 15000;
    al_savings_of(v, &s);
    assert_true(s.syncs_avoided == 0 && s.policy_bytes == 0 && s.policy_pct == 0);
    assert_true(s.codec_pct == 80 && s.total_pct == 80);
    /* more syncs than DiLoCo, and a codec (fp32) whose framing costs: signed */
    v[AL_M_SYNCS] = 17;
    v[AL_M_BYTES_RAW] = 17000;
    v[AL_M_BYTES_SENT] = 17100;
    al_savings_of(v, &s);
    assert_true(s.syncs_avoided == -2 && s.policy_bytes == -2000 && s.other_bytes == 0);
    assert_true(s.codec_bytes == -100 && s.codec_pct < 0 && s.total_bytes == -2100);
    /* H = H_base, and an attempt that failed and was sent again (500 fp32
     * bytes): not the policy's cost (it was, "97.96 KB (fp32) more" with 0
     * syncs avoided after a site was killed), the rest's */
    v[AL_M_SYNCS] = 15;
    v[AL_M_BYTES_RAW] = 15500;
    v[AL_M_BYTES_SENT] = 4000;
    al_savings_of(v, &s);
    assert_true(s.syncs_avoided == 0 && s.policy_bytes == 0 && s.policy_pct == 0);
    assert_true(s.other_bytes == -500 && s.codec_bytes == 11500 && s.total_bytes == 11000);
    assert_true(s.policy_bytes + s.codec_bytes + s.other_bytes == s.total_bytes);
    double zero[AL_M_COUNT] = {0};
    al_savings_of(zero, &s);
    assert_true(s.policy_pct == 0 && s.codec_pct == 0 && s.total_pct == 0 && s.ddp_pct == 0);
}

static json_t *status_of(al_metrics *m) {
    char *s = al_metrics_status_json(m);
    json_t *o = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    assert_non_null(o);
    return o;
}

static json_t *last_round_of(al_metrics *m) {
    char *s = al_metrics_rounds_json(m);
    json_t *o = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    assert_non_null(o);
    json_t *rs = json_object_get(o, "rounds");
    json_t *r = json_incref(json_array_get(rs, json_array_size(rs) - 1));
    json_decref(o);
    return r;
}

/* Agreement per round, kept up to date after the commit (issue 36: "2 of 3"
 * on every row of a healthy run, where the third vote came after the
 * quorum), and the health line naming a peer that is down (it was empty). */
static void test_agreement_health(void **state) {
    (void)state;
    al_err err = {0};
    al_metrics m;
    assert_int_equal(al_metrics_init(&m, "a", &err), 0);
    const char *bad[] = {"a", ""};
    assert_int_equal(al_metrics_sites(&m, bad, 2, &err), AL_EINVAL);
    assert_non_null(strstr(err.msg, "site 1's name is empty"));
    assert_int_equal(al_metrics_sites(&m, bad, 0, &err), AL_EINVAL);
    assert_non_null(strstr(err.msg, "0 configured sites"));
    /* a site name may be 64 characters long (AL_SITE_MAX), not 65 */
    char n64[66];
    memset(n64, 'x', 65);
    n64[65] = '\0';
    const char *longer[] = {"a", n64};
    assert_int_equal(al_metrics_sites(&m, longer, 2, &err), AL_EINVAL);
    assert_non_null(strstr(err.msg, "longer than 64"));
    n64[64] = '\0';
    assert_int_equal(al_metrics_sites(&m, longer, 2, &err), 0);
    al_metrics_free(&m);
    assert_int_equal(al_metrics_init(&m, "a", &err), 0);
    const char *names[] = {"a", "b", "c"};
    assert_int_equal(al_metrics_sites(&m, names, 3, &err), 0);
    unsigned char h[32], other[32];
    memset(h, 0xab, sizeof h);
    memset(other, 0x01, sizeof other);
    al_round_record rec = {.round = 4, .step = 40, .h = 10, .h_next = 10, .members = 3};
    for (int i = 0; i < 32; i++) snprintf(rec.theta + 2 * i, 3, "%02x", h[i]);
    rec.configured = 3;
    rec.equal = 1u | 2u; /* a and b at the commit (the quorum) */
    assert_int_equal(al_metrics_add_round(&m, &rec, &err), 0);
    json_t *r = last_round_of(&m);
    assert_int_equal(json_integer_value(json_object_get(r, "agree")), 2);
    assert_int_equal(json_integer_value(json_object_get(r, "differ")), 0);
    json_decref(r);
    /* c's vote for another hash may be a failed attempt's: not counted */
    assert_null(al_metrics_theta_seen(&m, 4, 2, other, 0));
    /* c's vote for it, after the quorum: counted, once */
    char *line = al_metrics_theta_seen(&m, 4, 2, h, 0);
    assert_non_null(line);
    json_t *ev = json_loads(line, 0, NULL);
    free(line);
    assert_string_equal(json_string_value(json_object_get(ev, "event")), "agree");
    assert_int_equal(json_integer_value(json_object_get(ev, "round")), 4);
    assert_int_equal(json_integer_value(json_object_get(ev, "agree")), 3);
    assert_int_equal(json_array_size(json_object_get(ev, "sites_equal")), 3);
    json_decref(ev);
    assert_null(al_metrics_theta_seen(&m, 4, 2, h, 1)); /* no change: no line */
    assert_null(al_metrics_theta_seen(&m, 9, 1, h, 1)); /* no such round */
    r = last_round_of(&m);
    assert_int_equal(json_integer_value(json_object_get(r, "agree")), 3);
    json_decref(r);
    /* b started the next round from another θ: it differs */
    line = al_metrics_theta_seen(&m, 4, 1, other, 1);
    assert_non_null(line);
    free(line);
    r = last_round_of(&m);
    assert_int_equal(json_integer_value(json_object_get(r, "differ")), 1);
    assert_string_equal(json_string_value(json_array_get(json_object_get(r, "sites_differ"), 0)),
                        "b");
    json_decref(r);
    /* health: empty while all are up; a peer down is named with its last round */
    al_metrics_peer_up(&m, "b", 1);
    al_metrics_peer_up(&m, "c", 1);
    json_t *st = status_of(&m);
    assert_string_equal(json_string_value(json_object_get(st, "health")), "");
    assert_int_equal(json_integer_value(json_object_get(st, "configured")), 3);
    assert_int_equal(json_array_size(json_object_get(st, "peers")), 2);
    json_decref(st);
    al_metrics_peer_reachable(&m, "c", 0);
    al_metrics_peer_up(&m, "c", 0);
    st = status_of(&m);
    const char *hl = json_string_value(json_object_get(st, "health"));
    print_message("  health with c down: '%s'\n", hl);
    assert_non_null(strstr(hl, "c down, last round with us"));
    assert_null(strstr(hl, "b "));
    json_t *pc = json_array_get(json_object_get(st, "peers"), 1);
    assert_string_equal(json_string_value(json_object_get(pc, "peer")), "c");
    assert_true(json_is_true(json_object_get(pc, "down")));
    json_decref(st);
    /* with the protocol's warning first; b answering but left out */
    al_metrics_set_health(&m, "no quorum: 1 of 3 sites reachable");
    al_metrics_peer_up(&m, "b", 0);
    st = status_of(&m);
    hl = json_string_value(json_object_get(st, "health"));
    assert_true(!strncmp(
        hl, "no quorum: 1 of 3 sites reachable; b left out of the last round; c down", 71));
    json_decref(st);
    /* c back: no longer down */
    al_metrics_set_health(&m, "");
    al_metrics_peer_reachable(&m, "c", 1);
    al_metrics_peer_up(&m, "b", 1);
    st = status_of(&m);
    assert_string_equal(json_string_value(json_object_get(st, "health")),
                        "c left out of the last round");
    json_decref(st);
    al_metrics_free(&m);
}

static void test_round_record_jsonl(void **state) {
    (void)state;
    al_round_record rec = {0};
    rec.round = 7;
    rec.step = 350;
    rec.h = 50;
    rec.eval_loss = NAN;
    rec.nsites = 1;
    snprintf(rec.sites[0], 32, "a");
    rec.site_loss[0] = 2.0;
    char *s = al_round_record_json("a", &rec);
    assert_non_null(s);
    assert_null(strchr(s, '\n'));
    json_t *o = json_loads(s, 0, NULL);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "event")), "round");
    assert_int_equal(json_integer_value(json_object_get(o, "step")), 350);
    assert_true(json_is_null(json_object_get(o, "eval_loss")));
    json_decref(o);
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_format),   cmocka_unit_test(test_json_api),
        cmocka_unit_test(test_bad_requests),     cmocka_unit_test(test_slow_clients),
        cmocka_unit_test(test_shed_at_limit),    cmocka_unit_test(test_savings),
        cmocka_unit_test(test_agreement_health), cmocka_unit_test(test_round_record_jsonl),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
