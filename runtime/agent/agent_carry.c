/* agent_carry.c -- the carry in the agent (docs/ARCHITECTURE.md, "Carrying a
 * value"): a site votes only for a value it holds. The candidate of its
 * latest hash vote is persisted (candidate.bin) before the vote and kept in
 * memory for peers (a->cand_snap, served by agent_net.c's candidate hook as a
 * PullState naming its hash); a site that carries a value it does not hold
 * fetches it from a voter (AL_ACT_FETCH), checks it against the hash, and
 * holds it (AL_ACT_HOLD) before it votes for it. */
#include "agent_carry.h"
#include "agent_hard.h"
#include "agent_hash.h"
#include "agent_net.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void snap_free(ag_snapshot *sn) {
    if (!sn) return;
    free(sn->outer);
    free(sn->meta);
    free(sn);
}

/* The kept copy becomes sn (hash h); the old one goes once no reply streams it. */
static void keep(agent *a, ag_snapshot *sn, const al_round_hash *h) {
    pthread_mutex_lock(&a->mu);
    ag_snapshot *old = a->cand_snap;
    a->cand_snap = sn;
    if (sn) a->cand_snap_h = *h;
    if (old && old->refs == 0) snap_free(old); /* else its last reply frees it */
    pthread_mutex_unlock(&a->mu);
}

/* A sealed serialized candidate (buf, len: taken over) and its decision into
 * a copy to keep. */
static ag_snapshot *snap_of(agent *a, uint8_t *buf, size_t len, long round, const al_round_hash *h,
                            uint32_t members, long h_next, const char *policy) {
    ag_snapshot *sn = calloc(1, sizeof *sn);
    char hx[65];
    ag_hash_hex(h, hx);
    json_t *m = json_pack("{s:I, s:s, s:I, s:I, s:s}", "round", (json_int_t)round, "theta", hx,
                          "members", (json_int_t)members, "h_next", (json_int_t)h_next, "policy",
                          policy ? policy : "");
    char *js = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    if (!sn || !js) {
        free(sn);
        free(js);
        free(buf);
        al_logf(&a->log, AL_LOG_WARN,
                "site %s: round %ld: out of memory: the candidate voted for is not served",
                a->name[a->self], round);
        return NULL;
    }
    sn->outer = buf;
    sn->outer_len = len;
    sn->meta = js;
    sn->meta_len = strlen(js);
    sn->round = round;
    sn->sealed = 1;
    return sn;
}

int ag_carry_save(agent *a, long h_next, const char *policy, al_err *err) {
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = ag_hard_save_candidate(a, &buf, &len, err); /* (sealed) */
    if (rc) return rc;
    uint32_t members = 0;
    for (int j = 0; j < a->cand_M; j++) members |= 1u << a->cand_mem[j];
    keep(a, snap_of(a, buf, len, a->round, &a->cand_h, members, h_next, policy), &a->cand_h);
    return 0;
}

int ag_carry_keep_file(agent *a, const char *path, al_err *err) {
    char *buf = NULL;
    size_t len = 0;
    int rc = al_read_file(path, &buf, &len, err);
    if (rc) return rc;
    const al_hard *h = &a->hard;
    keep(a,
         snap_of(a, (uint8_t *)buf, len, a->round, &h->held.hash, h->held.members, h->held_h_next,
                 h->held_policy),
         &h->held.hash);
    return 0;
}

void ag_carry_drop_before(agent *a, long round) {
    pthread_mutex_lock(&a->mu);
    int old = a->cand_snap && a->cand_snap->round < round;
    pthread_mutex_unlock(&a->mu);
    if (old) keep(a, NULL, NULL);
}

/* The candidate's decision from its meta (JSON), checked against the action. */
static int fetched_meta(agent *a, const al_round_action *act, const uint8_t *d, uint64_t n,
                        al_err *err) {
    json_error_t je;
    json_t *m = json_loadb((const char *)d, n, 0, &je);
    json_int_t r = -1, mem = 0, hn = 0;
    const char *th = NULL, *pol = NULL;
    al_round_hash h;
    int ok = m &&
             json_unpack(m, "{s:I, s:s, s:I, s:I, s:s}", "round", &r, "theta", &th, "members", &mem,
                         "h_next", &hn, "policy", &pol) == 0 &&
             ag_hex32(th, h.b) == 0 && memcmp(h.b, act->hash.b, 32) == 0 && r == act->round &&
             hn >= 1 && strlen(pol) < sizeof a->fetched_policy;
    if (ok) {
        a->fetched_round = (long)r;
        a->fetched_members = (uint32_t)mem;
        a->fetched_h_next = (long)hn;
        snprintf(a->fetched_policy, sizeof a->fetched_policy, "%s", pol);
    }
    json_decref(m);
    return ok ? 0
              : al_errf(err, AL_EFORMAT, "its decision is malformed or not of round %ld's %s",
                        act->round, "candidate asked for");
}

void ag_carry_fetch(agent *a, const al_round_action *act, al_round_event *ev) {
    *ev = (al_round_event){.type = AL_EV_FETCH_FAILED, .peer = act->peer};
    al_err e = {0};
    uint8_t *d = NULL;
    uint64_t n = 0;
    int i = act->peer;
    a->have_fetched = 0;
    a->have_pulled = 0; /* (a->pulled holds the fetched state) */
    int rc = ag_refresh_clients(a, &e);
    if (rc == 0 && !a->cli[i]) rc = al_errf(&e, AL_EPEER, "no client");
    if (rc == 0)
        rc = al_client_pull_candidate(a->cli[i], AL_STATE_META, act->hash.b, 1 << 20, &d, &n, &e);
    if (rc == 0) rc = fetched_meta(a, act, d, n, &e);
    free(d);
    d = NULL;
    if (rc == 0)
        rc = al_client_pull_candidate(a->cli[i], AL_STATE_THETA, act->hash.b,
                                      al_outer_state_bytes(a->P), &d, &n, &e);
    if (rc == 0) rc = al_outer_deserialize(&a->pulled, d, n, &a->outer.cfg, &e);
    free(d);
    al_round_hash got;
    char gx[65], wx[65];
    if (rc == 0) {
        ag_hash_of(&a->pulled, &got);
        if (memcmp(got.b, act->hash.b, 32) != 0) {
            ag_hash_hex(&got, gx);
            ag_hash_hex(&act->hash, wx);
            rc = al_errf(&e, AL_EINTEGRITY, "theta %.16s, asked for %.16s", gx, wx);
        }
    }
    ag_hash_hex(&act->hash, wx);
    if (rc == 0) {
        a->have_fetched = 1;
        a->fetched_h = act->hash;
        ev->type = AL_EV_FETCHED;
        ev->round = a->fetched_round;
        ev->hash = act->hash;
        al_logf(&a->log, AL_LOG_INFO, "site %s: round %ld: fetched the candidate %.16s from %s",
                a->name[a->self], act->round, wx, a->name[i]);
    } else {
        al_logf(&a->log, AL_LOG_WARN,
                "site %s: round %ld: the candidate %.16s from %s refused: %s; asking another "
                "voter",
                a->name[a->self], act->round, wx, a->name[i], e.msg);
    }
}

int ag_carry_hold(agent *a, const al_round_action *act, al_err *err) {
    if (!a->have_fetched || memcmp(a->fetched_h.b, act->hash.b, 32) != 0 ||
        a->fetched_round != act->round)
        return al_errf(err, AL_EINVAL, "round %ld: asked to hold a candidate not fetched",
                       act->round);
    if (a->have_cand) al_policy_load(a->pol, a->pol_before, NULL); /* (the machine reverted it) */
    al_policy_save(a->pol, a->pol_before, sizeof a->pol_before);
    int rc = al_policy_load(a->pol, a->fetched_policy, err);
    if (rc) return al_err_prefix(err, "round %ld: the fetched candidate's policy", act->round);
    al_outer t = a->cand; /* the fetched state becomes the candidate */
    a->cand = a->pulled;
    a->pulled = t;
    a->have_fetched = 0;
    memset(&a->cand_d, 0, sizeof a->cand_d);
    a->cand_d.h_next = a->fetched_h_next;
    a->cand_M = 0;
    for (int i = 0; i < a->nsites; i++)
        if (a->fetched_members >> i & 1) {
            a->cand_mem[a->cand_M] = i;
            memset(&a->cand_st[a->cand_M], 0, sizeof a->cand_st[0]);
            a->cand_st[a->cand_M++].site = i;
        }
    ag_cand_hash(a, 0, a->P);
    if (memcmp(a->cand_h.b, act->hash.b, 32) != 0) /* (checked when fetched) */
        return al_errf(err, AL_EINTEGRITY, "round %ld: the fetched candidate changed", act->round);
    a->have_cand = 1;
    a->cand_noiv = 0;
    return 0;
}

/* ---- test hooks (AL_FAULT): a vote held -------------------------------------------- */

/* AL_FAULT=hidevote:R: round R's hash vote persisted, the driver waits for
 * the test's release file (at most two minutes) before anything shows it
 * (this site's server still answers: the members' exchanges end). */
void ag_fault_hide_vote(agent *a, long round) {
    char p[4300];
    snprintf(p, sizeof p, "%s/release", a->cfg->checkpoint_dir);
    al_logf(&a->log, AL_LOG_INFO, "site %s: fault: hiding the vote of round %ld until %s",
            a->name[a->self], round, p);
    fflush(NULL);
    for (int i = 0; i < 2400 && access(p, F_OK) != 0; i++) al_sleep(0.05);
}

/* AL_FAULT=holdvote:R: the exchange over (done or failed), the vote waits for
 * the test's release file (at most two minutes), then the exchange counts as
 * failed. */
int ag_fault_hold_vote(agent *a, int rc, al_err *err) {
    char p[4300];
    snprintf(p, sizeof p, "%s/release", a->cfg->checkpoint_dir);
    al_logf(&a->log, AL_LOG_INFO, "site %s: fault: holding the vote of round %ld until %s",
            a->name[a->self], a->round, p);
    fflush(NULL);
    for (int i = 0; i < 2400 && access(p, F_OK) != 0; i++) al_sleep(0.05);
    al_logf(&a->log, AL_LOG_INFO, "site %s: fault: released the vote of round %ld",
            a->name[a->self], a->round);
    return rc ? rc
              : al_errf(err, AL_EPEER, "fault: the exchange of round %ld counted as failed",
                        a->round);
}
