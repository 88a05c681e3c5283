/* agent_round.h -- the driver: the round protocol's Ready loop (agent_round.c;
 * rank 5: it calls every part below it). */
#ifndef AL_AGENT_ROUND_H
#define AL_AGENT_ROUND_H

#include "agent_impl.h"

/* Run rounds until the step budget, a stop signal (*a->stop) or an error;
 * *eval gets the last evaluation (NAN: none). */
int ag_drive(agent *a, double *eval, al_err *err);

#endif
