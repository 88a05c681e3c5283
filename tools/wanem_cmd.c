/* wanem_cmd.c -- `autoloco wanem`: run the WAN emulator (al_wanem.h) as its
 * own process between two sites, until SIGINT / SIGTERM or --duration. */
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#include "al_cli.h"
#include "al_wanem.h"

static void usage(FILE *f) {
    fprintf(f, "usage: autoloco wanem --listen HOST:PORT --to HOST:PORT [--rate-mbit R]\n"
               "         [--delay-ms D] [--jitter-ms J] [--cut-at S] [--cut-after-bytes N]\n"
               "         [--refuse-for S] [--duration S]\n\n"
               "A TCP proxy that limits the rate (per direction), adds latency +- jitter, and\n"
               "cuts every connection (RST) at S seconds or after N bytes client -> server,\n"
               "then refuses new connections for --refuse-for seconds. TLS passes untouched.\n\n"
               "Signals: SIGUSR1 cuts every connection (RST) and refuses new ones (accept,\n"
               "then RST) until SIGUSR2, which accepts again; SIGINT/SIGTERM stop the proxy\n"
               "and print its byte and connection counts.\n");
}

int al_cmd_wanem(int argc, char **argv, al_err *err) {
    al_wanem_cfg cfg = {.listen = "127.0.0.1:0"};
    double duration = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            usage(stderr);
            return AL_CLI_USAGE;
        }
        const char *f = argv[i], *v = argv[++i];
        long l;
        int rc = 0;
        if (!strcmp(f, "--listen"))
            cfg.listen = v;
        else if (!strcmp(f, "--to"))
            cfg.target = v;
        else if (!strcmp(f, "--rate-mbit"))
            rc = al_cli_double(f, v, &cfg.rate_mbit, err);
        else if (!strcmp(f, "--delay-ms"))
            rc = al_cli_double(f, v, &cfg.delay_ms, err);
        else if (!strcmp(f, "--jitter-ms"))
            rc = al_cli_double(f, v, &cfg.jitter_ms, err);
        else if (!strcmp(f, "--cut-at"))
            rc = al_cli_double(f, v, &cfg.cut_at_s, err);
        else if (!strcmp(f, "--refuse-for"))
            rc = al_cli_double(f, v, &cfg.refuse_s, err);
        else if (!strcmp(f, "--duration"))
            rc = al_cli_double(f, v, &duration, err);
        else if (!strcmp(f, "--cut-after-bytes")) {
            rc = al_cli_int(f, v, 0, (long)(~0ul >> 1), &l, err);
            cfg.cut_after_bytes = (uint64_t)l;
        } else {
            usage(stderr);
            return AL_CLI_USAGE;
        }
        if (rc) return rc;
    }
    if (!cfg.target) {
        usage(stderr);
        return AL_CLI_USAGE;
    }
    al_log log;
    al_log_init(&log, AL_LOG_INFO, stderr);
    cfg.log = &log;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* the proxy thread inherits the mask */
    al_wanem *w;
    int rc = al_wanem_start(&cfg, &w, err);
    if (rc) return rc;
    printf("wanem: 127.0.0.1:%d -> %s\n", al_wanem_port(w), cfg.target);
    fflush(stdout);
    double end = al_now() + duration;
    int sig = SIGUSR2;
    while (sig == SIGUSR1 || sig == SIGUSR2) {
        if (duration > 0) {
            double left = AL_MAX(0.0, end - al_now());
            struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
            sig = sigtimedwait(&set, NULL, &ts);
        } else if (sigwait(&set, &sig))
            sig = -1;
        if (sig == SIGUSR1 || sig == SIGUSR2) al_wanem_hold(w, sig == SIGUSR1);
    }
    al_wanem_stats st;
    al_wanem_stats_get(w, &st);
    al_wanem_stop(w);
    printf("wanem: %llu bytes up, %llu down, %d connections, %d cuts, %d refused\n",
           (unsigned long long)st.up, (unsigned long long)st.down, st.connections, st.cuts,
           st.refused);
    return 0;
}
