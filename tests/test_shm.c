/*
 * test_shm.c -- the shared-memory transport on its own:
 *  - get/push: W workers push known values into their slots, the barrier
 *    separates phases, every worker then reads every slot correctly;
 *  - barrier across many rounds with scalars exchanged between rounds;
 *  - liveness: a worker that is killed (while computing, and while asleep in
 *    a barrier), one that crashes (it raises SIGABRT), one that returns an
 *    error, and one that never comes to the barrier each end the run with an
 *    error naming that worker, quickly;
 *  - the pool: workers forked once keep their pids and their memory across
 *    runs and see the parent's job words; a failed run or a worker killed
 *    while idle ends the pool with an error naming the worker, and the next
 *    run forks afresh; idle workers ignore SIGTERM; destroy reaps them;
 *  - stale names: a segment name of a dead creator is removed, one of a live
 *    creator is kept; nothing of ours is left in /dev/shm.
 */
#include "al_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "al_shm.h"

#define N 1000 /* floats per array */

static int count_site(const char *site) {
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    char want[128];
    snprintf(want, sizeof want, "autoloco.%s.", site);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, want, strlen(want))) n++;
    closedir(d);
    return n;
}

static void make_shm(al_shm *s, const char *site, int W, double timeout) {
    al_shm_opts o = {site, W, (size_t)(W + 1) * N * sizeof(float), timeout, 1.0};
    al_err err = {0};
    assert_int_equal(al_shm_create(s, &o, &err), 0);
    assert_int_equal(count_site(site), 0); /* unlinked at once */
}

/* data = [W slots of N][params N]. Worker w pushes (w+1)*i into slot w at i,
 * twice; after a barrier every worker checks all slots and gets params. */
static int body_pushget(al_shm *s, int w, void *ctx, al_err *err) {
    (void)ctx;
    float *slots = s->data, *params = slots + (size_t)s->W * N;
    float src[N], dst[N];
    for (int i = 0; i < N; i++) src[i] = (float)((w + 1) * i);
    al_shm_push(s, slots + (size_t)w * N, src, N);
    al_shm_push(s, slots + (size_t)w * N, src, N);
    if (w == 0)
        for (int i = 0; i < N; i++) params[i] = (float)i * 0.5f;
    int rc = al_shm_barrier(s, err);
    if (rc) return rc;
    for (int c = 0; c < s->W; c++)
        for (int i = 0; i < N; i++)
            if (slots[(size_t)c * N + i] != (float)(2 * (c + 1) * i))
                return al_errf(err, AL_EMISMATCH, "slot %d[%d] = %g", c, i,
                               slots[(size_t)c * N + i]);
    al_shm_get(s, dst, params, N);
    for (int i = 0; i < N; i++)
        if (dst[i] != (float)i * 0.5f) return al_errf(err, AL_EMISMATCH, "get[%d] = %g", i, dst[i]);
    /* rounds: each publishes a scalar, after the barrier all sums agree */
    for (int r = 0; r < 50; r++) {
        al_shm_scalars(s, w)[r % 2] = r * 10 + w;
        if ((rc = al_shm_barrier(s, err))) return rc;
        double sum = 0;
        for (int c = 0; c < s->W; c++) sum += al_shm_scalars(s, c)[r % 2];
        double want = s->W * r * 10.0 + s->W * (s->W - 1) / 2.0;
        if (sum != want) return al_errf(err, AL_EMISMATCH, "round %d: %g != %g", r, sum, want);
        if ((rc = al_shm_barrier(s, err))) return rc;
    }
    return 0;
}

static void test_push_get_barrier(void **state) {
    (void)state;
    char site[64];
    snprintf(site, sizeof site, "test-shm-%d", (int)getpid());
    for (int W = 1; W <= 4; W++) {
        al_shm s;
        make_shm(&s, site, W, 10);
        al_err err = {0};
        int rc = al_shm_run(&s, body_pushget, NULL, &err);
        if (rc) fail_msg("W=%d: %s", W, err.msg);
        al_shm_destroy(&s);
    }
    assert_int_equal(count_site(site), 0);
}

/* Worker `victim` misbehaves in the way ctx says, in the middle of round 3;
 * the others keep entering barriers. */
typedef enum { KILLED, ABORTS, RETURNS_ERROR, STALLS, KILLED_WAITING } failure;
typedef struct fault {
    failure how;
    int victim;
} fault;

static int body_fault(al_shm *s, int w, void *ctx, al_err *err) {
    const fault *f = ctx;
    for (int r = 0; r < 1000; r++) {
        if (r == 3 && f->how == KILLED_WAITING && w == 0) {
            /* the victim is asleep in the barrier by now: kill it there (a
             * process-shared condvar would hang the others after this) */
            struct timespec ts = {0, 200000000};
            nanosleep(&ts, NULL);
            kill(al_shm_worker_pid(s, f->victim), SIGKILL);
        }
        if (r == 3 && w == f->victim && f->how != KILLED_WAITING) {
            if (f->how == KILLED) raise(SIGKILL);
            if (f->how == ABORTS) raise(SIGABRT);
            if (f->how == RETURNS_ERROR) return al_errf(err, AL_EIO, "disk on fire");
            if (f->how == STALLS) {
                struct timespec ts = {30, 0};
                nanosleep(&ts, NULL);
            }
        }
        int rc = al_shm_barrier(s, err);
        if (rc) return rc;
    }
    return 0;
}

static void test_liveness(void **state) {
    (void)state;
    char site[64];
    snprintf(site, sizeof site, "test-shm-live-%d", (int)getpid());
    const struct {
        failure how;
        int code;
        const char *says;
    } cases[] = {
        {KILLED, AL_EPEER, "signal 9"},          {ABORTS, AL_EPEER, "signal 6"},
        {RETURNS_ERROR, AL_EIO, "disk on fire"}, {STALLS, AL_ETIMEOUT, "waiting for worker(s) 2"},
        {KILLED_WAITING, AL_EPEER, "signal 9"},
    };
    for (size_t i = 0; i < AL_ARRAY_LEN(cases); i++) {
        al_shm s;
        make_shm(&s, site, 3, 1.0);
        fault f = {cases[i].how, 2};
        al_err err = {0};
        double t0 = al_now();
        int rc = al_shm_run(&s, body_fault, &f, &err);
        double dt = al_now() - t0;
        print_message("  case %zu: %s after %.2f s: %s\n", i, al_errname(rc), dt, err.msg);
        assert_int_equal(rc, cases[i].code);
        assert_non_null(strstr(err.msg, cases[i].says));
        if (cases[i].how != STALLS) assert_non_null(strstr(err.msg, "worker 2"));
        assert_true(dt < 5.0); /* the stall: 1 s barrier timeout + 1 s grace + kill */
        al_shm_destroy(&s);
    }
    assert_int_equal(count_site(site), 0);
}

static void test_stale(void **state) {
    (void)state;
    char site[64], dead_name[160], live_name[160];
    snprintf(site, sizeof site, "test-shm-stale-%d", (int)getpid());
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    snprintf(dead_name, sizeof dead_name, "/autoloco.%s.%d.1", site, (int)dead);
    snprintf(live_name, sizeof live_name, "/autoloco.%s.%d.2", site, (int)getpid());
    for (int i = 0; i < 2; i++) {
        int fd = shm_open(i ? live_name : dead_name, O_CREAT | O_RDWR, 0600);
        assert_true(fd >= 0);
        close(fd);
    }
    assert_int_equal(count_site(site), 2);
    int removed = 0;
    al_err err = {0};
    assert_int_equal(al_shm_clean_stale(site, &removed, &err), 0);
    assert_int_equal(removed, 1);
    assert_int_equal(count_site(site), 1); /* ours: its creator lives */
    shm_unlink(live_name);
    assert_int_equal(count_site(site), 0);
}

static void test_bad_args(void **state) {
    (void)state;
    al_shm s;
    al_err err = {0};
    al_shm_opts o = {"x", 0, 16, 1, 1};
    assert_int_equal(al_shm_create(&s, &o, &err), AL_EINVAL);
    assert_non_null(strstr(err.msg, "workers"));
    o.workers = AL_SHM_MAX_WORKERS + 1;
    assert_int_equal(al_shm_create(&s, &o, &err), AL_EINVAL);
    o.workers = 2;
    o.data_bytes = (size_t)1 << 62; /* cannot be allocated */
    assert_true(al_shm_create(&s, &o, &err) < 0);
    print_message("  huge segment: %s\n", err.msg);
    assert_int_equal(count_site("x"), 0);
}

/* The pool body: every worker counts its runs in its own memory (the ctx
 * copy it got at the fork), publishes pid and count, and checks that all W
 * agree on the run number the parent put in job word 0. Job word 1 names a
 * worker that fails this run (-1: none). */
typedef struct pool_ctx {
    long runs; /* this process's count */
} pool_ctx;

static int body_pool(al_shm *s, int w, void *ctx, al_err *err) {
    pool_ctx *p = ctx;
    const int64_t *job = al_shm_job(s);
    p->runs++;
    if (job[1] == w) return al_errf(err, AL_EIO, "told to fail in run %lld", (long long)job[0]);
    al_shm_scalars(s, w)[0] = (double)getpid();
    al_shm_scalars(s, w)[1] = (double)p->runs;
    int rc = al_shm_barrier(s, err);
    if (rc) return rc;
    for (int c = 0; c < s->W; c++)
        if (al_shm_scalars(s, c)[1] != (double)job[0])
            return al_errf(err, AL_EMISMATCH, "worker %d counts %g runs, the parent %lld", c,
                           al_shm_scalars(s, c)[1], (long long)job[0]);
    return al_shm_barrier(s, err);
}

static int gone(pid_t pid) {
    return kill(pid, 0) != 0 && errno == ESRCH;
}

static void test_pool(void **state) {
    (void)state;
    char site[64];
    snprintf(site, sizeof site, "test-shm-pool-%d", (int)getpid());
    const int W = 3;
    al_shm s;
    make_shm(&s, site, W, 5.0);
    pool_ctx p = {0};
    al_err err = {0};
    int64_t *job = al_shm_job(&s);
    assert_int_equal(al_shm_pool_start(&s, body_pool, &p, &err), 0);
    assert_int_equal(s.pool_threads, 1); /* this test has no other thread */
    assert_int_equal(al_shm_pool_start(&s, body_pool, &p, &err), AL_EINVAL);
    pid_t first[AL_SHM_MAX_WORKERS];
    for (int r = 1; r <= 3; r++) {
        job[0] = r;
        job[1] = -1;
        int rc = al_shm_run(&s, body_pool, &p, &err);
        if (rc) fail_msg("run %d: %s", r, err.msg);
        for (int w = 0; w < W; w++) {
            pid_t pid = (pid_t)al_shm_scalars(&s, w)[0];
            if (r == 1) first[w] = pid;
            assert_int_equal(pid, first[w]); /* the same process every run */
            assert_int_equal(pid, s.pool_pid[w]);
        }
    }
    assert_int_equal(p.runs, 0); /* the parent's copy never ran */
    /* another body is refused */
    assert_int_equal(al_shm_run(&s, body_pushget, NULL, &err), AL_EINVAL);
    /* idle workers ignore SIGTERM (the parent decides when they stop) */
    kill(first[1], SIGTERM);
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
    job[0] = 4;
    assert_int_equal(al_shm_run(&s, body_pool, &p, &err), 0);
    /* a failing run ends the pool: every worker is reaped */
    job[0] = 5;
    job[1] = 2;
    assert_int_equal(al_shm_run(&s, body_pool, &p, &err), AL_EIO);
    print_message("  failed run: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "worker 2"));
    assert_non_null(strstr(err.msg, "told to fail"));
    assert_int_equal(s.pool, 0);
    for (int w = 0; w < W; w++) assert_true(gone(first[w]));
    /* after it, runs fork afresh (a new process counts its first run) */
    job[0] = 1;
    job[1] = -1;
    assert_int_equal(al_shm_run(&s, body_pool, &p, &err), 0);
    /* a worker killed while idle: the next run says which and ends the pool */
    assert_int_equal(al_shm_pool_start(&s, body_pool, &p, &err), 0);
    pid_t victim = s.pool_pid[1];
    kill(victim, SIGKILL);
    nanosleep(&ts, NULL);
    double t0 = al_now();
    assert_int_equal(al_shm_run(&s, body_pool, &p, &err), AL_EPEER);
    print_message("  idle worker killed: %s after %.2f s\n", err.msg, al_now() - t0);
    assert_non_null(strstr(err.msg, "worker 1"));
    assert_non_null(strstr(err.msg, "signal 9"));
    assert_true(al_now() - t0 < 5.0);
    assert_int_equal(s.pool, 0);
    /* destroy stops a running pool */
    assert_int_equal(al_shm_pool_start(&s, body_pool, &p, &err), 0);
    pid_t live[AL_SHM_MAX_WORKERS];
    memcpy(live, s.pool_pid, sizeof live);
    al_shm_destroy(&s);
    for (int w = 0; w < W; w++) assert_true(gone(live[w]));
    assert_int_equal(count_site(site), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_push_get_barrier),
        cmocka_unit_test(test_liveness),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_stale),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
