/* certs.c -- `autoloco certs`: a run's CA and per-site keys and certificates
 * (see al_certs_create in transport/al_transport.h), and what goes to which
 * datacenter: one bundle per site, the CA key apart. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "al_cli.h"
#include "al_transport.h"

static void usage(FILE *f) {
    fprintf(f, "usage: autoloco certs --dir DIR --sites a,b,... [--days N]\n\n"
               "Creates the run's CA (or reuses DIR's) and, for every site, a key and a\n"
               "certificate: EC P-256, CN = site, SANs DNS:<site>, localhost, 127.0.0.1, ::1.\n"
               "What goes where:\n"
               "  DIR/<site>/      the site's bundle, copied to that datacenter only:\n"
               "                   ca.pem, <site>.pem, <site>.key (0600)\n"
               "  DIR/ca/          ca.pem and ca.key (0600): the CA key stays with whoever\n"
               "                   adds sites later; no site needs it\n"
               "  DIR/*.pem, *.key the same files flat, for runs on one machine (demo, tests)\n"
               "Keys are mode 0600, folders 0700. Existing site files are never overwritten.\n");
}

/* Copy src to dst (created with mode; refused if dst exists). */
static int copy_new(const char *src, const char *dst, mode_t mode, al_err *err) {
    char *data;
    size_t len;
    int rc = al_read_file(src, &data, &len, err);
    if (rc) return rc;
    int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        free(data);
        return al_errf(err, AL_EIO, "certs: %s: cannot create: %s", dst, strerror(errno));
    }
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    free(data);
    if (off < len || fsync(fd) != 0) rc = al_errf(err, AL_EIO, "certs: %s: write failed", dst);
    if (close(fd) != 0 && !rc) rc = al_errf(err, AL_EIO, "certs: %s: close failed", dst);
    return rc;
}

/* DIR/<name>/, mode 0700; an existing one must not hold the files we write. */
static int bundle_dir(const char *dir, const char *name, char *out, size_t cap, al_err *err) {
    snprintf(out, cap, "%s/%s", dir, name);
    if (mkdir(out, 0700) != 0 && errno != EEXIST)
        return al_errf(err, AL_EIO, "certs: %s: cannot create: %s", out, strerror(errno));
    return 0;
}

/* The bundles: DIR/ca/{ca.pem, ca.key} (once) and DIR/<site>/{ca.pem,
 * <site>.pem, <site>.key} for the sites just created. */
static int write_bundles(const char *dir, const char *const *names, size_t n, al_err *err) {
    char d[4096], src[4200], dst[4300];
    int rc = bundle_dir(dir, "ca", d, sizeof d, err);
    static const char *const CA[] = {"ca.pem", "ca.key"};
    for (size_t f = 0; !rc && f < 2; f++) {
        snprintf(src, sizeof src, "%s/%s", dir, CA[f]);
        snprintf(dst, sizeof dst, "%s/%s", d, CA[f]);
        if (access(dst, F_OK) != 0) rc = copy_new(src, dst, f ? 0600 : 0644, err);
    }
    for (size_t i = 0; !rc && i < n; i++) {
        rc = bundle_dir(dir, names[i], d, sizeof d, err);
        const char *files[3][2] = {{"ca", "pem"}, {names[i], "pem"}, {names[i], "key"}};
        for (size_t f = 0; !rc && f < 3; f++) {
            snprintf(src, sizeof src, "%s/%s.%s", dir, files[f][0], files[f][1]);
            snprintf(dst, sizeof dst, "%s/%s.%s", d, files[f][0], files[f][1]);
            rc = copy_new(src, dst, f == 2 ? 0600 : 0644, err);
        }
    }
    return rc;
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
    if (!rc) rc = write_bundles(dir, names, n, err);
    if (!rc) {
        printf("certs: %zu site(s) in %s\n", n, dir);
        for (size_t i = 0; i < n; i++)
            printf("  %s/%s/  -> datacenter %s only (ca.pem, %s.pem, %s.key)\n", dir, names[i],
                   names[i], names[i], names[i]);
        printf("  %s/ca/  -> the CA key: keep it offline, give it to no site\n", dir);
    }
    free(copy);
    return rc;
}
