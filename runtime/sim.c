/* sim.c -- M simulated sites in one process (see al_sim.h). */
#include "al_sim.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- codec stand-ins (TODO(codec): replace with outer/al_codec.h) ------------------------ */

enum { QBLOCK = 128 };

/* bf16: keep the top 16 bits of the fp32 pattern, rounded to nearest even. */
static int rt_bf16(void *ctx, float *x, size_t n, al_err *err) {
    (void)ctx;
    (void)err;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        memcpy(&x[i], &u, 4);
    }
    return 0;
}

/* intN: per block of QBLOCK values, scale = absmax / qmax, q = round(x / scale). */
static int rt_int(float *x, size_t n, float qmax) {
    for (size_t b = 0; b < n; b += QBLOCK) {
        size_t e = AL_MIN(n, b + QBLOCK);
        float amax = 0;
        for (size_t i = b; i < e; i++) amax = fmaxf(amax, fabsf(x[i]));
        if (amax == 0) continue;
        float scale = amax / qmax;
        for (size_t i = b; i < e; i++) x[i] = roundf(x[i] / scale) * scale;
    }
    return 0;
}
static int rt_int8(void *ctx, float *x, size_t n, al_err *err) {
    (void)ctx;
    (void)err;
    return rt_int(x, n, 127.0f);
}
static int rt_int4(void *ctx, float *x, size_t n, al_err *err) {
    (void)ctx;
    (void)err;
    return rt_int(x, n, 7.0f);
}

int al_sim_codec_builtin(al_sim_codec *c, const char *name, al_err *err) {
    static const struct {
        const char *name;
        double bits;
        int (*rt)(void *, float *, size_t, al_err *);
    } table[] = {{"fp32", 32, NULL},
                 {"bf16", 16, rt_bf16},
                 {"int8", 8 + 32.0 / QBLOCK, rt_int8},
                 {"int4", 4 + 32.0 / QBLOCK, rt_int4}};
    for (size_t i = 0; i < AL_ARRAY_LEN(table); i++)
        if (!strcmp(name, table[i].name)) {
            memset(c, 0, sizeof *c);
            snprintf(c->name, sizeof c->name, "%s", name);
            c->bits = table[i].bits;
            c->roundtrip = table[i].rt;
            return 0;
        }
    return al_errf(err, AL_ENOTFOUND, "sim: unknown codec '%s' (known: fp32, bf16, int8, int4)",
                   name);
}

/* ---- options, seeds, the WAN model ------------------------------------------------------ */

void al_sim_opts_default(al_sim_opts *o) {
    memset(o, 0, sizeof *o);
    o->sites = 4;
    o->scenario = AL_SIM_IID;
    o->shift_at = 0.5;
    al_outer_cfg_default(&o->outer);
    o->progress = AL_SIM_PROGRESS_STEPS; /* the sweep's evidence: docs/outer.md */
    al_sim_codec_builtin(&o->codec, "fp32", NULL);
    o->bandwidth_bps = 1e9;
    o->rtt_s = 0.05;
    o->nan_site = -1;
    o->nan_round = -1;
}

static const char *const scenario_names[] = {"iid", "noniid", "shift"};

const char *al_sim_scenario_name(al_sim_scenario s) {
    return (unsigned)s < AL_ARRAY_LEN(scenario_names) ? scenario_names[s] : "?";
}

int al_sim_scenario_parse(const char *name, al_sim_scenario *out, al_err *err) {
    for (size_t i = 0; i < AL_ARRAY_LEN(scenario_names); i++)
        if (!strcmp(name, scenario_names[i])) {
            *out = (al_sim_scenario)i;
            return 0;
        }
    return al_errf(err, AL_ENOTFOUND, "sim: unknown scenario '%s' (known: iid, noniid, shift)",
                   name);
}

uint64_t al_sim_site_seed(uint64_t seed, int m) {
    uint64_t h = al_fnv1a64(&seed, sizeof seed, 0xcbf29ce484222325ull);
    return al_fnv1a64(&m, sizeof m, h);
}

double al_sim_project(double compute_s, long syncs, double bytes_per_site, double bandwidth_bps,
                      double rtt_s) {
    return compute_s + (double)syncs * 2 * rtt_s + bytes_per_site * 8 / bandwidth_bps;
}

/* Bytes one site sends in a round of reduce-scatter + all-gather of P values. */
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

/* Site m of M, non-IID: documents [m·D/M, (m+1)·D/M) of the split, copied with
 * their boundaries rebased. data prep keeps documents in (sorted) file order,
 * so each site gets its own group of fortune files (a file may straddle the
 * cut between two sites). */
static int shard_docs(al_tokens *out, const al_tokens *all, int m, int sites, al_err *err) {
    memset(out, 0, sizeof *out);
    size_t a = all->ndocs * (size_t)m / (size_t)sites;
    size_t b = all->ndocs * (size_t)(m + 1) / (size_t)sites;
    if (b - a < 1)
        return al_errf(err, AL_EINVAL, "sim: %zu documents cannot be split over %d sites",
                       all->ndocs, sites);
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
    snprintf(out->path, sizeof out->path, "%.480s[site %d]", all->path, m);
    return 0;
}

/* ---- the simulation's state -------------------------------------------------------------- */

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
    float *dbar;      /* the mean */
    al_mean mean;
    al_site_stats *ss; /* [M] this round's stats of live sites */
    al_loader *ld;     /* DDP: [M] the sites' loaders */
    al_batch *mbs;     /* DDP: [M·accum] */
    long cap_h;
} sim;

static void sim_free(sim *s) {
    for (int m = 0; m < s->M; m++) {
        if (s->tr) al_trainer_free(&s->tr[m]);
        if (s->outer) al_outer_free(&s->outer[m]);
        if (s->delta) free(s->delta[m]);
        if (s->shard) al_tokens_free(&s->shard[m]);
        if (s->ld) al_loader_free(&s->ld[m]);
        if (s->late) al_loader_free(&s->late[m]);
    }
    if (s->mbs)
        for (int i = 0; i < s->M * s->o->train.accum; i++) al_batch_free(&s->mbs[i]);
    free(s->tr);
    free(s->outer);
    free(s->delta);
    free(s->shard);
    free(s->ld);
    free(s->late);
    free(s->mbs);
    free(s->dbar);
    free(s->ss);
    al_mean_free(&s->mean);
}

/* The data site m starts on. */
static const al_tokens *site_data(const sim *s, const al_tokens *train, int m) {
    return s->o->scenario == AL_SIM_NONIID ? &s->shard[m] : train;
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

static int push_h(al_sim_result *r, long *cap, long h, al_err *err) {
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

static int evaluate(sim *s, al_trainer *tr, double *loss, al_err *err) {
    int rc = al_trainer_eval(tr, s->o->eval_batches, loss, err);
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

/* ---- one round of the DiLoCo/AutoLoCo loop ---------------------------------------------- */

/* Site m runs h inner steps from θ_global (the run's inner steps step0 ..
 * step0+h−1) and reports its interval's statistics. */
static int run_interval(sim *s, int m, long step0, long h, al_site_stats *st, al_err *err) {
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

/* Arrival order of the sites' contributions this round: a seeded shuffle, to
 * exercise (and prove, by the hash) that the mean does not depend on it. */
static void arrival_order(int *order, int M, uint64_t seed, long round) {
    al_rng r;
    al_rng_seed(&r, seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(round + 1)));
    for (int i = 0; i < M; i++) order[i] = i;
    for (int i = M - 1; i > 0; i--) {
        int j = (int)al_rng_below(&r, (uint64_t)i + 1);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static int run_rounds(sim *s, const al_tokens *val, al_sim_result *res, al_err *err) {
    const al_sim_opts *o = s->o;
    int M = s->M, rc;
    int64_t h;
    if ((rc = al_policy_start(o->policy, &h, err))) return rc;
    double bytes_round = round_bytes_per_site(M, s->P, o->codec.bits);
    long step = 0, round = 0, budget = o->train.steps;
    double prev_comm = 0; /* the WAN model's seconds for the last exchange: each site's comm_s */
    int order[256];
    while (step < budget) {
        long hr = AL_MIN((long)h, budget - step);
        if ((rc = push_h(res, &s->cap_h, hr, err))) return rc;
        double cmax = 0;
        int live = 0;
        al_mean_reset(&s->mean);
        arrival_order(order, M, o->train.seed, round);
        json_t *refused = json_array();
        for (int i = 0; i < M; i++) {
            int m = order[i];
            al_site_stats st;
            if ((rc = run_interval(s, m, step, hr, &st, err))) break;
            st.comm_s = prev_comm;
            cmax = fmax(cmax, st.compute_s);
            if (round == o->nan_round && m == o->nan_site) s->tr[m].model.params[0] = NAN;
            al_err why = {0};
            int r2 = al_pseudo_grad(s->delta[m], s->outer[m].theta, s->tr[m].model.params, s->P,
                                    NULL, &why);
            if (r2 == 0 && o->codec.roundtrip)
                r2 = o->codec.roundtrip(o->codec.ctx, s->delta[m], s->P, &why);
            if (r2 == 0) {
                st.delta_sq = al_sq_norm(s->delta[m], s->P); /* of what enters the mean */
                r2 = al_mean_add(&s->mean, m, s->delta[m], &why);
            }
            if (r2) { /* refused: this site sits the round out */
                al_mean_drop(&s->mean, m, NULL);
                json_array_append_new(refused, json_pack("{s:i, s:s}", "site", m, "why", why.msg));
                res->dropped++;
                continue;
            }
            s->ss[live++] = st;
        }
        if (rc == 0 && live == 0)
            rc = al_errf(err, AL_ENUMERIC, "sim: round %ld: every site's Δ was refused", round);
        if (rc) {
            json_decref(refused);
            return rc;
        }
        if ((rc = al_mean_finish(&s->mean, s->dbar, err))) return rc;
        al_round_stats rs;
        rc = al_round_stats_combine(&rs, round, s->ss, live, al_sq_norm(s->dbar, s->P), err);
        /* every site applies the same step to its own replica; all must agree */
        char hash0[65], hm[65];
        for (int m = 0; m < M && rc == 0; m++) {
            rc = al_outer_step(&s->outer[m], s->dbar,
                               o->progress == AL_SIM_PROGRESS_STEPS ? (double)rs.steps : rs.lr_sum,
                               err);
            if (rc) break;
            al_outer_hash(&s->outer[m], m == 0 ? hash0 : hm);
            if (m > 0 && strcmp(hash0, hm) != 0)
                rc = al_errf(err, AL_EINTEGRITY, "sim: round %ld: θ_global of site %d differs",
                             round, m);
        }
        al_outer_coefs k = s->outer[0].last;
        int64_t h_next = h;
        double floor_h = rc == 0 ? al_policy_comm_floor(o->policy, &rs) : 0;
        if (rc == 0) rc = al_policy_next_interval(o->policy, &rs, &h_next, err);
        if (rc) {
            json_decref(refused);
            return rc;
        }
        for (int m = 0; m < M; m++) /* θ^m ← θ_global; AdamW state stays local */
            memcpy(s->tr[m].model.params, s->outer[m].theta, s->P * sizeof(float));
        step += hr;
        res->syncs++;
        double comm = 2 * o->rtt_s + bytes_round * 8 / o->bandwidth_bps;
        prev_comm = comm;
        res->compute_s += cmax;
        res->comm_s += comm;
        res->bytes_per_site += bytes_round;
        res->final_train_loss = rs.loss;
        memcpy(res->hash, hash0, sizeof hash0);
        if (o->jsonl || (o->eval_every > 0 && (round + 1) % o->eval_every == 0)) {
            json_t *rec = json_object();
            json_object_set_new(rec, "round", json_integer(round));
            json_object_set_new(rec, "step", json_integer(step));
            json_object_set_new(rec, "h", json_integer(hr));
            json_object_set_new(rec, "h_next", json_integer(h_next));
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
            json_object_set_new(rec, "comm_floor", json_real(floor_h));
            json_object_set_new(rec, "bytes_per_site", json_real(bytes_round));
            json_object_set_new(rec, "hash", json_string(hash0));
            json_object_set_new(rec, "policy", policy_state_json(o->policy));
            json_object_set_new(rec, "refused", json_incref(refused));
            if (o->eval_every > 0 && (round + 1) % o->eval_every == 0) {
                double vl;
                if ((rc = evaluate(s, &s->tr[0], &vl, err))) {
                    json_decref(rec);
                    json_decref(refused);
                    return rc;
                }
                json_object_set_new(rec, "eval_loss", json_real(vl));
            }
            if (o->jsonl) write_record(o->jsonl, rec);
            json_decref(rec);
        }
        json_decref(refused);
        h = h_next;
        round++;
    }
    res->bytes = res->bytes_per_site * M;
    if (val) rc = evaluate(s, &s->tr[0], &res->final_eval_loss, err);
    if (rc == 0) {
        res->nparams = s->P;
        res->theta = malloc(s->P * sizeof(float));
        if (!res->theta) return al_errf(err, AL_ENOMEM, "sim: out of memory");
        memcpy(res->theta, s->outer[0].theta, s->P * sizeof(float));
    }
    return rc;
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
    al_sha256_hex(tr->model.params, s->P * sizeof(float), res->hash);
    if (val && (rc = evaluate(s, tr, &res->final_eval_loss, err))) return rc;
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
        for (int m = 0; m < M && rc == 0; m++) rc = shard_docs(&s->shard[m], train, m, M, err);
    if (rc == 0 && o->scenario == AL_SIM_SHIFT) {
        if (!(s->late = calloc((size_t)M, sizeof *s->late)))
            return al_errf(err, AL_ENOMEM, "sim: out of memory");
        for (int m = 0; m < M && rc == 0; m++)
            rc = al_loader_init(&s->late[m], &s->shard[m], o->train.packing, 1,
                                al_sim_site_seed(o->train.seed, m), err);
    }
    /* every replica starts from the same weights (init seed = run seed); only
     * the data order differs: each site's loader gets its own seed */
    for (int m = 0; m < nt && rc == 0; m++) {
        rc = al_trainer_init(&s->tr[m], &o->model, &o->train,
                             o->ddp ? NULL : site_data(s, train, m), m == 0 ? val : NULL, err);
        if (rc == 0 && !o->ddp) {
            al_loader_free(&s->tr[m].train);
            rc = al_loader_init(&s->tr[m].train, site_data(s, train, m), o->train.packing, 1,
                                al_sim_site_seed(o->train.seed, m), err);
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
                                al_sim_site_seed(o->train.seed, m), err);
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
    s->ss = calloc((size_t)M, sizeof *s->ss);
    s->dbar = malloc(s->P * sizeof(float));
    if (!s->outer || !s->delta || !s->ss || !s->dbar)
        return al_errf(err, AL_ENOMEM, "sim: out of memory");
    for (int m = 0; m < M && rc == 0; m++) {
        rc = al_outer_init(&s->outer[m], &oc, s->tr[0].model.params, s->P, err);
        if (rc == 0 && !(s->delta[m] = malloc(s->P * sizeof(float))))
            rc = al_errf(err, AL_ENOMEM, "sim: out of memory");
    }
    if (rc == 0) rc = al_mean_init(&s->mean, M, s->P, err);
    return rc;
}

int al_sim_run(const al_sim_opts *o, const al_tokens *train, const al_tokens *val,
               al_sim_result *res, al_err *err) {
    memset(res, 0, sizeof *res);
    double t0 = al_now();
    sim s;
    int rc = sim_init(&s, o, train, val, err);
    if (rc == 0) rc = o->ddp ? run_ddp(&s, val, res, err) : run_rounds(&s, val, res, err);
    sim_free(&s);
    if (rc) {
        al_sim_result_free(res);
        return rc;
    }
    res->steps = o->train.steps;
    res->projected_s = res->compute_s + res->comm_s;
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
    json_object_set_new(j, "sites", json_integer(o->sites));
    json_object_set_new(j, "iid", json_boolean(o->scenario == AL_SIM_IID));
    json_object_set_new(j, "seed", json_integer((json_int_t)o->train.seed));
    json_object_set_new(j, "codec", json_string(o->codec.name));
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
    json_object_set_new(j, "projected_1g_s", json_real(r->projected_1g_s));
    json_object_set_new(j, "projected_100m_s", json_real(r->projected_100m_s));
    json_object_set_new(j, "wall_s", json_real(r->wall_s));
    json_object_set_new(j, "hash", json_string(r->hash));
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
    json_decref(j);
    return s;
}
