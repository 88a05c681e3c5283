/* test_clock.c -- runtime/base's clocks (issue 32): timed waits and sleeps count
 * on the monotonic clock, whose zero is the boot, not 1970. A deadline of
 * al_now() + d given to a condition variable of the default clock
 * (CLOCK_REALTIME) lies decades in the past and returns at once; these tests
 * see the whole wait, so they fail if al_cond_init loses its clock. (A step of
 * the wall clock itself needs CAP_SYS_TIME, which tests do not have; the
 * source check tests/test_clock_check.py keeps every wait on these helpers.) */
#include "al_test.h"

#include <pthread.h>

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int flag;
} waiter;

static void waiter_init(waiter *w) {
    al_err err = {0};
    pthread_mutex_init(&w->mu, NULL);
    assert_int_equal(al_cond_init(&w->cv, &err), 0);
    w->flag = 0;
}

static void waiter_free(waiter *w) {
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

/* a deadline 0.2 s ahead on al_now's clock: the wait lasts at least that long */
static void test_wait_until_counts_on_monotonic(void **state) {
    (void)state;
    waiter w;
    waiter_init(&w);
    pthread_mutex_lock(&w.mu);
    double t0 = al_now(), deadline = t0 + 0.2;
    int woken = 1;
    while (woken && al_now() < deadline) woken = al_cond_wait_until(&w.cv, &w.mu, deadline);
    double dt = al_now() - t0;
    pthread_mutex_unlock(&w.mu);
    print_message("  wait until al_now() + 0.2 s: %.3f s, returned %d\n", dt, woken);
    assert_int_equal(woken, 0); /* the deadline passed: 0, not a wake */
    assert_true(dt >= 0.2);
    assert_true(dt < 30.0); /* a loaded machine may be late, never 30 s */
    waiter_free(&w);
}

/* a deadline already past returns 0 at once */
static void test_wait_until_past(void **state) {
    (void)state;
    waiter w;
    waiter_init(&w);
    pthread_mutex_lock(&w.mu);
    double t0 = al_now();
    assert_int_equal(al_cond_wait_until(&w.cv, &w.mu, t0 - 1.0), 0);
    assert_int_equal(al_cond_wait_until(&w.cv, &w.mu, 0.0), 0);
    pthread_mutex_unlock(&w.mu);
    assert_true(al_now() - t0 < 10.0);
    waiter_free(&w);
}

static void *signaller(void *arg) {
    waiter *w = arg;
    al_sleep(0.05);
    pthread_mutex_lock(&w->mu);
    w->flag = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* a wake before the deadline returns 1, long before the deadline (60 s) */
static void test_wait_until_woken(void **state) {
    (void)state;
    waiter w;
    waiter_init(&w);
    pthread_t th;
    double t0 = al_now();
    pthread_mutex_lock(&w.mu);
    assert_int_equal(pthread_create(&th, NULL, signaller, &w), 0);
    int r = 1;
    while (!w.flag && r) r = al_cond_wait_until(&w.cv, &w.mu, t0 + 60.0);
    pthread_mutex_unlock(&w.mu);
    pthread_join(th, NULL);
    assert_int_equal(w.flag, 1);
    assert_int_equal(r, 1);
    assert_true(al_now() - t0 < 30.0);
    waiter_free(&w);
}

static void test_sleep_and_wall(void **state) {
    (void)state;
    double t0 = al_now();
    al_sleep(0.1);
    double dt = al_now() - t0;
    assert_true(dt >= 0.1);
    assert_true(dt < 30.0);
    al_sleep(0); /* returns at once */
    al_sleep(-1);
    /* the wall clock is Unix time (after 2020-01-01), the monotonic one is not */
    double wall = al_wall_now();
    assert_true(wall > 1577836800.0);
    assert_true(fabs(wall - al_now()) > 3600.0 * 24 * 365);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wait_until_counts_on_monotonic),
        cmocka_unit_test(test_wait_until_past),
        cmocka_unit_test(test_wait_until_woken),
        cmocka_unit_test(test_sleep_and_wall),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
