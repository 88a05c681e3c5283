/* commit.c -- the round's arithmetic shared by the agent and the sim (al_round.h). */
#include "al_round.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void al_shard_range(size_t P, int M, int k, size_t *lo, size_t *hi) {
    *lo = P * (size_t)k / (size_t)M;
    *hi = P * (size_t)(k + 1) / (size_t)M;
}

uint64_t al_site_data_seed(uint64_t seed, int m) {
    uint64_t h = al_fnv1a64(&seed, sizeof seed, 0xcbf29ce484222325ull);
    return al_fnv1a64(&m, sizeof m, h);
}

int al_commit_outliers(const al_site_stats *st, int M, double k, int *left_out, double *median) {
    for (int j = 0; j < M; j++) left_out[j] = 0;
    *median = 0;
    if (!(k > 0) || M < 3 || M > AL_COMMIT_MAX_MEMBERS) return 0;
    double norm[AL_COMMIT_MAX_MEMBERS], sorted[AL_COMMIT_MAX_MEMBERS];
    for (int j = 0; j < M; j++) sorted[j] = norm[j] = sqrt(st[j].delta_sq);
    for (int i = 1; i < M; i++) /* insertion sort: M is small */
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            double t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    double med = M % 2 ? sorted[M / 2] : 0.5 * (sorted[M / 2 - 1] + sorted[M / 2]);
    if (!(med > 0)) return 0;
    *median = med;
    int n = 0;
    for (int j = 0; j < M; j++)
        if (norm[j] > k * med) {
            left_out[j] = 1;
            n++;
        }
    return n;
}

int al_commit_codec_init(al_commit_codec *c, const al_codec_cfg *cfg, al_err *err) {
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    return al_codec_check(cfg, err);
}

void al_commit_codec_free(al_commit_codec *c) {
    free(c->enc);
    free(c->part);
    memset(c, 0, sizeof *c);
}

int al_commit_encode(al_commit_codec *c, const float *x, size_t n, size_t *len, al_err *err) {
    size_t need = al_codec_max_encoded(&c->cfg, n);
    if (need > c->cap) {
        uint8_t *nb = realloc(c->enc, need);
        if (!nb) return al_errf(err, AL_ENOMEM, "codec: out of memory (%zu bytes)", need);
        c->enc = nb;
        c->cap = need;
    }
    return al_codec_encode(&c->cfg, x, n, c->enc, c->cap, len, err);
}

/* x[0..n) through the codec and back into out (out may be x). */
static int round_trip(al_commit_codec *c, const float *x, size_t n, float *out, size_t *len,
                      al_err *err) {
    int rc = al_commit_encode(c, x, n, len, err);
    return rc ? rc : al_codec_decode(c->enc, *len, out, n, err);
}

int al_commit_fits_claim(const float *x, size_t n, double claimed_sq, double *norm) {
    double sq = 0;
    for (size_t i = 0; i < n; i++) sq += (double)x[i] * (double)x[i];
    *norm = sqrt(sq);
    return isfinite(sq) && claimed_sq >= 0 && *norm <= AL_COMMIT_CLAIM_SLACK * sqrt(claimed_sq);
}

int al_commit_exchange(al_commit_codec *c, const float *const *delta, const int *sites,
                       const int *left_out, const double *claimed_sq, int M, size_t P, float *dbar,
                       double *sent, int *n_lies, al_err *err) {
    if (n_lies) *n_lies = 0;
    if (M < 1 || M > AL_COMMIT_MAX_MEMBERS)
        return al_errf(err, AL_EINVAL, "exchange: %d members not in [1, %d]", M,
                       AL_COMMIT_MAX_MEMBERS);
    int n_in = 0;
    for (int j = 0; j < M; j++) {
        if (j > 0 && sites[j] <= sites[j - 1])
            return al_errf(err, AL_EINVAL, "exchange: site ids not increasing at member %d", j);
        n_in += !(left_out && left_out[j]);
    }
    if (n_in == 0) return al_errf(err, AL_EINVAL, "exchange: every member is left out");
    size_t most = P / (size_t)M + 1;
    if (most > c->part_cap) {
        float *np = realloc(c->part, most * sizeof(float));
        if (!np) return al_errf(err, AL_ENOMEM, "exchange: out of memory");
        c->part = np;
        c->part_cap = most;
    }
    if (sent)
        for (int j = 0; j < M; j++) sent[j] = 0;
    int rc = 0;
    for (int k = 0; k < M && rc == 0; k++) { /* shard k, owned by member k */
        size_t lo, hi, len;
        al_shard_range(P, M, k, &lo, &hi);
        al_mean acc;
        if ((rc = al_mean_init(&acc, sites[M - 1] + 1, hi - lo, err))) break;
        for (int s = 0, j = 0; s < sites[M - 1] + 1; s++) { /* the owner's live set */
            int member = j < M && sites[j] == s;
            if (!member || (left_out && left_out[j])) al_mean_drop(&acc, s, NULL);
            j += member;
        }
        /* reduce: every member's part goes through the codec to the owner
         * (a left-out member's part is sent, and not added) */
        for (int j = 0; j < M && rc == 0; j++) {
            rc = round_trip(c, delta[j] + lo, hi - lo, c->part, &len, err);
            if (rc) al_err_prefix(err, "exchange: member %d (site %d), shard %d", j, sites[j], k);
            if (rc == 0 && sent && j != k) sent[j] += (double)len;
            if (rc || (left_out && left_out[j])) continue;
            double nrm;
            if (claimed_sq && !al_commit_fits_claim(c->part, hi - lo, claimed_sq[j], &nrm)) {
                if (n_lies) (*n_lies)++; /* longer than its own claim: out of this shard */
                rc = al_mean_drop(&acc, sites[j], err);
                continue;
            }
            rc = al_mean_add(&acc, sites[j], c->part, err);
        }
        /* gather: the owner encodes the mean once; everyone decodes those bytes */
        if (rc == 0) rc = al_mean_finish(&acc, c->part, err);
        al_mean_free(&acc);
        if (rc == 0) rc = round_trip(c, c->part, hi - lo, dbar + lo, &len, err);
        if (rc == 0 && sent) sent[k] += (double)(M - 1) * (double)len;
    }
    return rc;
}

int al_commit_decide(al_policy *pol, const al_site_stats *st, int n, const float *dbar, size_t P,
                     long round, int64_t h, al_commit_decision *d, al_err *err) {
    memset(d, 0, sizeof *d);
    int rc = al_round_stats_combine(&d->rs, round, st, n, al_sq_norm(dbar, P), err);
    if (rc) return rc;
    d->comm_floor = al_policy_comm_floor(pol, &d->rs);
    d->h_next = h;
    return al_policy_next_interval(pol, &d->rs, &d->h_next, err);
}

int al_commit_step(al_outer *o, const float *dbar, const al_commit_decision *d, int progress_lr,
                   al_err *err) {
    return al_outer_step(o, dbar, progress_lr ? d->rs.lr_sum : (double)d->rs.steps, err);
}

static const char *const OVERLAP_NAMES[] = {
#define AL_OVERLAP_NAME(e, s) s,
    AL_OVERLAPS(AL_OVERLAP_NAME)
#undef AL_OVERLAP_NAME
};

int al_overlap_parse(const char *s, al_overlap *out, al_err *err) {
    for (size_t i = 0; i < AL_ARRAY_LEN(OVERLAP_NAMES); i++)
        if (s && !strcmp(s, OVERLAP_NAMES[i])) {
            *out = (al_overlap)i;
            return 0;
        }
    return al_errf(err, AL_ECONFIG,
                   "overlap '%s': expected none, delayed, delayed-mean, delayed-mid or streaming",
                   s ? s : "");
}

const char *al_overlap_name(al_overlap o) {
    return (unsigned)o < AL_ARRAY_LEN(OVERLAP_NAMES) ? OVERLAP_NAMES[o] : "?";
}

int al_commit_merge(float *theta_local, const float *theta_from, const float *theta_global,
                    size_t n, float *delta, double *delta_sq, al_err *err) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(theta_local[i]) || !isfinite(theta_from[i]) || !isfinite(theta_global[i]))
            return al_errf(err, AL_ENUMERIC, "merge: a non-finite value at index %zu", i);
    double sq = 0;
    for (size_t i = 0; i < n; i++) {
        float d = theta_from[i] - theta_local[i]; /* Δ of the interval, from where it started */
        delta[i] = d;
        theta_local[i] = theta_global[i] - d;
        sq += (double)d * (double)d;
    }
    *delta_sq = sq;
    return 0;
}

int al_commit_eager(al_outer *scratch, const al_outer *o, const al_eager_in *in, double s_r,
                    float *out, al_err *err) {
    if (scratch->n != o->n) {
        al_outer_free(scratch);
        int rc = al_outer_init(scratch, &o->cfg, o->theta, o->n, err);
        if (rc) return rc;
    }
    memcpy(scratch->theta, o->theta, o->n * sizeof(float));
    memcpy(scratch->mom, o->mom, o->n * sizeof(float));
    scratch->steps = o->steps;
    const float *delta = in->delta;
    if (in->from) {
        /* delayed-mid. Where the interval converges within H steps, its Δ^m
         * carries its start's error e = s^m − θ_r whole (Δ^m = s^m − end);
         * where it barely moves, Δ^m − e carries −e. The outer step multiplies
         * either by α(1 + μ) (1.33 at lr 0.7, Nesterov 0.9): the error grows
         * round on round. Halfway, ±e/2, it shrinks in both (docs/outer.md). */
        for (size_t i = 0; i < o->n; i++)
            in->blend[i] = in->delta[i] - 0.5f * (in->from[i] - o->theta[i]);
        delta = in->blend;
    } else if (in->dbar_prev && in->M > 1) {
        float w = 1.0f / (float)in->M, v = (float)(in->M - 1) / (float)in->M;
        for (size_t i = 0; i < o->n; i++) in->blend[i] = w * in->delta[i] + v * in->dbar_prev[i];
        delta = in->blend;
    }
    int rc = al_outer_step(scratch, delta, s_r, err);
    if (rc == 0) memcpy(out, scratch->theta, o->n * sizeof(float));
    return rc;
}
