/* al_bench.h -- what the benches share: timing training steps of a preset on
 * a backend (`bench inner`, `bench gpu`), and the median their figures are. */
#ifndef AL_BENCH_H
#define AL_BENCH_H

#include "al_train.h"

typedef struct al_bench_steps_result {
    double step_s; /* median seconds of a full training step */
    double flops;  /* per step: 6*N*tokens + 6*L*C*T*tokens */
    double loss;   /* of the last step (a sanity check, random tokens) */
    size_t params;
    char device[256];
} al_bench_steps_result;

/* The median of v[0..n) (n >= 1); sorts v in place. */
double al_bench_median(double *v, int n);

/* Two warm-up steps, then `steps` timed steps (forward, backward, clipping,
 * AdamW, the step's closing sync) on one fixed microbatch of random tokens. */
int al_bench_steps(const al_model_config *mc, const al_backend *be, int batch, int seq, int steps,
                   al_bench_steps_result *res, al_err *err);

#endif
