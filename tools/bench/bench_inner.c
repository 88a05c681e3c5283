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
#include <time.h>
#include <unistd.h>

/* CPU time of this process, every thread */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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
               "                            [--steps N] [--device cpu|cuda] [--ops] [--json]\n\n"
               "Times full training steps (forward, backward, clipping, AdamW) on random\n"
               "tokens, and OpenBLAS sgemm at 2048^3 with the same threads, in one run.\n"
               "FLOPs per step: 6*N*tokens + 6*L*C*T*tokens (N = parameters incl. embeddings).\n"
               "Defaults: --preset small --batch 8 --seq 256 --threads <cores> --steps 10.\n"
               "--ops then times the same steps again op by op (forward, backward, update,\n"
               "memory) with GFLOP/s per matmul and attention shape.\n"
               "--device cuda times the same steps on the GPU backend (no sgemm yardstick).\n"
               "--json prints one JSON object as the last line (with the CPU's model name\n"
               "and flags, and the BLAS configuration).\n");
}

/* The op breakdown: a table, and its JSON fields (",\"ops\":[...],\"shapes\":[...]")
 * into js. Per step: every figure is divided by the timed steps. ms is wall
 * time, CPU ms this process's CPU time over every thread (the share column is
 * of CPU time: on a busy machine wall time also counts waiting for a core). */
static void print_ops(const al_bench_ops *p, int steps, FILE *js) {
    static const char *const phases[] = {"forward", "backward", "update", "memory"};
    double total = 0, total_cpu = 0;
    for (int i = 0; i < p->nops; i++) total += p->op[i].seconds, total_cpu += p->op[i].cpu_seconds;
    printf("\n  op breakdown (%d steps; per step):\n  %-9s %-22s %6s %10s %10s %6s\n", steps,
           "phase", "op", "calls", "ms", "CPU ms", "% CPU");
    fprintf(js, ",\"ops_ms\":%.4f,\"ops_cpu_ms\":%.4f,\"ops\":[", total / steps * 1e3,
            total_cpu / steps * 1e3);
    int first = 1;
    for (int ph = 0; ph < 4; ph++) {
        double sum = 0, sum_cpu = 0;
        for (int i = 0; i < p->nops; i++) {
            const al_bench_op *o = &p->op[i];
            if (strcmp(o->phase, phases[ph]) || o->calls == 0) continue;
            sum += o->seconds;
            sum_cpu += o->cpu_seconds;
            printf("  %-9s %-22s %6.1f %10.3f %10.3f %6.1f\n", o->phase, o->name,
                   (double)o->calls / steps, o->seconds / steps * 1e3, o->cpu_seconds / steps * 1e3,
                   100 * o->cpu_seconds / total_cpu);
            fprintf(js,
                    "%s{\"phase\":\"%s\",\"op\":\"%s\",\"calls\":%.1f,\"ms\":%.4f,"
                    "\"cpu_ms\":%.4f}",
                    first ? "" : ",", o->phase, o->name, (double)o->calls / steps,
                    o->seconds / steps * 1e3, o->cpu_seconds / steps * 1e3);
            first = 0;
        }
        printf("  %-9s %-22s %6s %10.3f %10.3f %6.1f\n", phases[ph], "(all)", "", sum / steps * 1e3,
               sum_cpu / steps * 1e3, 100 * sum_cpu / total_cpu);
    }
    printf("  %-9s %-22s %6s %10.3f %10.3f\n", "step", "(all ops)", "", total / steps * 1e3,
           total_cpu / steps * 1e3);
    printf("\n  matmul and attention by shape (matmul: N IC OC; attention: B T C; GFLOP/s by\n"
           "  wall time, and per core by CPU time):\n  %-19s %16s %6s %10s %10s %9s %9s\n",
           "op", "shape", "calls", "ms", "CPU ms", "GFLOP/s", "per core");
    fprintf(js, "],\"shapes\":[");
    for (int i = 0; i < p->nshapes; i++) {
        const al_bench_shape *s = &p->shape[i];
        char dims[48];
        snprintf(dims, sizeof dims, "%d %d %d", s->dims[0], s->dims[1], s->dims[2]);
        printf("  %-19s %16s %6.1f %10.3f %10.3f %9.1f %9.1f\n", s->op, dims,
               (double)s->calls / steps, s->seconds / steps * 1e3, s->cpu_seconds / steps * 1e3,
               s->flops / s->seconds * 1e-9, s->flops / s->cpu_seconds * 1e-9);
        fprintf(js,
                "%s{\"op\":\"%s\",\"dims\":[%d,%d,%d],\"calls\":%.1f,\"ms\":%.4f,"
                "\"cpu_ms\":%.4f,\"gflops\":%.2f,\"gflops_per_core\":%.2f}",
                i ? "," : "", s->op, s->dims[0], s->dims[1], s->dims[2], (double)s->calls / steps,
                s->seconds / steps * 1e3, s->cpu_seconds / steps * 1e3,
                s->flops / s->seconds * 1e-9, s->flops / s->cpu_seconds * 1e-9);
    }
    fprintf(js, "]");
}

void al_bench_cpu(char *model, size_t model_len, char *flags, size_t flags_len) {
    model[0] = flags[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[8192];
    while (fgets(line, sizeof line, f) && (!model[0] || !flags[0])) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *v = colon + 1 + (colon[1] == ' ');
        v[strcspn(v, "\n")] = '\0';
        if (!model[0] && !strncmp(line, "model name", 10)) snprintf(model, model_len, "%s", v);
        if (!flags[0] && (!strncmp(line, "flags", 5) || !strncmp(line, "Features", 8)))
            snprintf(flags, flags_len, "%s", v);
    }
    fclose(f);
}

const char *al_bench_blas(void) {
    return openblas_get_config();
}

int al_bench_steps(const al_model_config *mc, const al_backend *be, int batch, int seq, int steps,
                   al_bench_steps_result *res, al_err *err) {
    return al_bench_steps_ex(mc, be, batch, seq, steps, NULL, NULL, res, err);
}

int al_bench_steps_ex(const al_model_config *mc, const al_backend *be, int batch, int seq,
                      int steps, void (*on_timed)(void *), void *arg, al_bench_steps_result *res,
                      al_err *err) {
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
    double *t = calloc(2 * (size_t)steps, sizeof(double)), *cpu = t + steps;
    if (!t) {
        al_trainer_free(&tr);
        return al_errf(err, AL_ENOMEM, "bench: out of memory");
    }
    al_step_stats st;
    for (int i = 0; i < 2 && rc == 0; i++) rc = al_trainer_step_batches(&tr, b, 1, &st, err);
    if (on_timed) on_timed(arg);
    for (int i = 0; i < steps && rc == 0; i++) {
        double c0 = cpu_seconds();
        rc = al_trainer_step_batches(&tr, b, 1, &st, err);
        cpu[i] = cpu_seconds() - c0;
        t[i] = st.seconds;
    }
    if (rc == 0) {
        double tokens = (double)batch * seq;
        res->step_s = al_bench_median(t, steps);
        res->cpu_s = al_bench_median(cpu, steps);
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
    static const struct option opts[] = {
        {"preset", required_argument, 0, 'p'}, {"batch", required_argument, 0, 'b'},
        {"seq", required_argument, 0, 's'},    {"threads", required_argument, 0, 't'},
        {"steps", required_argument, 0, 'n'},  {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},         {"device", required_argument, 0, 'd'},
        {"ops", no_argument, 0, 'o'},          {0, 0, 0, 0}};
    const char *preset = "small", *device = "cpu";
    long batch = 8, seq = 256, threads = sysconf(_SC_NPROCESSORS_ONLN), steps = 10;
    int json = 0, ops = 0, ch, rc = 0;
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
        case 'o':
            ops = 1;
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
    al_bench_steps_result res, res_ops;
    al_bench_ops *prof = NULL;
    if (on_cpu) rc = time_sgemm(2048, 5, &sg[0], err);
    if (rc == 0) rc = al_bench_steps(&mc, be, (int)batch, (int)seq, (int)steps, &res, err);
    if (rc == 0 && on_cpu) rc = time_sgemm(2048, 5, &sg[1], err);
    if (rc == 0 && ops) {
        if (!(prof = malloc(sizeof *prof))) rc = al_errf(err, AL_ENOMEM, "bench: out of memory");
        if (rc == 0) {
            al_bench_ops_init(prof, be);
            rc = al_bench_steps_ex(&mc, &prof->be, (int)batch, (int)seq, (int)steps,
                                   al_bench_ops_reset, prof, &res_ops, err);
        }
    }
    al_backend_close(be);
    /* the JSON object is written to a memory stream while the tables print */
    char *js = NULL;
    size_t jslen = 0;
    FILE *jf = rc == 0 ? open_memstream(&js, &jslen) : NULL;
    if (rc == 0 && !jf) rc = al_errf(err, AL_ENOMEM, "bench: out of memory");
    if (rc) {
        free(prof);
        return rc;
    }
    double step_s = res.step_s, tokens = (double)(batch * seq), gflops = res.flops / step_s * 1e-9;
    double sgemm_s = 0.5 * (sg[0] + sg[1]);
    double sgemm_gflops = on_cpu ? 2.0 * 2048.0 * 2048.0 * 2048.0 / sgemm_s * 1e-9 : 0.0;
    if (!on_cpu) { /* no sgemm yardstick on the GPU: `bench gpu` reports TFLOP/s */
        printf("bench inner: preset %s (%zu params) on %s, batch %ld x seq %ld, %ld steps\n",
               preset, res.params, res.device, batch, seq, steps);
        printf("  %-22s %12.2f\n  %-22s %12.0f\n  %-22s %12.1f\n", "ms per step (median)",
               step_s * 1e3, "tokens/s", tokens / step_s, "step GFLOP/s", gflops);
        fprintf(jf,
                "{\"preset\":\"%s\",\"device\":\"%s\",\"batch\":%ld,\"seq\":%ld,"
                "\"params\":%zu,\"ms_per_step\":%.3f,\"tokens_per_s\":%.1f,\"gflops\":%.2f",
                preset, res.device, batch, seq, res.params, step_s * 1e3, tokens / step_s, gflops);
    } else {
        char model[256], flags[4096];
        al_bench_cpu(model, sizeof model, flags, sizeof flags);
        printf("bench inner: preset %s (%zu params), batch %ld x seq %ld, %ld threads, %ld "
               "steps\n  cpu: %s\n  blas: %s\n",
               preset, res.params, batch, seq, threads, steps, model, al_bench_blas());
        printf("  %-22s %12.2f\n  %-22s %12.2f\n  %-22s %12.0f\n  %-22s %12.1f\n  %-22s "
               "%12.1f\n  %-22s %12.3f\n",
               "ms per step (median)", step_s * 1e3, "CPU ms per step", res.cpu_s * 1e3, "tokens/s",
               tokens / step_s, "step GFLOP/s", gflops, "sgemm 2048^3 GFLOP/s", sgemm_gflops,
               "ratio to sgemm", gflops / sgemm_gflops);
        fprintf(jf,
                "{\"preset\":\"%s\",\"batch\":%ld,\"seq\":%ld,\"threads\":%ld,"
                "\"params\":%zu,\"ms_per_step\":%.3f,\"cpu_ms_per_step\":%.3f,"
                "\"tokens_per_s\":%.1f,\"gflops\":%.2f,\"sgemm_gflops\":%.2f,\"ratio_to_sgemm\":%."
                "4f,\"cpu_model\":\"%s\","
                "\"cpu_flags\":\"%s\",\"blas\":\"%s\"",
                preset, batch, seq, threads, res.params, step_s * 1e3, res.cpu_s * 1e3,
                tokens / step_s, gflops, sgemm_gflops, gflops / sgemm_gflops, model, flags,
                al_bench_blas());
    }
    if (prof) {
        fprintf(jf, ",\"ops_step_ms\":%.3f", res_ops.step_s * 1e3);
        print_ops(prof, (int)steps, jf);
    }
    fprintf(jf, "}");
    fclose(jf);
    if (json) printf("%s\n", js);
    free(js);
    free(prof);
    return 0;
}
