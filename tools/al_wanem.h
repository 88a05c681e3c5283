/*
 * al_wanem.h -- a WAN emulator: a TCP proxy to put between two sites on
 * loopback. Bytes pass through untouched (TLS included); the proxy only
 * delays them, limits their rate, and cuts connections on schedule.
 *
 *   rate      one link per direction, shared by all connections: bytes
 *             cross it one after another at the rate, and an idle link
 *             banks nothing (no burst after a pause)
 *   latency   each read is released delay +- jitter later (order is kept:
 *             TCP cannot reorder, so jitter only ever adds to the delay)
 *   faults    cut every connection (RST) at cut_at_s after start, or once
 *             cut_after_bytes have gone client -> server, or on al_wanem_cut;
 *             after a cut, refuse (accept then reset) new connections for
 *             refuse_s seconds; al_wanem_hold cuts and refuses until released
 *
 * One thread runs a poll loop over every connection; per direction at most
 * 4 MiB is buffered (the reader pauses beyond that), so memory is bounded.
 */
#ifndef AL_WANEM_H
#define AL_WANEM_H

#include <stdint.h>

#include "al_base.h"

typedef struct al_wanem_cfg {
    const char *listen; /* "127.0.0.1:0" picks a port (al_wanem_port) */
    const char *target; /* "127.0.0.1:port" of the real server */
    double rate_mbit;   /* per direction; 0: unlimited */
    double delay_ms, jitter_ms;
    double cut_at_s;          /* > 0: cut all connections then */
    uint64_t cut_after_bytes; /* > 0: cut once this many bytes went client -> server */
    double refuse_s;          /* after a cut, refuse connections this long */
    uint64_t seed;
    const al_log *log;
} al_wanem_cfg;

typedef struct al_wanem al_wanem;

typedef struct al_wanem_stats {
    uint64_t up, down; /* bytes forwarded client -> server, server -> client */
    int connections, cuts, refused;
} al_wanem_stats;

int al_wanem_start(const al_wanem_cfg *cfg, al_wanem **out, al_err *err);
int al_wanem_port(const al_wanem *w);
/* Cut every connection now and refuse new ones for refuse_s seconds. */
void al_wanem_cut(al_wanem *w, double refuse_s);
/* on: cut every connection now and refuse new ones until al_wanem_hold(w, 0);
 * off: accept again (a refuse_s window still running is kept). Any thread. */
void al_wanem_hold(al_wanem *w, int on);
void al_wanem_stats_get(al_wanem *w, al_wanem_stats *st);
void al_wanem_stop(al_wanem *w);

#endif
