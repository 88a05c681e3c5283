/* sim_impl.h -- the simulator's state and the helpers its loops share
 * (sim.c: blocking and delayed rounds, DDP; sim_stream.c: overlap streaming).
 * Private to runtime/. */
#ifndef AL_SIM_IMPL_H
#define AL_SIM_IMPL_H

#include <jansson.h>

#include "al_round.h"
#include "al_sim.h"

typedef struct sim {
    const al_sim_opts *o;
    int M;
    size_t P;
    al_tokens *shard; /* [M] non-IID shards (unused for IID) */
    al_loader *late;  /* SHIFT: [M] each site's loader over its shard, swapped in at shift_step */
    long shift_step;  /* SHIFT: the inner step (0-based) from which sites train on their shard */
    al_trainer *tr;   /* [M] sites (DDP: [1]) */
    al_outer *outer;  /* [M] every site's replica of the outer state */
    float **delta;    /* [M] pseudo-gradients */
    float **from;     /* [M] overlap: where each site's interval (streaming: fragment) started */
    al_outer eager;   /* overlap delayed: a copy of a site's outer state for its eager step */
    float *dbar;      /* the mean */
    float *dbar_prev; /* overlap delayed-mean: the last round's mean, of M_prev members */
    float *blend;     /* ... and the eager step's Δ̂ */
    int have_prev, M_prev;
    double *claim;           /* [M] each live member's reported ‖Δ‖² (the claim check) */
    al_commit_codec cc;      /* the codec's round trips, as the agent's */
    double *sent;            /* [M] bytes each member sent this round */
    int *members, *left_out; /* [M] this round's members (site ids) and the outliers */
    al_site_stats *ss;       /* [M] this round's stats of live sites */
    al_loader *ld;           /* DDP: [M] the sites' loaders */
    al_batch *mbs;           /* DDP: [M·accum] */
    long cap_h;
} sim;

/* Site m runs h inner steps (the run's steps step0 .. step0+h−1) and reports
 * their statistics (loss and gradient norm: means over the h ≥ 1 steps). */
int sim_run_interval(sim *s, int m, long step0, long h, al_site_stats *st, al_err *err);
/* Append the H of a round to r->h_history. */
int sim_push_h(al_sim_result *r, long *cap, long h, al_err *err);
/* The eval loss of θ_global (site tr's own θ set aside and put back). */
int sim_evaluate(sim *s, al_trainer *tr, double *loss, al_err *err);
/* The round's JSONL record, and every eval_every rounds the eval loss. */
int sim_round_record(sim *s, long round, long step, long hr, int live, const al_commit_decision *d,
                     double cmax, double comm, double bytes_round, const char *hash0,
                     json_t *refused, al_err *err);
/* After the last round: bytes per site, the eval loss, a copy of θ_global. */
int sim_finish_rounds(sim *s, const al_tokens *val, al_sim_result *res, al_err *err);

/* Why a site's Δ was left out as an outlier (‖Δ‖ against the median). */
void sim_outlier_why(char *buf, size_t n, double delta_sq, double med, double ratio);

/* [outer] overlap = streaming (sim_stream.c). */
int sim_run_rounds_stream(sim *s, const al_tokens *val, al_sim_result *res, al_err *err);

#endif
