/*
 * al_backend.h -- where the model's memory lives and its ops run: one vtable,
 * two devices.
 *
 * The model (model.c), the trainer (train.c) and the engines call every op
 * through an al_backend, so the same code drives the CPU and the GPU. One
 * X-macro table (AL_BACKEND_OPS) lists every op with its return type,
 * parameters and arguments; it generates the vtable fields, and the backends
 * generate their kernel wrappers from it (inner/backend_cpu.c wraps
 * al_kernels.h, inner/cuda/backend_cuda.c wraps cuda/al_cuda.h).
 *
 * Kernel ops have the al_kernels.h signatures with the backend's context as
 * first argument, on the backend's memory (device pointers for CUDA).
 * attention_*: the CUDA backend keeps the scratch it needs, sized by
 * reserve(T, NH); the CPU needs none. crossentropy_forward returns the summed
 * loss on the host (CUDA: per-position losses on the device, downloaded and
 * summed in double in position order, as the CPU kernel sums them).
 *
 * Errors: alloc, reserve and sync return 0 or a negative AL_E* code and fill
 * err. Every other op returns nothing; a failure in it (a CUDA launch or copy
 * error) is sticky, and the next sync reports it -- CUDA's own error model.
 * The CPU backend's ops cannot fail. Ops on one backend run in issue order
 * (one stream); download waits for the work before it.
 */
#ifndef AL_BACKEND_H
#define AL_BACKEND_H

#include <stddef.h>

#include "al_base.h"

/* X(kind, ret, name, params, args): kind says who writes the wrapper (see
 * AL_GEN_* below); params and args omit the leading `void *ctx`. */
#define AL_BACKEND_OPS(X)                                                                          \
    X(MEM, int, alloc, (void **p, size_t bytes, al_err *err), (p, bytes, err))                     \
    X(MEM, void, release, (void *p), (p))                                                          \
    X(MEM, void, zero, (void *p, size_t bytes), (p, bytes))                                        \
    X(MEM, void, upload, (void *dst, const void *src, size_t bytes), (dst, src, bytes))            \
    X(MEM, void, download, (void *dst, const void *src, size_t bytes), (dst, src, bytes))          \
    X(MEM, void, copy, (void *dst, const void *src, size_t bytes), (dst, src, bytes))              \
    X(MEM, int, reserve, (int T, int NH, al_err *err), (T, NH, err))                               \
    X(MEM, int, sync, (al_err * err), (err))                                                       \
    X(KERN, void, encoder_forward,                                                                 \
      (float *out, const int *tok, const int *pos, const float *wte, const float *wpe, int N,      \
       int C),                                                                                     \
      (out, tok, pos, wte, wpe, N, C))                                                             \
    X(KERN, void, encoder_backward,                                                                \
      (float *dwte, float *dwpe, const float *dout, const int *tok, const int *pos, int N, int C), \
      (dwte, dwpe, dout, tok, pos, N, C))                                                          \
    X(KERN, void, layernorm_forward,                                                               \
      (float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,     \
       int N, int C),                                                                              \
      (out, mean, rstd, inp, w, b, N, C))                                                          \
    X(KERN, void, layernorm_backward,                                                              \
      (float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,     \
       const float *mean, const float *rstd, int N, int C),                                        \
      (dinp, dw, db, dout, inp, w, mean, rstd, N, C))                                              \
    X(KERN, void, matmul_forward,                                                                  \
      (float *out, const float *inp, const float *w, const float *bias, int N, int IC, int OC,     \
       int accumulate),                                                                            \
      (out, inp, w, bias, N, IC, OC, accumulate))                                                  \
    X(KERN, void, matmul_backward,                                                                 \
      (float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,  \
       int N, int IC, int OC, int accumulate),                                                     \
      (dinp, dw, dbias, dout, inp, w, N, IC, OC, accumulate))                                      \
    X(ATTN, void, attention_forward,                                                               \
      (float *out, float *lse, const float *qkv, const int *docstart, int B, int T, int C,         \
       int NH),                                                                                    \
      (out, lse, qkv, docstart, B, T, C, NH))                                                      \
    X(ATTN, void, attention_backward,                                                              \
      (float *dqkv, const float *dout, const float *qkv, const float *lse, const int *docstart,    \
       int B, int T, int C, int NH),                                                               \
      (dqkv, dout, qkv, lse, docstart, B, T, C, NH))                                               \
    X(KERN, void, gelu_forward, (float *out, const float *inp, size_t n), (out, inp, n))           \
    X(KERN, void, gelu_backward, (float *dinp, const float *inp, const float *dout, size_t n),     \
      (dinp, inp, dout, n))                                                                        \
    X(RED, double, crossentropy_forward,                                                           \
      (float *losses, const float *logits, const int *target, int N, int V, int Vp),               \
      (losses, logits, target, N, V, Vp))                                                          \
    X(KERN, void, crossentropy_backward,                                                           \
      (float *logits, const int *target, float scale, int N, int V, int Vp),                       \
      (logits, target, scale, N, V, Vp))                                                           \
    X(KERN, void, adamw_update,                                                                    \
      (float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2, \
       float eps, float wd, int t),                                                                \
      (p, g, m, v, n, lr, beta1, beta2, eps, wd, t))                                               \
    X(RED, double, sumsq, (const float *x, size_t n), (x, n))                                      \
    X(KERN, void, scale, (float *x, size_t n, float s), (x, n, s))                                 \
    X(KERN, void, add, (float *acc, const float *x, size_t n), (acc, x, n))

/* AL_GEN_<backend>_<kind>(code): keep `code` for the ops whose wrapper that
 * backend generates. MEM: written by hand in each backend; KERN: generated by
 * both; ATTN (attention, needs the CUDA scratch) and RED (returns a value on
 * the host): generated for the CPU, written by hand for CUDA. */
#define AL_GEN_CPU_MEM(...)
#define AL_GEN_CPU_KERN(...) __VA_ARGS__
#define AL_GEN_CPU_ATTN(...) __VA_ARGS__
#define AL_GEN_CPU_RED(...)  __VA_ARGS__
#define AL_GEN_CUDA_MEM(...)
#define AL_GEN_CUDA_KERN(...) __VA_ARGS__
#define AL_GEN_CUDA_ATTN(...)
#define AL_GEN_CUDA_RED(...)
/* `return` for a non-void op in generated wrappers */
#define AL_RETURN_void
#define AL_RETURN_int    return
#define AL_RETURN_double return
#define AL_UNPAREN(...)  __VA_ARGS__

typedef struct al_backend {
    const char *name; /* "cpu", "cuda" */
    char device[256]; /* "CPU", "NVIDIA H200" */
    int on_host;      /* its memory is host memory (pointers may be dereferenced) */
    void *ctx;        /* the backend's state, first argument of every op */
    void *stream;     /* CUDA: the cudaStream_t every op runs on (NULL on the CPU) */
    void (*close)(struct al_backend *be);
#define AL_BACKEND_FIELD(kind, ret, name, params, args) ret (*name)(void *ctx, AL_UNPAREN params);
    AL_BACKEND_OPS(AL_BACKEND_FIELD)
#undef AL_BACKEND_FIELD
} al_backend;

/* The CPU backend: the fast fp32 kernels of al_kernels.h on host memory.
 * Stateless; never closed. */
const al_backend *al_backend_cpu(void);

/* The CPU kernels behind on_host = 0 ("staged"): every device code path
 * (the model's own copy of the batch, uploads, downloads, the sharded GPU
 * engine in host mode) on host memory, so the tests check it without a GPU.
 * Stateless; never closed. */
const al_backend *al_backend_staged(void);

/* Open a backend by name: "cpu" (the shared CPU backend) or "cuda" (CUDA
 * device `device`). AL_EUNSUPPORTED with the reason when this build has no
 * CUDA backend or no device is usable. Close with al_backend_close. */
int al_backend_open(const al_backend **be, const char *name, int device, al_err *err);
void al_backend_close(const al_backend *be);
/* Whether this build has the CUDA backend. */
int al_backend_has_cuda(void);
/* Devices the named backend can open (cpu: 1; cuda: the GPUs CUDA sees, 0
 * without a build, a driver or a device). Initialises CUDA in this process:
 * not in a parent that forks CUDA workers afterwards. */
int al_backend_device_count(const char *name);

/* Call op `op` of backend `be`: AL_BE(be, matmul_forward, out, ...). */
#define AL_BE(be, op, ...) ((be)->op((be)->ctx, __VA_ARGS__))

#endif
