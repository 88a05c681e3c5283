/* hard.c -- the round protocol's hard state (al_round.h, "The hard state"):
 * the record a site must never forget across a crash, how each action changes
 * it, its text, and how a restart reads it. No files here: the agent
 * (runtime/agent/agent_hard.c) writes the text atomically, the simulation of
 * tests/test_round.c keeps it on its simulated disk, both through these
 * calls, so the model-checked persistence is the agent's.
 *
 * The text (hard.json):
 *   {"version": 1, "run": <run hash>, "committed": R, "base": <θ_global hash>,
 *    "step", "h", "policy", "log": [{round, hash, h, step, members}...],
 *    "vote": {round, epoch, vote, value, promised, accepted, acc_epoch,
 *             acc_value}, "held": {round, value, h_next, policy} | null,
 *    "check": SHA-256 of the rest (compact, keys sorted)} */
#include "al_round.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deliberate bugs, for tests/meson.build's round_bug* binaries only (round.c
 * lists them): 4 persists the commit only at checkpoints (every 3 rounds), as
 * the agent did before issue 31. */
#ifndef AL_ROUND_BUG
#define AL_ROUND_BUG 0
#endif

void al_hard_clear(al_hard *h, const char *run) {
    memset(h, 0, sizeof *h);
    if (run) snprintf(h->run, sizeof h->run, "%s", run);
    h->committed = -1;
    h->vote.round = -1;
    h->held_round = -1;
}

int al_hard_vote_holds(const al_hard *h, const al_round_vote *v, const al_round_hash *cand) {
    return v->vote == AL_VOTE_HASH && cand && !memcmp(cand->b, v->value.hash.b, 32) &&
           (h->held_round != v->round || memcmp(h->held.hash.b, v->value.hash.b, 32));
}

void al_hard_vote(al_hard *h, const al_round_vote *v, int holds, long h_next, const char *policy) {
    if (holds) {
        h->held_round = v->round;
        h->held = v->value;
        h->held_h_next = h_next;
        snprintf(h->held_policy, sizeof h->held_policy, "%s", policy ? policy : "");
    }
    h->vote = *v;
}

int al_hard_commit_renames(const al_hard *h, long r, const al_round_hash *theta) {
    return h->held_round == r && !memcmp(h->held.hash.b, theta->b, 32);
}

void al_hard_commit(al_hard *h, long committed, const al_round_hash *base, long step, long hh,
                    const char *policy, long h_run, uint32_t members) {
    if (AL_ROUND_BUG == 4 && committed % 3 != 0) return;
    if (h_run <= 0) h->nlog = 0;  /* adopted: the rounds before are not replayable here */
    if (h->nlog == AL_HARD_LOG) { /* (no checkpoint for long: the oldest are not replayable) */
        memmove(h->log, h->log + 1, (AL_HARD_LOG - 1) * sizeof h->log[0]);
        h->nlog--;
    }
    if (h_run > 0)
        h->log[h->nlog++] = (al_hard_entry){
            .round = committed - 1, .hash = *base, .h = h_run, .step = step, .members = members};
    h->committed = committed;
    h->base = *base;
    h->step = step;
    h->h = hh;
    snprintf(h->policy, sizeof h->policy, "%s", policy ? policy : "");
    if (h->held_round < committed) h->held_round = -1; /* the candidate became the commit */
}

int al_hard_prune(al_hard *h, long c) {
    int k = 0;
    for (int i = 0; i < h->nlog; i++)
        if (h->log[i].round >= c) h->log[k++] = h->log[i];
    int dropped = h->nlog - k;
    h->nlog = k;
    return dropped;
}

long al_hard_keep_from(const al_hard *h) {
    return h->nlog ? h->log[0].round : h->committed;
}

const al_hard_entry *al_hard_entry_of(const al_hard *h, long r) {
    for (int i = 0; i < h->nlog; i++)
        if (h->log[i].round == r) return &h->log[i];
    return NULL;
}

al_hard_plan_kind al_hard_plan(const al_hard *h, long c, int replayable,
                               int (*has_commit)(void *ctx, long round), void *ctx) {
    if (h->committed < 0 || h->committed == c) return AL_HARD_AT;
    if (h->committed < c) return AL_HARD_AHEAD;
    for (long r = c; replayable && r < h->committed; r++) {
        const al_hard_entry *e = al_hard_entry_of(h, r);
        if (!e || e->h < 1 || !has_commit(ctx, r + 1)) replayable = 0;
    }
    return replayable ? AL_HARD_REPLAY : AL_HARD_TAKE;
}

void al_hard_start(const al_hard *h, long round, const al_round_hash *base, al_round_start *st) {
    memset(st, 0, sizeof *st);
    st->round = round;
    st->base = *base;
    st->last.round = -1;
    st->held_round = -1;
    if (h->vote.round >= round) st->last = h->vote;
    if (h->held_round == round) {
        st->held_round = round;
        st->held = h->held;
    }
}

/* ---- the text ---------------------------------------------------------------------- */

static void hash_hex(const al_round_hash *x, char hx[65]) {
    al_hex(x->b, sizeof x->b, hx);
}

static int hex_hash(const char *hx, al_round_hash *x) {
    if (!hx || strlen(hx) != 64) return -1;
    for (int k = 0; k < 32; k++) {
        unsigned v = 0;
        if (sscanf(hx + 2 * k, "%2x", &v) != 1) return -1;
        x->b[k] = (uint8_t)v;
    }
    return 0;
}

static json_t *value_json(const al_round_value *v) {
    char hx[65];
    hash_hex(&v->hash, hx);
    return json_pack("{s:s, s:I, s:I}", "hash", hx, "members", (json_int_t)v->members, "origin",
                     (json_int_t)v->origin);
}

static int value_read(json_t *j, al_round_value *v) {
    const char *hx = NULL;
    json_int_t mem = 0, origin = 0;
    if (json_unpack(j, "{s:s, s:I, s:I}", "hash", &hx, "members", &mem, "origin", &origin) ||
        hex_hash(hx, &v->hash) || mem < 0 || origin < 0)
        return -1;
    v->members = (uint32_t)mem;
    v->origin = (uint64_t)origin;
    return 0;
}

static json_t *body_json(const al_hard *h) {
    char hx[65];
    hash_hex(&h->base, hx);
    json_t *log = json_array();
    for (int i = 0; i < h->nlog; i++) {
        char ex[65];
        hash_hex(&h->log[i].hash, ex);
        json_array_append_new(
            log, json_pack("{s:I, s:s, s:I, s:I, s:I}", "round", (json_int_t)h->log[i].round,
                           "hash", ex, "h", (json_int_t)h->log[i].h, "step",
                           (json_int_t)h->log[i].step, "members", (json_int_t)h->log[i].members));
    }
    const al_round_vote *v = &h->vote;
    json_t *vote =
        json_pack("{s:I, s:I, s:i, s:o, s:I, s:i, s:I, s:o}", "round", (json_int_t)v->round,
                  "epoch", (json_int_t)v->epoch, "vote", v->vote, "value", value_json(&v->value),
                  "promised", (json_int_t)v->promised, "accepted", v->accepted, "acc_epoch",
                  (json_int_t)v->acc_epoch, "acc_value", value_json(&v->acc_value));
    json_t *held = h->held_round < 0
                       ? json_null()
                       : json_pack("{s:I, s:o, s:I, s:s}", "round", (json_int_t)h->held_round,
                                   "value", value_json(&h->held), "h_next",
                                   (json_int_t)h->held_h_next, "policy", h->held_policy);
    return json_pack("{s:i, s:s, s:I, s:s, s:I, s:I, s:s, s:o, s:o, s:o}", "version",
                     AL_HARD_VERSION, "run", h->run, "committed", (json_int_t)h->committed, "base",
                     hx, "step", (json_int_t)h->step, "h", (json_int_t)h->h, "policy", h->policy,
                     "log", log, "vote", vote, "held", held);
}

/* The checksum of a body: SHA-256 of its compact, key-sorted form. */
static void body_check(json_t *body, char hx[65]) {
    char *s = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    al_sha256_hex(s ? s : "", s ? strlen(s) : 0, hx);
    free(s);
}

char *al_hard_encode(const al_hard *h) {
    json_t *j = body_json(h);
    char *js = NULL;
    if (j) {
        char hx[65];
        body_check(j, hx);
        json_object_set_new(j, "check", json_string(hx));
        js = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
    }
    json_decref(j);
    return js;
}

/* hard.json's "log": the commits since the last checkpoint. */
static int log_read(json_t *log, al_hard *h) {
    size_t i;
    json_t *e;
    json_array_foreach(log, i, e) {
        al_hard_entry *x = &h->log[h->nlog];
        json_int_t r = 0, eh = 0, es = 0, em = 0;
        const char *ex = NULL;
        if (json_unpack(e, "{s:I, s:s, s:I, s:I, s:I}", "round", &r, "hash", &ex, "h", &eh, "step",
                        &es, "members", &em) ||
            hex_hash(ex, &x->hash))
            return -1;
        x->round = (long)r;
        x->h = (long)eh;
        x->step = (long)es;
        x->members = (uint32_t)em;
        h->nlog++;
    }
    return 0;
}

/* hard.json's "held": the candidate of the round's last hash vote. */
static int held_read(json_t *held, al_hard *h) {
    json_int_t hr = 0, hn = 0;
    json_t *hv = NULL;
    const char *hp = NULL;
    if (json_unpack(held, "{s:I, s:o, s:I, s:s}", "round", &hr, "value", &hv, "h_next", &hn,
                    "policy", &hp) ||
        value_read(hv, &h->held) || strlen(hp) >= sizeof h->held_policy)
        return -1;
    h->held_round = (long)hr;
    h->held_h_next = (long)hn;
    snprintf(h->held_policy, sizeof h->held_policy, "%s", hp);
    return 0;
}

/* The vote: the last vote and promise. */
static int vote_read(json_t *vote, al_round_vote *v) {
    json_int_t vr = 0, ve = 0, vp = 0, vae = 0;
    json_t *vv = NULL, *av = NULL;
    int vk = 0, vacc = 0;
    if (json_unpack(vote, "{s:I, s:I, s:i, s:o, s:I, s:i, s:I, s:o}", "round", &vr, "epoch", &ve,
                    "vote", &vk, "value", &vv, "promised", &vp, "accepted", &vacc, "acc_epoch",
                    &vae, "acc_value", &av) != 0 ||
        value_read(vv, &v->value) || value_read(av, &v->acc_value) || vk < 0 || vk > AL_VOTE_HASH)
        return -1;
    v->round = (long)vr;
    v->epoch = (uint64_t)ve;
    v->vote = vk;
    v->promised = (uint64_t)vp;
    v->accepted = vacc;
    v->acc_epoch = (uint64_t)vae;
    return 0;
}

static int decode(json_t *j, const char *run, al_hard *h, al_err *err) {
    const char *check = json_string_value(json_object_get(j, "check"));
    char hx[65];
    json_t *body = json_deep_copy(j);
    json_object_del(body, "check");
    body_check(body, hx);
    json_decref(body);
    const char *hrun = NULL, *base = NULL, *pol = NULL;
    json_t *log = NULL, *vote = NULL, *held = NULL;
    int version = 0;
    json_int_t committed = 0, step = 0, hh = 0;
    if (!check || strcmp(check, hx) != 0)
        return al_errf(err, AL_EFORMAT, "its checksum does not match (a torn or edited file)");
    if (json_unpack(j, "{s:i, s:s, s:I, s:s, s:I, s:I, s:s, s:o, s:o, s:o}", "version", &version,
                    "run", &hrun, "committed", &committed, "base", &base, "step", &step, "h", &hh,
                    "policy", &pol, "log", &log, "vote", &vote, "held", &held) != 0 ||
        version != AL_HARD_VERSION || hex_hash(base, &h->base) || !json_is_array(log) ||
        json_array_size(log) > AL_HARD_LOG || strlen(pol) >= sizeof h->policy ||
        strlen(hrun) >= sizeof h->run)
        return al_errf(err, AL_EFORMAT, "not a hard-state record of version %d", AL_HARD_VERSION);
    if (run && strcmp(hrun, run) != 0)
        return al_errf(err, AL_EFORMAT, "written by another run configuration");
    if (vote_read(vote, &h->vote)) return al_errf(err, AL_EFORMAT, "its vote is malformed");
    snprintf(h->run, sizeof h->run, "%s", hrun);
    h->committed = (long)committed;
    h->step = (long)step;
    h->h = (long)hh;
    snprintf(h->policy, sizeof h->policy, "%s", pol);
    if (log_read(log, h)) return al_errf(err, AL_EFORMAT, "its log of commits is malformed");
    if (!json_is_null(held) && held_read(held, h))
        return al_errf(err, AL_EFORMAT, "its held candidate is malformed");
    return 0;
}

int al_hard_decode(const char *text, size_t len, const char *run, al_hard *h, al_err *err) {
    al_hard_clear(h, NULL);
    json_error_t je;
    json_t *j = json_loadb(text, len, 0, &je);
    if (!j) return al_errf(err, AL_EFORMAT, "not JSON (line %d: %s)", je.line, je.text);
    int rc = decode(j, run, h, err);
    json_decref(j);
    if (rc) al_hard_clear(h, NULL);
    return rc;
}
