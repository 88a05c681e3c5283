/*
 * rules.c -- the four interval rules. Each returns the next H before clipping
 * to [h_min, h_max] (the generic code clips) and already rounded to an
 * integer. Determinism: no bare product ever feeds an addition (those are
 * explicit fma), so -ffp-contract=fast cannot change a decision.
 */
#include "policy_impl.h"

#include <math.h>

/* ---- fixed: H = h (DiLoCo) ---------------------------------------------------------- */

enum { FIXED_H = P_OWN };
static const al_pparam fixed_params[] = {
    {"h", AL_P_INT, 0, 0, 1e9, "the interval (0: h_base)"},
};

static int fixed_start(al_policy *p, double *h, al_err *err) {
    (void)err;
    *h = p->par[FIXED_H] > 0 ? p->par[FIXED_H] : p->h_base;
    return 0;
}
static int fixed_next(al_policy *p, const al_round_stats *s, double *h, al_err *err) {
    (void)s;
    return fixed_start(p, h, err);
}

const al_policy_ops al_policy_fixed = {.name = "fixed",
                                       .params = fixed_params,
                                       .n_params = (int)AL_ARRAY_LEN(fixed_params),
                                       .state = NULL,
                                       .n_state = 0,
                                       .start = fixed_start,
                                       .next = fixed_next};

/* ---- schedule: H = h1 until inner step `at`, then h2 (then h3 from `at2`) -------------------
 * A hand schedule in two phases (post-local SGD's shape, or its reverse), or
 * three with `at2`: for experiments on where syncs are worth most (the
 * sweep's ceiling, docs/results/autoloco-sweep.md), and for users who know.
 * Each switch happens at the first round boundary at or after its step.
 * at2 = 0 (the default): no third phase, the two-phase schedule as before. */

enum { SCH_H1 = P_OWN, SCH_H2, SCH_AT, SCH_H3, SCH_AT2 };
enum { SCH_S_STEP = S_OWN };
static const al_pparam sched_params[] = {
    {"h1", AL_P_INT, 0, 0, 1e9, "the interval before step `at` (0: h_base)"},
    {"h2", AL_P_INT, 0, 0, 1e9, "the interval from step `at` on (0: h_base)"},
    {"at", AL_P_INT, 0, 0, 1e12, "the inner step of the switch"},
    {"h3", AL_P_INT, 0, 0, 1e9, "the interval from step `at2` on (0: h_base)"},
    {"at2", AL_P_INT, 0, 0, 1e12, "the inner step of a second switch, to h3 (0: none)"},
};
static const char *const sched_state[] = {"step"};

static double sched_h(const al_policy *p, double step) {
    double h = p->par[SCH_AT2] > 0 && step >= p->par[SCH_AT2] ? p->par[SCH_H3]
               : step < p->par[SCH_AT]                        ? p->par[SCH_H1]
                                                              : p->par[SCH_H2];
    return h > 0 ? h : p->h_base;
}
static int sched_start(al_policy *p, double *h, al_err *err) {
    if (p->par[SCH_AT2] > 0 && p->par[SCH_AT2] < p->par[SCH_AT])
        return al_errf(err, AL_ECONFIG,
                       "policy schedule: at2 = %g comes before at = %g (the phases are h1, h2, "
                       "h3 in that order)",
                       p->par[SCH_AT2], p->par[SCH_AT]);
    p->st[SCH_S_STEP] = 0;
    *h = sched_h(p, 0);
    return 0;
}
static int sched_next(al_policy *p, const al_round_stats *s, double *h, al_err *err) {
    (void)err;
    p->st[SCH_S_STEP] += (double)s->steps;
    *h = sched_h(p, p->st[SCH_S_STEP]);
    return 0;
}

const al_policy_ops al_policy_schedule = {.name = "schedule",
                                          .params = sched_params,
                                          .n_params = (int)AL_ARRAY_LEN(sched_params),
                                          .state = sched_state,
                                          .n_state = (int)AL_ARRAY_LEN(sched_state),
                                          .start = sched_start,
                                          .next = sched_next};

/* ---- adacomm: H = ⌈sqrt(L_r/L_0 · η_0/η_r) · H_base⌉ ----------------------------------
 * Wang & Joshi (arXiv 1810.08313): communicate rarely while the loss is high
 * (far from the optimum, local models drift in the same direction) and more
 * often as it falls, scaled up again as the lr decays. L_0: the first round's
 * mean loss unless set; η_0: the largest η_r seen (the peak after warmup)
 * unless set. η_r = 0 (end of a schedule) gives h_max. */

enum { ADA_L0 = P_OWN, ADA_LR0 };
enum { ADA_S_L0 = S_OWN, ADA_S_LR0 };
static const al_pparam ada_params[] = {
    {"l0", AL_P_REAL, 0, 0, 1e30, "L_0 (0: the first round's loss)"},
    {"lr0", AL_P_REAL, 0, 0, 1e30, "eta_0 (0: the largest eta_r seen)"},
};
static const char *const ada_state[] = {"l0", "lr0"};

static int ada_start(al_policy *p, double *h, al_err *err) {
    (void)err;
    p->st[ADA_S_L0] = p->par[ADA_L0];
    p->st[ADA_S_LR0] = p->par[ADA_LR0];
    *h = p->h_base;
    return 0;
}

static int ada_next(al_policy *p, const al_round_stats *s, double *h, al_err *err) {
    if (p->st[ADA_S_L0] == 0) p->st[ADA_S_L0] = s->loss;
    if (p->par[ADA_LR0] == 0) p->st[ADA_S_LR0] = fmax(p->st[ADA_S_LR0], s->lr_last);
    double l0 = p->st[ADA_S_L0], lr0 = p->st[ADA_S_LR0];
    if (!(l0 > 0))
        return al_errf(err, AL_EINVAL, "policy adacomm: round %lld: L_0 = %g must be > 0",
                       (long long)s->round, l0);
    if (s->lr_last == 0) {
        *h = INFINITY;
        return 0;
    }
    double ratio = (s->loss / l0) * (lr0 / s->lr_last);
    *h = ceil(sqrt(ratio) * p->h_base);
    return 0;
}

const al_policy_ops al_policy_adacomm = {.name = "adacomm",
                                         .params = ada_params,
                                         .n_params = (int)AL_ARRAY_LEN(ada_params),
                                         .state = ada_state,
                                         .n_state = (int)AL_ARRAY_LEN(ada_state),
                                         .start = ada_start,
                                         .next = ada_next};

/* ---- qsr: H = max(H_base, ⌊(a/η_r)²⌋) ------------------------------------------------
 * Gu et al. (arXiv 2310.14423), the quadratic synchronization rule: as the lr
 * decays, sync less often, H ∝ 1/η². With a unset, a = sqrt(H_base)·η_0 (η_0
 * the largest η_r seen), i.e. H = ⌊H_base·(η_0/η_r)²⌋: H_base at the peak lr. */

enum { QSR_A = P_OWN };
enum { QSR_S_LR0 = S_OWN };
static const al_pparam qsr_params[] = {
    {"a", AL_P_REAL, 0, 0, 1e30, "the constant a (0: sqrt(h_base)*eta_0)"},
};
static const char *const qsr_state[] = {"lr0"};

static int qsr_start(al_policy *p, double *h, al_err *err) {
    (void)err;
    p->st[QSR_S_LR0] = 0;
    *h = p->h_base;
    return 0;
}

static int qsr_next(al_policy *p, const al_round_stats *s, double *h, al_err *err) {
    (void)err;
    p->st[QSR_S_LR0] = fmax(p->st[QSR_S_LR0], s->lr_last);
    if (s->lr_last == 0) {
        *h = INFINITY;
        return 0;
    }
    double q, hq;
    if (p->par[QSR_A] > 0) {
        q = p->par[QSR_A] / s->lr_last;
        hq = floor(q * q);
    } else {
        q = p->st[QSR_S_LR0] / s->lr_last;
        hq = floor(p->h_base * (q * q));
    }
    *h = fmax(p->h_base, hq);
    return 0;
}

const al_policy_ops al_policy_qsr = {.name = "qsr",
                                     .params = qsr_params,
                                     .n_params = (int)AL_ARRAY_LEN(qsr_params),
                                     .state = qsr_state,
                                     .n_state = (int)AL_ARRAY_LEN(qsr_state),
                                     .start = qsr_start,
                                     .next = qsr_next};

/* ---- coherence: H by the coherence of the sites' progress -----------------------------
 * The first wave's `autoloco` rule (docs/outer.md, "The coherence rule"), kept
 * as its own policy for comparison. The rule, per round:
 *   c_r = (M·ρ_r − 1)/(M − 1), clamped to [0, 1]: the shared fraction of the moves.
 *   With normalize, c_r is first referred to a DiLoCo interval: if each inner
 *   step moves a site by η_t·(ḡ + noise), the shared part grows as S_r² and the
 *   noise as Σ η_t², so the signal-to-noise ratio snr = c/(1 − c) grows with
 *   H_eff = S_r²/Σ η_t²; snr_ref = snr·H_base/H_eff and
 *   c_ref = snr_ref/(1 + snr_ref) does not grow just because H did.
 *   EMA' = ema·EMA + (1 − ema)·signal (the EMA including this round).
 *   Decision (the first that applies):
 *     loss spike (L_r > L_{r−1}·(1 + spike))         → H ×shrink
 *     the first `warmup` rounds (default 0)          → hold
 *     M = 1 (nothing to be coherent with)            → H ×grow
 *     signal < EMA·(1 − drop) (drop 1: off)          → H ×shrink
 *     EMA' < c_low: coherence collapsed              → H ×shrink
 *     signal ≥ c_min                                 → H ×grow
 *     otherwise                                      → hold
 *   then EMA ← EMA'. H is kept as a real number hc (so gentle factors
 *   compound) clipped to [max(h_min, floor·h_base), min(h_max, cap·h_base)]
 *   (cap 0: h_max). The defaults grow to 2·h_base in one step once the first
 *   round shows coherent sites, and come back towards h_base, never below it,
 *   only when the smoothed signal says the sites' independent noise outweighs
 *   what they share over an h_base interval (c_low 0.5: snr_ref < 1). Why the
 *   bound and why not a relative fall (docs/outer.md): the normalised signal
 *   tracks the gradient SNR, which declines through training by itself, and
 *   coherence cannot see the cost of intervals beyond ~2·h_base, which comes
 *   from the outer step (the corrected Nesterov lookahead shrinks as μ^s).
 *   Optionally (lr_power p > 0) the interval returned is hc·(η_max/η_r)^p,
 *   η_max the largest η_r seen: QSR's observation that a decayed lr tolerates
 *   longer intervals. The result is rounded half away from zero. */

enum {
    AL_GROW = P_OWN,
    AL_SHRINK,
    AL_EMA,
    AL_WARMUP,
    AL_CMIN,
    AL_DROP,
    AL_SPIKE,
    AL_NORM,
    AL_LRPOW,
    AL_FLOOR,
    AL_CAP,
    AL_CLOW
};
enum { AL_S_HC = S_OWN, AL_S_EMA, AL_S_PREV, AL_S_SIGNAL, AL_S_FACTOR, AL_S_LRMAX };
static const al_pparam auto_params[] = {
    {"grow", AL_P_REAL, 2, 1, 10, "factor on H when the sites move coherently"},
    {"shrink", AL_P_REAL, 0.7, 0.01, 1, "factor on H on a loss spike or collapsed coherence"},
    {"ema", AL_P_REAL, 0.7, 0, 0.999, "weight of the old value in the coherence EMA"},
    {"warmup", AL_P_INT, 0, 0, 1e6, "rounds at h_base before H moves (after round 0: 0)"},
    {"c_min", AL_P_REAL, 0.75, 0, 1, "coherence needed to grow"},
    {"drop", AL_P_REAL, 1, 0, 1,
     "relative fall of coherence below its EMA that shrinks H (1: off)"},
    {"spike", AL_P_REAL, 0.02, 0, 10, "relative rise of the loss that counts as a spike"},
    {"normalize", AL_P_BOOL, 1, 0, 1, "refer coherence to an h_base interval"},
    {"lr_power", AL_P_REAL, 0, 0, 4, "H = hc*(eta_max/eta_r)^lr_power (0: off; 2: like qsr)"},
    {"floor", AL_P_REAL, 1, 0, 1, "smallest H as a fraction of h_base (0: h_min only)"},
    {"cap", AL_P_REAL, 2, 0, 1e6, "largest H as a multiple of h_base (0: h_max only)"},
    {"c_low", AL_P_REAL, 0.5, 0, 1, "smoothed coherence (EMA) below which H shrinks"},
};
_Static_assert(P_OWN + AL_ARRAY_LEN(auto_params) <= AL_POLICY_MAXP, "too many settings");
static const char *const auto_state[] = {"hc", "ema", "prev_loss", "signal", "factor", "lr_max"};

_Static_assert(S_OWN + AL_ARRAY_LEN(auto_state) <= AL_POLICY_MAXP, "too much state");

/* c referred to an interval of H_base constant-lr steps (see above). */
static double coherence_ref(double c, const al_round_stats *s, double h_base) {
    if (c >= 1) return 1;
    if (c <= 0) return 0;
    double snr = c / (1 - c);
    double h_eff = s->lr_sq_sum > 0 ? (s->lr_sum * s->lr_sum) / s->lr_sq_sum : (double)s->steps;
    double q = h_base / h_eff;
    return (snr * q) / fma(snr, q, 1.0); /* snr_ref / (1 + snr_ref) */
}

static int auto_start(al_policy *p, double *h, al_err *err) {
    (void)err;
    p->st[AL_S_HC] = p->h_base;
    p->st[AL_S_EMA] = -1; /* none yet */
    p->st[AL_S_PREV] = 0;
    p->st[AL_S_SIGNAL] = -1;
    p->st[AL_S_FACTOR] = 1;
    p->st[AL_S_LRMAX] = 0;
    *h = p->h_base;
    return 0;
}

static int auto_next(al_policy *p, const al_round_stats *s, double *h, al_err *err) {
    (void)err;
    const double *a = p->par;
    double *st = p->st;
    double ema = st[AL_S_EMA], sig = -1;
    if (s->n_sites >= 2 && s->delta_sq_mean > 0) {
        double c;
        al_coherence(s, NULL, &c, NULL); /* defined: M >= 2 and mean ‖Δ^m‖² > 0 */
        c = fmin(1.0, fmax(0.0, c));
        sig = a[AL_NORM] != 0 ? coherence_ref(c, s, p->h_base) : c;
    }
    /* the EMA including this round: the smoothed signal the collapse test reads */
    double ema_new = sig < 0 ? ema : ema < 0 ? sig : fma(a[AL_EMA], ema, (1 - a[AL_EMA]) * sig);
    bool spiked = st[S_ROUNDS] >= 1 && s->loss > st[AL_S_PREV] * (1 + a[AL_SPIKE]);
    double f = 1;
    if (spiked)
        f = a[AL_SHRINK];
    else if (st[S_ROUNDS] < a[AL_WARMUP])
        f = 1;
    else if (s->n_sites < 2)
        f = a[AL_GROW];
    else if (sig < 0)
        f = 1; /* no movement at all: nothing to judge */
    else if (ema >= 0 && sig < ema * (1 - a[AL_DROP]))
        f = a[AL_SHRINK];
    else if (ema_new < a[AL_CLOW])
        f = a[AL_SHRINK]; /* smoothed: one round's c is noisy (±0.1 in the sweep) */
    else if (sig >= a[AL_CMIN])
        f = a[AL_GROW];
    st[AL_S_EMA] = ema_new;
    /* never below floor·h_base: syncing more often than DiLoCo did not pay in the
     * sweep (small H overshoots with outer momentum 0.9; docs/outer.md) */
    double lo = fmax(p->h_min, a[AL_FLOOR] * p->h_base);
    double hi = a[AL_CAP] > 0 ? fmin(p->h_max, fmax(lo, a[AL_CAP] * p->h_base)) : p->h_max;
    st[AL_S_HC] = fmin(hi, fmax(lo, st[AL_S_HC] * f));
    st[AL_S_PREV] = s->loss;
    st[AL_S_SIGNAL] = sig;
    st[AL_S_FACTOR] = f;
    st[AL_S_LRMAX] = fmax(st[AL_S_LRMAX], s->lr_last);
    double hl = st[AL_S_HC];
    if (a[AL_LRPOW] > 0) /* optional QSR-like lengthening as the lr decays */
        hl = s->lr_last > 0 ? hl * pow(st[AL_S_LRMAX] / s->lr_last, a[AL_LRPOW]) : INFINITY;
    *h = round(fmin(p->h_max, hl));
    return 0;
}

const al_policy_ops al_policy_coherence = {.name = "coherence",
                                           .params = auto_params,
                                           .n_params = (int)AL_ARRAY_LEN(auto_params),
                                           .state = auto_state,
                                           .n_state = (int)AL_ARRAY_LEN(auto_state),
                                           .start = auto_start,
                                           .next = auto_next};
