/* agent_round.c -- the agent's driver: the round protocol's Ready loop.
 *
 * The state machine of runtime/round/al_round.h decides; this file feeds it and
 * carries out what it asks, in order (etcd raft's Ready/Advance loop):
 *   events in:  a peer's status (heartbeats, agent_hb.c), a peer's statistics
 *               that fit this site's interval, a timer tick, and the results
 *               of the actions below;
 *   actions:    train the interval (-> INTERVAL_DONE with θ_global's hash),
 *               exchange Δ with the members the machine chose (agent_net.c;
 *               -> EXCHANGE_DONE / _FAILED), compute the candidate outer step
 *               beside θ_global (-> CANDIDATE), persist a vote, apply the
 *               committed candidate (the round's bookkeeping: metrics, the
 *               round record, the snapshot peers pull), revert it, pull the
 *               committed state from a peer (-> SYNCED / SYNC_FAILED) and
 *               adopt it, reload θ_global from the published copy (->
 *               RELOADED), send the status and statistics (handed to the
 *               heartbeat thread), log.
 * A round commits only with [round] quorum of the configured sites voting the
 * same candidate hash; a minority says "no quorum" and pulls the majority's
 * state when it hears of it. The vote of each (round, epoch), with the
 * candidate it names, and every commit are persisted (agent_hard.c) before
 * anything shows them, and read back on --resume. See docs/ARCHITECTURE.md,
 * "The round protocol" and "Durable rounds". */
#include "agent_round.h"
#include "agent_carry.h"
#include "agent_ckpt.h"
#include "agent_events.h"
#include "agent_exchange.h"
#include "agent_hard.h"
#include "agent_hash.h"
#include "agent_machine.h"
#include "agent_net.h"
#include "agent_stream.h"
#include "agent_train.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the outer state beside θ_global ---------------------------------------------------- */

static int outer_copy(al_outer *dst, const al_outer *src, al_err *err) {
    if (dst->n != src->n) {
        al_outer_free(dst);
        int rc = al_outer_init(dst, &src->cfg, src->theta, src->n, err);
        if (rc) return rc;
    }
    dst->cfg = src->cfg;
    memcpy(dst->theta, src->theta, src->n * sizeof(float));
    memcpy(dst->mom, src->mom, src->n * sizeof(float));
    dst->steps = src->steps;
    dst->last = src->last;
    return 0;
}

static void outer_swap(al_outer *x, al_outer *y) {
    al_outer t = *x;
    *x = *y;
    *y = t;
}

/* A new round begins here: its receive window, and the state peers pull. */
static int enter_round(agent *a, al_err *err) {
    memset(&a->iv, 0, sizeof a->iv);
    a->step0 = a->step;
    a->mine_round = -1;
    ag_set_round(a, a->round);
    ag_carry_drop_before(a, a->round); /* (the candidate kept for peers is committed or void) */
    if (a->fault_publish_ms > 0) {     /* test hook, see agent_impl.h */
        al_sleep(a->fault_publish_ms / 1000.0);
    }
    return ag_publish_state(a, err);
}

/* The run is over here (the budget) or stopping (a signal): after this
 * commit, wait only for the peers to see it. */
static void check_finished(agent *a) {
    if (a->finished) return;
    /* a signal: this commit is the last. With overlap, sites stop after the
     * same commit (the first after the signal) wherever their next interval
     * stands: not started (pending), or training (ag_bg_settle: it runs to its
     * end and is saved); a resumed site goes on from either */
    /* (streaming: asked after round a->round − 1 committed) */
    int done =
        a->sm.F ? a->round > 0 && ag_stream_ends(a, a->round - 1) : a->step >= a->cfg->inner_steps;
    if (done || *a->stop) {
        a->finished = 1;
        a->linger_until = al_now() + a->cfg->round_deadline_s;
    }
}

/* ---- the actions ---------------------------------------------------------------------- */

/* Is a checkpoint due when round `next_round` begins (do_apply saves it)? */
static int ckpt_due(const agent *a, long next_round) {
    long every = 0; /* [checkpoint] every_rounds (checked at the start) */
    al_err e;
    al_config_checkpoint_every(a->cfg, 'a', &every, &e);
    return every > 0 && next_round % every == 0;
}

/* Overlap, after interval r: interval r + 1 starts at the eager estimate of
 * θ_{r+1} with the H the last decision set (round r's decides H_{r+2}), on
 * its own thread at once, or after round r's commit when a checkpoint is due
 * then or a signal came (the checkpoint holds that start: a resumed run
 * trains the same interval from the same point). Nothing when the budget is
 * spent. */
static int next_interval(agent *a, al_err *err) {
    if (a->sm.F) { /* streaming: the eager guess is in θ_local (ag_stream_delta) */
        if (ag_stream_ends(a, a->round)) return 0; /* none after the run's last exchange */
        ag_stream_next(a);
    } else {
        if (a->step >= a->cfg->inner_steps) return 0;
        double s_r = a->progress_lr ? a->iv.lr_sum : (double)a->iv.steps;
        al_eager_in in = {.delta = a->delta, .blend = a->blend};
        if (a->overlap == AL_OVERLAP_DELAYED_MID) in.from = a->from; /* this interval's start */
        int rc = al_commit_eager(&a->eager, &a->outer, &in, s_r, ag_theta_local(a), err);
        if (rc) return al_err_prefix(err, "round %ld: the eager start", a->round);
    }
    if (*a->stop || ckpt_due(a, a->round + 1)) {
        a->bg_pending = 1;
        a->bg_round = a->round + 1;
        a->bg_h = a->h;
        return 0;
    }
    return ag_bg_start(a, a->round + 1, a->h, err);
}

/* This site's statistics of the interval it trained (its Δ's norm comes after;
 * streaming makes them the outer round's, ag_stream_delta). */
static al_site_stats interval_stats(const agent *a) {
    long n = AL_MAX(a->iv.steps, 1);
    return (al_site_stats){.site = a->self,
                           .steps = a->iv.steps,
                           .loss = a->iv.loss_sum / (double)n,
                           .grad_norm = a->iv.gnorm_sum / (double)n,
                           .lr_sum = a->iv.lr_sum,
                           .lr_sq_sum = a->iv.lr_sq_sum,
                           .lr_last = a->iv.lr_last,
                           .tokens = a->iv.tokens,
                           .compute_s = a->iv.compute_s,
                           .comm_s = a->xchg_s};
}

/* AL_ACT_TRAIN: the interval of round a->round, then Δ and this site's
 * statistics; INTERVAL_DONE carries θ_global's hash, which the machine checks
 * against the committed base. Blocking: the interval runs here from θ_global
 * and Δ = θ_global − θ_local. Overlap: it ran beside round r − 1 (joined here)
 * or runs here from where it was to start, Δ = its start − its end
 * (al_commit_merge), and interval r + 1 starts (next_interval). */
static int do_train(agent *a, al_err *err) {
    if (a->finished) return 0;
    if (a->mine_round == a->round) { /* trained already (a reload): again, from θ_global */
        al_logf(&a->log, AL_LOG_INFO, "site %s: round %ld: training the interval again",
                a->name[a->self], a->round);
        ag_bg_discard(a, 0);
        a->step = a->step0;
        memset(&a->iv, 0, sizeof a->iv);
        ag_local_from_global(a);
    }
    a->t_round0 = al_now();
    if (a->t_first_train == 0) a->t_first_train = a->t_round0;
    int rc = 0;
    if (a->overlap && a->round == a->fault_corrupt) ag_corrupt(a); /* the driver's, see there */
    if (a->overlap && a->round == a->fault_freeze) raise(SIGSTOP);
    if (a->bg_running && a->bg_round == a->round) {
        rc = ag_bg_join(a, err);
        /* overlap: a stop during the interval gives its round one heartbeat
         * from the interval's end, as to a blocking site (ag_stop_age) */
        if (*a->stop) atomic_store(&a->stop_from_ms, (long long)(al_now() * 1000.0));
    } else {
        if (a->bg_running) ag_bg_discard(a, 0); /* of another round (not expected) */
        long h = a->h;
        if ((a->bg_pending || a->bg_trained) && a->bg_round == a->round) h = a->bg_h;
        /* trained before a stop (the checkpoint's start, end and statistics):
         * the run below adds no step */
        int trained = a->bg_trained && a->bg_round == a->round;
        if (a->overlap && !trained) memcpy(a->from, ag_theta_local(a), a->P * sizeof(float));
        a->bg_pending = a->bg_trained = 0;
        a->iv_h = h;
        if (!a->sm.F) {
            a->cut_ok = 1;
            rc = ag_interval_run(a, a->round, h, &a->iv, &a->step, err);
            a->cut_ok = 0;
            if (rc == 0 && a->iv_cut) return 0; /* a stop: saved as it stands (ag_drive) */
        } else if (!trained)                    /* streaming: the span, and the merge it makes */
            rc = ag_span_run(a, a->round, &a->iv, &a->step, err);
        a->sm.pend_p = -1;
    }
    if (rc) return rc;
    if (a->sm.F) a->iv_h = a->h; /* (the records show the outer round's H) */
    a->t_train_end = al_now();
    al_metrics_add(&a->met, AL_M_COMPUTE_S, a->iv.compute_s);
    double dsq = 0;
    if (a->overlap) { /* kept until the next merge (a stop before this round commits) */
        memcpy(a->iv_from, a->from, a->P * sizeof(float));
        memcpy(a->iv_end, ag_theta_local(a), a->P * sizeof(float));
    }
    a->mine = interval_stats(a);
    if (a->sm.F) /* streaming: fragment p's Δ, the outer round's running statistics */
        rc = ag_stream_delta(a, &a->mine, err);
    else if (a->overlap)
        rc = al_commit_merge(ag_theta_local(a), a->from, a->outer.theta, a->P, a->delta, &dsq, err);
    else
        rc = al_pseudo_grad(a->delta, a->outer.theta, ag_theta_local(a), a->P, &dsq, err);
    if (rc) return rc;
    if (!a->sm.F) a->mine.delta_sq = dsq;
    if (a->overlap && (rc = next_interval(a, err))) return rc;
    size_t lo, hi; /* what this round exchanges */
    ag_frag(a, a->round, &lo, &hi);
    if (a->fault_poison != 0) { /* test hook: a poisoning member (it reports its norm) */
        for (size_t i = lo; i < hi; i++) a->delta[i] = (float)a->fault_poison;
        double v = a->fault_poison * a->fault_poison * (double)(hi - lo);
        a->mine.delta_sq += v - (a->sm.F ? a->sm.dsq : a->mine.delta_sq);
        if (a->sm.F) a->sm.dsq = v;
    }
    if (a->fault_liar != 0 && !a->fault_liar_to[0]) /* test hook: the same Δ, reporting the
                                                     * honest norm */
        for (size_t i = lo; i < hi; i++) a->delta[i] = (float)a->fault_liar;
    if ((rc = al_site_stats_check(&a->mine, err))) return al_err_prefix(err, "round %ld", a->round);
    a->mine_round = a->round;
    al_round_event ev = {.type = AL_EV_INTERVAL_DONE, .peer = -1, .round = a->round};
    ag_outer_check(a, &ev.hash); /* a fault since the commit shows here */
    ag_feed(a, &ev);
    return 0;
}

/* AL_ACT_EXCHANGE: Δ with the members the machine chose. A failure is the
 * round's business (a null vote), never the agent's end. */
static int do_exchange(agent *a, const al_round_action *act) {
    if (a->round == a->fault_stats) raise(SIGKILL);               /* test hook, see agent_impl.h */
    if (a->round == a->fault_corrupt_xchg) ag_corrupt_outside(a); /* (after the interval's check) */
    ag_fault_pause(a, "exchange", a->round);
    al_round_event ev = {
        .type = AL_EV_EXCHANGE_FAILED, .peer = -1, .round = a->round, .epoch = act->epoch};
    int M = 0, p = (int)(a->round & 1);
    al_err e = {0};
    int rc = 0;
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < a->nsites && rc == 0; i++) {
        if (!(act->members >> i & 1)) continue;
        a->cand_mem[M] = i;
        if (i == a->self) {
            a->cand_st[M++] = a->mine;
        } else if (a->have_stats[p][i] == a->round + 1 && a->stats_epoch[p][i] == act->epoch) {
            al_site_stats st = a->stats[p][i];
            /* the schedule's scalars are the same everywhere; the wire carries S_r */
            st.lr_sq_sum = a->mine.lr_sq_sum;
            st.lr_last = a->mine.lr_last;
            a->cand_st[M++] = st;
        } else {
            ev.peer = i;
            rc = al_errf(&e, AL_EPEER, "round %ld: %s's statistics were replaced", a->round,
                         a->name[i]);
        }
    }
    pthread_mutex_unlock(&a->mu);
    a->cand_M = M;
    double t_x = al_now();
    if (rc == 0)
        rc = ag_exchange(a, act->epoch, act->members, a->cand_mem, a->cand_st, M, &ev.peer, &e);
    if (a->round == a->fault_holdvote && act->epoch == 0)
        rc = ag_fault_hold_vote(a, rc, &e); /* test hook */
    if (rc == 0) {
        a->xchg_s = al_now() - t_x; /* the link's cost of a round, sent with the next stats */
        a->t_comm_end = al_now();
        ev.type = AL_EV_EXCHANGE_DONE;
    } else {
        al_logf(&a->log, AL_LOG_WARN,
                "site %s: round %ld: the exchange (attempt %llu, %d sites) "
                "failed: %s",
                a->name[a->self], a->round, (unsigned long long)act->epoch, M, e.msg);
        if (rc == AL_EINTEGRITY && ev.peer >= 0 && a->liar[ev.peer].round != a->round)
            /* every member that saw the bytes leaves it out alike, and tells
             * the others in its status: for the rest of the run, or until it
             * restarts */
            ag_mark_liar(a, ev.peer, "its mean shard broke the claim check");
    }
    ag_feed(a, &ev);
    return 0;
}

/* AL_ACT_PROPOSE: the outer step on a copy of the outer state; the policy
 * decides the next H (its state before is kept for a revert). */
static int do_propose(agent *a, const al_round_action *act, al_err *err) {
    if (a->have_cand) al_policy_load(a->pol, a->pol_before, NULL);
    a->have_cand = a->cand_noiv = 0;
    int rc = outer_copy(&a->cand, &a->outer, err);
    if (rc) return rc;
    al_policy_save(a->pol, a->pol_before, sizeof a->pol_before);
    al_site_stats in_mean[AG_MAX_SITES];
    int n_in = 0;
    for (int j = 0; j < a->cand_M; j++)
        if (!a->excluded[a->cand_mem[j]]) in_mean[n_in++] = a->cand_st[j];
    if (a->sm.F) {
        rc = ag_stream_propose(a, &a->cand, in_mean, n_in, &a->cand_d, err);
    } else {
        rc =
            al_commit_decide(a->pol, in_mean, n_in, a->dbar, a->P, a->round, a->h, &a->cand_d, err);
        if (rc == 0) rc = al_commit_step(&a->cand, a->dbar, &a->cand_d, a->progress_lr, err);
    }
    if (rc) {
        al_policy_load(a->pol, a->pol_before, NULL);
        return al_err_prefix(err, "round %ld", a->round);
    }
    a->have_cand = 1;
    al_round_event ev = {
        .type = AL_EV_CANDIDATE, .peer = -1, .round = a->round, .epoch = act->epoch};
    /* θ_global, which the candidate came from, checked by its checksum before
     * the candidate is hashed (rehashed if it changed since it was hashed: a
     * fault since the interval's check shows here, and the machine reloads it).
     * The candidate's hash reads θ_global's kept digests outside its fragment,
     * so without this a flip there would be voted and committed as clean. */
    ag_outer_check(a, &ev.theta);
    size_t lo = 0, hi = a->P; /* (streaming: the candidate differs in its fragment only) */
    if (a->sm.F) ag_frag(a, a->round, &lo, &hi);
    ag_cand_hash(a, lo, hi);
    ev.hash = a->cand_h;
    ag_feed(a, &ev);
    return 0;
}

/* DiLoCo and DDP synchronise every H_base steps, or every step, by the same
 * reduce-scatter + all-gather of θ's P fp32 values among the round's M
 * members: this site (the me-th, owning `own` values) sends P - own values
 * and its mean shard M - 1 times, 2 (M-1)/M P on average. This site's own
 * count, not the average, is what its fp32 bytes (a->bytes_raw) are compared
 * with: the average put DiLoCo a few bytes below them when P is not a
 * multiple of M ("-5 B not sent" at H = H_base). */
static double sync_bytes(const agent *a, int M, int me) {
    if (M < 2) return 0.0;
    size_t lo, hi;
    al_shard_range(a->P, M, me, &lo, &hi);
    double own = (double)(hi - lo);
    return ((double)a->P - own + (double)(M - 1) * own) * 4.0;
}

/* Bytes since the last count: what our exchange clients sent (shards,
 * handshakes, state pulls: the senders' total equals the receivers'), and
 * what our server got. Heartbeats and statistics are control traffic, on
 * neither side. */
static double count_bytes(agent *a, double busy_s) {
    double sent = a->tx_retired, recv = 0;
    a->tx_retired = 0;
    for (int i = 0; i < a->nsites; i++) {
        if (i == a->self) continue;
        double dtx = 0;
        if (a->cli[i]) {
            uint64_t tx, rx;
            al_client_bytes(a->cli[i], &tx, &rx);
            dtx = (double)tx - a->peer_tx[i];
            a->peer_tx[i] = (double)tx;
        }
        sent += dtx;
        uint64_t srx = 0, stx = 0;
        al_server_bytes(a->srv, a->name[i], &srx, &stx);
        double drx = (double)srx - a->peer_rx[i];
        a->peer_rx[i] = (double)srx;
        recv += (double)srx;
        al_metrics_peer(&a->met, a->name[i], dtx, drx, busy_s);
    }
    al_metrics_add(&a->met, AL_M_BYTES_SENT, sent);
    al_metrics_set(&a->met, AL_M_BYTES_RECV, a->recv_base + recv);
    return sent;
}

/* The sites seen agreeing on the hash committed by act, by site id: this
 * one, and every peer whose latest status voted it in the round's attempt or
 * holds it as the next round's base. Statuses that come later add to it
 * (ag_theta_seen): a vote after the quorum's still counts. */
static uint64_t agreeing(const agent *a, const al_round_action *act) {
    uint64_t mask = (uint64_t)1 << a->self;
    for (int i = 0; i < a->nsites; i++) {
        const al_round_peer *p = &a->rm.peer[i];
        if (i == a->self || !p->have) continue;
        const al_round_status *st = &p->st;
        if ((st->round == act->round && st->epoch == act->epoch && st->vote == AL_VOTE_HASH &&
             !memcmp(st->value.hash.b, act->hash.b, 32)) ||
            (st->round == act->round + 1 && !memcmp(st->base.b, act->hash.b, 32)))
            mask |= (uint64_t)1 << i;
    }
    return mask;
}

/* The eval loss of θ_global (with W > 1 the trainer only carries it), into the metrics. */
static int eval_global(agent *a, double *eval, al_err *err) {
    int rc, batches = (int)a->cfg->inner_eval_batches;
    if (a->workers == 1 && a->overlap) /* θ_local is the next interval's: a model of its own */
        rc = al_eval_params(&a->mc, a->outer.theta, &a->o, &a->val, batches, eval, err);
    else {
        if (a->workers > 1) memcpy(a->tr.model.params, a->outer.theta, a->P * sizeof(float));
        rc = al_trainer_eval(&a->tr, batches, eval, err);
    }
    if (rc == 0) al_metrics_set(&a->met, AL_M_EVAL_LOSS, *eval);
    return rc;
}

/* The candidate becomes θ_global, with its hash, its chunks' digests and its
 * checksum. */
static void take_candidate(agent *a) {
    outer_swap(&a->outer, &a->cand);
    a->have_cand = 0;
    a->outer_h = a->cand_h;      /* θ_global's now; enter_round publishes it */
    uint8_t *dig = a->outer_dig; /* (the candidate's digests and checksum with it) */
    a->outer_dig = a->cand_dig;
    a->cand_dig = dig;
    a->outer_sum = a->cand_sum;
    a->outer_h_ok = 1;
}

/* Membership events, from the change against the last round: a peer in
 * this round that was out of the last one has (re)joined, one that was in
 * it and is not now was dropped (unreachable, silent, or its statistics
 * or shards did not fit; the log line before says which). */
static void membership_events(agent *a, const int *members, int M) {
    int was[AG_MAX_SITES];
    memcpy(was, a->live, sizeof was);
    memset(a->live, 0, sizeof a->live);
    for (int j = 0; j < M; j++) a->live[members[j]] = 1;
    for (int i = 0; i < a->nsites; i++) {
        if (i == a->self) continue;
        if (a->live[i] && !was[i]) ag_event(a, a->ever_live[i] ? "rejoin" : "join", a->name[i]);
        if (!a->live[i] && was[i]) ag_event(a, "drop", a->name[i]);
        if (a->live[i]) a->ever_live[i] = 1;
        al_metrics_peer_up(&a->met, a->name[i], a->live[i]);
    }
}

/* Overlap: the seconds of the round's exchange and vote (t_comm) that ran
 * beside the next interval, hidden while that interval was still training.
 * The commit's time is the run's last (summary.json). */
static double hidden_comm(agent *a, double t_comm) {
    double hidden = 0, t_bg_end = 0, t_commit = al_now();
    a->t_last_commit = t_commit;
    if (a->bg_running)
        hidden = ag_bg_finished(a, &t_bg_end)
                     ? AL_MAX(0.0, AL_MIN(t_bg_end, t_commit) - a->t_train_end)
                     : t_commit - a->t_train_end;
    return AL_MIN(hidden, t_comm);
}

/* The committed round's counters and gauges. */
static void round_metrics(agent *a, const al_commit_decision *d, int M, double t_comm,
                          double hidden) {
    al_metrics_set(&a->met, AL_M_BYTES_RAW, a->bytes_raw);
    int me = 0; /* this site's place among the members: its shard */
    while (me < M - 1 && a->cand_mem[me] != a->self) me++;
    double sync = sync_bytes(a, M, me);
    al_metrics_add(&a->met, AL_M_BYTES_DILOCO, (double)a->iv.steps / a->h_base * sync);
    al_metrics_add(&a->met, AL_M_BYTES_DDP, (double)a->iv.steps * sync);
    al_metrics_add(&a->met, AL_M_SYNCS, a->sm.F ? 1.0 / a->sm.F : 1.0); /* a fragment: 1/F */
    al_metrics_add(&a->met, AL_M_SYNCS_DILOCO, (double)a->iv.steps / a->h_base);
    al_metrics_set(&a->met, AL_M_INNER_STEPS, (double)a->step);
    al_metrics_add(&a->met, AL_M_TOKENS, (double)a->iv.tokens);
    al_metrics_set(&a->met, AL_M_INTERVAL, (double)d->h_next);
    al_metrics_set(&a->met, AL_M_TRAIN_LOSS, a->mine.loss);
    al_metrics_set(&a->met, AL_M_OUTER_LR_SCALE, a->outer.last.scale);
    al_metrics_set(&a->met, AL_M_OUTER_MU, a->outer.last.mu);
    al_metrics_add(&a->met, AL_M_COMM_S, t_comm);
    al_metrics_add(&a->met, AL_M_COMM_HIDDEN_S, hidden);
    al_metrics_set(&a->met, AL_M_MEMBERS, M);
    al_metrics_round_duration(&a->met, al_now() - a->t_round0);
}

/* The committed round's evaluation, if it has one (the last round's, and
 * every [inner] eval_every steps; `trained`: the steps of its interval):
 * into *ev and *eval. */
static int round_eval(agent *a, long trained, double *ev, double *eval, al_err *err) {
    long every = a->cfg->inner_eval_every;
    int last = a->step >= a->cfg->inner_steps;
    if (a->sm.F) last = ag_stream_ends(a, a->round); /* the last of the final exchanges */
    int rc;
    if (a->val.tok && (last || (every > 0 && a->step / every != (a->step - trained) / every))) {
        if ((rc = eval_global(a, ev, err))) return rc;
        *eval = *ev;
    }
    return 0;
}

/* The committed round's record (the event log, /api/v1/rounds). */
static void round_record(agent *a, const al_round_action *act, long h_run, double t_comm,
                         double hidden, double ev, al_round_record *rec) {
    const al_commit_decision *d = &a->cand_d;
    int M = a->cand_M;
    memset(rec, 0, sizeof *rec);
    rec->round = a->round;
    rec->step = a->step;
    rec->h = h_run;
    rec->h_next = d->h_next;
    rec->members = M;
    /* unix seconds, to the microsecond: a stamp for events.jsonl and /metrics
     * (the dashboard's "since commit"), read by people and tools, never waited on */
    rec->t = al_wall_now();
    rec->train_loss = a->mine.loss;
    rec->eval_loss = ev;
    rec->nsites = M;
    for (int j = 0; j < M; j++) {
        snprintf(rec->sites[j], sizeof rec->sites[j], "%s", a->name[a->cand_mem[j]]);
        rec->site_loss[j] = a->cand_st[j].loss;
    }
    double *v = a->met.v;
    pthread_mutex_lock(&a->met.lock);
    rec->bytes_sent = v[AL_M_BYTES_SENT];
    rec->bytes_recv = v[AL_M_BYTES_RECV];
    rec->bytes_raw = v[AL_M_BYTES_RAW];
    rec->bytes_diloco = v[AL_M_BYTES_DILOCO];
    rec->bytes_ddp = v[AL_M_BYTES_DDP];
    rec->syncs_diloco = v[AL_M_SYNCS_DILOCO];
    pthread_mutex_unlock(&a->met.lock);
    rec->compute_s = a->iv.compute_s;
    rec->comm_s = t_comm;
    rec->hidden_s = hidden;
    rec->wait_s = 0;
    rec->policy_comm_s = d->rs.comm_s;
    rec->policy_compute_s = d->rs.compute_s;
    rec->comm_floor = d->comm_floor;
    rec->outer_lr_scale = a->outer.last.scale;
    rec->outer_mu = a->outer.last.mu;
    ag_hash_hex(&a->outer_h, rec->theta); /* per round: sites compare histories */
    rec->configured = a->nsites;
    rec->equal = agreeing(a, act);
}

/* After a commit: the commit is persisted (hard.json; candidate.bin becomes
 * commit-<round>.bin) before anything acts on it (the snapshot peers pull,
 * the statuses that show the next round), then the next round begins (H as
 * decided), a checkpoint if one is due, and (overlap) the interval that
 * waited for this commit. */
static int next_round(agent *a, double t_comm, long h_run, al_err *err) {
    a->h = (long)a->cand_d.h_next;
    if (a->sm.F) ag_stream_commit(a, t_comm); /* (streaming: the thread may merge now) */
    a->round++;
    uint32_t members = 0;
    for (int j = 0; j < a->cand_M; j++) members |= 1u << a->cand_mem[j];
    int rc = ag_hard_commit(a, 1, h_run, members, err);
    if (rc) return rc;
    ag_fault_pause(a, "apply", a->round - 1);
    if ((rc = enter_round(a, err))) return rc;
    check_finished(a);
    if (!a->finished && ckpt_due(a, a->round) && !a->bg_running) {
        if ((rc = ag_save(a, err))) return rc;
        ag_hard_prune(a);
    }
    /* overlap: the interval that waited for this commit (a checkpoint) */
    if (a->bg_pending && !a->finished && a->bg_round == a->round)
        return ag_bg_start(a, a->round, a->bg_h, err);
    return 0;
}

/* AL_ACT_APPLY: the candidate is committed: it becomes θ_global, and the
 * round's bookkeeping follows (membership events, counters, the round
 * record in the event log, evaluation, the log line), then the next round. */
static int do_apply(agent *a, const al_round_action *act, double *eval, al_err *err) {
    /* (the candidate is untouched since do_propose hashed it) */
    if (!a->have_cand || memcmp(a->cand_h.b, act->hash.b, 32) != 0)
        return al_errf(err, AL_EINVAL, "round %ld: asked to apply a candidate this site lacks",
                       a->round);
    if (a->cand_noiv) { /* --resume with overlap: held, its interval not replayed */
        a->cand_noiv = 0;
        if (a->iv.steps == 0) { /* nor trained again: the commit is taken as a pull */
            ag_bg_discard(a, 0);
            a->bg_pending = a->bg_trained = 0;
            a->step = a->hard.step + a->iv_h; /* (the steps every voter trained) */
            al_logf(&a->log, AL_LOG_INFO,
                    "site %s: round %ld: applying the candidate voted for before the restart, "
                    "whose interval was not replayed: at step %ld as its voters",
                    a->name[a->self], a->round, a->step);
        }
    }
    take_candidate(a);
    long trained = a->iv.steps; /* the interval's; local_from_global keeps a->step */
    /* overlap: θ_local is the next interval's, training or about to */
    if (!a->bg_running && !a->bg_pending) ag_local_from_global(a);
    const al_commit_decision *d = &a->cand_d;
    long h_run = a->iv_h;
    int M = a->cand_M;
    /* (streaming: one H per outer round, recorded at its last fragment) */
    int outer_end = !a->sm.F || a->round % a->sm.F == a->sm.F - 1;
    if (outer_end && a->nh < (int)AL_ARRAY_LEN(a->h_hist)) a->h_hist[a->nh++] = h_run;
    membership_events(a, a->cand_mem, M);
    double t_comm = a->t_comm_end > a->t_train_end ? a->t_comm_end - a->t_train_end : 0;
    double hidden = hidden_comm(a, t_comm);
    double sent = count_bytes(a, t_comm);
    round_metrics(a, d, M, t_comm, hidden);
    double ev = NAN; /* this round's evaluation, if it has one */
    int rc;
    if ((rc = round_eval(a, trained, &ev, eval, err))) return rc;
    al_round_record rec;
    round_record(a, act, h_run, t_comm, hidden, ev, &rec);
    al_metrics_add_round(&a->met, &rec, NULL);
    char *line = al_round_record_json(a->name[a->self], &rec);
    ag_event_line(a, line);
    free(line);
    char evs[40] = ""; /* (loss: this site's training loss; eval: θ_global's) */
    if (!isnan(ev)) snprintf(evs, sizeof evs, " | eval %.4f", ev);
    al_logf(&a->log, AL_LOG_INFO,
            "site %s | round %ld | step %ld | H %ld -> %lld | sites %d | loss %.4f%s | sent %.0f B "
            "| theta %.12s",
            a->name[a->self], a->round, a->step, h_run, (long long)d->h_next, M, a->mine.loss, evs,
            sent, rec.theta);
    return next_round(a, t_comm, h_run, err);
}

static void do_revert(agent *a) {
    if (!a->have_cand) return;
    al_policy_load(a->pol, a->pol_before, NULL);
    a->have_cand = 0;
}

/* AL_ACT_SYNC: pull the committed state from a peer. A state that does not
 * fit (malformed, another shape or size, a broken seal: less than the peer
 * announced) is refused and the machine asks another peer, and not that one
 * again for this goal (short_served); θ not the hash its metadata names (a
 * commit between the two pulls) or no answer: that peer again after the
 * others. */
static int do_sync(agent *a, const al_round_action *act) {
    al_err e = {0};
    al_round_event ev = {.type = AL_EV_SYNC_FAILED, .peer = act->peer};
    int rc = ag_pull(a, act->peer, &e);
    if (rc == 0) {
        ev.type = AL_EV_SYNCED;
        ev.round = a->pulled_round;
        ag_hash_of(&a->pulled, &ev.hash);
    } else {
        ev.short_served = rc == AL_EFORMAT || rc == AL_EINTEGRITY;
        al_logf(&a->log, AL_LOG_WARN,
                "joining: the state from %s refused (%s); trying another peer%s",
                a->name[act->peer], e.msg,
                ev.short_served ? ", and not this one again for this state" : "");
    }
    ag_feed(a, &ev);
    return 0;
}

/* AL_ACT_ADOPT: the pulled state becomes this site's: θ_global, the outer
 * and policy state, round, step and H. What was trained since the last
 * commit is discarded, and the log says how much. */
static int do_adopt(agent *a, const al_round_action *act, al_err *err) {
    if (!a->have_pulled || a->pulled_round != act->round)
        return al_errf(err, AL_EINVAL, "asked to adopt round %ld's state, which was not pulled",
                       act->round);
    long trained = a->step - a->step0;
    if (trained > 0)
        al_logf(&a->log, AL_LOG_WARN,
                "site %s: discarding %ld inner steps trained in round %ld: the peers' committed "
                "state replaces them",
                a->name[a->self], trained, a->round);
    int rc = al_policy_load(a->pol, a->pulled_policy, err);
    if (rc == 0 && a->sm.F) { /* (checked by ag_pull) */
        rc = ag_stream_load(a, a->pulled_stream, "stream", 1, err);
        a->sm.pend_p = -1; /* θ_local starts from θ_global: nothing to merge */
    }
    if (rc) return al_err_prefix(err, "the state from %s", a->name[a->pulled_from]);
    ag_bg_discard(a, 0); /* overlap: the interval beside the round is void too */
    outer_swap(&a->outer, &a->pulled);
    a->have_pulled = 0;
    a->outer_h_ok = 0;
    long before = a->round;
    a->round = a->pulled_round;
    a->step = a->pulled_step;
    a->h = a->pulled_h;
    if (a->round != before) a->have_cand = 0;
    ag_local_from_global(a);
    if ((rc = ag_hard_commit(a, 0, 0, 0, err))) return rc; /* before anything shows it */
    al_logf(&a->log, AL_LOG_INFO, "site %s: joined at round %ld, step %ld (state from %s)",
            a->name[a->self], a->round, a->step, a->name[a->pulled_from]);
    ag_event(a, "join", a->name[a->self]);
    if ((rc = enter_round(a, err))) return rc;
    if (a->step >= a->cfg->inner_steps) check_finished(a);
    return 0;
}

/* AL_ACT_RELOAD: θ_global again from the copy this site published at its
 * last commit (what peers pull). A copy that is damaged too reports no hash:
 * the machine then pulls from a peer. */
static void do_reload(agent *a) {
    al_round_event ev = {.type = AL_EV_RELOADED, .peer = -1};
    al_err e = {0};
    uint8_t *copy = NULL;
    size_t n = 0;
    pthread_mutex_lock(&a->mu);
    ag_snapshot_seal(a->snap);
    if (a->snap && (copy = malloc(a->snap->outer_len))) {
        n = a->snap->outer_len;
        memcpy(copy, a->snap->outer, n);
    }
    pthread_mutex_unlock(&a->mu);
    int rc = copy ? al_outer_deserialize(&a->pulled, copy, n, &a->outer.cfg, &e)
                  : al_errf(&e, AL_ENOMEM, "no published copy");
    free(copy);
    if (rc == 0) {
        ag_bg_discard(a, 0);
        outer_swap(&a->outer, &a->pulled);
        ag_outer_hash(a, &ev.hash, 1);
        ag_local_from_global(a);
    } else {
        al_logf(&a->log, AL_LOG_WARN,
                "site %s: the published copy of theta_global is damaged too: "
                "%s",
                a->name[a->self], e.msg);
    }
    ag_feed(a, &ev);
}

static void do_send_stats(agent *a, const al_round_action *act) {
    if (act->round != a->mine_round || a->finished) return;
    pthread_mutex_lock(&a->mu);
    if (a->out_round != act->round || a->out_epoch != act->epoch) a->stats_to = a->stats_took = 0;
    a->out_stats = a->mine;
    a->out_round = act->round;
    a->out_epoch = act->epoch;
    if (!(a->stats_took >> act->peer & 1)) a->stats_to |= 1u << act->peer; /* once taken, done */
    a->hb_kick = 1;
    pthread_cond_broadcast(&a->hb_cv);
    pthread_mutex_unlock(&a->mu);
}

static void do_send_status(agent *a, const al_round_action *act) {
    pthread_mutex_lock(&a->mu);
    ag_status_out(&act->st, &a->my_status);
    a->my_status.excluded = ag_liars(a);
    a->hb_kick = 1;
    pthread_cond_broadcast(&a->hb_cv);
    pthread_mutex_unlock(&a->mu);
}

static int execute(agent *a, const al_round_action *act, double *eval, al_err *err) {
    switch (act->type) {
    case AL_ACT_SEND_STATUS:
        do_send_status(a, act);
        return 0;
    case AL_ACT_SEND_STATS:
        do_send_stats(a, act);
        return 0;
    case AL_ACT_TRAIN:
        return do_train(a, err);
    case AL_ACT_EXCHANGE:
        return do_exchange(a, act);
    case AL_ACT_ABORT: /* the exchange runs to its end in this thread: nothing in flight */
        return 0;
    case AL_ACT_PROPOSE:
        return do_propose(a, act, err);
    case AL_ACT_PERSIST_VOTE: {
        int rc = ag_vote_save(a, &act->rec, err);
        if (rc == 0 && act->rec.vote == AL_VOTE_HASH) ag_fault_pause(a, "vote", act->rec.round);
        if (rc == 0 && act->rec.vote == AL_VOTE_HASH && act->rec.round == a->fault_hidevote &&
            act->rec.epoch == 0)
            ag_fault_hide_vote(a, act->rec.round); /* (test hook) */
        return rc;
    }
    case AL_ACT_APPLY:
        return do_apply(a, act, eval, err);
    case AL_ACT_REVERT:
        do_revert(a);
        return 0;
    case AL_ACT_SYNC:
        return do_sync(a, act);
    case AL_ACT_ADOPT:
        return do_adopt(a, act, err);
    case AL_ACT_RELOAD:
        do_reload(a);
        return 0;
    case AL_ACT_DROP: /* agent_hb.c logs it and emits the "down" event */
        return 0;
    case AL_ACT_HOLD: /* the fetched candidate (below) becomes this site's */
        return ag_carry_hold(a, act, err);
    case AL_ACT_FETCH: { /* the carry: a candidate this site lacks, from a voter */
        al_round_event ev;
        ag_carry_fetch(a, act, &ev);
        ag_feed(a, &ev);
        return 0;
    }
    case AL_ACT_LOG:
        al_logf(&a->log, (al_log_level)act->level, "site %s: %s", a->name[a->self], act->text);
        return 0;
    }
    return 0;
}

/* No wait is silent: while the machine stays in one (round, epoch) for longer
 * than peer_timeout_s, say what it waits for (its phase) and what each peer
 * shows, once every peer_timeout_s. Time spent in an action (training an
 * interval, an exchange, which logs its own waits, a pull) does not count. */
static void log_wait(agent *a, double now) {
    al_round_status s;
    al_round_status_get(&a->rm, &s);
    int ph = (int)a->rm.phase;
    int training = ph == AL_PH_TRAIN && !a->finished && a->mine_round != a->round;
    if (s.round != a->wait_round || s.epoch != a->wait_epoch || a->finished != a->wait_fin ||
        a->wait_since == 0 || training || now - a->wait_seen > 1.0) {
        a->wait_round = s.round;
        a->wait_epoch = s.epoch;
        a->wait_fin = a->finished;
        a->wait_since = a->wait_logged = a->wait_seen = now;
        return;
    }
    a->wait_seen = now;
    double T = a->cfg->round_peer_timeout_s;
    if (now - a->wait_logged < T) return;
    a->wait_logged = now;
    static const char *const votes[] = {"no vote", "voted null", "voted a hash"};
    char peers[640] = "";
    size_t o = 0;
    for (int i = 0; i < a->nsites && o < sizeof peers; i++) {
        if (i == a->self) continue;
        const al_round_peer *p = &a->rm.peer[i];
        int w;
        if (!p->have)
            w = snprintf(peers + o, sizeof peers - o, "; %s: no status yet%s", a->name[i],
                         p->alive ? "" : " (not heard)");
        else
            w = snprintf(peers + o, sizeof peers - o,
                         "; %s: %s, round %ld attempt %llu, %s, statistics %s", a->name[i],
                         p->alive ? "up" : "down", p->st.round, (unsigned long long)p->st.epoch,
                         votes[p->st.vote >= 0 && p->st.vote <= 2 ? p->st.vote : 0],
                         p->stats_round == s.round && p->stats_epoch == s.epoch ? "in" : "not in");
        if (w < 0) break;
        o += (size_t)w;
    }
    const char *what = a->finished            ? "done, waiting for the peers to see the last commit"
                       : ph == AL_PH_JOIN     ? "waiting for peers to start"
                       : ph == AL_PH_TRAIN    ? "waiting for the round to start"
                       : ph == AL_PH_STATS    ? "waiting for the peers' statistics"
                       : ph == AL_PH_EXCHANGE ? "waiting for the exchange"
                       : ph == AL_PH_VOTED    ? "voted, waiting for the other votes"
                       : ph == AL_PH_SYNC     ? "waiting to pull the committed state"
                                              : "waiting";
    al_logf(&a->log, AL_LOG_INFO, "round %ld, attempt %llu: %s (%s) for %.0f s%s%s%s", s.round,
            (unsigned long long)s.epoch, what, al_round_phase_name(a->rm.phase),
            now - a->wait_since, a->rm.health[0] ? "; " : "", a->rm.health, peers);
}

/* ---- the loop ------------------------------------------------------------------------- */

int ag_drive(agent *a, double *eval, al_err *err) {
    *eval = NAN;
    a->step0 = a->step - a->iv.steps;
    a->mine_round = -1;
    a->sm.merged_round = a->round - 1; /* (streaming: what committed before this process) */
    int rc = ag_machine_init(a, err);
    if (rc) return rc;
    a->step0 = a->step - a->iv.steps;         /* (--resume may have replayed intervals) */
    if (a->round != a->sm.merged_round + 1) { /* --resume replayed up to the hard state */
        a->sm.merged_round = a->round - 1;
        ag_set_round(a, a->round);
        if ((rc = ag_publish_state(a, err))) return rc;
    }
    /* (an interval trained before a stop, not yet exchanged, is not the end) */
    if (a->step >= a->cfg->inner_steps && !a->bg_trained) check_finished(a);
    for (;;) {
        double now = al_now();
        /* a signal: the round in progress has one heartbeat to commit, in any
         * phase (a wait for a peer that is down or frozen, no quorum, a pull,
         * a linger); then the site stops where it stands (ag_stop_due) */
        int due = ag_stop_due(a);
        if (a->finished && (ag_peers_caught_up(a) || now > a->linger_until || due)) break;
        if (*a->stop && !a->finished) {
            if (!a->stop_told++)
                al_logf(&a->log, AL_LOG_INFO,
                        "site %s: %s: stopping (round %ld, %s); the round in progress has "
                        "heartbeat_s = %g s to commit, then the last committed state is saved",
                        a->name[a->self], ag_sig_name((int)*a->stop), a->round,
                        al_round_phase_name(a->rm.phase), a->cfg->round_heartbeat_s);
            /* nothing to finish: joining, pulling, reloading, or an interval
             * not trained (a stop cuts it: saved as it stands) */
            al_round_phase ph = a->rm.phase;
            if (due || ph == AL_PH_JOIN || ph == AL_PH_SYNC || ph == AL_PH_RELOAD ||
                (ph == AL_PH_TRAIN && a->mine_round != a->round && !a->bg_running))
                break;
        }
        if ((rc = ag_feed_inbox(a, err))) return rc;
        al_round_event tick = {.type = AL_EV_TICK, .peer = -1};
        ag_feed(a, &tick);
        int did = 0;
        al_round_action act;
        while ((rc = ag_next_action(a, &act, err)) > 0) {
            if ((rc = execute(a, &act, eval, err))) return rc;
            did += act.type != AL_ACT_SEND_STATUS && act.type != AL_ACT_SEND_STATS &&
                   act.type != AL_ACT_LOG;
        }
        if (rc < 0) return rc;
        ag_report_health(a);
        log_wait(a, now);
        if (did) continue;
        pthread_mutex_lock(&a->mu);
        al_cond_wait_until(&a->cv, &a->mu, al_now() + 0.05);
        pthread_mutex_unlock(&a->mu);
    }
    /* overlap: an interval still training is finished and kept (a stop) */
    if ((rc = ag_bg_settle(a, err))) return rc;
    /* the bytes since the last commit (statistics and pulls of the last round,
     * the linger), so that the senders' totals equal the receivers' */
    count_bytes(a, 0);
    /* the final state came by a pull: evaluate it as a commit would have */
    if (a->step >= a->cfg->inner_steps && isnan(*eval) && a->val.tok)
        return eval_global(a, eval, err);
    return 0;
}
