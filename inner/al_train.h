/*
 * al_train.h -- one worker's training loop: AdamW, warmup + cosine schedule,
 * global-norm clipping, gradient accumulation over microbatches, evaluation.
 *
 * A step: draw `accum` microbatches of batch x seq tokens; the loss is the mean
 * over every target position of the step; backward of each microbatch scaled by
 * 1 / (all targets of the step); clip the global gradient norm; AdamW.
 */
#ifndef AL_TRAIN_H
#define AL_TRAIN_H

#include "al_data.h"
#include "al_model.h"

typedef struct al_train_opts {
    int batch, seq, accum; /* rows per microbatch, tokens per row, microbatches per step */
    long steps;            /* schedule length (the cosine reaches min_lr here) */
    long warmup;
    double lr, min_lr_frac;
    double weight_decay, beta1, beta2, eps;
    double grad_clip; /* 0 = off */
    uint64_t seed;
    al_packing packing;
    const al_backend *backend; /* where the model and optimizer run; NULL: the CPU */
} al_train_opts;

/* Sane defaults (the `demo` recipe). */
void al_train_opts_default(al_train_opts *o);

/* Learning rate at 0-based step: linear warmup to lr over `warmup` steps, then
 * cosine decay to lr * min_lr_frac at `steps`. */
double al_lr_at(const al_train_opts *o, long step);

typedef struct al_step_stats {
    double loss;      /* mean over the step's targets */
    double grad_norm; /* before clipping */
    double lr;
    long tokens; /* target positions this step */
    double seconds;
} al_step_stats;

typedef struct al_trainer {
    al_model model;
    al_train_opts o;
    float *m, *v; /* AdamW moments, same layout as params, in the backend's memory */
    al_loader train, val;
    al_batch *mb; /* [accum] */
    long step;    /* steps done */
} al_trainer;

/* Build a trainer over loaded token files (val may be NULL: no evaluation;
 * train may be NULL: batches come from the caller via al_trainer_step_batches). The
 * trainer keeps pointers to them: they must outlive it. Weights are initialised
 * from o->seed. */
int al_trainer_init(al_trainer *tr, const al_model_config *cfg, const al_train_opts *o,
                    const al_tokens *train, const al_tokens *val, al_err *err);
void al_trainer_free(al_trainer *tr);
/* One optimizer step. AL_ENUMERIC if the loss or gradient is not finite (the
 * parameters are left as they were before the step). */
int al_trainer_step(al_trainer *tr, al_step_stats *st, al_err *err);
/* One optimizer step over caller-provided microbatches (each batch x seq). */
int al_trainer_step_batches(al_trainer *tr, const al_batch *mbs, int n, al_step_stats *st,
                            al_err *err);
/* Mean loss over the first `batches` microbatches of the validation split (the
 * same ones every time, in file order); batches <= 0: every full microbatch the
 * split holds (all of it but the remainder of one microbatch). */
int al_trainer_eval(al_trainer *tr, int batches, double *loss, al_err *err);

/* The same evaluation for given parameters (host, layout of cfg) on a token
 * file: a trainer of o's batch, seq and packing (the rest ignored) whose
 * validation split is `data`, evaluated over `batches` (<= 0: all of it).
 * What `autoloco eval` reports for a checkpoint. */
int al_eval_params(const al_model_config *cfg, const float *params, const al_train_opts *o,
                   const al_tokens *data, int batches, double *loss, al_err *err);

#endif
