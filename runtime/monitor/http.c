/* http.c -- the agent's read-only HTTP server on libmicrohttpd (see al_monitor.h). */
#include "al_monitor.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* Slow clients. libmicrohttpd's timeout is an idle timeout: a client that
 * sends one header line every few seconds keeps its connection (and with
 * enough of them, every connection slot) for as long as it likes. So the
 * server also gives each request head a deadline: a watchdog thread shuts
 * down a connection whose head is not complete head_s after the connection
 * opened or its previous response was sent.
 *
 * Many slow clients. The deadline alone does not keep the page answering:
 * at the connection limit libmicrohttpd stops accepting, and a browser's
 * connection waits in the kernel's listen queue behind every slow client
 * that reconnected before it (300 of them, 64 slots and a 5 s deadline: the
 * page did not load for the whole attack). So the limit is generous (idle
 * connections cost one epoll entry and a few KB: the one polling thread
 * never waits on a client), and a connection accepted beyond it sheds the
 * oldest one still waiting for its request head: a browser sends its head at
 * once, so it is the newest of the waiting and never the one shed. Slow
 * clients from the browser's own address (127.0.0.1 behind a proxy) are
 * handled alike, which a per-address limit could not do. */
#define HEAD_S    5.0
#define MAX_CONNS 512

typedef struct conn {
    int fd;
    double t0;       /* when the head now awaited began */
    int head_wanted; /* waiting for a request head */
    int gone;        /* shut down here, not yet closed by libmicrohttpd */
} conn;

struct al_http {
    struct MHD_Daemon *d;
    al_metrics *m;
    int port;
    pthread_mutex_t mu; /* guards conns, nconns, stop */
    conn *conns;
    int nconns, ngone, stop;
    int maxc, capc; /* the soft limit on connections not gone; conns' size (MHD's limit) */
    unsigned long head_cut, shed; /* connections closed by the head deadline, shed at the limit */
    double head_s;
    pthread_t watchdog;
    int watching;
};

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

/* Mark the connection on fd: head = 1 waits for a head from now, 0 has one. */
static void conn_mark(al_http *h, int fd, int head) {
    pthread_mutex_lock(&h->mu);
    for (int i = 0; i < h->nconns; i++)
        if (h->conns[i].fd == fd && !h->conns[i].gone) {
            h->conns[i].head_wanted = head;
            h->conns[i].t0 = mono_now();
        }
    pthread_mutex_unlock(&h->mu);
}

/* Shut a connection down (libmicrohttpd sees the end and closes it). Locked. */
static void conn_end(al_http *h, conn *c) {
    shutdown(c->fd, SHUT_RDWR);
    c->head_wanted = 0;
    c->gone = 1;
    h->ngone++;
}

/* Over the soft limit: shut down the connection that has waited longest for
 * its request head, the newest (conns' last) excepted; none if every other
 * connection has a request in progress (libmicrohttpd's own limit, capc,
 * then bounds them). Locked. */
static void shed_oldest(al_http *h) {
    int k = -1;
    for (int i = 0; i < h->nconns - 1; i++)
        if (h->conns[i].head_wanted && (k < 0 || h->conns[i].t0 < h->conns[k].t0)) k = i;
    if (k < 0) return;
    conn_end(h, &h->conns[k]);
    h->shed++;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    (void)socket_context;
    al_http *h = cls;
    int fd = conn_fd(c);
    if (fd < 0) return;
    pthread_mutex_lock(&h->mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED && h->nconns < h->capc) {
        h->conns[h->nconns++] = (conn){fd, mono_now(), 1, 0};
        if (h->nconns - h->ngone > h->maxc) shed_oldest(h);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        for (int i = 0; i < h->nconns; i++)
            if (h->conns[i].fd == fd) {
                h->ngone -= h->conns[i].gone;
                h->conns[i] = h->conns[--h->nconns];
                break;
            }
    }
    pthread_mutex_unlock(&h->mu);
}

/* A response went out: the next request's head is awaited from now. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)con_cls;
    (void)toe;
    int fd = conn_fd(c);
    if (fd >= 0) conn_mark(cls, fd, 1);
}

static void *watchdog_main(void *arg) {
    al_http *h = arg;
    pthread_setname_np(pthread_self(), "al-http-watch");
    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        double now = mono_now();
        for (int i = 0; i < h->nconns; i++)
            if (h->conns[i].head_wanted && now - h->conns[i].t0 > h->head_s) {
                conn_end(h, &h->conns[i]);
                h->head_cut++;
            }
        pthread_mutex_unlock(&h->mu);
        struct timespec nap = {0, 200 * 1000 * 1000};
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

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
        int fd = conn_fd(c);
        if (fd >= 0) conn_mark(h, fd, 0); /* the head is complete */
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
    unsigned maxc = (unsigned)(cfg->max_connections > 0 ? cfg->max_connections : MAX_CONNS);
    /* libmicrohttpd's own limit leaves room above the soft one for the
     * connections shed but not yet closed by its thread */
    unsigned capc = maxc + maxc / 4 + 16;
    unsigned tmo = (unsigned)(cfg->timeout_s > 0 ? cfg->timeout_s : 10);
    /* no separate per-address limit by default: behind a proxy every client
     * has one address, and libmicrohttpd's per-address count lagged the
     * connections it had closed (the Chromium test was refused at 32 with two
     * connections open); the head deadline is what frees slow clients' slots */
    unsigned per_ip = cfg->max_per_client > 0 ? (unsigned)cfg->max_per_client : capc;
    h->maxc = (int)maxc;
    h->capc = (int)capc;
    h->head_s = cfg->head_timeout_s > 0 ? cfg->head_timeout_s : HEAD_S;
    h->conns = calloc(capc, sizeof *h->conns);
    pthread_mutex_init(&h->mu, NULL);
    if (!h->conns || pthread_create(&h->watchdog, NULL, watchdog_main, h) != 0) {
        pthread_mutex_destroy(&h->mu);
        free(h->conns);
        free(h);
        return al_errf(err, AL_ENOMEM, "http: cannot start the connection watchdog");
    }
    h->watching = 1;
    h->d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL, on_request, h,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT, capc,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_CONNECTION_TIMEOUT, tmo,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)16384, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, h, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
    if (!h->d) {
        al_http_stop(h);
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

void al_http_counts(al_http *h, al_http_count *c) {
    pthread_mutex_lock(&h->mu);
    c->open = h->nconns - h->ngone;
    c->head_cut = h->head_cut;
    c->shed = h->shed;
    pthread_mutex_unlock(&h->mu);
}

void al_http_stop(al_http *h) {
    if (!h) return;
    if (h->d) MHD_stop_daemon(h->d);
    if (h->watching) {
        pthread_mutex_lock(&h->mu);
        h->stop = 1;
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->watchdog, NULL);
    }
    pthread_mutex_destroy(&h->mu);
    free(h->conns);
    free(h);
}
