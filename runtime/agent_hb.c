/* agent_hb.c -- failure detection: heartbeats to every peer.
 *
 * A thread of its own pings every peer each [round] heartbeat_s, on a client
 * per peer that no round uses (so a round's long shard push never delays a
 * heartbeat, and a heartbeat never waits behind one). A peer that answers,
 * even with a refusal, is up; one that has answered nothing for [round]
 * peer_timeout_s is down: the thread logs it, marks it in a->down and wakes
 * the round, whose waits (statistics, shards) stop waiting for it at once
 * instead of at [round] deadline_s. When it answers again it is up again (a
 * restarted site then rejoins as before). Heartbeat bytes are control traffic,
 * in no byte count (al_transport.h). */
#include "agent_impl.h"

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

static void *hb_main(void *arg) {
    agent *a = arg;
    const double beat = a->cfg->round_heartbeat_s, timeout = a->cfg->round_peer_timeout_s;
    pthread_mutex_lock(&a->mu);
    while (!a->hb_stop) {
        long round = a->cur_round;
        pthread_mutex_unlock(&a->mu);
        double t0 = al_now();
        for (int i = 0; i < a->nsites; i++) {
            if (i == a->self) continue;
            al_err e = {0};
            uint64_t ms;
            int rc = al_client_ping(a->hb_cli[i], (uint64_t)AL_MAX(round, 0), 0, &ms, &e);
            int ok = answered(a->hb_cli[i], rc);
            double now = al_now();
            int change = 0;
            pthread_mutex_lock(&a->mu);
            long r = a->cur_round, step = a->cur_step;
            if (ok) {
                a->hb_seen[i] = now;
                if (a->down[i]) {
                    a->down[i] = 0;
                    change = 1;
                    al_logf(&a->log, AL_LOG_INFO, "site %s: %s answers heartbeats again",
                            a->name[a->self], a->name[i]);
                }
            } else if (!a->down[i] && now - a->hb_seen[i] > timeout) {
                a->down[i] = 1;
                change = -1;
                al_logf(&a->log, AL_LOG_WARN,
                        "site %s: no heartbeat answered by %s for %.1f s ([round] peer_timeout_s "
                        "= %g): it is down (%s)",
                        a->name[a->self], a->name[i], now - a->hb_seen[i], timeout, e.msg);
                pthread_cond_broadcast(&a->cv); /* a round waiting for it stops waiting */
            }
            pthread_mutex_unlock(&a->mu);
            /* the event log and /metrics (membership itself changes at commits) */
            if (change) ag_event_at(a, change > 0 ? "up" : "down", a->name[i], r, step);
            if (change < 0) al_metrics_peer_up(&a->met, a->name[i], 0);
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double wait = AL_MAX(0.0, beat - (al_now() - t0));
        double t = (double)until.tv_sec + 1e-9 * (double)until.tv_nsec + wait;
        until.tv_sec = (time_t)t;
        until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
        pthread_mutex_lock(&a->mu);
        while (!a->hb_stop && pthread_cond_timedwait(&a->hb_cv, &a->mu, &until) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

int ag_hb_start(agent *a, al_err *err) {
    pthread_cond_init(&a->hb_cv, NULL);
    double now = al_now();
    for (int i = 0; i < a->nsites; i++) {
        a->hb_seen[i] = now; /* a peer gets peer_timeout_s from our start */
        a->down[i] = 0;
        if (i != a->self) {
            int rc = make_hb_client(a, i, err);
            if (rc) return rc;
        }
    }
    a->hb_stop = 0;
    int rc = pthread_create(&a->hb_thread, NULL, hb_main, a);
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
