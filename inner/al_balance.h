/*
 * al_balance.h -- minibatch load balancing for sharded data parallelism, and
 * the workloads it is measured on.
 *
 * A minibatch is a list of *pieces*: a piece is a run of `len` consecutive
 * tokens of a token file (a document, or a part of one no longer than the
 * model's context; or a fixed-length pretraining row). Its inputs are
 * tok[start .. start+len), its targets tok[start+1 .. start+len+1), its
 * positions 0..len-1, and it attends only within itself.
 *
 * A *plan* splits a minibatch over W workers and packs each worker's pieces
 * into microbatches; a microbatch is one row of at most `budget` tokens (the
 * pieces laid end to end, each attending within itself). Methods:
 *
 *  - naive:  the sampler's order cut into W runs of equal piece count, then
 *            packed (what a plain distributed sampler does; FSDP baseline).
 *  - micro:  pack the whole minibatch, then deal the microbatches to workers
 *            so each gets the same count (the most any worker has; a worker
 *            may get an empty slot) and their costs even out (LPT under a
 *            count constraint). The best a lockstep (FSDP) engine can do.
 *  - lpt:    partition the pieces over workers by cost, largest first to the
 *            least-loaded worker (Graham's LPT, within 4/3 of optimal), then
 *            pack each worker's share. Workers may run different microbatch
 *            counts: ODC.
 *  - kk:     the same with Karmarkar-Karp's largest differencing method
 *            (multiway), as ODC's reference code does.
 *
 * Cost model of a piece or a microbatch row of n tokens: n + c * n^2 (c = 0:
 * tokens only). Our CPU attention is dense within a row, so the quadratic
 * term belongs to the row length; for GPU kernels with per-document
 * attention it would be per piece.
 *
 * Packing is first-fit decreasing (by length) into rows of `budget` tokens.
 */
#ifndef AL_BALANCE_H
#define AL_BALANCE_H

#include "al_data.h"

typedef struct al_piece {
    uint64_t start; /* first input token in the token file */
    int len;        /* positions (1..budget) */
} al_piece;

typedef enum { AL_BAL_NAIVE, AL_BAL_MICRO, AL_BAL_LPT, AL_BAL_KK } al_balance_method;
int al_balance_parse(const char *s, al_balance_method *out, al_err *err);
const char *al_balance_name(al_balance_method m);

static inline double al_cost(int n, double quad_c) {
    return (double)n + quad_c * (double)n * (double)n;
}

/* Partition n items with costs over W bins; owner[i] in [0, W). Deterministic
 * (ties go to the lower index). */
int al_partition_lpt(const double *cost, int n, int W, int *owner, al_err *err);
int al_partition_kk(const double *cost, int n, int W, int *owner, al_err *err);

/* First-fit decreasing: pack items[0..n) (indices into len[]) into bins of
 * capacity budget; bin[k] for items[k]; returns the bin count (< 0: an item
 * longer than budget, AL_EINVAL). Bins are numbered in creation order. */
int al_pack_ffd(const int *len, const int *items, int n, int budget, int *bin, al_err *err);

typedef struct al_plan {
    int W, npieces, nmb; /* nmb: microbatches in all, over all workers */
    int max_nmb;         /* the most any worker runs (what a lockstep engine runs) */
    int *mb_first;       /* [W + 1]: worker w runs microbatches mb_first[w] .. mb_first[w+1]-1 */
    int *item_first;     /* [nmb + 1]: microbatch k holds items[item_first[k] ..] */
    int *items;          /* [npieces] piece indices, grouped by microbatch */
    int *mb_tokens;      /* [nmb] tokens in each microbatch */
    double *load;        /* [W] predicted cost of each worker's share */
} al_plan;

typedef struct al_balance_opts {
    al_balance_method method;
    int budget;    /* tokens per microbatch row */
    double quad_c; /* cost = n + quad_c n^2 */
} al_balance_opts;

int al_plan_build(al_plan *p, const al_piece *pieces, int n, int W, const al_balance_opts *o,
                  al_err *err);
void al_plan_free(al_plan *p);
/* max / min predicted worker load (infinity if a worker got nothing) */
double al_plan_imbalance(const al_plan *p);

/* Fill b (allocated for at least budget positions) with microbatch k as one
 * row: b->B = 1, b->T = its tokens. */
void al_plan_batch(const al_plan *p, int k, const al_piece *pieces, const al_tokens *data,
                   al_batch *b);

/* ---- workloads ----------------------------------------------------------------- */

typedef enum { AL_WL_FIXED, AL_WL_DOCS, AL_WL_LOGNORMAL } al_workload_kind;
int al_workload_parse(const char *s, al_workload_kind *out, al_err *err);
const char *al_workload_name(al_workload_kind k);

/* A deterministic source of minibatch pieces over a token file:
 *  fixed:     consecutive windows of T tokens (pretraining rows);
 *  docs:      documents in a shuffled order, each cut into pieces of <= T;
 *  lognormal: lengths exp(N(log median, sigma^2)) clipped to [1, T], tokens
 *             from random places of the file. */
typedef struct al_workload {
    al_workload_kind kind;
    const al_tokens *data;
    int T;
    double median, sigma;
    al_loader ld; /* docs: the shuffled document order and cursor */
    uint64_t off; /* fixed: next window */
    al_rng rng;   /* lognormal */
} al_workload;

int al_workload_init(al_workload *wl, al_workload_kind kind, const al_tokens *data, int T,
                     uint64_t seed, double median, double sigma, al_err *err);
void al_workload_free(al_workload *wl);
/* The next n pieces. */
void al_workload_next(al_workload *wl, al_piece *out, int n);
/* Where a workload stands, as a loader position (what checkpoints save):
 * docs: its loader's (epoch, document in the epoch's order, positions of it
 * used), the order being recomputed from (seed, epoch); fixed: the next
 * window's first token in `next`. Seek jumps there; the pieces that follow
 * are the ones that followed the tell. A position outside the data is
 * AL_EMISMATCH. lognormal draws from an RNG, not a position: both are
 * AL_EUNSUPPORTED. */
int al_workload_tell(const al_workload *wl, al_loader_state *st, al_err *err);
int al_workload_seek(al_workload *wl, const al_loader_state *st, al_err *err);

#endif
