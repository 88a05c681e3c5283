/*
 * bench_transport.c -- `autoloco bench transport`: how fast the cross-site
 * link moves a pseudo-gradient, and what each codec costs and saves.
 *
 * Two processes on loopback: this one (the client) forks a server child
 * before either touches gRPC. A buffer of MiB of fp32 values (random-like,
 * as a pseudo-gradient is) is sent as one shard over mTLS and, as the same
 * run's baseline, over the insecure flag; CPU seconds of both processes are
 * counted. Then each codec encodes and decodes the same vector: bytes on the
 * wire, encode / decode speed (MB/s of raw fp32 input), worst error.
 * Optionally (--wanem-mbit R) the shard also goes through a wanem proxy
 * limited to R Mbit/s, and the rate achieved is reported.
 * The last line of --json output is one JSON object.
 */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "al_cli.h"
#include "al_codec.h"
#include "al_transport.h"
#include "al_wanem.h"

typedef struct child_sink {
    uint8_t *buf;
    uint64_t cap;
} child_sink;

static int sink_open(void *u, const al_shard_meta *m, uint8_t **dst, char *why, size_t n) {
    child_sink *s = u;
    if (m->total_bytes > s->cap) {
        snprintf(why, n, "bench sink holds %llu bytes", (unsigned long long)s->cap);
        return AL_ST_RESOURCE_EXHAUSTED;
    }
    *dst = s->buf;
    return 0;
}

static void sink_done(void *u, const al_shard_meta *m, uint8_t *dst, int complete) {
    (void)u, (void)m, (void)dst, (void)complete;
}

/* The server process: a mTLS and an insecure server; ports go up the pipe;
 * it exits when the parent closes its end. */
static int child_main(const char *dir, uint64_t cap, uint32_t chunk, int wfd, int rfd) {
    char ca[600], cert[600], key[600];
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    snprintf(cert, sizeof cert, "%s/srv.pem", dir);
    snprintf(key, sizeof key, "%s/srv.key", dir);
    child_sink sink = {.buf = malloc(cap), .cap = cap};
    if (!sink.buf) return 1;
    memset(sink.buf, 0, cap); /* fault the pages in now, not during the timing */
    const char *peers[] = {"cli"};
    al_server_cfg cfg = {
        .site = "srv",
        .run_id = "bench",
        .peers = peers,
        .npeers = 1,
        .tls = {ca, cert, key},
        .threads = 2,
        .num_shards = 1024,
        .max_shard_bytes = cap,
        .max_message = (size_t)chunk + (64 << 10),
        .hooks = {.user = &sink, .shard_open = sink_open, .shard_done = sink_done}};
    al_server *tls = NULL, *plain = NULL;
    al_err err = {0};
    if (al_server_start(&cfg, &tls, &err)) {
        fprintf(stderr, "bench server: %s\n", err.msg);
        return 1;
    }
    cfg.insecure = 1;
    if (al_server_start(&cfg, &plain, &err)) {
        fprintf(stderr, "bench server: %s\n", err.msg);
        al_server_stop(tls);
        return 1;
    }
    int ports[2] = {al_server_port(tls), al_server_port(plain)};
    if (write(wfd, ports, sizeof ports) != sizeof ports) return 1;
    char c;
    while (read(rfd, &c, 1) > 0) {
    }
    al_server_stop(plain);
    al_server_stop(tls);
    free(sink.buf);
    return 0;
}

static double proc_cpu_s(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* after "pid (comm)": state, then fields 4..13, then utime (14) and stime (15) */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

typedef struct send_result {
    double MBps, cpu_s_per_GB, seconds;
    double client_cpu_s_per_GB, server_cpu_s_per_GB; /* the two shares of cpu_s_per_GB */
} send_result;

static int send_once(const char *target, int insecure, const char *dir, const uint8_t *data,
                     uint64_t n, uint32_t shard, uint32_t chunk, pid_t child, send_result *r,
                     al_err *err) {
    char ca[600], cert[600], key[600];
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    snprintf(cert, sizeof cert, "%s/cli.pem", dir);
    snprintf(key, sizeof key, "%s/cli.key", dir);
    al_client_cfg cfg = {.target = target,
                         .site = "cli",
                         .peer = "srv",
                         .run_id = "bench",
                         .tls = {ca, cert, key},
                         .insecure = insecure,
                         .chunk_bytes = chunk,
                         .deadline_s = 600,
                         .max_attempts = 8};
    al_client *c;
    int rc = al_client_new(&cfg, &c, err);
    if (rc) return rc;
    al_shard_meta m = {.round = 0,
                       .epoch = 0,
                       .phase = AL_PHASE_REDUCE,
                       .shard_id = shard,
                       .num_shards = 1024,
                       .total_bytes = n,
                       .codec = AL_CODEC_FP32,
                       .shard_checksum = al_xxh64(data, n, 0)};
    snprintf(m.site, sizeof m.site, "cli");
    uint64_t got;
    int complete;
    rc = al_client_query_shard(c, &m, &got, &complete, err); /* connect before timing */
    double cc0 = self_cpu_s(), sc0 = proc_cpu_s(child), t0 = al_now();
    if (!rc) rc = al_client_push_shard(c, &m, data, err);
    double t = al_now() - t0, ccpu = self_cpu_s() - cc0, scpu = proc_cpu_s(child) - sc0;
    al_client_free(c);
    if (rc) return rc;
    r->seconds = t;
    r->MBps = (double)n / 1e6 / t;
    r->cpu_s_per_GB = (ccpu + scpu) / ((double)n / 1e9);
    r->client_cpu_s_per_GB = ccpu / ((double)n / 1e9);
    r->server_cpu_s_per_GB = scpu / ((double)n / 1e9);
    return 0;
}

typedef struct codec_result {
    char name[24];
    size_t bytes;
    double enc_MBps, dec_MBps, max_err, bound;
} codec_result;

static int bench_codec(const char *name, const float *x, uint64_t n, codec_result *r, al_err *err) {
    al_codec_cfg cfg = {.block = 128, .zstd_level = 1};
    int rc = al_codec_parse(name, &cfg, err);
    if (rc) return rc;
    size_t cap = al_codec_max_encoded(&cfg, n), len;
    uint8_t *buf = malloc(cap);
    float *y = malloc(n * sizeof(float));
    if (!buf || !y) {
        free(buf);
        free(y);
        return al_errf(err, AL_ENOMEM, "bench codec: %zu bytes", cap);
    }
    double t0 = al_now();
    rc = al_codec_encode(&cfg, x, n, buf, cap, &len, err);
    double te = al_now() - t0;
    t0 = al_now();
    if (!rc) rc = al_codec_decode(buf, len, y, n, err);
    double td = al_now() - t0;
    if (!rc) {
        double e = 0;
        for (uint64_t i = 0; i < n; i++) e = fmax(e, fabs((double)x[i] - (double)y[i]));
        snprintf(r->name, sizeof r->name, "%s", name);
        r->bytes = len;
        r->enc_MBps = 4.0 * (double)n / 1e6 / te;
        r->dec_MBps = 4.0 * (double)n / 1e6 / td;
        r->max_err = e;
        r->bound = al_codec_error_bound(&cfg, x, n);
    }
    free(buf);
    free(y);
    return rc;
}

enum { MAX_REPEAT = 15 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median of v[0..n) (n <= MAX_REPEAT); v keeps its order */
static double median(const double *v, int n) {
    double s[MAX_REPEAT];
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

int al_bench_transport(int argc, char **argv, al_err *err) {
    long mib = 256, wanem_mbit = 0, repeat = 3, chunk_kib = 1024; /* the client's default chunk */
    int json = 0, link_only = 0;
    for (int i = 1; i < argc; i++) {
        int rc = 0;
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--link-only"))
            link_only = 1;
        else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            rc = al_cli_int("--mib", argv[++i], 1, 4096, &mib, err);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            rc = al_cli_int("--repeat", argv[++i], 1, MAX_REPEAT, &repeat, err);
        else if (!strcmp(argv[i], "--chunk-kib") && i + 1 < argc)
            rc = al_cli_int("--chunk-kib", argv[++i], 16, 65536, &chunk_kib, err);
        else if (!strcmp(argv[i], "--wanem-mbit") && i + 1 < argc)
            rc = al_cli_int("--wanem-mbit", argv[++i], 1, 100000, &wanem_mbit, err);
        else {
            fprintf(stderr,
                    "usage: autoloco bench transport [--mib N] [--repeat N] [--chunk-kib K] "
                    "[--wanem-mbit R] [--link-only] [--json]\n"
                    "  sends an N MiB shard (default 256) over mTLS and insecure, N "
                    "times each (default 3,\n  alternating; medians reported), then "
                    "measures every codec (not with --link-only)\n");
            return AL_CLI_USAGE;
        }
        if (rc) return rc;
    }
    uint32_t chunk = (uint32_t)chunk_kib << 10;
    uint64_t nbytes = (uint64_t)mib << 20, n = nbytes / 4;
    char dir[] = "/tmp/al-bench-transport-XXXXXX";
    if (!mkdtemp(dir)) return al_errf(err, AL_EIO, "bench transport: mkdtemp failed");
    const char *sites[] = {"srv", "cli"};
    int rc = al_certs_create(dir, sites, 2, 2, err);
    if (rc) return rc;
    int up[2], down[2];
    if (pipe(up) || pipe(down)) return al_errf(err, AL_EIO, "bench transport: pipe failed");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return al_errf(err, AL_EIO, "bench transport: fork failed");
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        _exit(child_main(dir, nbytes + 4096, chunk, up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    int ports[2];
    if (read(up[0], ports, sizeof ports) != sizeof ports) {
        rc = al_errf(err, AL_EPEER, "bench transport: the server process did not start");
        goto out;
    }
    float *x = malloc(nbytes);
    al_rng rng;
    al_rng_seed(&rng, 1);
    for (uint64_t i = 0; i < n; i++) x[i] = (float)(1e-3 * al_rng_normal(&rng));
    char target[64];
    send_result tls = {0}, plain = {0}, wan = {0};
    double t_mb[MAX_REPEAT], t_cpu[MAX_REPEAT], p_mb[MAX_REPEAT], p_cpu[MAX_REPEAT];
    double t_ccpu[MAX_REPEAT], t_scpu[MAX_REPEAT];
    /* one untimed warm-up each (first connection's buffers, allocator
     * arenas), then alternate the two so that a burst of load elsewhere hits
     * both alike; every send is a new shard id, so none is refused as a repeat */
    for (int k = 0; !rc && k < 2; k++) {
        send_result r;
        snprintf(target, sizeof target, "127.0.0.1:%d", ports[k]);
        rc = send_once(target, k, dir, (const uint8_t *)x, AL_MIN(nbytes, (uint64_t)32 << 20),
                       (uint32_t)(100 + k), chunk, pid, &r, err);
    }
    for (int k = 0; !rc && k < repeat; k++) {
        send_result r;
        snprintf(target, sizeof target, "127.0.0.1:%d", ports[0]);
        rc = send_once(target, 0, dir, (const uint8_t *)x, nbytes, (uint32_t)(3 + 2 * k), chunk,
                       pid, &r, err);
        if (rc) break;
        t_mb[k] = r.MBps, t_cpu[k] = r.cpu_s_per_GB;
        t_ccpu[k] = r.client_cpu_s_per_GB, t_scpu[k] = r.server_cpu_s_per_GB;
        snprintf(target, sizeof target, "127.0.0.1:%d", ports[1]);
        rc = send_once(target, 1, dir, (const uint8_t *)x, nbytes, (uint32_t)(4 + 2 * k), chunk,
                       pid, &r, err);
        if (rc) break;
        p_mb[k] = r.MBps, p_cpu[k] = r.cpu_s_per_GB;
        if (repeat > 1)
            fprintf(stderr,
                    "transport run %d/%ld: mTLS %.0f MB/s (%.2f CPU s/GB: client %.2f, server "
                    "%.2f), insecure %.0f MB/s (%.2f CPU s/GB)\n",
                    k + 1, repeat, t_mb[k], t_cpu[k], t_ccpu[k], t_scpu[k], p_mb[k], p_cpu[k]);
    }
    if (!rc) {
        tls.MBps = median(t_mb, (int)repeat), tls.cpu_s_per_GB = median(t_cpu, (int)repeat);
        tls.client_cpu_s_per_GB = median(t_ccpu, (int)repeat);
        tls.server_cpu_s_per_GB = median(t_scpu, (int)repeat);
        plain.MBps = median(p_mb, (int)repeat), plain.cpu_s_per_GB = median(p_cpu, (int)repeat);
        printf("transport: %llu MiB fp32 shard in %u KiB chunks, median of %ld: mTLS %.0f MB/s "
               "(%.2f CPU s/GB), insecure %.0f MB/s (%.2f CPU s/GB), ratio %.2f\n",
               (unsigned long long)mib, chunk >> 10, repeat, tls.MBps, tls.cpu_s_per_GB, plain.MBps,
               plain.cpu_s_per_GB, tls.MBps / plain.MBps);
    }
    if (!rc && wanem_mbit) {
        al_wanem_cfg wc = {.listen = "127.0.0.1:0", .rate_mbit = (double)wanem_mbit};
        snprintf(target, sizeof target, "127.0.0.1:%d", ports[0]);
        wc.target = target;
        al_wanem *w;
        rc = al_wanem_start(&wc, &w, err);
        if (!rc) {
            char via[64];
            snprintf(via, sizeof via, "127.0.0.1:%d", al_wanem_port(w));
            rc = send_once(via, 0, dir, (const uint8_t *)x, nbytes, 2, chunk, pid, &wan, err);
            al_wanem_stop(w);
        }
        if (!rc)
            printf("transport: through wanem at %ld Mbit/s: %.1f Mbit/s of shard bytes (%.1f%% of "
                   "the limit)\n",
                   wanem_mbit, wan.MBps * 8, 100 * wan.MBps * 8 / (double)wanem_mbit);
    }
    static const char *codecs[] = {"fp32", "fp32+zstd", "bf16", "bf16+zstd",
                                   "int8", "int8+zstd", "int4", "int4+zstd"};
    codec_result cr[8];
    for (size_t k = 0; !rc && !link_only && k < 8; k++) {
        rc = bench_codec(codecs[k], x, n, &cr[k], err);
        if (!rc)
            printf("codec %-10s %11zu bytes (%5.2fx less than fp32)  encode %6.0f MB/s  decode "
                   "%6.0f MB/s  max |err| %.3g (bound %.3g)\n",
                   cr[k].name, cr[k].bytes, (double)cr[0].bytes / (double)cr[k].bytes,
                   cr[k].enc_MBps, cr[k].dec_MBps, cr[k].max_err, cr[k].bound);
    }
    if (!rc && json) {
        printf(
            "{\"bench\": \"transport\", \"bytes\": %llu, \"mtls_MBps\": %.1f, \"insecure_MBps\": "
            "%.1f, \"mtls_cpu_s_per_GB\": %.3f, \"insecure_cpu_s_per_GB\": %.3f, \"repeat\": %ld, "
            "\"chunk_bytes\": %u, \"mtls_client_cpu_s_per_GB\": %.3f, "
            "\"mtls_server_cpu_s_per_GB\": %.3f, \"mtls_MBps_runs\": [",
            (unsigned long long)nbytes, tls.MBps, plain.MBps, tls.cpu_s_per_GB, plain.cpu_s_per_GB,
            repeat, chunk, tls.client_cpu_s_per_GB, tls.server_cpu_s_per_GB);
        for (int k = 0; k < repeat; k++) printf("%s%.1f", k ? ", " : "", t_mb[k]);
        printf("], \"insecure_MBps_runs\": [");
        for (int k = 0; k < repeat; k++) printf("%s%.1f", k ? ", " : "", p_mb[k]);
        printf("]");
        if (wanem_mbit)
            printf(", \"wanem_limit_Mbit\": %ld, \"wanem_Mbit\": %.2f", wanem_mbit, wan.MBps * 8);
        printf(", \"codecs\": {");
        for (size_t k = 0; !link_only && k < 8; k++)
            printf("%s\"%s\": {\"bytes_on_wire\": %zu, \"ratio_vs_fp32\": %.3f, \"encode_MBps\": "
                   "%.1f, \"decode_MBps\": %.1f, \"max_abs_error\": %.4g, \"error_bound\": %.4g}",
                   k ? ", " : "", cr[k].name, cr[k].bytes,
                   (double)cr[0].bytes / (double)cr[k].bytes, cr[k].enc_MBps, cr[k].dec_MBps,
                   cr[k].max_err, cr[k].bound);
        printf("}}\n");
    }
    free(x);
out:
    close(down[1]);
    close(up[0]);
    waitpid(pid, NULL, 0);
    al_err e2 = {0};
    al_remove_tree(dir, &e2);
    return rc;
}
