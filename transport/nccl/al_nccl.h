/*
 * al_nccl.h -- the intra-site GPU transport: W worker processes, each with a
 * CUDA backend, sharing sharded device arrays (the GPU side of transport/shm).
 *
 * The engine (inner/odc.c) still forks its workers and keeps its barriers,
 * scalars and records in the shm segment; this module moves the model state
 * between their GPUs:
 *
 *  - sharding: a unit of n floats is cut into W chunks of S = ceil(n / W);
 *    owner w holds [w S, min((w+1) S, n)). Every owner lays its chunks out the
 *    same way (unit after unit, S_u floats each), in one device allocation:
 *    params | grad | m | v | W gradient slots (client c pushes into slot c).
 *  - ODC: one-sided. Each worker exports its allocation with
 *    cudaIpcGetMemHandle (through the shared area of the shm segment) and
 *    opens everyone else's; a get copies the W owners' chunks into a local
 *    gather buffer, a push adds a gradient into its own slot at each owner
 *    (a kernel writing the owner's memory). No owner takes part; the owner
 *    reduces the W slots in client order at minibatch end, as with shm.
 *  - fsdp: every get is an ncclAllGather of the unit, every push an
 *    ncclReduceScatter (into a scratch chunk, then added to the client's own
 *    slot). The NCCL unique id is created by worker 0 after the fork and
 *    published in the shared area (the parent must not touch CUDA before it
 *    forks: a CUDA context does not survive fork()).
 *
 * Gather buffers are W * S_u floats (a few floats of padding past n); the
 * padding of a gradient buffer must be zero before a push.
 *
 * Ordering: ops run on the backend's stream; al_nccl_fence waits for them,
 * and the engine calls it before each shm barrier, so what one worker wrote
 * is complete before another reads it. W processes may share one GPU for ODC
 * (CUDA IPC between processes on one device works); NCCL refuses two ranks
 * on one GPU, so fsdp needs W devices (al_nccl_open says so).
 *
 * Built in every configuration: without CUDA and NCCL only host mode works.
 */
#ifndef AL_NCCL_H
#define AL_NCCL_H

#include "al_backend.h"
#include "al_shm.h"

/* The shared area an engine reserves in its segment for the exchange. */
#define AL_NCCL_ID_BYTES     128
#define AL_NCCL_HANDLE_BYTES 64
#define AL_NCCL_SHARED_BYTES (AL_NCCL_ID_BYTES + AL_SHM_MAX_WORKERS * AL_NCCL_HANDLE_BYTES)

/* The arrays of an owner's allocation: slot c is AL_NCCL_SLOT + c. */
enum { AL_NCCL_PARAMS, AL_NCCL_GRAD, AL_NCCL_M, AL_NCCL_V, AL_NCCL_SLOT };

/* Chunk length S of a unit of n floats over W owners, and where chunk w starts. */
static inline size_t al_nccl_chunk(size_t n, int W) {
    return (n + (size_t)W - 1) / (size_t)W;
}
static inline size_t al_nccl_slice_lo(size_t n, int W, int w) {
    size_t lo = al_nccl_chunk(n, W) * (size_t)w;
    return lo < n ? lo : n;
}

typedef struct al_nccl {
    const al_backend *be; /* this worker's CUDA backend */
    al_shm *s;
    int w, W, nunits, collective;    /* collective: fsdp over NCCL */
    size_t *unit_len, *own_off;      /* [nunits]: n_u, offset of unit u's chunk */
    size_t own_floats;               /* sum of the chunks: one array of one owner */
    float *peer[AL_SHM_MAX_WORKERS]; /* every owner's allocation (peer[w]: mine) */
    float *scratch;                  /* fsdp: the reduce-scatter output, max S_u */
    void *comm;                      /* ncclComm_t (fsdp) */
    int rc;                          /* sticky: the first failed NCCL call */
    al_err err;
    int host; /* host mode: the arrays live in a shared host region */
} al_nccl;

/* Whether this build has the GPU transport (CUDA and NCCL found). */
int al_nccl_available(void);
/* Floats of one owner's array (its chunks of every unit); an owner holds
 * AL_NCCL_SLOT + W of them. */
size_t al_nccl_own_floats(const size_t *unit_len, int nunits, int W);

/* In worker w (of s->W), after its backend is open: allocate this owner's
 * arrays (zeroed), publish their IPC handle in `shared` (AL_NCCL_SHARED_BYTES
 * of the segment, the same in every worker), wait for everyone (a shm
 * barrier), open the peers' handles; collective: create the NCCL communicator
 * (worker 0 makes the id). unit_len: the nunits unit sizes.
 *
 * Host mode, for a backend without a stream (the staged CPU backend of the
 * tests): odc only, no CUDA; the W owners' arrays are `host_region`
 * (W * (AL_NCCL_SLOT + W) * al_nccl_own_floats floats of shared memory,
 * zeroed), and everything else -- chunking, layout, get, push, fence -- is
 * the same code as on GPUs. host_region is NULL in CUDA mode. */
int al_nccl_open(al_nccl *x, const al_backend *be, al_shm *s, void *shared, float *host_region,
                 const size_t *unit_len, int nunits, int collective, al_err *err);
void al_nccl_close(al_nccl *x);

/* My chunk of unit u in array `which` (device memory). */
float *al_nccl_own(const al_nccl *x, int which, int u);
/* dst[0 .. W S_u) = unit u's parameters from all owners. */
void al_nccl_get(al_nccl *x, float *dst, int u);
/* Add src[0 .. n_u) (a gradient of unit u, zero padding up to W S_u) into my
 * slot at every owner. */
void al_nccl_push(al_nccl *x, const float *src, int u);
/* Wait until every op issued so far is complete (before a shm barrier);
 * reports the backend's or NCCL's failure. */
int al_nccl_fence(al_nccl *x, al_err *err);

#endif
