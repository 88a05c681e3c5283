/* wanem.c -- the WAN emulator's proxy loop (see al_wanem.h). */
#include "al_wanem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CONNS   64
#define READ_BYTES  (64 << 10)
#define QUEUE_BYTES (4 << 20)

typedef struct piece {
    struct piece *next;
    double release; /* when it may leave */
    size_t len, off;
    uint8_t data[];
} piece;

typedef struct dir_q { /* one direction of one connection */
    piece *head, *tail;
    size_t bytes;
    int eof;  /* the source closed its side */
    int shut; /* we passed the close on */
    double last_release;
} dir_q;

typedef struct conn {
    int fd[2];  /* 0: the client side, 1: the server side; -1 when free */
    dir_q q[2]; /* q[0]: client -> server */
} conn;

/* One direction of the emulated link, shared by every connection: a byte
 * crosses it in 1/rate seconds, one after another. `t_free` is when the link
 * has finished the bytes written so far; a chunk due at `release` (read time
 * + delay) starts at max(release, t_free) and is written when its last byte
 * would have crossed. An idle link banks nothing: the time before a chunk
 * was due is not spent on it (a token bucket with a burst did bank it, and
 * sent the first 16 KiB after every pause at once, twice the rate for short
 * exchanges). */
typedef struct wan_link {
    double rate;    /* bytes/s; 0: no limit */
    double quantum; /* the bytes one write waits for (less when less is queued) */
    double t_free;
} wan_link;

struct al_wanem {
    al_wanem_cfg cfg;
    char listen[128], target[128];
    int lfd, port, wake[2];
    pthread_t th;
    atomic_int stop;
    atomic_int cut_req; /* a cut asked from another thread */
    atomic_int hold;    /* al_wanem_hold: refuse every new connection */
    double cut_req_refuse;
    conn conns[MAX_CONNS];
    wan_link bk[2];
    al_rng rng;
    double t0, refuse_until;
    int cut_bytes_done, cut_time_done;
    pthread_mutex_t mu; /* guards st */
    al_wanem_stats st;
};

static int parse_addr(const char *s, struct sockaddr_in *a) {
    char host[128];
    const char *colon = strrchr(s, ':');
    if (!colon || (size_t)(colon - s) >= sizeof host) return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)atoi(colon + 1));
    return inet_pton(AF_INET, host, &a->sin_addr) == 1 ? 0 : -1;
}

static void set_nonblock(int fd) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Close with RST, like a middlebox dropping the flow. */
static void reset_close(int fd) {
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

static void free_queue(dir_q *q) {
    while (q->head) {
        piece *p = q->head;
        q->head = p->next;
        free(p);
    }
    memset(q, 0, sizeof *q);
}

static void drop_conn(conn *c, int rst) {
    for (int k = 0; k < 2; k++) {
        if (c->fd[k] >= 0) rst ? reset_close(c->fd[k]) : (void)close(c->fd[k]);
        c->fd[k] = -1;
        free_queue(&c->q[k]);
    }
}

static void cut_all(al_wanem *w, double refuse_s, const char *why) {
    int n = 0;
    for (int i = 0; i < MAX_CONNS; i++)
        if (w->conns[i].fd[0] >= 0) {
            drop_conn(&w->conns[i], 1);
            n++;
        }
    w->refuse_until = al_now() + refuse_s;
    pthread_mutex_lock(&w->mu);
    w->st.cuts++;
    pthread_mutex_unlock(&w->mu);
    if (w->cfg.log && atomic_load(&w->hold))
        al_logf(w->cfg.log, AL_LOG_WARN,
                "wanem: cut %d connection(s) (%s), refusing until released", n, why);
    else if (w->cfg.log)
        al_logf(w->cfg.log, AL_LOG_WARN, "wanem: cut %d connection(s) (%s), refusing for %.2f s", n,
                why, refuse_s);
}

static void accept_one(al_wanem *w) {
    int fd = accept(w->lfd, NULL, NULL);
    if (fd < 0) return;
    if (atomic_load(&w->hold) || al_now() < w->refuse_until) {
        reset_close(fd);
        pthread_mutex_lock(&w->mu);
        w->st.refused++;
        pthread_mutex_unlock(&w->mu);
        return;
    }
    conn *c = NULL;
    for (int i = 0; i < MAX_CONNS && !c; i++)
        if (w->conns[i].fd[0] < 0) c = &w->conns[i];
    struct sockaddr_in a;
    int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (!c || up < 0 || parse_addr(w->target, &a) || connect(up, (struct sockaddr *)&a, sizeof a)) {
        if (up >= 0) close(up);
        reset_close(fd);
        return;
    }
    set_nonblock(fd);
    set_nonblock(up);
    memset(c, 0, sizeof *c);
    c->fd[0] = fd;
    c->fd[1] = up;
    pthread_mutex_lock(&w->mu);
    w->st.connections++;
    pthread_mutex_unlock(&w->mu);
}

/* The bytes of the piece's next write: a quantum, or the piece's rest. */
static size_t link_chunk(const wan_link *l, const piece *p) {
    return (size_t)AL_MIN((double)(p->len - p->off), l->quantum);
}

/* When that write is due: its last byte has crossed the link. */
static double link_due(const wan_link *l, const piece *p) {
    if (l->rate <= 0) return p->release;
    return AL_MAX(p->release, l->t_free) + (double)link_chunk(l, p) / l->rate;
}

/* Read from side k into queue k (towards side 1-k). */
static int pump_in(al_wanem *w, conn *c, int k, double now) {
    dir_q *q = &c->q[k];
    piece *p = malloc(sizeof *p + READ_BYTES);
    if (!p) return -1;
    ssize_t n = read(c->fd[k], p->data, READ_BYTES);
    if (n <= 0) {
        free(p);
        if (n == 0) q->eof = 1;
        return n == 0 || errno == EAGAIN || errno == EINTR ? 0 : -1;
    }
    double jitter = w->cfg.jitter_ms * (2.0 * al_rng_uniform(&w->rng) - 1.0);
    double rel = now + (w->cfg.delay_ms + jitter) / 1e3;
    p->release = q->last_release = AL_MAX(rel, q->last_release); /* TCP keeps order */
    p->len = (size_t)n;
    p->off = 0;
    p->next = NULL;
    if (q->tail)
        q->tail->next = p;
    else
        q->head = p;
    q->tail = p;
    q->bytes += (size_t)n;
    return 0;
}

/* Write what is due from queue k to side 1-k; returns -1 on a broken side. */
static int pump_out(al_wanem *w, conn *c, int k, double now) {
    dir_q *q = &c->q[k];
    wan_link *l = &w->bk[k];
    while (q->head && link_due(l, q->head) <= now) {
        piece *p = q->head;
        size_t want = l->rate > 0 ? link_chunk(l, p) : p->len - p->off;
        double start = AL_MAX(p->release, l->t_free);
        /* send, not write: a side the far end closed answers EPIPE, and write would
         * raise SIGPIPE and kill the whole proxy (every later connection of that
         * link refused: a chaos soak's cut that never healed) */
        ssize_t n = send(c->fd[1 - k], p->data + p->off, want, MSG_NOSIGNAL);
        if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
        if (l->rate > 0) l->t_free = start + (double)n / l->rate;
        p->off += (size_t)n;
        q->bytes -= (size_t)n;
        pthread_mutex_lock(&w->mu);
        if (k == 0)
            w->st.up += (uint64_t)n;
        else
            w->st.down += (uint64_t)n;
        uint64_t up = w->st.up;
        pthread_mutex_unlock(&w->mu);
        if (p->off == p->len) {
            q->head = p->next;
            if (!q->head) q->tail = NULL;
            free(p);
        }
        if (k == 0 && w->cfg.cut_after_bytes && !w->cut_bytes_done &&
            up >= w->cfg.cut_after_bytes) {
            w->cut_bytes_done = 1;
            return 1; /* the caller cuts everything */
        }
        if ((size_t)n < want) return 0;
    }
    if (!q->head && q->eof && !q->shut) {
        shutdown(c->fd[1 - k], SHUT_WR); /* pass the half-close on */
        q->shut = 1;
    }
    return 0;
}

static void *loop(void *arg) {
    al_wanem *w = arg;
    pthread_setname_np(pthread_self(), "al-wanem");
    struct pollfd pf[2 + 2 * MAX_CONNS];
    while (!atomic_load(&w->stop)) {
        double now = al_now();
        if (atomic_exchange(&w->cut_req, 0)) cut_all(w, w->cut_req_refuse, "asked");
        if (w->cfg.cut_at_s > 0 && !w->cut_time_done && now - w->t0 >= w->cfg.cut_at_s) {
            w->cut_time_done = 1;
            cut_all(w, w->cfg.refuse_s, "scheduled");
        }
        int np = 0, timeout = 50;
        pf[np++] = (struct pollfd){.fd = w->lfd, .events = POLLIN};
        pf[np++] = (struct pollfd){.fd = w->wake[0], .events = POLLIN};
        int idx[MAX_CONNS];
        for (int i = 0; i < MAX_CONNS; i++) {
            conn *c = &w->conns[i];
            idx[i] = -1;
            if (c->fd[0] < 0) continue;
            idx[i] = np;
            for (int k = 0; k < 2; k++) {
                short ev = 0;
                if (!c->q[k].eof && c->q[k].bytes < QUEUE_BYTES) ev |= POLLIN;
                if (c->q[1 - k].head) {
                    double wait = link_due(&w->bk[1 - k], c->q[1 - k].head) - now;
                    if (wait <= 0)
                        ev |= POLLOUT;
                    else
                        timeout = AL_MIN(timeout, (int)(wait * 1e3) + 1);
                }
                pf[np++] = (struct pollfd){.fd = c->fd[k], .events = ev};
            }
        }
        if (poll(pf, (nfds_t)np, timeout) < 0 && errno != EINTR) break;
        now = al_now();
        if (pf[1].revents & POLLIN) {
            char buf[64];
            if (read(w->wake[0], buf, sizeof buf) < 0) {
            }
        }
        if (pf[0].revents & POLLIN) accept_one(w);
        int cut = 0;
        for (int i = 0; i < MAX_CONNS && !cut; i++) {
            conn *c = &w->conns[i];
            if (c->fd[0] < 0 || idx[i] < 0) continue;
            int bad = 0;
            for (int k = 0; k < 2 && !bad; k++) {
                short re = pf[idx[i] + k].revents;
                if (re & (POLLIN | POLLHUP | POLLERR)) bad |= pump_in(w, c, k, now) < 0;
            }
            for (int k = 0; k < 2 && !bad && !cut; k++) {
                int r = pump_out(w, c, k, now);
                bad |= r < 0;
                cut |= r > 0;
            }
            if (!cut && (bad || (c->q[0].shut && c->q[1].shut))) drop_conn(c, bad);
        }
        if (cut) cut_all(w, w->cfg.refuse_s, "byte count reached");
    }
    for (int i = 0; i < MAX_CONNS; i++)
        if (w->conns[i].fd[0] >= 0) drop_conn(&w->conns[i], 1);
    return NULL;
}

int al_wanem_start(const al_wanem_cfg *cfg, al_wanem **out, al_err *err) {
    *out = NULL;
    struct sockaddr_in a;
    const char *where = cfg->listen ? cfg->listen : "127.0.0.1:0";
    if (!cfg->target || parse_addr(cfg->target, &a))
        return al_errf(err, AL_ECONFIG, "wanem: target '%s' is not IPv4 host:port",
                       cfg->target ? cfg->target : "");
    if (parse_addr(where, &a))
        return al_errf(err, AL_ECONFIG, "wanem: listen '%s' is not IPv4 host:port", where);
    if (cfg->rate_mbit < 0 || cfg->delay_ms < 0 || cfg->jitter_ms < 0 ||
        cfg->jitter_ms > cfg->delay_ms)
        return al_errf(err, AL_ECONFIG, "wanem: rate, delay must be >= 0 and jitter <= delay");
    al_wanem *w = calloc(1, sizeof *w);
    if (!w) return al_errf(err, AL_ENOMEM, "wanem: out of memory");
    w->cfg = *cfg;
    snprintf(w->target, sizeof w->target, "%s", cfg->target);
    w->cfg.target = w->target;
    for (int i = 0; i < MAX_CONNS; i++) w->conns[i].fd[0] = w->conns[i].fd[1] = -1;
    al_rng_seed(&w->rng, cfg->seed + 1);
    w->t0 = al_now();
    for (int k = 0; k < 2; k++) {
        w->bk[k].rate = cfg->rate_mbit * 1e6 / 8.0;
        /* Writes wait for 2 ms worth of bytes, at least 4 KiB (~3 segments),
         * not for one byte: at 3 Mbit/s a byte-wise pace wrote ~375 bytes
         * every millisecond and woke the receiving site's TLS stack as often,
         * CPU a real link does not take from the sites (a NIC coalesces),
         * and lost rate to the timer's slack. The rate now holds; the bytes
         * arrive in ~10 ms lumps (a smaller message at once when it has
         * crossed). */
        w->bk[k].quantum = AL_MAX(4096.0, w->bk[k].rate * 0.002);
        w->bk[k].t_free = w->t0;
    }
    pthread_mutex_init(&w->mu, NULL);
    w->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(w->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t al = sizeof a;
    if (w->lfd < 0 || bind(w->lfd, (struct sockaddr *)&a, sizeof a) || listen(w->lfd, 64) ||
        getsockname(w->lfd, (struct sockaddr *)&a, &al) || pipe(w->wake)) {
        int e = errno;
        if (w->lfd >= 0) close(w->lfd);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return al_errf(err, AL_EIO, "wanem: cannot listen on %s: %s", where, strerror(e));
    }
    set_nonblock(w->lfd);
    w->port = ntohs(a.sin_port);
    if (pthread_create(&w->th, NULL, loop, w)) {
        close(w->lfd);
        close(w->wake[0]);
        close(w->wake[1]);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return al_errf(err, AL_EIO, "wanem: cannot start its thread");
    }
    *out = w;
    return 0;
}

int al_wanem_port(const al_wanem *w) {
    return w->port;
}

void al_wanem_cut(al_wanem *w, double refuse_s) {
    w->cut_req_refuse = refuse_s;
    atomic_store(&w->cut_req, 1);
    if (write(w->wake[1], "c", 1) < 0) {
    }
}

void al_wanem_hold(al_wanem *w, int on) {
    atomic_store(&w->hold, on != 0); /* before the cut: nothing gets in between */
    if (on)
        al_wanem_cut(w, 0);
    else if (w->cfg.log)
        al_logf(w->cfg.log, AL_LOG_WARN, "wanem: accepting connections again");
}

void al_wanem_stats_get(al_wanem *w, al_wanem_stats *st) {
    pthread_mutex_lock(&w->mu);
    *st = w->st;
    pthread_mutex_unlock(&w->mu);
}

void al_wanem_stop(al_wanem *w) {
    if (!w) return;
    atomic_store(&w->stop, 1);
    if (write(w->wake[1], "s", 1) < 0) {
    }
    pthread_join(w->th, NULL);
    close(w->lfd);
    close(w->wake[0]);
    close(w->wake[1]);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
