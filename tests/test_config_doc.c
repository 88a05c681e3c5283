/* test_config_doc.c DOCS/config.md -- the reference lists exactly the keys the
 * parser accepts (issue 36): every key it lists is accepted (its default
 * value, by al_config_set: in sim's configuration, and in train's and the
 * agent's unless it is read by sim only, where those must refuse it; [policy]
 * keys by that policy's al_policy_set), and every key of the parser's table
 * (al_config_dump) and of every policy (al_policy_setting_at) is listed. */
#include "al_policy.h"
#include "al_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXK = 512 };
static char listed[MAXK][256];
static int nlisted, fails;

static void fail(const char *what, const char *detail) {
    printf("FAIL: %s: %s\n", what, detail);
    fails++;
}

/* the n-th cell (0-based) of a Markdown table row, trimmed, into out */
static void cell(const char *row, int n, char *out, size_t cap) {
    const char *p = row;
    for (int i = 0; i <= n && p; i++) {
        p = strchr(p, '|');
        while (p && p > row && p[-1] == '\\') p = strchr(p + 1, '|');
        if (p) p++;
    }
    out[0] = '\0';
    if (!p) return;
    const char *e = p;
    while (*e && !(*e == '|' && e[-1] != '\\')) e++;
    while (p < e && *p == ' ') p++;
    while (e > p && e[-1] == ' ') e--;
    snprintf(out, cap, "%.*s", (int)(e - p), p);
}

/* the first `...` of s */
static void code(const char *s, char *out, size_t cap) {
    const char *a = strchr(s, '`'), *b = a ? strchr(a + 1, '`') : NULL;
    if (!b) {
        out[0] = '\0';
        return;
    }
    snprintf(out, cap, "%.*s", (int)(b - a - 1), a + 1);
}

static void check_key(const char *sec, const char *key, const char *def, const char *use) {
    char what[512];
    snprintf(what, sizeof what, "[%s] %s = %s", sec, key, def);
    if (!strcmp(def, "''")) def = "";
    al_config c;
    al_err err = {0};
    if (al_config_init_sim(&c, &err)) return fail(what, err.msg);
    if (al_config_set(&c, sec, key, def, &err)) fail(what, err.msg);
    al_config_free(&c);
    if (al_config_init(&c, &err)) return fail(what, err.msg);
    int rc = al_config_set(&c, sec, key, def, &err);
    bool agent = strstr(use, "train") || strstr(use, "agent");
    if (agent && rc) fail(what, err.msg);
    if (!agent && rc == 0) fail(what, "train and the agent accept a key only sim reads");
    al_config_free(&c);
}

static void check_policy(const char *name, const char *key, const char *def) {
    char what[512];
    snprintf(what, sizeof what, "[policy] name = %s: %s = %s", name, key, def);
    al_policy *p;
    al_err err = {0};
    if (al_policy_create(&p, name, &err)) return fail(what, err.msg);
    if (al_policy_set(p, key, def, &err)) fail(what, err.msg);
    al_policy_free(p);
}

static bool is_listed(const char *k) {
    for (int i = 0; i < nlisted; i++)
        if (!strcmp(listed[i], k)) return true;
    return false;
}

int main(int argc, char **argv) {
    FILE *f = argc == 2 ? fopen(argv[1], "r") : NULL;
    if (!f) {
        fprintf(stderr, "usage: test_config_doc docs/config.md\n");
        return 2;
    }
    char line[4096], sec[64] = "", pol[64] = "";
    bool aliases = false;
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strncmp(line, "## [", 4)) {
            snprintf(sec, sizeof sec, "%.*s", (int)strcspn(line + 4, "]"), line + 4);
            pol[0] = '\0';
            continue;
        }
        if (!strncmp(line, "### [policy] name = ", 20)) {
            snprintf(pol, sizeof pol, "%.63s", line + 20);
            snprintf(listed[nlisted++], sizeof listed[0], "policy:%s", pol);
            continue;
        }
        if (!strncmp(line, "## ", 3)) {
            aliases = strstr(line, "Older spellings") != NULL;
            sec[0] = '\0';
            continue;
        }
        if (strncmp(line, "| `", 3)) continue;
        char k[128], key[96], def[256], d[256], use[64];
        cell(line, 0, k, sizeof k);
        code(k, key, sizeof key);
        rows++;
        if (aliases) { /* | `[sim] iid` | `[sim] scenario` ... |: sim accepts it */
            char s2[64], k2[64];
            if (sscanf(key, "[%63[^]]] %63s", s2, k2) != 2) {
                fail("older spelling", line);
                continue;
            }
            al_config c;
            al_err err = {0};
            const char *v = !strcmp(k2, "iid") ? "true" : !strcmp(k2, "progress") ? "lr" : "fp32";
            if (al_config_init_sim(&c, &err) || al_config_set(&c, s2, k2, v, &err))
                fail(key, err.msg);
            al_config_free(&c);
            continue;
        }
        cell(line, 2, d, sizeof d);
        code(d, def, sizeof def);
        cell(line, 5, use, sizeof use);
        if (nlisted >= MAXK) return fail("too many keys", ""), 1;
        if (!strcmp(sec, "policy")) {
            snprintf(listed[nlisted++], sizeof listed[0], "policy%s%s.%s", pol[0] ? ":" : "", pol,
                     key);
            if (!strcmp(key, "name")) continue;
            for (size_t i = 0; !pol[0] && i < al_policy_count(); i++)
                check_policy(al_policy_name_at(i), key, def);
            if (pol[0]) check_policy(pol, key, def);
            continue;
        }
        snprintf(listed[nlisted++], sizeof listed[0], "%s.%s", sec, key);
        check_key(sec, key, def, use);
    }
    fclose(f);
    if (rows < 50) fail("docs/config.md", "fewer than 50 keys: not the reference?");
    /* the other way: every key of the parser's table, every policy setting */
    al_config c;
    al_err err = {0};
    if (al_config_init_sim(&c, &err)) return fail("init", err.msg), 1;
    char *dump = al_config_dump(&c);
    for (char *l = strtok(dump, "\n"); l; l = strtok(NULL, "\n")) {
        char k[96];
        snprintf(k, sizeof k, "%.*s", (int)strcspn(l, " "), l);
        if (strncmp(k, "policy.", 7) && !is_listed(k)) fail(k, "accepted but not listed");
    }
    free(dump);
    al_config_free(&c);
    al_policy_setting p;
    for (size_t i = 0; al_policy_setting_at(NULL, i, &p); i++) {
        char k[96];
        snprintf(k, sizeof k, "policy.%s", p.key);
        if (!is_listed(k)) fail(k, "accepted but not listed");
    }
    for (size_t n = 0; n < al_policy_count(); n++) {
        const char *name = al_policy_name_at(n);
        char k[96];
        snprintf(k, sizeof k, "policy:%s", name);
        if (!is_listed(k)) fail(k, "a policy not listed");
        for (size_t i = 0; al_policy_setting_at(name, i, &p); i++) {
            snprintf(k, sizeof k, "policy:%s.%s", name, p.key);
            if (!is_listed(k)) fail(k, "accepted but not listed");
        }
    }
    printf("%d keys listed, %d failures\n", nlisted, fails);
    return fails ? 1 : 0;
}
