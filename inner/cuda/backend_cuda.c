/* backend_cuda.c -- the CUDA backend: al_cuda.h on device memory (al_backend.h).
 *
 * State: the CUDA context (stream, cuBLAS handle), the attention scratch
 * (grown by reserve), host and device buffers for the reductions that return
 * a host value, and the sticky error of the void ops, reported by sync. */
#include "al_backend.h"
#include "al_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cuda_backend {
    al_backend vt;
    al_cuda g;
    float *scratch; /* attention: 2 * NH * T * T floats */
    size_t scratch_n;
    double *partials; /* [AL_CUDA_SUMSQ_BLOCKS] on the device */
    float *host;      /* downloaded losses */
    size_t host_n;
    int rc; /* sticky: the first failure of a void op */
    al_err err;
} cuda_backend;

#define CB(ctx) ((cuda_backend *)(ctx))

/* Keep the first failure; later ops are skipped until sync reports it. */
static void sticky(cuda_backend *b, int rc, const al_err *e) {
    if (rc && !b->rc) {
        b->rc = rc;
        b->err = *e;
    }
}

static int cu_alloc(void *ctx, void **p, size_t bytes, al_err *err) {
    *p = NULL;
    int rc = al_cuda_alloc(&CB(ctx)->g, p, bytes ? bytes : 1, err);
    if (rc == 0) rc = al_cuda_zero(&CB(ctx)->g, *p, bytes, err);
    return rc;
}
static void cu_release(void *ctx, void *p) {
    al_cuda_release(&CB(ctx)->g, p);
}
static void cu_zero(void *ctx, void *p, size_t bytes) {
    al_err e = {0};
    if (!CB(ctx)->rc) sticky(CB(ctx), al_cuda_zero(&CB(ctx)->g, p, bytes, &e), &e);
}
static void cu_upload(void *ctx, void *dst, const void *src, size_t bytes) {
    al_err e = {0};
    if (!CB(ctx)->rc) sticky(CB(ctx), al_cuda_upload(&CB(ctx)->g, dst, src, bytes, &e), &e);
}
static void cu_download(void *ctx, void *dst, const void *src, size_t bytes) {
    al_err e = {0};
    if (!CB(ctx)->rc) sticky(CB(ctx), al_cuda_download(&CB(ctx)->g, dst, src, bytes, &e), &e);
}
static void cu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    al_err e = {0};
    if (!CB(ctx)->rc && dst != src)
        sticky(CB(ctx), al_cuda_copy(&CB(ctx)->g, dst, src, bytes, &e), &e);
}
static int cu_reserve(void *ctx, int T, int NH, al_err *err) {
    cuda_backend *b = CB(ctx);
    size_t need = 2 * (size_t)NH * (size_t)T * (size_t)T;
    if (need <= b->scratch_n) return 0;
    float *s = NULL;
    int rc = al_cuda_alloc(&b->g, (void **)&s, need * sizeof(float), err);
    if (rc) return al_err_prefix(err, "attention scratch (T %d, %d heads)", T, NH);
    al_cuda_release(&b->g, b->scratch);
    b->scratch = s;
    b->scratch_n = need;
    return 0;
}
static int cu_sync(void *ctx, al_err *err) {
    cuda_backend *b = CB(ctx);
    int rc = al_cuda_sync(&b->g, err);
    if (b->rc) { /* the first failure is the one to report */
        rc = b->rc;
        if (err) *err = b->err;
        b->rc = 0;
    }
    return rc;
}

/* every plain kernel op: the al_cuda.h function <name>_cuda */
#define AL_CUDA_WRAP(kind, ret, name, params, args)                                                \
    AL_GEN_CUDA_##kind(static ret cu_##name(void *ctx, AL_UNPAREN params) {                        \
        al_##name##_cuda(&CB(ctx)->g, AL_UNPAREN args);                                            \
    })
AL_BACKEND_OPS(AL_CUDA_WRAP)
#undef AL_CUDA_WRAP

static int scratch_ok(cuda_backend *b, int T, int NH) {
    if (2 * (size_t)NH * (size_t)T * (size_t)T <= b->scratch_n) return 1;
    al_err e;
    sticky(b, al_errf(&e, AL_EINVAL, "attention T %d, %d heads: no reserve() for it", T, NH), &e);
    return 0;
}
static void cu_attention_forward(void *ctx, float *out, float *lse, const float *qkv,
                                 const int *docstart, int B, int T, int C, int NH) {
    if (scratch_ok(CB(ctx), T, NH))
        al_attention_forward_cuda(&CB(ctx)->g, out, lse, qkv, docstart, B, T, C, NH,
                                  CB(ctx)->scratch);
}
static void cu_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                  const float *lse, const int *docstart, int B, int T, int C,
                                  int NH) {
    if (scratch_ok(CB(ctx), T, NH))
        al_attention_backward_cuda(&CB(ctx)->g, dqkv, dout, qkv, lse, docstart, B, T, C, NH,
                                   CB(ctx)->scratch);
}

/* Download n elements of elem bytes into the host buffer (grown as needed);
 * NULL on failure. */
static const void *to_host(cuda_backend *b, const void *src, size_t n, size_t elem) {
    if (b->rc) return NULL;
    if (n * elem > b->host_n) {
        float *h = realloc(b->host, n * elem);
        if (!h) {
            al_err e;
            sticky(b, al_errf(&e, AL_ENOMEM, "host buffer of %zu bytes", n * elem), &e);
            return NULL;
        }
        b->host = h;
        b->host_n = n * elem;
    }
    cu_download(b, b->host, src, n * elem);
    return b->rc ? NULL : b->host;
}

static double cu_crossentropy_forward(void *ctx, float *losses, const float *logits,
                                      const int *target, int N, int V, int Vp) {
    cuda_backend *b = CB(ctx);
    al_crossentropy_forward_cuda(&b->g, losses, logits, target, N, V, Vp);
    const float *h = to_host(b, losses, (size_t)N, sizeof(float));
    if (!h) return NAN;
    double total = 0.0; /* in position order, as the CPU kernel sums */
    for (int i = 0; i < N; i++) total += h[i];
    return total;
}

static double cu_sumsq(void *ctx, const float *x, size_t n) {
    cuda_backend *b = CB(ctx);
    if (b->rc) return NAN;
    al_sumsq_cuda(&b->g, b->partials, x, n);
    const double *h = to_host(b, b->partials, AL_CUDA_SUMSQ_BLOCKS, sizeof(double));
    if (!h) return NAN;
    double s = 0.0;
    for (int i = 0; i < AL_CUDA_SUMSQ_BLOCKS; i++) s += h[i];
    return s;
}

static void cu_close(al_backend *be) {
    cuda_backend *b = CB(be->ctx);
    al_cuda_release(&b->g, b->scratch);
    al_cuda_release(&b->g, b->partials);
    al_cuda_free(&b->g);
    free(b->host);
    free(b);
}

int al_backend_cuda_count(void);
int al_backend_cuda_count(void) {
    return al_cuda_device_count();
}

int al_backend_cuda_open(const al_backend **out, int device, al_err *err);
int al_backend_cuda_open(const al_backend **out, int device, al_err *err) {
    *out = NULL;
    cuda_backend *b = calloc(1, sizeof *b);
    if (!b) return al_errf(err, AL_ENOMEM, "CUDA backend: out of memory");
    int rc = al_cuda_init(&b->g, device, err);
    if (rc) {
        free(b);
        return rc;
    }
    if ((rc = al_cuda_alloc(&b->g, (void **)&b->partials, AL_CUDA_SUMSQ_BLOCKS * sizeof(double),
                            err))) {
        al_cuda_free(&b->g);
        free(b);
        return rc;
    }
#define AL_CUDA_FIELD(kind, ret, name, params, args) b->vt.name = cu_##name;
    AL_BACKEND_OPS(AL_CUDA_FIELD)
#undef AL_CUDA_FIELD
    b->vt.name = "cuda";
    snprintf(b->vt.device, sizeof b->vt.device, "%s", b->g.name);
    b->vt.on_host = 0;
    b->vt.ctx = b;
    b->vt.stream = b->g.stream;
    b->vt.close = cu_close;
    *out = &b->vt;
    return 0;
}
