/*
 * bench_inner.c -- `autoloco bench inner`: training-step throughput against
 * OpenBLAS sgemm measured in the same run with the same thread count.
 *
 * FLOPs of a training step (forward + backward) are counted as
 *   6 * N * tokens + 6 * L * C * T * tokens
 * with N the parameter count (embeddings included, padded vocabulary) and T the
 * sequence length: 2 FLOPs per parameter per token forward, 4 backward, plus
 * the attention score and value products. sgemm FLOPs are 2 n^3 at n = 2048.
 * Each figure is the median of its repeats; ratio_to_sgemm = step GFLOP/s over
 * sgemm GFLOP/s.
 */
#include "al_cli.h"
#include "al_bench.h"
#include "al_train.h"

#include <cblas.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double al_bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median seconds of `reps` sgemm calls C = A B at n x n x n. */
static int time_sgemm(int n, int reps, double *secs, al_err *err) {
    size_t nn = (size_t)n * n;
    float *a = malloc(nn * sizeof(float)), *b = malloc(nn * sizeof(float));
    float *c = malloc(nn * sizeof(float));
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return al_errf(err, AL_ENOMEM, "sgemm %d: out of memory", n);
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
    }
    double t[16];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    for (int r = 0; r < reps; r++) {
        double t0 = al_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                    n);
        t[r] = al_now() - t0;
    }
    *secs = al_bench_median(t, reps);
    free(a), free(b), free(c);
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: autoloco bench inner [--preset P] [--batch B] [--seq T] [--threads N]\n"
               "                            [--steps N] [--device cpu|cuda] [--json]\n\n"
               "Times full training steps (forward, backward, clipping, AdamW) on random\n"
               "tokens, and OpenBLAS sgemm at 2048^3 with the same threads, in one run.\n"
               "FLOPs per step: 6*N*tokens + 6*L*C*T*tokens (N = parameters incl. embeddings).\n"
               "Defaults: --preset small --batch 8 --seq 256 --threads <cores> --steps 10.\n"
               "--device cuda times the same steps on the GPU backend (no sgemm yardstick).\n"
               "--json prints one JSON object as the last line.\n");
}

int al_bench_steps(const al_model_config *mc, const al_backend *be, int batch, int seq, int steps,
                   al_bench_steps_result *res, al_err *err) {
    memset(res, 0, sizeof *res);
    al_train_opts o;
    al_train_opts_default(&o);
    o.batch = batch;
    o.seq = seq;
    o.steps = 1000000;
    o.warmup = 0;
    o.backend = be;
    al_trainer tr;
    int rc = al_trainer_init(&tr, mc, &o, NULL, NULL, err);
    if (rc) return rc;
    /* random fixed-length rows */
    al_batch *b = &tr.mb[0];
    al_rng r;
    al_rng_seed(&r, 1);
    for (long i = 0; i < (long)batch * seq; i++) {
        b->tokens[i] = (int)al_rng_below(&r, (uint64_t)mc->V);
        b->targets[i] = (int)al_rng_below(&r, (uint64_t)mc->V);
        b->pos[i] = (int)(i % seq);
        b->docstart[i] = 0;
    }
    b->ntargets = batch * seq;
    double *t = calloc((size_t)steps, sizeof(double));
    if (!t) {
        al_trainer_free(&tr);
        return al_errf(err, AL_ENOMEM, "bench: out of memory");
    }
    al_step_stats st;
    for (int i = 0; i < 2 && rc == 0; i++) rc = al_trainer_step_batches(&tr, b, 1, &st, err);
    for (int i = 0; i < steps && rc == 0; i++) {
        rc = al_trainer_step_batches(&tr, b, 1, &st, err);
        t[i] = st.seconds;
    }
    if (rc == 0) {
        double tokens = (double)batch * seq;
        res->step_s = al_bench_median(t, steps);
        res->params = tr.model.lay.nparams;
        res->flops =
            6.0 * (double)res->params * tokens + 6.0 * mc->L * mc->C * (double)seq * tokens;
        res->loss = st.loss;
        snprintf(res->device, sizeof res->device, "%s", be->device);
    }
    free(t);
    al_trainer_free(&tr);
    return rc;
}

int al_bench_inner(int argc, char **argv, al_err *err) {
    static const struct option opts[] = {{"preset", required_argument, 0, 'p'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"seq", required_argument, 0, 's'},
                                         {"threads", required_argument, 0, 't'},
                                         {"steps", required_argument, 0, 'n'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {"device", required_argument, 0, 'd'},
                                         {0, 0, 0, 0}};
    const char *preset = "small", *device = "cpu";
    long batch = 8, seq = 256, threads = sysconf(_SC_NPROCESSORS_ONLN), steps = 10;
    int json = 0, ch, rc = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'p':
            preset = optarg;
            break;
        case 'b':
            rc = al_cli_int("--batch", optarg, 1, 4096, &batch, err);
            break;
        case 's':
            rc = al_cli_int("--seq", optarg, 1, 1 << 16, &seq, err);
            break;
        case 't':
            rc = al_cli_int("--threads", optarg, 1, 1024, &threads, err);
            break;
        case 'n':
            rc = al_cli_int("--steps", optarg, 1, 1000, &steps, err);
            break;
        case 'j':
            json = 1;
            break;
        case 'd':
            device = optarg;
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
    al_model_config mc;
    if ((rc = al_model_preset(&mc, preset, err))) return rc;
    if (seq > mc.T)
        return al_errf(err, AL_EINVAL, "--seq %ld exceeds preset '%s' context %d", seq, preset,
                       mc.T);
    al_threads_set((int)threads);
    const al_backend *be = NULL;
    if ((rc = al_backend_open(&be, device, 0, err))) return rc;
    int on_cpu = be->on_host;
    double sg[2] = {0, 0};
    al_bench_steps_result res;
    if (on_cpu) rc = time_sgemm(2048, 5, &sg[0], err);
    if (rc == 0) rc = al_bench_steps(&mc, be, (int)batch, (int)seq, (int)steps, &res, err);
    if (rc == 0 && on_cpu) rc = time_sgemm(2048, 5, &sg[1], err);
    al_backend_close(be);
    if (rc) return rc;
    double step_s = res.step_s, tokens = (double)(batch * seq), gflops = res.flops / step_s * 1e-9;
    double sgemm_s = 0.5 * (sg[0] + sg[1]);
    double sgemm_gflops = on_cpu ? 2.0 * 2048.0 * 2048.0 * 2048.0 / sgemm_s * 1e-9 : 0.0;
    if (!on_cpu) { /* no sgemm yardstick on the GPU: `bench gpu` reports TFLOP/s */
        printf("bench inner: preset %s (%zu params) on %s, batch %ld x seq %ld, %ld steps\n",
               preset, res.params, res.device, batch, seq, steps);
        printf("  %-22s %12.2f\n  %-22s %12.0f\n  %-22s %12.1f\n", "ms per step (median)",
               step_s * 1e3, "tokens/s", tokens / step_s, "step GFLOP/s", gflops);
        if (json)
            printf("{\"preset\":\"%s\",\"device\":\"%s\",\"batch\":%ld,\"seq\":%ld,"
                   "\"params\":%zu,\"ms_per_step\":%.3f,\"tokens_per_s\":%.1f,\"gflops\":%.2f}\n",
                   preset, res.device, batch, seq, res.params, step_s * 1e3, tokens / step_s,
                   gflops);
        return 0;
    }
    printf("bench inner: preset %s (%zu params), batch %ld x seq %ld, %ld threads, %ld steps\n",
           preset, res.params, batch, seq, threads, steps);
    printf("  %-22s %12.2f\n  %-22s %12.0f\n  %-22s %12.1f\n  %-22s %12.1f\n  %-22s %12.3f\n",
           "ms per step (median)", step_s * 1e3, "tokens/s", tokens / step_s, "step GFLOP/s",
           gflops, "sgemm 2048^3 GFLOP/s", sgemm_gflops, "ratio to sgemm", gflops / sgemm_gflops);
    if (json)
        printf("{\"preset\":\"%s\",\"batch\":%ld,\"seq\":%ld,\"threads\":%ld,\"params\":%zu,"
               "\"ms_per_step\":%.3f,\"tokens_per_s\":%.1f,\"gflops\":%.2f,\"sgemm_gflops\":%.2f,"
               "\"ratio_to_sgemm\":%.4f}\n",
               preset, batch, seq, threads, res.params, step_s * 1e3, tokens / step_s, gflops,
               sgemm_gflops, gflops / sgemm_gflops);
    return 0;
}
