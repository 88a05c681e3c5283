/* server_slots.c -- a listed peer's call slots on the server (server_slots.h). */
#include "server_slots.h"

#include <stdlib.h>

#include "al_base.h"

static int64_t now_ms(void) {
    return (int64_t)(al_now() * 1e3);
}

int slots_init(slot_table *t, int cap) {
    *t = (slot_table){.cap = cap};
    t->calls = calloc((size_t)(cap > 0 ? cap : 1), sizeof *t->calls);
    if (!t->calls) return -1;
    pthread_mutex_init(&t->mu, NULL);
    return 0;
}

void slots_free(slot_table *t) {
    if (!t->calls) return;
    pthread_mutex_destroy(&t->mu);
    free(t->calls);
    t->calls = NULL;
}

void slot_activity(slot_call *c, int msg) {
    if (msg) atomic_fetch_add(&c->msgs, 1);
    atomic_store(&c->last_ms, now_ms());
}

int slots_take(slot_table *t, slot_call *c, double evict_idle_s, const char *why,
               slot_eviction *ev) {
    int64_t now = now_ms(), idle_ms = (int64_t)(evict_idle_s * 1e3);
    atomic_store(&c->last_ms, now);
    pthread_mutex_lock(&t->mu);
    int rc = 0;
    if (t->n < t->cap) {
        t->calls[t->n++] = c;
    } else {
        int v = -1;
        int64_t oldest = INT64_MAX;
        for (int i = 0; i < t->n; i++) {
            int64_t last = atomic_load(&t->calls[i]->last_ms);
            int idle = atomic_load(&t->calls[i]->msgs) == 0 || now - last >= idle_ms;
            if (idle && last < oldest) {
                oldest = last;
                v = i;
            }
        }
        if (v < 0) {
            rc = -1;
        } else {
            slot_call *old = t->calls[v];
            t->calls[v] = c;
            old->held = 0;
            atomic_store(&old->evicted, 1);
            /* (thread-safe; the call is alive: its thread gives its slot
             * back, under mu, before the call is released) */
            grpc_call_cancel_with_status(old->call, GRPC_STATUS_RESOURCE_EXHAUSTED, why, NULL);
            double t_now = al_now();
            *ev = (slot_eviction){.nothing_received = atomic_load(&old->msgs) == 0,
                                  .idle_s = (double)(now - oldest) / 1e3,
                                  .log = t_now - t->logged >= 1.0,
                                  .quiet = t->quiet};
            if (ev->log) {
                t->logged = t_now;
                t->quiet = 0;
            } else {
                t->quiet++;
            }
            rc = 1;
        }
    }
    if (rc >= 0) c->held = 1;
    pthread_mutex_unlock(&t->mu);
    return rc;
}

void slots_release(slot_table *t, slot_call *c) {
    pthread_mutex_lock(&t->mu); /* (held is written under it: an eviction clears it) */
    if (c->held)
        for (int i = 0; i < t->n; i++)
            if (t->calls[i] == c) {
                t->calls[i] = t->calls[--t->n];
                break;
            }
    c->held = 0;
    pthread_mutex_unlock(&t->mu);
}
