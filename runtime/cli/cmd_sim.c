/*
 * cmd_sim.c -- `autoloco sim`: M simulated sites in one process (al_sim.h),
 * and `sim --compare A B --seeds N`: two runs per seed, paired.
 *
 * Configuration: the agents' own (al_config, al_store.h: every key in one
 * table, docs/config.md) read with al_config_init_sim: sim's defaults (the
 * headline sweep's configuration, AL_CONFIG_SIM_DEFAULTS), its own [sim] and
 * [wan] keys, and its older spellings. Keys sim does not read are accepted
 * and ignored (a site's file can be simulated).
 */
#include "al_cli.h"
#include "al_store.h"
#include "al_sim.h"

#include <getopt.h>
#include <ini.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_PAIRS = 64, SIM_DONE = 2 /* parse_args: --help printed */ };

/* The flags that are keys (section.key), and the command's own. */
typedef struct simflags {
    bool ddp, json;
    const char *jsonl, *cmp[2];
    long seeds;
} simflags;

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
                                     {"compare", required_argument, 0, 'X'},
                                     {"seeds", required_argument, 0, 'R'},
                                     {"help", no_argument, 0, 'h'},
                                     {"help-config", no_argument, 0, 'P'},
                                     {0, 0, 0, 0}};

/* X(option letter, flag, section, key, value: NULL = the argument) */
#define SIM_FLAG_KEYS(X)                                                                           \
    X('p', "--policy", "policy", "name", NULL)                                                     \
    X('H', "--h", "policy", "h", NULL)                                                             \
    X('C', "--correction", "outer", "correction", NULL)                                            \
    X('S', "--seed", "inner", "seed", NULL)                                                        \
    X('M', "--sites", "sim", "sites", NULL)                                                        \
    X('n', "--steps", "inner", "steps", NULL)                                                      \
    X('t', "--threads", "inner", "threads", NULL)                                                  \
    X('k', "--codec", "outer", "codec", NULL)                                                      \
    X('O', "--overlap", "outer", "overlap", NULL)                                                  \
    X('G', "--scenario", "sim", "scenario", NULL)                                                  \
    X('N', "--noniid", "sim", "scenario", "noniid")                                                \
    X('I', "--iid", "sim", "scenario", "iid")

static void sim_usage(FILE *f);

/* The configuration from the command line: sim's defaults, the -c files,
 * then the flags in order. The second argument of --compare is the
 * (ordinary) positional argument after it. */
static int parse_args(al_config *c, simflags *fl, int argc, char **argv, al_err *err) {
    int rc = al_config_init_sim(c, err), ch;
    if (rc) return rc;
    optind = 0; /* first pass: config files, so that flags override them */
    while ((ch = getopt_long(argc, argv, "+c:h", opts, NULL)) != -1) {
        if (ch == 'X' && optind < argc && argv[optind][0] != '-') optind++; /* B */
        if (ch == 'h') {
            sim_usage(stdout);
            return SIM_DONE;
        }
        if (ch == 'P') {
            al_config_print_help(stdout);
            return SIM_DONE;
        }
        if (ch == '?') {
            sim_usage(stderr);
            return AL_CLI_USAGE;
        }
        if (ch == 'c' && (rc = al_config_load(c, optarg, err))) return rc;
    }
    optind = 0;
    while (rc == 0 && (ch = getopt_long(argc, argv, "+c:h", opts, NULL)) != -1) {
        switch (ch) {
#define SIM_FLAG_CASE(letter, flag, sec, key, value)                                               \
    case letter:                                                                                   \
        if ((rc = al_config_set(c, sec, key, value ? value : optarg, err)))                        \
            al_err_prefix(err, "%s", flag);                                                        \
        break;
            SIM_FLAG_KEYS(SIM_FLAG_CASE)
#undef SIM_FLAG_CASE
        case 's':
            rc = al_config_set_arg(c, optarg, err);
            break;
        case 'D':
            fl->ddp = true;
            break;
        case 'j':
            fl->jsonl = optarg;
            break;
        case 'J':
            fl->json = true;
            break;
        case 'X':
            if (optind >= argc || argv[optind][0] == '-')
                return al_errf(err, AL_EINVAL, "sim: --compare needs two runs: --compare A B");
            fl->cmp[0] = optarg;
            fl->cmp[1] = argv[optind++];
            break;
        case 'R':
            rc = al_cli_int("--seeds", optarg, 1, 1000, &fl->seeds, err);
            break;
        }
    }
    if (rc) return rc;
    if (optind < argc)
        return al_errf(err, AL_EINVAL, "sim: unexpected argument '%s'", argv[optind]);
    if (fl->seeds && !fl->cmp[0])
        return al_errf(err, AL_EINVAL, "sim: --seeds goes with --compare");
    return 0;
}

/* Everything a run needs from the configuration: the simulator's options and
 * the policy (*pol, to free). Checks what the agent checks at start. */
static int sim_opts_from(const al_config *c, al_sim_opts *o, al_policy **pol, al_err *err) {
    int rc;
    *pol = NULL;
    if (strcmp(c->inner_device, "cpu"))
        return al_errf(err, AL_EUNSUPPORTED,
                       "sim: [inner] device = %s: the simulator runs on the CPU", c->inner_device);
    al_sim_opts_default(o);
    if ((rc = al_model_preset(&o->model, c->model_preset, err))) return rc;
    if ((rc = al_config_train_opts(c, &o->train, err))) return rc;
    if (o->train.seq > o->model.T)
        return al_errf(err, AL_ECONFIG, "[inner] seq: %d exceeds preset '%s' context %d",
                       o->train.seq, o->model.preset, o->model.T);
    o->sites = (int)c->sim_sites;
    if ((rc = al_sim_scenario_parse(c->sim_scenario, &o->scenario, err)))
        return al_err_prefix(err, "[sim] scenario");
    o->shift_at = c->sim_shift_at;
    o->progress = strcmp(c->outer_progress, "lr") ? AL_SIM_PROGRESS_STEPS : AL_SIM_PROGRESS_LR;
    al_outer_cfg_default(&o->outer);
    o->outer.lr = c->outer_lr;
    o->outer.momentum = c->outer_momentum;
    o->outer.correction =
        strcmp(c->outer_correction, "none") ? AL_CORRECTION_AUTOLOCO : AL_CORRECTION_NONE;
    o->outer.s_ref = c->outer_s_ref; /* 0: the sim derives it from h_base */
    o->bandwidth_bps = c->wan_bandwidth_mbit * 1e6;
    o->rtt_s = c->wan_rtt_ms * 1e-3;
    o->eval_every = (int)c->sim_eval_every;
    o->eval_batches = (int)c->inner_eval_batches;
    o->codec = (al_codec_cfg){.block = 128};
    if ((rc = al_codec_parse(c->outer_codec, &o->codec, err)))
        return al_err_prefix(err, "[outer] codec");
    o->max_delta_ratio = c->outer_max_delta_ratio;
    if (o->max_delta_ratio > 0 && o->max_delta_ratio < 1)
        return al_errf(err, AL_ECONFIG,
                       "[outer] max_delta_ratio: %g would leave out the median site itself (0 = "
                       "off, or >= 1)",
                       o->max_delta_ratio);
    if ((rc = al_overlap_parse(c->outer_overlap, &o->overlap, err)))
        return al_err_prefix(err, "[outer]");
    o->fragments = (int)c->outer_fragments;
    o->overlap_steps = !strcmp(c->outer_overlap_steps, "sync")   ? AL_SIM_TAU_SYNC
                       : !strcmp(c->outer_overlap_steps, "half") ? -1
                                                                 : atol(c->outer_overlap_steps);
    o->stream_eager = c->outer_stream_eager != 0;
    const char *keys[MAX_PAIRS], *vals[MAX_PAIRS];
    if (c->policy.n > MAX_PAIRS)
        return al_errf(err, AL_ECONFIG, "[policy]: more than %d keys", MAX_PAIRS);
    for (int i = 0; i < c->policy.n; i++) {
        keys[i] = c->policy.items[i].key;
        vals[i] = c->policy.items[i].value;
    }
    int bad = -1;
    if ((rc = al_policy_create_kv(pol, keys, vals, (size_t)c->policy.n, &bad, err))) {
        if (bad >= 0 && c->policy.items[bad].line > 0)
            al_err_prefix(err, "%s:%d: [policy] %s", c->path, c->policy.items[bad].line, keys[bad]);
        else if (bad >= 0)
            al_err_prefix(err, "[policy] %s", keys[bad]);
        return rc;
    }
    o->policy = *pol;
    /* `fixed` is DiLoCo: its plain outer step unless a correction was asked for */
    if (!al_config_given(c, "outer", "correction") && !strcmp(al_policy_name(*pol), "fixed"))
        o->outer.correction = AL_CORRECTION_NONE;
    return 0;
}

static void sim_usage(FILE *f) {
    fprintf(
        f,
        "usage: autoloco sim [-c FILE.ini] [--set section.key=value]... [options]\n"
        "       autoloco sim [-c FILE.ini] [options] --compare A B [--seeds N]\n\n"
        "M simulated sites in one process: each a real model with its own AdamW and data\n"
        "shard; the real outer optimizer and policy; a WAN model projects wall-clock time.\n"
        "Defaults: the headline sweep (tiny model, 4 IID sites, 1500 steps, h_base 80).\n"
        "Every key, sim's defaults and the keys only sim reads ([sim], [wan]):\n"
        "autoloco sim --help-config, or docs/config.md.\n\n"
        "options:\n"
        "  -c, --config FILE    INI, as the agents' (and [sim], [wan])\n"
        "  --set S.K=V          override one key\n"
        "  --help-config        list every key\n"
        "  --policy NAME        fixed | adacomm | qsr | autoloco | coherence | schedule\n"
        "                       (= --set policy.name=)\n"
        "  --h N                fixed's interval (= --set policy.h=N; default h_base)\n"
        "  --correction C       autoloco | none (= --set outer.correction=); default\n"
        "                       none for fixed (DiLoCo), autoloco for the others\n"
        "  --ddp                reference: gradients averaged every step, one AdamW\n"
        "  --seed N, --sites M, --steps N, --threads N\n"
        "  --scenario S         iid | noniid (sites on disjoint runs of documents, i.e.\n"
        "                       groups of fortune files) | shift (iid, then noniid from\n"
        "                       [sim] shift_at of the steps, default 0.5) | languages\n"
        "                       (site m on group m of [data] train's groups file, written\n"
        "                       by data prep --groups: tools/setup's data/languages/)\n"
        "  --noniid / --iid     = --scenario noniid / iid\n"
        "  --codec NAME         fp32 | bf16 | int8 | int4, optionally +zstd: the agent's\n"
        "                       codec, shard by shard (= --set outer.codec=)\n"
        "  --overlap MODE       none | delayed | delayed-mean | delayed-mid | streaming\n"
        "                       (= --set outer.overlap=; docs/outer.md)\n"
        "  --jsonl FILE         one JSON record per round\n"
        "  --json               print the summary as one JSON line, last\n\n"
        "  --compare A B        run A and B on the same data with the same seed, for\n"
        "                       seeds [inner] seed, +1, ... (--seeds N, default 3); a\n"
        "                       progress line per run, then per seed the final eval\n"
        "                       losses and syncs, and a verdict. A and B: FILE.ini\n"
        "                       (loaded over the rest) or NAME[:KEY=VALUE[,...]]: policy\n"
        "                       NAME, KEY a [policy] key or section.key, e.g.\n"
        "                       --compare fixed:h=100 autoloco:power=0.7,outer.s_ref=50\n"
        "                       Verdict: d = mean over seeds of loss A - loss B; y = the\n"
        "                       half-width of its 95%% interval, t(0.975, N-1) x std / sqrt(N);\n"
        "                       x = 1 - (A's syncs / B's syncs), summed over seeds.\n"
        "                       |d| <= y (equal loss): \"A saves x%% syncs at equal loss\n"
        "                       (± y)\" (or B), or with the same syncs \"no difference\n"
        "                       detectable with N seeds\"; |d| > y: \"A is better\" (lower\n"
        "                       loss with no more syncs), or \"trade-off\". N = 1: none.\n"
        "                       --json: the numbers as one JSON line, last.\n");
}

/* One run over loaded data; prints the header line unless quiet. */
static int run_one(const al_config *c, const simflags *fl, const al_tokens *train,
                   const al_tokens *val, const al_groups *groups, FILE *jl, bool quiet,
                   al_sim_result *r, al_err *err) {
    al_sim_opts o;
    al_policy *pol = NULL;
    int rc = sim_opts_from(c, &o, &pol, err);
    if (rc) goto out;
    o.groups = groups;
    al_threads_set((int)(c->inner_threads > 0 ? c->inner_threads : 1));
    o.ddp = fl->ddp;
    o.jsonl = jl;
    if (!quiet) {
        printf("autoloco sim: %s, %d %s sites x %ld steps, preset %s, %s%s, codec %s\n",
               fl->ddp ? "ddp" : al_policy_name(pol), o.sites, al_sim_scenario_name(o.scenario),
               o.train.steps, o.model.preset, fl->ddp ? "" : "correction ",
               fl->ddp ? "" : al_correction_name(o.outer.correction), c->outer_codec);
        fflush(stdout);
    }
    rc = al_sim_run(&o, train, val, r, err);
    if (rc == 0 && !quiet) {
        printf("syncs %ld | bytes %.4g | final eval loss %.4f | train loss %.4f | dropped %ld\n",
               r->syncs, r->bytes, r->final_eval_loss, r->final_train_loss, r->dropped);
        printf("projected: compute %.1f s + comm %.1f s = %.1f s (%.0f Mbit/s, %.0f ms RTT); "
               "1 Gbit/s %.1f s, 100 Mbit/s %.1f s; wall %.1f s\n",
               r->compute_s, r->comm_s, r->projected_s, c->wan_bandwidth_mbit, c->wan_rtt_ms,
               r->projected_1g_s, r->projected_100m_s, r->wall_s);
        printf("theta_global sha256 %s\n", r->hash);
    }
    if (rc == 0 && !quiet && fl->json) {
        char *j = al_sim_result_json(&o, r);
        printf("%s\n", j ? j : "{}");
        free(j);
    }
out:
    al_policy_free(pol);
    return rc;
}

/* A --compare run: NAME[:KEY=VALUE[,KEY=VALUE]...] (a policy, its [policy]
 * keys or section.key for any other) or FILE.ini loaded over the rest. */
static int apply_spec(al_config *c, const char *spec, al_err *err) {
    size_t n = strlen(spec);
    if (n > 4 && !strcmp(spec + n - 4, ".ini")) return al_config_load(c, spec, err);
    char buf[512];
    if (n >= sizeof buf) return al_errf(err, AL_EINVAL, "--compare '%s': too long", spec);
    memcpy(buf, spec, n + 1);
    char *rest = strchr(buf, ':');
    if (rest) *rest++ = '\0';
    int rc = al_config_set(c, "policy", "name", buf, err);
    for (char *kv = rest; rc == 0 && kv && *kv;) {
        char *next = strchr(kv, ',');
        if (next) *next++ = '\0';
        char *eq = strchr(kv, '='), *dot = strchr(kv, '.');
        if (!eq) return al_errf(err, AL_EINVAL, "--compare '%s': '%s' is not KEY=VALUE", spec, kv);
        *eq = '\0';
        if (dot && dot < eq) {
            *dot = '\0';
            rc = al_config_set(c, kv, dot + 1, eq + 1, err);
        } else
            rc = al_config_set(c, "policy", kv, eq + 1, err);
        kv = next;
    }
    return rc ? al_err_prefix(err, "--compare '%s'", spec) : 0;
}

/* Student's t, two-sided 95%, by degrees of freedom (1.96 beyond 30). */
static double t95(long df) {
    static const double t[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                               2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                               2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                               2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
    return df >= 1 && df <= (long)AL_ARRAY_LEN(t) ? t[df - 1] : 1.96;
}

/* The verdict (sim_usage and docs/outer.md give the rule). */
static void verdict(char *out, size_t cap, long n, double d, double y, double sa, double sb) {
    double x = sb > 0 ? 100 * (1 - sa / sb) : 0, xb = sa > 0 ? 100 * (1 - sb / sa) : 0;
    if (n < 2)
        snprintf(out, cap, "one seed: no verdict (--seeds 2 or more)");
    else if (fabs(d) <= y && sa < sb)
        snprintf(out, cap, "A saves %.1f%% syncs at equal loss (± %.4f)", x, y);
    else if (fabs(d) <= y && sb < sa)
        snprintf(out, cap, "B saves %.1f%% syncs at equal loss (± %.4f)", xb, y);
    else if (fabs(d) <= y)
        snprintf(out, cap,
                 "no difference detectable with %ld seeds (loss A - B %+.4f ± %.4f, the same "
                 "syncs)",
                 n, d, y);
    else {
        const char *w = d < 0 ? "A" : "B";
        double more = d < 0 ? -x : -xb; /* the winner's extra syncs, % of the other's */
        if (more <= 0)
            snprintf(out, cap, "%s is better: loss lower by %.4f ± %.4f with %.1f%% fewer syncs", w,
                     fabs(d), y, -more);
        else
            snprintf(out, cap,
                     "trade-off: %s's loss is lower by %.4f ± %.4f with %.1f%% more syncs", w,
                     fabs(d), y, more);
    }
}

static int compare(int argc, char **argv, const simflags *fl0, const al_tokens *train,
                   const al_tokens *val, const al_groups *groups, al_err *err) {
    long n = fl0->seeds ? fl0->seeds : 3, seed0;
    double *loss = calloc((size_t)(2 * n), sizeof *loss), *syncs = calloc((size_t)(2 * n), 8);
    int rc = loss && syncs ? 0 : al_errf(err, AL_ENOMEM, "sim: out of memory");
    {
        al_config c;
        simflags fl = {0};
        if (rc == 0 && (rc = parse_args(&c, &fl, argc, argv, err)) == 0) {
            seed0 = c.inner_seed;
            printf("autoloco sim --compare: A = %s, B = %s, %ld seeds (%ld..%ld), %ld %s sites x "
                   "%ld steps, preset %s\n",
                   fl0->cmp[0], fl0->cmp[1], n, seed0, seed0 + n - 1, c.sim_sites, c.sim_scenario,
                   c.inner_steps, c.model_preset);
        }
        al_config_free(&c);
    }
    for (long i = 0; i < 2 * n && rc == 0; i++) {
        long seed = seed0 + i / 2;
        int side = (int)(i % 2);
        al_config c;
        simflags fl = {0};
        char sv[32];
        snprintf(sv, sizeof sv, "%ld", seed);
        al_sim_result r = {0};
        if ((rc = parse_args(&c, &fl, argc, argv, err)) == 0 &&
            (rc = apply_spec(&c, fl0->cmp[side], err)) == 0 &&
            (rc = al_config_set(&c, "inner", "seed", sv, err)) == 0 &&
            (rc = run_one(&c, &fl, train, val, groups, NULL, true, &r, err)) == 0) {
            loss[i] = r.final_eval_loss;
            syncs[i] = (double)r.syncs;
            printf("[%ld/%ld] seed %ld %c (%s): final eval loss %.6f, syncs %ld, theta %.16s, "
                   "%.1f s\n",
                   i + 1, 2 * n, seed, "AB"[side], fl0 -> cmp[side], r.final_eval_loss, r.syncs,
                   r.hash, r.wall_s);
            fflush(stdout);
        }
        al_sim_result_free(&r);
        al_config_free(&c);
        if (rc) al_err_prefix(err, "sim --compare: seed %ld, %c", seed, "AB"[side]);
    }
    if (rc == 0) {
        double sum = 0, ss = 0, sa = 0, sb = 0;
        printf("\n%-8s %10s %10s %10s %8s %8s\n", "seed", "loss A", "loss B", "A - B", "syncs A",
               "syncs B");
        for (long k = 0; k < n; k++) {
            double d = loss[2 * k] - loss[2 * k + 1];
            sum += d;
            sa += syncs[2 * k];
            sb += syncs[2 * k + 1];
            printf("%-8ld %10.6f %10.6f %+10.6f %8.0f %8.0f\n", seed0 + k, loss[2 * k],
                   loss[2 * k + 1], d, syncs[2 * k], syncs[2 * k + 1]);
        }
        double mean = sum / (double)n;
        for (long k = 0; k < n; k++) {
            double e = loss[2 * k] - loss[2 * k + 1] - mean;
            ss += e * e;
        }
        double sd = n > 1 ? sqrt(ss / (double)(n - 1)) : 0, y = t95(n - 1) * sd / sqrt((double)n);
        printf("mean A - B: %+.6f, std %.6f, 95%% interval ± %.6f (t %.3f, %ld seeds); syncs A "
               "%.0f, B %.0f in all\n",
               mean, sd, n > 1 ? y : 0.0, t95(n - 1), n, sa, sb);
        char v[256];
        verdict(v, sizeof v, n, mean, y, sa, sb);
        printf("verdict: %s\n", v);
        if (fl0->json) {
            printf("{\"a\":\"%s\",\"b\":\"%s\",\"seeds\":[", fl0->cmp[0], fl0->cmp[1]);
            for (long k = 0; k < n; k++)
                printf("%s{\"seed\":%ld,\"loss_a\":%.17g,\"loss_b\":%.17g,\"syncs_a\":%.0f,"
                       "\"syncs_b\":%.0f}",
                       k ? "," : "", seed0 + k, loss[2 * k], loss[2 * k + 1], syncs[2 * k],
                       syncs[2 * k + 1]);
            printf("],\"mean_diff\":%.17g,\"std\":%.17g,\"half_width\":%.17g,\"verdict\":\"%s\"}\n",
                   mean, sd, y, v);
        }
    }
    free(loss);
    free(syncs);
    return rc;
}

/* The languages scenario: the train file's groups (site m on group m), one
 * per site. */
static int load_groups(const al_config *c, const al_tokens *train, al_groups *g, al_err *err) {
    int rc = al_groups_load(g, c->data_train, err);
    if (rc == AL_ENOTFOUND)
        return al_errf(err, rc,
                       "[sim] scenario languages: [data] train %s has no groups file %s: "
                       "prepare it with `autoloco data prep --groups` (tools/setup writes "
                       "data/languages/: --set data.train=data/languages/train.bin --set "
                       "data.val=data/languages/val.bin)",
                       c->data_train, g->path);
    if (rc == 0 && g->n != c->sim_sites)
        rc = al_errf(err, AL_EMISMATCH,
                     "[sim] scenario languages: %s has %d groups but [sim] sites = %ld (one site "
                     "per group: --sites %d)",
                     g->path, g->n, c->sim_sites, g->n);
    if (rc == 0) rc = al_groups_check(g, train, err);
    if (rc) g->n = 0;
    return rc;
}

int al_cmd_sim(int argc, char **argv, al_err *err) {
    al_config c;
    simflags fl = {0};
    al_tokens train = {0}, val = {0};
    FILE *jl = NULL;
    al_groups *groups = calloc(1, sizeof *groups); /* ~2 KB: not on the stack */
    if (!groups) return al_errf(err, AL_ENOMEM, "sim: out of memory");
    int rc = parse_args(&c, &fl, argc, argv, err);
    if (rc) goto out;
    if (fl.cmp[0] && (fl.ddp || fl.jsonl)) {
        rc = al_errf(err, AL_EINVAL, "sim: --compare runs policies: not with --ddp or --jsonl");
        goto out;
    }
    if (fl.cmp[0]) { /* check both runs' settings before any data is read */
        for (int side = 0; side < 2 && rc == 0; side++) {
            al_config t;
            simflags tf = {0};
            al_sim_opts o;
            al_policy *pol = NULL;
            if ((rc = parse_args(&t, &tf, argc, argv, err)) == 0 &&
                (rc = apply_spec(&t, fl.cmp[side], err)) == 0 &&
                (rc = sim_opts_from(&t, &o, &pol, err)))
                al_err_prefix(err, "--compare '%s'", fl.cmp[side]);
            al_policy_free(pol);
            al_config_free(&t);
        }
        if (rc) goto out;
    } else { /* the settings first, so that a bad key is named before data is read */
        al_sim_opts o;
        al_policy *pol = NULL;
        rc = sim_opts_from(&c, &o, &pol, err);
        al_policy_free(pol);
        if (rc) goto out;
    }
    if ((rc = al_tokens_load(&train, c.data_train, err))) goto out;
    if (c.data_val[0] && (rc = al_tokens_load(&val, c.data_val, err))) goto out;
    if (!strcmp(c.sim_scenario, "languages") && (rc = load_groups(&c, &train, groups, err)))
        goto out;
    const al_tokens *v = val.tok ? &val : NULL;
    const al_groups *g = groups->n ? groups : NULL;
    if (fl.cmp[0]) {
        rc = compare(argc, argv, &fl, &train, v, g, err);
        goto out;
    }
    if (fl.jsonl && !(jl = fopen(fl.jsonl, "w"))) {
        rc = al_errf(err, AL_EIO, "--jsonl %s: cannot open for writing", fl.jsonl);
        goto out;
    }
    al_sim_result r;
    if ((rc = run_one(&c, &fl, &train, v, g, jl, false, &r, err))) goto out;
    al_sim_result_free(&r);
out:
    free(groups);
    if (jl) fclose(jl);
    al_tokens_free(&train);
    al_tokens_free(&val);
    al_config_free(&c);
    return rc == SIM_DONE ? 0 : rc;
}
