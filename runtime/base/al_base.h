/*
 * al_base.h -- the shared basics every autoloco module may use: error codes and
 * messages, logging, clocks and timed waits, a deterministic RNG, SHA-256, small file
 * helpers. Uses no other module.
 *
 * Error convention (libuv style): a function that can fail returns 0 or a
 * negative AL_E* code and, when it fails, leaves a one-line message in the
 * caller's `al_err` ("what, where, why"). The CLI prints that message and turns
 * the code into an exit status. Library code never exits and never prints
 * errors itself.
 */
#ifndef AL_BASE_H
#define AL_BASE_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" { /* kernels.cu (C++) includes this header */
#endif

/* One table for every error code: name, value, description. */
#define AL_ERRORS(X)                                                                               \
    X(AL_EINVAL, -1, "invalid argument")                                                           \
    X(AL_ENOMEM, -2, "out of memory")                                                              \
    X(AL_EIO, -3, "input/output error")                                                            \
    X(AL_EFORMAT, -4, "bad file format")                                                           \
    X(AL_ECONFIG, -5, "bad configuration")                                                         \
    X(AL_ENOTFOUND, -6, "not found")                                                               \
    X(AL_EMISMATCH, -7, "mismatch")                                                                \
    X(AL_EINTEGRITY, -8, "integrity check failed")                                                 \
    X(AL_ENUMERIC, -9, "numerical error (NaN or Inf)")                                             \
    X(AL_EUNSUPPORTED, -10, "unsupported")                                                         \
    X(AL_EPEER, -11, "peer failure")                                                               \
    X(AL_ETIMEOUT, -12, "timed out")                                                               \
    X(AL_EPERM, -13, "not permitted")

enum {
#define AL_ERR_ENUM(name, val, desc) name = val,
    AL_ERRORS(AL_ERR_ENUM)
#undef AL_ERR_ENUM
};

/* Short description of an AL_E* code ("unknown error" for anything else). */
const char *al_strerror(int code);
/* The code's symbolic name, e.g. "AL_EIO". */
const char *al_errname(int code);

/* The message a failing call leaves for its caller. */
typedef struct al_err {
    int code;
    char msg[512];
} al_err;

/* Set err (may be NULL) to code and a printf-formatted message; returns code so
 * that callers can write `return al_errf(err, AL_EIO, "...")`. */
int al_errf(al_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prefix an existing message with context: "context: old message". */
int al_err_prefix(al_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void al_err_clear(al_err *err);

/* ---- logging ------------------------------------------------------------- */
typedef enum { AL_LOG_DEBUG, AL_LOG_INFO, AL_LOG_WARN, AL_LOG_ERROR } al_log_level;
/* Logs go to stderr, one line each: an ISO-8601 UTC timestamp to the
 * millisecond, a level tag, the message ("2026-01-31T12:00:00.123Z [info] ...");
 * below `min` they are dropped. Identical lines (same level and text) are
 * rate-limited: at most AL_LOG_BURST in a window of AL_LOG_WINDOW_S seconds;
 * the rest are counted and summarised once the window ends, at the next line
 * logged or al_log_flush ("<the line> (repeated 17 times in 30 s)"). The logger
 * is a value owned by whoever runs the program (no global state); al_logf
 * takes it const but updates its rate-limit table under its own mutex. */
#define AL_LOG_BURST    3
#define AL_LOG_WINDOW_S 30.0
#define AL_LOG_SLOTS    32
typedef struct al_log_seen {
    uint64_t h;     /* hash of level and text (0: free) */
    double t0;      /* the window's start (al_now) */
    double t_last;  /* the last time it came */
    long n;         /* times in this window */
    char text[320]; /* its text (the summary repeats it; longer lines are cut) */
} al_log_seen;
typedef struct al_log {
    al_log_level min;
    FILE *out;
    int stamp;          /* timestamps (al_log_init: on) */
    double window_s;    /* the rate limit's window (al_log_init: AL_LOG_WINDOW_S) */
    int ready;          /* al_log_init ran: mu and seen are set up */
    pthread_mutex_t mu; /* guards seen (a default mutex: nothing to destroy) */
    al_log_seen seen[AL_LOG_SLOTS];
} al_log;
void al_log_init(al_log *log, al_log_level min, FILE *out);
void al_logf(const al_log *log, al_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The summaries of lines still held back (at the end of a run). */
void al_log_flush(const al_log *log);

/* ---- time ---------------------------------------------------------------- */
/* Two clocks, kept apart (issue 32). Every deadline, timeout, timed wait, sleep
 * and duration counts on the monotonic clock, which a step of the system clock
 * (NTP, `date -s`, a VM resumed) does not move: al_now, al_sleep and condition
 * variables made by al_cond_init. The wall clock, al_wall_now, only stamps what
 * a person reads or a file keeps (events.jsonl, /metrics' timestamps); nothing
 * waits on it. tests/test_clock_check.py fails the build's tests when a
 * wall-clock read (CLOCK_REALTIME, gettimeofday, time(), a condition variable
 * of the default clock) appears outside its allow-list, each entry justified. */
double al_now(void);      /* monotonic seconds (CLOCK_MONOTONIC): deadlines, waits, durations */
double al_wall_now(void); /* Unix seconds (CLOCK_REALTIME): for display and files only */
/* Sleep `s` seconds on the monotonic clock (s <= 0: return at once); a signal
 * delivered to this thread may end it early, as nanosleep. */
void al_sleep(double s);
/* A condition variable whose timed waits count on the monotonic clock (the
 * default, CLOCK_REALTIME, would move every deadline with a clock step). */
int al_cond_init(pthread_cond_t *cv, al_err *err);
/* Wait on `cv` (with `mu` held) until woken or until al_now() >= `deadline`
 * (al_now's seconds; INFINITY waits untimed). Returns 0 when the deadline
 * passed, 1 otherwise (woken, or a spurious wake: callers loop on their
 * condition). `cv` must come from al_cond_init. */
int al_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double deadline);

/* ---- RNG: xoshiro256** seeded through splitmix64 -------------------------- */
typedef struct al_rng {
    uint64_t s[4];
} al_rng;
void al_rng_seed(al_rng *r, uint64_t seed);
uint64_t al_rng_u64(al_rng *r);
double al_rng_uniform(al_rng *r);             /* [0, 1) */
uint64_t al_rng_below(al_rng *r, uint64_t n); /* [0, n), n > 0 */
double al_rng_normal(al_rng *r);              /* N(0, 1), Box-Muller, no cached pair */

/* ---- hashing ------------------------------------------------------------- */
/* SHA-256 of a buffer, written as 64 lowercase hex digits + NUL. */
void al_sha256_hex(const void *data, size_t n, char hex[65]);
/* n bytes as 2n lowercase hex digits + NUL. */
void al_hex(const void *data, size_t n, char *hex);
/* SHA-256 of a whole file; AL_EIO with the path if it cannot be read. */
int al_sha256_file(const char *path, char hex[65], al_err *err);
/* FNV-1a 64-bit, for cheap deterministic mixing. */
uint64_t al_fnv1a64(const void *data, size_t n, uint64_t h);

/* ---- files --------------------------------------------------------------- */
/* Read a whole file into a malloc'd buffer (NUL-terminated; *len excludes it). */
int al_read_file(const char *path, char **data, size_t *len, al_err *err);
/* Write a buffer to path and fsync it. */
int al_write_file_sync(const char *path, const void *data, size_t len, al_err *err);
/* mkdir -p; an existing directory is fine. */
int al_mkdirs(const char *path, al_err *err);
/* fsync a directory (after a rename inside it). */
int al_fsync_dir(const char *path, al_err *err);
/* rm -rf of a directory tree we created. */
int al_remove_tree(const char *path, al_err *err);

/* ---- threads ------------------------------------------------------------- */
/* Prepare the calling thread to run kernels: n threads for our OpenMP
 * kernels and for OpenBLAS together, and subnormal floats flushed to zero
 * (al_fp_flush_subnormals). Every thread that trains calls it before its
 * first kernel. */
void al_threads_set(int n);
/* Flush-to-zero and denormals-are-zero on the calling thread, and so on the
 * threads and processes it starts afterwards (its OpenMP pool, which is
 * OpenBLAS's too, if not started yet): a subnormal float, made or read, is 0.
 * Without it a confident model's steps ran up to 9 times slower. Call it
 * before the thread's first kernel; `autoloco` calls it first thing in main. */
void al_fp_flush_subnormals(void);
/* 1 when the calling thread flushes subnormals (FLT_MIN * 0.5 is 0). */
int al_fp_flushes_subnormals(void);
int al_threads_get(void);

#define AL_MIN(a, b)    ((a) < (b) ? (a) : (b))
#define AL_MAX(a, b)    ((a) > (b) ? (a) : (b))
#define AL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#ifdef __cplusplus
}
#endif

#endif
