/* agent_train.c -- a site's interval of inner training, run inline
 * (blocking rounds, DiLoCo) or on a thread of its own beside the round's
 * exchange ([outer] overlap = delayed: docs/outer.md, "Overlapping the
 * exchange with compute"); with streaming, a span and the merge of the
 * pending fragment it makes on the way (the schedule is agent_stream.c's);
 * the workers' data source (W > 1).
 *
 * With overlap the driver (agent_round.c) starts interval r + 1 right after
 * interval r ends, from the eager estimate of θ_{r+1} (al_commit_eager), and
 * exchanges and votes round r meanwhile. Ownership is handed over, never
 * shared: from ag_bg_start to ag_bg_join the thread alone touches θ_local,
 * the trainer (or the workers and their data source) and bg_iv; the driver
 * keeps θ_global, the outer state and the round. */
#include "agent_train.h"
#include "agent_hash.h"
#include "agent_stream.h"

#include <math.h>
#include <stdlib.h>

/* AL_FAULT=corrupt:R (tests): flip a bit of θ_global and of its published
 * copy, as a memory or disk fault would; the state machine is to notice at
 * the interval's end (θ_global no longer hashes to the committed base) and
 * repair it from a peer. Once. With overlap the driver calls it (θ_global is
 * the driver's), when interval R ends; AL_FAULT=freeze:R fires there too (in
 * the middle of interval R round R − 1 is being voted, and a member frozen
 * in a vote is the known limit of docs/ARCHITECTURE.md, not this fault). */
void ag_corrupt(agent *a) {
    a->fault_corrupt = -1;
    ((uint8_t *)a->outer.theta)[1] ^= 0x10; /* (behind the kept hash's back: ag_outer_check) */
    pthread_mutex_lock(&a->mu);
    ag_snapshot_seal(a->snap); /* published (and sealed) before the fault */
    if (a->snap && a->snap->outer_len > 100) a->snap->outer[a->snap->outer_len / 2] ^= 0x10;
    pthread_mutex_unlock(&a->mu);
    al_logf(&a->log, AL_LOG_WARN, "site %s: AL_FAULT corrupt: flipped a bit of theta_global",
            a->name[a->self]);
}

/* AL_FAULT=corrupt:R:exchange (tests): a memory fault in θ_global after the
 * interval's end checked it, as the round's exchange starts. The bit is in a
 * hash chunk that the round's fragment does not overlap where there is one
 * (streaming: a candidate rehashes only its fragment's chunks, so only a check
 * of θ_global before the candidate can see it), else anywhere outside the
 * fragment, else anywhere. The published copy stays intact: the repair is a
 * reload of it. Once. */
void ag_corrupt_outside(agent *a) {
    a->fault_corrupt_xchg = -1;
    size_t lo, hi, at = a->P / 2, C = AL_THETA_CHUNK;
    ag_frag(a, a->round, &lo, &hi);
    const char *where = "inside the fragment (it is all of theta)";
    if (lo > 0 || hi < a->P) {
        at = lo > 0 ? lo / 2 : hi + (a->P - hi) / 2;
        where = "outside the fragment, in a chunk it overlaps";
        for (size_t c = 0; c < al_theta_chunks(a->P); c++) {
            size_t c_lo = c * C, c_hi = AL_MIN(a->P, c_lo + C);
            if (c_hi <= lo || c_lo >= hi) { /* a chunk the candidate's hash does not read */
                at = c_lo + (c_hi - c_lo) / 2;
                where = "in a hash chunk outside the fragment";
                break;
            }
        }
    }
    ((uint8_t *)&a->outer.theta[at])[1] ^= 0x10; /* (behind the kept hash's back) */
    al_logf(&a->log, AL_LOG_WARN,
            "site %s: AL_FAULT corrupt: round %ld: flipped a bit of theta_global at value %zu, %s "
            "[%zu, %zu)",
            a->name[a->self], a->round, at, where, lo, hi);
}

int ag_src_next(void *ctx, long step, const al_piece **pieces, int *n, al_err *err) {
    (void)step;
    (void)err;
    agent *a = ctx;
    al_workload_next(&a->wl, a->pieces, a->npieces);
    *pieces = a->pieces;
    *n = a->npieces;
    return 0;
}

void ag_local_from_global(agent *a) {
    memcpy(ag_theta_local(a), a->outer.theta, a->P * sizeof(float));
    a->tr.step = a->step;
    if (a->workers > 1) a->odc.step = a->step;
}

/* A signal cuts a blocking interval short (W = 1: after the step in progress;
 * W > 1: the workers' stop word, every worker after the same step): a->iv_cut
 * says so, the driver reports no INTERVAL_DONE, and the checkpoint holds the
 * interval as it stands (its steps and sums, the trainer and data position),
 * which a --resume finishes. Sites stopped together so stop in the same round
 * and resume bit-for-bit; a site stopped alone is dropped by its peers after
 * their deadline and rejoins by a pull, as after a restart. With [outer]
 * overlap the interval runs to its end (ag_bg_settle keeps it). */
int ag_interval_run(agent *a, long round, long h, ag_interval *iv, long *step, al_err *err) {
    long target = AL_MIN(h, a->cfg->inner_steps - (*step - iv->steps));
    int inline_faults = !a->overlap; /* with overlap, corrupt is the driver's (see above) */
    /* (the thread's interval runs to its end; so do replays on --resume) */
    int cut = a->cut_ok && !a->overlap;
    a->iv_cut = 0;
    if (a->workers == 1) {
        while (iv->steps < target && !a->bg_cancel) {
            if (cut && *a->stop) {
                al_logf(&a->log, AL_LOG_INFO,
                        "site %s: %s: round %ld's interval stops after %ld of %ld steps (saved "
                        "as it stands; --resume trains the rest)",
                        a->name[a->self], ag_sig_name((int)*a->stop), round, iv->steps, target);
                a->iv_cut = 1;
                break;
            }
            if (round == a->fault_interval && iv->steps == target / 2) raise(SIGKILL);
            if (iv->steps == target / 2) ag_fault_pause(a, "train", round);
            if (inline_faults && round == a->fault_freeze && iv->steps == target / 2)
                raise(SIGSTOP);
            if (inline_faults && round == a->fault_corrupt && iv->steps == target / 2)
                ag_corrupt(a);
            al_step_stats st;
            int rc = al_trainer_step(&a->tr, &st, err);
            if (rc) return rc;
            iv->steps++;
            (*step)++;
            iv->loss_sum += st.loss;
            iv->gnorm_sum += st.grad_norm;
            iv->lr_sum += st.lr;
            iv->lr_sq_sum += st.lr * st.lr;
            iv->lr_last = st.lr;
            iv->tokens += st.tokens;
            iv->compute_s += st.seconds;
        }
        return 0;
    }
    if (inline_faults && round == a->fault_corrupt) ag_corrupt(a);
    double t0 = al_now();
    long first = a->odc.step + 1, n = target - iv->steps;
    a->odc.shm.stop = cut ? a->stop : NULL;
    int rc = al_odc_run(&a->odc, n, err);
    a->odc.shm.stop = NULL;
    if (rc) return rc;
    if (a->odc.step - (first - 1) < n) { /* the stop word: every worker after this step */
        n = a->odc.step - (first - 1);
        a->iv_cut = 1;
        al_logf(&a->log, AL_LOG_INFO,
                "site %s: %s: round %ld's interval stops after %ld of %ld steps (saved as it "
                "stands; --resume trains the rest)",
                a->name[a->self], ag_sig_name((int)*a->stop), round, iv->steps + n, target);
    }
    for (long s = first; s < first + n; s++) {
        const al_odc_step_stats *st = al_odc_stats(&a->odc, s);
        if (!st) return al_errf(err, AL_EINVAL, "step %ld: statistics not recorded", s);
        iv->loss_sum += st->loss;
        iv->gnorm_sum += st->grad_norm;
        iv->lr_sum += st->lr;
        iv->lr_sq_sum += st->lr * st->lr;
        iv->lr_last = st->lr;
        iv->tokens += st->tokens;
    }
    iv->steps += n;
    *step += n;
    iv->compute_s += al_now() - t0;
    return 0;
}

/* (pend_p stays set until the span is kept: ag_bg_join or do_train clears it,
 * and a span dropped back to its start merges again when it trains again) */
int ag_span_run(agent *a, long round, ag_interval *iv, long *step, al_err *err) {
    ag_stream *sm = &a->sm;
    int rc;
    if (sm->pend_p >= 0 && sm->pend_round < round) {
        /* the first τ steps beside the exchange of fragment pend_p */
        if ((rc = ag_interval_run(a, round, sm->pend_cut, iv, step, err))) return rc;
        pthread_mutex_lock(&a->mu);
        if (sm->merged_round < sm->pend_round && !a->bg_cancel) {
            /* parked: what the driver waits for from here on is not hidden, and a
             * stop need not wait for a commit that may never come (ag_bg_finished) */
            a->bg_parked = 1;
            a->bg_t_end = al_now();
            al_logf(&a->log, AL_LOG_DEBUG, "site %s: t=%.3f span %ld waits for round %ld",
                    a->name[a->self], a->bg_t_end - a->t0, round, sm->pend_round);
            pthread_cond_broadcast(&a->cv);
            while (sm->merged_round < sm->pend_round && !a->bg_cancel)
                pthread_cond_wait(&a->cv, &a->mu);
            a->bg_parked = 0;
            al_logf(&a->log, AL_LOG_DEBUG, "site %s: t=%.3f span %ld waited for round %ld",
                    a->name[a->self], al_now() - a->t0, round, sm->pend_round);
        }
        pthread_mutex_unlock(&a->mu);
        if (a->bg_cancel) return 0;
        size_t lo, hi;
        al_shard_range(a->P, sm->F, sm->pend_p, &lo, &hi);
        float *th = ag_theta_local(a);
        double sq;
        al_err why = {0};
        if (a->fault_nanmerge == sm->pend_round) { /* test hook, see agent_impl.h */
            a->from[lo] = NAN;
            a->fault_nanmerge = -1;
        }
        /* (a->blend: scratch; a->delta belongs to the driver's next exchange) */
        if (al_commit_merge(th + lo, a->from + lo, a->outer.theta + lo, hi - lo, a->blend + lo, &sq,
                            &why)) {
            memcpy(th, a->outer.theta, a->P * sizeof(float));
            al_logf(&a->log, AL_LOG_WARN,
                    "site %s: round %ld: merging fragment %d: %s; theta_local reset to "
                    "theta_global",
                    a->name[a->self], round, sm->pend_p, why.msg);
        }
    }
    pthread_mutex_lock(&a->mu); /* the H of this span's outer round is known now */
    long len = ag_span_len(a, round);
    pthread_mutex_unlock(&a->mu);
    return ag_interval_run(a, round, AL_MAX(len, iv->steps), iv, step, err);
}

/* ---- the interval on its own thread ---------------------------------------------------- */

/* One thread for the whole run, started with the first interval it trains
 * and woken for each next one (bg_go): a fresh thread per interval paid its
 * cold start (caches, OpenMP and BLAS per-thread state) every time, which
 * streaming's F spans a round made visible (about a step per span). */
static void *bg_main(void *arg) {
    agent *a = arg;
    pthread_setname_np(pthread_self(), "al-interval"); /* for top -H, perf */
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->bg_go && !a->bg_quit) pthread_cond_wait(&a->cv, &a->mu);
        if (a->bg_quit) break;
        a->bg_go = 0;
        pthread_mutex_unlock(&a->mu);
        al_err e = {0};
        /* the same reductions as the driver's thread, so a site trains the same
         * numbers with or without overlap (OpenMP's thread count is per thread) */
        al_threads_set(a->bg_threads);
        al_logf(&a->log, AL_LOG_DEBUG, "site %s: t=%.3f interval %ld starts on the thread",
                a->name[a->self], al_now() - a->t0, a->bg_round);
        int rc = a->sm.F ? ag_span_run(a, a->bg_round, &a->bg_iv, &a->bg_step, &e)
                         : ag_interval_run(a, a->bg_round, a->bg_h, &a->bg_iv, &a->bg_step, &e);
        al_logf(&a->log, AL_LOG_DEBUG, "site %s: t=%.3f interval %ld ends on the thread",
                a->name[a->self], al_now() - a->t0, a->bg_round);
        pthread_mutex_lock(&a->mu);
        a->bg_rc = rc;
        a->bg_err = e;
        a->bg_done = 1;
        a->bg_t_end = al_now();
        pthread_cond_broadcast(&a->cv); /* the driver may be waiting for work */
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

int ag_bg_start(agent *a, long round, long h, al_err *err) {
    memcpy(a->from, ag_theta_local(a), a->P * sizeof(float));
    a->tr.step = a->step;
    if (a->workers > 1) a->odc.step = a->step;
    if (!a->bg_alive) {
        int e = pthread_create(&a->bg_thread, NULL, bg_main, a);
        if (e)
            return al_errf(err, AL_EIO, "round %ld: cannot start the training thread (error %d)",
                           round, e);
        a->bg_alive = 1;
    }
    pthread_mutex_lock(&a->mu);
    memset(&a->bg_iv, 0, sizeof a->bg_iv);
    a->bg_round = round;
    a->bg_h = h;
    a->bg_step = a->step;
    a->bg_rc = 0;
    a->bg_done = 0;
    a->bg_cancel = 0;
    a->bg_pending = 0;
    a->bg_threads = al_threads_get();
    a->bg_go = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    a->bg_running = 1;
    return 0;
}

/* Wait until the thread's interval is over. */
static void bg_wait(agent *a) {
    pthread_mutex_lock(&a->mu);
    while (!a->bg_done) pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
    a->bg_running = 0;
}

void ag_bg_quit(agent *a) {
    if (!a->bg_alive) return;
    pthread_mutex_lock(&a->mu);
    a->bg_quit = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->bg_thread, NULL);
    a->bg_alive = 0;
}

int ag_bg_join(agent *a, al_err *err) {
    if (!a->bg_running) return 0;
    bg_wait(a);
    if (a->bg_rc) {
        *err = a->bg_err;
        return a->bg_rc;
    }
    a->iv = a->bg_iv;
    a->iv_h = a->bg_h;
    a->sm.pend_p = -1; /* (streaming) its merge is made */
    a->step = a->bg_step;
    return 0;
}

void ag_bg_discard(agent *a, int keep_start) {
    if (a->bg_running) {
        pthread_mutex_lock(&a->mu); /* (streaming: it may wait for a commit) */
        a->bg_cancel = 1;
        pthread_cond_broadcast(&a->cv);
        pthread_mutex_unlock(&a->mu);
        bg_wait(a);
        a->bg_cancel = 0;
        if (a->bg_iv.steps > 0)
            al_logf(&a->log, AL_LOG_INFO,
                    "site %s: dropping %ld inner steps of interval %ld (trained beside the "
                    "exchange)",
                    a->name[a->self], a->bg_iv.steps, a->bg_round);
        if (keep_start) {
            memcpy(ag_theta_local(a), a->from, a->P * sizeof(float));
            a->bg_pending = 1;
        }
    }
    if (!keep_start) {
        a->bg_pending = a->bg_trained = 0;
        a->sm.pend_p = -1; /* θ_local starts again from θ_global */
    }
}

int ag_bg_settle(agent *a, al_err *err) {
    if (a->bg_running && a->bg_round == a->round) {
        al_logf(&a->log, AL_LOG_INFO,
                "site %s: stopping: interval %ld trains to its end and is saved with its start",
                a->name[a->self], a->bg_round);
        int rc = ag_bg_join(a, err);
        if (rc == 0) a->bg_trained = 1;
        return rc;
    }
    if (a->bg_running) ag_bg_discard(a, 1);
    /* Round r did not commit before the stop (a peer silent past the deadline),
     * but its interval ended and interval r + 1 was set to start from the eager
     * guess built on it. A checkpoint of round r must hold interval r instead,
     * as it ended, before its merge: the resumed run merges and exchanges it
     * again. (Steps interval r + 1 took on the thread are dropped; their AdamW
     * moments are not undone, so such a resume is not bit-identical.) */
    if ((a->bg_pending || a->bg_trained) && a->bg_round == a->round + 1) {
        memcpy(ag_theta_local(a), a->iv_end, a->P * sizeof(float));
        memcpy(a->from, a->iv_from, a->P * sizeof(float));
        a->bg_pending = 0;
        a->bg_trained = 1;
        a->bg_round = a->round;
        a->bg_h = a->iv_h;
        a->sm.pend_p = -1; /* (streaming) its end holds the merge it made */
        al_logf(&a->log, AL_LOG_INFO,
                "site %s: stopping before round %ld committed: its interval is saved as it "
                "ended, to be exchanged again",
                a->name[a->self], a->round);
    }
    return 0;
}

int ag_bg_finished(agent *a, double *t_end) {
    pthread_mutex_lock(&a->mu);
    int done = a->bg_done || a->bg_parked;
    *t_end = a->bg_t_end;
    pthread_mutex_unlock(&a->mu);
    return !a->bg_running || done;
}
