/*
 * drift.c -- the `autoloco` rule: H from how fast the sites drift apart.
 *
 * The model (docs/outer.md, "Why the drift rule"). Between syncs the sites'
 * models move apart; averaging them at a sync throws the spread away, and the
 * longer the interval the more of each site's progress is spent on moves the
 * others do not share. Per round r the statistics give the spread directly:
 *
 *     V_r = M/(M − 1) · (mean_m ‖Δ^m‖² − ‖Δ̄‖²)  = Σ_m ‖Δ^m − Δ̄‖² / (M − 1),
 *
 * the between-site variance of the moves, and its rate per inner step
 * D_r = V_r / H_r. If the quality a site gives up grows like D·H over an
 * interval (a random walk of rate D, averaged over the interval) and a sync
 * costs a fixed amount, the cost per inner step is a·D·H + b/H, smallest at
 * H = sqrt(b/(a·D)): sync intervals ∝ D^(−1/2). Across a run, spending a
 * fixed number of syncs so as to minimise Σ D_t·H_t gives the same shape
 * (Lagrange: D·H² = const). So the rule keeps
 *
 *     H_{r+1} = h_base · (D_max / D̄_r)^power,      power = 1/2,
 *
 * where D̄ is a geometric EMA of D (one round's D is a single draw) and D_max
 * the largest D̄ seen: h_base is the interval for the stage where the sites
 * drift apart fastest, and every calmer stage gets proportionally longer
 * intervals. What moves D, and so H:
 *   - the learning rate: under Adam a step moves each weight by about η, so D
 *     rises through warmup (H stays h_base) and falls ~η² in the decay
 *     (H grows towards the end of a cosine schedule, as QSR's H ∝ 1/η² but
 *     measured rather than assumed);
 *   - the gradient noise relative to the signal: it grows as the loss falls,
 *     which raises D and holds H back in the middle of training;
 *   - heterogeneous data: sites on different distributions drift apart
 *     systematically, a part of V that grows like H² (D like H), so D stays
 *     higher and H grows less; a change of data raises D and pulls H back
 *     towards h_base.
 * A loss spike (L_r > L_{r−1}·(1 + spike)) caps the next H at shrink·H_r.
 * Then H is clipped to [floor·h_base, cap·h_base] (and by the generic code to
 * [h_min, h_max]). With M < 2 or no movement there is no spread to measure:
 * H holds. Decisions use only the round's statistics, which every site has,
 * in double precision with explicit fma, so every site decides the same H.
 */
#include "policy_impl.h"

#include <math.h>

enum { DR_POWER = P_OWN, DR_EMA, DR_SPIKE, DR_SHRINK, DR_FLOOR, DR_CAP };
enum { DR_S_N = S_OWN, DR_S_LD, DR_S_LDMAX, DR_S_PREV, DR_S_D };
static const al_pparam drift_params[] = {
    {"power", AL_P_REAL, 0.5, 0, 2, "H = h_base*(D_max/D)^power (1/2: the cost model)"},
    {"ema", AL_P_REAL, 0.5, 0, 0.999, "weight of the old value in the (geometric) EMA of D"},
    {"spike", AL_P_REAL, 0.02, 0, 10, "relative rise of the loss that counts as a spike"},
    {"shrink", AL_P_REAL, 0.7, 0.01, 1, "after a loss spike, H_next <= shrink*H"},
    {"floor", AL_P_REAL, 1, 0, 1e6, "smallest H as a multiple of h_base (0: h_min only)"},
    {"cap", AL_P_REAL, 2, 0, 1e6, "largest H as a multiple of h_base (0: h_max only)"},
};
/* n: rounds with a measured D; ld: log D̄; ldmax: log D_max; prev: the last
 * round's loss; d: the last round's D_r (for logs; −1: none) */
static const char *const drift_state[] = {"n_d", "log_d", "log_dmax", "prev_loss", "d"};
_Static_assert(P_OWN + AL_ARRAY_LEN(drift_params) <= AL_POLICY_MAXP, "too many settings");
_Static_assert(S_OWN + AL_ARRAY_LEN(drift_state) <= AL_POLICY_MAXP, "too much state");

static int drift_start(al_policy *p, double *h, al_err *err) {
    const double *a = p->par;
    if (a[DR_CAP] > 0 && a[DR_FLOOR] > a[DR_CAP])
        return al_errf(err, AL_ECONFIG, "policy autoloco: floor %g is above cap %g", a[DR_FLOOR],
                       a[DR_CAP]);
    p->st[DR_S_N] = 0;
    p->st[DR_S_LD] = 0;
    p->st[DR_S_LDMAX] = 0;
    p->st[DR_S_PREV] = 0;
    p->st[DR_S_D] = -1;
    *h = p->h_base;
    return 0;
}

/* The drift rate D_r = V_r/H_r of the round, or −1 when it cannot be measured. */
static double drift_rate(const al_round_stats *s) {
    if (s->n_sites < 2 || !(s->delta_sq_mean > 0)) return -1;
    double m = s->n_sites;
    double v = (m / (m - 1)) * (s->delta_sq_mean - s->mean_delta_sq);
    return v > 0 ? v / (double)s->steps : -1;
}

static int drift_next(al_policy *p, const al_round_stats *s, double *h, al_err *err) {
    (void)err;
    const double *a = p->par;
    double *st = p->st;
    double d = drift_rate(s);
    double hn = st[S_H]; /* hold unless measured */
    if (d > 0) {
        double ld = log(d);
        bool first = st[DR_S_N] == 0;
        st[DR_S_LD] = first ? ld : fma(a[DR_EMA], st[DR_S_LD], (1 - a[DR_EMA]) * ld);
        st[DR_S_LDMAX] = first ? st[DR_S_LD] : fmax(st[DR_S_LDMAX], st[DR_S_LD]);
        st[DR_S_N] += 1;
        hn = p->h_base * exp(a[DR_POWER] * (st[DR_S_LDMAX] - st[DR_S_LD]));
    }
    if (st[S_ROUNDS] >= 1 && s->loss > st[DR_S_PREV] * (1 + a[DR_SPIKE]))
        hn = fmin(hn, a[DR_SHRINK] * (double)s->steps);
    double lo = fmax(p->h_min, a[DR_FLOOR] * p->h_base);
    double hi = a[DR_CAP] > 0 ? fmin(p->h_max, fmax(lo, a[DR_CAP] * p->h_base)) : p->h_max;
    st[DR_S_PREV] = s->loss;
    st[DR_S_D] = d;
    *h = round(fmin(hi, fmax(lo, hn)));
    return 0;
}

const al_policy_ops al_policy_autoloco = {.name = "autoloco",
                                          .params = drift_params,
                                          .n_params = (int)AL_ARRAY_LEN(drift_params),
                                          .state = drift_state,
                                          .n_state = (int)AL_ARRAY_LEN(drift_state),
                                          .start = drift_start,
                                          .next = drift_next};
