/*
 * odc_fixture.h -- what the ODC engine tests share (tests/test_odc.c on the
 * CPU, tests/test_cuda_odc.c on GPUs): a small corpus of variable-length
 * documents (lengths 3..60, some longer than T = 32) prepared into a temporary
 * folder, a docs workload as the engine's minibatch source, the training
 * options, and the single-worker trainer as the reference.
 *
 * Each test file includes it once and defines STEPS and PIECES first.
 */
#ifndef ODC_FIXTURE_H
#define ODC_FIXTURE_H

#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "al_odc.h"
#include "al_test.h"

typedef struct fixture {
    char tmp[256], site[64];
    al_tokens data;
    int ngpu; /* test_cuda_odc: GPUs seen by its probe */
} fixture;

/* Set *state to a fixture named `name` (tmp folder /tmp/al-<name>-PID). */
static int odc_fixture_setup(void **state, const char *name) {
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->tmp, sizeof f->tmp, "/tmp/al-%s-%d", name, (int)getpid());
    snprintf(f->site, sizeof f->site, "%s-%d", name, (int)getpid());
    al_remove_tree(f->tmp, NULL);
    mkdir(f->tmp, 0755);
    char path[512], out[512];
    snprintf(path, sizeof path, "%s/corpus.txt", f->tmp);
    FILE *fp = fopen(path, "w");
    al_rng r;
    al_rng_seed(&r, 5);
    for (int d = 0; d < 200; d++) { /* lengths 3..60: some longer than T = 32 */
        int len = 3 + (int)al_rng_below(&r, 58);
        for (int i = 0; i < len; i++) fputc("abcdefgh ijk\n"[al_rng_below(&r, 12)], fp);
        fputs("\n\n", fp);
    }
    fclose(fp);
    snprintf(out, sizeof out, "%s/data", f->tmp);
    const char *in[] = {path};
    al_prep_stats st;
    al_err err = {0};
    *state = f;
    int rc = al_data_prep(in, 1, AL_FMT_TEXT, out, 0.1, 1, &st, &err);
    snprintf(path, sizeof path, "%s/data/train.bin", f->tmp);
    if (rc == 0) rc = al_tokens_load(&f->data, path, &err);
    if (rc) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    al_threads_set(1); /* no OpenMP pool in the parent before forking workers */
    return 0;
}

static int odc_fixture_teardown(void **state) {
    fixture *f = *state;
    al_tokens_free(&f->data);
    al_remove_tree(f->tmp, NULL);
    free(f);
    return 0;
}

/* A source over a docs workload (each worker's copy advances identically). */
typedef struct source {
    al_workload wl;
    al_piece pieces[PIECES];
    long calls;
} source;

static int source_next(void *ctx, long step, const al_piece **pieces, int *n, al_err *err) {
    (void)step;
    (void)err;
    source *s = ctx;
    al_workload_next(&s->wl, s->pieces, PIECES);
    s->calls++;
    *pieces = s->pieces;
    *n = PIECES;
    return 0;
}

static void opts_for(al_train_opts *t) {
    al_train_opts_default(t);
    t->batch = 1;
    t->seq = 32;
    t->steps = 20;
    t->warmup = 2;
    t->lr = 1e-2;
    t->grad_clip = 1.0;
    t->seed = 7;
}

/* The single-worker CPU trainer on the same minibatches (every microbatch of
 * a W = 1 plan per step): parameters after STEPS steps and each step's loss. */
static void reference(fixture *f, const al_model_config *mc, float *params, double *losses) {
    al_train_opts t;
    opts_for(&t);
    al_trainer tr;
    al_err err = {0};
    assert_int_equal(al_trainer_init(&tr, mc, &t, NULL, NULL, &err), 0);
    source src;
    assert_int_equal(al_workload_init(&src.wl, AL_WL_DOCS, &f->data, 32, 11, 0, 0, &err), 0);
    al_balance_opts bo = {AL_BAL_LPT, 32, 0.0};
    for (int s = 0; s < STEPS; s++) {
        const al_piece *pc;
        int n;
        source_next(&src, s, &pc, &n, &err);
        al_plan p;
        assert_int_equal(al_plan_build(&p, pc, n, 1, &bo, &err), 0);
        al_batch *mbs = calloc((size_t)p.nmb, sizeof(al_batch));
        for (int k = 0; k < p.nmb; k++) {
            assert_int_equal(al_batch_init(&mbs[k], 1, 32, &err), 0);
            al_plan_batch(&p, k, pc, &f->data, &mbs[k]);
        }
        al_step_stats st;
        assert_int_equal(al_trainer_step_batches(&tr, mbs, p.nmb, &st, &err), 0);
        losses[s] = st.loss;
        for (int k = 0; k < p.nmb; k++) al_batch_free(&mbs[k]);
        free(mbs);
        al_plan_free(&p);
    }
    memcpy(params, tr.model.params, tr.model.lay.nparams * sizeof(float));
    al_workload_free(&src.wl);
    al_trainer_free(&tr);
}

/* Engine options for `mode` at W workers (fsdp balances microbatches, odc
 * partitions pieces by LPT), the same training options as the reference. */
static void engine_opts(const fixture *f, al_odc_opts *o, al_engine_mode mode, int W) {
    memset(o, 0, sizeof *o);
    o->mode = mode;
    o->workers = W;
    o->threads = 1;
    o->bal = (al_balance_opts){mode == AL_MODE_FSDP ? AL_BAL_MICRO : AL_BAL_LPT, 32, 0.0};
    opts_for(&o->train);
    o->site = f->site;
    o->barrier_timeout_s = 20;
}

/* Run the engine for STEPS (3 + 2) on `device`; fills params and losses. */
static int run_engine(fixture *f, const al_model_config *mc, al_engine_mode mode, int W,
                      const char *device, float *params, double *losses, al_err *err) {
    al_odc_opts o;
    engine_opts(f, &o, mode, W);
    o.barrier_timeout_s = 60; /* a GPU worker's first CUDA call can take seconds */
    o.device = device;
    source src;
    assert_int_equal(al_workload_init(&src.wl, AL_WL_DOCS, &f->data, 32, 11, 0, 0, err), 0);
    al_odc e;
    assert_int_equal(al_odc_init(&e, mc, &o, &f->data, source_next, &src, err), 0);
    int rc = al_odc_run(&e, 3, err);
    if (rc == 0) rc = al_odc_run(&e, STEPS - 3, err);
    if (rc == 0) {
        memcpy(params, e.params, e.lay.nparams * sizeof(float));
        for (int s = 1; s <= STEPS; s++) losses[s - 1] = al_odc_stats(&e, s)->loss;
    }
    al_odc_free(&e);
    al_workload_free(&src.wl);
    return rc;
}

/* Parameters within TOL_PARAM (relative to the largest) and every step's loss
 * within TOL_LOSS of the reference. */
static void check(const char *what, const float *params, const double *losses, const double *refd,
                  const double *ref_loss, size_t P) {
    char label[128];
    snprintf(label, sizeof label, "%s params", what);
    assert_err_below(label, t_max_rel_err(params, refd, P), TOL_PARAM);
    double lerr = 0;
    for (int s = 0; s < STEPS; s++)
        lerr = fmax(lerr, fabs(losses[s] - ref_loss[s]) / fabs(ref_loss[s]));
    snprintf(label, sizeof label, "%s losses", what);
    assert_err_below(label, lerr, TOL_LOSS);
}

/* odc at W workers on the CPU engine, then on `device` (the GPU engine's
 * path): both against the trainer's reference (check), and the device's
 * parameters within TOL_PARAM of the CPU engine's. Returns the device's
 * parameters as doubles (free them). */
static double *odc_vs_cpu(fixture *f, const al_model_config *mc, int W, const char *device,
                          const double *refd, const double *ref_loss, size_t P) {
    float *got = malloc(P * sizeof(float));
    double loss[STEPS];
    al_err err = {0};
    char what[96];
    if (run_engine(f, mc, AL_MODE_ODC, W, "cpu", got, loss, &err))
        fail_msg("cpu odc W=%d: %s", W, err.msg);
    snprintf(what, sizeof what, "cpu odc W=%d vs trainer:", W);
    check(what, got, loss, refd, ref_loss, P);
    double *cpud = t_to_d(got, P);
    if (run_engine(f, mc, AL_MODE_ODC, W, device, got, loss, &err))
        fail_msg("%s odc W=%d: %s", device, W, err.msg);
    snprintf(what, sizeof what, "%s odc W=%d vs trainer:", device, W);
    check(what, got, loss, refd, ref_loss, P);
    snprintf(what, sizeof what, "%s odc W=%d params vs cpu odc", device, W);
    assert_err_below(what, t_max_rel_err(got, cpud, P), TOL_PARAM);
    free(cpud);
    double *gotd = t_to_d(got, P);
    free(got);
    return gotd;
}

#endif
