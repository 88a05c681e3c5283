/* sim.c -- M simulated sites in one process (see al_sim.h). */
#include "al_sim.h"

#include "al_round.h"
#include "sim_impl.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- options, seeds, the WAN model ------------------------------------------------------ */

void al_sim_opts_default(al_sim_opts *o) {
    memset(o, 0, sizeof *o);
    o->sites = 4;
    o->scenario = AL_SIM_IID;
    o->shift_at = 0.5;
    al_outer_cfg_default(&o->outer);
    o->progress = AL_SIM_PROGRESS_STEPS; /* the sweep's evidence: docs/outer.md */
    o->codec.kind = AL_CODEC_FP32;
    o->codec.block = 128;   /* as the agent: values per absmax scale for int8/int4 */
    o->max_delta_ratio = 4; /* as the agent's [outer] max_delta_ratio */
    o->bandwidth_bps = 1e9;
    o->rtt_s = 0.05;
    o->nan_site = -1;
    o->nan_round = -1;
    o->fault_value = NAN;
    o->fault_at_merge = false;
    o->fragments = 16;
    o->overlap_steps = -1;
    o->stream_eager = true;
}

static const char *const scenario_names[] = {"iid", "noniid", "shift", "languages"};

const char *al_sim_scenario_name(al_sim_scenario s) {
    return (unsigned)s < AL_ARRAY_LEN(scenario_names) ? scenario_names[s] : "?";
}

int al_sim_scenario_parse(const char *name, al_sim_scenario *out, al_err *err) {
    for (size_t i = 0; i < AL_ARRAY_LEN(scenario_names); i++)
        if (!strcmp(name, scenario_names[i])) {
            *out = (al_sim_scenario)i;
            return 0;
        }
    return al_errf(err, AL_ENOTFOUND,
                   "sim: unknown scenario '%s' (known: iid, noniid, shift, languages)", name);
}

double al_sim_project(double compute_s, long syncs, double bytes_per_site, double bandwidth_bps,
                      double rtt_s) {
    return compute_s + (double)syncs * 2 * rtt_s + bytes_per_site * 8 / bandwidth_bps;
}

/* Bytes one site sends in an fp32 all-reduce of P values (DDP's reduce-scatter
 * + all-gather; the outer rounds measure their encoded bytes instead). */
static double round_bytes_per_site(int m, size_t p, double bits) {
    if (m < 2) return 0;
    return ceil(2.0 * (double)(m - 1) / (double)m * (double)p * bits / 8.0);
}

void al_sim_result_free(al_sim_result *r) {
    free(r->h_history);
    free(r->theta);
    memset(r, 0, sizeof *r);
}

/* ---- data shards ------------------------------------------------------------------------ */

int al_sim_site_docs(const al_sim_opts *o, const al_tokens *train, int m, size_t *first,
                     size_t *end, al_err *err) {
    int M = o->sites;
    if (m < 0 || m >= M) return al_errf(err, AL_EINVAL, "sim: site %d not in [0, %d)", m, M);
    if (o->scenario == AL_SIM_IID) {
        *first = 0;
        *end = train->ndocs;
        return 0;
    }
    if (o->scenario == AL_SIM_LANGUAGES) {
        const al_groups *g = o->groups;
        if (!g)
            return al_errf(err, AL_EINVAL,
                           "sim: scenario languages needs the train file's groups (data prep "
                           "--groups)");
        if (g->n != M)
            return al_errf(err, AL_EMISMATCH,
                           "sim: scenario languages: %s has %d groups but there are %d sites (one "
                           "site per group: --sites %d)",
                           g->path, g->n, M, g->n);
        int rc = al_groups_check(g, train, err);
        if (rc) return rc;
        *first = g->first[m];
        *end = g->first[m + 1];
        return 0;
    }
    /* the m-th of M contiguous runs: data prep keeps documents in (sorted)
     * file order, so each site gets its own group of fortune files (a file
     * may straddle the cut between two sites) */
    *first = train->ndocs * (size_t)m / (size_t)M;
    *end = train->ndocs * (size_t)(m + 1) / (size_t)M;
    if (*end - *first < 1)
        return al_errf(err, AL_EINVAL, "sim: %zu documents cannot be split over %d sites",
                       train->ndocs, M);
    return 0;
}

/* Site m's own documents (al_sim_site_docs), copied with their boundaries
 * rebased. */
static int shard_docs(al_tokens *out, const al_sim_opts *o, const al_tokens *all, int m,
                      al_err *err) {
    memset(out, 0, sizeof *out);
    size_t a, b;
    int rc = al_sim_site_docs(o, all, m, &a, &b, err);
    if (rc) return rc;
    /* tokens from document a's EOT through document b's EOT (the last target) */
    size_t t0 = all->doc[a], t1 = all->doc[b] + 1;
    out->n = t1 - t0;
    out->ndocs = b - a;
    out->tok = malloc(out->n * sizeof *out->tok);
    out->doc = malloc((out->ndocs + 1) * sizeof *out->doc);
    if (!out->tok || !out->doc) {
        al_tokens_free(out);
        return al_errf(err, AL_ENOMEM, "sim: out of memory");
    }
    memcpy(out->tok, all->tok + t0, out->n * sizeof *out->tok);
    for (size_t k = 0; k <= out->ndocs; k++) out->doc[k] = all->doc[a + k] - t0;
    out->vocab = all->vocab;
    out->eot = all->eot;
    if (o->scenario == AL_SIM_LANGUAGES)
        snprintf(out->path, sizeof out->path, "%.440s[site %d: %s]", all->path, m,
                 o->groups->name[m]);
    else
        snprintf(out->path, sizeof out->path, "%.480s[site %d]", all->path, m);
    return 0;
}

static void sim_free(sim *s) {
    for (int m = 0; m < s->M; m++) {
        if (s->tr) al_trainer_free(&s->tr[m]);
        if (s->outer) al_outer_free(&s->outer[m]);
        if (s->delta) free(s->delta[m]);
        if (s->from) free(s->from[m]);
        if (s->shard) al_tokens_free(&s->shard[m]);
        if (s->ld) al_loader_free(&s->ld[m]);
        if (s->late) al_loader_free(&s->late[m]);
    }
    if (s->mbs)
        for (int i = 0; i < s->M * s->o->train.accum; i++) al_batch_free(&s->mbs[i]);
    free(s->tr);
    free(s->outer);
    free(s->delta);
    free(s->from);
    al_outer_free(&s->eager);
    free(s->shard);
    free(s->ld);
    free(s->late);
    free(s->mbs);
    free(s->dbar);
    free(s->dbar_prev);
    free(s->blend);
    free(s->ss);
    free(s->sent);
    free(s->members);
    free(s->left_out);
    free(s->claim);
    al_commit_codec_free(&s->cc);
}

/* The data site m starts on. */
static const al_tokens *site_data(const sim *s, const al_tokens *train, int m) {
    return s->o->scenario == AL_SIM_NONIID || s->o->scenario == AL_SIM_LANGUAGES ? &s->shard[m]
                                                                                 : train;
}

/* SHIFT: at the start of inner step `step`, site m's loader `ld` moves to its
 * shard (every site at the same step). The IID loader is kept in s->late[m]
 * for freeing. */
static void maybe_shift(sim *s, int m, long step, al_loader *ld) {
    if (s->o->scenario != AL_SIM_SHIFT || step != s->shift_step) return;
    al_loader t = *ld;
    *ld = s->late[m];
    s->late[m] = t;
}

int sim_push_h(al_sim_result *r, long *cap, long h, al_err *err) {
    if (r->n_h == *cap) {
        long nc = *cap ? 2 * *cap : 64;
        long *nh = realloc(r->h_history, (size_t)nc * sizeof *nh);
        if (!nh) return al_errf(err, AL_ENOMEM, "sim: out of memory");
        r->h_history = nh;
        *cap = nc;
    }
    r->h_history[r->n_h++] = h;
    return 0;
}

/* The eval loss of θ_global. With overlap the site's own θ is not θ_global
 * mid-run: it is set aside (in dbar, free between rounds) and put back. */
int sim_evaluate(sim *s, al_trainer *tr, double *loss, al_err *err) {
    int swap = s->o->overlap != AL_OVERLAP_NONE && s->outer &&
               memcmp(tr->model.params, s->outer[0].theta, s->P * sizeof(float)) != 0;
    if (swap) {
        memcpy(s->dbar, tr->model.params, s->P * sizeof(float));
        memcpy(tr->model.params, s->outer[0].theta, s->P * sizeof(float));
    }
    int rc = al_trainer_eval(tr, s->o->eval_batches, loss, err);
    if (swap) memcpy(tr->model.params, s->dbar, s->P * sizeof(float));
    return rc ? al_err_prefix(err, "sim: evaluation") : 0;
}

/* The policy's state ("k=v" lines, values exact) as a JSON object, for the log. */
static json_t *policy_state_json(const al_policy *p) {
    char buf[1024];
    al_policy_save(p, buf, sizeof buf);
    json_t *obj = json_object();
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = '\0';
        char *end;
        double v = strtod(eq + 1, &end);
        if (end != eq + 1 && *end == '\0') json_object_set_new(obj, line, json_real(v));
    }
    return obj;
}

static void write_record(FILE *f, json_t *rec) {
    char *line = json_dumps(rec, JSON_COMPACT);
    if (line) fprintf(f, "%s\n", line);
    free(line);
    fflush(f);
}

/* The round's JSONL record (and, every eval_every rounds, the eval loss of
 * θ_global), when asked for. */
int sim_round_record(sim *s, long round, long step, long hr, int live, const al_commit_decision *d,
                     double cmax, double comm, double bytes_round, const char *hash0,
                     json_t *refused, al_err *err) {
    const al_sim_opts *o = s->o;
    const al_round_stats rs = d->rs;
    al_outer_coefs k = s->outer[0].last;
    int rc = 0;
    if (o->jsonl || (o->eval_every > 0 && (round + 1) % o->eval_every == 0)) {
        json_t *rec = json_object();
        json_object_set_new(rec, "round", json_integer(round));
        json_object_set_new(rec, "step", json_integer(step));
        json_object_set_new(rec, "h", json_integer(hr));
        json_object_set_new(rec, "h_next", json_integer(d->h_next));
        json_object_set_new(rec, "live", json_integer(live));
        json_object_set_new(rec, "loss", json_real(rs.loss));
        json_object_set_new(rec, "grad_norm", json_real(rs.grad_norm));
        json_object_set_new(rec, "delta_sq_mean", json_real(rs.delta_sq_mean));
        json_object_set_new(rec, "mean_delta_sq", json_real(rs.mean_delta_sq));
        double rho, c;
        if (al_coherence(&rs, &rho, &c, NULL) == 0) {
            json_object_set_new(rec, "rho", json_real(rho));
            json_object_set_new(rec, "coherence", json_real(c));
        }
        json_object_set_new(rec, "lr_sum", json_real(rs.lr_sum));
        json_object_set_new(rec, "lr_last", json_real(rs.lr_last));
        json_object_set_new(rec, "mu_r", json_real(k.mu));
        json_object_set_new(rec, "w_r", json_real(k.w));
        json_object_set_new(rec, "scale", json_real(k.scale));
        json_object_set_new(rec, "compute_s", json_real(cmax));
        json_object_set_new(rec, "comm_s", json_real(comm));
        json_object_set_new(rec, "comm_floor", json_real(d->comm_floor));
        json_object_set_new(rec, "bytes_per_site", json_real(bytes_round / s->M));
        json_object_set_new(rec, "hash", json_string(hash0));
        json_object_set_new(rec, "policy", policy_state_json(o->policy));
        json_object_set_new(rec, "refused", json_incref(refused));
        if (o->eval_every > 0 && (round + 1) % o->eval_every == 0) {
            double vl;
            if ((rc = sim_evaluate(s, &s->tr[0], &vl, err))) {
                json_decref(rec);
                return rc;
            }
            json_object_set_new(rec, "eval_loss", json_real(vl));
        }
        if (o->jsonl) write_record(o->jsonl, rec);
        json_decref(rec);
    }
    return rc;
}

/* After the last round: bytes per site, the eval loss and a copy of θ_global. */
int sim_finish_rounds(sim *s, const al_tokens *val, al_sim_result *res, al_err *err) {
    int rc = 0;
    res->bytes_per_site = res->bytes / s->M;
    if (val) rc = sim_evaluate(s, &s->tr[0], &res->final_eval_loss, err);
    if (rc == 0) {
        res->nparams = s->P;
        res->theta = malloc(s->P * sizeof(float));
        if (!res->theta) return al_errf(err, AL_ENOMEM, "sim: out of memory");
        memcpy(res->theta, s->outer[0].theta, s->P * sizeof(float));
    }
    return rc;
}

/* ---- one round of the DiLoCo/AutoLoCo loop ---------------------------------------------- */

void sim_outlier_why(char *buf, size_t n, double delta_sq, double med, double ratio) {
    double nrm = sqrt(delta_sq);
    snprintf(buf, n, "|delta| %.4g is %.1f x the median %.4g (max_delta_ratio %g)", nrm, nrm / med,
             med, ratio);
}

/* Site m runs h inner steps from θ_global (the run's inner steps step0 ..
 * step0+h−1) and reports its interval's statistics. */
int sim_run_interval(sim *s, int m, long step0, long h, al_site_stats *st, al_err *err) {
    al_trainer *tr = &s->tr[m];
    memset(st, 0, sizeof *st);
    st->site = m;
    st->steps = h;
    for (long k = 0; k < h; k++) {
        maybe_shift(s, m, step0 + k, &tr->train);
        al_step_stats ss;
        int rc = al_trainer_step(tr, &ss, err);
        if (rc) return al_err_prefix(err, "sim: site %d", m);
        st->loss += ss.loss;
        st->grad_norm += ss.grad_norm;
        st->lr_sum += ss.lr;
        st->lr_sq_sum = fma(ss.lr, ss.lr, st->lr_sq_sum);
        st->lr_last = ss.lr;
        st->tokens += ss.tokens;
        st->compute_s += ss.seconds;
    }
    st->loss /= (double)h;
    st->grad_norm /= (double)h;
    return 0;
}

/* Overlap delayed: interval r + 1 starts before round r commits, from the
 * outer step this site would take with its own Δ^m_r for Δ̄_r (the "eager"
 * estimate of θ_{r+1}: docs/outer.md). The committed state is untouched. */
static int eager_start(sim *s, int m, const al_site_stats *st, al_err *err) {
    double s_r = s->o->progress == AL_SIM_PROGRESS_LR ? st->lr_sum : (double)st->steps;
    al_eager_in in = {.delta = s->delta[m], .blend = s->blend, .M = s->M_prev};
    if (s->o->overlap == AL_OVERLAP_DELAYED_MID) in.from = s->from[m];
    if (s->have_prev) in.dbar_prev = s->dbar_prev; /* delayed-mean only */
    return al_commit_eager(&s->eager, &s->outer[m], &in, s_r, s->tr[m].model.params, err);
}

/* One round of the outer loop, as the agents do it (al_round.h): each site's
 * Δ^m and statistics; sites whose Δ is not finite sit the round out (logged in
 * `refused`); outliers by ‖Δ^m‖ are left out of the mean (max_delta_ratio);
 * the exchange through the codec; the policy's decision once; the outer step
 * on every site's own replica, whose hashes must agree. */
static int run_rounds(sim *s, const al_tokens *val, al_sim_result *res, al_err *err) {
    const al_sim_opts *o = s->o;
    int M = s->M, rc;
    int64_t h;
    if ((rc = al_policy_start(o->policy, &h, err))) return rc;
    long step = 0, round = 0, budget = o->train.steps;
    double prev_comm = 0; /* the WAN model's seconds for the last exchange: each site's comm_s */
    /* overlap delayed: the H the decision of the round before set (interval
     * r + 1 starts before round r's decision), and the projected time */
    int delayed = o->overlap != AL_OVERLAP_NONE;
    int64_t h_queued = h;
    double t_overlap = 0;
    const float **dptr = malloc((size_t)M * sizeof *dptr);
    if (!dptr) return al_errf(err, AL_ENOMEM, "sim: out of memory");
    while (step < budget) {
        long hr = AL_MIN((long)h, budget - step);
        if ((rc = sim_push_h(res, &s->cap_h, hr, err))) break;
        double cmax = 0;
        int live = 0;
        json_t *refused = json_array();
        for (int m = 0; m < M; m++) {
            al_site_stats st;
            if (delayed) memcpy(s->from[m], s->tr[m].model.params, s->P * sizeof(float));
            if ((rc = sim_run_interval(s, m, step, hr, &st, err))) break;
            st.comm_s = prev_comm;
            cmax = fmax(cmax, st.compute_s);
            if (round == o->nan_round && m == o->nan_site)
                s->tr[m].model.params[0] = o->fault_value;
            al_err why = {0};
            /* delayed: the interval's progress re-based onto θ_global as committed by
             * the round before (whose exchange ran while it trained) */
            int bad = delayed
                          ? al_commit_merge(s->tr[m].model.params, s->from[m], s->outer[m].theta,
                                            s->P, s->delta[m], &st.delta_sq, &why)
                          : al_pseudo_grad(s->delta[m], s->outer[m].theta, s->tr[m].model.params,
                                           s->P, &st.delta_sq, &why);
            if (bad == 0 && delayed) /* the next interval starts at the eager estimate */
                bad = eager_start(s, m, &st, &why);
            if (bad != 0) {  /* refused: it sits the round out */
                if (delayed) /* and starts again from θ_global (blocking does so anyway) */
                    memcpy(s->tr[m].model.params, s->outer[m].theta, s->P * sizeof(float));
                json_array_append_new(refused, json_pack("{s:i, s:s}", "site", m, "why", why.msg));
                res->dropped++;
                continue;
            }
            s->members[live] = m;
            s->claim[live] = st.delta_sq;
            dptr[live] = s->delta[m];
            s->ss[live++] = st;
        }
        if (rc == 0 && live == 0)
            rc = al_errf(err, AL_ENUMERIC, "sim: round %ld: every site's Δ was refused", round);
        double med = 0;
        int n_out = rc ? 0 : al_commit_outliers(s->ss, live, o->max_delta_ratio, s->left_out, &med);
        for (int j = 0; j < live && n_out > 0; j++)
            if (s->left_out[j]) {
                char why[160];
                sim_outlier_why(why, sizeof why, s->ss[j].delta_sq, med, o->max_delta_ratio);
                json_array_append_new(refused,
                                      json_pack("{s:i, s:s}", "site", s->members[j], "why", why));
            }
        if (rc == 0)
            rc = al_commit_exchange(&s->cc, dptr, s->members, s->left_out, s->claim, live, s->P,
                                    s->dbar, s->sent, NULL, err);
        al_commit_decision d;
        al_site_stats in_mean[AL_COMMIT_MAX_MEMBERS];
        int n_in = 0;
        for (int j = 0; j < live && rc == 0; j++)
            if (!s->left_out[j]) in_mean[n_in++] = s->ss[j];
        if (rc == 0)
            rc = al_commit_decide(o->policy, in_mean, n_in, s->dbar, s->P, round, h, &d, err);
        /* every site applies the same step to its own replica; all must agree */
        char hash0[65], hm[65];
        for (int m = 0; m < M && rc == 0; m++) {
            rc = al_commit_step(&s->outer[m], s->dbar, &d, o->progress == AL_SIM_PROGRESS_LR, err);
            if (rc) break;
            al_outer_hash(&s->outer[m], m == 0 ? hash0 : hm);
            if (m > 0 && strcmp(hash0, hm) != 0)
                rc = al_errf(err, AL_EINTEGRITY, "sim: round %ld: θ_global of site %d differs",
                             round, m);
        }
        if (rc) {
            json_decref(refused);
            break;
        }
        /* overlap delayed-mean: the next eager steps guess the others' Δ by this mean */
        if (o->overlap == AL_OVERLAP_DELAYED_MEAN) {
            memcpy(s->dbar_prev, s->dbar, s->P * sizeof(float));
            s->have_prev = 1;
            s->M_prev = n_in;
        }
        const al_round_stats rs = d.rs;
        int64_t h_next = d.h_next;
        double sent_max = 0, bytes_round = 0;
        for (int j = 0; j < live; j++) {
            sent_max = fmax(sent_max, s->sent[j]);
            bytes_round += s->sent[j];
        }
        if (!delayed)
            for (int m = 0; m < M; m++) /* θ^m ← θ_global; AdamW state stays local */
                memcpy(s->tr[m].model.params, s->outer[m].theta, s->P * sizeof(float));
        step += hr;
        res->syncs++;
        /* the exchange ends when the site with the most bytes is done */
        double comm = M < 2 ? 0 : 2 * o->rtt_s + sent_max * 8 / o->bandwidth_bps;
        /* with overlap, round r's exchange runs beside interval r + 1: a round
         * costs the longer of the two (the first interval and the last
         * exchange stand alone) */
        t_overlap += round == 0 ? cmax : fmax(cmax, prev_comm);
        prev_comm = comm;
        res->compute_s += cmax;
        res->comm_s += comm;
        res->bytes += bytes_round;
        res->final_train_loss = rs.loss;
        memcpy(res->hash, hash0, sizeof hash0);
        if ((rc = sim_round_record(s, round, step, hr, live, &d, cmax, comm, bytes_round, hash0,
                                   refused, err))) {
            json_decref(refused);
            break;
        }
        json_decref(refused);
        if (delayed) { /* round r's decision sets interval r + 2; r + 1 runs what r - 1 set */
            h = h_queued;
            h_queued = h_next;
        } else {
            h = h_next;
        }
        round++;
    }
    free(dptr);
    if (rc) return rc;
    res->overlap_s = t_overlap + prev_comm;
    if (delayed) /* the last interval's progress is in the last round's Δ: it is θ_global */
        for (int m = 0; m < M; m++)
            memcpy(s->tr[m].model.params, s->outer[m].theta, s->P * sizeof(float));
    return sim_finish_rounds(s, val, res, err);
}

/* ---- DDP: one model, every step averages the gradients of M sites' microbatches -------- */

static int run_ddp(sim *s, const al_tokens *val, al_sim_result *res, al_err *err) {
    const al_sim_opts *o = s->o;
    int M = s->M, A = o->train.accum, rc = 0;
    al_trainer *tr = &s->tr[0];
    double bytes_step = round_bytes_per_site(M, s->P, 32); /* fp32 all-reduce */
    double loss_sum = 0;
    long loss_n = 0;
    for (long step = 0; step < o->train.steps; step++) {
        for (int m = 0; m < M; m++) {
            maybe_shift(s, m, step, &s->ld[m]);
            for (int a = 0; a < A; a++) al_loader_next(&s->ld[m], &s->mbs[m * A + a]);
        }
        al_step_stats st;
        /* the loss (and gradient) is the mean over every target of the M·A
         * microbatches: a global batch M times a site's, averaged */
        if ((rc = al_trainer_step_batches(tr, s->mbs, M * A, &st, err))) return rc;
        res->syncs++;
        res->compute_s += st.seconds / M; /* each site computes 1/M of the step */
        res->comm_s += 2 * o->rtt_s + bytes_step * 8 / o->bandwidth_bps;
        res->bytes_per_site += bytes_step;
        if (step >= o->train.steps - 100) {
            loss_sum += st.loss;
            loss_n++;
        }
        if (o->jsonl && (step + 1) % 100 == 0) {
            json_t *rec = json_pack("{s:I, s:f, s:f, s:f}", "step", (json_int_t)(step + 1), "loss",
                                    st.loss, "grad_norm", st.grad_norm, "lr", st.lr);
            write_record(o->jsonl, rec);
            json_decref(rec);
        }
    }
    res->final_train_loss = loss_n ? loss_sum / (double)loss_n : NAN;
    res->bytes = res->bytes_per_site * M;
    al_theta_hash(tr->model.params, s->P, res->hash);
    if (val && (rc = sim_evaluate(s, tr, &res->final_eval_loss, err))) return rc;
    res->nparams = s->P;
    res->theta = malloc(s->P * sizeof(float));
    if (!res->theta) return al_errf(err, AL_ENOMEM, "sim: out of memory");
    memcpy(res->theta, tr->model.params, s->P * sizeof(float));
    return 0;
}

/* ---- setup -------------------------------------------------------------------------------- */

static int sim_init(sim *s, const al_sim_opts *o, const al_tokens *train, const al_tokens *val,
                    al_err *err) {
    memset(s, 0, sizeof *s);
    s->o = o;
    int M = s->M = o->sites;
    if (M < 1 || M > 256) return al_errf(err, AL_EINVAL, "sim: sites = %d not in [1, 256]", M);
    if (o->train.steps < 1) return al_errf(err, AL_EINVAL, "sim: steps must be >= 1");
    if (!(o->bandwidth_bps > 0) || !(o->rtt_s >= 0))
        return al_errf(err, AL_EINVAL, "sim: bandwidth must be > 0 and rtt >= 0");
    if (!o->ddp && !o->policy) return al_errf(err, AL_EINVAL, "sim: no policy given");
    int nt = o->ddp ? 1 : M;
    s->tr = calloc((size_t)M, sizeof *s->tr);
    s->shard = calloc((size_t)M, sizeof *s->shard);
    if (!s->tr || !s->shard) return al_errf(err, AL_ENOMEM, "sim: out of memory");
    int rc = 0;
    if (o->scenario == AL_SIM_SHIFT && !(o->shift_at >= 0 && o->shift_at <= 1))
        return al_errf(err, AL_EINVAL, "sim: shift_at = %g not in [0, 1]", o->shift_at);
    s->shift_step = (long)floor(o->shift_at * (double)o->train.steps);
    if (o->scenario != AL_SIM_IID)
        for (int m = 0; m < M && rc == 0; m++) rc = shard_docs(&s->shard[m], o, train, m, err);
    if (rc == 0 && o->scenario == AL_SIM_SHIFT) {
        if (!(s->late = calloc((size_t)M, sizeof *s->late)))
            return al_errf(err, AL_ENOMEM, "sim: out of memory");
        for (int m = 0; m < M && rc == 0; m++)
            rc = al_loader_init(&s->late[m], &s->shard[m], o->train.packing, 1,
                                al_site_data_seed(o->train.seed, m), err);
    }
    /* every replica starts from the same weights (init seed = run seed); only
     * the data order differs: each site's loader gets its own seed */
    for (int m = 0; m < nt && rc == 0; m++) {
        rc = al_trainer_init(&s->tr[m], &o->model, &o->train,
                             o->ddp ? NULL : site_data(s, train, m), m == 0 ? val : NULL, err);
        if (rc == 0 && !o->ddp) {
            al_loader_free(&s->tr[m].train);
            rc = al_loader_init(&s->tr[m].train, site_data(s, train, m), o->train.packing, 1,
                                al_site_data_seed(o->train.seed, m), err);
        }
    }
    if (rc) return rc;
    s->P = s->tr[0].model.lay.nparams;
    if (o->ddp) {
        int A = o->train.accum;
        s->ld = calloc((size_t)M, sizeof *s->ld);
        s->mbs = calloc((size_t)(M * A), sizeof *s->mbs);
        if (!s->ld || !s->mbs) return al_errf(err, AL_ENOMEM, "sim: out of memory");
        for (int m = 0; m < M && rc == 0; m++)
            rc = al_loader_init(&s->ld[m], site_data(s, train, m), o->train.packing, 1,
                                al_site_data_seed(o->train.seed, m), err);
        for (int i = 0; i < M * A && rc == 0; i++)
            rc = al_batch_init(&s->mbs[i], s->tr[0].o.batch, s->tr[0].o.seq, err);
        return rc;
    }
    al_outer_cfg oc = o->outer;
    if (oc.s_ref == 0)
        oc.s_ref =
            al_policy_h_base(o->policy) * (o->progress == AL_SIM_PROGRESS_STEPS ? 1 : o->train.lr);
    if ((rc = al_outer_cfg_check(&oc, err))) return rc;
    s->outer = calloc((size_t)M, sizeof *s->outer);
    s->delta = calloc((size_t)M, sizeof *s->delta);
    s->from = calloc((size_t)M, sizeof *s->from);
    s->ss = calloc((size_t)M, sizeof *s->ss);
    s->dbar = malloc(s->P * sizeof(float));
    if (o->overlap == AL_OVERLAP_DELAYED_MEAN) /* its eager step's last mean */
        if (!(s->dbar_prev = malloc(s->P * sizeof(float))))
            return al_errf(err, AL_ENOMEM, "sim: out of memory");
    if (o->overlap == AL_OVERLAP_DELAYED_MEAN || o->overlap == AL_OVERLAP_DELAYED_MID)
        if (!(s->blend = malloc(s->P * sizeof(float)))) /* the eager step's Δ̂ */
            return al_errf(err, AL_ENOMEM, "sim: out of memory");
    if (!s->outer || !s->delta || !s->from || !s->ss || !s->dbar)
        return al_errf(err, AL_ENOMEM, "sim: out of memory");
    for (int m = 0; m < M && rc == 0; m++) {
        rc = al_outer_init(&s->outer[m], &oc, s->tr[0].model.params, s->P, err);
        if (rc == 0 && !(s->delta[m] = malloc(s->P * sizeof(float))))
            rc = al_errf(err, AL_ENOMEM, "sim: out of memory");
        if (rc == 0 && o->overlap != AL_OVERLAP_NONE &&
            !(s->from[m] = malloc(s->P * sizeof(float))))
            rc = al_errf(err, AL_ENOMEM, "sim: out of memory");
    }
    if (rc) return rc;
    s->sent = calloc((size_t)M, sizeof *s->sent);
    s->members = calloc((size_t)M, sizeof *s->members);
    s->left_out = calloc((size_t)M, sizeof *s->left_out);
    s->claim = calloc((size_t)M, sizeof *s->claim);
    if (!s->sent || !s->members || !s->left_out || !s->claim)
        return al_errf(err, AL_ENOMEM, "sim: out of memory");
    return al_commit_codec_init(&s->cc, &o->codec, err);
}

int al_sim_run(const al_sim_opts *o, const al_tokens *train, const al_tokens *val,
               al_sim_result *res, al_err *err) {
    memset(res, 0, sizeof *res);
    double t0 = al_now();
    sim s;
    int rc = sim_init(&s, o, train, val, err);
    if (rc == 0)
        rc = o->ddp                               ? run_ddp(&s, val, res, err)
             : o->overlap == AL_OVERLAP_STREAMING ? sim_run_rounds_stream(&s, val, res, err)
                                                  : run_rounds(&s, val, res, err);
    sim_free(&s);
    if (rc) {
        al_sim_result_free(res);
        return rc;
    }
    res->steps = o->train.steps;
    res->projected_s = res->compute_s + res->comm_s;
    if (o->ddp || o->overlap == AL_OVERLAP_NONE) res->overlap_s = res->projected_s;
    double bps = res->bytes_per_site;
    res->projected_1g_s = al_sim_project(res->compute_s, res->syncs, bps, 1e9, 0.05);
    res->projected_100m_s = al_sim_project(res->compute_s, res->syncs, bps, 1e8, 0.05);
    res->wall_s = al_now() - t0;
    return 0;
}

char *al_sim_result_json(const al_sim_opts *o, const al_sim_result *r) {
    json_t *j = json_object();
    json_object_set_new(j, "policy", json_string(o->ddp ? "ddp" : al_policy_name(o->policy)));
    json_object_set_new(j, "correction",
                        json_string(o->ddp ? "-" : al_correction_name(o->outer.correction)));
    if (!o->ddp) {
        char settings[1024];
        al_policy_settings(o->policy, settings, sizeof settings);
        json_object_set_new(j, "settings", json_string(settings));
        json_object_set_new(j, "h_base", json_real(al_policy_h_base(o->policy)));
    }
    json_object_set_new(j, "preset", json_string(o->model.preset));
    json_object_set_new(j, "scenario", json_string(al_sim_scenario_name(o->scenario)));
    if (o->scenario == AL_SIM_SHIFT) json_object_set_new(j, "shift_at", json_real(o->shift_at));
    if (o->scenario == AL_SIM_LANGUAGES && o->groups) { /* site m's group */
        json_t *g = json_array();
        for (int m = 0; m < o->groups->n; m++)
            json_array_append_new(g, json_string(o->groups->name[m]));
        json_object_set_new(j, "groups", g);
    }
    json_object_set_new(j, "sites", json_integer(o->sites));
    json_object_set_new(j, "iid", json_boolean(o->scenario == AL_SIM_IID));
    json_object_set_new(j, "seed", json_integer((json_int_t)o->train.seed));
    json_object_set_new(
        j, "codec", json_pack("s+", al_codec_name(o->codec.kind), o->codec.zstd ? "+zstd" : ""));
    json_object_set_new(j, "max_delta_ratio", json_real(o->max_delta_ratio));
    json_object_set_new(j, "overlap", json_string(al_overlap_name(o->overlap)));
    if (o->overlap == AL_OVERLAP_STREAMING) {
        json_object_set_new(j, "fragments", json_integer(o->fragments));
        json_object_set_new(j, "overlap_steps",
                            o->overlap_steps == AL_SIM_TAU_SYNC ? json_string("sync")
                                                                : json_integer(o->overlap_steps));
        json_object_set_new(j, "stream_eager", json_boolean(o->stream_eager));
    }
    json_object_set_new(j, "progress",
                        json_string(o->progress == AL_SIM_PROGRESS_STEPS ? "steps" : "lr"));
    json_object_set_new(j, "steps", json_integer(r->steps));
    json_object_set_new(j, "syncs", json_integer(r->syncs));
    json_object_set_new(j, "bytes", json_real(r->bytes));
    json_object_set_new(j, "bytes_per_site", json_real(r->bytes_per_site));
    json_object_set_new(j, "final_eval_loss", json_real(r->final_eval_loss));
    json_object_set_new(j, "final_train_loss", json_real(r->final_train_loss));
    json_t *hh = json_array();
    for (long i = 0; i < r->n_h; i++) json_array_append_new(hh, json_integer(r->h_history[i]));
    json_object_set_new(j, "h_history", hh);
    json_object_set_new(j, "dropped", json_integer(r->dropped));
    json_object_set_new(j, "compute_s", json_real(r->compute_s));
    json_object_set_new(j, "comm_s", json_real(r->comm_s));
    json_object_set_new(j, "projected_s", json_real(r->projected_s));
    json_object_set_new(j, "overlap_s", json_real(r->overlap_s));
    json_object_set_new(j, "projected_1g_s", json_real(r->projected_1g_s));
    json_object_set_new(j, "projected_100m_s", json_real(r->projected_100m_s));
    json_object_set_new(j, "wall_s", json_real(r->wall_s));
    json_object_set_new(j, "hash", json_string(r->hash));
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(j);
    return s;
}
