/* groups.c -- the groups file beside a token file: which documents came from
 * which input of `data prep --groups` (see al_data.h). */
#include "al_data.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void al_groups_path(char *out, size_t cap, const char *bin) {
    size_t n = strlen(bin);
    if (n > 4 && !strcmp(bin + n - 4, ".bin"))
        snprintf(out, cap, "%.*s.groups", (int)(n - 4), bin);
    else
        snprintf(out, cap, "%s.groups", bin);
}

bool al_group_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n >= AL_GROUP_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* One "NAME FIRST END" line into group g->n. */
static int parse_line(al_groups *g, char *row, int line, al_err *err) {
    const char *p = g->path;
    char name[128];
    unsigned long long a, b;
    char extra;
    if (sscanf(row, "%127s %llu %llu %c", name, &a, &b, &extra) != 3)
        return al_errf(err, AL_EFORMAT, "%s:%d: expected 'NAME FIRST END', got '%s'", p, line, row);
    if (!al_group_name_ok(name))
        return al_errf(err, AL_EFORMAT,
                       "%s:%d: group name '%s': 1 to %d characters of A-Z a-z 0-9 . _ -", p, line,
                       name, AL_GROUP_NAME_MAX - 1);
    if (g->n == AL_GROUPS_MAX)
        return al_errf(err, AL_EFORMAT, "%s:%d: more than %d groups", p, line, AL_GROUPS_MAX);
    size_t want = g->n ? g->first[g->n] : 0;
    if (a != want || b <= a)
        return al_errf(err, AL_EFORMAT,
                       "%s:%d: group '%s' spans documents [%llu, %llu): expected it to start at "
                       "%zu (where the previous one ends) and to hold at least one",
                       p, line, name, a, b, want);
    for (int k = 0; k < g->n; k++)
        if (!strcmp(g->name[k], name))
            return al_errf(err, AL_EFORMAT, "%s:%d: group '%s' named twice", p, line, name);
    memcpy(g->name[g->n], name, strlen(name) + 1); /* al_group_name_ok: it fits */
    g->first[g->n] = (size_t)a;
    g->first[++g->n] = (size_t)b;
    return 0;
}

int al_groups_load(al_groups *g, const char *bin, al_err *err) {
    memset(g, 0, sizeof *g);
    al_groups_path(g->path, sizeof g->path, bin);
    char *s;
    size_t n;
    FILE *f = fopen(g->path, "rb");
    if (!f)
        return al_errf(err, errno == ENOENT ? AL_ENOTFOUND : AL_EIO, "%s: cannot open: %s", g->path,
                       strerror(errno));
    fclose(f);
    int rc = al_read_file(g->path, &s, &n, err);
    if (rc) return rc;
    int line = 0;
    for (size_t i = 0; rc == 0 && i < n;) {
        size_t eol = i;
        while (eol < n && s[eol] != '\n') eol++;
        line++;
        char row[256];
        size_t len = eol - i;
        if (len >= sizeof row) {
            rc = al_errf(err, AL_EFORMAT, "%s:%d: line too long", g->path, line);
            break;
        }
        memcpy(row, s + i, len);
        row[len] = '\0';
        size_t k = 0;
        while (row[k] == ' ' || row[k] == '\t' || row[k] == '\r') k++;
        if (row[k] && row[k] != '#') rc = parse_line(g, row + k, line, err);
        i = eol + 1;
    }
    free(s);
    if (rc == 0 && g->n == 0) rc = al_errf(err, AL_EFORMAT, "%s: no groups", g->path);
    return rc;
}

int al_groups_check(const al_groups *g, const al_tokens *t, al_err *err) {
    if (g->n < 1 || g->first[0] != 0 || g->first[g->n] != t->ndocs)
        return al_errf(err, AL_EMISMATCH,
                       "%s: the groups cover documents [0, %zu) but %s holds %zu (the groups "
                       "file does not belong to this token file; run data prep again)",
                       g->path, g->n ? g->first[g->n] : 0, t->path, t->ndocs);
    return 0;
}

int al_groups_write(const al_groups *g, const char *bin, al_err *err) {
    char path[600];
    al_groups_path(path, sizeof path, bin);
    FILE *f = fopen(path, "w");
    if (!f) return al_errf(err, AL_EIO, "%s: cannot create: %s", path, strerror(errno));
    int ok = fprintf(f, "# autoloco data prep --groups: the documents of this token file by "
                        "group\n# NAME FIRST END: documents [FIRST, END)\n") > 0;
    for (int k = 0; ok && k < g->n; k++)
        ok = fprintf(f, "%s %zu %zu\n", g->name[k], g->first[k], g->first[k + 1]) > 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok) return al_errf(err, AL_EIO, "%s: write failed", path);
    return 0;
}
