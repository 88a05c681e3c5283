/* train_workers.c -- `autoloco train --workers W --mode odc|fsdp`: one site's
 * training in W worker processes (inner/al_odc.h), then evaluation and a
 * checkpoint from the parent.
 *
 * A step is a minibatch of batch * accum pieces: documents cut to <= seq
 * tokens (packing docs) or rows of seq tokens (packing stream). The balancer
 * ([inner] balance; auto = lpt for odc, micro for fsdp) splits them over the
 * workers and packs microbatch rows of at most seq tokens. Worker 0 prints the
 * progress lines. On SIGINT/SIGTERM the workers stop after the step they are
 * in (worker 0 decides, every worker follows at the step's last barrier) and
 * the parent saves a checkpoint there without evaluating, then returns 0. The
 * checkpoint holds what decides the next steps: parameters and AdamW moments
 * (the segment's), the step count (AdamW's bias correction, the learning-rate
 * schedule), and the position of the source every worker draws the same
 * minibatches from (the workers keep nothing else between steps, and the
 * model has no dropout), so --resume continues bit-for-bit. */
#include "al_store.h"
#include "al_cli.h"
#include "al_odc.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct wsource {
    al_workload wl;
    al_piece *pieces;
    int n;
} wsource;

static int wsource_next(void *ctx, long step, const al_piece **pieces, int *n, al_err *err) {
    (void)step;
    (void)err;
    wsource *s = ctx;
    al_workload_next(&s->wl, s->pieces, s->n);
    *pieces = s->pieces;
    *n = s->n;
    return 0;
}

typedef struct progress {
    long every, steps;
    double loss;
    long n, tokens;
    double secs;
} progress;

/* Runs in worker 0 after each step. */
static void on_step(void *ctx, const al_odc_step_stats *st) {
    progress *p = ctx;
    p->loss += st->loss;
    p->n++;
    p->tokens += st->tokens;
    p->secs += st->seconds;
    if (st->step % p->every == 0 || st->step == p->steps) {
        printf("step %6ld/%ld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s\n", st->step, p->steps,
               p->loss / (double)p->n, st->lr, st->grad_norm, (double)p->tokens / p->secs);
        fflush(stdout);
        p->loss = p->secs = 0;
        p->n = p->tokens = 0;
    }
}

/* --resume: the checkpoint's parameters, AdamW state and step into the
 * engine, its data position into the source, through a trainer that only
 * carries them (to: the parent's trainer options). */
static int resume_from(al_odc *e, wsource *src, const char *path, const al_log *log,
                       const al_model_config *mc, const al_train_opts *to, const char *hash,
                       al_err *err) {
    char dir[4096];
    int rc = al_ckpt_find(path, log, dir, sizeof dir, err);
    if (rc) return rc;
    al_trainer tr;
    if ((rc = al_trainer_init(&tr, mc, to, NULL, NULL, err))) return rc;
    al_loader_state pos;
    rc = al_ckpt_load_ex(dir, &tr, hash, log, e->o.workers, &pos, err);
    if (rc == 0 && (rc = al_workload_seek(&src->wl, &pos, err))) al_err_prefix(err, "%s", dir);
    if (rc == 0) {
        size_t P = e->lay.nparams;
        memcpy(e->params, tr.model.params, P * sizeof(float));
        memcpy(e->m, tr.m, P * sizeof(float));
        memcpy(e->v, tr.v, P * sizeof(float));
        e->step = tr.step;
        printf("resumed from %s at step %ld\n", dir, e->step);
    }
    al_trainer_free(&tr);
    return rc;
}

int al_train_workers(const al_config *c, const al_model_config *mc, const al_train_opts *o,
                     const al_tokens *train, const al_tokens *val, const char *hash,
                     const char *resume, const al_log *log, volatile sig_atomic_t *stop,
                     al_err *err) {
    al_odc_opts eo;
    memset(&eo, 0, sizeof eo);
    int rc = al_mode_parse(c->inner_mode, &eo.mode, err);
    if (rc) return al_err_prefix(err, "[inner] mode");
    eo.workers = (int)c->inner_workers;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    eo.threads = c->inner_threads > 0 ? (int)c->inner_threads : (int)AL_MAX(1, cores / eo.workers);
    int seq = o->seq > 0 ? o->seq : mc->T;
    eo.bal.budget = seq;
    if (!strcmp(c->inner_balance, "auto"))
        eo.bal.method = eo.mode == AL_MODE_ODC ? AL_BAL_LPT : AL_BAL_MICRO;
    else if ((rc = al_balance_parse(c->inner_balance, &eo.bal.method, err)))
        return al_err_prefix(err, "[inner] balance");
    eo.train = *o;
    eo.train.backend = NULL; /* the workers open their own */
    eo.device = c->inner_device;
    eo.site = "train";
    if ((rc = al_tokens_check_vocab(train, mc, err))) return rc;
    wsource src = {.n = (int)(o->batch * o->accum)};
    src.pieces = malloc((size_t)src.n * sizeof(al_piece));
    if (!src.pieces) return al_errf(err, AL_ENOMEM, "train: out of memory");
    rc = al_workload_init(&src.wl, o->packing == AL_PACK_STREAM ? AL_WL_FIXED : AL_WL_DOCS, train,
                          seq, o->seed, 0, 0, err);
    if (rc) {
        free(src.pieces);
        return rc;
    }
    al_odc e;
    if ((rc = al_odc_init(&e, mc, &eo, train, wsource_next, &src, err))) goto out_src;
    /* the parent's trainer: resume, then evaluate and checkpoint */
    al_train_opts to = *o;
    to.batch = 1;
    to.seq = seq;
    if (resume && (rc = resume_from(&e, &src, resume, log, mc, &to, hash, err))) goto out_e;
    progress pr = {c->inner_log_every, o->steps, 0, 0, 0, 0};
    e.on_step = on_step;
    e.on_step_ctx = &pr;
    printf("autoloco train: %d workers on %s (%s, balance %s, %d thread(s) each), preset %s (%zu "
           "parameters), %d pieces of <= %d tokens per step, %ld steps\n",
           eo.workers, eo.device, al_mode_name(eo.mode), al_balance_name(eo.bal.method), eo.threads,
           mc->preset, e.lay.nparams, src.n, seq, o->steps);
    double t0 = al_now();
    e.shm.stop = stop;
    long first = e.step;
    if ((rc = al_odc_run(&e, AL_MAX(0, o->steps - e.step), err))) goto out_e;
    int stopped = stop && *stop && e.step < o->steps;
    if (stopped) printf("signal %d: stopping after step %ld\n", (int)*stop, e.step);
    double secs = al_now() - t0;
    /* the parent: evaluate and checkpoint through a trainer holding the result */
    al_trainer tr;
    if ((rc = al_trainer_init(&tr, mc, &to, NULL, val, err))) goto out_e;
    size_t P = e.lay.nparams;
    memcpy(tr.model.params, e.params, P * sizeof(float));
    memcpy(tr.m, e.m, P * sizeof(float));
    memcpy(tr.v, e.v, P * sizeof(float));
    tr.step = e.step;
    if (val && !stopped) {
        double vl;
        if ((rc = al_trainer_eval(&tr, (int)c->inner_eval_batches, &vl, err))) goto out_tr;
        printf("eval  step %6ld | val loss %.4f\n", tr.step, vl);
    }
    if (!stopped)
        printf("done: %ld steps in %.1f s; peak gathered per worker %.0f bytes of %zu parameter "
               "bytes\n",
               e.step - first, secs, e.peak_gathered[0], P * sizeof(float));
    char dir[4096];
    if ((rc = al_mkdirs(c->checkpoint_dir, err))) goto out_tr;
    al_ckpt_extra ex = {.workers = eo.workers};
    if ((rc = al_workload_tell(&src.wl, &ex.data, err))) goto out_tr;
    rc = al_ckpt_save_ex(c->checkpoint_dir, &tr, hash, (int)c->checkpoint_keep, &ex, NULL, dir,
                         sizeof dir, err);
    if (rc == 0) printf("saved checkpoint %s\n", dir);
out_tr:
    al_trainer_free(&tr);
out_e:
    al_odc_free(&e);
out_src:
    al_workload_free(&src.wl);
    free(src.pieces);
    return rc;
}
