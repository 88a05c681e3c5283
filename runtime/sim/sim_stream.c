/* sim_stream.c -- `autoloco sim` with [outer] overlap = streaming: the
 * parameters in F fragments, each synchronised on its own schedule
 * (Streaming DiLoCo; docs/outer.md, "Streaming"). */
#include "sim_impl.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- overlap streaming: F fragments of θ, each synchronised on its own schedule ---------- */

/* Round r's H_r inner steps are cut into F spans; at the end of span p,
 * fragment p (al_shard_range(P, F, p)) synchronises: every site's Δ^m_p is
 * measured from the θ_global the fragment last committed, the mean goes
 * through the codec, and every replica steps that fragment alone. The
 * exchange runs beside the next τ inner steps; then each site re-bases the
 * fragment's progress over those τ steps onto the new θ_global (al_commit_merge),
 * so that no site ever trains from a guess. The policy decides once a round,
 * when the last fragment has synchronised, from the round's statistics and the
 * fragments' latest Δ̄ (docs/outer.md, "Streaming"). */
typedef struct stream {
    int F;
    long round;         /* the round being trained */
    long tau;           /* τ of this round */
    double *lr_at;      /* [F] Σ η so far at each fragment's last sync (site 0's: they agree) */
    long *step_at;      /* [F] the inner step of each fragment's last sync */
    double lr_cum;      /* Σ η so far */
    int pend;           /* the fragment whose exchange is in flight (-1: none) */
    long pend_at;       /* ... the inner step at which it merges */
    double pend_comm;   /* ... and its exchange's seconds on the WAN model */
    double visible;     /* exchange seconds not hidden behind compute, this round */
    double *fsq;        /* [M·F] each site's ‖Δ^m‖² at each fragment's last sync */
    int *out;           /* [M] sites refused or left out this round */
    al_site_stats *rst; /* [M] each site's round (loss and grad norm summed over steps) */
    json_t *refused;    /* this round's refusals (borrowed), or NULL */
} stream;

static void stream_free(stream *st) {
    free(st->lr_at);
    free(st->step_at);
    free(st->fsq);
    free(st->out);
    free(st->rst);
}

/* Add the statistics of a span of inner steps to a round's. */
static void add_span(al_site_stats *r, const al_site_stats *sp) {
    r->loss += sp->loss * (double)sp->steps;
    r->grad_norm += sp->grad_norm * (double)sp->steps;
    r->lr_sum += sp->lr_sum;
    r->lr_sq_sum += sp->lr_sq_sum;
    r->lr_last = sp->lr_last;
    r->tokens += sp->tokens;
    r->compute_s += sp->compute_s;
}

/* The fragment in flight arrives: on every site, its progress since the sync
 * is re-based onto the θ_global the fragment committed. A site whose θ went
 * non-finite meanwhile starts again from θ_global. */
static void stream_merge(sim *s, stream *st, al_sim_result *res) {
    if (st->pend < 0) return;
    size_t lo, hi;
    al_shard_range(s->P, st->F, st->pend, &lo, &hi);
    for (int m = 0; m < s->M; m++) {
        float *th = s->tr[m].model.params;
        const al_sim_opts *o = s->o;
        if (o->fault_at_merge && st->round == o->nan_round && m == o->nan_site && st->pend == 0)
            th[lo] = o->fault_value;
        double sq;
        al_err why = {0};
        if (al_commit_merge(th + lo, s->from[m] + lo, s->outer[m].theta + lo, hi - lo,
                            s->delta[m] + lo, &sq, &why)) {
            memcpy(th, s->outer[m].theta, s->P * sizeof(float));
            st->out[m] = 1;
            res->dropped++;
            al_err_prefix(&why,
                          "theta went bad beside the fragment's exchange, reset to theta_global");
            if (st->refused)
                json_array_append_new(st->refused, json_pack("{s:i, s:i, s:s}", "site", m,
                                                             "fragment", st->pend, "why", why.msg));
        }
    }
    st->pend = -1;
}

/* Every site trains inner steps [a, b); the fragment in flight merges at its
 * step, or at b at the latest (before the next fragment's sync). */
static int stream_train(sim *s, stream *st, al_sim_result *res, long a, long b, al_err *err) {
    long cut = st->pend < 0 ? b : AL_MIN(AL_MAX(st->pend_at, a), b);
    for (int half = 0; half < 2; half++) {
        long from = half ? cut : a, to = half ? b : cut;
        double cmax = 0;
        for (int m = 0; m < s->M && to > from; m++) {
            al_site_stats sp;
            int rc = sim_run_interval(s, m, from, to - from, &sp, err);
            if (rc) return rc;
            add_span(&st->rst[m], &sp);
            if (m == 0) st->lr_cum += sp.lr_sum;
            cmax = fmax(cmax, sp.compute_s);
        }
        if (half == 0 && st->pend >= 0) { /* the exchange ran beside these steps */
            st->visible += fmax(0, st->pend_comm - cmax);
            stream_merge(s, st, res);
        }
    }
    return 0;
}

/* Fragment p synchronises at inner step b: Δ^m_p, outliers, the exchange
 * through the codec, and the step of that fragment on every replica (whose
 * hashes must agree). *comm: the exchange's seconds; *bytes: summed over sites. */
static int stream_sync(sim *s, stream *st, int p, long b, long round, json_t *refused,
                       al_sim_result *res, double *comm, double *bytes, al_err *err) {
    const al_sim_opts *o = s->o;
    size_t lo, hi;
    al_shard_range(s->P, st->F, p, &lo, &hi);
    size_t n = hi - lo;
    const float *dptr[AL_COMMIT_MAX_MEMBERS];
    int live = 0;
    for (int m = 0; m < s->M; m++) {
        float *th = s->tr[m].model.params;
        if (round == o->nan_round && m == o->nan_site && p == 0 && !o->fault_at_merge)
            th[lo] = o->fault_value;
        al_err why = {0};
        double sq;
        if (al_pseudo_grad(s->delta[m] + lo, s->outer[m].theta + lo, th + lo, n, &sq, &why)) {
            memcpy(th, s->outer[m].theta, s->P * sizeof(float)); /* starts again from θ_global */
            st->out[m] = 1;
            json_array_append_new(
                refused, json_pack("{s:i, s:i, s:s}", "site", m, "fragment", p, "why", why.msg));
            res->dropped++;
        } else {
            s->members[live] = m;
            s->claim[live] = sq;
            dptr[live] = s->delta[m] + lo;
            s->ss[live++] = (al_site_stats){.site = m, .delta_sq = sq};
            st->fsq[(size_t)m * (size_t)st->F + (size_t)p] = sq;
        }
        memcpy(s->from[m] + lo, th + lo, n * sizeof(float));
    }
    if (live == 0)
        return al_errf(err, AL_ENUMERIC, "sim: round %ld, fragment %d: every site's Δ was refused",
                       round, p);
    double med = 0;
    if (al_commit_outliers(s->ss, live, o->max_delta_ratio, s->left_out, &med) > 0)
        for (int j = 0; j < live; j++)
            if (s->left_out[j]) {
                char why[160];
                sim_outlier_why(why, sizeof why, s->ss[j].delta_sq, med, o->max_delta_ratio);
                json_array_append_new(refused, json_pack("{s:i, s:i, s:s}", "site", s->members[j],
                                                         "fragment", p, "why", why));
                st->out[s->members[j]] = 1;
            }
    int rc = al_commit_exchange(&s->cc, dptr, s->members, s->left_out, s->claim, live, n,
                                s->dbar + lo, s->sent, NULL, err);
    if (rc) return al_err_prefix(err, "sim: round %ld, fragment %d", round, p);
    /* S of the fragment's own span, since its last sync */
    double S = o->progress == AL_SIM_PROGRESS_LR ? st->lr_cum - st->lr_at[p]
                                                 : (double)(b - st->step_at[p]);
    st->lr_at[p] = st->lr_cum;
    st->step_at[p] = b;
    /* stream_eager: while the exchange is in flight, each live site trains the
     * fragment from its own guess of the new θ_global (the outer step with its
     * Δ^m for Δ̄, on a scratch copy of the fragment's state), not from where
     * it stood, which lags θ_global by the whole outer step */
    /* (S = 0: no inner step since the fragment's last sync, as when H < F: the
     * fragment takes no outer step, and its guess is θ_global itself) */
    for (int j = 0; j < live && o->stream_eager && S > 0; j++) {
        int m = s->members[j];
        if (!s->eager.theta &&
            (rc = al_outer_init(&s->eager, &s->outer[m].cfg, s->outer[m].theta, s->P, err)))
            return rc;
        memcpy(s->eager.theta + lo, s->outer[m].theta + lo, n * sizeof(float));
        memcpy(s->eager.mom + lo, s->outer[m].mom + lo, n * sizeof(float));
        if ((rc = al_outer_step_part(&s->eager, s->delta[m] + lo, lo, hi, S, err))) return rc;
        memcpy(s->tr[m].model.params + lo, s->eager.theta + lo, n * sizeof(float));
        memcpy(s->from[m] + lo, s->eager.theta + lo, n * sizeof(float));
    }
    char hash0[65], hm[65];
    for (int m = 0; m < s->M; m++) {
        if (S > 0 && (rc = al_outer_step_part(&s->outer[m], s->dbar + lo, lo, hi, S, err)))
            return rc;
        al_outer_hash(&s->outer[m], m == 0 ? hash0 : hm);
        if (m > 0 && strcmp(hash0, hm) != 0)
            return al_errf(err, AL_EINTEGRITY,
                           "sim: round %ld, fragment %d: θ_global of site %d "
                           "differs",
                           round, p, m);
    }
    double sent_max = 0;
    *bytes = 0;
    for (int j = 0; j < live; j++) {
        sent_max = fmax(sent_max, s->sent[j]);
        *bytes += s->sent[j];
    }
    *comm = s->M < 2 ? 0 : 2 * o->rtt_s + sent_max * 8 / o->bandwidth_bps;
    return 0;
}

int sim_run_rounds_stream(sim *s, const al_tokens *val, al_sim_result *res, al_err *err) {
    const al_sim_opts *o = s->o;
    int M = s->M, F = o->fragments, rc;
    if (F < 1 || (size_t)F > s->P)
        return al_errf(err, AL_EINVAL, "sim: overlap streaming: %d fragments of %zu parameters", F,
                       s->P);
    int64_t h;
    if ((rc = al_policy_start(o->policy, &h, err))) return rc;
    stream st = {.F = F, .pend = -1};
    st.lr_at = calloc((size_t)F, sizeof *st.lr_at);
    st.step_at = calloc((size_t)F, sizeof *st.step_at);
    st.fsq = calloc((size_t)M * (size_t)F, sizeof *st.fsq);
    st.out = calloc((size_t)M, sizeof *st.out);
    st.rst = calloc((size_t)M, sizeof *st.rst);
    if (!st.lr_at || !st.step_at || !st.fsq || !st.out || !st.rst) {
        stream_free(&st);
        return al_errf(err, AL_ENOMEM, "sim: out of memory");
    }
    long step = 0, round = 0, budget = o->train.steps;
    double t_overlap = 0, prev_comm = 0;
    while (step < budget && rc == 0) {
        long hr = AL_MIN((long)h, budget - step);
        if ((rc = sim_push_h(res, &s->cap_h, hr, err))) break;
        st.round = round;
        /* τ: the steps an exchange runs beside before its merge */
        st.tau = o->overlap_steps >= 0 ? o->overlap_steps : AL_MAX(1, hr / (2 * F));
        /* (AL_SIM_TAU_SYNC: the merge waits for the end of the next span) */
        for (int m = 0; m < M; m++) {
            st.rst[m] = (al_site_stats){.site = m};
            st.out[m] = 0;
        }
        json_t *refused = json_array();
        st.refused = refused;
        double comm_round = 0, bytes_round = 0;
        for (int p = 0; p < F && rc == 0; p++) {
            long a = step + hr * p / F, b = step + hr * (p + 1) / F;
            double comm = 0, bytes = 0;
            if ((rc = stream_train(s, &st, res, a, b, err))) break;
            if ((rc = stream_sync(s, &st, p, b, round, refused, res, &comm, &bytes, err))) break;
            comm_round += comm;
            bytes_round += bytes;
            st.pend = p;
            st.pend_at = o->overlap_steps == AL_SIM_TAU_SYNC ? LONG_MAX : b + st.tau;
            st.pend_comm = comm;
        }
        al_site_stats in_mean[AL_COMMIT_MAX_MEMBERS];
        int n_in = 0;
        double cmax = 0;
        for (int m = 0; m < M && rc == 0; m++) {
            cmax = fmax(cmax, st.rst[m].compute_s);
            if (st.out[m]) continue;
            al_site_stats x = st.rst[m];
            x.steps = hr;
            x.loss /= (double)hr;
            x.grad_norm /= (double)hr;
            x.comm_s = prev_comm;
            for (int p = 0; p < F; p++) x.delta_sq += st.fsq[(size_t)m * (size_t)F + (size_t)p];
            in_mean[n_in++] = x;
        }
        if (rc == 0 && n_in == 0)
            rc = al_errf(err, AL_ENUMERIC, "sim: round %ld: every site sat out", round);
        al_commit_decision d;
        if (rc == 0)
            rc = al_commit_decide(o->policy, in_mean, n_in, s->dbar, s->P, round, h, &d, err);
        if (rc) {
            json_decref(refused);
            st.refused = NULL;
            break;
        }
        step += hr;
        char hash0[65];
        al_outer_hash(&s->outer[0], hash0);
        res->syncs++;
        res->compute_s += cmax;
        res->comm_s += comm_round;
        res->bytes += bytes_round;
        res->final_train_loss = d.rs.loss;
        memcpy(res->hash, hash0, sizeof hash0);
        t_overlap += cmax + st.visible;
        st.visible = 0;
        prev_comm = comm_round;
        rc = sim_round_record(s, round, step, hr, n_in, &d, cmax, comm_round, bytes_round, hash0,
                              refused, err);
        json_decref(refused);
        st.refused = NULL;
        h = d.h_next;
        round++;
    }
    /* the end: the fragment in flight arrives, and every other fragment's
     * progress since its last sync is exchanged (blocking: no compute is left) */
    if (rc == 0) {
        t_overlap += st.pend_comm * (st.pend >= 0);
        stream_merge(s, &st, res);
        json_t *refused = json_array();
        for (int p = 0; p < F && rc == 0; p++) {
            if (st.step_at[p] >= budget) continue;
            double comm = 0, bytes = 0;
            rc = stream_sync(s, &st, p, budget, round, refused, res, &comm, &bytes, err);
            st.pend = p;
            stream_merge(s, &st, res);
            t_overlap += comm;
            res->comm_s += comm;
            res->bytes += bytes;
        }
        json_decref(refused);
    }
    stream_free(&st);
    if (rc) return rc;
    res->overlap_s = t_overlap;
    for (int m = 0; m < M; m++) /* every fragment's progress is in θ_global */
        memcpy(s->tr[m].model.params, s->outer[m].theta, s->P * sizeof(float));
    al_outer_hash(&s->outer[0], res->hash);
    return sim_finish_rounds(s, val, res, err);
}
