/* agent_exchange.c -- the round's Δ exchange between the members: each member
 * owns one shard of the parameter vector; the reduce-scatter sends every
 * member's Δ shard k to its owner k, which averages what arrives (the robust
 * filter first drops the members whose statistics are outliers); the
 * all-gather sends each owner's mean shard back to every member. What it
 * waits for and when it gives up follows the round protocol's membership
 * (al_round.h); it decides none of it. Split from agent_net.c (the server
 * hooks, clients, pulls and the handshake). */
#include "agent_exchange.h"
#include "agent_net.h"
#include "agent_stream.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int push_shard(agent *a, int peer, uint32_t phase, int k, uint64_t tag, size_t len,
                      al_err *err) {
    al_shard_meta m;
    memset(&m, 0, sizeof m);
    snprintf(m.site, sizeof m.site, "%s", a->name[a->self]);
    m.round = (uint64_t)a->round;
    m.epoch = tag;
    m.phase = phase;
    m.shard_id = (uint32_t)k;
    m.num_shards = AG_MAX_SITES;
    m.total_bytes = len;
    m.codec = a->cc.cfg.kind;
    m.zstd = a->cc.cfg.zstd;
    m.shard_checksum = al_xxh64(a->cc.enc, len, 0);
    pthread_mutex_lock(&a->mu); /* a peer already down: no push that waits out its deadline */
    int down = ag_down(a, peer);
    pthread_mutex_unlock(&a->mu);
    if (down)
        return al_errf(err, AL_EPEER, "round %ld: %s is down (no heartbeat)", a->round,
                       a->name[peer]);
    if (ag_stop_due(a)) /* a signal: the round had its heartbeat (agent_hb.c cancels later ones) */
        return al_errf(err, AL_ETIMEOUT, "round %ld: stopping before the push to %s", a->round,
                       a->name[peer]);
    int rc = al_client_push_shard(a->cli[peer], &m, a->cc.enc, err);
    /* A retried push whose first try did arrive (its reply was lost or late):
     * the peer holds this very shard -- the same sender, round, attempt and
     * id, hence the same bytes -- so it is done. */
    if (rc && al_client_last_status(a->cli[peer]) == AL_ST_ALREADY_EXISTS) rc = 0;
    return rc;
}

/* Is slot s a complete shard k of this round and attempt? */
static int slot_ok(const agent *a, const ag_slot *s, int k, uint64_t tag) {
    return s->state == 2 && (long)s->meta.round == a->round && s->meta.epoch == tag &&
           (int)s->meta.shard_id == k;
}

/* Has member i left this attempt? Its shard or status names a later attempt
 * or round, another membership in this epoch, or a vote (it will send no
 * more). Called under a->mu. */
static int gone_elsewhere(agent *a, int i, uint64_t epoch, uint32_t members, const char **why) {
    int p = (int)(a->round & 1);
    const ag_slot *s[2] = {&a->reduce[p][i], &a->gather[p][i]};
    for (int k = 0; k < 2; k++) {
        if (s[k]->state == 0 || (long)s[k]->meta.round != a->round) continue;
        uint64_t e = ag_tag_epoch(s[k]->meta.epoch);
        if (e > epoch || (e == epoch && ag_tag_members(s[k]->meta.epoch) != members)) {
            *why = "it is in another attempt";
            return 1;
        }
    }
    const al_peer_status *st = &a->pst[i];
    if (!st->have_base) return 0;
    if ((long)st->round > a->round || (st->round == (uint64_t)a->round && st->epoch > epoch)) {
        *why = "it moved on";
        return 1;
    }
    if (st->round == (uint64_t)a->round && st->epoch == epoch && st->vote != AL_VOTE_NONE &&
        !(st->vote == AL_VOTE_HASH && st->members == members)) {
        *why = st->vote == AL_VOTE_NULL ? "it voted null" : "it voted with other members";
        return 1;
    }
    return 0;
}

/* Wait until every member but us has slot k complete in `slots` (k = -1: each
 * member's own index). 0, or an error with *peer set. Under a->mu. */
static int wait_slots(agent *a, ag_slot (*slots)[AG_MAX_SITES], const int *mem, int M, int me,
                      int kfix, uint64_t epoch, uint32_t members, int *peer, const char *what,
                      al_err *err) {
    int p = (int)(a->round & 1);
    uint64_t tag = ag_attempt_tag(epoch, members);
    double t0 = al_now(), T = a->cfg->round_peer_timeout_s, next = t0 + T;
    double dl = t0 + a->cfg->round_deadline_s; /* deadlines on the monotonic clock (al_now) */
    for (;;) {
        int missing = -1;
        for (int j = 0; j < M && missing < 0; j++)
            if (j != me && !slot_ok(a, &slots[p][mem[j]], kfix >= 0 ? kfix : j, tag))
                missing = mem[j];
        if (missing < 0) return 0;
        *peer = missing;
        const char *why = NULL;
        if (ag_stop_due(a)) /* a signal: the round had its heartbeat */
            return al_errf(err, AL_ETIMEOUT, "round %ld: stopping: no %s from %s yet", a->round,
                           what, a->name[missing]);
        if (ag_down(a, missing))
            return al_errf(err, AL_EPEER, "round %ld: %s is down (no heartbeat)", a->round,
                           a->name[missing]);
        if (gone_elsewhere(a, missing, epoch, members, &why))
            return al_errf(err, AL_EPEER, "round %ld: no %s from %s: %s", a->round, what,
                           a->name[missing], why);
        double now = al_now();
        if (now >= next) { /* a wait past peer_timeout_s says what it waits for */
            al_logf(&a->log, AL_LOG_INFO,
                    "round %ld: waiting %.0f s for %s's %s (gives up at %.0f s, or when it is "
                    "down)",
                    a->round, now - t0, a->name[missing], what, a->cfg->round_deadline_s);
            next = now + T;
        }
        int last = next > dl;
        if (!al_cond_wait_until(&a->cv, &a->mu, last ? dl : next) && last)
            return al_errf(err, AL_ETIMEOUT, "round %ld: no %s from %s within %.0f s", a->round,
                           what, a->name[missing], a->cfg->round_deadline_s);
    }
}

/* Robust aggregation ([outer] max_delta_ratio = k): a member whose ‖Δ‖ is
 * more than k × the median over the members is left out of the mean (it stays
 * a member: it sends and receives shards and gets the same θ_global). The
 * decision uses only the members' statistics, so every member makes it alike;
 * it needs M >= 3 (with two, neither is an outlier of the other). The rule is
 * al_commit_outliers, shared with the simulator. */
static void robust_filter(agent *a, const int *mem, const al_site_stats *stats, int M) {
    memset(a->excluded, 0, sizeof a->excluded);
    int out[AG_MAX_SITES];
    double med;
    if (al_commit_outliers(stats, M, a->cfg->outer_max_delta_ratio, out, &med) == 0) return;
    for (int j = 0; j < M; j++)
        if (out[j]) {
            double norm = sqrt(stats[j].delta_sq);
            a->excluded[mem[j]] = 1;
            al_logf(&a->log, AL_LOG_WARN,
                    "round %ld: leaving %s's update out of the mean: |delta| %.4g is %.1f x the "
                    "median %.4g of %d sites ([outer] max_delta_ratio = %g)",
                    a->round, a->name[mem[j]], norm, norm / med, med, M,
                    a->cfg->outer_max_delta_ratio);
        }
}

/* One exchange: its attempt and members, and the part of Δ it moves. */
typedef struct xchg {
    uint64_t epoch, tag; /* the attempt, and its tag (ag_attempt_tag) */
    uint32_t members;
    const int *mem; /* the M members (site ids, increasing), this site the me-th */
    const al_site_stats *st;
    int M, me;
    size_t P;            /* the values exchanged: Δ[flo, fhi) of θ ... */
    float *delta, *dbar; /* ... a->delta + flo, a->dbar + flo */
    size_t lo, hi;       /* this site's shard of them */
    int *peer;           /* the member at fault */
} xchg;

/* Reduce-scatter, sending: this site's part of shard k to its owner (its own
 * part into the mean). */
static int reduce_send(agent *a, const xchg *x, al_mean *acc, al_err *err) {
    int rc = 0;
    for (int k = 0; k < x->M && rc == 0; k++) {
        size_t klo, khi, len;
        al_shard_range(x->P, x->M, k, &klo, &khi);
        rc = al_commit_encode(&a->cc, x->delta + klo, khi - klo, &len, err);
        if (rc) break;
        if (x->mem[k] == a->self) {
            rc = al_codec_decode(a->cc.enc, len, a->part, khi - klo, err);
            if (rc == 0 && !a->excluded[a->self]) rc = al_mean_add(acc, a->self, a->part, err);
        } else {
            a->bytes_raw += (double)(khi - klo) * 4.0;
            if (push_shard(a, x->mem[k], AL_PHASE_REDUCE, k, x->tag, len, err) != 0) {
                *x->peer = x->mem[k];
                rc = AL_EPEER;
            }
        }
    }
    return rc;
}

/* Reduce-scatter, receiving: wait for the others' parts of my shard, and
 * decode them under the lock: the slots' buffers belong to whoever holds it,
 * and a server thread placing a newer attempt's shard frees the old one. A
 * shard is a few milliseconds of work; server threads wait that long at most. */
static int reduce_recv(agent *a, const xchg *x, al_mean *acc, al_err *err) {
    int p = (int)(a->round & 1), rc;
    const int *mem = x->mem;
    pthread_mutex_lock(&a->mu);
    rc = wait_slots(a, a->reduce, mem, x->M, x->me, x->me, x->epoch, x->members, x->peer, "shard",
                    err);
    for (int j = 0; j < x->M && rc == 0; j++) {
        if (mem[j] == a->self || a->excluded[mem[j]]) continue;
        ag_slot *s = &a->reduce[p][mem[j]];
        rc = al_codec_decode(s->buf, s->meta.total_bytes, a->part, x->hi - x->lo, err);
        double nrm;
        if (rc == 0 && !al_commit_fits_claim(a->part, x->hi - x->lo, x->st[j].delta_sq, &nrm)) {
            /* longer than the whole Δ it reported: not in this shard's mean */
            al_logf(&a->log, AL_LOG_WARN,
                    "round %ld: leaving %s's part of shard %d out of the mean: its norm %.4g "
                    "exceeds the |delta| %.4g it reported (a site that lies about its update)",
                    a->round, a->name[mem[j]], x->me, nrm, sqrt(x->st[j].delta_sq));
            rc = al_mean_drop(acc, mem[j], err);
            continue;
        }
        if (rc == 0) rc = al_mean_add(acc, mem[j], a->part, err);
        if (rc) {
            *x->peer = mem[j]; /* a contribution that does not decode: leave its site out */
            al_err_prefix(err, "round %ld: shard from %s refused", a->round, a->name[mem[j]]);
            rc = AL_EPEER;
        }
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

/* Reduce-scatter: on return a->part holds the mean of my shard. */
static int reduce_scatter(agent *a, const xchg *x, al_err *err) {
    al_mean acc;
    int rc = al_mean_init(&acc, a->nsites, x->hi - x->lo, err);
    if (rc) return rc;
    rc = reduce_send(a, x, &acc, err);
    for (int i = 0; i < a->nsites && rc == 0; i++)
        if (!(x->members >> i & 1) || a->excluded[i]) al_mean_drop(&acc, i, NULL);
    if (rc == 0) rc = reduce_recv(a, x, &acc, err);
    if (rc == 0) rc = al_mean_finish(&acc, a->part, err);
    al_mean_free(&acc);
    return rc;
}

/* All-gather, receiving: every other member's mean shard into dbar, under the
 * lock (see reduce_recv). */
static int gather_recv(agent *a, const xchg *x, al_err *err) {
    int p = (int)(a->round & 1), rc;
    const int *mem = x->mem;
    /* a mean shard is no longer than the longest Δ a member of the mean reported */
    double claim_max = 0;
    for (int j = 0; j < x->M; j++)
        if (!a->excluded[mem[j]]) claim_max = fmax(claim_max, x->st[j].delta_sq);
    pthread_mutex_lock(&a->mu);
    rc = wait_slots(a, a->gather, mem, x->M, x->me, -1, x->epoch, x->members, x->peer, "mean shard",
                    err);
    for (int k = 0; k < x->M && rc == 0; k++) {
        if (k == x->me) continue;
        size_t klo, khi;
        al_shard_range(x->P, x->M, k, &klo, &khi);
        ag_slot *s = &a->gather[p][mem[k]];
        rc = al_codec_decode(s->buf, s->meta.total_bytes, x->dbar + klo, khi - klo, err);
        double nrm;
        if (rc) {
            *x->peer = mem[k];
            al_err_prefix(err, "round %ld: mean shard from %s refused", a->round, a->name[mem[k]]);
            rc = AL_EPEER;
        } else if (!al_commit_fits_claim(x->dbar + klo, khi - klo, claim_max, &nrm)) {
            *x->peer = mem[k]; /* the same bytes reach every member: all refuse them alike */
            rc = al_errf(err, AL_EINTEGRITY,
                         "round %ld: mean shard from %s refused: its norm %.4g exceeds the "
                         "longest |delta| %.4g a member reported (a site that lies about its "
                         "update)",
                         a->round, a->name[mem[k]], nrm, sqrt(claim_max));
        }
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

/* All-gather: encode the mean once, decode it here too, send the same bytes;
 * then the others' mean shards. */
static int all_gather(agent *a, const xchg *x, al_err *err) {
    size_t len;
    int rc;
    if ((rc = al_commit_encode(&a->cc, a->part, x->hi - x->lo, &len, err))) return rc;
    if ((rc = al_codec_decode(a->cc.enc, len, x->dbar + x->lo, x->hi - x->lo, err))) return rc;
    for (int j = 0; j < x->M; j++) {
        if (x->mem[j] == a->self) continue;
        a->bytes_raw += (double)(x->hi - x->lo) * 4.0;
        int lie = a->fault_liar_to[0] && !strcmp(a->name[x->mem[j]], a->fault_liar_to);
        if (lie) { /* test hook: this peer alone gets a mean shard of fault_liar everywhere */
            float *v = malloc((x->hi - x->lo) * sizeof *v);
            if (!v) return al_errf(err, AL_ENOMEM, "AL_FAULT liar: out of memory");
            for (size_t i = 0; i < x->hi - x->lo; i++) v[i] = (float)a->fault_liar;
            size_t ll;
            rc = al_commit_encode(&a->cc, v, x->hi - x->lo, &ll, err);
            free(v);
            if (rc == 0 && push_shard(a, x->mem[j], AL_PHASE_GATHER, x->me, x->tag, ll, err) != 0)
                rc = AL_EPEER;
            if (rc == 0) rc = al_commit_encode(&a->cc, a->part, x->hi - x->lo, &len, err);
        } else if (push_shard(a, x->mem[j], AL_PHASE_GATHER, x->me, x->tag, len, err) != 0) {
            rc = AL_EPEER;
        }
        if (rc) {
            *x->peer = x->mem[j];
            return rc;
        }
    }
    return gather_recv(a, x, err);
}

int ag_exchange(agent *a, uint64_t epoch, uint32_t members, const int *mem, const al_site_stats *st,
                int M, int *peer, al_err *err) {
    *peer = -1;
    int me = 0;
    while (me < M && mem[me] != a->self) me++;
    int rc = ag_refresh_clients(a, err);
    if (rc) return rc;
    if (me == M) return al_errf(err, AL_EINVAL, "round %ld: this site is not a member", a->round);
    robust_filter(a, mem, st, M);
    size_t flo, fhi; /* Δ[flo, fhi): all of θ, or (streaming) the round's fragment */
    ag_frag(a, a->round, &flo, &fhi);
    xchg x = {.epoch = epoch,
              .tag = ag_attempt_tag(epoch, members),
              .members = members,
              .mem = mem,
              .st = st,
              .M = M,
              .me = me,
              .P = fhi - flo,
              .delta = a->delta + flo,
              .dbar = a->dbar + flo,
              .peer = peer};
    al_shard_range(x.P, M, me, &x.lo, &x.hi);
    if ((rc = reduce_scatter(a, &x, err))) return rc;
    return all_gather(a, &x, err);
}

/* ---- pulling the committed state ---------------------------------------------------- */
