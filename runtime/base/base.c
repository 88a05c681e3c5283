/* base.c -- error messages, logging, clock, RNG, hashing, file helpers. */
#include "al_base.h"

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include <cblas.h>
#include <omp.h>
#include <openssl/evp.h>

/* ---- errors -------------------------------------------------------------- */

const char *al_strerror(int code) {
    switch (code) {
#define AL_ERR_CASE(name, val, desc)                                                               \
    case name:                                                                                     \
        return desc;
        AL_ERRORS(AL_ERR_CASE)
#undef AL_ERR_CASE
    case 0:
        return "success";
    default:
        return "unknown error";
    }
}

const char *al_errname(int code) {
    switch (code) {
#define AL_ERR_CASE(name, val, desc)                                                               \
    case name:                                                                                     \
        return #name;
        AL_ERRORS(AL_ERR_CASE)
#undef AL_ERR_CASE
    case 0:
        return "OK";
    default:
        return "AL_E?";
    }
}

int al_errf(al_err *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int al_err_prefix(al_err *err, const char *fmt, ...) {
    if (!err) return 0;
    char pre[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    size_t pl = strlen(pre), ol = strlen(err->msg), cap = sizeof err->msg - 1;
    if (pl + 2 > cap) pl = cap - 2;
    if (ol > cap - pl - 2) ol = cap - pl - 2;
    memmove(err->msg + pl + 2, err->msg, ol);
    memcpy(err->msg, pre, pl);
    err->msg[pl] = ':';
    err->msg[pl + 1] = ' ';
    err->msg[pl + 2 + ol] = '\0';
    return err->code;
}

void al_err_clear(al_err *err) {
    if (err) {
        err->code = 0;
        err->msg[0] = '\0';
    }
}

/* ---- logging ------------------------------------------------------------- */

void al_log_init(al_log *log, al_log_level min, FILE *out) {
    memset(log, 0, sizeof *log);
    log->min = min;
    log->out = out ? out : stderr;
    log->stamp = 1;
    log->window_s = AL_LOG_WINDOW_S;
    pthread_mutex_init(&log->mu, NULL);
    log->ready = 1;
}

static const char *const LOG_TAG[] = {"debug", "info", "warn", "error"};

/* One line out: the timestamp (UTC, ms), the level, the text. */
static void log_line(const al_log *log, al_log_level lvl, const char *text, const char *tail) {
    char ts[40] = "";
    if (log->stamp) {
        struct timespec now;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &now);
        gmtime_r(&now.tv_sec, &tm);
        size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(ts + n, sizeof ts - n, ".%03ldZ ", now.tv_nsec / 1000000);
    }
    fprintf(log->out, "%s[%s] %s%s\n", ts, LOG_TAG[lvl], text, tail ? tail : "");
    fflush(log->out);
}

static uint64_t log_hash(al_log_level lvl, const char *text) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)lvl; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return h ? h : 1;
}

/* A slot's window is over (or `all`): its summary, if lines were held back. */
static void log_close(const al_log *log, al_log_seen *e, double now, int all) {
    if (!e->h || (!all && now - e->t0 < log->window_s)) return;
    if (e->n > AL_LOG_BURST) {
        char tail[96];
        snprintf(tail, sizeof tail, " (repeated %ld times in %.3g s)", e->n - AL_LOG_BURST,
                 e->t_last - e->t0);
        log_line(log, (al_log_level)(e->h >> 62), e->text, tail);
    }
    e->h = 0;
}

void al_logf(const al_log *log, al_log_level lvl, const char *fmt, ...) {
    if (!log || lvl < log->min) return;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (!log->ready) { /* (a logger set up by hand: no rate limit) */
        log_line(log, lvl, text, NULL);
        return;
    }
    al_log *m = (al_log *)log; /* the table is the logger's own mutable state */
    pthread_mutex_lock(&m->mu);
    double now = al_now();
    /* the level rides in the hash's top two bits (for the summary line) */
    uint64_t h = (log_hash(lvl, text) & ~(3ULL << 62)) | (uint64_t)lvl << 62;
    al_log_seen *hit = NULL, *free_slot = NULL, *oldest = NULL;
    for (int i = 0; i < AL_LOG_SLOTS; i++) {
        al_log_seen *e = &m->seen[i];
        log_close(log, e, now, 0);
        if (e->h == h && !strncmp(e->text, text, sizeof e->text - 1)) hit = e;
        if (!e->h && !free_slot) free_slot = e;
        if (e->h && (!oldest || e->t_last < oldest->t_last)) oldest = e;
    }
    int show = 1;
    if (hit) {
        hit->n++;
        hit->t_last = now;
        show = hit->n <= AL_LOG_BURST;
    } else {
        if (!free_slot) { /* the least recent line leaves the table, with its summary */
            log_close(log, oldest, now, 1);
            free_slot = oldest;
        }
        free_slot->h = h;
        free_slot->t0 = free_slot->t_last = now;
        free_slot->n = 1;
        size_t n = AL_MIN(strlen(text), sizeof free_slot->text - 1);
        memcpy(free_slot->text, text, n);
        free_slot->text[n] = 0;
    }
    if (show) log_line(log, lvl, text, NULL);
    pthread_mutex_unlock(&m->mu);
}

void al_log_flush(const al_log *log) {
    if (!log || !log->ready) return;
    al_log *m = (al_log *)log;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < AL_LOG_SLOTS; i++) log_close(log, &m->seen[i], al_now(), 1);
    pthread_mutex_unlock(&m->mu);
}

/* ---- time ---------------------------------------------------------------- */

static double ts_seconds(const struct timespec *ts) {
    return (double)ts->tv_sec + 1e-9 * (double)ts->tv_nsec;
}

static struct timespec seconds_ts(double s) {
    struct timespec ts = {(time_t)s, 0};
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) { /* rounding */
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    if (ts.tv_nsec < 0) ts.tv_nsec = 0;
    return ts;
}

double al_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts_seconds(&ts);
}

double al_wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* display and files only: see al_base.h */
    return ts_seconds(&ts);
}

void al_sleep(double s) {
    if (!(s > 0)) return;
    struct timespec ts = seconds_ts(s);
    clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
}

int al_cond_init(pthread_cond_t *cv, al_err *err) {
    pthread_condattr_t at;
    int rc = pthread_condattr_init(&at);
    if (rc) return al_errf(err, AL_ENOMEM, "condition variable: attributes: %s", strerror(rc));
    rc = pthread_condattr_setclock(&at, CLOCK_MONOTONIC);
    if (!rc) rc = pthread_cond_init(cv, &at);
    pthread_condattr_destroy(&at);
    if (rc)
        return al_errf(err, rc == ENOMEM ? AL_ENOMEM : AL_EUNSUPPORTED,
                       "condition variable on the monotonic clock: %s", strerror(rc));
    return 0;
}

int al_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, double deadline) {
    if (isinf(deadline) && deadline > 0) {
        pthread_cond_wait(cv, mu);
        return 1;
    }
    /* (a deadline already past still waits, for no time: the caller's loop
     * sees 0 and stops) */
    struct timespec ts = seconds_ts(AL_MAX(0.0, deadline));
    return pthread_cond_timedwait(cv, mu, &ts) != ETIMEDOUT;
}

/* ---- RNG ----------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void al_rng_seed(al_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t al_rng_u64(al_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double al_rng_uniform(al_rng *r) {
    return (double)(al_rng_u64(r) >> 11) * 0x1.0p-53;
}

uint64_t al_rng_below(al_rng *r, uint64_t n) {
    /* Rejection sampling keeps the result exactly uniform. */
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = al_rng_u64(r);
    while (x >= lim);
    return x % n;
}

double al_rng_normal(al_rng *r) {
    double u1 = al_rng_uniform(r), u2 = al_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* ---- hashing ------------------------------------------------------------- */

void al_hex(const void *data, size_t n, char *hex) {
    static const char digits[] = "0123456789abcdef";
    const unsigned char *d = data;
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[2 * n] = '\0';
}

void al_sha256_hex(const void *data, size_t n, char hex[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    EVP_Digest(data, n, md, &mdlen, EVP_sha256(), NULL);
    al_hex(md, mdlen, hex);
}

int al_sha256_file(const char *path, char hex[65], al_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return al_errf(err, AL_EIO, "%s: cannot open: %s", path, strerror(errno));
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) {
        fclose(f);
        return al_errf(err, AL_ENOMEM, "sha256: out of memory");
    }
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    unsigned char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) EVP_DigestUpdate(ctx, buf, got);
    int bad = ferror(f);
    fclose(f);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    if (bad) return al_errf(err, AL_EIO, "%s: read error", path);
    al_hex(md, mdlen, hex);
    return 0;
}

uint64_t al_fnv1a64(const void *data, size_t n, uint64_t h) {
    const unsigned char *p = data;
    if (h == 0) h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* ---- files --------------------------------------------------------------- */

int al_read_file(const char *path, char **data, size_t *len, al_err *err) {
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return al_errf(err, AL_EIO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return al_errf(err, AL_ENOMEM, "%s: out of memory", path);
    }
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return al_errf(err, AL_ENOMEM, "%s: out of memory", path);
            }
            buf = nb;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return al_errf(err, AL_EIO, "%s: read error", path);
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

int al_write_file_sync(const char *path, const void *data, size_t len, al_err *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return al_errf(err, AL_EIO, "%s: cannot create: %s", path, strerror(errno));
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            return al_errf(err, AL_EIO, "%s: write failed: %s", path, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return al_errf(err, AL_EIO, "%s: fsync failed: %s", path, strerror(e));
    }
    if (close(fd) != 0) return al_errf(err, AL_EIO, "%s: close failed: %s", path, strerror(errno));
    return 0;
}

int al_mkdirs(const char *path, al_err *err) {
    char tmp[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp) return al_errf(err, AL_EINVAL, "bad directory path '%s'", path);
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] == '/' || tmp[i] == '\0') {
            char c = tmp[i];
            tmp[i] = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return al_errf(err, AL_EIO, "%s: cannot create directory: %s", tmp,
                               strerror(errno));
            tmp[i] = c;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return al_errf(err, AL_EIO, "%s: not a directory", path);
    if (access(path, W_OK) != 0)
        return al_errf(err, AL_EIO, "%s: directory not writable: %s", path, strerror(errno));
    return 0;
}

int al_fsync_dir(const char *path, al_err *err) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return al_errf(err, AL_EIO, "%s: cannot open directory: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0) return al_errf(err, AL_EIO, "%s: fsync failed: %s", path, strerror(e));
    return 0;
}

int al_remove_tree(const char *path, al_err *err) {
    DIR *d = opendir(path);
    if (!d) {
        if (errno == ENOENT) return 0;
        if (errno == ENOTDIR) {
            if (unlink(path) != 0)
                return al_errf(err, AL_EIO, "%s: cannot remove: %s", path, strerror(errno));
            return 0;
        }
        return al_errf(err, AL_EIO, "%s: cannot open: %s", path, strerror(errno));
    }
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            rc = al_remove_tree(sub, err);
        else if (unlink(sub) != 0)
            rc = al_errf(err, AL_EIO, "%s: cannot remove: %s", sub, strerror(errno));
    }
    closedir(d);
    if (rc == 0 && rmdir(path) != 0)
        rc = al_errf(err, AL_EIO, "%s: cannot remove: %s", path, strerror(errno));
    return rc;
}

/* ---- threads ------------------------------------------------------------- */

/* Subnormal floats (|x| < FLT_MIN, 1.2e-38) cost a microcode assist on x86
 * and arm64 cores: tens to hundreds of cycles an operation instead of one. A
 * model that grows confident makes them in its activation gradients: with
 * attention probabilities near 0, the attention's gradient for q, k and v is
 * (`autoloco bench subnormal`, text that is mostly one letter: 28 % of block
 * 0's after 300 steps), and every matmul that reads it slows. There a step
 * took 25 ms instead of 6, and test_hostile's agents went from 7 to 60 ms a
 * step within 200 steps. With flush-to-zero a subnormal result is written as
 * 0, with denormals-are-zero a subnormal input is read as 0: an error below
 * 1.2e-38 absolute, under any tolerance a float model has (that bench's loss
 * agreed to 6 digits). The mode is a register of each thread (MXCSR, FPCR),
 * inherited by the threads and processes it starts afterwards: its OpenMP
 * pool among them, if it has none yet. (One that exists is not
 * reached: a parallel region here would start the pool in a parent that then
 * forks its ODC workers, and libgomp hangs in a child whose parent has one.)
 */
void al_fp_flush_subnormals(void) {
#if defined(__SSE__) || defined(__x86_64__)
    _mm_setcsr(_mm_getcsr() | 0x8040); /* FTZ (bit 15) | DAZ (bit 6) */
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | (1ull << 24))); /* FZ */
#endif
}

int al_fp_flushes_subnormals(void) {
    volatile float tiny = FLT_MIN, half = 0.5f;
    float x = tiny * half; /* FLT_MIN / 2: a subnormal, or 0 with FTZ */
    uint32_t u;
    memcpy(&u, &x, sizeof u); /* the bits: with DAZ, x == 0 would hold either way */
    return u == 0;
}

void al_threads_set(int n) {
    if (n < 1) n = 1;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    al_fp_flush_subnormals();
}

int al_threads_get(void) {
    return omp_get_max_threads();
}
