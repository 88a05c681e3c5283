/*
 * test_log.c -- the logger (runtime/base, issue 36): every line starts with an
 * ISO-8601 UTC timestamp to the millisecond and the level; identical lines
 * beyond AL_LOG_BURST in a window are held back and summarised with their
 * count once the window ends (at the next line or al_log_flush); lines that
 * differ are never held back, even more of them than the table has slots.
 */
#include "al_test.h"

#include <regex.h>
#include <string.h>
#include <time.h>

/* The lines logged into a memory stream, one string. */
typedef struct {
    char *buf;
    size_t len;
    FILE *f;
    al_log log;
} sink;

static void sink_open(sink *s) {
    memset(s, 0, sizeof *s);
    s->f = open_memstream(&s->buf, &s->len);
    assert_non_null(s->f);
    al_log_init(&s->log, AL_LOG_INFO, s->f);
}
static void sink_close(sink *s) {
    fclose(s->f);
    free(s->buf);
}
static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void test_timestamp(void **state) {
    (void)state;
    sink s;
    sink_open(&s);
    time_t before = time(NULL);
    al_logf(&s.log, AL_LOG_WARN, "site %s: hello", "a");
    al_logf(&s.log, AL_LOG_DEBUG, "dropped: below min");
    fflush(s.f);
    regex_t re;
    assert_int_equal(regcomp(&re,
                             "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
                             "\\[warn\\] site a: hello\n$",
                             REG_EXTENDED),
                     0);
    if (regexec(&re, s.buf, 0, NULL, 0) != 0) fail_msg("not a stamped line: '%s'", s.buf);
    regfree(&re);
    /* UTC: the stamp's date and hour are gmtime's (within the same minute) */
    struct tm tm;
    gmtime_r(&before, &tm);
    char want[20];
    strftime(want, sizeof want, "%Y-%m-%dT%H", &tm);
    assert_memory_equal(s.buf, want, strlen(want));
    sink_close(&s);
}

static void test_repeats_summarised(void **state) {
    (void)state;
    sink s;
    sink_open(&s);
    for (int i = 0; i < 10; i++) {
        al_logf(&s.log, AL_LOG_WARN, "refused east: INVALID_ARGUMENT: no request message");
        al_logf(&s.log, AL_LOG_INFO, "line %d", i); /* distinct lines pass, interleaved */
    }
    fflush(s.f);
    assert_int_equal(count(s.buf, "no request message\n"), AL_LOG_BURST);
    assert_int_equal(count(s.buf, "repeated"), 0); /* the window is not over yet */
    for (int i = 0; i < 10; i++) {
        char want[32];
        snprintf(want, sizeof want, "] line %d\n", i);
        if (!strstr(s.buf, want)) fail_msg("'%s' missing:\n%s", want, s.buf);
    }
    al_log_flush(&s.log);
    fflush(s.f);
    assert_int_equal(count(s.buf, "[warn] refused east: INVALID_ARGUMENT: no request message "
                                  "(repeated 7 times in "),
                     1);
    al_log_flush(&s.log); /* said once */
    fflush(s.f);
    assert_int_equal(count(s.buf, "repeated"), 1);
    sink_close(&s);
}

static void test_window_ends(void **state) {
    (void)state;
    sink s;
    sink_open(&s);
    s.log.window_s = 0.2;
    for (int i = 0; i < 5; i++) al_logf(&s.log, AL_LOG_INFO, "same");
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    al_logf(&s.log, AL_LOG_INFO, "other"); /* the window of "same" is over: its summary */
    al_logf(&s.log, AL_LOG_INFO, "same");  /* a new window: shown */
    fflush(s.f);
    assert_int_equal(count(s.buf, "] same\n"), AL_LOG_BURST + 1);
    assert_int_equal(count(s.buf, "] same (repeated 2 times in "), 1);
    char *sum = strstr(s.buf, "(repeated"), *other = strstr(s.buf, "] other");
    assert_true(sum && other && sum < other);
    sink_close(&s);
}

static void test_many_distinct(void **state) {
    (void)state;
    sink s;
    sink_open(&s);
    /* more distinct lines than slots, each 4 times: the burst of each shows;
     * a line pushed out of the table brings its summary with it */
    enum { K = AL_LOG_SLOTS + 8 };
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < K; i++) al_logf(&s.log, AL_LOG_INFO, "distinct %d", i);
    al_log_flush(&s.log);
    fflush(s.f);
    for (int i = 0; i < K; i++) {
        char line[40], sum[60];
        snprintf(line, sizeof line, "] distinct %d\n", i);
        snprintf(sum, sizeof sum, "] distinct %d (repeated", i);
        int shown = count(s.buf, line), summed = count(s.buf, sum);
        /* evicted before its 4th: shown 4 times; else 3 and a summary of 1 */
        if (!(shown == 4 && summed == 0) && !(shown == 3 && summed == 1))
            fail_msg("distinct %d: shown %d times, %d summaries", i, shown, summed);
    }
    sink_close(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timestamp),
        cmocka_unit_test(test_repeats_summarised),
        cmocka_unit_test(test_window_ends),
        cmocka_unit_test(test_many_distinct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
