/* nccl.c -- sharded device arrays between GPU worker processes: CUDA IPC for
 * ODC, NCCL all-gather / reduce-scatter for fsdp (see al_nccl.h). Host mode
 * (a backend without a stream, in every build) keeps the owners' arrays in a
 * shared host region instead: the same code path, testable on any machine. */
#include "al_nccl.h"

#include <stdlib.h>
#include <string.h>

#ifdef AL_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

_Static_assert(sizeof(ncclUniqueId) <= AL_NCCL_ID_BYTES, "NCCL id does not fit");
_Static_assert(sizeof(cudaIpcMemHandle_t) <= AL_NCCL_HANDLE_BYTES, "IPC handle does not fit");

static void nccl_fail(al_nccl *x, ncclResult_t r, const char *what) {
    if (r == ncclSuccess || x->rc) return;
    x->rc = al_errf(&x->err, AL_EIO, "%s: %s", what, ncclGetErrorString(r));
}
#endif

int al_nccl_available(void) {
#ifdef AL_HAVE_NCCL
    return 1;
#else
    return 0;
#endif
}

size_t al_nccl_own_floats(const size_t *unit_len, int nunits, int W) {
    size_t n = 0;
    for (int u = 0; u < nunits; u++) n += al_nccl_chunk(unit_len[u], W);
    return n;
}

/* unit u's chunk of owner o in array `which` */
static float *at(const al_nccl *x, int o, int which, int u) {
    return x->peer[o] + (size_t)which * x->own_floats + x->own_off[u];
}

float *al_nccl_own(const al_nccl *x, int which, int u) {
    return at(x, x->w, which, u);
}

/* CUDA mode: export my allocation, open everyone else's, and (fsdp) join the
 * NCCL communicator. */
static int open_cuda(al_nccl *x, void *shared, al_err *err) {
#ifdef AL_HAVE_NCCL
    char *handles = (char *)shared + AL_NCCL_ID_BYTES;
    cudaIpcMemHandle_t h;
    cudaError_t e = cudaIpcGetMemHandle(&h, x->peer[x->w]);
    if (e != cudaSuccess)
        return al_errf(err, AL_EIO, "cudaIpcGetMemHandle: %s", cudaGetErrorString(e));
    memcpy(handles + (size_t)x->w * AL_NCCL_HANDLE_BYTES, &h, sizeof h);
    if (x->collective && x->w == 0) {
        ncclUniqueId id;
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess)
            return al_errf(err, AL_EIO, "ncclGetUniqueId: %s", ncclGetErrorString(r));
        memcpy(shared, &id, sizeof id);
    }
    /* every handle (and the id) is published */
    int rc = al_shm_barrier(x->s, err);
    if (rc) return rc;
    for (int o = 0; o < x->W; o++) {
        if (o == x->w) continue;
        memcpy(&h, handles + (size_t)o * AL_NCCL_HANDLE_BYTES, sizeof h);
        void *p = NULL;
        e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess)
            return al_errf(err, AL_EIO, "cudaIpcOpenMemHandle of worker %d: %s", o,
                           cudaGetErrorString(e));
        x->peer[o] = p;
    }
    if (x->collective) {
        ncclUniqueId id;
        memcpy(&id, shared, sizeof id);
        ncclComm_t comm;
        ncclResult_t r = ncclCommInitRank(&comm, x->W, id, x->w);
        if (r != ncclSuccess)
            return al_errf(err, AL_EIO, "ncclCommInitRank: %s", ncclGetErrorString(r));
        x->comm = comm;
    }
    return 0;
#else
    (void)x, (void)shared;
    return al_errf(err, AL_EUNSUPPORTED, "GPU transport: this build has no CUDA and NCCL");
#endif
}

int al_nccl_open(al_nccl *x, const al_backend *be, al_shm *s, void *shared, float *host_region,
                 const size_t *unit_len, int nunits, int collective, al_err *err) {
    memset(x, 0, sizeof *x);
    x->be = be;
    x->s = s;
    x->w = s->me;
    x->W = s->W;
    x->nunits = nunits;
    x->collective = collective;
    int host = be->stream == NULL;
    if (host && (!host_region || collective))
        return al_errf(err, AL_EINVAL,
                       "GPU transport on backend '%s': host mode needs a shared region and "
                       "is odc only",
                       be->name);
#ifdef AL_HAVE_NCCL
    int ndev = 0;
    if (collective && (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < x->W))
        return al_errf(err, AL_EUNSUPPORTED,
                       "fsdp over NCCL needs one GPU per worker: %d workers, %d GPU(s) (NCCL "
                       "refuses two ranks on one device)",
                       x->W, ndev);
#endif
    x->unit_len = calloc((size_t)nunits, sizeof(size_t));
    x->own_off = calloc((size_t)nunits, sizeof(size_t));
    if (!x->unit_len || !x->own_off) {
        al_nccl_close(x);
        return al_errf(err, AL_ENOMEM, "GPU transport: out of memory");
    }
    size_t maxS = 0;
    for (int u = 0; u < nunits; u++) {
        size_t S = al_nccl_chunk(unit_len[u], x->W);
        x->unit_len[u] = unit_len[u];
        x->own_off[u] = x->own_floats;
        x->own_floats += S;
        maxS = S > maxS ? S : maxS;
    }
    size_t per = (size_t)(AL_NCCL_SLOT + x->W) * x->own_floats, bytes = per * sizeof(float);
    int rc = 0;
    if (host) { /* every owner's arrays, side by side in the shared region (zeroed) */
        for (int o = 0; o < x->W; o++) x->peer[o] = host_region + (size_t)o * per;
        x->host = 1;
        return al_shm_barrier(s, err); /* as the CUDA mode's exchange */
    }
    rc = AL_BE(be, alloc, (void **)&x->peer[x->w], bytes, err);
    if (rc == 0 && collective)
        rc = AL_BE(be, alloc, (void **)&x->scratch, maxS * sizeof(float), err);
    if (rc == 0) rc = AL_BE(be, sync, err);
    if (rc) {
        al_nccl_close(x);
        return al_err_prefix(err, "sharded state (%zu bytes)", bytes);
    }
    if ((rc = open_cuda(x, shared, err))) al_nccl_close(x);
    return rc;
}

void al_nccl_close(al_nccl *x) {
#ifdef AL_HAVE_NCCL
    if (x->comm) ncclCommDestroy((ncclComm_t)x->comm);
    for (int o = 0; o < x->W && !x->host; o++)
        if (o != x->w && x->peer[o]) cudaIpcCloseMemHandle(x->peer[o]);
#endif
    if (x->be && !x->host) {
        AL_BE(x->be, release, x->peer[x->w]);
        AL_BE(x->be, release, x->scratch);
    }
    free(x->unit_len);
    free(x->own_off);
    memset(x, 0, sizeof *x);
}

void al_nccl_get(al_nccl *x, float *dst, int u) {
    size_t n = x->unit_len[u];
    if (x->collective) {
#ifdef AL_HAVE_NCCL
        size_t S = al_nccl_chunk(n, x->W);
        nccl_fail(x,
                  ncclAllGather(al_nccl_own(x, AL_NCCL_PARAMS, u), dst, S, ncclFloat,
                                (ncclComm_t)x->comm, (cudaStream_t)x->be->stream),
                  "ncclAllGather");
#endif
    } else {
        for (int o = 0; o < x->W; o++) {
            size_t lo = al_nccl_slice_lo(n, x->W, o), hi = al_nccl_slice_lo(n, x->W, o + 1);
            if (hi > lo)
                AL_BE(x->be, copy, dst + lo, at(x, o, AL_NCCL_PARAMS, u),
                      (hi - lo) * sizeof(float));
        }
    }
    x->s->bytes_got += (double)n * sizeof(float);
}

void al_nccl_push(al_nccl *x, const float *src, int u) {
    size_t n = x->unit_len[u];
    if (x->collective) {
#ifdef AL_HAVE_NCCL
        size_t S = al_nccl_chunk(n, x->W);
        nccl_fail(x,
                  ncclReduceScatter(src, x->scratch, S, ncclFloat, ncclSum, (ncclComm_t)x->comm,
                                    (cudaStream_t)x->be->stream),
                  "ncclReduceScatter");
        AL_BE(x->be, add, al_nccl_own(x, AL_NCCL_SLOT + x->w, u), x->scratch, S);
#endif
    } else {
        for (int o = 0; o < x->W; o++) {
            size_t lo = al_nccl_slice_lo(n, x->W, o), hi = al_nccl_slice_lo(n, x->W, o + 1);
            if (hi > lo) AL_BE(x->be, add, at(x, o, AL_NCCL_SLOT + x->w, u), src + lo, hi - lo);
        }
    }
    x->s->bytes_pushed += (double)n * sizeof(float);
}

int al_nccl_fence(al_nccl *x, al_err *err) {
    int rc = AL_BE(x->be, sync, err);
    if (x->rc) {
        rc = x->rc;
        if (err) *err = x->err;
    }
    return rc;
}
