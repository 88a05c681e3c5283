/*
 * bench_ops.c -- where a training step's time goes: a backend that wraps
 * another one, times every op it forwards and adds the time to the op's row
 * (al_bench.h, `autoloco bench inner --ops`).
 *
 * The model, the trainer and the kernels are the ones a real step runs; only
 * the vtable between them is this one. Each op is timed around the call, in
 * wall time and in this process's CPU time (every thread: on a machine that
 * other work shares, the CPU time is what the op cost, the wall time also
 * what it waited). CPU ops are synchronous, so both are the op's own. The matmul and
 * attention ops also add to a row per shape, which gives their FLOP rates:
 *   matmul forward   2 N IC OC  (out = inp w^T; the bias pass is in its time)
 *   matmul backward  4 N IC OC  (dinp = dout w and dw += dout^T inp; 2 N IC OC
 *                                when dinp is NULL), plus the bias column sums
 *   attention fwd    4 B T^2 C  (S = q k^T and P v over every head)
 *   attention bwd   10 B T^2 C  (S again, dP = dO v^T, dq, dk, dv)
 * counted on the full T x T square although half of it is masked.
 */
#include "al_bench.h"

#include <string.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* op index: one per AL_BACKEND_OPS row */
enum {
#define AL_OPS_ENUM(kind, ret, name, params, args) OP_##name,
    AL_BACKEND_OPS(AL_OPS_ENUM)
#undef AL_OPS_ENUM
        OP_COUNT
};

static const char *const op_names[] = {
#define AL_OPS_NAME(kind, ret, name, params, args) #name,
    AL_BACKEND_OPS(AL_OPS_NAME)
#undef AL_OPS_NAME
};

_Static_assert((int)OP_COUNT <= (int)AL_BENCH_MAX_OPS, "al_bench_ops has a row per backend op");

static const char *phase_of(int op) {
    const char *n = op_names[op];
    size_t len = strlen(n);
    if (len > 8 && !strcmp(n + len - 8, "_forward")) return "forward";
    if (len > 9 && !strcmp(n + len - 9, "_backward")) return "backward";
    if (op == OP_adamw_update || op == OP_sumsq || op == OP_scale) return "update";
    return "memory";
}

static void add_op(al_bench_ops *p, int op, double t0, double c0) {
    p->op[op].seconds += al_now() - t0;
    p->op[op].cpu_seconds += cpu_now() - c0;
    p->op[op].calls++;
}

static void add_shape(al_bench_ops *p, const char *op, int a, int b, int c, double flops, double t0,
                      double c0) {
    double dt = al_now() - t0, dc = cpu_now() - c0;
    for (int i = 0; i < p->nshapes; i++) {
        al_bench_shape *s = &p->shape[i];
        if (s->op == op && s->dims[0] == a && s->dims[1] == b && s->dims[2] == c) {
            s->seconds += dt;
            s->cpu_seconds += dc;
            s->flops += flops;
            s->calls++;
            return;
        }
    }
    if (p->nshapes == AL_BENCH_MAX_SHAPES) return; /* full: the op rows still count it */
    p->shape[p->nshapes++] = (al_bench_shape){op, {a, b, c}, 1, dt, dc, flops};
}

#define PROF(ctx)  ((al_bench_ops *)(ctx))
#define INNER(ctx) (PROF(ctx)->inner)

/* Generic wrappers: time the call, add it to the op's row. */
#define AL_PROF_BODY_void(op, call)                                                                \
    double t0 = al_now(), c0 = cpu_now();                                                          \
    call;                                                                                          \
    add_op(PROF(ctx), op, t0, c0);
#define AL_PROF_BODY_int(op, call)                                                                 \
    double t0 = al_now(), c0 = cpu_now();                                                          \
    int r = call;                                                                                  \
    add_op(PROF(ctx), op, t0, c0);                                                                 \
    return r;
#define AL_PROF_BODY_double(op, call)                                                              \
    double t0 = al_now(), c0 = cpu_now();                                                          \
    double r = call;                                                                               \
    add_op(PROF(ctx), op, t0, c0);                                                                 \
    return r;
#define AL_PROF_WRAP(kind, ret, name, params, args)                                                \
    static ret prof_##name(void *ctx, AL_UNPAREN params) {                                         \
        AL_PROF_BODY_##ret(OP_##name, INNER(ctx)->name(INNER(ctx)->ctx, AL_UNPAREN args))          \
    }
AL_BACKEND_OPS(AL_PROF_WRAP)
#undef AL_PROF_WRAP

/* The shaped ops: the same, plus their row per shape. */
static void shaped_matmul_forward(void *ctx, float *out, const float *inp, const float *w,
                                  const float *bias, int N, int IC, int OC, int accumulate) {
    double t0 = al_now(), c0 = cpu_now();
    prof_matmul_forward(ctx, out, inp, w, bias, N, IC, OC, accumulate);
    add_shape(PROF(ctx), "matmul_forward", N, IC, OC, 2.0 * N * IC * OC, t0, c0);
}

static void shaped_matmul_backward(void *ctx, float *dinp, float *dw, float *dbias,
                                   const float *dout, const float *inp, const float *w, int N,
                                   int IC, int OC, int accumulate) {
    double t0 = al_now(), c0 = cpu_now();
    prof_matmul_backward(ctx, dinp, dw, dbias, dout, inp, w, N, IC, OC, accumulate);
    add_shape(PROF(ctx), "matmul_backward", N, IC, OC, (dinp ? 4.0 : 2.0) * N * IC * OC, t0, c0);
}

static void shaped_attention_forward(void *ctx, float *out, float *lse, const float *qkv,
                                     const int *docstart, int B, int T, int C, int NH) {
    double t0 = al_now(), c0 = cpu_now();
    prof_attention_forward(ctx, out, lse, qkv, docstart, B, T, C, NH);
    add_shape(PROF(ctx), "attention_forward", B, T, C, 4.0 * B * T * (double)T * C, t0, c0);
}

static void shaped_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                      const float *lse, const int *docstart, int B, int T, int C,
                                      int NH) {
    double t0 = al_now(), c0 = cpu_now();
    prof_attention_backward(ctx, dqkv, dout, qkv, lse, docstart, B, T, C, NH);
    add_shape(PROF(ctx), "attention_backward", B, T, C, 10.0 * B * T * (double)T * C, t0, c0);
}

void al_bench_ops_init(al_bench_ops *p, const al_backend *inner) {
    memset(p, 0, sizeof *p);
    p->inner = inner;
    p->be.name = "profiled";
    snprintf(p->be.device, sizeof p->be.device, "%s", inner->device);
    p->be.on_host = inner->on_host;
    p->be.ctx = p;
#define AL_PROF_FIELD(kind, ret, name, params, args) p->be.name = prof_##name;
    AL_BACKEND_OPS(AL_PROF_FIELD)
#undef AL_PROF_FIELD
    p->be.matmul_forward = shaped_matmul_forward;
    p->be.matmul_backward = shaped_matmul_backward;
    p->be.attention_forward = shaped_attention_forward;
    p->be.attention_backward = shaped_attention_backward;
    for (int i = 0; i < OP_COUNT; i++) {
        p->op[i].name = op_names[i];
        p->op[i].phase = phase_of(i);
    }
    p->nops = OP_COUNT;
}

void al_bench_ops_reset(void *arg) {
    al_bench_ops *p = arg;
    for (int i = 0; i < p->nops; i++)
        p->op[i].seconds = p->op[i].cpu_seconds = 0, p->op[i].calls = 0;
    p->nshapes = 0;
}
