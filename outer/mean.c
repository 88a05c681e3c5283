/*
 * mean.c -- the round's statistics and the mean of the sites' contributions.
 *
 * Floating-point addition is not associative, so "the mean of M vectors" is
 * only one number if the order of the additions is fixed. Contributions arrive
 * over the network in any order; al_mean keeps each one in the slot of its
 * site id and sums the slots in id order when the last one is in:
 * out = ((x_0 + x_1) + x_2 + ...) / M in fp32. Every site that computes the
 * mean of the same contributions gets the same bits.
 */
#include "al_outer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- statistics ------------------------------------------------------------------- */

#define CHECK_FINITE(who, s, field)                                                                \
    do {                                                                                           \
        if (!isfinite((double)(s)->field))                                                         \
            return al_errf(err, AL_ENUMERIC, "%s: '%s' is %g", who, #field, (double)(s)->field);   \
    } while (0)
#define CHECK_NONNEG(who, s, field)                                                                \
    do {                                                                                           \
        if ((s)->field < 0)                                                                        \
            return al_errf(err, AL_EINVAL, "%s: '%s' is %g, must be >= 0", who, #field,            \
                           (double)(s)->field);                                                    \
    } while (0)

int al_site_stats_check(const al_site_stats *s, al_err *err) {
    const char *who = "site statistics";
    CHECK_FINITE(who, s, loss);
    CHECK_FINITE(who, s, grad_norm);
    CHECK_FINITE(who, s, delta_sq);
    CHECK_FINITE(who, s, lr_sum);
    CHECK_FINITE(who, s, lr_sq_sum);
    CHECK_FINITE(who, s, lr_last);
    CHECK_FINITE(who, s, compute_s);
    CHECK_FINITE(who, s, comm_s);
    if (s->site < 0) return al_errf(err, AL_EINVAL, "%s: site id %d < 0", who, s->site);
    if (s->steps < 1)
        return al_errf(err, AL_EINVAL, "%s: 'steps' is %lld, must be >= 1", who,
                       (long long)s->steps);
    CHECK_NONNEG(who, s, grad_norm);
    CHECK_NONNEG(who, s, delta_sq);
    CHECK_NONNEG(who, s, lr_sq_sum);
    CHECK_NONNEG(who, s, lr_last);
    CHECK_NONNEG(who, s, tokens);
    CHECK_NONNEG(who, s, compute_s);
    CHECK_NONNEG(who, s, comm_s);
    CHECK_NONNEG(who, s, lr_sum); /* 0 is possible (lr 0); the corrected step refuses it */
    return 0;
}

int al_round_stats_check(const al_round_stats *s, al_err *err) {
    const char *who = "round statistics";
    CHECK_FINITE(who, s, loss);
    CHECK_FINITE(who, s, grad_norm);
    CHECK_FINITE(who, s, delta_sq_mean);
    CHECK_FINITE(who, s, mean_delta_sq);
    CHECK_FINITE(who, s, lr_sum);
    CHECK_FINITE(who, s, lr_sq_sum);
    CHECK_FINITE(who, s, lr_last);
    CHECK_FINITE(who, s, compute_s);
    CHECK_FINITE(who, s, comm_s);
    if (s->n_sites < 1)
        return al_errf(err, AL_EINVAL, "%s: 'n_sites' is %d, must be >= 1", who, s->n_sites);
    if (s->steps < 1)
        return al_errf(err, AL_EINVAL, "%s: 'steps' is %lld, must be >= 1", who,
                       (long long)s->steps);
    CHECK_NONNEG(who, s, round);
    CHECK_NONNEG(who, s, grad_norm);
    CHECK_NONNEG(who, s, delta_sq_mean);
    CHECK_NONNEG(who, s, mean_delta_sq);
    CHECK_NONNEG(who, s, lr_sq_sum);
    CHECK_NONNEG(who, s, lr_last);
    CHECK_NONNEG(who, s, tokens);
    CHECK_NONNEG(who, s, compute_s);
    CHECK_NONNEG(who, s, comm_s);
    CHECK_NONNEG(who, s, lr_sum); /* 0 is possible (lr 0); the corrected step refuses it */
    return 0;
}

/* Schedules are computed the same way on every site, so the lr sums should
 * agree to the last bit; allow rounding-level slack anyway. */
static bool same(double a, double b) {
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b));
}

int al_round_stats_combine(al_round_stats *out, int64_t round, const al_site_stats *sites, int m,
                           double mean_delta_sq, al_err *err) {
    if (m < 1 || !sites) return al_errf(err, AL_EINVAL, "round statistics: no sites");
    if (round < 0)
        return al_errf(err, AL_EINVAL, "round statistics: round %lld < 0", (long long)round);
    if (!isfinite(mean_delta_sq))
        return al_errf(err, AL_ENUMERIC, "round statistics: ||mean delta||^2 is %g", mean_delta_sq);
    if (mean_delta_sq < 0)
        return al_errf(err, AL_EINVAL, "round statistics: ||mean delta||^2 %g < 0", mean_delta_sq);
    /* order[k]: index in `sites` of the k-th smallest site id (insertion sort, m is small) */
    int *order = malloc((size_t)m * sizeof(int));
    if (!order) return al_errf(err, AL_ENOMEM, "round statistics: out of memory");
    int rc = 0;
    for (int i = 0; i < m; i++) {
        if ((rc = al_site_stats_check(&sites[i], err))) {
            al_err_prefix(err, "site %d", sites[i].site);
            goto done;
        }
        int j = i;
        while (j > 0 && sites[order[j - 1]].site > sites[i].site) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
        if (j > 0 && sites[order[j - 1]].site == sites[i].site) {
            rc = al_errf(err, AL_EINVAL, "round statistics: site %d reported twice", sites[i].site);
            goto done;
        }
    }
    const al_site_stats *s0 = &sites[order[0]];
    al_round_stats r = {.round = round,
                        .n_sites = m,
                        .steps = s0->steps,
                        .mean_delta_sq = mean_delta_sq,
                        .lr_sum = s0->lr_sum,
                        .lr_sq_sum = s0->lr_sq_sum,
                        .lr_last = s0->lr_last};
    double loss = 0, gn = 0, dsq = 0;
    for (int k = 0; k < m; k++) {
        const al_site_stats *s = &sites[order[k]];
        if (s->steps != s0->steps || !same(s->lr_sum, s0->lr_sum) ||
            !same(s->lr_sq_sum, s0->lr_sq_sum) || !same(s->lr_last, s0->lr_last)) {
            rc = al_errf(err, AL_EMISMATCH,
                         "round statistics: site %d ran %lld steps with lr sum %.17g, "
                         "site %d ran %lld with %.17g",
                         s->site, (long long)s->steps, s->lr_sum, s0->site, (long long)s0->steps,
                         s0->lr_sum);
            goto done;
        }
        loss += s->loss;
        gn += s->grad_norm;
        dsq += s->delta_sq;
        r.tokens += s->tokens;
        if (s->compute_s > r.compute_s) r.compute_s = s->compute_s;
        if (s->comm_s > r.comm_s) r.comm_s = s->comm_s;
    }
    r.loss = loss / m;
    r.grad_norm = gn / m;
    r.delta_sq_mean = dsq / m;
    *out = r;
done:
    free(order);
    return rc;
}

int al_coherence(const al_round_stats *s, double *rho, double *c, al_err *err) {
    int m = s->n_sites;
    if (m < 2) return al_errf(err, AL_EINVAL, "coherence: needs at least 2 sites (M = %d)", m);
    if (!(s->delta_sq_mean > 0) || !isfinite(s->delta_sq_mean) || !isfinite(s->mean_delta_sq))
        return al_errf(err, AL_EINVAL, "coherence: mean ||delta_m||^2 is %g", s->delta_sq_mean);
    double r = s->mean_delta_sq / s->delta_sq_mean;
    if (rho) *rho = r;
    if (c) *c = fma((double)m, r, -1.0) / (double)(m - 1); /* (M·ρ − 1)/(M − 1) */
    return 0;
}

/* ---- the mean accumulator -------------------------------------------------------- */

int al_mean_init(al_mean *a, int n_sites, size_t n, al_err *err) {
    memset(a, 0, sizeof *a);
    if (n_sites < 1 || n == 0)
        return al_errf(err, AL_EINVAL, "mean: %d sites x %zu floats", n_sites, n);
    a->slot = calloc((size_t)n_sites, sizeof(float *));
    a->live = malloc((size_t)n_sites);
    if (!a->slot || !a->live) {
        al_mean_free(a);
        return al_errf(err, AL_ENOMEM, "mean: out of memory");
    }
    a->n_sites = n_sites;
    a->n = n;
    al_mean_reset(a);
    return 0;
}

void al_mean_free(al_mean *a) {
    if (!a) return;
    if (a->slot)
        for (int i = 0; i < a->n_sites; i++) free(a->slot[i]);
    free(a->slot);
    free(a->live);
    memset(a, 0, sizeof *a);
}

/* Buffers are allocated on a site's first contribution and kept across
 * rounds; whether a slot holds this round's contribution is live[site] == 2. */
void al_mean_reset(al_mean *a) {
    memset(a->live, 1, (size_t)a->n_sites);
    a->n_live = a->n_sites;
    a->n_have = 0;
}

static int check_site(const al_mean *a, int site, al_err *err) {
    if (site < 0 || site >= a->n_sites)
        return al_errf(err, AL_EINVAL, "mean: site %d out of range [0, %d)", site, a->n_sites);
    return 0;
}

int al_mean_drop(al_mean *a, int site, al_err *err) {
    int rc = check_site(a, site, err);
    if (rc) return rc;
    if (a->live[site] == 0) return 0;
    if (a->live[site] == 2) a->n_have--;
    a->live[site] = 0;
    a->n_live--;
    return 0;
}

int al_mean_add(al_mean *a, int site, const float *x, al_err *err) {
    int rc = check_site(a, site, err);
    if (rc) return rc;
    if (a->live[site] == 0)
        return al_errf(err, AL_EINVAL, "mean: site %d was dropped from this round", site);
    if (a->live[site] == 2) return al_errf(err, AL_EINVAL, "mean: site %d contributed twice", site);
    size_t bad = al_find_nonfinite(x, a->n);
    if (bad < a->n)
        return al_errf(err, AL_ENUMERIC, "mean: site %d sent non-finite value %g at index %zu",
                       site, (double)x[bad], bad);
    if (!a->slot[site] && !(a->slot[site] = malloc(a->n * sizeof(float))))
        return al_errf(err, AL_ENOMEM, "mean: cannot allocate %zu floats", a->n);
    memcpy(a->slot[site], x, a->n * sizeof(float));
    a->live[site] = 2;
    a->n_have++;
    return 0;
}

bool al_mean_ready(const al_mean *a) {
    return a->n_live > 0 && a->n_have == a->n_live;
}

int al_mean_finish(const al_mean *a, float *out, al_err *err) {
    if (!al_mean_ready(a))
        return al_errf(err, AL_EINVAL, "mean: %d of %d live sites have contributed", a->n_have,
                       a->n_live);
    size_t n = a->n;
    bool first = true;
    for (int s = 0; s < a->n_sites; s++) {
        if (a->live[s] != 2) continue;
        const float *x = a->slot[s];
        if (first)
            memcpy(out, x, n * sizeof(float));
        else
            for (size_t i = 0; i < n; i++) out[i] += x[i];
        first = false;
    }
    const float m = (float)a->n_live; /* exact for any realistic M */
    for (size_t i = 0; i < n; i++) out[i] /= m;
    return 0;
}
