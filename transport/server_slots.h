/*
 * server_slots.h -- a listed peer's call slots on the server (server.c).
 *
 * A listed peer holds at most per_peer_calls calls at a time, each holding a
 * server thread to its end. When its slots are full, a new call of the peer
 * takes the slot of its call that has been silent longest, if that one is
 * idle: it has received nothing yet, or nothing has arrived or left on it for
 * evict_idle_s. That call is cancelled RESOURCE_EXHAUSTED and the new one goes
 * on. Only when every call of the peer is busy is the new one refused.
 *
 * Why evict rather than refuse (issue 32): the slots are the peer's, and the
 * newest call of a peer is the one its client waits on. Calls of a client
 * that restarted, froze or lost its connection stay open until their
 * deadline, and whoever holds the peer's certificate can open idle streams
 * and reopen each as soon as it ends: refused, the peer's own pushes and
 * heartbeats stayed out (and a and b disagreed on the members, attempt after
 * attempt). A live call sends at once and keeps sending, so it is never the
 * idle one; a shorter idle timeout alone does not help (the streams are
 * reopened at once), nor does a client retry alone (it loses every race to
 * a client that reopens at once). A call evicted by mistake (a first chunk
 * still arriving) ends with a status its client retries (al_client).
 */
#ifndef AL_SERVER_SLOTS_H
#define AL_SERVER_SLOTS_H

#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* One call's claim on a slot; part of the server's call state. */
typedef struct slot_call {
    grpc_call *call;
    _Atomic int64_t last_ms; /* when a message last arrived or left (al_now, ms) */
    atomic_int msgs;         /* messages that arrived */
    atomic_int evicted;      /* another call of the peer took its slot */
    int held;                /* it holds a slot (under the table's mu) */
} slot_call;

/* One peer's slots. */
typedef struct slot_table {
    pthread_mutex_t mu;
    slot_call **calls;
    int n, cap;
    double logged; /* when an eviction was last logged (al_now), and those since */
    int quiet;
} slot_table;

/* What slots_take did to make room. */
typedef struct slot_eviction {
    int nothing_received; /* the evicted call had received no message */
    double idle_s;        /* for how long it had been silent */
    int log;              /* a line is due (at most one a second per peer) */
    int quiet;            /* evictions not logged since the last line */
} slot_eviction;

int slots_init(slot_table *t, int cap);
void slots_free(slot_table *t);
/* Activity on call c: a message arrived (msg = 1) or left (0). */
void slot_activity(slot_call *c, int msg);
/* Take a slot for c: 0 taken, 1 taken from an idle call (cancelled with
 * RESOURCE_EXHAUSTED and `why`; *ev says what it was), -1 every call busy. */
int slots_take(slot_table *t, slot_call *c, double evict_idle_s, const char *why,
               slot_eviction *ev);
/* Give c's slot back, if it still holds one (an evicted call does not). */
void slots_release(slot_table *t, slot_call *c);

#endif
