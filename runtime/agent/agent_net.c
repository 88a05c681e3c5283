/* agent_net.c -- the network side of the agent: server hooks (shards,
 * statistics, state, heartbeats' statuses), clients, state pulls and the
 * configuration handshake. The round's Δ exchange (reduce-scatter,
 * all-gather) is agent_exchange.c.
 * It carries out what the driver (agent_round.c) asks and decides nothing
 * about membership: that is the round protocol's (al_round.h). */
#include "agent_net.h"
#include "agent_hash.h"
#include "agent_stream.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- server hooks (server threads) --------------------------------------------------- */

/* The slot a shard lands in: by sender in both phases (the tag in its epoch
 * names the attempt, see ag_attempt_tag). A gathered mean shard is read from
 * its owner's slot only, so no member can write the mean of a shard it does
 * not own: a shard id other than the sender's own index never matches. */
static ag_slot *slot_for(agent *a, const al_shard_meta *m, int sender) {
    int p = (int)(m->round & 1);
    if (m->shard_id >= AG_MAX_SITES) return NULL;
    if (m->phase == AL_PHASE_REDUCE) return &a->reduce[p][sender];
    if (m->phase == AL_PHASE_GATHER) return &a->gather[p][sender];
    return NULL;
}

static int popcount32(uint32_t x) {
    int n = 0;
    for (; x; x &= x - 1) n++;
    return n;
}

/* The most bytes shard k of M may take encoded: its values (P·(k+1)/M −
 * P·k/M, as al_shard_range cuts them) at the codec's worst case. 0 if M or k
 * cannot be a shard of this run. */
static uint64_t shard_max_bytes(const agent *a, long round, int M, int k) {
    if (M < 1 || M > a->nsites || k < 0 || k >= M || round < 0) return 0;
    size_t lo, hi, flo, fhi; /* (streaming: the round's fragment is what is cut in M) */
    ag_frag(a, round, &flo, &fhi);
    al_shard_range(fhi - flo, M, k, &lo, &hi);
    return al_codec_max_encoded(&a->cc.cfg, hi - lo);
}

static int hk_open(void *u, const al_shard_meta *m, uint8_t **dst, char *why, size_t n) {
    agent *a = u;
    int sender = ag_site_id(a, m->site);
    pthread_mutex_lock(&a->mu);
    ag_heard(a, sender); /* every call of a peer is a heartbeat */
    int st = 0, M = popcount32(ag_tag_members(m->epoch)), k = (int)m->shard_id;
    ag_slot *s = sender >= 0 ? slot_for(a, m, sender) : NULL;
    uint64_t most = s ? shard_max_bytes(a, (long)m->round, M, k) : 0;
    if (!s) {
        snprintf(why, n, "shard from '%s' (phase %u, shard %u): no place for it", m->site, m->phase,
                 m->shard_id);
        st = AL_ST_INVALID_ARGUMENT;
    } else if (m->total_bytes > most) { /* checked before anything is allocated */
        snprintf(why, n,
                 "shard %d of %d from '%s': %llu bytes, more than such a shard can take encoded "
                 "(%llu)",
                 k, M, m->site, (unsigned long long)m->total_bytes, (unsigned long long)most);
        st = AL_ST_OUT_OF_RANGE;
    } else if ((long)m->round != a->cur_round && (long)m->round != a->cur_round + 1) {
        snprintf(why, n, "round %llu: this site is at round %ld", (unsigned long long)m->round,
                 a->cur_round);
        st = AL_ST_FAILED_PRECONDITION;
    } else if (s->state != 0 && s->meta.round == m->round && s->meta.shard_id == m->shard_id &&
               s->meta.epoch == m->epoch && !strcmp(s->meta.site, m->site)) {
        snprintf(why, n, "shard %u of round %llu from '%s' already %s", m->shard_id,
                 (unsigned long long)m->round, m->site, s->state == 2 ? "received" : "arriving");
        st = AL_ST_ALREADY_EXISTS;
    } else {
        /* a newer attempt (fewer members) or round replaces what was there */
        uint8_t *buf = malloc(m->total_bytes ? m->total_bytes : 1);
        if (!buf) {
            snprintf(why, n, "out of memory for %llu bytes", (unsigned long long)m->total_bytes);
            st = AL_ST_RESOURCE_EXHAUSTED;
        } else {
            if (s->state == 2) free(s->buf); /* an arriving one is freed by its done */
            s->buf = buf;
            s->meta = *m;
            s->state = 1;
            *dst = buf;
        }
    }
    pthread_mutex_unlock(&a->mu);
    return st;
}

static void hk_done(void *u, const al_shard_meta *m, uint8_t *dst, int complete) {
    agent *a = u;
    int sender = ag_site_id(a, m->site);
    pthread_mutex_lock(&a->mu);
    ag_slot *s = sender >= 0 ? slot_for(a, m, sender) : NULL;
    if (s && s->buf == dst) {
        if (complete)
            s->state = 2;
        else {
            free(dst);
            s->buf = NULL;
            s->state = 0;
        }
    } else {
        free(dst); /* replaced meanwhile */
    }
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* A peer's statistics for (round, attempt). Once taken they are fixed: the
 * machine is fed these numbers and the exchange combines the same ones, so a
 * second push for the same (round, attempt) is taken only if it is the same
 * payload (a retry); any other is refused, and the first one stays. A push
 * for a later attempt of the round replaces them (a new attempt, new
 * members). */
static void stats_from_wire(al_site_stats *d, int id, const al_stats *s) {
    memset(d, 0, sizeof *d);
    d->site = id;
    d->steps = s->steps;
    d->loss = s->mean_loss;
    d->grad_norm = s->grad_norm;
    d->delta_sq = s->delta_sq_norm;
    d->lr_sum = s->inner_lr_sum;
    d->tokens = s->tokens > (uint64_t)INT64_MAX ? -1 : (int64_t)s->tokens; /* -1: refused later */
    d->compute_s = s->compute_s;
    d->comm_s = s->comm_s;
}

static int hk_stats(void *u, const al_stats *s, char *why, size_t n) {
    agent *a = u;
    int id = ag_site_id(a, s->site);
    pthread_mutex_lock(&a->mu);
    ag_heard(a, id);
    int st = 0;
    if (id < 0) {
        snprintf(why, n, "stats from unknown site '%s'", s->site);
        st = AL_ST_INVALID_ARGUMENT;
    } else if ((long)s->round != a->cur_round && (long)s->round != a->cur_round + 1) {
        snprintf(why, n, "stats for round %llu: this site is at round %ld",
                 (unsigned long long)s->round, a->cur_round);
        st = AL_ST_FAILED_PRECONDITION;
    } else {
        int p = (int)(s->round & 1);
        al_site_stats *d = &a->stats[p][id], nw;
        stats_from_wire(&nw, id, s);
        if (a->have_stats[p][id] == (int)s->round + 1 && a->stats_epoch[p][id] == s->epoch) {
            if (memcmp(&nw, d, sizeof nw) != 0) {
                snprintf(why, n,
                         "statistics for round %llu, attempt %llu were already taken from %s, "
                         "with other numbers (steps %lld, tokens %lld; now %lld, %lld): the "
                         "first stay",
                         (unsigned long long)s->round, (unsigned long long)s->epoch, s->site,
                         (long long)d->steps, (long long)d->tokens, (long long)nw.steps,
                         (long long)nw.tokens);
                st = AL_ST_ALREADY_EXISTS;
                al_logf(&a->log, AL_LOG_WARN, "site %s: refused %s's statistics: %s",
                        a->name[a->self], s->site, why);
            }
        } else {
            *d = nw;
            a->have_stats[p][id] = (int)s->round + 1; /* which round, +1 so 0 means none */
            a->stats_epoch[p][id] = s->epoch;
            pthread_cond_broadcast(&a->cv);
        }
    }
    pthread_mutex_unlock(&a->mu);
    return st;
}

/* THETA: the outer state; META (and MOMENTUM, an older name for it): the
 * committed round as JSON, with θ_global's hash. */
static void snapshot_free(ag_snapshot *sn) {
    if (!sn) return;
    free(sn->outer);
    free(sn->meta);
    free(sn);
}

static int hk_state(void *u, const char *site, uint32_t part, const uint8_t **data, uint64_t *len,
                    void **ref, char *why, size_t n) {
    agent *a = u;
    if (part == AL_STATE_THETA) ag_fault_pause(a, "serve", -1); /* test hook: a pull in flight */
    pthread_mutex_lock(&a->mu);
    int st = 0;
    ag_snapshot *sn = a->snap;
    int id = ag_site_id(a, site);
    ag_heard(a, id);
    if (!sn) {
        snprintf(why, n, "no committed state yet");
        st = AL_ST_UNAVAILABLE;
    } else if (part == AL_STATE_THETA) {
        ag_snapshot_seal(sn);
        *data = sn->outer;
        *len = sn->outer_len;
        if (a->fault_badstate) *len /= 2; /* test hook: a peer serving a state that does not fit */
    } else if (part == AL_STATE_META || part == AL_STATE_MOMENTUM) {
        *data = (const uint8_t *)sn->meta;
        *len = sn->meta_len;
    } else {
        snprintf(why, n, "state part %u: unknown", part);
        st = AL_ST_NOT_FOUND;
    }
    if (st == 0) { /* alive until the reply is sent, however many commits later */
        sn->refs++;
        *ref = sn;
    }
    pthread_mutex_unlock(&a->mu);
    return st;
}

/* The carry: the candidate this site persisted with its latest hash vote
 * (a->cand_snap, agent_carry.c), served by its hash to a peer that must hold
 * it before it votes for it. */
static int hk_candidate(void *u, const char *site, uint32_t part, const uint8_t *hash,
                        const uint8_t **data, uint64_t *len, void **ref, char *why, size_t n) {
    agent *a = u;
    pthread_mutex_lock(&a->mu);
    int st = 0;
    ag_snapshot *sn = a->cand_snap;
    ag_heard(a, ag_site_id(a, site));
    if (!sn || memcmp(a->cand_snap_h.b, hash, 32) != 0) {
        char hx[65];
        al_hex(hash, 32, hx);
        snprintf(why, n, "no candidate %.16s held here", hx);
        st = AL_ST_NOT_FOUND;
    } else if (part == AL_STATE_THETA) {
        *data = sn->outer; /* (sealed when kept) */
        *len = sn->outer_len;
    } else if (part == AL_STATE_META) {
        *data = (const uint8_t *)sn->meta;
        *len = sn->meta_len;
    } else {
        snprintf(why, n, "candidate part %u: unknown", part);
        st = AL_ST_NOT_FOUND;
    }
    if (st == 0) {
        sn->refs++;
        *ref = sn;
    }
    pthread_mutex_unlock(&a->mu);
    return st;
}

static void hk_state_done(void *u, void *ref) {
    agent *a = u;
    ag_snapshot *sn = ref;
    pthread_mutex_lock(&a->mu);
    if (--sn->refs == 0 && sn != a->snap && sn != a->cand_snap) snapshot_free(sn);
    pthread_mutex_unlock(&a->mu);
}

/* A heartbeat: the peer's status into the inbox, ours into the reply.
 * A status ahead of this site's round is not believed on an incoming call
 * (issue 32): whoever holds the peer's certificate can send one, and the
 * machine would leave the round to pull from that peer (with the peer down,
 * a pull that never ends). Which round a peer is at is then taken only from
 * its answers to this site's own heartbeats, at the address configured for
 * it (agent_hb.c): a site it reaches, and the one it would pull from. The
 * call does not count as hearing the peer either, nor does a ping without a
 * status (every agent sends one). */
static void hk_status(void *u, const char *site, const al_peer_status *theirs,
                      al_peer_status *mine) {
    agent *a = u;
    int id = ag_site_id(a, site);
    pthread_mutex_lock(&a->mu);
    *mine = a->my_status;
    if (id >= 0 && id != a->self && theirs->have_base && mine->have_base &&
        theirs->round > mine->round) {
        int down = a->down[id]; /* (a peer just ahead that answers us: nothing to say) */
        pthread_mutex_unlock(&a->mu);
        al_logf(&a->log, down ? AL_LOG_WARN : AL_LOG_DEBUG,
                "site %s: a heartbeat from %s announces round %llu, ahead of this site's %llu: "
                "not believed on that call (its answers to this site's heartbeats decide%s)",
                a->name[a->self], site, (unsigned long long)theirs->round,
                (unsigned long long)mine->round, down ? "; it answers none now" : "");
        return;
    }
    if (theirs->have_base) ag_heard(a, id); /* (a ping without a status says nothing) */
    if (id >= 0 && id != a->self && theirs->have_base) {
        a->pst[id] = *theirs;
        a->pst_new[id] = 1;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
}

/* ---- start and stop ---------------------------------------------------------------- */

/* A client for peer i (a new channel: no reconnect backoff inherited). */
static int make_client(agent *a, int i, al_err *err) {
    const al_config *c = a->cfg;
    al_client_cfg cc = ag_client_cfg(a, i);
    cc.deadline_s = c->round_deadline_s;
    /* statistics and pings are small: a peer that does not answer one within
     * half its timeout is not waited on for a whole round deadline */
    cc.control_deadline_s = 0.5 * c->round_peer_timeout_s;
    cc.max_attempts = 3;
    cc.backoff_s = 0.1;
    cc.backoff_max_s = 1.0;
    cc.seed = (uint64_t)a->self + 1;
    if (a->cli[i]) {
        uint64_t tx, rx;
        al_client_bytes(a->cli[i], &tx, &rx);
        a->tx_retired += (double)tx - a->peer_tx[i]; /* bytes not yet counted in a round */
        a->peer_tx[i] = 0;
        pthread_mutex_lock(&a->mu); /* the heartbeat thread may cancel its call (under mu) */
        al_client *old = a->cli[i];
        a->cli[i] = NULL;
        pthread_mutex_unlock(&a->mu);
        al_client_free(old);
    }
    al_client *nc = NULL;
    int rc = al_client_new(&cc, &nc, err);
    pthread_mutex_lock(&a->mu);
    a->cli[i] = nc;
    pthread_mutex_unlock(&a->mu);
    return rc ? al_err_prefix(err, "peer %s (%s)", a->name[i], a->addr[i]) : 0;
}

/* Peers that came back (agent_hb.c saw them answer again) get a fresh
 * channel before the next call: no reconnect backoff inherited from the
 * outage. */
int ag_refresh_clients(agent *a, al_err *err) {
    int fresh[AG_MAX_SITES];
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < a->nsites; i++) {
        fresh[i] = a->reconnect[i];
        a->reconnect[i] = 0;
    }
    pthread_mutex_unlock(&a->mu);
    for (int i = 0; i < a->nsites; i++)
        if (fresh[i] && i != a->self) {
            int rc = make_client(a, i, err);
            if (rc) return rc;
        }
    return 0;
}

int ag_net_start(agent *a, al_err *err) {
    const al_config *c = a->cfg;
    const char *peers[AG_MAX_SITES];
    int np = 0;
    for (int i = 0; i < a->nsites; i++)
        if (i != a->self) peers[np++] = a->name[i];
    al_tls_paths tls = {c->tls_ca, c->tls_cert, c->tls_key};
    al_server_cfg sc = {
        .listen = c->site_listen,
        .site = a->name[a->self],
        .run_id = c->site_run_id,
        .peers = peers,
        .npeers = (size_t)np,
        .tls = tls,
        .insecure = (int)c->tls_insecure,
        /* two calls per peer, each with its own threads, plus
         * two: no peer can take a thread another one needs */
        .threads = AL_MIN(130, 2 * np + 2),
        .per_peer_calls = 2,
        .num_shards = AG_MAX_SITES,
        .idle_timeout_s = c->round_deadline_s,
        .attempts = 1,
        .hooks = {a, hk_open, hk_done, hk_stats, hk_state, hk_state_done, hk_status, hk_candidate},
        .log = &a->log};
    int rc = al_server_start(&sc, &a->srv, err);
    if (rc) return al_err_prefix(err, "[site] listen %s", c->site_listen);
    for (int i = 0; i < a->nsites && rc == 0; i++)
        if (i != a->self) rc = make_client(a, i, err);
    return rc;
}

void ag_net_stop(agent *a) {
    for (int i = 0; i < a->nsites; i++)
        if (a->cli[i]) {
            al_client_free(a->cli[i]);
            a->cli[i] = NULL;
        }
    if (a->srv) al_server_stop(a->srv);
    a->srv = NULL;
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < AG_MAX_SITES; i++) {
            free(a->reduce[p][i].buf);
            free(a->gather[p][i].buf);
            a->reduce[p][i].buf = a->gather[p][i].buf = NULL;
        }
    snapshot_free(a->snap); /* the server has stopped: nobody streams it */
    a->snap = NULL;
    snapshot_free(a->cand_snap);
    a->cand_snap = NULL;
}

void ag_set_round(agent *a, long r) {
    pthread_mutex_lock(&a->mu);
    a->cur_step = a->step;
    /* slots of r's parity held round r - 2 (long done): clear them; r + 1's
     * early arrivals in the other parity are kept */
    int p = (int)(r & 1);
    for (int i = 0; i < AG_MAX_SITES; i++) {
        ag_slot *s[2] = {&a->reduce[p][i], &a->gather[p][i]};
        for (int k = 0; k < 2; k++)
            if (s[k]->state == 2 && (long)s[k]->meta.round != r) {
                free(s[k]->buf);
                s[k]->buf = NULL;
                s[k]->state = 0;
            }
        if (a->have_stats[p][i] != r + 1) a->have_stats[p][i] = 0;
    }
    a->cur_round = r;
    a->exchanging = 0;
    pthread_mutex_unlock(&a->mu);
    al_server_set_round(a->srv, (uint64_t)r, 0);
}

/* Our handshake: site, run, round, hashes, members. */
static void hello(agent *a, al_hello *h) {
    memset(h, 0, sizeof *h);
    snprintf(h->site, sizeof h->site, "%s", a->name[a->self]);
    snprintf(h->run_id, sizeof h->run_id, "%s", a->cfg->site_run_id);
    h->round = (uint64_t)a->round;
    ag_hex32(a->run_hash, h->config_hash);
    char *rt = al_config_run_text(a->cfg); /* names the key of a mismatch (too long: not sent) */
    if (rt && strlen(rt) <= AL_RUN_CONFIG_MAX)
        snprintf(h->run_config, sizeof h->run_config, "%s", rt);
    free(rt);
    al_round_hash oh;
    ag_outer_hash(a, &oh, 0);
    memcpy(h->theta_hash, oh.b, 32);
    h->next_interval = (uint32_t)a->h;
    for (int i = 0; i < a->nsites && h->n_members < 16; i++)
        if (a->live[i])
            snprintf(h->members[h->n_members++], sizeof h->members[0], "%s", a->name[i]);
}

int ag_publish_state(agent *a, al_err *err) {
    al_hello mine;
    hello(a, &mine);
    al_server_set_hello(a->srv, &mine);
    uint8_t *ob;
    size_t ol;
    int rc = al_outer_serialize_unsealed(&a->outer, &ob, &ol, err); /* sealed when read */
    if (rc) return rc;
    char pol[2048] = "";
    al_policy_save(a->pol, pol, sizeof pol);
    json_t *members = json_array();
    for (int i = 0; i < a->nsites; i++)
        if (a->live[i]) json_array_append_new(members, json_string(a->name[i]));
    char th[65];
    al_round_hash oh; /* (after a commit: the candidate's, hashed when it was proposed) */
    ag_outer_hash(a, &oh, 0);
    ag_hash_hex(&oh, th);
    json_t *m = json_pack("{s:I, s:I, s:I, s:s, s:o, s:s}", "round", (json_int_t)a->round, "step",
                          (json_int_t)a->step, "h", (json_int_t)a->h, "policy", pol, "members",
                          members, "theta", th);
    if (m && a->sm.F) json_object_set_new(m, "stream", ag_stream_json(a));
    char *js = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    if (!js) {
        free(ob);
        return al_errf(err, AL_ENOMEM, "state snapshot: out of memory");
    }
    ag_snapshot *s = calloc(1, sizeof *s);
    if (!s) {
        free(ob);
        free(js);
        return al_errf(err, AL_ENOMEM, "state snapshot: out of memory");
    }
    s->outer = ob;
    s->outer_len = ol;
    s->meta = js;
    s->meta_len = strlen(js);
    s->round = a->round;
    pthread_mutex_lock(&a->mu);
    ag_snapshot *old = a->snap;
    a->snap = s;
    if (old && old->refs == 0) snapshot_free(old); /* else its last reply frees it */
    pthread_mutex_unlock(&a->mu);
    return 0;
}

/* ---- the configuration handshake ---------------------------------------------------- */

int ag_handshake(agent *a, int i, al_err *err) {
    al_hello mine, theirs, sent;
    hello(a, &mine);
    sent = mine; /* the server sends its lines back if the hashes differ; ours stay here */
    sent.run_config[0] = '\0';
    int rc = al_client_hello(a->cli[i], &sent, &theirs, err);
    if (rc) {
        int st = al_client_last_status(a->cli[i]);
        if (st == AL_ST_PERMISSION_DENIED || st == AL_ST_UNAUTHENTICATED ||
            st == AL_ST_FAILED_PRECONDITION) /* no retry fixes these */
        {
            al_err_prefix(err, "site %s refused us", a->name[i]);
            return AL_EMISMATCH;
        }
        return rc;
    }
    if (memcmp(theirs.config_hash, mine.config_hash, 32) != 0) {
        char h[65], key[128], vt[512], vm[512];
        al_hex(theirs.config_hash, 32, h);
        if (theirs.run_config[0] && al_config_run_text_diff(theirs.run_config, mine.run_config, key,
                                                            sizeof key, vt, vm, sizeof vt) == 1)
            return al_errf(err, AL_EMISMATCH,
                           "site %s runs a different configuration: %s is %s there, %s here "
                           "(run hash %.16s, ours %.16s; `autoloco config check` on every "
                           "site's file shows each difference)",
                           a->name[i], key, vt, vm, h, a->run_hash);
        return al_errf(err, AL_EMISMATCH,
                       "site %s runs a different configuration (run hash %.16s, ours %.16s): "
                       "[model], [inner] recipe, [outer] and [policy] must match",
                       a->name[i], h, a->run_hash);
    }
    return 0;
}

/* ---- statistics ------------------------------------------------------------------------ */

/* A peer's statistics fit this round: valid on their own (finite, in range),
 * and the same interval as ours (steps and the schedule's lr sum), so that
 * combining them cannot fail. Otherwise the peer is left out of the round,
 * with why. */
int ag_stats_fit(const al_site_stats *mine, const al_site_stats *theirs, char *why, size_t n) {
    al_err e = {0};
    if (theirs->tokens < 0) { /* the wire's uint64 above INT64_MAX, see hk_stats */
        snprintf(why, n, "its statistics say %s tokens, out of range", "2^63 or more");
        return 0;
    }
    if (al_site_stats_check(theirs, &e)) {
        snprintf(why, n, "%.250s", e.msg);
        return 0;
    }
    if (theirs->steps != mine->steps) {
        snprintf(why, n, "its statistics say %lld inner steps, this site ran %lld",
                 (long long)theirs->steps, (long long)mine->steps);
        return 0;
    }
    if (fabs(theirs->lr_sum - mine->lr_sum) > 1e-9 * fmax(fabs(mine->lr_sum), 1e-300)) {
        snprintf(why, n, "its lr sum %.17g differs from this site's %.17g", theirs->lr_sum,
                 mine->lr_sum);
        return 0;
    }
    return 1;
}

int ag_push_stats(agent *a, al_client *c, const al_site_stats *mine, long round, uint64_t epoch,
                  al_err *err) {
    al_stats s;
    memset(&s, 0, sizeof s);
    snprintf(s.site, sizeof s.site, "%s", a->name[a->self]);
    s.round = (uint64_t)round;
    s.epoch = epoch;
    s.mean_loss = mine->loss;
    s.grad_norm = mine->grad_norm;
    s.delta_sq_norm = mine->delta_sq;
    s.inner_lr_sum = mine->lr_sum;
    s.compute_s = mine->compute_s;
    s.comm_s = mine->comm_s;
    s.tokens = (uint64_t)mine->tokens;
    s.steps = (uint32_t)mine->steps;
    if (round == a->fault_badstats) s.steps += 1; /* test hooks: a peer that lies */
    if (round == a->fault_badtokens) s.tokens = UINT64_MAX;
    int rc = al_client_push_stats(c, &s, err);
    if (rc == 0 && a->fault_repush >= 0 && round >= a->fault_repush) {
        /* test hook: the same (round, attempt) again, with other numbers */
        al_stats lie[2] = {s, s};
        lie[0].steps += 1;
        lie[1].tokens = UINT64_MAX;
        for (int j = 0; j < 2; j++) {
            al_err e = {0};
            int lrc = al_client_push_stats(c, &lie[j], &e);
            al_logf(&a->log, AL_LOG_INFO,
                    "site %s: AL_FAULT repush: round %ld's statistics "
                    "again with %s: %s",
                    a->name[a->self], round, j ? "tokens 2^64-1" : "one inner step more",
                    lrc ? e.msg : "taken");
        }
    }
    return rc;
}

int ag_pull(agent *a, int i, al_err *err) {
    uint8_t *d = NULL;
    uint64_t n = 0;
    a->have_pulled = 0;
    if (ag_stop_due(a)) /* a signal: no new pull (agent_hb.c cancels one in flight) */
        return al_errf(err, AL_ETIMEOUT, "stopping: no pull from %s", a->name[i]);
    int rc = ag_refresh_clients(a, err);
    if (rc == 0) rc = al_client_pull_state(a->cli[i], AL_STATE_META, 1 << 20, &d, &n, err);
    if (rc) return rc;
    json_error_t je;
    json_t *m = json_loadb((const char *)d, n, 0, &je);
    free(d);
    json_int_t r = 0, s = 0, h = 0;
    const char *pol = NULL, *th = NULL;
    if (!m ||
        json_unpack(m, "{s:I, s:I, s:I, s:s, s:s}", "round", &r, "step", &s, "h", &h, "policy",
                    &pol, "theta", &th) != 0 ||
        strlen(th) != 64 || r < 0 || s < 0 || h < 1) {
        json_decref(m);
        return al_errf(err, AL_EFORMAT, "state from %s: malformed metadata", a->name[i]);
    }
    a->pulled_round = (long)r;
    a->pulled_step = (long)s;
    a->pulled_h = (long)h;
    snprintf(a->pulled_policy, sizeof a->pulled_policy, "%s", pol);
    json_decref(a->pulled_stream); /* checked here, applied by do_adopt */
    a->pulled_stream = json_incref(json_object_get(m, "stream"));
    char what[160];
    snprintf(what, sizeof what, "state from %s", a->name[i]);
    if (a->sm.F && (rc = ag_stream_load(a, a->pulled_stream, what, 0, err))) {
        json_decref(m);
        return rc;
    }
    char want[65];
    snprintf(want, sizeof want, "%s", th);
    json_decref(m);
    /* at most the bytes a state of our P takes (the pull's deadline follows them) */
    d = NULL;
    rc = al_client_pull_state(a->cli[i], AL_STATE_THETA, al_outer_state_bytes(a->P), &d, &n, err);
    if (rc == 0) rc = al_outer_deserialize(&a->pulled, d, n, &a->outer.cfg, err);
    free(d);
    if (rc) return rc;
    char got[65];
    al_outer_hash(&a->pulled, got);
    if (strcmp(got, want) != 0) /* a commit between the two pulls: ask again */
        return al_errf(err, AL_EPEER, "state from %s: theta %.12s, its metadata says %.12s",
                       a->name[i], got, want);
    a->pulled_from = i;
    a->have_pulled = 1;
    return 0;
}
