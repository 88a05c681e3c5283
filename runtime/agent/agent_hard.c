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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HARD_FILE "hard.json"

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

/* ---- the record (its fields, changes and text: runtime/round/hard.c) ------------------ */

/* ag_hard_write into the [checkpoint] dir, its time and bytes counted. */
static int put(agent *a, const char *name, const void *buf, size_t len, al_err *err) {
    double t0 = al_now();
    int rc = ag_hard_write(a->cfg->checkpoint_dir, name, buf, len, err);
    a->hard_s += al_now() - t0;
    a->hard_bytes += (double)len;
    a->hard_writes++;
    return rc;
}

void ag_hard_report(agent *a) {
    long rounds = a->round > 0 ? a->round : 1;
    al_logf(&a->log, AL_LOG_INFO,
            "site %s: hard state: %ld files written (%.1f MB) in %.3f s, %.2f ms a round over %ld "
            "rounds",
            a->name[a->self], a->hard_writes, a->hard_bytes / 1e6, a->hard_s,
            1e3 * a->hard_s / (double)rounds, rounds);
}

int ag_hard_save(agent *a, al_err *err) {
    snprintf(a->hard.run, sizeof a->hard.run, "%s", a->run_hash);
    char *js = al_hard_encode(&a->hard);
    int rc = js ? put(a, HARD_FILE, js, strlen(js), err)
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

int ag_hard_load(agent *a, al_err *err) {
    char path[4300];
    ag_hard_path(a, HARD_FILE, -1, path, sizeof path);
    al_hard_clear(&a->hard, a->run_hash);
    if (access(path, F_OK) != 0) return 1;
    char *text = NULL;
    size_t len = 0;
    al_err e = {0};
    int rc = al_read_file(path, &text, &len, &e);
    if (rc == 0) rc = al_hard_decode(text, len, a->run_hash, &a->hard, &e);
    free(text);
    if (rc) {
        al_hard_clear(&a->hard, a->run_hash);
        return bad(path, e.msg, err);
    }
    return 0;
}

int ag_hard_save_candidate(agent *a, uint8_t **bytes, size_t *len, al_err *err) {
    uint8_t *buf = NULL;
    size_t n = 0;
    *bytes = NULL;
    *len = 0;
    int rc = al_outer_serialize(&a->cand, &buf, &n, err);
    if (rc == 0) /* (sealed: a damaged copy is refused on load) */
        rc = put(a, "candidate.bin", buf, n, err);
    if (rc) {
        free(buf);
        return al_err_prefix(err, "round %ld: persisting the candidate", a->round);
    }
    *bytes = buf;
    *len = n;
    return 0;
}

int ag_hard_commit(agent *a, int from_candidate, long h_run, uint32_t members, al_err *err) {
    char from[4300], to[4300];
    ag_hard_path(a, "candidate.bin", -1, from, sizeof from);
    ag_hard_path(a, NULL, a->round, to, sizeof to);
    int rc = 0;
    al_round_hash theta;
    ag_outer_hash(a, &theta, 0);
    if (from_candidate && al_hard_commit_renames(&a->hard, a->round - 1, &theta) &&
        rename(from, to) == 0) {
        double t0 = al_now();
        rc = al_fsync_dir(a->cfg->checkpoint_dir, err);
        a->hard_s += al_now() - t0;
        a->hard_writes++;
    } else {
        uint8_t *buf = NULL;
        size_t len = 0;
        char name[64];
        snprintf(name, sizeof name, "commit-%08ld.bin", a->round);
        rc = al_outer_serialize(&a->outer, &buf, &len, err);
        if (rc == 0) rc = put(a, name, buf, len, err);
        free(buf);
    }
    if (rc) return al_err_prefix(err, "round %ld: persisting the commit", a->round - 1);
    char pol[AL_HARD_POLICY];
    al_policy_save(a->pol, pol, sizeof pol);
    al_hard_commit(&a->hard, a->round, &theta, a->step, a->h, pol, h_run, members);
    if ((rc = ag_hard_save(a, err))) return rc;
    /* Rounds the log no longer holds (it keeps AL_HARD_LOG since the last
     * checkpoint, or none after an adopt) cannot be replayed: their commit
     * files go now, not at the next checkpoint, so a run that checkpoints
     * seldom or never keeps a bounded number of copies of θ on disk. Older
     * files went before, so the first one missing ends the walk. */
    long keep = al_hard_keep_from(&a->hard);
    for (long r = keep - 1; r >= 0; r--) {
        char p[4300];
        ag_hard_path(a, NULL, r, p, sizeof p);
        if (unlink(p) != 0 && errno == ENOENT) break;
    }
    return 0;
}

void ag_hard_prune(agent *a) {
    if (al_hard_prune(&a->hard, a->round)) {
        al_err e = {0};
        if (ag_hard_save(a, &e))
            al_logf(&a->log, AL_LOG_WARN, "site %s: %s", a->name[a->self], e.msg);
    }
    /* the files of rounds the newest checkpoint holds already */
    for (long r = a->round - 1; r >= 0 && r >= a->round - 4 * AL_HARD_LOG; r--) {
        char p[4300];
        ag_hard_path(a, NULL, r, p, sizeof p);
        unlink(p);
    }
}
