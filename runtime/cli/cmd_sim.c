/*
 * cmd_sim.c -- `autoloco sim`: M simulated sites in one process (al_sim.h).
 *
 * Configuration: the same strict INI as `autoloco train` for [model] [data]
 * [inner] (al_config), plus
 *   [sim]    sites, scenario, shift_at, iid, codec, eval_every, progress
 *   [wan]    bandwidth_mbit, rtt_ms
 *   [outer]  lr, momentum, correction, s_ref   (al_outer_cfg_set), and the
 *            agent's codec and max_delta_ratio ([sim] codec is the older
 *            spelling of [outer] codec)
 *   [policy] name and that policy's settings   (al_policy_set)
 * The defaults, without any file, are the headline sweep's configuration
 * (docs/results/autoloco-sweep.md): the `tiny` model, 4 IID sites, 1500 inner
 * steps each, H_base = SIM_H_BASE.
 */
#include "al_cli.h"
#include "al_store.h"
#include "al_sim.h"

#include <getopt.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>

/* H_base of the default sweep configuration: the largest fixed H within 1% of
 * the best fixed H's final eval loss (docs/results/autoloco-sweep.md). */
#define SIM_H_BASE "80"

enum { MAX_PAIRS = 64 };

typedef struct simcfg {
    al_config c;
    long sites, eval_every;
    al_sim_scenario scenario;
    double shift_at;
    al_sim_progress progress;
    bool correction_set;    /* [outer] correction given: else none for fixed (DiLoCo) */
    char codec[24];         /* as [outer] codec: fp32 | bf16 | int8 | int4, optionally +zstd */
    double max_delta_ratio; /* as [outer] max_delta_ratio */
    al_overlap overlap;     /* as [outer] overlap */
    long fragments;         /* [outer] fragments: overlap streaming's F */
    long overlap_steps;     /* [outer] overlap_steps: overlap streaming's τ (-1: H/(2F)) */
    bool stream_eager;      /* [outer] stream_eager */
    double bw_mbit, rtt_ms;
    al_outer_cfg outer;
    int npol; /* [policy] pairs, last value of a key wins */
    char *pkey[MAX_PAIRS], *pval[MAX_PAIRS], *pwhere[MAX_PAIRS];
} simcfg;

static void simcfg_free(simcfg *s) {
    al_config_free(&s->c);
    for (int i = 0; i < s->npol; i++) {
        free(s->pkey[i]);
        free(s->pval[i]);
        free(s->pwhere[i]);
    }
    s->npol = 0;
}

static int policy_pair(simcfg *s, const char *key, const char *value, const char *where,
                       al_err *err) {
    int i = 0;
    while (i < s->npol && strcmp(s->pkey[i], key) != 0) i++;
    if (i == MAX_PAIRS) return al_errf(err, AL_ECONFIG, "[policy]: more than %d keys", MAX_PAIRS);
    if (i == s->npol) {
        s->pkey[i] = strdup(key);
        s->npol++;
    } else {
        free(s->pval[i]);
        free(s->pwhere[i]);
    }
    s->pval[i] = strdup(value);
    s->pwhere[i] = strdup(where);
    if (!s->pkey[i] || !s->pval[i] || !s->pwhere[i])
        return al_errf(err, AL_ENOMEM, "sim: out of memory");
    return 0;
}

static int parse_bool(const char *v, bool *out) {
    if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes"))
        *out = true;
    else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no"))
        *out = false;
    else
        return -1;
    return 0;
}

/* One key of any section; `where` names its origin ("file:line" or "--set"). */
static int set_key(simcfg *s, const char *sec, const char *key, const char *v, const char *where,
                   al_err *err) {
    int rc = 0;
    if (!strcmp(sec, "policy")) return policy_pair(s, key, v, where, err);
    if ((!strcmp(sec, "outer") || !strcmp(sec, "sim")) && !strcmp(key, "codec")) {
        al_codec_cfg k = {.block = 128};
        if (strlen(v) >= sizeof s->codec)
            rc = al_errf(err, AL_ECONFIG, "[%s] codec: '%s' is too long", sec, v);
        else if ((rc = al_codec_parse(v, &k, err)) == 0)
            snprintf(s->codec, sizeof s->codec, "%s", v);
        else
            al_err_prefix(err, "[%s] codec", sec);
    } else if (!strcmp(sec, "outer") && !strcmp(key, "max_delta_ratio")) {
        if ((rc = al_cli_double("[outer] max_delta_ratio", v, &s->max_delta_ratio, err)) == 0 &&
            !(s->max_delta_ratio == 0 || (s->max_delta_ratio >= 1 && s->max_delta_ratio < 1e9)))
            rc = al_errf(err, AL_ECONFIG,
                         "[outer] max_delta_ratio: %s is not 0 (off) or in [1, 1e9)", v);
    } else if (!strcmp(sec, "outer") && !strcmp(key, "overlap")) {
        if ((rc = al_overlap_parse(v, &s->overlap, err))) al_err_prefix(err, "[outer]");
    } else if (!strcmp(sec, "outer") && !strcmp(key, "fragments")) {
        rc = al_cli_int("[outer] fragments", v, 1, 1024, &s->fragments, err);
    } else if (!strcmp(sec, "outer") && !strcmp(key, "stream_eager")) {
        if (parse_bool(v, &s->stream_eager))
            rc = al_errf(err, AL_ECONFIG, "[outer] stream_eager: '%s' is not true or false", v);
    } else if (!strcmp(sec, "outer") && !strcmp(key, "overlap_steps")) {
        if (!strcmp(v, "sync"))
            s->overlap_steps = AL_SIM_TAU_SYNC;
        else if (!strcmp(v, "half")) /* the agents' spelling of the default, H/(2F) */
            s->overlap_steps = -1;
        else
            rc = al_cli_int("[outer] overlap_steps", v, -1, 1L << 30, &s->overlap_steps, err);
    } else if (!strcmp(sec, "outer")) {
        rc = al_outer_cfg_set(&s->outer, key, v, err);
        if (rc == 0 && !strcmp(key, "correction")) s->correction_set = true;
    } else if (!strcmp(sec, "sim")) {
        if (!strcmp(key, "sites"))
            rc = al_cli_int("[sim] sites", v, 1, 256, &s->sites, err);
        else if (!strcmp(key, "eval_every"))
            rc = al_cli_int("[sim] eval_every", v, 0, 1L << 30, &s->eval_every, err);
        else if (!strcmp(key, "iid")) { /* the older spelling of scenario = iid|noniid */
            bool iid;
            if (parse_bool(v, &iid))
                rc = al_errf(err, AL_ECONFIG, "[sim] iid: '%s' is not true or false", v);
            else
                s->scenario = iid ? AL_SIM_IID : AL_SIM_NONIID;
        } else if (!strcmp(key, "scenario")) {
            rc = al_sim_scenario_parse(v, &s->scenario, err);
        } else if (!strcmp(key, "shift_at")) {
            if ((rc = al_cli_double("[sim] shift_at", v, &s->shift_at, err)) == 0 &&
                !(s->shift_at >= 0 && s->shift_at <= 1))
                rc = al_errf(err, AL_ECONFIG, "[sim] shift_at: %s is not in [0, 1]", v);
        } else if (!strcmp(key, "progress")) {
            if (!strcmp(v, "lr"))
                s->progress = AL_SIM_PROGRESS_LR;
            else if (!strcmp(v, "steps"))
                s->progress = AL_SIM_PROGRESS_STEPS;
            else
                rc = al_errf(err, AL_ECONFIG, "[sim] progress: '%s' is not lr or steps", v);
        } else
            rc = al_errf(err, AL_ECONFIG,
                         "[sim] %s: unknown key (known: sites, scenario, shift_at, iid, codec, "
                         "eval_every, progress)",
                         key);
    } else if (!strcmp(sec, "wan")) {
        double *dst = !strcmp(key, "bandwidth_mbit") ? &s->bw_mbit
                      : !strcmp(key, "rtt_ms")       ? &s->rtt_ms
                                                     : NULL;
        if (!dst)
            rc = al_errf(err, AL_ECONFIG, "[wan] %s: unknown key (known: bandwidth_mbit, rtt_ms)",
                         key);
        else if ((rc = al_cli_double(key, v, dst, err)) == 0 && !(*dst >= 0 && *dst < 1e12))
            rc = al_errf(err, AL_ECONFIG, "[wan] %s: %g is out of range", key, *dst);
    } else {
        rc = al_config_set(&s->c, sec, key, v, err);
    }
    return rc ? al_err_prefix(err, "%s", where) : 0;
}

typedef struct ini_ctx {
    simcfg *s;
    const char *path;
    al_err *err;
    int rc;
} ini_ctx;

static int on_ini(void *user, const char *sec, const char *key, const char *value) {
    ini_ctx *x = user;
    if (x->rc) return 1;
    char where[600];
    snprintf(where, sizeof where, "%s", x->path);
    if ((x->rc = set_key(x->s, sec, key, value, where, x->err))) return 0;
    return 1;
}

static int load_file(simcfg *s, const char *path, al_err *err) {
    FILE *f = fopen(path, "r");
    if (!f) return al_errf(err, AL_EIO, "config %s: cannot open", path);
    ini_ctx x = {s, path, err, 0};
    int line = ini_parse_file(f, on_ini, &x);
    fclose(f);
    if (line == 0) return 0;
    if (x.rc) { /* "path: [sec] key: why" → "path:LINE: [sec] key: why" */
        char msg[sizeof err->msg];
        size_t pl = strlen(path);
        snprintf(msg, sizeof msg, "%s:%d%s", path, line, err->msg + pl);
        snprintf(err->msg, sizeof err->msg, "%s", msg);
        return x.rc;
    }
    return al_errf(err, AL_ECONFIG, "%s:%d: syntax error", path, line);
}

/* The line of `key` in section [sec] of an INI file (0 if not found): for
 * errors about [policy] keys, which are checked only once the policy's name
 * is known, after the whole file was read. */
static int find_line(const char *path, const char *sec, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[1024], cur[64] = "";
    int line = 0, found = 0;
    while (!found && fgets(buf, sizeof buf, f)) {
        line++;
        char *p = buf + strspn(buf, " \t");
        if (*p == '[') {
            size_t n = strcspn(p + 1, "]");
            snprintf(cur, sizeof cur, "%.*s", (int)AL_MIN(n, sizeof cur - 1), p + 1);
            continue;
        }
        size_t n = strcspn(p, " \t=:");
        found = !strcmp(cur, sec) && n == strlen(key) && !strncmp(p, key, n);
    }
    fclose(f);
    return found ? line : 0;
}

static int set_arg(simcfg *s, const char *a, al_err *err) {
    const char *dot = strchr(a, '.'), *eq = strchr(a, '=');
    if (!dot || !eq || dot > eq)
        return al_errf(err, AL_ECONFIG, "--set '%s': expected section.key=value", a);
    char sec[64], key[64];
    if ((size_t)(dot - a) >= sizeof sec || (size_t)(eq - dot - 1) >= sizeof key)
        return al_errf(err, AL_ECONFIG, "--set '%s': name too long", a);
    snprintf(sec, sizeof sec, "%.*s", (int)(dot - a), a);
    snprintf(key, sizeof key, "%.*s", (int)(eq - dot - 1), dot + 1);
    return set_key(s, sec, key, eq + 1, "--set", err);
}

/* The sweep's defaults, under any file or flag. */
static int simcfg_init(simcfg *s, al_err *err) {
    memset(s, 0, sizeof *s);
    int rc = al_config_init(&s->c, err);
    s->sites = 4;
    s->scenario = AL_SIM_IID;
    s->shift_at = 0.5;
    s->progress = AL_SIM_PROGRESS_STEPS;
    snprintf(s->codec, sizeof s->codec, "fp32");
    s->max_delta_ratio = 4;
    s->fragments = 16;
    s->overlap_steps = -1;
    s->stream_eager = true;
    s->bw_mbit = 1000;
    s->rtt_ms = 50;
    al_outer_cfg_default(&s->outer);
    static const char *const defs[][3] = {
        {"model", "preset", "tiny"},    {"inner", "batch", "16"},        {"inner", "seq", "32"},
        {"inner", "steps", "1500"},     {"inner", "warmup", "100"},      {"inner", "threads", "1"},
        {"policy", "name", "autoloco"}, {"policy", "h_base", SIM_H_BASE}};
    for (size_t i = 0; i < AL_ARRAY_LEN(defs) && rc == 0; i++)
        rc = set_key(s, defs[i][0], defs[i][1], defs[i][2], "defaults", err);
    return rc;
}

static void sim_usage(FILE *f) {
    fprintf(f,
            "usage: autoloco sim [-c FILE.ini] [--set section.key=value]... [options]\n\n"
            "M simulated sites in one process: each a real model with its own AdamW and data\n"
            "shard; the real outer optimizer and policy; a WAN model projects wall-clock time.\n"
            "Defaults: the headline sweep (tiny model, 4 IID sites, 1500 steps, H_base " SIM_H_BASE
            ").\n\n"
            "options:\n"
            "  -c, --config FILE    INI: [model] [data] [inner] as for train, and [sim] (sites,\n"
            "                       iid, codec, eval_every, progress = lr|steps: the unit of\n"
            "                       the correction's S_r), [wan] (bandwidth_mbit, rtt_ms),\n"
            "                       [outer] (lr, momentum, correction, s_ref, codec,\n"
            "                       max_delta_ratio, overlap = none|delayed|delayed-mean|\n"
            "                       delayed-mid|streaming: as the agent's; fragments = F\n"
            "                       (streaming, default 16), overlap_steps = tau (streaming:\n"
            "                       the inner steps an exchange runs beside before its\n"
            "                       merge; -1 or half = H/(2F), the default; 0 = none;\n"
            "                       sync = at the next fragment's sync),\n"
            "                       stream_eager = true|false (streaming: the fragment in\n"
            "                       flight trains from the site's eager guess; default\n"
            "                       true)), [policy] (name,\n"
            "                       h_base, h_min, h_max and the policy's own keys)\n"
            "  --set S.K=V          override one key (any section above)\n"
            "  --policy NAME        fixed | adacomm | qsr | autoloco  (= --set policy.name=)\n"
            "  --h N                fixed's interval (= --set policy.h=N; default h_base)\n"
            "  --correction C       autoloco | none (= --set outer.correction=); default\n"
            "                       none for fixed (DiLoCo), autoloco for the others\n"
            "  --ddp                reference: gradients averaged every step, one AdamW\n"
            "  --seed N, --sites M, --steps N, --threads N\n"
            "  --scenario S         iid | noniid (sites on disjoint runs of documents, i.e.\n"
            "                       groups of fortune files) | shift (iid, then noniid from\n"
            "                       [sim] shift_at of the steps, default 0.5)\n"
            "  --noniid / --iid     = --scenario noniid / iid\n"
            "  --codec NAME         fp32 | bf16 | int8 | int4, optionally +zstd: the agent's\n"
            "                       codec, shard by shard (= --set outer.codec=)\n"
            "  --overlap MODE       none | delayed | delayed-mean | delayed-mid | streaming:\n"
            "                       round r's exchange beside interval r+1, merged when it\n"
            "                       ends; the eager start takes the site's own delta\n"
            "                       (delayed), the last mean for the others' (delayed-mean),\n"
            "                       or its delta from halfway back to theta_global\n"
            "                       (delayed-mid); or (streaming) F fragments of theta sync\n"
            "                       in turn, each exchange beside the next tau steps\n"
            "                       (= --set outer.overlap=)\n"
            "  --jsonl FILE         one JSON record per round\n"
            "  --json               print the summary as one JSON line, last\n");
}

int al_cmd_sim(int argc, char **argv, al_err *err) {
    static const struct option opts[] = {{"config", required_argument, 0, 'c'},
                                         {"set", required_argument, 0, 's'},
                                         {"policy", required_argument, 0, 'p'},
                                         {"h", required_argument, 0, 'H'},
                                         {"correction", required_argument, 0, 'C'},
                                         {"ddp", no_argument, 0, 'D'},
                                         {"seed", required_argument, 0, 'S'},
                                         {"sites", required_argument, 0, 'M'},
                                         {"steps", required_argument, 0, 'n'},
                                         {"threads", required_argument, 0, 't'},
                                         {"noniid", no_argument, 0, 'N'},
                                         {"iid", no_argument, 0, 'I'},
                                         {"scenario", required_argument, 0, 'G'},
                                         {"codec", required_argument, 0, 'k'},
                                         {"overlap", required_argument, 0, 'O'},
                                         {"jsonl", required_argument, 0, 'j'},
                                         {"json", no_argument, 0, 'J'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    simcfg s;
    al_tokens train = {0}, val = {0};
    al_policy *pol = NULL;
    FILE *jl = NULL;
    const char *jsonl = NULL;
    bool json = false, ddp = false;
    int rc = simcfg_init(&s, err), ch;
    if (rc) goto out;
    optind = 1; /* first pass: config files, so that flags override them */
    while ((ch = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        if (ch == 'h') {
            sim_usage(stdout);
            goto out;
        }
        if (ch == '?') {
            sim_usage(stderr);
            rc = AL_CLI_USAGE;
            goto out;
        }
        if (ch == 'c' && (rc = load_file(&s, optarg, err))) goto out;
    }
    optind = 1;
    while (rc == 0 && (ch = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        const char *flag = NULL, *sec = NULL, *key = NULL;
        switch (ch) {
        case 's':
            rc = set_arg(&s, optarg, err);
            break;
        case 'p':
            flag = "--policy", sec = "policy", key = "name";
            break;
        case 'H':
            flag = "--h", sec = "policy", key = "h";
            break;
        case 'C':
            flag = "--correction", sec = "outer", key = "correction";
            break;
        case 'S':
            flag = "--seed", sec = "inner", key = "seed";
            break;
        case 'M':
            flag = "--sites", sec = "sim", key = "sites";
            break;
        case 'n':
            flag = "--steps", sec = "inner", key = "steps";
            break;
        case 't':
            flag = "--threads", sec = "inner", key = "threads";
            break;
        case 'k':
            flag = "--codec", sec = "outer", key = "codec";
            break;
        case 'O':
            flag = "--overlap", sec = "outer", key = "overlap";
            break;
        case 'N':
            s.scenario = AL_SIM_NONIID;
            break;
        case 'I':
            s.scenario = AL_SIM_IID;
            break;
        case 'G':
            flag = "--scenario", sec = "sim", key = "scenario";
            break;
        case 'D':
            ddp = true;
            break;
        case 'j':
            jsonl = optarg;
            break;
        case 'J':
            json = true;
            break;
        }
        if (flag) rc = set_key(&s, sec, key, optarg, flag, err);
    }
    if (rc) goto out;
    if (optind < argc) {
        rc = al_errf(err, AL_EINVAL, "sim: unexpected argument '%s'", argv[optind]);
        goto out;
    }
    al_config *c = &s.c;
    if (strcmp(c->inner_device, "cpu")) {
        rc = al_errf(err, AL_EUNSUPPORTED,
                     "sim: [inner] device = %s: the simulator runs on the CPU", c->inner_device);
        goto out;
    }
    al_threads_set((int)(c->inner_threads > 0 ? c->inner_threads : 1));
    al_sim_opts o;
    al_sim_opts_default(&o);
    if ((rc = al_model_preset(&o.model, c->model_preset, err))) goto out;
    if ((rc = al_config_train_opts(c, &o.train, err))) goto out;
    if (o.train.seq > o.model.T) {
        rc = al_errf(err, AL_ECONFIG, "[inner] seq: %d exceeds preset '%s' context %d", o.train.seq,
                     o.model.preset, o.model.T);
        goto out;
    }
    o.sites = (int)s.sites;
    o.scenario = s.scenario;
    o.shift_at = s.shift_at;
    o.progress = s.progress;
    o.ddp = ddp;
    o.outer = s.outer;
    o.bandwidth_bps = s.bw_mbit * 1e6;
    o.rtt_s = s.rtt_ms * 1e-3;
    o.eval_every = (int)s.eval_every;
    o.eval_batches = (int)c->inner_eval_batches;
    if ((rc = al_codec_parse(s.codec, &o.codec, err))) goto out; /* checked when set */
    o.max_delta_ratio = s.max_delta_ratio;
    o.overlap = s.overlap;
    o.fragments = (int)s.fragments;
    o.overlap_steps = s.overlap_steps;
    o.stream_eager = s.stream_eager;
    int bad = -1;
    rc = al_policy_create_kv(&pol, (const char *const *)s.pkey, (const char *const *)s.pval,
                             (size_t)s.npol, &bad, err);
    if (rc) {
        if (bad >= 0) {
            int line = strcmp(s.pwhere[bad], "--set") && strcmp(s.pwhere[bad], "defaults")
                           ? find_line(s.pwhere[bad], "policy", s.pkey[bad])
                           : 0;
            if (line > 0)
                al_err_prefix(err, "%s:%d: [policy] %s", s.pwhere[bad], line, s.pkey[bad]);
            else
                al_err_prefix(err, "%s: [policy] %s", s.pwhere[bad], s.pkey[bad]);
        }
        goto out;
    }
    o.policy = pol;
    /* `fixed` is DiLoCo: its plain outer step unless a correction was asked for */
    if (!s.correction_set && !strcmp(al_policy_name(pol), "fixed"))
        o.outer.correction = AL_CORRECTION_NONE;
    if ((rc = al_tokens_load(&train, c->data_train, err))) goto out;
    if (c->data_val[0] && (rc = al_tokens_load(&val, c->data_val, err))) goto out;
    if (jsonl && !(jl = fopen(jsonl, "w"))) {
        rc = al_errf(err, AL_EIO, "--jsonl %s: cannot open for writing", jsonl);
        goto out;
    }
    o.jsonl = jl;
    printf("autoloco sim: %s, %d %s sites x %ld steps, preset %s, %s%s, codec %s\n",
           ddp ? "ddp" : al_policy_name(pol), o.sites, al_sim_scenario_name(o.scenario),
           o.train.steps, o.model.preset, ddp ? "" : "correction ",
           ddp ? "" : al_correction_name(o.outer.correction), s.codec);
    fflush(stdout);
    al_sim_result r;
    if ((rc = al_sim_run(&o, &train, val.tok ? &val : NULL, &r, err))) goto out;
    printf("syncs %ld | bytes %.4g | final eval loss %.4f | train loss %.4f | dropped %ld\n",
           r.syncs, r.bytes, r.final_eval_loss, r.final_train_loss, r.dropped);
    printf("projected: compute %.1f s + comm %.1f s = %.1f s (%.0f Mbit/s, %.0f ms RTT); "
           "1 Gbit/s %.1f s, 100 Mbit/s %.1f s; wall %.1f s\n",
           r.compute_s, r.comm_s, r.projected_s, s.bw_mbit, s.rtt_ms, r.projected_1g_s,
           r.projected_100m_s, r.wall_s);
    printf("theta_global sha256 %s\n", r.hash);
    if (json) {
        char *j = al_sim_result_json(&o, &r);
        printf("%s\n", j ? j : "{}");
        free(j);
    }
    al_sim_result_free(&r);
out:
    if (jl) fclose(jl);
    al_policy_free(pol);
    al_tokens_free(&train);
    al_tokens_free(&val);
    simcfg_free(&s);
    return rc;
}
