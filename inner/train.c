/* train.c -- the single-worker training loop (see al_train.h). */
#include "al_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void al_train_opts_default(al_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->batch = 16;
    o->seq = 0; /* 0: the preset's T */
    o->accum = 1;
    o->steps = 2000;
    o->warmup = 100;
    o->lr = 3e-3;
    o->min_lr_frac = 0.1;
    o->weight_decay = 0.1;
    o->beta1 = 0.9;
    o->beta2 = 0.95;
    o->eps = 1e-8;
    o->grad_clip = 1.0;
    o->seed = 1337;
    o->packing = AL_PACK_DOCS;
}

double al_lr_at(const al_train_opts *o, long step) {
    if (step < o->warmup) return o->lr * (double)(step + 1) / (double)o->warmup;
    double min_lr = o->lr * o->min_lr_frac;
    if (step >= o->steps) return min_lr;
    double span = (double)(o->steps - o->warmup);
    double frac = span > 0 ? (double)(step - o->warmup) / span : 1.0;
    return min_lr + 0.5 * (o->lr - min_lr) * (1.0 + cos(M_PI * frac));
}

int al_trainer_init(al_trainer *tr, const al_model_config *cfg, const al_train_opts *o,
                    const al_tokens *train, const al_tokens *val, al_err *err) {
    memset(tr, 0, sizeof *tr);
    tr->o = *o;
    if (tr->o.seq == 0) tr->o.seq = cfg->T;
    if (tr->o.batch < 1 || tr->o.accum < 1 || tr->o.steps < 1 || tr->o.warmup < 0)
        return al_errf(err, AL_EINVAL, "trainer: batch, accum and steps must be >= 1");
    int rc = train ? al_tokens_check_vocab(train, cfg, err) : 0;
    if (rc == 0 && val) rc = al_tokens_check_vocab(val, cfg, err);
    if (rc) return rc;
    if (train && tr->o.packing == AL_PACK_STREAM && train->n < (size_t)tr->o.seq + 1)
        return al_errf(err, AL_EFORMAT, "%s: %zu tokens, fewer than one row of %d", train->path,
                       train->n, tr->o.seq + 1);
    const al_backend *be = tr->o.backend ? tr->o.backend : al_backend_cpu();
    tr->o.backend = be;
    rc = al_model_init_on(&tr->model, be, cfg, tr->o.batch, tr->o.seq, err);
    if (rc) return rc;
    al_model_init_weights(&tr->model, tr->o.seed);
    size_t P = tr->model.lay.nparams;
    /* moments: zeroed by alloc */
    if ((rc = AL_BE(be, alloc, (void **)&tr->m, P * sizeof(float), err)) == 0)
        rc = AL_BE(be, alloc, (void **)&tr->v, P * sizeof(float), err);
    if (rc == 0) rc = al_model_sync(&tr->model, err);
    if (rc) {
        al_trainer_free(tr);
        return rc;
    }
    tr->mb = calloc((size_t)tr->o.accum, sizeof(al_batch));
    if (!tr->mb) {
        al_trainer_free(tr);
        return al_errf(err, AL_ENOMEM, "trainer: out of memory");
    }
    for (int i = 0; i < tr->o.accum && rc == 0; i++)
        rc = al_batch_init(&tr->mb[i], tr->o.batch, tr->o.seq, err);
    if (rc == 0 && train) rc = al_loader_init(&tr->train, train, tr->o.packing, 1, tr->o.seed, err);
    if (rc == 0 && val) rc = al_loader_init(&tr->val, val, tr->o.packing, 0, 0, err);
    if (rc) al_trainer_free(tr);
    return rc;
}

void al_trainer_free(al_trainer *tr) {
    if (tr->mb)
        for (int i = 0; i < tr->o.accum; i++) al_batch_free(&tr->mb[i]);
    free(tr->mb);
    if (tr->o.backend) {
        AL_BE(tr->o.backend, release, tr->m);
        AL_BE(tr->o.backend, release, tr->v);
    }
    al_loader_free(&tr->train);
    al_loader_free(&tr->val);
    al_model_free(&tr->model);
    memset(tr, 0, sizeof *tr);
}

int al_trainer_step(al_trainer *tr, al_step_stats *st, al_err *err) {
    if (!tr->train.data) return al_errf(err, AL_EINVAL, "trainer: no training data loaded");
    for (int i = 0; i < tr->o.accum; i++) al_loader_next(&tr->train, &tr->mb[i]);
    return al_trainer_step_batches(tr, tr->mb, tr->o.accum, st, err);
}

int al_trainer_step_batches(al_trainer *tr, const al_batch *mbs, int n, al_step_stats *st,
                            al_err *err) {
    double t0 = al_now();
    al_model *m = &tr->model;
    const al_backend *be = m->be;
    long ntargets = 0;
    for (int i = 0; i < n; i++) ntargets += mbs[i].ntargets;
    if (ntargets == 0) return al_errf(err, AL_EFORMAT, "step %ld: no target tokens", tr->step);
    al_model_zero_grad(m);
    double loss = 0;
    float scale = (float)(1.0 / (double)ntargets);
    for (int i = 0; i < n; i++) {
        loss += al_model_forward(m, &mbs[i]);
        al_model_backward(m, &mbs[i], scale);
    }
    loss /= (double)ntargets;
    size_t P = m->lay.nparams;
    double norm = sqrt(AL_BE(be, sumsq, m->grads, P));
    int rc = al_model_sync(m, err);
    if (rc) return al_err_prefix(err, "step %ld", tr->step + 1);
    if (!isfinite(loss) || !isfinite(norm))
        return al_errf(err, AL_ENUMERIC, "step %ld: loss %g, gradient norm %g (not finite)",
                       tr->step + 1, loss, norm);
    if (tr->o.grad_clip > 0 && norm > tr->o.grad_clip)
        AL_BE(be, scale, m->grads, P, (float)(tr->o.grad_clip / norm));
    double lr = al_lr_at(&tr->o, tr->step);
    int t = (int)(tr->step + 1);
    for (int k = 0; k < m->lay.ntensors; k++) {
        const al_tensor_info *ti = &m->lay.tensors[k];
        AL_BE(be, adamw_update, m->params + ti->offset, m->grads + ti->offset, tr->m + ti->offset,
              tr->v + ti->offset, ti->numel, (float)lr, (float)tr->o.beta1, (float)tr->o.beta2,
              (float)tr->o.eps, ti->decay ? (float)tr->o.weight_decay : 0.0f, t);
    }
    if ((rc = al_model_sync(m, err))) return al_err_prefix(err, "step %ld", tr->step + 1);
    tr->step++;
    st->loss = loss;
    st->grad_norm = norm;
    st->lr = lr;
    st->tokens = ntargets;
    st->seconds = al_now() - t0;
    return 0;
}

int al_trainer_eval(al_trainer *tr, int batches, double *loss, al_err *err) {
    if (!tr->val.data) return al_errf(err, AL_EINVAL, "evaluation: no validation split loaded");
    al_loader_state start = {0, 0, 0};
    int rc = al_loader_seek(&tr->val, &start, err);
    if (rc) return rc;
    double sum = 0;
    long n = 0;
    al_batch *b = &tr->mb[0];
    if (batches <= 0) { /* every full batch of the split, in file order */
        size_t positions = tr->val.data->n - 1, per = (size_t)b->B * (size_t)b->T;
        batches = (int)(positions / per);
        if (batches < 1) batches = 1;
    }
    for (int i = 0; i < batches; i++) {
        al_loader_next(&tr->val, b);
        sum += al_model_forward(&tr->model, b);
        n += b->ntargets;
    }
    *loss = n > 0 ? sum / (double)n : NAN;
    if ((rc = al_model_sync(&tr->model, err))) return al_err_prefix(err, "evaluation");
    if (!isfinite(*loss))
        return al_errf(err, AL_ENUMERIC, "evaluation loss is %g (not finite)", *loss);
    return 0;
}

int al_eval_params(const al_model_config *cfg, const float *params, const al_train_opts *o,
                   const al_tokens *data, int batches, double *loss, al_err *err) {
    al_trainer tr;
    int rc = al_trainer_init(&tr, cfg, o, NULL, data, err);
    if (rc) return rc;
    rc = al_model_from_host(&tr.model, tr.model.params, params, tr.model.lay.nparams, err);
    if (rc == 0) rc = al_trainer_eval(&tr, batches, loss, err);
    al_trainer_free(&tr);
    return rc;
}
