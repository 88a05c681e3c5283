/* agent_hb.h -- heartbeats and failure detection (agent_hb.c; rank 3: it
 * calls agent_net.c and agent_events.c). */
#ifndef AL_AGENT_HB_H
#define AL_AGENT_HB_H

#include "agent_impl.h"

/* Start the heartbeat thread, after ag_net_start; stop it. */
int ag_hb_start(agent *a, al_err *err);
void ag_hb_stop(agent *a);

#endif
