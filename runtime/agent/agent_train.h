/* agent_train.h -- the interval's training, inline or on its own thread
 * (agent_train.c; rank 2: it calls agent_hash.c and agent_stream.c). */
#ifndef AL_AGENT_TRAIN_H
#define AL_AGENT_TRAIN_H

#include "agent_impl.h"

/* The workers' data source (W > 1), for al_odc_init. */
int ag_src_next(void *ctx, long step, const al_piece **pieces, int *n, al_err *err);
/* Train interval `round` until iv has h steps (or the budget ends), advancing
 * *step; the AL_FAULT hooks of that round fire halfway through. */
int ag_interval_run(agent *a, long round, long h, ag_interval *iv, long *step, al_err *err);
/* (streaming) Train round `round`'s span (the thread's or inline), merging the
 * pending fragment on the way. */
int ag_span_run(agent *a, long round, ag_interval *iv, long *step, al_err *err);
/* θ_local := θ_global and the trainer's step counters follow a->step. */
void ag_local_from_global(agent *a);
/* Start training interval `round` with H h on its own thread, from θ_local
 * (copied into a->from) and a->step. */
int ag_bg_start(agent *a, long round, long h, al_err *err);
/* End the thread (after its last interval is joined or discarded). */
void ag_bg_quit(agent *a);
/* Wait for it: a->iv, a->iv_h and a->step take its results; its error if any. */
int ag_bg_join(agent *a, al_err *err);
/* Stop it after its current step and drop what it trained. keep_start: θ_local
 * goes back to where it started and stays pending (a stop, the end); else
 * nothing is pending (the caller resets θ_local). */
void ag_bg_discard(agent *a, int keep_start);
/* At the end of the run (a stop): an interval of the round to come that is
 * training runs to its end and is kept (bg_trained), so the checkpoint holds
 * it; one of another round is discarded back to its start. If the stop came
 * before this round committed (the next interval's start is an eager guess
 * from its Δ), the round's own interval is kept instead, trained and not yet
 * merged: a resumed run exchanges it again. */
int ag_bg_settle(agent *a, al_err *err);
/* Is the thread's interval over (it may still need joining), or (streaming) parked until a
 * commit lets it merge? *t_end: since when. */
int ag_bg_finished(agent *a, double *t_end);
/* AL_FAULT=corrupt:R: flip a bit of θ_global and of its published copy. */
void ag_corrupt(agent *a);
/* AL_FAULT=corrupt:R:exchange: flip a bit of θ_global only, in a hash chunk
 * outside round a->round's fragment where there is one (streaming). */
void ag_corrupt_outside(agent *a);

#endif
