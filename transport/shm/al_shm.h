/*
 * al_shm.h -- the intra-site CPU transport: W worker processes around one POSIX
 * shared-memory segment.
 *
 * What it gives an engine (ODC or the FSDP baseline):
 *  - a segment: a control block plus a data region the engine lays out itself
 *    (parameters, optimizer state, gradient slots). Created by the parent,
 *    inherited by W forked workers.
 *  - one-sided get / push on sharded float arrays: a range [lo, hi) of an
 *    array is cut into W equal slices and worker w owns slice w. A get copies
 *    the W slices out of their owners' memory; a push adds a gradient range
 *    into the owners' accumulators. Neither needs the owner to do anything.
 *  - a process-shared barrier that cannot hang: every wait is a timed wait
 *    that wakes up to check an abort flag, and the whole wait is bounded.
 *  - process management with liveness: al_shm_run forks the workers (or
 *    wakes the pool forked once by al_shm_pool_start) and watches them. When one dies (signal,
 * crash, error) the parent raises the abort flag with a message naming it, the others leave their
 * barriers with AL_EPEER within milliseconds, and al_shm_run returns that message.
 *
 * No segment is ever left in /dev/shm: the name is unlinked right after the
 * parent maps it, before any worker exists (forked children inherit the
 * mapping, so nobody needs the name again). The mapping lives until the last
 * process holding it exits, however it exits. The name (site, creator pid, run
 * id) only exists for a few microseconds; al_shm_clean_stale removes the names
 * that a process killed inside that window left behind (their creator pid is
 * dead), and al_shm_create calls it first.
 *
 * Workers are children: if the parent dies they are killed too
 * (PR_SET_PDEATHSIG), and they also notice a changed parent pid while waiting.
 */
#ifndef AL_SHM_H
#define AL_SHM_H

#include "al_base.h"

#include <signal.h>
#include <sys/types.h>

#define AL_SHM_MAX_WORKERS 64
#define AL_SHM_PREFIX      "autoloco."
/* Per-worker scalars an engine may exchange through the control block (e.g.
 * partial gradient norms and losses); read them only after a barrier. */
#define AL_SHM_NSCALARS 8
/* Words the parent passes to a run's workers (al_shm_job). The last one,
 * AL_SHM_JOB_STOP, is the watcher's: it becomes 1 during a run once
 * *al_shm.stop is nonzero (a signal reached the parent); an engine may read it
 * to end the run early at a step all workers agree on. */
#define AL_SHM_NJOB     4
#define AL_SHM_JOB_STOP (AL_SHM_NJOB - 1)

typedef struct al_shm_ctl al_shm_ctl; /* in the segment; layout private to shm.c */

typedef struct al_shm_opts {
    const char *site;         /* name part for the segment ("local" if NULL) */
    int workers;              /* W, 1..AL_SHM_MAX_WORKERS */
    size_t data_bytes;        /* size of the engine's data region */
    double barrier_timeout_s; /* longest a barrier may wait for a live peer (<= 0: 600 s) */
    double grace_s;           /* after an abort, how long survivors get to exit before SIGKILL */
} al_shm_opts;

typedef struct al_shm {
    char name[128]; /* "/autoloco.SITE.PID.RUN" (already unlinked) */
    int W;
    int me; /* worker id inside a worker, -1 in the parent */
    void *base;
    size_t size;
    al_shm_ctl *ctl;
    void *data; /* the engine's region, 64-byte aligned, zero-filled at creation */
    size_t data_bytes;
    double barrier_timeout_s, grace_s;
    pid_t parent;
    /* (parent, may be NULL) a flag a signal handler sets: al_shm_run passes
     * it on to the workers as job word AL_SHM_JOB_STOP */
    volatile sig_atomic_t *stop;
    /* this process's transport counters (bytes moved by get and push, and
     * seconds spent waiting in barriers) */
    double bytes_got, bytes_pushed, wait_s;
    /* the parent's view of the pool (al_shm_pool_start) */
    int pool;
    pid_t pool_pid[AL_SHM_MAX_WORKERS];
    int pool_alive[AL_SHM_MAX_WORKERS];
    int pool_threads; /* threads of the parent when it forked the pool (0: unknown) */
    void *pool_ctx;
    int (*pool_fn)(struct al_shm *s, int w, void *ctx, al_err *err);
} al_shm;

/* Create, map and unlink a segment (after removing stale ones of this site). */
int al_shm_create(al_shm *s, const al_shm_opts *o, al_err *err);
/* Stop the pool if one runs, then unmap (the parent). */
void al_shm_destroy(al_shm *s);
/* Remove /dev/shm entries named AL_SHM_PREFIX SITE.PID.* whose PID no longer
 * runs (site NULL: every site). *removed (may be NULL) counts them. */
int al_shm_clean_stale(const char *site, int *removed, al_err *err);

/* ---- workers -------------------------------------------------------------- */

/* A worker's body. Runs in a forked child with s->me = w. Returns 0 or an
 * AL_E* code with err filled; the wrapper reports it and calls _exit. */
typedef int (*al_shm_worker_fn)(al_shm *s, int w, void *ctx, al_err *err);

/* Fork W workers running fn, wait for all of them. Returns 0 when every
 * worker returned 0; otherwise the first failure's code and a message naming
 * the worker (e.g. "worker 1 (pid 4242) was killed by signal 9 (Killed)").
 * No worker outlives the call. */
int al_shm_run(al_shm *s, al_shm_worker_fn fn, void *ctx, al_err *err);
/* The pool: fork the W workers once, now, and let every later al_shm_run (with
 * the same fn and ctx) run fn in them instead of forking. Start it before the
 * process has threads (gRPC, HTTP, OpenMP): a child of a threaded process
 * inherits locks that other threads held at the fork. The workers keep their
 * own memory between runs (their copy of ctx as of the fork, plus what the
 * runs changed); what the parent changes later reaches them only through the
 * segment and al_shm_job. While idle they ignore SIGINT and SIGTERM (the
 * parent decides when they stop) and exit when the parent does. A failed run
 * ends the pool: al_shm_run reaps every worker and later runs fork again. */
int al_shm_pool_start(al_shm *s, al_shm_worker_fn fn, void *ctx, al_err *err);
/* Tell the pool's workers to exit and reap them (SIGKILL after grace_s). */
void al_shm_pool_stop(al_shm *s);
/* AL_SHM_NJOB words in the control block: the parent writes them before
 * al_shm_run, workers read them during the run. */
int64_t *al_shm_job(al_shm *s);

/* The barrier: returns 0 once all W workers entered it; AL_EPEER if the run
 * is aborting (err names the worker at fault); AL_ETIMEOUT after
 * barrier_timeout_s (err names the workers that never came, and the run is
 * aborted). */
int al_shm_barrier(al_shm *s, al_err *err);
/* Raise the abort flag with an AL_E* code and a reason naming `worker` (-1:
 * none); the first reason wins. Wakes every waiter. */
void al_shm_abort(al_shm *s, int code, int worker, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int al_shm_aborted(const al_shm *s);

/* Worker w's process id during a run (0 before it started). */
pid_t al_shm_worker_pid(const al_shm *s, int w);

/* The per-worker scalar block: [W][AL_SHM_NSCALARS] doubles. */
double *al_shm_scalars(al_shm *s, int worker);

/* ---- one-sided access to sharded float arrays ---------------------------------
 * An array of n floats in the data region is owned in W equal slices: slice w
 * is [al_shm_slice_lo(n, W, w), al_shm_slice_lo(n, W, w + 1)). An engine shards
 * each model unit this way, so every worker owns 1/W of every unit. */
static inline size_t al_shm_slice_lo(size_t n, int W, int w) {
    return (size_t)((unsigned long long)n * (unsigned)w / (unsigned)W);
}

/* get: dst[0..n) = the W owners' slices of arr[0..n) (arr is in the segment). */
void al_shm_get(al_shm *s, float *dst, const float *arr, size_t n);
/* push: acc[0..n) += src[0..n), slice by slice into the owners' memory. acc
 * must be a region only this worker adds into (a per-client slot), so no lock
 * is needed and the owner later reduces the slots in a fixed order. */
void al_shm_push(al_shm *s, float *acc, const float *src, size_t n);

#endif
