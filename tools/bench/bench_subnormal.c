/*
 * bench_subnormal.c -- `autoloco bench subnormal`: what flushing subnormal
 * floats to zero saves a model that has grown confident.
 *
 * A subnormal float (|x| < FLT_MIN = 1.2e-38) makes x86 and arm64 cores take
 * a microcode assist on every operation that reads or writes one. A model
 * that predicts its next token with near certainty writes them into its
 * activation gradients (attention probabilities near 0 make the attention's
 * gradient for q, k and v subnormal). Every thread that trains flushes them
 * (al_fp_flush_subnormals, through al_threads_set); this bench trains the same
 * model on the same batches twice, on a thread that flushes and on one with
 * the IEEE defaults, and times the steps once the model is confident.
 *
 * The data is the text test_hostile's agents train on: 300 documents
 * "fortune i: " followed by 3 to 99 letters 'x' (in memory, byte-level, packed
 * by document, drawn by the trainer's loader as a run draws them). After
 * --warm steps the model predicts each next 'x' with near certainty; then it
 * times --steps steps and counts the subnormals in the attention's gradient
 * for q, k and v (block 0's, after the last step) and in the parameters, their
 * gradient and the Adam moments. Each repeat runs both modes, the order
 * alternating; the figures are medians over the repeats and the ratio is
 * IEEE's step time over the flushed one's.
 */
#include "al_bench.h"
#include "al_cli.h"
#include "al_data.h"
#include "al_train.h"

#include <fenv.h>
#include <getopt.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    /* in */
    const al_model_config *mc;
    int flush, batch, seq, warm, steps, threads;
    /* out */
    int rc;
    al_err err;
    double step_s, loss;
    size_t sub_dqkv, n_dqkv, sub_state, n;
} sn_job;

/* From the bits: with denormals-are-zero a comparison reads a subnormal as 0. */
static size_t count_subnormal(const float *x, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        c += (u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0;
    }
    return c;
}

/* The corpus: n documents "fortune i: " and 3 to 99 letters 'x', as the
 * text test_hostile's agents train on, each ended by EOT (byte-level
 * vocabulary: 256). doc[k] is the index of the EOT before document k. */
static int make_corpus(al_tokens *t, int ndocs, al_err *err) {
    memset(t, 0, sizeof *t);
    size_t cap = (size_t)ndocs * 120 + 1;
    t->tok = malloc(cap * sizeof *t->tok);
    t->doc = malloc(((size_t)ndocs + 1) * sizeof *t->doc);
    if (!t->tok || !t->doc) return al_errf(err, AL_ENOMEM, "bench subnormal: out of memory");
    t->vocab = 257;
    t->eot = 256;
    t->tok[t->n++] = 256;
    for (int i = 0; i < ndocs; i++) {
        t->doc[i] = t->n - 1;
        char head[32];
        int m = snprintf(head, sizeof head, "fortune %d: ", i);
        for (int k = 0; k < m; k++) t->tok[t->n++] = (uint8_t)head[k];
        for (int k = 0; k < i % 97 + 3; k++) t->tok[t->n++] = 'x';
        t->tok[t->n++] = 256;
    }
    t->doc[ndocs] = t->n - 1;
    t->ndocs = (size_t)ndocs;
    snprintf(t->path, sizeof t->path, "(fortunes of 'x', in memory)");
    return 0;
}

static int run_job(sn_job *j) {
    al_train_opts o;
    al_train_opts_default(&o);
    o.batch = j->batch;
    o.seq = j->seq;
    o.steps = 1000000;
    o.warmup = 5;
    o.lr = 1e-2;
    o.packing = AL_PACK_DOCS;
    al_tokens data;
    al_trainer tr;
    int rc = make_corpus(&data, 300, &j->err);
    if (rc == 0) rc = al_trainer_init(&tr, j->mc, &o, &data, NULL, &j->err);
    if (rc) {
        free(data.tok), free(data.doc);
        return rc;
    }
    double *t = calloc((size_t)j->steps, sizeof(double));
    if (!t) rc = al_errf(&j->err, AL_ENOMEM, "bench subnormal: out of memory");
    al_step_stats st = {0};
    for (int i = 0; i < j->warm && rc == 0; i++) rc = al_trainer_step(&tr, &st, &j->err);
    for (int i = 0; i < j->steps && rc == 0; i++) {
        rc = al_trainer_step(&tr, &st, &j->err);
        t[i] = st.seconds;
    }
    if (rc == 0) {
        j->step_s = al_bench_median(t, j->steps);
        j->loss = st.loss;
        j->n = tr.model.lay.nparams;
        /* the attention's gradient for q, k and v of block 0, the last the
         * backward wrote into that scratch */
        j->n_dqkv = (size_t)tr.model.B * (size_t)tr.model.T * 3 * (size_t)j->mc->C;
        j->sub_dqkv = count_subnormal(tr.model.dqkv, j->n_dqkv);
        j->sub_state = count_subnormal(tr.model.params, j->n) +
                       count_subnormal(tr.model.grads, j->n) + count_subnormal(tr.m, j->n) +
                       count_subnormal(tr.v, j->n);
    }
    free(t);
    al_trainer_free(&tr);
    free(data.tok), free(data.doc);
    return rc;
}

/* A thread of its own, so that its OpenMP pool starts in the mode chosen:
 * al_threads_set flushes; the IEEE run then clears the mode again before its
 * first kernel (fesetenv to the defaults), so its pool threads inherit that. */
static void *job_main(void *arg) {
    sn_job *j = arg;
    al_threads_set(j->threads);
    if (!j->flush) fesetenv(FE_DFL_ENV);
    j->rc = run_job(j);
    return NULL;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: autoloco bench subnormal [--preset P] [--batch B] [--seq T] [--warm N]\n"
            "                                [--steps N] [--repeats R] [--threads N] [--json]\n\n"
            "Trains one model on text that is mostly the letter 'x' until it is confident\n"
            "(--warm steps), then times --steps steps, on a thread that flushes subnormal\n"
            "floats to zero (as every training thread of autoloco does) and on one with the\n"
            "IEEE defaults; counts the subnormals in the attention's gradient for q, k, v\n"
            "(block 0) and in the parameters, gradient and Adam moments after the last step.\n"
            "Medians over --repeats runs of both, the order alternating.\n"
            "Defaults: --preset demo --batch 4 --seq 32 --warm 300 --steps 50 --repeats 3\n"
            "--threads 1. --json prints one JSON object as the last line.\n");
}

int al_bench_subnormal(int argc, char **argv, al_err *err) {
    static const struct option opts[] = {
        {"preset", required_argument, 0, 'p'},  {"batch", required_argument, 0, 'b'},
        {"seq", required_argument, 0, 's'},     {"warm", required_argument, 0, 'w'},
        {"steps", required_argument, 0, 'n'},   {"repeats", required_argument, 0, 'r'},
        {"threads", required_argument, 0, 't'}, {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *preset = "demo";
    long batch = 4, seq = 32, warm = 300, steps = 50, repeats = 3, threads = 1;
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
        case 'w':
            rc = al_cli_int("--warm", optarg, 0, 1000000, &warm, err);
            break;
        case 'n':
            rc = al_cli_int("--steps", optarg, 1, 100000, &steps, err);
            break;
        case 'r':
            rc = al_cli_int("--repeats", optarg, 1, 99, &repeats, err);
            break;
        case 't':
            rc = al_cli_int("--threads", optarg, 1, 1024, &threads, err);
            break;
        case 'j':
            json = 1;
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
    double ms[2][99];
    sn_job last[2];
    printf("bench subnormal: preset %s, batch %ld x seq %ld of fortunes of 'x', %ld threads; "
           "%ld steps to "
           "warm, %ld timed, %ld repeats\n",
           preset, batch, seq, threads, warm, steps, repeats);
    for (int r = 0; r < repeats; r++) {
        for (int k = 0; k < 2; k++) {
            int flush = (r + k) % 2 == 0; /* flushed first in even repeats */
            sn_job j = {.mc = &mc,
                        .flush = flush,
                        .batch = (int)batch,
                        .seq = (int)seq,
                        .warm = (int)warm,
                        .steps = (int)steps,
                        .threads = (int)threads};
            pthread_t th;
            if (pthread_create(&th, NULL, job_main, &j) != 0)
                return al_errf(err, AL_ENOMEM, "bench subnormal: cannot start a thread");
            pthread_join(th, NULL);
            if (j.rc) {
                *err = j.err;
                return al_err_prefix(err, "bench subnormal (%s)", flush ? "flushed" : "IEEE");
            }
            ms[flush][r] = j.step_s * 1e3;
            last[flush] = j;
            printf("  repeat %d %-8s %8.2f ms a step, loss %.4g; subnormals: block 0's dqkv %zu "
                   "of %zu, parameters, gradient and moments %zu of %zu\n",
                   r + 1, flush ? "flushed" : "IEEE", j.step_s * 1e3, j.loss, j.sub_dqkv, j.n_dqkv,
                   j.sub_state, 4 * j.n);
            fflush(stdout);
        }
    }
    double ieee = al_bench_median(ms[0], (int)repeats),
           flushed = al_bench_median(ms[1], (int)repeats);
    printf("  %-30s %10.2f\n  %-30s %10.2f\n  %-30s %10.2f\n", "IEEE ms a step (median)", ieee,
           "flushed ms a step (median)", flushed, "ratio IEEE / flushed", ieee / flushed);
    if (json)
        printf("{\"preset\":\"%s\",\"batch\":%ld,\"seq\":%ld,\"threads\":%ld,\"warm\":%ld,"
               "\"steps\":%ld,\"repeats\":%ld,\"ieee_ms\":%.3f,\"flushed_ms\":%.3f,"
               "\"ratio\":%.3f,\"ieee_subnormal_dqkv\":%zu,\"ieee_subnormal_state\":%zu,"
               "\"flushed_subnormal_dqkv\":%zu,\"flushed_subnormal_state\":%zu,"
               "\"ieee_loss\":%.6g,\"flushed_loss\":%.6g}\n",
               preset, batch, seq, threads, warm, steps, repeats, ieee, flushed, ieee / flushed,
               last[0].sub_dqkv, last[0].sub_state, last[1].sub_dqkv, last[1].sub_state,
               last[0].loss, last[1].loss);
    return 0;
}
