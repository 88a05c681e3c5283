/* certs.c -- `autoloco certs`: a run's CA and per-site keys and certificates
 * (see al_certs_create in transport/al_transport.h). */
#include <stdlib.h>
#include <string.h>

#include "al_cli.h"
#include "al_transport.h"

static void usage(FILE *f) {
    fprintf(f, "usage: autoloco certs --dir DIR --sites a,b,... [--days N]\n\n"
               "Creates DIR/ca.pem + ca.key (or reuses them) and, for every site, DIR/<site>.pem\n"
               "and DIR/<site>.key (mode 0600): EC P-256, CN = site, SANs DNS:<site>, localhost,\n"
               "127.0.0.1, ::1. Existing site files are never overwritten.\n");
}

int al_cmd_certs(int argc, char **argv, al_err *err) {
    const char *dir = NULL, *sites = NULL;
    long days = 365;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) break;
        if (!strcmp(argv[i], "--dir"))
            dir = argv[++i];
        else if (!strcmp(argv[i], "--sites"))
            sites = argv[++i];
        else if (!strcmp(argv[i], "--days")) {
            int rc = al_cli_int("--days", argv[++i], 1, 36500, &days, err);
            if (rc) return rc;
        } else {
            usage(stderr);
            return AL_CLI_USAGE;
        }
    }
    if (!dir || !sites) {
        usage(stderr);
        return AL_CLI_USAGE;
    }
    char *copy = strdup(sites);
    const char *names[AL_MEMBERS_MAX];
    size_t n = 0;
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t && n < AL_MEMBERS_MAX;
         t = strtok_r(NULL, ",", &save))
        names[n++] = t;
    int rc = al_certs_create(dir, names, n, (int)days, err);
    if (!rc) printf("certs: %zu site(s) in %s\n", n, dir);
    free(copy);
    return rc;
}
