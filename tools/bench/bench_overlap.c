/* bench_overlap.c -- `autoloco bench overlap`: how much of the WAN's time an
 * overlapped outer loop hides behind training (issue 14). The overlapped job
 * runs [outer] overlap = streaming by default (16 fragments, each exchange
 * beside the next H/32 steps); --overlap delayed|delayed-mid runs the whole
 * exchange beside the next interval instead.
 *
 * Real agent processes (mutual TLS on loopback), every link to a site through
 * a wanem proxy that limits its rate, so that the blocking exchange is a large
 * part of a round. Each repetition runs the same job twice, blocking
 * (`overlap = none`) and overlapped, in alternating order (blocking first in
 * runs 1, 3, ...), and reads each site's summary.json: train_wall_s (first
 * interval to last commit), compute_s (seconds inside the intervals), comm_s
 * and comm_hidden_s. With compute_s from the blocking run (training alone, no
 * exchange beside it),
 *
 *     comm_hidden_fraction = 1 − (wall_overlap − compute)/(wall_blocking − compute)
 *
 * 1: the overlapped run took no longer than its compute; 0: no gain. Nothing
 * hides the end of a run (streaming's last fragments are exchanged after the
 * last step), so R rounds hide at most about (R − 1)/R of the exchange time.
 * Medians over --runs repetitions.
 *
 * The defaults (demo preset, H = 416, 24 rounds, 0.92 Mbit/s) make the
 * blocking exchange about 30 % of the wall time at 24 ms a step; a faster
 * machine needs a faster link for the same share (the table printed says
 * which share each run had). On a machine with no core to spare, the
 * overlapped exchange's own CPU work (TLS, gRPC, the driver, the proxies) is
 * taken from training, and the formula counts it as communication not hidden
 * (docs/results/overlap.md). */
#include "al_bench.h"
#include "al_cli.h"
#include "al_round.h"
#include "al_transport.h"
#include "al_wanem.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define OV_MAX_SITES 3

typedef struct ov_opts {
    int sites, runs, json, batch, seq;
    long steps, h;
    double mbit, delay_ms;
    const char *preset, *codec, *mode; /* mode: the overlapped job's [outer] overlap */
    long fragments;                    /* its [outer] fragments (streaming) */
    const char *tau;                   /* its [outer] overlap_steps (streaming): half|sync */
    char dir[1024], train[1200], val[1200];
} ov_opts;

typedef struct ov_run {
    double wall_s, compute_s, comm_s, hidden_s;
    double cpu_s; /* the sites' processes' CPU time (user + system), summed */
    char hash[65];
} ov_run;

static void usage(FILE *f) {
    fprintf(f, "usage: autoloco bench overlap [options]\n\n"
               "Agents on loopback (mutual TLS) with every link through a rate-limited wanem\n"
               "proxy: the same job blocking ([outer] overlap = none) and overlapped (--overlap),\n"
               "side by side, --runs times (in alternating order); prints wall_s_blocking,\n"
               "wall_s_overlap, compute_s (the blocking run's) and\n"
               "comm_hidden_fraction = 1 - (wall_overlap - compute)/(wall_blocking - compute),\n"
               "medians.\n\n"
               "options:\n"
               "  --sites N      2 or 3 (default 2)\n"
               "  --preset P     model preset (default demo)\n"
               "  --steps S      inner steps per site (default 9984: 24 rounds)\n"
               "  --h H          fixed sync interval (default 416: streaming's tau = H/32 = 13)\n"
               "  --batch B      microbatch rows (default 8)\n"
               "  --seq T        microbatch row length (default 64)\n"
               "  --codec C      pseudo-gradient codec (default int8)\n"
               "  --mbit R       link rate per direction, Mbit/s (default 0.92: the blocking\n"
               "                 exchange about 30%% of the wall time at 24 ms a step;\n"
               "                 a faster machine needs a faster link)\n"
               "  --delay-ms D   one-way delay (default 2)\n"
               "  --runs N       repetitions (default 3)\n"
               "  --overlap O    the overlapped job's mode: delayed|delayed-mid|streaming\n"
               "                 (default streaming)\n"
               "  --fragments F  streaming's fragments (default 16)\n"
               "  --overlap-steps half|sync  streaming's merge: tau = H/(2F) or H/F\n"
               "                 (default half)\n"
               "  --dir DIR      work folder (default: a new one under /tmp)\n"
               "  --json         one JSON object as the last line\n");
}

static int write_config(const ov_opts *o, int s, const int *grpc, const int *proxy,
                        const char *mode, al_err *err) {
    char path[1300];
    snprintf(path, sizeof path, "%s/%s-%c.ini", o->dir, mode, 'a' + s);
    FILE *f = fopen(path, "w");
    if (!f) return al_errf(err, AL_EIO, "%s: cannot create", path);
    fprintf(f, "[site]\nname = %c\nlisten = 127.0.0.1:%d\nrun_id = bench-overlap\n[peers]\n",
            'a' + s, grpc[s]);
    for (int p = 0; p < o->sites; p++) /* every peer through its proxy */
        if (p != s) fprintf(f, "%c = 127.0.0.1:%d\n", 'a' + p, proxy[p]);
    fprintf(f, "[tls]\nca = %s/certs/ca.pem\ncert = %s/certs/%c.pem\nkey = %s/certs/%c.key\n",
            o->dir, o->dir, 'a' + s, o->dir, 'a' + s);
    fprintf(f, "[model]\npreset = %s\n[data]\ntrain = %s\nval = %s\n", o->preset, o->train, o->val);
    fprintf(f,
            "[inner]\nbatch = %d\nseq = %d\nsteps = %ld\nlr = 3e-3\nwarmup = 50\nthreads = 1\n"
            "eval_every = 0\neval_batches = 2\n",
            o->batch, o->seq, o->steps);
    fprintf(f,
            "[outer]\ncodec = %s\noverlap = %s\nfragments = %ld\noverlap_steps = %s\n"
            "[policy]\nname = fixed\nh_base = %ld\n",
            o->codec, mode, o->fragments, o->tau, o->h);
    fprintf(f, "[round]\ndeadline_s = 120\n[dashboard]\nport = -1\n");
    fprintf(f, "[checkpoint]\ndir = %s/%s-%c\nevery = 0\nkeep = 1\n", o->dir, mode, 'a' + s);
    return fclose(f) == 0 ? 0 : al_errf(err, AL_EIO, "%s: write failed", path);
}

/* One job: the sites of `mode` to their end; the slowest site's wall time and
 * the sums of the others' fields as the max over sites. */
static int run_job(const ov_opts *o, const int *grpc, const int *proxy, const char *mode, ov_run *r,
                   al_err *err) {
    int rc = 0, pids[OV_MAX_SITES];
    for (int s = 0; s < o->sites && rc == 0; s++) rc = write_config(o, s, grpc, proxy, mode, err);
    if (rc) return rc;
    int n = 0;
    for (int s = 0; s < o->sites; s++) {
        char cfg[1300], log[1300];
        snprintf(cfg, sizeof cfg, "%s/%s-%c.ini", o->dir, mode, 'a' + s);
        snprintf(log, sizeof log, "%s/%s-%c.log", o->dir, mode, 'a' + s);
        if ((pids[s] = al_cli_spawn_agent(cfg, log, SIGKILL, err)) < 0) {
            for (int k = 0; k < n; k++) kill(pids[k], SIGTERM);
            for (int k = 0; k < n; k++) waitpid(pids[k], NULL, 0);
            return AL_EIO;
        }
        n++;
    }
    int bad = -1;
    double cpu = 0;
    for (int s = 0; s < o->sites; s++) {
        int st = 0;
        struct rusage ru;
        memset(&ru, 0, sizeof ru);
        wait4(pids[s], &st, 0, &ru);
        cpu += (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
               (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
        if ((!WIFEXITED(st) || WEXITSTATUS(st) != 0) && bad < 0) bad = s;
    }
    if (bad >= 0)
        return al_errf(err, AL_EPEER, "%s run: site %c failed (see %s/%s-%c.log)", mode, 'a' + bad,
                       o->dir, mode, 'a' + bad);
    memset(r, 0, sizeof *r);
    r->cpu_s = cpu;
    for (int s = 0; s < o->sites; s++) {
        char path[1300];
        snprintf(path, sizeof path, "%s/%s-%c/summary.json", o->dir, mode, 'a' + s);
        json_t *j = json_load_file(path, 0, NULL);
        const char *h = json_string_value(json_object_get(j, "theta_hash"));
        if (!j || !h) {
            json_decref(j);
            return al_errf(err, AL_EFORMAT, "%s: missing or unreadable", path);
        }
        if (s == 0) snprintf(r->hash, sizeof r->hash, "%s", h);
        int same = !strcmp(r->hash, h);
#define NUM(k) json_number_value(json_object_get(j, k))
        r->wall_s = fmax(r->wall_s, NUM("train_wall_s"));
        r->compute_s = fmax(r->compute_s, NUM("compute_s"));
        r->comm_s = fmax(r->comm_s, NUM("comm_s"));
        r->hidden_s = fmax(r->hidden_s, NUM("comm_hidden_s"));
#undef NUM
        json_decref(j);
        if (!same)
            return al_errf(err, AL_EINTEGRITY, "%s run: sites a and %c end on different theta",
                           mode, 'a' + s);
    }
    return 0;
}

static int parse(int argc, char **argv, ov_opts *o, int *help, al_err *err) {
    static const struct option opts[] = {{"sites", required_argument, 0, 's'},
                                         {"preset", required_argument, 0, 'P'},
                                         {"steps", required_argument, 0, 'n'},
                                         {"h", required_argument, 0, 'H'},
                                         {"batch", required_argument, 0, 'B'},
                                         {"seq", required_argument, 0, 'T'},
                                         {"codec", required_argument, 0, 'c'},
                                         {"mbit", required_argument, 0, 'm'},
                                         {"delay-ms", required_argument, 0, 'd'},
                                         {"runs", required_argument, 0, 'r'},
                                         {"dir", required_argument, 0, 'D'},
                                         {"json", no_argument, 0, 'j'},
                                         {"overlap", required_argument, 0, 'o'},
                                         {"fragments", required_argument, 0, 'F'},
                                         {"overlap-steps", required_argument, 0, 't'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    long v;
    int ch, rc = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1 && rc == 0) {
        switch (ch) {
        case 's':
            rc = al_cli_int("--sites", optarg, 2, OV_MAX_SITES, &v, err), o->sites = (int)v;
            break;
        case 'P':
            o->preset = optarg;
            break;
        case 'n':
            rc = al_cli_int("--steps", optarg, 2, 1L << 30, &o->steps, err);
            break;
        case 'H':
            rc = al_cli_int("--h", optarg, 1, 1L << 20, &o->h, err);
            break;
        case 'B':
            rc = al_cli_int("--batch", optarg, 1, 4096, &v, err), o->batch = (int)v;
            break;
        case 'T':
            rc = al_cli_int("--seq", optarg, 2, 1 << 16, &v, err), o->seq = (int)v;
            break;
        case 'c':
            o->codec = optarg;
            break;
        case 'm':
            rc = al_cli_double("--mbit", optarg, &o->mbit, err);
            if (rc == 0 && !(o->mbit > 0 && o->mbit <= 1e5))
                rc = al_errf(err, AL_EINVAL, "--mbit: %s is not in (0, 100000]", optarg);
            break;
        case 'd':
            rc = al_cli_double("--delay-ms", optarg, &o->delay_ms, err);
            if (rc == 0 && !(o->delay_ms >= 0 && o->delay_ms <= 10000))
                rc = al_errf(err, AL_EINVAL, "--delay-ms: %s is not in [0, 10000]", optarg);
            break;
        case 'r':
            rc = al_cli_int("--runs", optarg, 1, 99, &v, err), o->runs = (int)v;
            break;
        case 'o': {
            al_overlap ov;
            if ((rc = al_overlap_parse(optarg, &ov, err))) {
                al_err_prefix(err, "--overlap");
            } else if (ov == AL_OVERLAP_NONE || ov == AL_OVERLAP_DELAYED_MEAN) {
                rc = al_errf(err, AL_EINVAL,
                             "--overlap: %s is not an overlapped mode the agents run "
                             "(delayed, delayed-mid, streaming)",
                             optarg);
            }
            o->mode = optarg;
            break;
        }
        case 'F':
            rc = al_cli_int("--fragments", optarg, 1, 1024, &o->fragments, err);
            break;
        case 't':
            if (strcmp(optarg, "half") && strcmp(optarg, "sync"))
                rc = al_errf(err, AL_EINVAL, "--overlap-steps: '%s' is not half or sync", optarg);
            o->tau = optarg;
            break;
        case 'D':
            snprintf(o->dir, sizeof o->dir, "%s", optarg);
            break;
        case 'j':
            o->json = 1;
            break;
        case 'h':
            usage(stdout);
            *help = 1;
            return 0;
        default:
            usage(stderr);
            return AL_CLI_USAGE;
        }
    }
    return rc;
}

int al_bench_overlap(int argc, char **argv, al_err *err) {
    ov_opts o = {.sites = 2,
                 .runs = 3,
                 .batch = 8,
                 .seq = 64,
                 .steps = 9984,
                 .h = 416,
                 .mbit = 0.92,
                 .delay_ms = 2,
                 .preset = "demo",
                 .codec = "int8",
                 .mode = "streaming",
                 .fragments = 16,
                 .tau = "half"};
    int help = 0, rc = parse(argc, argv, &o, &help, err);
    if (rc || help) return rc;
    signal(SIGPIPE, SIG_IGN); /* the proxies write to sockets an agent may have closed */
    if (!o.dir[0]) {
        snprintf(o.dir, sizeof o.dir, "/tmp/autoloco-bench-overlap-XXXXXX");
        if (!mkdtemp(o.dir)) return al_errf(err, AL_EIO, "cannot create a folder in /tmp");
    } else if ((rc = al_mkdirs(o.dir, err))) {
        return rc;
    }
    if ((rc = al_cli_corpus(o.dir, o.train, sizeof o.train, o.val, sizeof o.val, err))) return rc;
    char certs[1100];
    snprintf(certs, sizeof certs, "%s/certs", o.dir);
    const char *names[OV_MAX_SITES] = {"a", "b", "c"};
    if ((rc = al_certs_create(certs, names, (size_t)o.sites, 1, err))) return rc;
    /* one proxy in front of each site: every call to it crosses the slow link */
    int grpc[OV_MAX_SITES], proxy[OV_MAX_SITES];
    al_wanem *w[OV_MAX_SITES] = {0};
    char target[OV_MAX_SITES][64];
    for (int s = 0; s < o.sites && rc == 0; s++) {
        if ((grpc[s] = al_cli_free_port()) <= 0) {
            rc = al_errf(err, AL_EIO, "no free port on 127.0.0.1");
            break;
        }
        snprintf(target[s], sizeof target[s], "127.0.0.1:%d", grpc[s]);
        al_wanem_cfg wc = {.listen = "127.0.0.1:0",
                           .target = target[s],
                           .rate_mbit = o.mbit,
                           .delay_ms = o.delay_ms,
                           .seed = (uint64_t)s + 1};
        if ((rc = al_wanem_start(&wc, &w[s], err)) == 0) proxy[s] = al_wanem_port(w[s]);
    }
    printf("bench overlap: %d sites, preset %s, %ld steps, H %ld, microbatch %dx%d, codec %s, "
           "links %.3g Mbit/s + %.3g ms, overlap %s",
           o.sites, o.preset, o.steps, o.h, o.batch, o.seq, o.codec, o.mbit, o.delay_ms, o.mode);
    if (!strcmp(o.mode, "streaming"))
        printf(" (%ld fragments, overlap_steps %s)", o.fragments, o.tau);
    printf("; folder %s\n", o.dir);
    printf("%4s %10s %12s %12s %12s %12s %10s %10s\n", "run", "mode", "wall_s", "compute_s",
           "comm_s", "hidden_s", "cpu_s", "hidden");
    fflush(stdout);
    double wb[99], wo[99], cb[99], fr[99], share[99];
    int n = 0;
    for (int k = 0; k < o.runs && rc == 0; k++) {
        ov_run b, v;
        /* the order alternates (blocking first in runs 1, 3, ...): a machine
         * that slows down or speeds up during the bench favours neither mode */
        int ofirst = k & 1;
        if (ofirst && (rc = run_job(&o, grpc, proxy, o.mode, &v, err))) break;
        if ((rc = run_job(&o, grpc, proxy, "none", &b, err))) break;
        if (!ofirst && (rc = run_job(&o, grpc, proxy, o.mode, &v, err))) break;
        wb[n] = b.wall_s;
        wo[n] = v.wall_s;
        cb[n] = b.compute_s;
        share[n] = b.wall_s > 0 ? (b.wall_s - b.compute_s) / b.wall_s : 0;
        fr[n] =
            b.wall_s > b.compute_s ? 1 - (v.wall_s - b.compute_s) / (b.wall_s - b.compute_s) : NAN;
        printf("%4d %10s %12.2f %12.2f %12.2f %12.2f %10.2f %10s\n", k + 1, "blocking", b.wall_s,
               b.compute_s, b.comm_s, b.hidden_s, b.cpu_s, ofirst ? "(2nd)" : "");
        printf("%4d %10s %12.2f %12.2f %12.2f %12.2f %10.2f %9.1f%%   comm_hidden_fraction %.3f\n",
               k + 1, "overlap", v.wall_s, v.compute_s, v.comm_s, v.hidden_s, v.cpu_s,
               v.comm_s > 0 ? 100 * v.hidden_s / v.comm_s : 0.0, fr[n]);
        fflush(stdout);
        n++;
    }
    for (int s = 0; s < o.sites; s++) al_wanem_stop(w[s]);
    if (rc) return al_err_prefix(err, "bench overlap");
    double frs[99];
    memcpy(frs, fr, sizeof(double) * (size_t)n);
    double m_wb = al_bench_median(wb, n), m_wo = al_bench_median(wo, n),
           m_c = al_bench_median(cb, n), m_f = al_bench_median(frs, n),
           m_sh = al_bench_median(share, n);
    printf("median of %d: wall blocking %.2f s, overlapped %.2f s, compute %.2f s; blocking "
           "communication %.0f%% of the wall time; comm_hidden_fraction %.3f\n",
           n, m_wb, m_wo, m_c, 100 * m_sh, m_f);
    if (o.json) {
        json_t *runs = json_array();
        for (int k = 0; k < n; k++) json_array_append_new(runs, json_real(fr[k]));
        json_t *j = json_pack(
            "{s:s, s:s, s:I, s:s, s:i, s:s, s:I, s:I, s:s, s:f, s:f, s:i, s:f, s:f, s:f, s:f, s:f, "
            "s:o, s:s}",
            "bench", "overlap", "overlap", o.mode, "fragments", (json_int_t)o.fragments,
            "overlap_steps", o.tau, "sites", o.sites, "preset", o.preset, "steps",
            (json_int_t)o.steps, "h", (json_int_t)o.h, "codec", o.codec, "mbit", o.mbit, "delay_ms",
            o.delay_ms, "runs", n, "wall_s_blocking", m_wb, "wall_s_overlap", m_wo, "compute_s",
            m_c, "blocking_comm_fraction", m_sh, "comm_hidden_fraction", m_f,
            "comm_hidden_fraction_runs", runs, "dir", o.dir);
        char *js = json_dumps(j, JSON_COMPACT);
        printf("%s\n", js ? js : "{}");
        free(js);
        json_decref(j);
    }
    return 0;
}
