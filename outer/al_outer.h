/*
 * al_outer.h -- the outer loop's pure computation (DESIGN.md §4): the
 * pseudo-gradient, the round's scalar statistics, the mean of the sites'
 * contributions, and the outer optimizer (DiLoCo's Nesterov SGD) with the
 * AutoLoCo correction for a changing interval. No I/O except save/load.
 *
 * Reproducibility. Every site applies the same update to its own replica of
 * θ_global, and the replicas must stay bitwise equal (their SHA-256 is compared
 * each round). Two things could break that, and this module closes both:
 *  - summation order: the mean of M contributions is always summed in site-id
 *    order in fp32, whatever order they arrive in (al_mean);
 *  - contraction: the project compiles with -ffp-contract=fast, which lets the
 *    compiler fuse a*b+c into one fma where it likes (and clang ignores pragmas
 *    under "fast"). So every multiply-add of the update is written as an
 *    explicit fmaf (one rounding, exactly defined by IEEE 754 on every machine)
 *    and no bare product ever feeds an addition. The result is a function of
 *    the inputs alone, not of compiler, flags or vector width.
 * Scalars (μ_r = μ^(S_r/S_ref)) use libm's pow: sites must run the same build.
 */
#ifndef AL_OUTER_H
#define AL_OUTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "al_base.h"

/* ---- vectors -------------------------------------------------------------------- */

/* Index of the first NaN or Inf in x, or n when all are finite. */
size_t al_find_nonfinite(const float *x, size_t n);

/* ‖x‖², accumulated in double in index order (explicit fma: reproducible). */
double al_sq_norm(const float *x, size_t n);

/* The pseudo-gradient Δ = θ_global − θ_local (fp32, elementwise), and when sq is
 * not NULL its ‖Δ‖². A non-finite Δ (a diverged site) is refused with
 * AL_ENUMERIC naming the first bad index; delta's content is then unspecified. */
int al_pseudo_grad(float *delta, const float *theta_global, const float *theta_local, size_t n,
                   double *sq, al_err *err);

/* ---- the round's statistics ------------------------------------------------------ */

/* What one site reports for the interval it just finished. */
typedef struct al_site_stats {
    int site;         /* site id (orders every sum over sites) */
    int64_t steps;    /* inner steps in the interval, H_r */
    double loss;      /* mean train loss over the interval */
    double grad_norm; /* mean global gradient norm over the interval */
    double delta_sq;  /* ‖Δ^m‖² of the site's (decoded) pseudo-gradient */
    double lr_sum;    /* S_r = Σ η_t over the interval: accumulated inner lr */
    double lr_sq_sum; /* Σ η_t², for the noise normalisation of the policy */
    double lr_last;   /* η of the interval's last inner step, η_r */
    int64_t tokens;   /* tokens trained on in the interval */
    double compute_s; /* seconds of inner compute in the interval */
    double comm_s;    /* seconds the site's previous exchange took (the link's measured cost of
                       * one round; 0 before its first exchange) */
} al_site_stats;

/* The round's statistics: the same numbers on every site (every site receives
 * every site's scalars with the shards), so policies decide identically. */
typedef struct al_round_stats {
    int64_t round;        /* round index r (0-based) */
    int n_sites;          /* M: live sites whose Δ went into the mean */
    int64_t steps;        /* H_r */
    double loss;          /* mean over sites of the interval's mean loss */
    double grad_norm;     /* mean over sites of the mean gradient norm */
    double delta_sq_mean; /* mean_m ‖Δ^m‖² */
    double mean_delta_sq; /* ‖Δ̄‖² */
    double lr_sum;        /* S_r (identical on all sites) */
    double lr_sq_sum;     /* Σ η_t² (identical on all sites) */
    double lr_last;       /* η_r (identical on all sites) */
    int64_t tokens;       /* sum over sites */
    double compute_s;     /* max over sites: the round waits for the slowest */
    double comm_s;        /* max over sites of their previous exchange's seconds (0: none yet) */
} al_round_stats;

/* Refuse non-finite or out-of-range fields (AL_ENUMERIC for NaN/Inf, AL_EINVAL
 * otherwise), naming the field. */
int al_site_stats_check(const al_site_stats *s, al_err *err);
int al_round_stats_check(const al_round_stats *s, al_err *err);

/* Combine m sites' statistics (any order in `sites`; sums run in site-id
 * order) and ‖Δ̄‖² into the round's statistics. The lr fields and steps must
 * agree across sites (AL_EMISMATCH otherwise: the schedules diverged). */
int al_round_stats_combine(al_round_stats *out, int64_t round, const al_site_stats *sites, int m,
                           double mean_delta_sq, al_err *err);

/* Coherence of the sites' moves. ρ = ‖Δ̄‖² / mean_m ‖Δ^m‖²: with Δ^m = s + n_m
 * (a shared part s and independent noise of power σ²), E‖Δ̄‖² = ‖s‖² + σ²/M and
 * E mean‖Δ^m‖² = ‖s‖² + σ², so ρ is 1 when sites moved alike and 1/M when
 * their moves were pure noise. c = (M·ρ − 1)/(M − 1) = ‖s‖² / (‖s‖² + σ²) is
 * the fraction of a site's move that is shared signal, in [0, 1] up to
 * sampling error (not clamped here). AL_EINVAL when M < 2 or mean_m ‖Δ^m‖² is 0. */
int al_coherence(const al_round_stats *s, double *rho, double *c, al_err *err);

/* ---- the mean of M contributions ------------------------------------------------ */

/* Collects one fp32 vector (a shard, or the whole Δ) per site and sums them in
 * site-id order, so the mean is bitwise the same whatever order they arrived
 * in and on every site that computes it. Contributions are copied. */
typedef struct al_mean {
    int n_sites;   /* site ids are 0 .. n_sites-1 */
    size_t n;      /* floats per contribution */
    float **slot;  /* slot[site]: its copy (buffer kept across rounds), or NULL */
    uint8_t *live; /* live[site]: 0 dropped, 1 expected, 2 contributed */
    int n_live;    /* sites not dropped this round: M */
    int n_have;    /* of which have contributed */
} al_mean;

int al_mean_init(al_mean *a, int n_sites, size_t n, al_err *err);
void al_mean_free(al_mean *a);
/* Start a round expecting every site (live set = all). Keeps the buffers. */
void al_mean_reset(al_mean *a);
/* Leave a site out of this round (missed the deadline, or its Δ was refused);
 * a contribution it already made is discarded. */
int al_mean_drop(al_mean *a, int site, al_err *err);
/* Add site's contribution. Refused: unknown or dropped site, a second
 * contribution from the same site (AL_EINVAL); any NaN/Inf (AL_ENUMERIC:
 * nothing is stored, the caller drops the site). */
int al_mean_add(al_mean *a, int site, const float *x, al_err *err);
/* True when every live site has contributed (and at least one is live). */
bool al_mean_ready(const al_mean *a);
/* out = (x_{s0} + x_{s1} + ... ) / M over live sites s0 < s1 < ..., summed
 * left to right in fp32 and divided (not multiplied by 1/M). AL_EINVAL if not
 * ready. out may not alias a contribution. */
int al_mean_finish(const al_mean *a, float *out, al_err *err);

/* ---- the outer optimizer --------------------------------------------------------- */

typedef enum { AL_CORRECTION_NONE = 0, AL_CORRECTION_AUTOLOCO = 1 } al_correction;

typedef struct al_outer_cfg {
    double lr;                /* α (0.7) */
    double momentum;          /* μ (0.9), in [0, 1) */
    al_correction correction; /* autoloco (default) or none */
    double s_ref;             /* S_ref = H_base·η_peak; needed by autoloco */
} al_outer_cfg;

void al_outer_cfg_default(al_outer_cfg *c);
/* Set one key of the [outer] optimizer settings from text: lr, momentum,
 * correction (autoloco | none), s_ref. Unknown key or bad value: AL_ECONFIG
 * naming the key. (S_ref is usually computed by the caller as h_base·lr_peak.) */
int al_outer_cfg_set(al_outer_cfg *c, const char *key, const char *value, al_err *err);
int al_outer_cfg_check(const al_outer_cfg *c, al_err *err);
const char *al_correction_name(al_correction c);

/* The scalars of one outer step for an interval with accumulated inner lr S_r. */
typedef struct al_outer_coefs {
    double mu;    /* momentum decay this round: μ (none) or μ_r = μ^(S_r/S_ref) */
    double w;     /* weight of the new gradient in the momentum: 1 or w_r = (1−μ_r)/(1−μ) */
    double scale; /* step scale: α (none) or α·S_r */
    double div;   /* the gradient is Δ̄ / div: 1 (none) or S_r */
} al_outer_coefs;
int al_outer_coefs_for(const al_outer_cfg *c, double s_r, al_outer_coefs *k, al_err *err);

/* The outer state: θ_global and the momentum buffer. Fields are public so that
 * the checkpoint code can write them as tensors ("theta_global", "outer_mom")
 * and the scalars into its manifest. */
typedef struct al_outer {
    al_outer_cfg cfg;
    size_t n;            /* parameters */
    float *theta;        /* θ_global, n floats */
    float *mom;          /* n floats: DiLoCo's b (none) or AutoLoCo's m (autoloco) */
    int64_t steps;       /* outer steps applied so far */
    al_outer_coefs last; /* coefficients of the last step (for logs) */
} al_outer;

/* Copy theta0 into a new state with zero momentum. */
int al_outer_init(al_outer *o, const al_outer_cfg *cfg, const float *theta0, size_t n, al_err *err);
void al_outer_free(al_outer *o);

/* Apply the outer step for the mean pseudo-gradient dbar (n floats) of an
 * interval whose accumulated inner lr was s_r (ignored by correction none but
 * still checked finite):
 *   none:     b ← μ·b + Δ̄;  θ ← θ − α·(Δ̄ + μ·b)
 *   autoloco: g = Δ̄/S_r;  m ← μ_r·m + w_r·g;  θ ← θ − α·S_r·(g + μ_r·m)
 * each multiply-add one fmaf. A NaN/Inf in dbar, or a bad s_r, is refused
 * (AL_ENUMERIC / AL_EINVAL) before anything is written: the state is untouched. */
int al_outer_step(al_outer *o, const float *dbar, double s_r, al_err *err);
/* The same step on the part [lo, hi) of θ and the momentum only, dbar holding
 * that part's hi − lo values ([outer] overlap = streaming: each fragment of
 * the parameters steps on its own schedule). o->steps is not advanced (a
 * whole round's step counts one); o->last gets the coefficients. AL_EINVAL
 * when [lo, hi) is not within [0, n). */
int al_outer_step_part(al_outer *o, const float *dbar, size_t lo, size_t hi, double s_r,
                       al_err *err);

/* θ's hash (hex), what sites vote on and compare: SHA-256 over the SHA-256
 * digests of θ's chunks of AL_THETA_CHUNK values (little-endian fp32 bytes;
 * the last chunk may be shorter), in order. One level of a hash tree, so that
 * a commit of one fragment of θ rehashes only the chunks it touched. */
enum { AL_THETA_CHUNK = 16384 };
size_t al_theta_chunks(size_t n); /* chunks of a θ of n values */
void al_theta_hash(const float *theta, size_t n, char hex[65]);
/* The same from dig, the 32-byte digests of θ's al_theta_chunks(n) chunks:
 * those of the chunks overlapping [lo, hi) are computed again from θ (and
 * written to dig), the others are taken as they are (the caller knows they
 * still hold). [0, n) computes them all. */
void al_theta_hash_part(const float *theta, size_t n, uint8_t *dig, size_t lo, size_t hi,
                        char hex[65]);
/* al_theta_hash of θ_global. */
void al_outer_hash(const al_outer *o, char hex[65]);
/* A 64-bit checksum of θ, about 10x cheaper than its hash: any change to one
 * 64-bit word of θ changes it (for the check that θ_global still holds what
 * was committed and hashed; not a hash to vote on). */
uint64_t al_theta_checksum(const float *theta, size_t n);

/* The whole state (config, steps, θ, momentum) as one little-endian byte
 * string with a SHA-256 trailer, for a joining site or a simple save. *buf is
 * malloc'd; free it. */
int al_outer_serialize(const al_outer *o, uint8_t **buf, size_t *len, al_err *err);
/* The same with the trailer left blank, for a copy that may never be read
 * (an agent publishes one per round; a peer pulls it rarely): al_outer_seal
 * writes the trailer (the SHA-256 of the rest) before its first reader. */
int al_outer_serialize_unsealed(const al_outer *o, uint8_t **buf, size_t *len, al_err *err);
void al_outer_seal(uint8_t *buf, size_t len);
/* The serialized size of a state of n parameters (what a joiner expects). */
size_t al_outer_state_bytes(size_t n);
/* Replace o (initialised or zeroed) with a serialized state. When expect is not
 * NULL its lr, momentum, correction and s_ref must match (AL_EMISMATCH naming
 * the field); when o already holds a state, its n must match too. On any error
 * o is untouched. */
int al_outer_deserialize(al_outer *o, const uint8_t *buf, size_t len, const al_outer_cfg *expect,
                         al_err *err);
int al_outer_save(const al_outer *o, const char *path, al_err *err);
int al_outer_load(al_outer *o, const char *path, const al_outer_cfg *expect, al_err *err);

#endif
