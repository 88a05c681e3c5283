/* agent_members.h -- the sites this site hears, for one membership per attempt
 * (agent_members.c; rank 0: it calls no other part). */
#ifndef AL_AGENT_MEMBERS_H
#define AL_AGENT_MEMBERS_H

#include "agent_impl.h"

/* The sites whose own calls (a ping, statistics, a shard, a pull: not an
 * answer to a call of this site's) reached this site within [round]
 * peer_timeout_s, this site included (bit i): what its statuses publish as
 * `hears`, fed to the machine as AL_EV_HEARS. Takes a->mu. */
uint32_t ag_hears(agent *a);

#endif
