/* agent_events.h -- the event log and membership events (agent_events.c;
 * rank 0: it calls no other part). */
#ifndef AL_AGENT_EVENTS_H
#define AL_AGENT_EVENTS_H

#include "agent_impl.h"

/* A membership event ("drop", "join", "rejoin", "down", "up", "no-quorum",
 * "quorum") about `site`: into the metrics (dashboard, /metrics,
 * /api/v1/status) and the event log. */
void ag_event(agent *a, const char *kind, const char *site);
/* The same from another thread (the heartbeats'), at a round and step it read under mu. */
void ag_event_at(agent *a, const char *kind, const char *site, long round, long step);
/* A round record or other line into the event log (one call: whole lines). */
void ag_event_line(agent *a, const char *line);
/* A peer's status showed θ_global after `round` (definitive: the base it
 * started the next round from; else its vote there): the round's agreement
 * on the dashboard, and an "agree" line in the event log when it changed. */
void ag_theta_seen(agent *a, int site, long round, const uint8_t hash[32], int definitive);

#endif
