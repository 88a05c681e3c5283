/* main.c -- the `autoloco` command: dispatch to subcommands, one-line errors. */
#include "al_cli.h"
#include "al_store.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef AL_VERSION
#define AL_VERSION "0.1.0"
#endif

static void usage(FILE *f) {
    fprintf(f, "usage: autoloco <command> [options]\n\ncommands:\n");
#define AL_CMD_HELP(name, fn, summary) fprintf(f, "  %-10s %s\n", name, summary);
    AL_COMMANDS(AL_CMD_HELP)
#undef AL_CMD_HELP
    fprintf(f, "\n'autoloco <command> --help' describes each command.\n");
}

int al_cli_fresh_ok(const char *cmd, const char *dir, int fresh, al_err *err) {
    char found[4200];
    al_err e = {0};
    int rc = al_ckpt_find(dir, NULL, found, sizeof found, &e);
    if (fresh || rc == AL_ENOTFOUND) return 0;
    return al_errf(err, AL_EPERM,
                   "%s: [checkpoint] dir '%s' holds checkpoints (%s): --resume %s continues from "
                   "them, --fresh starts over at step 0 and may write over them",
                   cmd, dir, rc == 0 ? found : e.msg, dir);
}

int al_cmd_version(int argc, char **argv, al_err *err) {
    (void)argc;
    (void)argv;
    (void)err;
    printf("autoloco %s\n", AL_VERSION);
    return 0;
}

int al_cmd_bench(int argc, char **argv, al_err *err) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: autoloco bench <name> [options]\n\nbenchmarks:\n");
#define AL_BENCH_HELP(name, fn, summary) fprintf(f, "  %-10s %s\n", name, summary);
        AL_BENCHES(AL_BENCH_HELP)
#undef AL_BENCH_HELP
        return argc < 2 ? AL_CLI_USAGE : 0;
    }
#define AL_BENCH_RUN(name, fn, summary)                                                            \
    if (!strcmp(argv[1], name)) return fn(argc - 1, argv + 1, err);
    AL_BENCHES(AL_BENCH_RUN)
#undef AL_BENCH_RUN
    return al_errf(err, AL_EINVAL, "unknown benchmark '%s' (see 'autoloco bench --help')", argv[1]);
}

int al_cli_int(const char *flag, const char *s, long lo, long hi, long *out, al_err *err) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0')
        return al_errf(err, AL_EINVAL, "%s: '%s' is not an integer", flag, s);
    if (v < lo || v > hi)
        return al_errf(err, AL_EINVAL, "%s: %ld is out of range [%ld, %ld]", flag, v, lo, hi);
    *out = v;
    return 0;
}

int al_cli_double(const char *flag, const char *s, double *out, al_err *err) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0')
        return al_errf(err, AL_EINVAL, "%s: '%s' is not a number", flag, s);
    *out = v;
    return 0;
}

/* libgomp reads its settings when it loads, before main. Its default waits at
 * barriers by spinning for ~0.3M iterations: when another process holds one of
 * the cores (another site, a worker, anything) the spinning thread burns the
 * time slice its partner needs, and a 2-thread step ran 7x slower here
 * (docs/results/inner.md). A short spin then sleep costs nothing when the cores
 * are free. So, unless the user chose, set it and start again. */
static void tune_openmp(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    setenv("GOMP_SPINCOUNT", "1000", 1);
    execv("/proc/self/exe", argv); /* on failure: carry on with the defaults */
}

/* glibc serves blocks >= 128 KiB (rising with use, up to 32 MiB) with mmap
 * and unmaps them on free; gRPC allocates every received message's buffers
 * afresh, so each shard chunk was paid for again in page faults (a third of
 * the receiving side's CPU over mTLS). Blocks up to 8 MiB now come from the
 * heap, and up to 64 MiB of free heap top is kept for reuse: the receiving
 * side's CPU per GB fell from ~1.8 to ~1.2 s (docs/results/transport.md). */
static void tune_malloc(void) {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 8 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

int main(int argc, char **argv) {
    tune_openmp(argv);
    tune_malloc();
    /* before any thread or process starts: every one of them inherits it
     * (al_threads_set sets it again where a thread's kernels begin) */
    al_fp_flush_subnormals();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) argv[1] = "version";
    al_err err = {0};
    int rc = 1;
    int found = 0;
#define AL_CMD_RUN(name, fn, summary)                                                              \
    if (!found && !strcmp(argv[1], name)) {                                                        \
        found = 1;                                                                                 \
        rc = fn(argc - 1, argv + 1, &err);                                                         \
    }
    AL_COMMANDS(AL_CMD_RUN)
#undef AL_CMD_RUN
    if (!found) {
        fprintf(stderr, "autoloco: unknown command '%s' (see 'autoloco --help')\n", argv[1]);
        return 2;
    }
    if (rc == 0) return 0;
    if (rc == AL_CLI_USAGE) return 2;
    fprintf(stderr, "autoloco: error: %s\n", err.msg[0] ? err.msg : al_strerror(rc));
    return 1;
}
