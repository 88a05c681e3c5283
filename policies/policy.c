/*
 * policy.c -- the generic half of the policies: registry by name, settings
 * from text, start, the checked and transactional next_interval, clipping,
 * and the settings/state as text. The rules themselves are in rules.c.
 */
#include "policy_impl.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define AL_POLICIES(X) X(fixed) X(adacomm) X(qsr) X(autoloco) X(coherence) X(schedule)

static const al_policy_ops *const registry[] = {
#define AL_POLICY_REF(n) &al_policy_##n,
    AL_POLICIES(AL_POLICY_REF)
#undef AL_POLICY_REF
};

static const al_pparam common[P_OWN] = {
    {"h_base", AL_P_INT, 100, 1, 1e9, "the DiLoCo interval: first H, reference for the others"},
    {"h_min", AL_P_INT, 0, 0, 1e9, "smallest H (0: max(1, h_base/4))"},
    {"h_max", AL_P_INT, 0, 0, 1e9, "largest H (0: 8*h_base)"},
    {"max_comm_fraction", AL_P_REAL, 0, 0, 0.99,
     "largest projected share of a round's wall time spent communicating (0: off)"},
};
static const char *const common_state[S_OWN] = {"rounds", "h"};

size_t al_policy_count(void) {
    return AL_ARRAY_LEN(registry);
}
const char *al_policy_name_at(size_t i) {
    return i < AL_ARRAY_LEN(registry) ? registry[i]->name : NULL;
}
const char *al_policy_name(const al_policy *p) {
    return p->ops->name;
}
int64_t al_policy_current(const al_policy *p) {
    return (int64_t)p->st[S_H];
}
double al_policy_h_base(const al_policy *p) {
    return p->started ? p->h_base : p->par[P_H_BASE];
}

static const al_pparam *param_at(const al_policy *p, int i) {
    return i < P_OWN ? &common[i] : &p->ops->params[i - P_OWN];
}
static int n_params(const al_policy *p) {
    return P_OWN + p->ops->n_params;
}
static const char *state_at(const al_policy *p, int i) {
    return i < S_OWN ? common_state[i] : p->ops->state[i - S_OWN];
}
static int n_state(const al_policy *p) {
    return S_OWN + p->ops->n_state;
}

bool al_policy_setting_at(const char *name, size_t i, al_policy_setting *out) {
    const al_pparam *d = NULL;
    if (!name) {
        if (i < AL_ARRAY_LEN(common)) d = &common[i];
    } else
        for (size_t r = 0; r < AL_ARRAY_LEN(registry) && !d; r++)
            if (!strcmp(name, registry[r]->name)) {
                if (i >= (size_t)registry[r]->n_params) return false;
                d = &registry[r]->params[i];
            }
    if (!d) return false;
    static const char *const kinds[] = {
        [AL_P_REAL] = "real", [AL_P_INT] = "int", [AL_P_BOOL] = "bool"};
    *out = (al_policy_setting){d->key, kinds[d->kind], d->help, d->def, d->lo, d->hi};
    return true;
}

int al_policy_create(al_policy **out, const char *name, al_err *err) {
    *out = NULL;
    const al_policy_ops *ops = NULL;
    for (size_t i = 0; i < AL_ARRAY_LEN(registry); i++)
        if (name && !strcmp(name, registry[i]->name)) ops = registry[i];
    if (!ops) {
        char known[256] = "";
        for (size_t i = 0; i < AL_ARRAY_LEN(registry); i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                     registry[i]->name);
        return al_errf(err, AL_ENOTFOUND, "policy: unknown policy '%s' (known: %s)",
                       name ? name : "(null)", known);
    }
    al_policy *p = calloc(1, sizeof *p);
    if (!p) return al_errf(err, AL_ENOMEM, "policy: out of memory");
    p->ops = ops;
    for (int i = 0; i < n_params(p); i++) p->par[i] = param_at(p, i)->def;
    *out = p;
    return 0;
}

void al_policy_free(al_policy *p) {
    free(p);
}

/* ---- settings ----------------------------------------------------------------------- */

static int parse_value(const al_policy *p, const al_pparam *d, const char *v, double *out,
                       al_err *err) {
    const char *pol = p->ops->name;
    if (!v) v = "";
    if (d->kind == AL_P_BOOL) {
        if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "1"))
            return *out = 1, 0;
        if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off") || !strcmp(v, "0"))
            return *out = 0, 0;
        return al_errf(err, AL_ECONFIG, "policy %s: key '%s': '%s' is not a boolean", pol, d->key,
                       v);
    }
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno == ERANGE || !isfinite(x))
        return al_errf(err, AL_ECONFIG, "policy %s: key '%s': '%s' is not a finite number", pol,
                       d->key, v);
    if (d->kind == AL_P_INT && x != floor(x))
        return al_errf(err, AL_ECONFIG, "policy %s: key '%s': '%s' is not an integer", pol, d->key,
                       v);
    if (x < d->lo || x > d->hi)
        return al_errf(err, AL_ECONFIG, "policy %s: key '%s': %s is outside [%g, %g] (%s)", pol,
                       d->key, v, d->lo, d->hi, d->help);
    *out = x;
    return 0;
}

int al_policy_set(al_policy *p, const char *key, const char *value, al_err *err) {
    const char *pol = p->ops->name;
    if (p->started)
        return al_errf(err, AL_ECONFIG, "policy %s: key '%s': settings are fixed once started", pol,
                       key ? key : "(null)");
    for (int i = 0; key && i < n_params(p); i++)
        if (!strcmp(key, param_at(p, i)->key))
            return parse_value(p, param_at(p, i), value, &p->par[i], err);
    char known[256] = "";
    size_t len = 0;
    for (int i = 0; i < n_params(p) && len < sizeof known; i++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "",
                                param_at(p, i)->key);
    return al_errf(err, AL_ECONFIG, "policy %s: unknown key '%s' (known: %s)", pol,
                   key ? key : "(null)", known);
}

int al_policy_create_kv(al_policy **out, const char *const *keys, const char *const *values,
                        size_t n, int *bad, al_err *err) {
    *out = NULL;
    if (bad) *bad = -1;
    int name_at = -1;
    for (size_t i = 0; i < n; i++)
        if (keys[i] && !strcmp(keys[i], "name")) name_at = (int)i;
    if (name_at < 0) return al_errf(err, AL_ECONFIG, "policy: missing key 'name'");
    al_policy *p;
    int rc = al_policy_create(&p, values[name_at], err);
    if (rc) {
        if (bad) *bad = name_at;
        if (rc == AL_ENOTFOUND) { /* a bad value in the config file */
            rc = AL_ECONFIG;
            if (err) err->code = rc;
        }
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        if ((int)i == name_at) continue;
        if ((rc = al_policy_set(p, keys[i], values[i], err))) {
            if (bad) *bad = (int)i;
            al_policy_free(p);
            return rc;
        }
    }
    *out = p;
    return 0;
}

/* Resolve the automatic bounds and check the common settings as a whole. */
static int resolve(al_policy *p, al_err *err) {
    const char *pol = p->ops->name;
    double hb = p->par[P_H_BASE], lo = p->par[P_H_MIN], hi = p->par[P_H_MAX];
    if (lo == 0) lo = fmax(1.0, floor(hb / 4));
    if (hi == 0) hi = 8 * hb;
    if (!(lo <= hb && hb <= hi))
        return al_errf(err, AL_ECONFIG, "policy %s: need h_min <= h_base <= h_max, got %g, %g, %g",
                       pol, lo, hb, hi);
    p->h_base = hb;
    p->h_min = lo;
    p->h_max = hi;
    return 0;
}

static double clip(const al_policy *p, double h) {
    return fmin(p->h_max, fmax(p->h_min, h));
}

int al_policy_start(al_policy *p, int64_t *h_first, al_err *err) {
    al_policy t = *p;
    int rc = resolve(&t, err);
    if (rc) return rc;
    memset(t.st, 0, sizeof t.st);
    double h = t.h_base;
    if ((rc = t.ops->start(&t, &h, err))) return rc;
    if (!isfinite(h))
        return al_errf(err, AL_ENUMERIC, "policy %s: first interval is %g", t.ops->name, h);
    t.st[S_H] = round(clip(&t, h));
    t.started = true;
    *p = t;
    *h_first = (int64_t)t.st[S_H];
    return 0;
}

/* The bandwidth floor (see al_policy.h): with f = max_comm_fraction, t_c the
 * measured seconds of one exchange and t_s the seconds of one inner step, a
 * round of H steps spends t_c/(t_c + H·t_s) of its time communicating; that is
 * <= f when H >= t_c·(1 − f)/(f·t_s). */
double al_policy_comm_floor(const al_policy *p, const al_round_stats *s) {
    double f = p->par[P_MAX_COMM];
    if (!(f > 0) || !(s->comm_s > 0) || !(s->compute_s > 0) || s->steps < 1) return 0;
    double t_step = s->compute_s / (double)s->steps;
    return ceil((s->comm_s * (1 - f)) / (f * t_step));
}

int al_policy_next_interval(al_policy *p, const al_round_stats *s, int64_t *h_out, al_err *err) {
    const char *pol = p->ops->name;
    if (!p->started)
        return al_errf(err, AL_EINVAL, "policy %s: next_interval before start or load", pol);
    int rc = al_round_stats_check(s, err);
    if (rc) {
        al_err_prefix(err, "policy %s: round %lld refused", pol, (long long)s->round);
        return rc;
    }
    al_policy t = *p; /* decide on a copy: p changes only on success */
    double h = t.st[S_H];
    if ((rc = t.ops->next(&t, s, &h, err))) return rc;
    if (isnan(h))
        return al_errf(err, AL_ENUMERIC, "policy %s: round %lld: the rule produced NaN", pol,
                       (long long)s->round);
    h = fmax(h, al_policy_comm_floor(&t, s)); /* h_max still wins: clipped below */
    t.st[S_H] = round(clip(&t, h));           /* ±Inf clips to a bound; rules return integers */
    t.st[S_ROUNDS] += 1;
    *p = t;
    *h_out = (int64_t)t.st[S_H];
    return 0;
}

/* ---- text forms --------------------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t cap, len;
} sbuf;

__attribute__((format(printf, 2, 3))) static void put(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->len < b->cap ? b->buf + b->len : NULL,
                      b->len < b->cap ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (k > 0) b->len += (size_t)k;
}

size_t al_policy_settings(const al_policy *p, char *buf, size_t cap) {
    sbuf b = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    put(&b, "name=%s\n", p->ops->name);
    for (int i = 0; i < n_params(p); i++) {
        double v = p->par[i];
        if (p->started && i == P_H_MIN) v = p->h_min;
        if (p->started && i == P_H_MAX) v = p->h_max;
        put(&b, "%s=%.17g\n", param_at(p, i)->key, v);
    }
    return b.len;
}

size_t al_policy_save(const al_policy *p, char *buf, size_t cap) {
    sbuf b = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    put(&b, "policy=%s\n", p->ops->name);
    for (int i = 0; i < n_state(p); i++) put(&b, "%s=%a\n", state_at(p, i), p->st[i]);
    return b.len;
}

int al_policy_load(al_policy *p, const char *text, al_err *err) {
    const char *pol = p->ops->name;
    al_policy t = *p;
    int rc = resolve(&t, err);
    if (rc) return rc;
    bool seen[AL_POLICY_MAXP] = {false}, named = false;
    int line = 0;
    for (const char *s = text; s && *s;) {
        line++;
        const char *eol = strchr(s, '\n');
        size_t len = eol ? (size_t)(eol - s) : strlen(s);
        char row[128];
        if (len >= sizeof row)
            return al_errf(err, AL_EFORMAT, "policy %s state, line %d: too long", pol, line);
        memcpy(row, s, len);
        row[len] = '\0';
        s = eol ? eol + 1 : s + len;
        if (!len) continue;
        char *eq = strchr(row, '=');
        if (!eq) return al_errf(err, AL_EFORMAT, "policy %s state, line %d: no '='", pol, line);
        *eq = '\0';
        const char *key = row, *val = eq + 1;
        if (!strcmp(key, "policy")) {
            if (strcmp(val, pol))
                return al_errf(err, AL_EFORMAT, "policy %s state, line %d: state of policy '%s'",
                               pol, line, val);
            named = true;
            continue;
        }
        int k = -1;
        for (int i = 0; i < n_state(&t); i++)
            if (!strcmp(key, state_at(&t, i))) k = i;
        if (k < 0 || seen[k])
            return al_errf(err, AL_EFORMAT, "policy %s state, line %d: %s key '%s'", pol, line,
                           k < 0 ? "unknown" : "repeated", key);
        char *end;
        errno = 0;
        double x = strtod(val, &end);
        if (end == val || *end || errno == ERANGE || isnan(x))
            return al_errf(err, AL_EFORMAT, "policy %s state, line %d: bad value '%s' for '%s'",
                           pol, line, val, key);
        t.st[k] = x;
        seen[k] = true;
    }
    if (!named) return al_errf(err, AL_EFORMAT, "policy %s state: no 'policy=' line", pol);
    for (int i = 0; i < n_state(&t); i++)
        if (!seen[i])
            return al_errf(err, AL_EFORMAT, "policy %s state: missing key '%s'", pol,
                           state_at(&t, i));
    if (!(t.st[S_ROUNDS] >= 0) || t.st[S_H] != clip(&t, t.st[S_H]) || t.st[S_H] != floor(t.st[S_H]))
        return al_errf(err, AL_EFORMAT, "policy %s state: h %g is not an integer in [%g, %g]", pol,
                       t.st[S_H], t.h_min, t.h_max);
    t.started = true;
    *p = t;
    return 0;
}
