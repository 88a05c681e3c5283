/*
 * al_http.h -- the agent's read-only HTTP server (libmicrohttpd).
 *
 *   /                the dashboard page (self-contained, polls the API)
 *   /metrics         Prometheus text format
 *   /api/v1/status   JSON: totals, savings, peers
 *   /api/v1/rounds   JSON: every round record and membership event
 *
 * Anything else is 404; methods other than GET/HEAD are 405. The server runs
 * its own thread with non-blocking I/O, a connection limit, a per-connection
 * timeout and a per-connection memory limit (so a huge URL or header is refused
 * with an error status instead of growing memory). It only reads the metrics
 * registry under its lock, so training never waits on a client.
 */
#ifndef AL_HTTP_H
#define AL_HTTP_H

#include "al_metrics.h"

typedef struct al_http al_http;

typedef struct al_http_cfg {
    const char *address;   /* IPv4 literal, default 127.0.0.1 */
    int port;              /* 0: pick a free port (see al_http_port) */
    int max_connections;   /* default 64 */
    int timeout_s;         /* idle connection timeout, default 10 */
    int max_per_client;    /* connections one address may hold, default max_connections / 4 */
    double head_timeout_s; /* a request head must be complete this long after the connection
                            * opened or its last response went out, default 5 */
} al_http_cfg;

int al_http_start(al_http **out, const al_http_cfg *cfg, al_metrics *m, al_err *err);
int al_http_port(const al_http *h);
void al_http_stop(al_http *h);

/* The dashboard page (generated at build time from runtime/dashboard.html). */
extern const char al_dashboard_html[];
extern const unsigned long al_dashboard_html_len;

#endif
