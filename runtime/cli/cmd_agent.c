/* cmd_agent.c -- `autoloco agent -c site.ini` and `autoloco config check FILE`. */
#include "al_agent.h"
#include "al_cli.h"
#include "al_store.h"

#include <getopt.h>
#include <string.h>

static void agent_usage(FILE *f) {
    fprintf(f, "usage: autoloco agent -c SITE.ini [--set section.key=value]... [--resume PATH]\n\n"
               "Run one site of a multi-site training run: local training ([inner], W workers\n"
               "with [inner] workers), rounds with the [peers] over mutual TLS ([tls]), the\n"
               "outer optimizer ([outer]) and sync-interval policy ([policy]), checkpoints\n"
               "([checkpoint]), the JSONL event log ([log]) and the dashboard ([dashboard]).\n"
               "SIGINT/SIGTERM: finish the current round, save a checkpoint, exit 0.\n"
               "--resume continues from the\n"
               "newest valid checkpoint under PATH; a site behind its peers rejoins them.\n"
               "--resume auto: from [checkpoint] dir if it holds a checkpoint, else a fresh\n"
               "start (for a service manager's restarts: docs/operations.md).\n"
               "Every key: autoloco train --help-config.\n");
}

/* Load -c files and --set overrides into c (shared by agent and config check). */
static int load_config(al_config *c, int argc, char **argv, const char **resume, al_err *err) {
    static const struct option opts[] = {{"config", required_argument, 0, 'c'},
                                         {"set", required_argument, 0, 's'},
                                         {"resume", required_argument, 0, 'r'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int rc = al_config_init(c, err), ch, have = 0;
    if (rc) return rc;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        if (ch == 'c') {
            if ((rc = al_config_load(c, optarg, err))) return rc;
            have = 1;
        } else if (ch == 's') {
            if ((rc = al_config_set_arg(c, optarg, err))) return rc;
        } else if (ch == 'r' && resume) {
            *resume = optarg;
        } else if (ch == 'h') {
            agent_usage(stdout);
            return AL_CLI_USAGE;
        } else {
            agent_usage(stderr);
            return AL_CLI_USAGE;
        }
    }
    if (!have) return al_errf(err, AL_ECONFIG, "agent: no configuration (-c SITE.ini)");
    return 0;
}

int al_cmd_agent(int argc, char **argv, al_err *err) {
    al_config c;
    const char *resume = NULL;
    int rc = load_config(&c, argc, argv, &resume, err);
    if (rc == AL_CLI_USAGE && argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
        rc = 0;
    if (rc == 0 && resume && strcmp(resume, "auto") == 0) {
        /* a checkpoint folder that is missing or holds no step-* is a first
         * start; one whose checkpoints all fail their checks is an error (the
         * agent says which) */
        char dir[4200];
        al_err e = {0};
        resume = c.checkpoint_dir;
        if (al_ckpt_find(resume, NULL, dir, sizeof dir, &e) == AL_ENOTFOUND) {
            fprintf(stderr, "autoloco agent: --resume auto: %s: a fresh start\n", e.msg);
            resume = NULL;
        }
    }
    if (rc == 0) {
        al_agent_opts o = {resume, 0};
        rc = al_agent_run(&c, &o, err);
    }
    al_config_free(&c);
    return rc;
}

int al_cmd_config(int argc, char **argv, al_err *err) {
    if (argc != 3 || strcmp(argv[1], "check") != 0) {
        fprintf(stderr, "usage: autoloco config check SITE.ini\n");
        return AL_CLI_USAGE;
    }
    al_config c;
    int rc = al_config_init(&c, err);
    if (rc == 0) rc = al_config_load(&c, argv[2], err);
    if (rc == 0) rc = al_agent_check_config(&c, err);
    if (rc == 0) {
        char h[65];
        al_config_hash(&c, h);
        printf("%s: ok (site %s, %d peer(s), config hash %.16s)\n", argv[2], c.site_name, c.peers.n,
               h);
    }
    al_config_free(&c);
    return rc;
}
