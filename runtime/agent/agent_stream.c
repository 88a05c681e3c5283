/* agent_stream.c -- [outer] overlap = streaming in the agent: θ cut into F
 * fragments (al_shard_range) that synchronise in turn (Streaming DiLoCo;
 * docs/outer.md, "Streaming", where the simulator's runtime/sim/sim_stream.c
 * does the same in one process).
 *
 * The round protocol is unchanged: protocol round k (one vote, one θ hash)
 * exchanges fragment p = k mod F of outer round r = k / F, after a span of
 * that round's H_r steps cut in F (H_r·p/F rounded down to H_r·(p+1)/F):
 *
 *   span k ends (do_train):   Δ_p = θ_global_p − θ_local_p        (since p last committed)
 *                             θ_local_p ← g_p = OuterStep_p(θ_global_p, mom_p; Δ_p, S_p)
 *                             (the eager guess; the thread starts span k + 1 from there)
 *   round k commits:          θ_global_p ← OuterStep_p(θ_global_p, mom_p; Δ̄_p, S_p)
 *   τ steps into span k + 1:  θ_local_p ← θ_global_p + (θ_local_p − g_p)   (the merge)
 *                             (waiting for the commit if it is late: the part not hidden)
 *
 * τ = max(1, H_r/(2F)), the rule frozen on the simulator. The policy decides
 * once per outer round, at its last fragment, from statistics that carry the
 * outer round's running sums; the H it decides applies from the next outer
 * round, whose first span the thread is already training: its first τ steps
 * do not depend on H, and the span's length is read after the merge. When
 * the budget is spent, every fragment not yet synchronised at the last step
 * is exchanged once more, in spans of no steps (blocking), and the run ends
 * on θ_global.
 *
 * This file keeps the schedule and the arithmetic on the driver's side; the
 * span's training and its merge are agent_train.c's (ag_span_run), which
 * reads the schedule from here. */
#include "agent_stream.h"

#include <stdlib.h>

int ag_stream_init(agent *a, al_err *err) {
    ag_stream *sm = &a->sm;
    memset(sm, 0, sizeof *sm);
    sm->pend_p = -1;
    sm->merged_round = -1;
    if (a->overlap != AL_OVERLAP_STREAMING) return 0;
    long F = a->cfg->outer_fragments;
    if (F < 1 || (size_t)F > a->P)
        return al_errf(err, AL_ECONFIG,
                       "[outer] fragments = %ld: must be 1 to %zu (the parameters)", F, a->P);
    sm->F = (int)F;
    sm->sync = !strcmp(a->cfg->outer_overlap_steps, "sync");
    sm->lr_at = calloc((size_t)F, sizeof *sm->lr_at);
    sm->step_at = calloc((size_t)F, sizeof *sm->step_at);
    sm->fsq = calloc((size_t)F, sizeof *sm->fsq);
    if (!sm->lr_at || !sm->step_at || !sm->fsq)
        return al_errf(err, AL_ENOMEM, "[outer] fragments: out of memory");
    return 0;
}

void ag_stream_free(agent *a) {
    free(a->sm.lr_at);
    free(a->sm.step_at);
    free(a->sm.fsq);
    memset(&a->sm, 0, sizeof a->sm);
}

void ag_frag(const agent *a, long round, size_t *lo, size_t *hi) {
    if (a->sm.F < 1) {
        *lo = 0;
        *hi = a->P;
        return;
    }
    al_shard_range(a->P, a->sm.F, (int)(round % a->sm.F), lo, hi);
}

/* the H of an outer round that begins at inner step `start`, cut short by the
 * budget (0 once it is spent: the final exchanges) */
static long h_from(const agent *a, long start) {
    return AL_MAX(0, AL_MIN(a->h, a->cfg->inner_steps - start));
}

static long round_h(const agent *a) {
    return h_from(a, a->sm.sr_step);
}

/* span p of F in an outer round of hr steps: H·p/F rounded down to H·(p+1)/F */
static long span_of(long hr, long p, long F) {
    return hr * (p + 1) / F - hr * p / F;
}

long ag_span_len(const agent *a, long round) {
    return span_of(round_h(a), round % a->sm.F, a->sm.F);
}

int ag_stream_delta(agent *a, al_site_stats *mine, al_err *err) {
    ag_stream *sm = &a->sm;
    int p = (int)(a->round % sm->F);
    size_t lo, hi;
    ag_frag(a, a->round, &lo, &hi);
    size_t n = hi - lo;
    float *th = ag_theta_local(a);
    int rc = al_pseudo_grad(a->delta + lo, a->outer.theta + lo, th + lo, n, &sm->dsq, err);
    if (rc) return al_err_prefix(err, "round %ld, fragment %d", a->round, p);
    const ag_interval *iv = &a->iv;
    sm->S = a->progress_lr ? sm->lr_cum + iv->lr_sum - sm->lr_at[p]
                           : (double)(a->step - sm->step_at[p]);
    /* the eager guess: this site's Δ_p for Δ̄_p, on a copy of the fragment's state */
    if (!a->eager.theta &&
        (rc = al_outer_init(&a->eager, &a->outer.cfg, a->outer.theta, a->P, err)))
        return rc;
    memcpy(a->eager.theta + lo, a->outer.theta + lo, n * sizeof(float));
    memcpy(a->eager.mom + lo, a->outer.mom + lo, n * sizeof(float));
    /* (S = 0: no inner step since the fragment's last commit, H < F: no outer step either) */
    if (sm->S > 0 && (rc = al_outer_step_part(&a->eager, a->delta + lo, lo, hi, sm->S, err)))
        return al_err_prefix(err, "round %ld: the eager guess of fragment %d", a->round, p);
    memcpy(th + lo, a->eager.theta + lo, n * sizeof(float));
    /* the statistics: the outer round so far, this span included */
    ag_interval t = sm->sum;
    ag_interval_add(&t, iv);
    long d = AL_MAX(t.steps, 1);
    double dsq = sm->dsq;
    for (int q = 0; q < sm->F; q++)
        if (q != p) dsq += sm->fsq[q];
    *mine = (al_site_stats){.site = a->self,
                            .steps = t.steps,
                            .loss = t.loss_sum / (double)d,
                            .grad_norm = t.gnorm_sum / (double)d,
                            .delta_sq = dsq,
                            .lr_sum = t.lr_sum,
                            .lr_sq_sum = t.lr_sq_sum,
                            .lr_last = t.lr_last,
                            .tokens = t.tokens,
                            .compute_s = t.compute_s,
                            .comm_s = sm->comm_prev};
    return 0;
}

void ag_stream_next(agent *a) {
    ag_stream *sm = &a->sm;
    long F = sm->F;
    sm->pend_p = (int)(a->round % F);
    sm->pend_round = a->round;
    long cut;
    if (sm->sync) {
        /* the whole next span; the next outer round's first span with the H in
         * force now (a decision of this round that changes it is read after the
         * merge: a longer span trains on, a shorter one has run long) */
        if ((a->round + 1) % F != 0)
            cut = ag_span_len(a, a->round + 1);
        else
            cut = span_of(h_from(a, a->step), 0, F); /* it begins where this span ended */
    } else {
        long tau = AL_MAX(1, round_h(a) / (2 * F));
        cut = (a->round + 1) % F != 0 ? AL_MIN(tau, ag_span_len(a, a->round + 1)) : tau;
    }
    sm->pend_cut = cut;
}

int ag_stream_propose(agent *a, al_outer *cand, const al_site_stats *in_mean, int n_in,
                      al_commit_decision *d, al_err *err) {
    ag_stream *sm = &a->sm;
    int rc = 0;
    if (a->round % sm->F == sm->F - 1) {
        rc = al_commit_decide(a->pol, in_mean, n_in, a->dbar, a->P, a->round / sm->F, a->h, d, err);
    } else { /* H holds until the outer round's last fragment */
        memset(d, 0, sizeof *d);
        d->h_next = a->h;
    }
    size_t lo, hi;
    ag_frag(a, a->round, &lo, &hi);
    if (rc == 0 && sm->S > 0) rc = al_outer_step_part(cand, a->dbar + lo, lo, hi, sm->S, err);
    return rc;
}

void ag_stream_commit(agent *a, double comm_s) {
    ag_stream *sm = &a->sm;
    int p = (int)(a->round % sm->F);
    ag_interval *s = &sm->sum;
    ag_interval_add(s, &a->iv);
    sm->lr_cum += a->iv.lr_sum;
    sm->lr_at[p] = sm->lr_cum;
    sm->step_at[p] = a->step;
    sm->fsq[p] = sm->dsq;
    sm->comm_cur += comm_s;
    pthread_mutex_lock(&a->mu); /* the thread reads H and the outer round's start after this */
    if (p == sm->F - 1) {
        sm->sr_step = a->step;
        /* (the final exchanges train no step: their statistics stay the last round's) */
        if (a->step < a->cfg->inner_steps) memset(s, 0, sizeof *s);
        sm->comm_prev = sm->comm_cur;
        sm->comm_cur = 0;
    }
    sm->merged_round = a->round;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

int ag_stream_ends(const agent *a, long k) {
    const ag_stream *sm = &a->sm;
    long budget = a->cfg->inner_steps;
    /* the outer round after k's commit starts where k's span ended if k is its last */
    long sr = k % sm->F == sm->F - 1 ? a->step : sm->sr_step;
    return a->step >= budget && sr >= budget && (k + 1) % sm->F == sm->F - 1;
}

/* ---- the schedule in checkpoints and snapshots ----------------------------------------- */

json_t *ag_stream_json(const agent *a) {
    const ag_stream *sm = &a->sm;
    json_t *la = json_array(), *sa = json_array(), *fa = json_array();
    for (int p = 0; p < sm->F; p++) {
        json_array_append_new(la, json_real(sm->lr_at[p]));
        json_array_append_new(sa, json_integer((json_int_t)sm->step_at[p]));
        json_array_append_new(fa, json_real(sm->fsq[p]));
    }
    const ag_interval *s = &sm->sum;
    return json_pack("{s:i, s:I, s:f, s:o, s:o, s:o, s:f, s:f, s:[I, f, f, f, f, f, I, f], "
                     "s:[i, I, I]}",
                     "fragments", sm->F, "sr_step", (json_int_t)sm->sr_step, "lr_cum", sm->lr_cum,
                     "lr_at", la, "step_at", sa, "fsq", fa, "comm_prev", sm->comm_prev, "comm_cur",
                     sm->comm_cur, "sum", (json_int_t)s->steps, s->loss_sum, s->gnorm_sum,
                     s->lr_sum, s->lr_sq_sum, s->lr_last, (json_int_t)s->tokens, s->compute_s,
                     "pend", sm->pend_p, (json_int_t)sm->pend_round, (json_int_t)sm->pend_cut);
}

int ag_stream_load(agent *a, json_t *j, const char *what, int apply, al_err *err) {
    ag_stream *sm = &a->sm;
    int F = 0, pp = -1;
    json_int_t sr = 0, st = 0, tok = 0, pr = 0, pc = 0;
    json_t *la, *sa, *fa;
    ag_interval s = {0};
    double lr_cum = 0, cp = 0, cc = 0;
    if (!j || json_unpack(j,
                          "{s:i, s:I, s:F, s:o, s:o, s:o, s:F, s:F, s:[I, F, F, F, F, F, I, F], "
                          "s:[i, I, I]}",
                          "fragments", &F, "sr_step", &sr, "lr_cum", &lr_cum, "lr_at", &la,
                          "step_at", &sa, "fsq", &fa, "comm_prev", &cp, "comm_cur", &cc, "sum", &st,
                          &s.loss_sum, &s.gnorm_sum, &s.lr_sum, &s.lr_sq_sum, &s.lr_last, &tok,
                          &s.compute_s, "pend", &pp, &pr, &pc) != 0)
        return al_errf(err, AL_EFORMAT, "%s: 'stream': missing or malformed (overlap = streaming)",
                       what);
    if (F != sm->F)
        return al_errf(err, AL_EMISMATCH, "%s: saved with %d fragments, [outer] fragments is %d",
                       what, F, sm->F);
    if (!json_is_array(la) || !json_is_array(sa) || !json_is_array(fa) ||
        json_array_size(la) != (size_t)F || json_array_size(sa) != (size_t)F ||
        json_array_size(fa) != (size_t)F || sr < 0 || st < 0 || tok < 0 || pp < -1 || pp >= F ||
        pc < 0)
        return al_errf(err, AL_EFORMAT,
                       "%s: 'stream': arrays of %d values and counts >= 0 expected", what, F);
    for (int p = 0; p < F; p++) {
        json_t *x = json_array_get(sa, (size_t)p);
        if (!json_is_number(json_array_get(la, (size_t)p)) || !json_is_integer(x) ||
            json_integer_value(x) < 0 || !json_is_number(json_array_get(fa, (size_t)p)))
            return al_errf(err, AL_EFORMAT,
                           "%s: 'stream': fragment %d: lr_at, step_at (>= 0) and fsq must be "
                           "numbers",
                           what, p);
    }
    if (!apply) return 0;
    for (int p = 0; p < F; p++) {
        sm->lr_at[p] = json_number_value(json_array_get(la, (size_t)p));
        sm->step_at[p] = (long)json_integer_value(json_array_get(sa, (size_t)p));
        sm->fsq[p] = json_number_value(json_array_get(fa, (size_t)p));
    }
    s.steps = (long)st;
    s.tokens = (long)tok;
    sm->sum = s;
    sm->sr_step = (long)sr;
    sm->lr_cum = lr_cum;
    sm->comm_prev = cp;
    sm->comm_cur = cc;
    sm->pend_p = pp;
    sm->pend_round = (long)pr;
    sm->pend_cut = (long)pc;
    return 0;
}
