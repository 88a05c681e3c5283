/* agent_join.c -- a site joining a run: find the peers and their round, shake
 * hands (every site must share the run's configuration), and, when the peers
 * are ahead, register for the round after theirs, wait for it, and pull
 * θ_global, the outer and the policy state from one of them (another if its
 * state does not fit). See docs/ARCHITECTURE.md, "Between sites". */
#include "agent_impl.h"

#include <jansson.h>
#include <string.h>
#include <time.h>

typedef struct peer_meta {
    long round, step, h;
    char policy[2048];
    int members[AG_MAX_SITES];
} peer_meta;

static int parse_meta(agent *a, const uint8_t *d, uint64_t n, peer_meta *pm, al_err *err) {
    json_error_t je;
    json_t *m = json_loadb((const char *)d, n, 0, &je);
    json_int_t r = 0, s = 0, h = 0;
    const char *pol = NULL;
    json_t *mem = NULL;
    if (!m || json_unpack(m, "{s:I, s:I, s:I, s:s, s:o}", "round", &r, "step", &s, "h", &h,
                          "policy", &pol, "members", &mem) != 0) {
        json_decref(m);
        return al_errf(err, AL_EFORMAT, "peer state: malformed metadata");
    }
    pm->round = (long)r;
    pm->step = (long)s;
    pm->h = (long)h;
    snprintf(pm->policy, sizeof pm->policy, "%s", pol);
    memset(pm->members, 0, sizeof pm->members);
    size_t i;
    json_t *v;
    json_array_foreach(mem, i, v) {
        int id = json_is_string(v) ? ag_site_id(a, json_string_value(v)) : -1;
        if (id >= 0) pm->members[id] = 1;
    }
    json_decref(m);
    return 0;
}

int ag_join(agent *a, al_err *err) {
    /* who is there, and where are they? At a fresh start wait (up to the
     * round deadline) for every configured peer, so that sites started a few
     * seconds apart begin together. */
    peer_meta pm[AG_MAX_SITES];
    int up[AG_MAX_SITES] = {0}, nup = 0;
    long ahead = -1;
    double t_wait = al_now() + a->cfg->round_deadline_s, t_note = 0;
    for (;;) {
        for (int i = 0; i < a->nsites; i++) {
            if (i == a->self || up[i]) continue;
            uint8_t *d = NULL;
            uint64_t n = 0;
            al_err e = {0};
            if (al_client_pull_state(a->cli[i], AL_STATE_META, 1 << 20, &d, &n, &e) == 0 &&
                parse_meta(a, d, n, &pm[i], &e) == 0) {
                up[i] = 1;
                nup++;
                if (pm[i].round > ahead) ahead = pm[i].round;
            } else {
                int st = al_client_last_status(a->cli[i]);
                if (st == AL_ST_PERMISSION_DENIED || st == AL_ST_UNAUTHENTICATED ||
                    st == AL_ST_FAILED_PRECONDITION) { /* no retry fixes these */
                    free(d);
                    *err = e;
                    return al_err_prefix(err, "site %s refused us", a->name[i]);
                }
            }
            free(d);
        }
        if (nup == a->nsites - 1 || ahead > a->round) break;
        if (al_now() > t_wait) {
            /* fewer sites than [round] min_sites: wait for more rather than train */
            if (nup + 1 >= a->cfg->round_min_sites) break;
            if (a->stop && *a->stop)
                return 0; /* SIGTERM while waiting: the driver saves and exits */
            if (al_now() > t_note) {
                al_logf(&a->log, AL_LOG_INFO,
                        "site %s: %d of %d sites reachable, waiting for "
                        "[round] min_sites = %ld",
                        a->name[a->self], nup + 1, a->nsites, a->cfg->round_min_sites);
                t_note = al_now() + 10;
            }
        }
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    /* handshake: every site of a run must share the run's configuration */
    al_hello mine, theirs;
    ag_hello(a, &mine);
    for (int i = 0; i < a->nsites; i++) {
        if (!up[i]) continue;
        int rc = al_client_hello(a->cli[i], &mine, &theirs, err);
        if (rc) return al_err_prefix(err, "handshake with %s", a->name[i]);
        if (memcmp(theirs.config_hash, mine.config_hash, 32) != 0) {
            char h[65];
            for (int k = 0; k < 32; k++) sprintf(h + 2 * k, "%02x", theirs.config_hash[k]);
            return al_errf(err, AL_EMISMATCH,
                           "site %s runs a different configuration (run hash %.16s, ours %.16s): "
                           "[model], [inner] recipe, [outer] and [policy] must match",
                           a->name[i], h, a->run_hash);
        }
    }
    memset(a->live, 0, sizeof a->live);
    a->live[a->self] = 1;
    if (nup == 0 || ahead <= a->round) {
        /* a fresh run (or everyone at our round): the sites that answered */
        for (int i = 0; i < a->nsites; i++) a->live[i] = up[i] || i == a->self;
        al_logf(&a->log, AL_LOG_INFO, "site %s: starting at round %ld (%d peers answered)",
                a->name[a->self], a->round, nup);
        return 0;
    }
    /* Behind: register with every live peer for the *next* round (r + 1), wait
     * until they have all committed round r, then take θ_global, the outer and
     * the policy state from one of them and train round r + 1 alongside them.
     * Joining the round in progress would start us up to a whole interval late,
     * and peers whose deadlines fell on either side of our statistics would
     * disagree on whether we are in. Registrations that found the peers at
     * different rounds are redone (the last one counts). */
    al_logf(&a->log, AL_LOG_INFO, "site %s: peers are at round %ld, joining", a->name[a->self],
            ahead);
    double t_end = al_now() + 4 * a->cfg->round_deadline_s + 60;
    int liar[AG_MAX_SITES] = {0}; /* served a state that did not fit: not a source again */
    for (;;) {
        if (a->stop && *a->stop)
            return 0; /* SIGTERM while joining: the driver saves what it has and exits */
        if (al_now() > t_end)
            return al_errf(err, AL_ETIMEOUT, "joining: peers never settled on one round");
        struct timespec nap = {0, 100 * 1000 * 1000};
        long r = -1;
        int ok = 1;
        for (int i = 0; i < a->nsites && ok; i++) { /* register: joining[me] = their round + 1 */
            if (!up[i]) continue;
            uint8_t *d = NULL;
            uint64_t n = 0;
            al_err e = {0};
            if (al_client_pull_state(a->cli[i], AL_STATE_MOMENTUM, 1 << 20, &d, &n, &e) != 0 ||
                parse_meta(a, d, n, &pm[i], &e) != 0 || (r >= 0 && pm[i].round != r))
                ok = 0;
            else
                r = pm[i].round;
            free(d);
        }
        if (!ok || r < 0) {
            nanosleep(&nap, NULL);
            continue;
        }
        ag_set_round(a, r + 1); /* their round-(r+1) traffic is for us from now on */
        /* wait for every peer to commit round r */
        int src = -1, behind = 1;
        while (ok && behind && al_now() < t_end && !(a->stop && *a->stop)) {
            behind = 0;
            for (int i = 0; i < a->nsites && ok; i++) {
                if (!up[i]) continue;
                uint8_t *d = NULL;
                uint64_t n = 0;
                al_err e = {0};
                if (al_client_pull_state(a->cli[i], AL_STATE_META, 1 << 20, &d, &n, &e) != 0 ||
                    parse_meta(a, d, n, &pm[i], &e) != 0 || pm[i].round > r + 1)
                    ok = 0; /* gone, or already past the round we registered for */
                else if (pm[i].round < r + 1)
                    behind = 1;
                else if (!liar[i])
                    src = i;
                free(d);
            }
            if (ok && behind) nanosleep(&nap, NULL);
        }
        if (!ok || behind || src < 0) continue;
        uint8_t *d = NULL;
        uint64_t n = 0;
        /* at most the bytes a state of our P takes (the pull's deadline follows
         * them); a peer whose state does not fit is left and another tried */
        al_err e = {0};
        int rc = al_client_pull_state(a->cli[src], AL_STATE_THETA, al_outer_state_bytes(a->P), &d,
                                      &n, &e);
        if (rc == 0) rc = al_outer_deserialize(&a->outer, d, n, &a->outer.cfg, &e);
        free(d);
        if (rc == 0) rc = al_policy_load(a->pol, pm[src].policy, &e);
        if (rc) { /* it stays a peer (registered, a member); the state comes from another */
            liar[src] = 1;
            int left = 0;
            for (int i = 0; i < a->nsites; i++) left += up[i] && !liar[i];
            al_logf(&a->log, AL_LOG_WARN, "joining: the state from %s refused (%s); %s",
                    a->name[src], e.msg, left ? "trying another peer" : "no peer left");
            if (!left) {
                *err = e;
                return al_err_prefix(err, "joining from %s", a->name[src]);
            }
            continue;
        }
        a->round = pm[src].round;
        a->step = pm[src].step;
        a->h = pm[src].h;
        for (int i = 0; i < a->nsites; i++) a->live[i] = pm[src].members[i] || up[i];
        a->live[a->self] = 1;
        al_logf(&a->log, AL_LOG_INFO, "site %s: joined at round %ld, step %ld (state from %s)",
                a->name[a->self], a->round, a->step, a->name[src]);
        return 0;
    }
}
