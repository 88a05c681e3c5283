/* cmd_agent.c -- `autoloco agent -c site.ini` and `autoloco config check FILE...` (one
 * site, or the sites of one run together). */
#include "al_agent.h"
#include "al_cli.h"
#include "al_store.h"
#include "al_transport.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void agent_usage(FILE *f) {
    fprintf(f, "usage: autoloco agent -c SITE.ini [--set section.key=value]... [--resume PATH | "
               "--fresh]\n\n"
               "Run one site of a multi-site training run: local training ([inner], W workers\n"
               "with [inner] workers), rounds with the [peers] over mutual TLS ([tls]), the\n"
               "outer optimizer ([outer]) and sync-interval policy ([policy]), checkpoints\n"
               "([checkpoint]), the JSONL event log ([log]) and the dashboard ([dashboard]).\n"
               "SIGINT/SIGTERM/SIGHUP: the round in progress has [round] heartbeat_s to\n"
               "commit; then the last committed state is saved and the agent exits 0.\n"
               "--resume continues from the\n"
               "newest valid checkpoint under PATH; a site behind its peers rejoins them.\n"
               "--resume auto: from [checkpoint] dir if it holds a checkpoint, else a fresh\n"
               "start (for a service manager's restarts: docs/operations.md).\n"
               "--fresh: start at step 0 even if [checkpoint] dir holds checkpoints (without\n"
               "--resume or --fresh such a start is refused).\n"
               "Every key: autoloco train --help-config.\n");
}

/* Load -c files and --set overrides into c (shared by agent and config check). */
static int load_config(al_config *c, int argc, char **argv, const char **resume, int *fresh,
                       al_err *err) {
    static const struct option opts[] = {
        {"config", required_argument, 0, 'c'}, {"set", required_argument, 0, 's'},
        {"resume", required_argument, 0, 'r'}, {"fresh", no_argument, 0, 'f'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
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
        } else if (ch == 'f' && fresh) {
            *fresh = 1;
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
    int fresh = 0;
    int rc = load_config(&c, argc, argv, &resume, &fresh, err);
    if (rc == 0 && resume && fresh)
        rc = al_errf(err, AL_EINVAL, "agent: --resume and --fresh: say one of them");
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
    if (rc == 0 && !resume) rc = al_cli_fresh_ok("agent", c.checkpoint_dir, fresh, err);
    if (rc == 0) {
        al_agent_opts o = {resume, 0};
        rc = al_agent_run(&c, &o, err);
    }
    al_config_free(&c);
    return rc;
}

/* "host:port" -> port (0 if none) and the host part into host. */
static int split_addr(const char *addr, char *host, size_t cap) {
    const char *colon = strrchr(addr, ':');
    snprintf(host, cap, "%.*s", colon ? (int)(colon - addr) : (int)strlen(addr), addr);
    return colon ? atoi(colon + 1) : 0;
}

static int wildcard(const char *host) {
    return !host[0] || !strcmp(host, "0.0.0.0") || !strcmp(host, "::") || !strcmp(host, "[::]");
}

/* The checks across the sites of one run (n >= 2 files, each valid alone). */
static int check_sites(al_config *c, char **file, int n, al_err *err) {
    for (int i = 0; i < n; i++) {
        /* names distinct, and each the CN of its certificate */
        for (int j = 0; j < i; j++)
            if (!strcmp(c[i].site_name, c[j].site_name))
                return al_errf(err, AL_ECONFIG, "%s and %s: both are [site] name = %s", file[j],
                               file[i], c[i].site_name);
        if (!c[i].tls_insecure) {
            char *pem, cn[AL_SITE_MAX + 1];
            size_t len;
            int rc = al_read_file(c[i].tls_cert, &pem, &len, err);
            if (rc == 0) {
                rc = al_cert_site(pem, len, cn, err);
                free(pem);
            }
            if (rc == 0 && strcmp(cn, c[i].site_name) != 0)
                rc = al_errf(err, AL_ECONFIG,
                             "[tls] cert: %s names site '%s' (its CN), but [site] name = %s",
                             c[i].tls_cert, cn, c[i].site_name);
            if (rc) {
                al_err_prefix(err, "%s", file[i]);
                return rc;
            }
        }
        /* the keys every site must share: against the first file */
        char key[128], va[512], vb[512];
        if (i > 0 && strcmp(c[0].site_run_id, c[i].site_run_id) != 0)
            return al_errf(err, AL_ECONFIG, "[site] run_id differs: %s has %s, %s has %s", file[0],
                           c[0].site_run_id, file[i], c[i].site_run_id);
        if (i > 0 && al_config_run_diff(&c[0], &c[i], key, sizeof key, va, vb, sizeof va) != 0)
            return al_errf(err, AL_ECONFIG,
                           "%s differs: %s has %s, %s has %s (every site of a run must agree)", key,
                           file[0], va, file[i], vb);
        char r0[65], ri[65]; /* what the sites will compare at start-up */
        al_config_run_hash(&c[0], r0);
        al_config_run_hash(&c[i], ri);
        if (strcmp(r0, ri) != 0)
            return al_errf(err, AL_ECONFIG,
                           "%s and %s agree key by key but their run hashes differ (%.16s, %.16s): "
                           "a bug, please report it",
                           file[0], file[i], r0, ri);
        if (i > 0 && !c[0].tls_insecure && !c[i].tls_insecure) {
            char h0[65], hi[65];
            int rc = al_sha256_file(c[0].tls_ca, h0, err);
            if (rc == 0) rc = al_sha256_file(c[i].tls_ca, hi, err);
            if (rc) return rc;
            if (strcmp(h0, hi) != 0)
                return al_errf(err, AL_ECONFIG,
                               "[tls] ca differs: %s has %s, %s has %s (not the same CA: the "
                               "sites would refuse each other)",
                               file[0], c[0].tls_ca, file[i], c[i].tls_ca);
        }
        if (i > 0 && c[0].tls_insecure != c[i].tls_insecure)
            return al_errf(err, AL_ECONFIG, "[tls] insecure differs: %s has %ld, %s has %ld",
                           file[0], c[0].tls_insecure, file[i], c[i].tls_insecure);
        /* peers listed both ways, at the port the peer listens on */
        for (int k = 0; k < c[i].peers.n; k++) {
            const al_kv *kv = &c[i].peers.items[k];
            int j = 0;
            while (j < n && strcmp(c[j].site_name, kv->key) != 0) j++;
            if (j == n)
                return al_errf(err, AL_ECONFIG,
                               "%s:%d: [peers] %s: no file given here has [site] name = %s",
                               file[i], kv->line, kv->key, kv->key);
            int back = 0;
            for (int m = 0; m < c[j].peers.n; m++)
                back |= !strcmp(c[j].peers.items[m].key, c[i].site_name);
            if (!back)
                return al_errf(
                    err, AL_ECONFIG,
                    "%s lists %s in [peers], but %s does not list %s: peers go both ways", file[i],
                    kv->key, file[j], c[i].site_name);
            char h1[256], h2[256];
            int p1 = split_addr(kv->value, h1, sizeof h1),
                p2 = split_addr(c[j].site_listen, h2, sizeof h2);
            /* a site listening on loopback only is reachable at loopback only */
            int loop1 = !strcmp(h1, "127.0.0.1") || !strcmp(h1, "localhost");
            if (p1 != p2 || (!strcmp(h2, "127.0.0.1") && !loop1))
                return al_errf(err, AL_ECONFIG,
                               "%s:%d: [peers] %s = %s, but %s has [site] listen = %s", file[i],
                               kv->line, kv->key, kv->value, file[j], c[j].site_listen);
        }
        if (c[i].peers.n != n - 1)
            return al_errf(err, AL_ECONFIG,
                           "%s: [peers] lists %d site(s), but %d files were given: every site "
                           "lists all the others",
                           file[i], c[i].peers.n, n);
    }
    /* ports distinct where two endpoints share a host (gRPC and dashboards) */
    char host[2 * 64][256], what[2 * 64][700];
    int port[2 * 64], ne = 0;
    for (int i = 0; i < n && ne + 2 <= 2 * 64; i++) {
        port[ne] = split_addr(c[i].site_listen, host[ne], sizeof host[0]);
        snprintf(what[ne++], sizeof what[0], "%s: [site] listen = %s", file[i], c[i].site_listen);
        if (c[i].dashboard_port > 0) {
            snprintf(host[ne], sizeof host[0], "%s", c[i].dashboard_address);
            port[ne] = (int)c[i].dashboard_port;
            snprintf(what[ne++], sizeof what[0], "%s: [dashboard] port = %ld", file[i],
                     c[i].dashboard_port);
        }
    }
    for (int a = 0; a < ne; a++)
        for (int b = 0; b < a; b++)
            if (port[a] == port[b] &&
                (!strcmp(host[a], host[b]) || wildcard(host[a]) || wildcard(host[b])))
                return al_errf(err, AL_ECONFIG, "port %d used twice on %s: %s and %s", port[a],
                               wildcard(host[a]) ? host[b] : host[a], what[b], what[a]);
    return 0;
}

int al_cmd_config(int argc, char **argv, al_err *err) {
    if (argc >= 2 && !strcmp(argv[1], "doc")) { /* the reference, from the table */
        if (argc == 2 || (argc == 3 && !strcmp(argv[2], "--text"))) {
            al_config_print_help(stdout);
            return 0;
        }
        if (argc == 3 && !strcmp(argv[2], "--markdown")) {
            al_config_print_markdown(stdout);
            return 0;
        }
        fprintf(stderr, "usage: autoloco config doc [--markdown]   (docs/config.md: --markdown)\n");
        return AL_CLI_USAGE;
    }
    if (argc < 3 || strcmp(argv[1], "check") != 0 || argc - 2 > 256) {
        fprintf(stderr, "usage: autoloco config check SITE.ini [SITE.ini...]\n"
                        "       autoloco config doc [--markdown]   every key: --help-config's "
                        "text, or docs/config.md\n\n"
                        "One file: that site alone. Several (every site of one run): also\n"
                        "names distinct and each its certificate's CN, one CA, peers listed\n"
                        "both ways at the ports they listen on, ports distinct on a shared host,\n"
                        "and the keys every site must share agree (a difference is named with\n"
                        "both values); prints the run hash the sites compare at start-up.\n");
        return AL_CLI_USAGE;
    }
    int n = argc - 2, rc = 0, done = 0;
    al_config *c = calloc((size_t)n, sizeof *c);
    if (!c) return al_errf(err, AL_ENOMEM, "config check: out of memory");
    for (; done < n && rc == 0; done++) {
        rc = al_config_init(&c[done], err);
        if (rc == 0) rc = al_config_load(&c[done], argv[2 + done], err);
        if (rc == 0) rc = al_agent_check_config(&c[done], err);
        if (rc && n > 1 && !strstr(err->msg, argv[2 + done]))
            al_err_prefix(err, "%s", argv[2 + done]);
        if (rc == 0) {
            char h[65];
            al_config_hash(&c[done], h);
            printf("%s: ok (site %s, %d peer(s), config hash %.16s)\n", argv[2 + done],
                   c[done].site_name, c[done].peers.n, h);
        }
    }
    if (rc == 0 && n > 1) rc = check_sites(c, argv + 2, n, err);
    if (rc == 0 && n > 1) {
        char h[65];
        al_config_run_hash(&c[0], h);
        printf("%d sites agree: run hash %.16s\n", n, h);
    }
    for (int i = 0; i < done; i++) al_config_free(&c[i]);
    free(c);
    return rc;
}
