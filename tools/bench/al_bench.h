/* al_bench.h -- what the benches share: timing training steps of a preset on
 * a backend (`bench inner`, `bench gpu`), and the median their figures are. */
#ifndef AL_BENCH_H
#define AL_BENCH_H

#include "al_train.h"

typedef struct al_bench_steps_result {
    double step_s; /* median seconds of a full training step */
    double cpu_s;  /* median CPU seconds of a step, all threads (less disturbed by other load) */
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
/* The same, calling on_timed(arg) after the warm-up (NULL: nothing). */
int al_bench_steps_ex(const al_model_config *mc, const al_backend *be, int batch, int seq,
                      int steps, void (*on_timed)(void *), void *arg, al_bench_steps_result *res,
                      al_err *err);

/* ---- where a step's time goes (bench_ops.c) ---- */
enum { AL_BENCH_MAX_OPS = 32, AL_BENCH_MAX_SHAPES = 48 };
typedef struct al_bench_op {
    const char *name, *phase; /* phase: forward, backward, update, memory */
    long calls;
    double seconds, cpu_seconds; /* wall; this process's CPU time, every thread */
} al_bench_op;
typedef struct al_bench_shape {
    const char *op; /* matmul_forward (dims N IC OC), matmul_backward, attention_* (B T C) */
    int dims[3];
    long calls;
    double seconds, cpu_seconds, flops;
} al_bench_shape;
/* A backend that forwards every op to `inner` and times it: op rows, and a
 * row per shape for matmul and attention (FLOPs counted as bench_ops.c says). */
typedef struct al_bench_ops {
    al_backend be; /* pass &ops.be to the model */
    const al_backend *inner;
    al_bench_op op[AL_BENCH_MAX_OPS];
    int nops, nshapes;
    al_bench_shape shape[AL_BENCH_MAX_SHAPES];
} al_bench_ops;
void al_bench_ops_init(al_bench_ops *p, const al_backend *inner);
void al_bench_ops_reset(void *p); /* zero every row (an on_timed callback) */

/* The CPU's model name and flags from /proc/cpuinfo ("" where unreadable),
 * and the BLAS this binary runs (its own configuration string). */
void al_bench_cpu(char *model, size_t model_len, char *flags, size_t flags_len);
const char *al_bench_blas(void);

#endif
