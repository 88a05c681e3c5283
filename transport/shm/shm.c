/* shm.c -- POSIX shared-memory transport for W worker processes (see al_shm.h). */
#include "al_shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC 0x6175746f6c6f636fULL /* "autoloco" */
#define CTL_BYTES 65536                 /* the control block's share of the segment */

/* The control block, at the start of the segment. Everything here is shared by
 * all W workers and the parent.
 *
 * Synchronisation is lock-free on purpose: the barrier is an arrival counter
 * and a generation word that waiters sleep on with raw futex calls (wake-ups
 * are only hints; every sleep is bounded). A process can die at any
 * instruction without leaving a lock held or a waiter registered somewhere.
 * (A process-shared pthread condvar is not like that: glibc's broadcast waits
 * for every registered waiter to leave, and a waiter killed inside
 * pthread_cond_timedwait never does -- the first version hung exactly so.) */
struct al_shm_ctl {
    uint64_t magic;
    int W;
    atomic_uint count;                    /* workers inside the current barrier generation */
    atomic_uint gen;                      /* barrier generation; bumps when the last one arrives */
    unsigned arrived[AL_SHM_MAX_WORKERS]; /* last generation each worker entered */
    atomic_int claim; /* 0 until someone takes the right to write the abort reason */
    atomic_int abort; /* nonzero once the run is failing */
    int abort_code, abort_worker;
    char abort_msg[480];
    pid_t pid[AL_SHM_MAX_WORKERS];
    double scalars[AL_SHM_MAX_WORKERS][AL_SHM_NSCALARS];
    /* the pool (al_shm_pool_start): the parent bumps `job` to start a run (or,
     * with `quit` set, to end the workers); each worker adds 1 to `done` when
     * its body returned 0. Not touched by ctl_reset. */
    atomic_uint job;
    atomic_uint done;
    atomic_int quit;
    int64_t jobw[AL_SHM_NJOB];
};
_Static_assert(sizeof(struct al_shm_ctl) <= CTL_BYTES, "control block too big");

static void futex_wake_all(atomic_uint *addr) {
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Sleep while *addr == val, at most `secs` (spurious returns are fine; FUTEX_WAIT's
 * relative timeout counts on the monotonic clock). */
static void futex_wait(atomic_uint *addr, unsigned val, double secs) {
    struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void ctl_reset(al_shm_ctl *c, int W) {
    c->magic = SHM_MAGIC;
    c->W = W;
    atomic_store(&c->count, 0);
    atomic_store(&c->gen, 0);
    for (int w = 0; w < AL_SHM_MAX_WORKERS; w++) c->arrived[w] = ~0u;
    atomic_store(&c->claim, 0);
    atomic_store(&c->abort, 0);
    c->abort_code = 0;
    c->abort_worker = -1;
    c->abort_msg[0] = '\0';
    memset(c->pid, 0, sizeof c->pid);
    memset(c->scalars, 0, sizeof c->scalars);
}

/* ---- segment ------------------------------------------------------------------- */

static void clean_site(char *out, size_t n, const char *site) {
    size_t j = 0;
    for (const char *p = site ? site : "local"; *p && j + 1 < n; p++)
        out[j++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                                  (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'
                              ? *p
                              : '_');
    out[j] = '\0';
}

int al_shm_clean_stale(const char *site, int *removed, al_err *err) {
    if (removed) *removed = 0;
    char want[80] = "";
    if (site) {
        char cs[64];
        clean_site(cs, sizeof cs, site);
        snprintf(want, sizeof want, "%s%s.", AL_SHM_PREFIX, cs);
    } else {
        snprintf(want, sizeof want, "%s", AL_SHM_PREFIX);
    }
    DIR *d = opendir("/dev/shm");
    if (!d) return al_errf(err, AL_EIO, "/dev/shm: %s", strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, want, strlen(want)) != 0) continue;
        /* autoloco.SITE.PID.RUN: the pid is the second-to-last field */
        char *last = strrchr(e->d_name, '.');
        if (!last || last == e->d_name) continue;
        char *p = last - 1;
        while (p > e->d_name && *p != '.') p--;
        long pid = strtol(p + 1, NULL, 10);
        if (pid <= 0 || (kill((pid_t)pid, 0) == 0 || errno != ESRCH)) continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        if (shm_unlink(name) == 0 && removed) (*removed)++;
    }
    closedir(d);
    return 0;
}

int al_shm_create(al_shm *s, const al_shm_opts *o, al_err *err) {
    memset(s, 0, sizeof *s);
    s->me = -1;
    if (o->workers < 1 || o->workers > AL_SHM_MAX_WORKERS)
        return al_errf(err, AL_EINVAL, "shm: %d workers (1..%d)", o->workers, AL_SHM_MAX_WORKERS);
    int rc = al_shm_clean_stale(o->site ? o->site : "local", NULL, err);
    if (rc) return rc;
    char cs[64];
    clean_site(cs, sizeof cs, o->site);
    uint64_t run = (uint64_t)(al_now() * 1e9) ^ ((uint64_t)getpid() << 40);
    snprintf(s->name, sizeof s->name, "/%s%s.%d.%llx", AL_SHM_PREFIX, cs, (int)getpid(),
             (unsigned long long)run);
    size_t data = (o->data_bytes + 63) / 64 * 64;
    s->size = CTL_BYTES + data;
    int fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return al_errf(err, AL_EIO, "shm_open %s: %s", s->name, strerror(errno));
    /* posix_fallocate, not ftruncate: a full /dev/shm fails here, not with a
     * SIGBUS in a worker later */
    int fr = posix_fallocate(fd, 0, (off_t)s->size);
    void *base =
        fr == 0 ? mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    int mmap_errno = fr ? fr : errno;
    /* Unlink now: the mapping stays valid and is inherited by forked workers,
     * so no exit path of any process can leave the name behind. */
    shm_unlink(s->name);
    close(fd);
    if (base == MAP_FAILED)
        return al_errf(err, AL_ENOMEM, "shm %s: %zu bytes: %s", s->name, s->size,
                       strerror(mmap_errno));
    s->base = base;
    s->ctl = base;
    s->data = (char *)base + CTL_BYTES;
    s->data_bytes = data;
    s->W = o->workers;
    s->barrier_timeout_s = o->barrier_timeout_s > 0 ? o->barrier_timeout_s : 600.0;
    s->grace_s = o->grace_s > 0 ? o->grace_s : 2.0;
    s->parent = getpid();
    ctl_reset(s->ctl, s->W);
    return 0;
}

void al_shm_destroy(al_shm *s) {
    if (s->me < 0) al_shm_pool_stop(s);
    if (s->base) munmap(s->base, s->size);
    memset(s, 0, sizeof *s);
    s->me = -1;
}

pid_t al_shm_worker_pid(const al_shm *s, int w) {
    return s->ctl->pid[w];
}

double *al_shm_scalars(al_shm *s, int worker) {
    return s->ctl->scalars[worker];
}

/* ---- abort and barrier -------------------------------------------------------------- */

/* The first caller claims the reason; the flag is raised by everyone (a
 * claimer that dies between claim and flag must not keep the run alive: the
 * parent raises it too). Waiters are woken; they also poll. */
static void vabort(al_shm *s, int code, int worker, const char *fmt, va_list ap) {
    al_shm_ctl *c = s->ctl;
    int expected = 0;
    if (atomic_compare_exchange_strong(&c->claim, &expected, 1)) {
        vsnprintf(c->abort_msg, sizeof c->abort_msg, fmt, ap);
        c->abort_code = code;
        c->abort_worker = worker;
    }
    atomic_store(&c->abort, 1);
    futex_wake_all(&c->gen);
}

void al_shm_abort(al_shm *s, int code, int worker, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vabort(s, code, worker, fmt, ap);
    va_end(ap);
}

int al_shm_aborted(const al_shm *s) {
    return atomic_load(&s->ctl->abort);
}

static int peer_error(al_shm *s, al_err *err) {
    return al_errf(err, AL_EPEER, "run aborted: %s", s->ctl->abort_msg);
}

int al_shm_barrier(al_shm *s, al_err *err) {
    al_shm_ctl *c = s->ctl;
    double t0 = al_now(), deadline = t0 + s->barrier_timeout_s;
    if (atomic_load(&c->abort)) return peer_error(s, err);
    unsigned gen = atomic_load(&c->gen);
    if (s->me >= 0) c->arrived[s->me] = gen;
    if (atomic_fetch_add(&c->count, 1) + 1 == (unsigned)c->W) {
        /* the last one in: reset the count before opening, so nobody can
         * enter the next generation and find a stale count */
        atomic_store(&c->count, 0);
        atomic_fetch_add(&c->gen, 1);
        futex_wake_all(&c->gen);
        s->wait_s += al_now() - t0;
        return 0;
    }
    /* Sleep in short slices: each wake-up checks the abort flag, the parent
     * and the deadline, so a lost wake-up or a dead peer costs at most a slice. */
    int rc = 0;
    while (atomic_load(&c->gen) == gen) {
        if (atomic_load(&c->abort)) {
            rc = 1;
            break;
        }
        double now = al_now();
        if (now >= deadline) {
            rc = 2;
            break;
        }
        if (getppid() != s->parent) {
            rc = 3;
            break;
        }
        futex_wait(&c->gen, gen, AL_MIN(0.05, deadline - now));
    }
    s->wait_s += al_now() - t0;
    if (rc == 0) return 0;
    if (rc == 2) {
        char missing[256] = "";
        size_t len = 0;
        for (int w = 0; w < c->W && len + 8 < sizeof missing; w++)
            if (c->arrived[w] != gen)
                len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d",
                                        len ? ", " : "", w);
        al_shm_abort(s, AL_ETIMEOUT, -1, "barrier timed out after %.1f s waiting for worker(s) %s",
                     s->barrier_timeout_s, missing);
        return al_errf(err, AL_ETIMEOUT, "barrier timed out after %.1f s waiting for worker(s) %s",
                       s->barrier_timeout_s, missing);
    }
    if (rc == 3) al_shm_abort(s, AL_EPEER, -1, "the parent process died");
    return peer_error(s, err);
}

/* ---- one-sided get / push ------------------------------------------------------------ */

void al_shm_get(al_shm *s, float *dst, const float *arr, size_t n) {
    for (int w = 0; w < s->W; w++) {
        size_t lo = al_shm_slice_lo(n, s->W, w), hi = al_shm_slice_lo(n, s->W, w + 1);
        memcpy(dst + lo, arr + lo, (hi - lo) * sizeof(float));
    }
    s->bytes_got += (double)n * sizeof(float);
}

void al_shm_push(al_shm *s, float *acc, const float *src, size_t n) {
    for (int w = 0; w < s->W; w++) {
        size_t lo = al_shm_slice_lo(n, s->W, w), hi = al_shm_slice_lo(n, s->W, w + 1);
        float *a = acc + lo;
        const float *x = src + lo;
        for (size_t i = 0; i < hi - lo; i++) a[i] += x[i];
    }
    s->bytes_pushed += (double)n * sizeof(float);
}

/* ---- workers ----------------------------------------------------------------------- */

/* Exit statuses of a worker process: 0 ok, WORKER_FAILED after its own error
 * (the message is in the control block), WORKER_PEER when it stopped because
 * another one failed. */
enum { WORKER_FAILED = 2, WORKER_PEER = 3 };

/* One run of fn in a worker: the exit status it reports (0, WORKER_FAILED or
 * WORKER_PEER). */
static int worker_job(al_shm *s, int w, al_shm_worker_fn fn, void *ctx) {
    s->me = w;
    s->ctl->pid[w] = getpid();
    s->bytes_got = s->bytes_pushed = s->wait_s = 0;
    al_err e = {0};
    int rc = fn(s, w, ctx, &e);
    fflush(stdout);
    fflush(stderr);
    if (rc == 0) return 0;
    if (rc == AL_EPEER && al_shm_aborted(s)) return WORKER_PEER;
    al_shm_abort(s, rc, w, "worker %d: %s", w, e.msg[0] ? e.msg : al_strerror(rc));
    return WORKER_FAILED;
}

static void worker_main(al_shm *s, int w, al_shm_worker_fn fn, void *ctx) {
    /* die with the parent; if it is already gone, do not start */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != s->parent) _exit(WORKER_PEER);
    _exit(worker_job(s, w, fn, ctx));
}

/* A pool worker: sleeps until the parent posts a job (a new value of
 * ctl->job), runs fn, counts itself done and sleeps again; exits on quit, on
 * a failed run, or when the parent is gone. `seen` is the job word at fork. */
static void pool_main(al_shm *s, int w, al_shm_worker_fn fn, void *ctx, unsigned seen) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != s->parent) _exit(WORKER_PEER);
    /* A terminal's ^C or a group SIGTERM is for the parent to handle (it
     * finishes the round and stops us with quit); SIGKILL still works. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    al_shm_ctl *c = s->ctl;
    for (;;) {
        while (atomic_load(&c->job) == seen) {
            if (getppid() != s->parent) _exit(WORKER_PEER);
            futex_wait(&c->job, seen, 0.25);
        }
        seen = atomic_load(&c->job);
        if (atomic_load(&c->quit)) _exit(0);
        int st = worker_job(s, w, fn, ctx);
        if (st) _exit(st);
        atomic_fetch_add(&c->done, 1);
    }
}

static void describe_exit(char *out, size_t n, int w, pid_t pid, int st) {
    if (WIFSIGNALED(st))
        snprintf(out, n, "worker %d (pid %d) was killed by signal %d (%s)", w, (int)pid,
                 WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(out, n, "worker %d (pid %d) exited with status %d", w, (int)pid, WEXITSTATUS(st));
}

/* Tell the pool's workers to exit: those asleep wake and leave at once. */
static void post_quit(al_shm_ctl *c) {
    atomic_store(&c->quit, 1);
    atomic_fetch_add(&c->job, 1);
    futex_wake_all(&c->job);
}

/* Watch the workers until every one of them has exited, or (pool) counted
 * itself done. A worker that ends abnormally aborts the run; the others then
 * leave their barriers with AL_EPEER and exit; whoever is still there after
 * grace_s is killed. */
static void watch(al_shm *s, const pid_t *pids, int *alive, int pool) {
    al_shm_ctl *c = s->ctl;
    int nalive = 0;
    for (int w = 0; w < s->W; w++) nalive += alive[w];
    double kill_at = 0;
    while (nalive > 0) {
        int reaped = 0;
        for (int w = 0; w < s->W; w++) {
            if (!alive[w]) continue;
            int st;
            pid_t r = waitpid(pids[w], &st, WNOHANG);
            if (r == 0 || (r < 0 && errno == EINTR)) continue;
            alive[w] = 0;
            nalive--;
            reaped = 1;
            if (r < 0) continue; /* not our child any more: nothing to learn */
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && !pool) continue;
            if (WIFEXITED(st) &&
                (WEXITSTATUS(st) == WORKER_FAILED || WEXITSTATUS(st) == WORKER_PEER))
                continue; /* it reported through the control block */
            char why[200];
            describe_exit(why, sizeof why, w, pids[w], st);
            al_shm_abort(s, AL_EPEER, w, "%s", why);
        }
        if (nalive == 0) break;
        if (s->stop && *s->stop && !c->jobw[AL_SHM_JOB_STOP]) c->jobw[AL_SHM_JOB_STOP] = 1;
        if (pool && !atomic_load(&c->abort) && atomic_load(&c->done) == (unsigned)s->W) break;
        if (atomic_load(&c->abort) && kill_at == 0) {
            kill_at = al_now() + s->grace_s;
            if (pool) post_quit(c); /* the idle ones leave at once */
        }
        if (kill_at > 0 && al_now() > kill_at) {
            for (int w = 0; w < s->W; w++)
                if (alive[w]) kill(pids[w], SIGKILL);
            kill_at = al_now() + 3600; /* once */
        }
        if (!reaped) al_sleep(0.002);
    }
}

int al_shm_run(al_shm *s, al_shm_worker_fn fn, void *ctx, al_err *err) {
    al_shm_ctl *c = s->ctl;
    if (s->pool && (fn != s->pool_fn || ctx != s->pool_ctx))
        return al_errf(err, AL_EINVAL, "shm: the worker pool runs another body");
    ctl_reset(c, s->W);
    c->jobw[AL_SHM_JOB_STOP] = s->stop && *s->stop;
    /* buffered output would otherwise be written once per process */
    fflush(stdout);
    fflush(stderr);
    if (s->pool) {
        memcpy(c->pid, s->pool_pid, sizeof c->pid);
        atomic_store(&c->done, 0);
        atomic_fetch_add(&c->job, 1);
        futex_wake_all(&c->job);
        watch(s, s->pool_pid, s->pool_alive, 1);
        if (atomic_load(&c->abort)) { /* the pool is gone: reap what is left */
            al_shm_pool_stop(s);
            return al_errf(err, c->abort_code ? c->abort_code : AL_EPEER, "%s", c->abort_msg);
        }
        return 0;
    }
    pid_t pids[AL_SHM_MAX_WORKERS];
    int alive[AL_SHM_MAX_WORKERS] = {0};
    for (int w = 0; w < s->W; w++) {
        pid_t pid = fork();
        if (pid == 0) worker_main(s, w, fn, ctx); /* never returns */
        if (pid < 0) {
            al_shm_abort(s, AL_EIO, -1, "fork of worker %d: %s", w, strerror(errno));
            break;
        }
        pids[w] = pid;
        alive[w] = 1;
    }
    watch(s, pids, alive, 0);
    if (!atomic_load(&c->abort)) return 0;
    return al_errf(err, c->abort_code ? c->abort_code : AL_EPEER, "%s", c->abort_msg);
}

/* Threads of this process now (/proc/self/stat field 20); 0 if unknown. */
static int count_threads(void) {
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return 0;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    int field = 2, threads = 0;
    for (; p && *p; p++)
        if (*p == ' ' && ++field == 20) {
            threads = atoi(p + 1);
            break;
        }
    return threads;
}

int al_shm_pool_start(al_shm *s, al_shm_worker_fn fn, void *ctx, al_err *err) {
    if (s->pool) return al_errf(err, AL_EINVAL, "shm: the worker pool is already running");
    s->pool_threads = count_threads();
    al_shm_ctl *c = s->ctl;
    ctl_reset(c, s->W);
    atomic_store(&c->quit, 0);
    atomic_store(&c->done, 0);
    unsigned seen = atomic_load(&c->job);
    fflush(stdout);
    fflush(stderr);
    memset(s->pool_alive, 0, sizeof s->pool_alive);
    for (int w = 0; w < s->W; w++) {
        pid_t pid = fork();
        if (pid == 0) pool_main(s, w, fn, ctx, seen); /* never returns */
        if (pid < 0) {
            int e = errno;
            al_shm_pool_stop(s);
            return al_errf(err, AL_EIO, "fork of worker %d: %s", w, strerror(e));
        }
        s->pool_pid[w] = pid;
        s->pool_alive[w] = 1;
        s->pool = 1;
    }
    s->pool_fn = fn;
    s->pool_ctx = ctx;
    return 0;
}

void al_shm_pool_stop(al_shm *s) {
    if (!s->pool) return;
    post_quit(s->ctl);
    double kill_at = al_now() + s->grace_s;
    for (int w = 0; w < s->W; w++) {
        while (s->pool_alive[w]) {
            pid_t r = waitpid(s->pool_pid[w], NULL, WNOHANG);
            if (r == s->pool_pid[w] || (r < 0 && errno != EINTR)) {
                s->pool_alive[w] = 0;
                break;
            }
            if (al_now() > kill_at) kill(s->pool_pid[w], SIGKILL);
            al_sleep(0.002);
        }
    }
    s->pool = 0;
    s->pool_fn = NULL;
    s->pool_ctx = NULL;
}

int64_t *al_shm_job(al_shm *s) {
    return s->ctl->jobw;
}
