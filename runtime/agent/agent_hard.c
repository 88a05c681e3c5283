/* agent_hard.c -- the round protocol's hard state on disk (agent_hard.h).
 *
 * The state machine (runtime/round) is safe only if a site never forgets, across
 * a crash, (1) a vote or promise its statuses showed, (2) the candidate a hash
 * vote names (a quorum of voters is then a quorum of copies of the committed
 * θ), and (3) a commit it acted on. Checkpoints come every N rounds; this file
 * keeps the rest, at every vote and every apply or adopt:
 *
 *   hard.json        {"version": 1, "run": <run hash>, "committed": R,
 *                     "base": <θ_global hash>, "step", "h", "policy",
 *                     "log": [{round, hash, h, step, members}...],
 *                     "vote": {...}, "held": {...} | null,
 *                     "check": SHA-256 of the rest}
 *   candidate.bin    the held candidate's outer state (al_outer_serialize)
 *   commit-R.bin     θ_global at the start of round R (R since the last
 *                    checkpoint): a resume from that checkpoint replays the
 *                    site's own intervals from these and lands bit-identical
 *
 * Every file is written whole beside its final name, fsynced, renamed over
 * it and the folder fsynced: a crash leaves the old file or the new one,
 * never half of one. A record that exists but does not parse or check is an
 * error naming the file: starting fresh would forget votes peers have seen. */
#include "agent_hard.h"
#include "agent_hash.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HARD_FILE    "hard.json"
#define HARD_VERSION 1

void ag_hard_path(const agent *a, const char *name, long round, char *p, size_t n) {
    if (round >= 0)
        snprintf(p, n, "%s/commit-%08ld.bin", a->cfg->checkpoint_dir, round);
    else
        snprintf(p, n, "%s/%s", a->cfg->checkpoint_dir, name);
}

int ag_hard_write(const char *dir, const char *name, const void *buf, size_t len, al_err *err) {
    char tmp[4300], fin[4300];
    snprintf(fin, sizeof fin, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, name);
    int rc = al_write_file_sync(tmp, buf, len, err);
    if (rc) return rc;
    if (rename(tmp, fin) != 0)
        return al_errf(err, AL_EIO, "%s: cannot rename to %s: %s", tmp, fin, strerror(errno));
    return al_fsync_dir(dir, err);
}

/* ---- the record as JSON ------------------------------------------------------------- */

static json_t *value_json(const al_round_value *v) {
    char hx[65];
    ag_hash_hex(&v->hash, hx);
    return json_pack("{s:s, s:I, s:I}", "hash", hx, "members", (json_int_t)v->members, "origin",
                     (json_int_t)v->origin);
}

static int value_read(json_t *j, al_round_value *v) {
    const char *hx = NULL;
    json_int_t mem = 0, origin = 0;
    if (json_unpack(j, "{s:s, s:I, s:I}", "hash", &hx, "members", &mem, "origin", &origin) ||
        ag_hex32(hx, v->hash.b) || mem < 0 || origin < 0)
        return -1;
    v->members = (uint32_t)mem;
    v->origin = (uint64_t)origin;
    return 0;
}

static json_t *body_json(const agent *a) {
    const ag_hard *h = &a->hard;
    char hx[65];
    ag_hash_hex(&h->base, hx);
    json_t *log = json_array();
    for (int i = 0; i < h->nlog; i++) {
        char ex[65];
        ag_hash_hex(&h->log[i].hash, ex);
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
    return json_pack("{s:i, s:s, s:I, s:s, s:I, s:I, s:s, s:o, s:o, s:o}", "version", HARD_VERSION,
                     "run", a->run_hash, "committed", (json_int_t)h->committed, "base", hx, "step",
                     (json_int_t)h->step, "h", (json_int_t)h->h, "policy", h->policy, "log", log,
                     "vote", vote, "held", held);
}

/* The checksum of a body: SHA-256 of its compact, key-sorted form. */
static void body_check(json_t *body, char hx[65]) {
    char *s = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS);
    al_sha256_hex(s ? s : "", s ? strlen(s) : 0, hx);
    free(s);
}

int ag_hard_save(agent *a, al_err *err) {
    json_t *j = body_json(a);
    char *js = NULL;
    if (j) {
        char hx[65];
        body_check(j, hx);
        json_object_set_new(j, "check", json_string(hx));
        js = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
    }
    json_decref(j);
    int rc = js ? ag_hard_write(a->cfg->checkpoint_dir, HARD_FILE, js, strlen(js), err)
                : al_errf(err, AL_ENOMEM, "hard state: out of memory");
    free(js);
    return rc ? al_err_prefix(err, "persisting the round protocol's hard state") : 0;
}

static int bad(const char *path, const char *why, al_err *err) {
    return al_errf(err, AL_EFORMAT,
                   "%s: %s: the round protocol's hard state (the votes and commits peers have "
                   "seen) is unreadable; this site must not start without it. Restore the file "
                   "from a backup, or, only if this site's votes no longer matter (every peer has "
                   "moved past its last round), remove it to start this site from its checkpoint",
                   path, why);
}

static void hard_clear(ag_hard *h) {
    memset(h, 0, sizeof *h);
    h->committed = -1;
    h->vote.round = -1;
    h->held_round = -1;
}

/* hard.json's "log": the commits since the last checkpoint, into h->log. */
static int log_read(json_t *log, ag_hard *h, const char *path, al_err *err) {
    size_t i;
    json_t *e;
    json_array_foreach(log, i, e) {
        ag_hard_entry *x = &h->log[h->nlog];
        json_int_t r = 0, eh = 0, es = 0, em = 0;
        const char *ex = NULL;
        if (json_unpack(e, "{s:I, s:s, s:I, s:I, s:I}", "round", &r, "hash", &ex, "h", &eh, "step",
                        &es, "members", &em) ||
            ag_hex32(ex, x->hash.b))
            return bad(path, "its log of commits is malformed", err);
        x->round = (long)r;
        x->h = (long)eh;
        x->step = (long)es;
        x->members = (uint32_t)em;
        h->nlog++;
    }
    return 0;
}

/* hard.json's "held": the candidate of the round's last hash vote. */
static int held_read(json_t *held, ag_hard *h, const char *path, al_err *err) {
    json_int_t hr = 0, hn = 0;
    json_t *hv = NULL;
    const char *hp = NULL;
    if (json_unpack(held, "{s:I, s:o, s:I, s:s}", "round", &hr, "value", &hv, "h_next", &hn,
                    "policy", &hp) ||
        value_read(hv, &h->held) || strlen(hp) >= sizeof h->held_policy)
        return bad(path, "its held candidate is malformed", err);
    h->held_round = (long)hr;
    h->held_h_next = (long)hn;
    snprintf(h->held_policy, sizeof h->held_policy, "%s", hp);
    return 0;
}

int ag_hard_load(agent *a, al_err *err) {
    char path[4300];
    ag_hard_path(a, HARD_FILE, -1, path, sizeof path);
    ag_hard *h = &a->hard;
    hard_clear(h);
    if (access(path, F_OK) != 0) return 1;
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) {
        char why[300];
        snprintf(why, sizeof why, "not JSON (line %d: %s)", je.line, je.text);
        return bad(path, why, err);
    }
    int rc = 0;
    const char *check = json_string_value(json_object_get(j, "check"));
    char hx[65];
    json_t *body = json_deep_copy(j);
    json_object_del(body, "check");
    body_check(body, hx);
    json_decref(body);
    const char *run = NULL, *base = NULL, *pol = NULL;
    json_t *log = NULL, *vote = NULL, *held = NULL, *vv = NULL, *av = NULL;
    int version = 0;
    json_int_t committed = 0, step = 0, hh = 0, vr = 0, ve = 0, vp = 0, vae = 0;
    int vk = 0, vacc = 0;
    if (!check || strcmp(check, hx) != 0)
        rc = bad(path, "its checksum does not match (a torn or edited file)", err);
    else if (json_unpack(j, "{s:i, s:s, s:I, s:s, s:I, s:I, s:s, s:o, s:o, s:o}", "version",
                         &version, "run", &run, "committed", &committed, "base", &base, "step",
                         &step, "h", &hh, "policy", &pol, "log", &log, "vote", &vote, "held",
                         &held) != 0 ||
             version != HARD_VERSION || ag_hex32(base, h->base.b) || !json_is_array(log) ||
             json_array_size(log) > AG_HARD_LOG || strlen(pol) >= sizeof h->policy)
        rc = bad(path, "not a hard-state record of version 1", err);
    else if (strcmp(run, a->run_hash) != 0)
        rc = bad(path, "written by another run configuration", err);
    else if (json_unpack(vote, "{s:I, s:I, s:i, s:o, s:I, s:i, s:I, s:o}", "round", &vr, "epoch",
                         &ve, "vote", &vk, "value", &vv, "promised", &vp, "accepted", &vacc,
                         "acc_epoch", &vae, "acc_value", &av) != 0 ||
             value_read(vv, &h->vote.value) || value_read(av, &h->vote.acc_value) || vk < 0 ||
             vk > AL_VOTE_HASH)
        rc = bad(path, "its vote is malformed", err);
    if (rc == 0) {
        h->committed = (long)committed;
        h->step = (long)step;
        h->h = (long)hh;
        snprintf(h->policy, sizeof h->policy, "%s", pol);
        h->vote.round = (long)vr;
        h->vote.epoch = (uint64_t)ve;
        h->vote.vote = vk;
        h->vote.promised = (uint64_t)vp;
        h->vote.accepted = vacc;
        h->vote.acc_epoch = (uint64_t)vae;
        rc = log_read(log, h, path, err);
    }
    if (rc == 0 && !json_is_null(held)) rc = held_read(held, h, path, err);
    json_decref(j);
    if (rc) hard_clear(h);
    return rc;
}

int ag_hard_save_candidate(agent *a, al_err *err) {
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = al_outer_serialize(&a->cand, &buf, &len, err);
    if (rc == 0) /* (sealed: a damaged copy is refused on load) */
        rc = ag_hard_write(a->cfg->checkpoint_dir, "candidate.bin", buf, len, err);
    free(buf);
    return rc ? al_err_prefix(err, "round %ld: persisting the candidate", a->round) : 0;
}

int ag_hard_commit(agent *a, int from_candidate, long h_run, uint32_t members, al_err *err) {
    char from[4300], to[4300];
    ag_hard_path(a, "candidate.bin", -1, from, sizeof from);
    ag_hard_path(a, NULL, a->round, to, sizeof to);
    int rc = 0;
    if (from_candidate && rename(from, to) == 0) {
        rc = al_fsync_dir(a->cfg->checkpoint_dir, err);
    } else {
        uint8_t *buf = NULL;
        size_t len = 0;
        char name[64];
        snprintf(name, sizeof name, "commit-%08ld.bin", a->round);
        rc = al_outer_serialize(&a->outer, &buf, &len, err);
        if (rc == 0) rc = ag_hard_write(a->cfg->checkpoint_dir, name, buf, len, err);
        free(buf);
    }
    if (rc) return al_err_prefix(err, "round %ld: persisting the commit", a->round - 1);
    ag_hard *h = &a->hard;
    al_round_hash base;
    ag_outer_hash(a, &base, 0);
    if (h_run <= 0) h->nlog = 0;  /* adopted: the rounds before are not replayable here */
    if (h->nlog == AG_HARD_LOG) { /* (no checkpoint for long: the oldest are not replayable) */
        memmove(h->log, h->log + 1, (AG_HARD_LOG - 1) * sizeof h->log[0]);
        h->nlog--;
    }
    if (h_run > 0)
        h->log[h->nlog++] = (ag_hard_entry){
            .round = a->round - 1, .hash = base, .h = h_run, .step = a->step, .members = members};
    h->committed = a->round;
    h->base = base;
    h->step = a->step;
    h->h = a->h;
    al_policy_save(a->pol, h->policy, sizeof h->policy);
    if (h->held_round < a->round) h->held_round = -1; /* candidate.bin became the commit */
    return ag_hard_save(a, err);
}

void ag_hard_prune(agent *a) {
    ag_hard *h = &a->hard;
    int k = 0;
    for (int i = 0; i < h->nlog; i++)
        if (h->log[i].round >= a->round) h->log[k++] = h->log[i];
    int dropped = h->nlog - k;
    h->nlog = k;
    if (dropped) {
        al_err e = {0};
        if (ag_hard_save(a, &e))
            al_logf(&a->log, AL_LOG_WARN, "site %s: %s", a->name[a->self], e.msg);
    }
    /* the files of rounds the newest checkpoint holds already */
    for (long r = a->round - 1; r >= 0 && r >= a->round - 4 * AG_HARD_LOG; r--) {
        char p[4300];
        ag_hard_path(a, NULL, r, p, sizeof p);
        unlink(p);
    }
}
