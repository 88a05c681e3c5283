/*
 * bench_odc.c -- `autoloco bench odc`: ODC against the FSDP-style baseline on
 * one machine, and a projection to larger W.
 *
 * Measured (default): for each workload -- fixed-length rows, fortunes
 * documents, lognormal synthetic lengths -- three configurations run real
 * training steps in W worker processes over shared memory:
 *   fsdp-naive  lockstep, equal piece count per worker
 *   fsdp-micro  lockstep, microbatches dealt for even cost (same count each)
 *   odc-lpt     one-sided, pieces partitioned by cost (LPT), own counts
 * Each step is a minibatch of W * D pieces (D per worker); the first `warmup`
 * steps are not counted. The three configurations run interleaved, `rounds`
 * times, and each figure is the median round (other processes on a shared
 * machine then disturb all configurations alike). Reported: mean minibatch seconds, each worker's
 * idle fraction (time inside barriers / minibatch time, averaged over workers) and the peak bytes
 * of gathered units per worker. speedup_odc_vs_fsdp_* compares ODC with the *better* FSDP variant
 * of the workload (the conservative baseline); *_vs_naive with fsdp-naive. "skewed" is the mean
 * over the fortunes and lognormal workloads.
 *
 * --simulate: measures the cost of one microbatch row of n tokens on this
 * machine (forward + backward, fit a + b n + c n^2) and the latency of a
 * W-process barrier, then replays minibatches of the same workloads through
 * both barrier disciplines for W = 8, 16, 32, 64 with per-worker clocks:
 * ODC advances each worker by its own microbatches and meets once at the end
 * (3 barriers); FSDP meets at every unit of every microbatch (3L+4 barriers
 * per microbatch slot), so each slot costs the slowest worker's microbatch.
 * Barrier latency at W is taken as the measured W=2 latency times log2 W (a
 * dissemination barrier); compute cost per row is the fitted model.
 */
#include "al_cli.h"
#include "al_odc.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct bench {
    const char *preset, *data_path, *device;
    long workers, threads, docs, steps, warmup, rounds;
    double sigma, median_frac, quad_c;
    int json, simulate;
    al_model_config mc;
    al_tokens data;
} bench;

/* A source of W*D pieces per step from a workload. */
typedef struct source {
    al_workload wl;
    al_piece *pieces;
    int n;
} source;

static int source_next(void *ctx, long step, const al_piece **pieces, int *n, al_err *err) {
    (void)step;
    (void)err;
    source *s = ctx;
    al_workload_next(&s->wl, s->pieces, s->n);
    *pieces = s->pieces;
    *n = s->n;
    return 0;
}

static int source_init(source *s, const bench *b, al_workload_kind k, int n, al_err *err) {
    s->n = n;
    s->pieces = malloc((size_t)n * sizeof(al_piece));
    if (!s->pieces) return al_errf(err, AL_ENOMEM, "bench: out of memory");
    int rc =
        al_workload_init(&s->wl, k, &b->data, b->mc.T, 42, b->median_frac * b->mc.T, b->sigma, err);
    if (rc) free(s->pieces);
    return rc;
}

static void source_free(source *s) {
    al_workload_free(&s->wl);
    free(s->pieces);
}

typedef struct result {
    double seconds, idle, peak, pool, mb_per_worker;
} result;

static const struct {
    const char *name;
    al_engine_mode mode;
    al_balance_method bal;
} configs[] = {
    {"fsdp-naive", AL_MODE_FSDP, AL_BAL_NAIVE},
    {"fsdp-micro", AL_MODE_FSDP, AL_BAL_MICRO},
    {"odc-lpt", AL_MODE_ODC, AL_BAL_LPT},
};
enum { NCONF = 3, NWL = 3 };

static int measure(const bench *b, al_workload_kind k, int c, result *res, al_err *err) {
    source src;
    int W = (int)b->workers, rc = source_init(&src, b, k, W * (int)b->docs, err);
    if (rc) return rc;
    al_odc_opts o;
    memset(&o, 0, sizeof o);
    o.mode = configs[c].mode;
    o.workers = W;
    o.threads = (int)b->threads;
    o.bal = (al_balance_opts){configs[c].bal, b->mc.T, b->quad_c};
    al_train_opts_default(&o.train);
    o.train.warmup = 0;
    o.site = "bench";
    o.device = b->device; /* "cpu" or "cuda": GPU workers, odc over CUDA IPC, fsdp over NCCL */
    o.barrier_timeout_s = 120;
    o.record_steps = (int)(b->steps + b->warmup);
    al_odc e;
    if ((rc = al_odc_init(&e, &b->mc, &o, &b->data, source_next, &src, err))) goto out;
    if ((rc = al_odc_run(&e, b->steps + b->warmup, err))) goto out_e;
    memset(res, 0, sizeof *res);
    for (long s = b->warmup + 1; s <= b->steps + b->warmup; s++) {
        const al_odc_step_stats *st = al_odc_stats(&e, s);
        res->seconds += st->seconds / (double)b->steps;
        for (int w = 0; w < W; w++) {
            res->idle +=
                st->wait_s[w] / (st->wait_s[w] + st->compute_s[w]) / (double)(W * b->steps);
            res->mb_per_worker += (double)st->nmb[w] / (double)(W * b->steps);
        }
    }
    for (int w = 0; w < W; w++) {
        res->peak = AL_MAX(res->peak, e.peak_gathered[w]);
        res->pool = AL_MAX(res->pool, e.pool_bytes[w]);
    }
out_e:
    al_odc_free(&e);
out:
    source_free(&src);
    return rc;
}

static int cmp_result(const void *a, const void *b) {
    double x = ((const result *)a)->seconds, y = ((const result *)b)->seconds;
    return x < y ? -1 : x > y;
}

/* ---- simulation ------------------------------------------------------------------- */

typedef struct costmodel {
    double a, b, c;  /* seconds per row of n tokens: a + b n + c n^2 */
    double barrier2; /* seconds per barrier at W = 2 */
} costmodel;

static double row_cost(const costmodel *m, int n) {
    return n > 0 ? m->a + m->b * n + m->c * (double)n * n : 0.0;
}

/* Least squares for cost(n) = a + b n + c n^2 over the terms in use[] (the
 * others fixed at 0), by the normal equations (at most 3x3, Gauss-Jordan). */
static int fit_terms(const double *n, const double *t, int k, const int use[3], double coef[3]) {
    int idx[3], m = 0;
    for (int j = 0; j < 3; j++)
        if (use[j]) idx[m++] = j;
    double A[3][4] = {{0}};
    for (int i = 0; i < k; i++) {
        double x[3] = {1, n[i], n[i] * n[i]};
        for (int r = 0; r < m; r++) {
            for (int c = 0; c < m; c++) A[r][c] += x[idx[r]] * x[idx[c]];
            A[r][m] += x[idx[r]] * t[i];
        }
    }
    for (int p = 0; p < m; p++) {
        if (A[p][p] == 0) return -1;
        for (int r = 0; r < m; r++) {
            if (r == p) continue;
            double f = A[r][p] / A[p][p];
            for (int c = p; c <= m; c++) A[r][c] -= f * A[p][c];
        }
    }
    coef[0] = coef[1] = coef[2] = 0;
    for (int r = 0; r < m; r++) coef[idx[r]] = A[r][m] / A[r][r];
    return 0;
}

/* The full quadratic if every term comes out non-negative (timing noise can
 * make a fit say otherwise), else the best non-negative subset, in the order
 * {a,b,c}, {b,c}, {a,b}, {b}. */
static void fit(const double *n, const double *t, int k, costmodel *m) {
    static const int tries[][3] = {{1, 1, 1}, {0, 1, 1}, {1, 1, 0}, {0, 1, 0}};
    double coef[3] = {0, 0, 0};
    for (size_t i = 0; i < AL_ARRAY_LEN(tries); i++)
        if (fit_terms(n, t, k, tries[i], coef) == 0 && coef[0] >= 0 && coef[1] >= 0 && coef[2] >= 0)
            break;
    m->a = coef[0];
    m->b = coef[1];
    m->c = coef[2];
}

static int barrier_body(al_shm *s, int w, void *ctx, al_err *err) {
    (void)w;
    (void)ctx;
    for (int i = 0; i < 2000; i++) {
        int rc = al_shm_barrier(s, err);
        if (rc) return rc;
    }
    return 0;
}

static int calibrate(const bench *b, costmodel *m, al_err *err) {
    al_shm s;
    al_shm_opts so = {"bench", 2, 64, 60, 1};
    int rc = al_shm_create(&s, &so, err);
    if (rc) return rc;
    double t0 = al_now();
    rc = al_shm_run(&s, barrier_body, NULL, err);
    m->barrier2 = (al_now() - t0) / 2000.0;
    al_shm_destroy(&s);
    if (rc) return rc;
    /* forward + backward of one row, in this process (after every fork) */
    al_threads_set((int)b->threads);
    al_model mod;
    int T = b->mc.T;
    if ((rc = al_model_init(&mod, &b->mc, 1, T, err))) return rc;
    al_model_init_weights(&mod, 1);
    al_batch bt;
    if ((rc = al_batch_init(&bt, 1, T, err))) {
        al_model_free(&mod);
        return rc;
    }
    double ns[16], ts[16];
    int k = 0;
    for (int n = T / 16 > 0 ? T / 16 : 1; n <= T && k < 16; n += AL_MAX(1, T / 8)) {
        for (int i = 0; i < n; i++) {
            bt.tokens[i] = bt.targets[i] = i % 200;
            bt.pos[i] = i;
            bt.docstart[i] = 0;
        }
        bt.T = n;
        bt.ntargets = n;
        double best = INFINITY;
        for (int r = 0; r < 8; r++) { /* the best of 8: the least disturbed */
            double s0 = al_now();
            al_model_forward(&mod, &bt);
            al_model_backward(&mod, &bt, 1.0f / (float)n);
            best = fmin(best, al_now() - s0);
        }
        ns[k] = n;
        ts[k++] = best;
    }
    fit(ns, ts, k, m);
    al_batch_free(&bt);
    al_model_free(&mod);
    return 0;
}

/* Per-worker clocks through one plan. */
static double sim_odc(const al_plan *p, const costmodel *m, double lat, double *busy) {
    double end = 0;
    for (int w = 0; w < p->W; w++) {
        double t = 0;
        for (int k = p->mb_first[w]; k < p->mb_first[w + 1]; k++) t += row_cost(m, p->mb_tokens[k]);
        busy[w] = t;
        end = fmax(end, t);
    }
    return end + 3 * lat;
}

static double sim_fsdp(const al_plan *p, const costmodel *m, double lat, int L, double *busy) {
    double t = 0;
    for (int w = 0; w < p->W; w++) busy[w] = 0;
    for (int j = 0; j < p->max_nmb; j++) { /* slot j: everyone waits for the slowest */
        double slot = 0;
        for (int w = 0; w < p->W; w++) {
            int k = p->mb_first[w] + j;
            double c = k < p->mb_first[w + 1] ? row_cost(m, p->mb_tokens[k]) : 0;
            busy[w] += c;
            slot = fmax(slot, c);
        }
        t += slot + (3 * L + 4) * lat;
    }
    return t + 3 * lat;
}

static int simulate(const bench *b, al_err *err) {
    costmodel m;
    int rc = calibrate(b, &m, err);
    if (rc) return rc;
    printf(
        "cost model (this machine, %ld thread(s)): row of n tokens = %.3g + %.3g n + %.3g n^2 s; "
        "barrier (W=2) %.1f us\n",
        b->threads, m.a, m.b, m.c, m.barrier2 * 1e6);
    static const int Ws[] = {2, 8, 16, 32, 64};
    static const al_workload_kind kinds[] = {AL_WL_FIXED, AL_WL_DOCS, AL_WL_LOGNORMAL};
    enum { MB = 40 };
    double sp[NWL][5][2], idle[NWL][5][2];
    printf("%-10s %4s %12s %12s %10s %10s\n", "workload", "W", "odc/naive", "odc/micro",
           "idle fsdp", "idle odc");
    for (int wi = 0; wi < NWL; wi++)
        for (int i = 0; i < 5; i++) {
            int W = Ws[i], n = W * (int)b->docs;
            double lat = m.barrier2 * log2((double)W);
            source src;
            if ((rc = source_init(&src, b, kinds[wi], n, err))) return rc;
            double t[3] = {0}, busy_sum[3] = {0};
            double *busy = malloc((size_t)W * sizeof(double));
            for (int s = 0; s < MB && rc == 0; s++) {
                al_workload_next(&src.wl, src.pieces, n);
                for (int c = 0; c < NCONF && rc == 0; c++) {
                    al_plan p;
                    al_balance_opts o = {configs[c].bal, b->mc.T, b->quad_c};
                    if ((rc = al_plan_build(&p, src.pieces, n, W, &o, err))) break;
                    double tt = configs[c].mode == AL_MODE_ODC
                                    ? sim_odc(&p, &m, lat, busy)
                                    : sim_fsdp(&p, &m, lat, b->mc.L, busy);
                    t[c] += tt;
                    for (int w = 0; w < W; w++) busy_sum[c] += busy[w] / ((double)W * tt);
                    al_plan_free(&p);
                }
            }
            free(busy);
            source_free(&src);
            if (rc) return rc;
            sp[wi][i][0] = t[0] / t[2];
            sp[wi][i][1] = t[1] / t[2];
            idle[wi][i][0] = 1 - busy_sum[1] / MB; /* the better fsdp: micro */
            idle[wi][i][1] = 1 - busy_sum[2] / MB;
            printf("%-10s %4d %11.3fx %11.3fx %9.1f%% %9.1f%%\n", al_workload_name(kinds[wi]), W,
                   sp[wi][i][0], sp[wi][i][1], 100 * idle[wi][i][0], 100 * idle[wi][i][1]);
        }
    if (b->json) {
        printf("{\"cost_a_s\":%.6g,\"cost_b_s\":%.6g,\"cost_c_s\":%.6g,\"barrier_w2_s\":%.6g,"
               "\"docs_per_worker\":%ld,\"projected\":[",
               m.a, m.b, m.c, m.barrier2, b->docs);
        for (int wi = 0; wi < NWL; wi++)
            for (int i = 0; i < 5; i++)
                printf("%s{\"workload\":\"%s\",\"W\":%d,\"speedup_vs_naive\":%.4f,"
                       "\"speedup_vs_micro\":%.4f,\"idle_fsdp\":%.4f,\"idle_odc\":%.4f}",
                       wi + i ? "," : "", al_workload_name(kinds[wi]), Ws[i], sp[wi][i][0],
                       sp[wi][i][1], idle[wi][i][0], idle[wi][i][1]);
        printf("]}\n");
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: autoloco bench odc [--preset P] [--workers W] [--threads N] [--docs D]\n"
            "                          [--steps N] [--warmup N] [--data FILE] [--sigma S]\n"
            "                          [--quad-c C] [--rounds R] [--simulate] [--device cpu|cuda]\n"
            "                          [--json]\n\n"
            "ODC against the FSDP-style baseline: real steps in W worker processes for\n"
            "fsdp-naive, fsdp-micro and odc-lpt on fixed rows, fortunes documents and\n"
            "lognormal lengths (minibatch = W*D pieces of <= T tokens; microbatch = one row\n"
            "of <= T tokens). --simulate instead fits this machine's cost per row and\n"
            "barrier latency and projects W = 8..64 with an event simulation.\n"
            "Defaults: --preset small --workers 2 --threads 1 --docs 16 --steps 3 --warmup 1\n"
            "--rounds 3 (configurations interleaved per round; medians reported)\n"
            "--data data/fortunes/train.bin --sigma 1.0 (lognormal median T/8) --quad-c 0.\n"
            "--device cuda: GPU workers (worker w on GPU w mod count; fsdp over NCCL needs\n"
            "one GPU per worker). --json prints one JSON object as the last line.\n");
}

int al_bench_odc(int argc, char **argv, al_err *err) {
    static const struct option opts[] = {{"preset", required_argument, 0, 'p'},
                                         {"workers", required_argument, 0, 'w'},
                                         {"threads", required_argument, 0, 't'},
                                         {"docs", required_argument, 0, 'd'},
                                         {"steps", required_argument, 0, 'n'},
                                         {"warmup", required_argument, 0, 'u'},
                                         {"data", required_argument, 0, 'D'},
                                         {"sigma", required_argument, 0, 's'},
                                         {"quad-c", required_argument, 0, 'q'},
                                         {"simulate", no_argument, 0, 'S'},
                                         {"rounds", required_argument, 0, 'R'},
                                         {"json", no_argument, 0, 'j'},
                                         {"device", required_argument, 0, 'G'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    bench b = {.preset = "small",
               .device = "cpu",
               .data_path = "data/fortunes/train.bin",
               .workers = 2,
               .threads = 1,
               .docs = 16,
               .steps = 3,
               .warmup = 1,
               .rounds = 3,
               .sigma = 1.0,
               .median_frac = 0.125};
    int ch, rc = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'p':
            b.preset = optarg;
            break;
        case 'w':
            rc = al_cli_int("--workers", optarg, 1, AL_SHM_MAX_WORKERS, &b.workers, err);
            break;
        case 't':
            rc = al_cli_int("--threads", optarg, 1, 1024, &b.threads, err);
            break;
        case 'd':
            rc = al_cli_int("--docs", optarg, 1, 100000, &b.docs, err);
            break;
        case 'n':
            rc = al_cli_int("--steps", optarg, 1, 100000, &b.steps, err);
            break;
        case 'u':
            rc = al_cli_int("--warmup", optarg, 0, 100000, &b.warmup, err);
            break;
        case 'R':
            rc = al_cli_int("--rounds", optarg, 1, 1000, &b.rounds, err);
            break;
        case 'D':
            b.data_path = optarg;
            break;
        case 's':
            rc = al_cli_double("--sigma", optarg, &b.sigma, err);
            break;
        case 'q':
            rc = al_cli_double("--quad-c", optarg, &b.quad_c, err);
            break;
        case 'S':
            b.simulate = 1;
            break;
        case 'G':
            b.device = optarg;
            break;
        case 'j':
            b.json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return AL_CLI_USAGE;
        }
        if (rc) return rc;
    }
    if ((rc = al_model_preset(&b.mc, b.preset, err))) return rc;
    /* both modes run: fsdp is the stricter one */
    if ((rc = al_odc_check_device(b.device, AL_MODE_FSDP, err)))
        return al_err_prefix(err, "--device");
    if ((rc = al_tokens_load(&b.data, b.data_path, err))) {
        al_err_prefix(err, "bench odc (prepare it with 'autoloco data prep --format fortune -o "
                           "data/fortunes /usr/share/games/fortunes')");
        return rc;
    }
    /* no OpenMP pool in this process before the workers are forked */
    al_threads_set(1);
    if (b.simulate) {
        rc = simulate(&b, err);
        al_tokens_free(&b.data);
        return rc;
    }
    static const al_workload_kind kinds[] = {AL_WL_FIXED, AL_WL_DOCS, AL_WL_LOGNORMAL};
    result r[NWL][NCONF], *runs = calloc((size_t)(NWL * NCONF * b.rounds), sizeof(result));
    if (!runs) return al_errf(err, AL_ENOMEM, "bench: out of memory");
    printf("bench odc: preset %s, W=%ld worker processes x %ld thread(s), %ld pieces per worker "
           "per minibatch, budget %d tokens per microbatch, %ld+%ld steps, %ld rounds\n",
           b.preset, b.workers, b.threads, b.docs, b.mc.T, b.warmup, b.steps, b.rounds);
    printf("%-10s %-11s %12s %10s %12s %s\n", "workload", "config", "minibatch s", "idle",
           "mb/worker", "(median of rounds; each round's seconds)");
    /* Rounds interleave the three configurations, so that load from other
     * processes on the machine hits them alike; each figure is the median
     * over rounds (by minibatch time). */
    for (int wi = 0; wi < NWL && rc == 0; wi++) {
        for (int k = 0; k < b.rounds && rc == 0; k++)
            for (int c = 0; c < NCONF && rc == 0; c++)
                rc = measure(&b, kinds[wi], c, &runs[(wi * NCONF + c) * b.rounds + k], err);
        for (int c = 0; c < NCONF && rc == 0; c++) {
            result *rr = &runs[(wi * NCONF + c) * b.rounds];
            qsort(rr, (size_t)b.rounds, sizeof *rr, cmp_result);
            r[wi][c] = rr[b.rounds / 2];
            printf("%-10s %-11s %12.4f %9.1f%% %12.2f ", al_workload_name(kinds[wi]),
                   configs[c].name, r[wi][c].seconds, 100 * r[wi][c].idle, r[wi][c].mb_per_worker);
            for (int k = 0; k < b.rounds; k++) printf(" %.3f", rr[k].seconds);
            printf("\n");
            fflush(stdout);
        }
    }
    free(runs);
    al_tokens_free(&b.data);
    if (rc) return rc;
    double sp[NWL], spn[NWL], idle_f[NWL];
    for (int wi = 0; wi < NWL; wi++) {
        int best = r[wi][0].seconds < r[wi][1].seconds ? 0 : 1;
        sp[wi] = r[wi][best].seconds / r[wi][2].seconds;
        spn[wi] = r[wi][0].seconds / r[wi][2].seconds;
        idle_f[wi] = r[wi][best].idle;
        printf("%-10s odc speedup: %.3fx vs the better fsdp (%s), %.3fx vs fsdp-naive\n",
               al_workload_name(kinds[wi]), sp[wi], configs[best].name, spn[wi]);
    }
    printf("peak gathered per worker: %.0f bytes (gather buffers %.0f bytes)\n", r[2][2].peak,
           r[2][2].pool);
    if (b.json) {
        printf("{\"preset\":\"%s\",\"workers\":%ld,\"threads\":%ld,\"docs_per_worker\":%ld,"
               "\"steps\":%ld,\"rounds\":%ld,",
               b.preset, b.workers, b.threads, b.docs, b.steps, b.rounds);
        for (int wi = 0; wi < NWL; wi++)
            for (int c = 0; c < NCONF; c++)
                printf("\"%s_%s_s\":%.5f,\"%s_%s_idle\":%.4f,", al_workload_name(kinds[wi]),
                       configs[c].name, r[wi][c].seconds, al_workload_name(kinds[wi]),
                       configs[c].name, r[wi][c].idle);
        printf(
            "\"speedup_odc_vs_fsdp_fixed\":%.4f,\"speedup_odc_vs_fsdp_fortunes\":%.4f,"
            "\"speedup_odc_vs_fsdp_lognormal\":%.4f,\"speedup_odc_vs_fsdp_skewed\":%.4f,"
            "\"speedup_odc_vs_fsdp_naive_skewed\":%.4f,\"idle_fsdp_skewed\":%.4f,"
            "\"idle_odc_skewed\":%.4f,\"peak_gathered_bytes\":%.0f,\"gather_pool_bytes\":%.0f}\n",
            sp[0], sp[1], sp[2], 0.5 * (sp[1] + sp[2]), 0.5 * (spn[1] + spn[2]),
            0.5 * (idle_f[1] + idle_f[2]), 0.5 * (r[1][2].idle + r[2][2].idle), r[2][2].peak,
            r[2][2].pool);
    }
    return 0;
}
