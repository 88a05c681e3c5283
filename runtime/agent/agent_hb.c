/* agent_hb.c -- heartbeats and failure detection.
 *
 * A thread of its own pings every peer each [round] heartbeat_s (and at once
 * when the driver has news: a vote, new statistics), on a client per peer that
 * no round uses (so a round's long shard push never delays a heartbeat, and a
 * heartbeat never waits behind one). Each ping carries this site's round
 * status (al_round.h) and its answer the peer's: both land in the inbox
 * (a->pst) that the driver feeds to the state machine. The round's statistics
 * travel on the same clients, resent until each peer took them. A peer that
 * answers, even with a refusal, is up; one that has answered nothing for
 * [round] peer_timeout_s is down: the thread logs it, marks it in a->down and
 * wakes the driver, whose exchange stops waiting for it at once instead of at
 * [round] deadline_s. Heartbeats and statistics are control traffic, in no
 * byte count (al_transport.h). */
#include "agent_hb.h"
#include "agent_events.h"
#include "agent_net.h"

#include <errno.h>
#include <string.h>

static int make_hb_client(agent *a, int i, al_err *err) {
    const al_config *c = a->cfg;
    /* one try per beat, answered within half a beat: a sweep over n peers
     * takes at most n/2 beats even when every peer is silent */
    al_client_cfg cc = ag_client_cfg(a, i);
    cc.deadline_s = 0.5 * c->round_heartbeat_s;
    cc.max_attempts = 1;
    cc.backoff_s = 0.1;
    cc.backoff_max_s = AL_MAX(0.1, c->round_heartbeat_s);
    cc.seed = (uint64_t)a->self + 101;
    cc.uncounted = 1; /* pings and statistics: control traffic */
    int rc = al_client_new(&cc, &a->hb_cli[i], err);
    return rc ? al_err_prefix(err, "heartbeat client for %s", a->name[i]) : 0;
}

/* Did the peer answer? A status from its server (even a refusal) says it is
 * there; no connection or no answer in time says nothing. */
static int answered(const al_client *c, int rc) {
    if (rc == 0) return 1;
    int st = al_client_last_status(c);
    return st != AL_ST_UNAVAILABLE && st != AL_ST_DEADLINE_EXCEEDED && st != AL_ST_CANCELLED &&
           st != AL_ST_UNKNOWN;
}

/* One beat to peer i: our status (its answer into the inbox), then our
 * statistics if it still needs them. Returns whether it answered. */
static int beat(agent *a, int i, al_err *e) {
    pthread_mutex_lock(&a->mu);
    al_peer_status mine = a->my_status, theirs;
    int send_stats = (int)(a->stats_to >> i & 1);
    al_site_stats st = a->out_stats;
    long sr = a->out_round;
    uint64_t se = a->out_epoch;
    pthread_mutex_unlock(&a->mu);
    int rc = al_client_status(a->hb_cli[i], &mine, &theirs, e);
    int ok = answered(a->hb_cli[i], rc);
    int why = al_client_last_status(a->hb_cli[i]);
    if (rc && (why == AL_ST_PERMISSION_DENIED || why == AL_ST_UNAUTHENTICATED)) {
        pthread_mutex_lock(&a->mu); /* who we are is refused: no retry fixes it */
        if (!a->refused[0])
            snprintf(a->refused, sizeof a->refused, "site %s refused us: %.300s", a->name[i],
                     e->msg);
        pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
    }
    if (rc == 0 && theirs.have_base) {
        pthread_mutex_lock(&a->mu);
        a->pst[i] = theirs;
        a->pst_new[i] = 1;
        pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
    }
    if (ok && send_stats) {
        al_err se_err = {0};
        int src = ag_push_stats(a, a->hb_cli[i], &st, sr, se, &se_err);
        int sst = al_client_last_status(a->hb_cli[i]);
        pthread_mutex_lock(&a->mu);
        /* taken, or refused for good (another round): either way, not again */
        if ((src == 0 || (sst != AL_ST_UNAVAILABLE && sst != AL_ST_DEADLINE_EXCEEDED)) &&
            a->out_round == sr && a->out_epoch == se) {
            a->stats_to &= ~(1u << i);
            if (src == 0) a->stats_took |= 1u << i;
        }
        pthread_mutex_unlock(&a->mu);
    }
    return ok;
}

static void *hb_main(void *arg) {
    agent *a = arg;
    pthread_setname_np(pthread_self(), "al-heartbeat");
    const double beat_s = a->cfg->round_heartbeat_s, timeout = a->cfg->round_peer_timeout_s;
    pthread_mutex_lock(&a->mu);
    while (!a->hb_stop) {
        a->hb_kick = 0;
        pthread_mutex_unlock(&a->mu);
        double t0 = al_now();
        for (int i = 0; i < a->nsites; i++) {
            if (i == a->self) continue;
            al_err e = {0};
            int ok = beat(a, i, &e);
            double now = al_now();
            int change = 0;
            pthread_mutex_lock(&a->mu);
            long r = a->cur_round, step = a->cur_step;
            if (ok) {
                a->hb_seen[i] = now;
                if (a->down[i]) {
                    a->down[i] = 0;
                    a->reconnect[i] = 1;         /* it was gone: a fresh channel, no backoff */
                    a->stats_took &= ~(1u << i); /* and it may have lost our statistics */
                    change = 1;
                    al_logf(&a->log, AL_LOG_INFO, "site %s: %s answers heartbeats again",
                            a->name[a->self], a->name[i]);
                }
            } else if (!a->down[i] && now - a->hb_seen[i] > timeout) {
                a->down[i] = 1;
                change = -1;
                /* a call of the round to it (a push to a peer that froze
                 * mid-exchange) ends now, not at its deadline */
                al_client_cancel(a->cli[i]);
                al_logf(&a->log, AL_LOG_WARN,
                        "site %s: no heartbeat answered by %s for %.1f s ([round] peer_timeout_s "
                        "= %g): it is down (%s)",
                        a->name[a->self], a->name[i], now - a->hb_seen[i], timeout, e.msg);
            }
            pthread_cond_broadcast(&a->cv); /* the driver: news, or a peer down */
            pthread_mutex_unlock(&a->mu);
            /* the event log and /metrics (membership itself changes at commits) */
            if (change) ag_event_at(a, change > 0 ? "up" : "down", a->name[i], r, step);
            if (change) al_metrics_peer_reachable(&a->met, a->name[i], change > 0);
            if (change < 0) al_metrics_peer_up(&a->met, a->name[i], 0);
        }
        /* a stop is due (ag_stop_due): a call of the round still in flight
         * (a push, a pull) ends now; the driver then saves and stops */
        double age = ag_stop_age(a), until = t0 + beat_s; /* (the monotonic clock) */
        if (age >= 0 && age >= beat_s) {
            pthread_mutex_lock(&a->mu);
            for (int i = 0; i < a->nsites; i++) al_client_cancel(a->cli[i]);
            pthread_cond_broadcast(&a->cv);
            pthread_mutex_unlock(&a->mu);
        } else if (age >= 0) {
            until = AL_MIN(until, al_now() + beat_s - age + 0.01); /* wake when it is due */
        }
        pthread_mutex_lock(&a->mu);
        while (!a->hb_stop && !a->hb_kick && al_cond_wait_until(&a->hb_cv, &a->mu, until)) {
        }
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

int ag_hb_start(agent *a, al_err *err) {
    int rc = al_cond_init(&a->hb_cv, err);
    if (rc) return rc;
    double now = al_now();
    for (int i = 0; i < a->nsites; i++) {
        /* a peer gets peer_timeout_s from our start, and counts as heard for
         * as long (its first ping may come a beat late: else a site would
         * leave the others out of round 0) */
        a->hb_seen[i] = a->call_seen[i] = now;
        a->down[i] = 0;
        if (i != a->self) {
            if ((rc = make_hb_client(a, i, err))) return rc;
        }
    }
    a->hb_stop = 0;
    rc = pthread_create(&a->hb_thread, NULL, hb_main, a);
    if (rc) return al_errf(err, AL_EIO, "heartbeat thread: %s", strerror(rc));
    a->hb_running = 1;
    return 0;
}

void ag_hb_stop(agent *a) {
    if (a->hb_running) {
        pthread_mutex_lock(&a->mu);
        a->hb_stop = 1;
        pthread_cond_broadcast(&a->hb_cv);
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->hb_thread, NULL);
        a->hb_running = 0;
        pthread_cond_destroy(&a->hb_cv);
    }
    for (int i = 0; i < a->nsites; i++)
        if (a->hb_cli[i]) {
            al_client_free(a->hb_cli[i]);
            a->hb_cli[i] = NULL;
        }
}
