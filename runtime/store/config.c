/* config.c -- strict INI configuration driven by AL_CONFIG_TABLE (see al_store.h). */
#include "al_store.h"
#include "al_policy.h"
#include "al_train.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum { T_INT, T_DBL, T_STR, T_BOOL } ktype;
#define AL_KT_INT  T_INT
#define AL_KT_DBL  T_DBL
#define AL_KT_STR  T_STR
#define AL_KT_BOOL T_BOOL

/* Generic view of one table row. */
typedef struct keydesc {
    const char *section, *key, *help, *unit, *use;
    ktype type;
    size_t offset;
    long ilo, ihi;
    double dlo, dhi;
    const char *choices; /* STR */
    long idef;
    double ddef;
    const char *sdef;
} keydesc;

/* Per-type helpers so one X-macro row becomes one keydesc initialiser. */
#define KD_INT(def, lo, hi)  .ilo = (long)(lo), .ihi = (long)(hi), .idef = (long)(def)
#define KD_DBL(def, lo, hi)  .dlo = (double)(lo), .dhi = (double)(hi), .ddef = (double)(def)
#define KD_STR(def, lo, hi)  .choices = (lo), .sdef = (def)
#define KD_BOOL(def, lo, hi) .ilo = 0, .ihi = 1, .idef = (long)(def)

static const keydesc KEYS[] = {
#define AL_CFG_ROW(sec, k, ty, def, lo, hi, un, us, hlp)                                           \
    {.section = #sec,                                                                              \
     .key = #k,                                                                                    \
     .help = hlp,                                                                                  \
     .unit = un,                                                                                   \
     .use = us,                                                                                    \
     .type = AL_KT_##ty,                                                                           \
     .offset = offsetof(al_config, sec##_##k),                                                     \
     KD_##ty(def, lo, hi)},
    AL_CONFIG_TABLE(AL_CFG_ROW)
#undef AL_CFG_ROW
};
#define NKEYS (sizeof KEYS / sizeof KEYS[0])

/* sim's extra values, older spellings and defaults (al_store.h) */
typedef struct simvalue {
    const char *section, *key, *value, *help;
} simvalue;
static const simvalue SIM_VALUES[] = {
#define AL_CFG_SV(sec, k, v, hlp) {#sec, #k, v, hlp},
    AL_CONFIG_SIM_VALUES(AL_CFG_SV)
#undef AL_CFG_SV
};
typedef struct alias {
    const char *section, *key, *to_section, *to_key, *values;
} alias;
static const alias ALIASES[] = {
#define AL_CFG_AL(sec, k, ts, tk, vals) {#sec, #k, #ts, #tk, vals},
    AL_CONFIG_ALIASES(AL_CFG_AL)
#undef AL_CFG_AL
};
typedef struct simdef {
    const char *section, *key, *value;
} simdef;
static const simdef SIM_DEFAULTS[] = {
#define AL_CFG_SD(sec, k, v) {#sec, #k, v},
    AL_CONFIG_SIM_DEFAULTS(AL_CFG_SD)
#undef AL_CFG_SD
};

static const keydesc *find_key(const char *section, const char *key, int *section_known);

static bool sim_only(const keydesc *k) {
    return !strchr(k->use, 't') && !strchr(k->use, 'a');
}

static long *ifield(al_config *c, const keydesc *k) {
    return (long *)((char *)c + k->offset);
}
static double *dfield(al_config *c, const keydesc *k) {
    return (double *)((char *)c + k->offset);
}
static char **sfield(al_config *c, const keydesc *k) {
    return (char **)((char *)c + k->offset);
}

int al_config_init_sim(al_config *c, al_err *err) {
    int rc = al_config_init(c, err);
    c->sim = 1;
    for (size_t i = 0; i < AL_ARRAY_LEN(SIM_DEFAULTS) && rc == 0; i++)
        rc = al_config_set(c, SIM_DEFAULTS[i].section, SIM_DEFAULTS[i].key, SIM_DEFAULTS[i].value,
                           err);
    if (rc) al_config_free(c);
    memset(c->given, 0, sizeof c->given);
    return rc;
}

_Static_assert(NKEYS <= sizeof((al_config *)0)->given, "al_config.given: too few");

bool al_config_given(const al_config *c, const char *section, const char *key) {
    int known;
    const keydesc *k = find_key(section, key, &known);
    return k && c->given[k - KEYS];
}

int al_config_init(al_config *c, al_err *err) {
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < NKEYS; i++) {
        const keydesc *k = &KEYS[i];
        if (k->type == T_INT || k->type == T_BOOL)
            *ifield(c, k) = k->idef;
        else if (k->type == T_DBL)
            *dfield(c, k) = k->ddef;
        else if (!(*sfield(c, k) = strdup(k->sdef))) {
            al_config_free(c);
            return al_errf(err, AL_ENOMEM, "config: out of memory");
        }
    }
    return 0;
}

static void kv_free(al_kvlist *l) {
    for (int i = 0; i < l->n; i++) {
        free(l->items[i].key);
        free(l->items[i].value);
    }
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

void al_config_free(al_config *c) {
    for (size_t i = 0; i < NKEYS; i++)
        if (KEYS[i].type == T_STR) {
            free(*sfield(c, &KEYS[i]));
            *sfield(c, &KEYS[i]) = NULL;
        }
#define AL_CFG_OPEN_FREE(sec) kv_free(&c->sec);
    AL_CONFIG_OPEN_SECTIONS(AL_CFG_OPEN_FREE)
#undef AL_CFG_OPEN_FREE
}

/* The open section named `section`, or NULL. */
static al_kvlist *open_section(al_config *c, const char *section) {
#define AL_CFG_OPEN_FIND(sec)                                                                      \
    if (!strcmp(section, #sec)) return &c->sec;
    AL_CONFIG_OPEN_SECTIONS(AL_CFG_OPEN_FIND)
#undef AL_CFG_OPEN_FIND
    return NULL;
}

/* Add or replace key in an open section. */
static int kv_set(al_kvlist *l, const char *key, const char *value, int line, al_err *err) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->items[i].key, key)) {
            char *v = strdup(value);
            if (!v) return al_errf(err, AL_ENOMEM, "config: out of memory");
            free(l->items[i].value);
            l->items[i].value = v;
            l->items[i].line = line;
            return 0;
        }
    al_kv *ni = realloc(l->items, (size_t)(l->n + 1) * sizeof *ni);
    if (!ni) return al_errf(err, AL_ENOMEM, "config: out of memory");
    l->items = ni;
    al_kv *kv = &l->items[l->n];
    kv->key = strdup(key);
    kv->value = strdup(value);
    kv->line = line;
    if (!kv->key || !kv->value) {
        free(kv->key);
        free(kv->value);
        return al_errf(err, AL_ENOMEM, "config: out of memory");
    }
    l->n++;
    return 0;
}

static int choice_ok(const char *choices, const char *v) {
    size_t n = strlen(v);
    const char *p = choices;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !strncmp(p, v, n)) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

static int parse_bool(const char *v, long *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no",
                                                                                "off", "0"};
    for (size_t i = 0; i < AL_ARRAY_LEN(yes); i++) {
        if (!strcmp(v, yes[i])) return *out = 1, 0;
        if (!strcmp(v, no[i])) return *out = 0, 0;
    }
    return -1;
}

/* sim's extra value for k matching v, or NULL */
static const simvalue *sim_value(const keydesc *k, const char *v) {
    for (size_t i = 0; i < AL_ARRAY_LEN(SIM_VALUES); i++) {
        const simvalue *x = &SIM_VALUES[i];
        if (strcmp(x->section, k->section) || strcmp(x->key, k->key)) continue;
        if (!strcmp(x->value, v)) return x;
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (!strcmp(x->value, "<integer>") && !errno && end != v && !*end && n >= -1) return x;
    }
    return NULL;
}

/* Set key k from text; on failure writes "[sec] key: why" into err (sec and
 * key as written: an alias names itself). */
static int set_value(al_config *c, const keydesc *k, const char *sec, const char *key,
                     const char *v, al_err *err) {
    char *end;
    errno = 0;
    switch (k->type) {
    case T_BOOL:
        c->given[k - KEYS] = 1;
        if (parse_bool(v, ifield(c, k)))
            return al_errf(err, AL_ECONFIG, "[%s] %s: '%s' is not true or false", sec, key, v);
        return 0;
    case T_INT: {
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end != '\0')
            return al_errf(err, AL_ECONFIG, "[%s] %s: '%s' is not an integer", sec, key, v);
        if (x < k->ilo || x > k->ihi)
            return al_errf(err, AL_ECONFIG, "[%s] %s: %ld is out of range [%ld, %ld]", sec, key, x,
                           k->ilo, k->ihi);
        *ifield(c, k) = x;
        c->given[k - KEYS] = 1;
        return 0;
    }
    case T_DBL: {
        double x = strtod(v, &end);
        if (errno || end == v || *end != '\0' || !isfinite(x))
            return al_errf(err, AL_ECONFIG, "[%s] %s: '%s' is not a number", sec, key, v);
        if (x < k->dlo || x > k->dhi)
            return al_errf(err, AL_ECONFIG, "[%s] %s: %g is out of range [%g, %g]", sec, key, x,
                           k->dlo, k->dhi);
        *dfield(c, k) = x;
        c->given[k - KEYS] = 1;
        return 0;
    }
    case T_STR:
        if (k->choices && !choice_ok(k->choices, v) && !(c->sim && sim_value(k, v))) {
            const simvalue *x = NULL;
            for (size_t i = 0; c->sim && i < AL_ARRAY_LEN(SIM_VALUES) && !x; i++)
                if (!strcmp(SIM_VALUES[i].section, k->section) &&
                    !strcmp(SIM_VALUES[i].key, k->key))
                    x = &SIM_VALUES[i];
            return al_errf(err, AL_ECONFIG, "[%s] %s: '%s' is not one of %s%s%s%s", sec, key, v,
                           k->choices, x ? " (sim also: " : "", x ? x->value : "", x ? ")" : "");
        }
        char *s = strdup(v);
        if (!s) return al_errf(err, AL_ENOMEM, "config: out of memory");
        free(*sfield(c, k));
        *sfield(c, k) = s;
        c->given[k - KEYS] = 1;
        return 0;
    }
    return AL_EINVAL;
}

static const keydesc *find_key(const char *section, const char *key, int *section_known) {
    *section_known = 0;
    for (size_t i = 0; i < NKEYS; i++) {
        if (strcmp(KEYS[i].section, section) != 0) continue;
        *section_known = 1;
        if (!strcmp(KEYS[i].key, key)) return &KEYS[i];
    }
    return NULL;
}

/* Resolve one assignment as the parser sees it: an alias (sim only) to its
 * key and value (into vbuf), then the key; 0, or AL_ECONFIG naming it. */
static int lookup(const al_config *c, const char **sec, const char **key, const char **v,
                  char *vbuf, size_t vcap, const keydesc **out, al_err *err) {
    const char *s0 = *sec, *k0 = *key;
    for (size_t i = 0; c->sim && i < AL_ARRAY_LEN(ALIASES); i++) {
        const alias *a = &ALIASES[i];
        if (strcmp(a->section, s0) || strcmp(a->key, k0)) continue;
        *sec = a->to_section;
        *key = a->to_key;
        if (!a->values) break;
        const char *p = a->values;
        size_t n = strlen(*v);
        for (;;) { /* "old=new|..." */
            const char *eq = strchr(p, '='), *bar = strchr(p, '|');
            size_t len = bar ? (size_t)(bar - p) : strlen(p);
            if (eq && (size_t)(eq - p) == n && !strncmp(p, *v, n)) {
                snprintf(vbuf, vcap, "%.*s", (int)(len - n - 1), eq + 1);
                *v = vbuf;
                break;
            }
            if (!bar)
                return al_errf(err, AL_ECONFIG, "[%s] %s: '%s' is not true or false", s0, k0, *v);
            p = bar + 1;
        }
        break;
    }
    int known;
    const keydesc *k = find_key(*sec, *key, &known);
    if (!k && !known) return al_errf(err, AL_ECONFIG, "unknown section [%s] (key '%s')", s0, k0);
    if (!k) return al_errf(err, AL_ECONFIG, "[%s] %s: unknown key", s0, k0);
    if (!c->sim && sim_only(k))
        return al_errf(err, AL_ECONFIG, "[%s] %s: only autoloco sim reads this key", s0, k0);
    *out = k;
    *sec = s0;
    *key = k0;
    return 0;
}

typedef struct load_ctx {
    al_config *c;
    al_err *err;
    int failed;
    int line; /* counted by the reader below: the handler is told no line */
} load_ctx;

static int on_ini_key(void *user, const char *section, const char *name, const char *value) {
    load_ctx *x = user;
    if (x->failed) return 1; /* keep the first error only */
    al_kvlist *open = open_section(x->c, section);
    if (open) {
        if (kv_set(open, name, value, x->line, x->err)) {
            x->failed = 1;
            return 0;
        }
        return 1;
    }
    const keydesc *k;
    char vbuf[64];
    int rc = lookup(x->c, &section, &name, &value, vbuf, sizeof vbuf, &k, x->err);
    if (rc == 0) rc = set_value(x->c, k, section, name, value, x->err);
    if (rc) {
        x->failed = 1;
        return 0; /* ini_parse then returns this line number */
    }
    return 1;
}

/* ini_parse_stream reader that counts lines, so open-section entries keep theirs */
static char *read_line(char *buf, int size, void *stream) {
    load_ctx *x = ((void **)stream)[1];
    char *r = fgets(buf, size, ((void **)stream)[0]);
    if (r) x->line++;
    return r;
}

int al_config_load(al_config *c, const char *path, al_err *err) {
    FILE *f = fopen(path, "r");
    if (!f) return al_errf(err, AL_EIO, "config %s: cannot open: %s", path, strerror(errno));
    load_ctx x = {c, err, 0, 0};
    void *stream[2] = {f, &x};
    snprintf(c->path, sizeof c->path, "%s", path);
    int line = ini_parse_stream(read_line, stream, on_ini_key, &x);
    fclose(f);
    if (line == 0) return 0;
    if (x.failed) return al_err_prefix(err, "%s:%d", path, line);
    return al_errf(err, AL_ECONFIG, "%s:%d: syntax error (expected [section] or key = value)", path,
                   line);
}

int al_config_set(al_config *c, const char *section, const char *key, const char *value,
                  al_err *err) {
    al_kvlist *open = open_section(c, section);
    if (open) return kv_set(open, key, value, 0, err);
    const keydesc *k;
    char vbuf[64];
    int rc = lookup(c, &section, &key, &value, vbuf, sizeof vbuf, &k, err);
    return rc ? rc : set_value(c, k, section, key, value, err);
}

int al_config_set_arg(al_config *c, const char *a, al_err *err) {
    const char *dot = strchr(a, '.'), *eq = strchr(a, '=');
    if (!dot || !eq || dot > eq)
        return al_errf(err, AL_ECONFIG, "--set '%s': expected section.key=value", a);
    char section[64], key[64];
    if ((size_t)(dot - a) >= sizeof section || (size_t)(eq - dot - 1) >= sizeof key)
        return al_errf(err, AL_ECONFIG, "--set '%s': name too long", a);
    snprintf(section, sizeof section, "%.*s", (int)(dot - a), a);
    snprintf(key, sizeof key, "%.*s", (int)(eq - dot - 1), dot + 1);
    int rc = al_config_set(c, section, key, eq + 1, err);
    return rc ? al_err_prefix(err, "--set") : 0;
}

char *al_config_dump(const al_config *c) {
    size_t cap = 4096, n = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    out[0] = '\0';
    for (size_t i = 0; i < NKEYS; i++) {
        const keydesc *k = &KEYS[i];
        char line[1200];
        al_config *cc = (al_config *)c;
        if (k->type == T_INT)
            snprintf(line, sizeof line, "%s.%s = %ld\n", k->section, k->key, *ifield(cc, k));
        else if (k->type == T_BOOL)
            snprintf(line, sizeof line, "%s.%s = %s\n", k->section, k->key,
                     *ifield(cc, k) ? "true" : "false");
        else if (k->type == T_DBL)
            snprintf(line, sizeof line, "%s.%s = %.17g\n", k->section, k->key, *dfield(cc, k));
        else
            snprintf(line, sizeof line, "%s.%s = %s\n", k->section, k->key, *sfield(cc, k));
        size_t l = strlen(line);
        if (n + l + 1 > cap) {
            cap = 2 * (n + l + 1);
            char *nb = realloc(out, cap);
            if (!nb) {
                free(out);
                return NULL;
            }
            out = nb;
        }
        memcpy(out + n, line, l + 1);
        n += l;
    }
    /* open sections, in the order given */
    const al_kvlist *lists[] = {
#define AL_CFG_OPEN_LIST(sec) &c->sec,
        AL_CONFIG_OPEN_SECTIONS(AL_CFG_OPEN_LIST)
#undef AL_CFG_OPEN_LIST
    };
    const char *names[] = {
#define AL_CFG_OPEN_NAME(sec) #sec,
        AL_CONFIG_OPEN_SECTIONS(AL_CFG_OPEN_NAME)
#undef AL_CFG_OPEN_NAME
    };
    for (size_t s = 0; s < AL_ARRAY_LEN(lists); s++)
        for (int i = 0; i < lists[s]->n; i++) {
            char line[1200];
            snprintf(line, sizeof line, "%s.%s = %s\n", names[s], lists[s]->items[i].key,
                     lists[s]->items[i].value);
            size_t l = strlen(line);
            if (n + l + 1 > cap) {
                cap = 2 * (n + l + 1);
                char *nb = realloc(out, cap);
                if (!nb) {
                    free(out);
                    return NULL;
                }
                out = nb;
            }
            memcpy(out + n, line, l + 1);
            n += l;
        }
    return out;
}

void al_config_hash(const al_config *c, char hex[65]) {
    char *d = al_config_dump(c);
    al_sha256_hex(d ? d : "", d ? strlen(d) : 0, hex);
    free(d);
}

/* Keys every site of a run must share: the model, the training recipe, the
 * outer optimizer and the policy (not paths, ports, threads or deadlines). */
static int run_key(const char *line) {
    static const char *const prefixes[] = {"model.",
                                           "data.packing ",
                                           "inner.batch ",
                                           "inner.seq ",
                                           "inner.accum ",
                                           "inner.steps ",
                                           "inner.lr ",
                                           "inner.warmup ",
                                           "inner.min_lr_frac ",
                                           "inner.weight_decay ",
                                           "inner.beta1 ",
                                           "inner.beta2 ",
                                           "inner.eps ",
                                           "inner.grad_clip ",
                                           "inner.seed ",
                                           "outer.",
                                           "policy.",
                                           "round.min_sites "};
    for (size_t i = 0; i < AL_ARRAY_LEN(prefixes); i++)
        if (!strncmp(line, prefixes[i], strlen(prefixes[i]))) return 1;
    return 0;
}

static int line_cmp(const void *x, const void *y) {
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* An open section's value as the run text writes it: a number in one
 * spelling (%.17g: "100", "1e2" and "100.0" are the same H), anything else
 * as written. */
static void canon_value(char *out, size_t cap, const char *v) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end != v && *end == '\0' && errno == 0 && isfinite(x))
        snprintf(out, cap, "%.17g", x);
    else
        snprintf(out, cap, "%s", v);
}

char *al_config_run_text(const al_config *c) {
    char *d = al_config_dump(c);
    if (!d) return NULL;
    size_t n = 0, cap = 0;
    for (const char *q = d; *q; q++) cap += *q == '\n';
    char **lines = malloc((cap + 1) * sizeof *lines);
    char *out = malloc(2 * strlen(d) + 64 * (cap + 1) + 1);
    if (!lines || !out) {
        free(lines);
        free(out);
        free(d);
        return NULL;
    }
    /* run-key lines, the open sections' numbers in one spelling, in one order */
    size_t w = 0;
    for (char *line = d; *line;) {
        char *eol = strchr(line, '\n');
        if (eol) *eol = '\0';
        if (run_key(line)) {
            const char *eq = strstr(line, " = ");
            char *o = out + w;
            if (eq && !strncmp(line, "policy.", 7)) {
                char v[1100];
                canon_value(v, sizeof v, eq + 3);
                w += (size_t)sprintf(o, "%.*s = %s", (int)(eq - line), line, v) + 1;
            } else {
                w += (size_t)sprintf(o, "%s", line) + 1;
            }
            lines[n++] = o;
        }
        if (!eol) break;
        line = eol + 1;
    }
    qsort(lines, n, sizeof *lines, line_cmp);
    char *text = malloc(w + 1);
    if (text) {
        size_t t = 0;
        for (size_t i = 0; i < n; i++) {
            size_t l = strlen(lines[i]);
            memcpy(text + t, lines[i], l);
            text[t + l] = '\n';
            t += l + 1;
        }
        text[t] = '\0';
    }
    free(lines);
    free(out);
    free(d);
    return text;
}

void al_config_run_hash(const al_config *c, char hex[65]) {
    char *t = al_config_run_text(c);
    al_sha256_hex(t ? t : "", t ? strlen(t) : 0, hex);
    free(t);
}

/* The run text's lines in place: returns the line count (at most cap). */
static int text_lines(char *d, char **lines, int cap) {
    int n = 0;
    for (char *line = d; *line && n < cap;) {
        char *eol = strchr(line, '\n');
        if (eol) *eol = '\0';
        lines[n++] = line;
        if (!eol) break;
        line = eol + 1;
    }
    return n;
}

/* "section.key = value" -> its key part's length */
static size_t key_len(const char *line) {
    const char *eq = strstr(line, " = ");
    return eq ? (size_t)(eq - line) : strlen(line);
}

/* A dumped value for a message: numbers written %.17g shown as %.15g (0.003,
 * not 0.0030000000000000001), anything else as it is. */
static void shown(char *out, size_t cap, const char *v) {
    char *end;
    double x = strtod(v, &end);
    if (end != v && *end == '\0' && strchr(v, '.'))
        snprintf(out, cap, "%.15g", x);
    else
        snprintf(out, cap, "%s", v);
}

int al_config_run_text_diff(const char *ta, const char *tb, char *key, size_t kcap, char *va,
                            char *vb, size_t vcap) {
    char *da = strdup(ta ? ta : ""), *db = strdup(tb ? tb : ""), *la[512], *lb[512];
    if (!da || !db) {
        free(da);
        free(db);
        return -1;
    }
    int na = text_lines(da, la, 512), nb = text_lines(db, lb, 512), found = 0;
    /* every key of a against b, then b's keys a lacks */
    for (int pass = 0; pass < 2 && !found; pass++) {
        char **x = pass ? lb : la, **y = pass ? la : lb;
        int nx = pass ? nb : na, ny = pass ? na : nb;
        for (int i = 0; i < nx && !found; i++) {
            size_t kl = key_len(x[i]);
            const char *other = NULL;
            for (int j = 0; j < ny && !other; j++)
                if (key_len(y[j]) == kl && !strncmp(x[i], y[j], kl)) other = y[j];
            const char *vx = x[i][kl] ? x[i] + kl + 3 : "";
            if (other && !strcmp(vx, other[kl] ? other + kl + 3 : "")) continue;
            found = 1;
            const char *dot = memchr(x[i], '.', kl);
            size_t sl = dot ? (size_t)(dot - x[i]) : 0;
            snprintf(key, kcap, "[%.*s] %.*s", (int)sl, x[i], (int)(kl - sl - (dot != NULL)),
                     x[i] + sl + (dot != NULL));
            const char *vo = other ? (other[kl] ? other + kl + 3 : "") : "(not set)";
            shown(pass ? vb : va, vcap, vx);
            shown(pass ? va : vb, vcap, vo);
        }
    }
    free(da);
    free(db);
    return found;
}

int al_config_run_diff(const al_config *a, const al_config *b, char *key, size_t kcap, char *va,
                       char *vb, size_t vcap) {
    char *ta = al_config_run_text(a), *tb = al_config_run_text(b);
    int rc = ta && tb ? al_config_run_text_diff(ta, tb, key, kcap, va, vb, vcap) : -1;
    free(ta);
    free(tb);
    return rc;
}

/* ---- the reference: --help-config and docs/config.md ------------------------------- */

static const char *sim_default(const char *section, const char *key) {
    for (size_t i = 0; i < AL_ARRAY_LEN(SIM_DEFAULTS); i++)
        if (!strcmp(SIM_DEFAULTS[i].section, section) && !strcmp(SIM_DEFAULTS[i].key, key))
            return SIM_DEFAULTS[i].value;
    return NULL;
}

static void fmt_default(const keydesc *k, char *out, size_t cap) {
    if (k->type == T_INT)
        snprintf(out, cap, "%ld", k->idef);
    else if (k->type == T_BOOL)
        snprintf(out, cap, "%s", k->idef ? "true" : "false");
    else if (k->type == T_DBL)
        snprintf(out, cap, "%g", k->ddef);
    else
        snprintf(out, cap, "%s", k->sdef[0] ? k->sdef : "''");
}

/* "a|b|c" as "a, b, c" */
static void fmt_choices(const char *choices, char *out, size_t cap) {
    size_t n = 0;
    for (const char *p = choices; *p && n + 3 < cap; p++) {
        if (*p == '|') {
            out[n++] = ',';
            out[n++] = ' ';
        } else
            out[n++] = *p;
    }
    out[n] = '\0';
}

static void fmt_range(const keydesc *k, char *out, size_t cap) {
    if (k->type == T_BOOL)
        snprintf(out, cap, "true, false");
    else if (k->type == T_STR && k->choices)
        fmt_choices(k->choices, out, cap);
    else if (k->type == T_STR)
        snprintf(out, cap, "text");
    else if (k->type == T_INT && k->ihi >= (1L << 30))
        snprintf(out, cap, ">= %ld", k->ilo);
    else if (k->type == T_INT)
        snprintf(out, cap, "%ld to %ld", k->ilo, k->ihi);
    else if (k->dhi >= 1e12)
        snprintf(out, cap, ">= %g", k->dlo);
    else
        snprintf(out, cap, "%g to %g", k->dlo, k->dhi);
}

static void fmt_use(const char *use, char *out, size_t cap) {
    static const char *const names[][2] = {{"t", "train"}, {"a", "agent"}, {"s", "sim"}};
    out[0] = '\0';
    for (size_t i = 0; i < AL_ARRAY_LEN(names); i++)
        if (strchr(use, names[i][0][0]))
            snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? ", " : "", names[i][1]);
}

static void fmt_policy_range(const al_policy_setting *p, char *out, size_t cap) {
    if (!strcmp(p->kind, "bool"))
        snprintf(out, cap, "true, false");
    else if (p->hi >= 1e9)
        snprintf(out, cap, ">= %g", p->lo);
    else
        snprintf(out, cap, "%g to %g", p->lo, p->hi);
}

/* One printer for both forms: md 1 = Markdown tables, 0 = --help-config text. */
static void key_row(FILE *f, int md, const char *key, const char *type, const char *def,
                    const char *simdef, const char *range, const char *unit, const char *use,
                    const char *help, const char *extra) {
    if (md) {
        fprintf(f, "| `%s` | %s | `%s`", key, type, def);
        if (simdef) fprintf(f, " (sim: `%s`)", simdef);
        fprintf(f, " | %s | %s | %s | ", range, unit, use);
        for (const char *p = help; *p; p++) fprintf(f, *p == '|' ? "\\|" : "%c", *p);
        fprintf(f, "%s |\n", extra);
        return;
    }
    fprintf(f, "  %s = %s%s%s%s\n      %s%s\n      %s: %s%s%s; read by %s\n", key, def,
            simdef ? " (sim: " : "", simdef ? simdef : "", simdef ? ")" : "", help, extra, type,
            range, unit[0] ? "; unit: " : "", unit, use);
}

static void print_ref(FILE *f, int md) {
    const char *hdr = "| key | type | default | range | unit | read by | meaning |\n"
                      "|---|---|---|---|---|---|---|\n";
    if (md)
        fprintf(f,
                "# Configuration reference\n\n"
                "<!-- Generated by `autoloco config doc --markdown > docs/config.md` from\n"
                "AL_CONFIG_TABLE (runtime/store/al_store.h) and the policies' registry\n"
                "(policies/); do not edit: tests/test_config_doc.sh regenerates it and checks\n"
                "every key against the parser. -->\n\n"
                "`autoloco train`, `autoloco agent` and `autoloco sim` read the same INI files\n"
                "(`-c FILE.ini`, then `--set section.key=value` overrides). An unknown section or\n"
                "key, or a bad value, is an error naming the file, line and key. *read by* names\n"
                "the commands whose results a key changes; `train` and `agent` refuse the keys\n"
                "only `sim` reads (so a file for the agents holds nothing they would ignore),\n"
                "while `sim` accepts every key and ignores those it does not read (a site's file\n"
                "can be simulated). `sim`'s defaults differ where a default says `(sim: ...)`:\n"
                "they are the headline sweep's configuration (`examples/sim-sweep.ini`); `sim`\n"
                "runs the `fixed` policy with `[outer] correction = none` (DiLoCo) unless the\n"
                "file sets it. The same text: `autoloco train --help-config`.\n");
    else
        fprintf(f, "Every configuration key (docs/config.md): default (sim's where it differs), "
                   "meaning,\ntype and range, read by. train and agent refuse the keys only sim "
                   "reads.\n");
    const char *last = "";
    for (size_t i = 0; i < NKEYS; i++) {
        const keydesc *k = &KEYS[i];
        if (strcmp(last, k->section) != 0) {
            last = k->section;
            if (md)
                fprintf(f, "\n## [%s]\n\n%s", last, hdr);
            else
                fprintf(f, "\n[%s]\n", last);
        }
        char def[128], range[160], use[64], extra[512] = "";
        fmt_default(k, def, sizeof def);
        fmt_range(k, range, sizeof range);
        fmt_use(k->use, use, sizeof use);
        for (size_t j = 0; j < AL_ARRAY_LEN(SIM_VALUES); j++)
            if (!strcmp(SIM_VALUES[j].section, k->section) && !strcmp(SIM_VALUES[j].key, k->key))
                snprintf(extra + strlen(extra), sizeof extra - strlen(extra),
                         "; sim also takes %s%s%s: %s", md ? "`" : "", SIM_VALUES[j].value,
                         md ? "`" : "", SIM_VALUES[j].help);
        static const char *const types[] = {
            [T_INT] = "integer", [T_DBL] = "number", [T_STR] = "string", [T_BOOL] = "boolean"};
        key_row(f, md, k->key, types[k->type], def, sim_default(k->section, k->key), range, k->unit,
                use, k->help, extra);
    }
    /* the open sections */
    if (md)
        fprintf(f, "\n## [peers]\n\nRead by the agent: one line per other site of the run, "
                   "`NAME = host:port` (NAME\nis the site's `[site] name`, the CN of its "
                   "certificate; the port is its `[site]\nlisten` port). Free-form: any "
                   "name.\n");
    else
        fprintf(f, "\n[peers]\n  NAME = host:port   one line per other site (agent): its [site] "
                   "name and listen address\n");
    if (md)
        fprintf(f,
                "\n## [policy]\n\nThe sync-interval policy (docs/outer.md, \"Policies\"): "
                "`name` and the settings\nof that policy; read by the agent and sim. Every "
                "policy has these:\n\n%s",
                hdr);
    else
        fprintf(f, "\n[policy]\n");
    char names[256] = "";
    for (size_t i = 0; i < al_policy_count(); i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                 al_policy_name_at(i));
    key_row(f, md, "name", "string", "(required)", sim_default("policy", "name"), names, "",
            "agent, sim", "the policy", "");
    al_policy_setting p;
    for (size_t i = 0; al_policy_setting_at(NULL, i, &p); i++) {
        char def[64], range[64];
        snprintf(def, sizeof def, "%g", p.def);
        if (!strcmp(p.kind, "bool")) snprintf(def, sizeof def, "%s", p.def ? "true" : "false");
        fmt_policy_range(&p, range, sizeof range);
        key_row(f, md, p.key, p.kind, def, sim_default("policy", p.key), range, "", "agent, sim",
                p.help, "");
    }
    for (size_t n = 0; n < al_policy_count(); n++) {
        const char *name = al_policy_name_at(n);
        if (md)
            fprintf(f, "\n### [policy] name = %s\n\n", name);
        else
            fprintf(f, "  name = %s:\n", name);
        if (!al_policy_setting_at(name, 0, &p)) {
            fprintf(f, "%s", md ? "No settings of its own.\n" : "    (no settings of its own)\n");
            continue;
        }
        if (md) fprintf(f, "%s", hdr);
        for (size_t i = 0; al_policy_setting_at(name, i, &p); i++) {
            char def[64], range[64];
            snprintf(def, sizeof def, "%g", p.def);
            if (!strcmp(p.kind, "bool")) snprintf(def, sizeof def, "%s", p.def ? "true" : "false");
            fmt_policy_range(&p, range, sizeof range);
            key_row(f, md, p.key, p.kind, def, NULL, range, "", "agent, sim", p.help, "");
        }
    }
    if (md)
        fprintf(f, "\n## Older spellings (sim only)\n\n| key | means |\n|---|---|\n");
    else
        fprintf(f, "\nolder spellings (sim only):\n");
    for (size_t i = 0; i < AL_ARRAY_LEN(ALIASES); i++) {
        const alias *a = &ALIASES[i];
        char vals[160] = "";
        if (a->values) fmt_choices(a->values, vals, sizeof vals);
        if (md)
            fprintf(f, "| `[%s] %s` | `[%s] %s`%s%s%s |\n", a->section, a->key, a->to_section,
                    a->to_key, a->values ? " (values " : "", vals, a->values ? ")" : "");
        else
            fprintf(f, "  [%s] %s = [%s] %s%s%s%s\n", a->section, a->key, a->to_section, a->to_key,
                    a->values ? " (" : "", vals, a->values ? ")" : "");
    }
}

void al_config_print_help(FILE *f) {
    print_ref(f, 0);
}

void al_config_print_markdown(FILE *f) {
    print_ref(f, 1);
}

int al_config_checkpoint_every(const al_config *c, char cmd, long *every, al_err *err) {
    int train = cmd == 't';
    long mine = train ? c->checkpoint_every_steps : c->checkpoint_every_rounds;
    long other = train ? c->checkpoint_every_rounds : c->checkpoint_every_steps;
    const char *me = train ? "every_steps" : "every_rounds",
               *it = train ? "every_rounds" : "every_steps";
    if (other)
        return al_errf(
            err, AL_ECONFIG, "[checkpoint] %s = %ld: %s saves every N %s, not %s: write %s = N", it,
            other, train ? "train" : "the agent", train ? "inner steps" : "committed rounds",
            train ? "rounds" : "inner steps", me);
    if (mine && c->checkpoint_every && mine != c->checkpoint_every)
        return al_errf(err, AL_ECONFIG,
                       "[checkpoint] every = %ld and %s = %ld: two cadences; keep %s (every is its "
                       "older spelling)",
                       c->checkpoint_every, me, mine, me);
    *every = mine ? mine : c->checkpoint_every;
    return 0;
}

int al_config_train_opts(const al_config *c, al_train_opts *o, al_err *err) {
    al_train_opts_default(o);
    o->batch = (int)c->inner_batch;
    o->seq = (int)c->inner_seq;
    o->accum = (int)c->inner_accum;
    o->steps = c->inner_steps;
    o->warmup = c->inner_warmup;
    o->lr = c->inner_lr;
    o->min_lr_frac = c->inner_min_lr_frac;
    o->weight_decay = c->inner_weight_decay;
    o->beta1 = c->inner_beta1;
    o->beta2 = c->inner_beta2;
    o->eps = c->inner_eps;
    o->grad_clip = c->inner_grad_clip;
    o->seed = (uint64_t)c->inner_seed;
    int rc = al_packing_parse(c->data_packing, &o->packing, err);
    return rc ? al_err_prefix(err, "[data] packing") : 0;
}
