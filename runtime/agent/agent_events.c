/* agent_events.c -- the event log (<checkpoint dir>/events.jsonl, or [log]
 * events): round records and membership events, whole lines from any thread
 * (a->ev_mu). The bottom of the agent: it calls no other part of it (see
 * agent_impl.h). */
#include "agent_events.h"

#include <stdlib.h>

void ag_event_line(agent *a, const char *line) {
    if (!a->events || !line) return;
    pthread_mutex_lock(&a->ev_mu);
    fprintf(a->events, "%s\n", line);
    fflush(a->events);
    pthread_mutex_unlock(&a->ev_mu);
}

void ag_event_at(agent *a, const char *kind, const char *site, long round, long step) {
    char *line = al_metrics_event(&a->met, kind, site, round, step);
    ag_event_line(a, line);
    free(line);
}

void ag_theta_seen(agent *a, int site, long round, const uint8_t hash[32], int definitive) {
    char *line = al_metrics_theta_seen(&a->met, round, site, hash, definitive);
    ag_event_line(a, line);
    free(line);
}

void ag_event(agent *a, const char *kind, const char *site) {
    ag_event_at(a, kind, site, a->round, a->step);
}
