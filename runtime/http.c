/* http.c -- the agent's read-only HTTP server on libmicrohttpd (see al_http.h). */
#include "al_http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

struct al_http {
    struct MHD_Daemon *d;
    al_metrics *m;
    int port;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type, char *body,
                             enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(body ? strlen(body) : 0, body ? body : (char *)"", mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE) free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result ok = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    (void)version;
    (void)upload;
    al_http *h = cls;
    /* first call per request: headers only; answer on it (no body expected) */
    if (*con_cls == NULL) {
        static int marker;
        *con_cls = &marker;
        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
            return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain",
                         (char *)"method not allowed: this server is read-only\n",
                         MHD_RESPMEM_PERSISTENT);
        }
    }
    if (*upload_size != 0) { /* a body on a GET: drop it */
        *upload_size = 0;
        return MHD_YES;
    }
    if (!strcmp(url, "/"))
        return reply(c, MHD_HTTP_OK, "text/html; charset=utf-8", (char *)al_dashboard_html,
                     MHD_RESPMEM_PERSISTENT);
    char *body = NULL;
    const char *type = "application/json";
    if (!strcmp(url, "/metrics")) {
        body = al_metrics_prometheus(h->m);
        type = "text/plain; version=0.0.4; charset=utf-8";
    } else if (!strcmp(url, "/api/v1/status")) {
        body = al_metrics_status_json(h->m);
    } else if (!strcmp(url, "/api/v1/rounds")) {
        body = al_metrics_rounds_json(h->m);
    } else {
        return reply(c, MHD_HTTP_NOT_FOUND, "text/plain", (char *)"not found\n",
                     MHD_RESPMEM_PERSISTENT);
    }
    if (!body)
        return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain", (char *)"out of memory\n",
                     MHD_RESPMEM_PERSISTENT);
    return reply(c, MHD_HTTP_OK, type, body, MHD_RESPMEM_MUST_FREE);
}

int al_http_start(al_http **out, const al_http_cfg *cfg, al_metrics *m, al_err *err) {
    *out = NULL;
    const char *addr = cfg->address && cfg->address[0] ? cfg->address : "127.0.0.1";
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        return al_errf(err, AL_ECONFIG, "dashboard address '%s' is not an IPv4 address", addr);
    al_http *h = calloc(1, sizeof *h);
    if (!h) return al_errf(err, AL_ENOMEM, "http: out of memory");
    h->m = m;
    unsigned maxc = (unsigned)(cfg->max_connections > 0 ? cfg->max_connections : 64);
    unsigned tmo = (unsigned)(cfg->timeout_s > 0 ? cfg->timeout_s : 10);
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL,
                            on_request, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_LIMIT, maxc, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            maxc, MHD_OPTION_CONNECTION_TIMEOUT, tmo,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)16384, MHD_OPTION_END);
    if (!h->d) {
        free(h);
        return al_errf(err, AL_EIO, "dashboard: cannot listen on %s:%d (in use or not permitted)",
                       addr, cfg->port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : cfg->port;
    *out = h;
    return 0;
}

int al_http_port(const al_http *h) {
    return h->port;
}

void al_http_stop(al_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->d);
    free(h);
}
