/* cmd_data.c -- `autoloco data prep`: text to token files; and where GPT-2's
 * tokenizer files are configured (al_cli_load_bpe, shared with sample,
 * export and bench tokenizer). */
#include "al_store.h"
#include "al_cli.h"
#include "al_data.h"

#include <getopt.h>
#include <stdbool.h>
#include <string.h>

int al_cli_tokcfg_arg(al_cli_tokcfg *c, char kind, const char *arg, al_err *err) {
    if (c->n == (int)AL_ARRAY_LEN(c->arg))
        return al_errf(err, AL_EINVAL, "too many -c/--set options (at most %d)", c->n);
    c->kind[c->n] = kind;
    c->arg[c->n++] = arg;
    return 0;
}

int al_cli_tokenizer_dir(const al_cli_tokcfg *c, char *dir, size_t cap, int *explicit_,
                         al_err *err) {
    al_config cfg;
    int rc = al_config_init(&cfg, err);
    if (rc) return rc;
    char def[4096];
    snprintf(def, sizeof def, "%s", cfg.data_tokenizer_dir);
    for (int i = 0; rc == 0 && i < c->n; i++)
        rc = c->kind[i] == 'c' ? al_config_load(&cfg, c->arg[i], err)
                               : al_config_set_arg(&cfg, c->arg[i], err);
    if (rc == 0) {
        snprintf(dir, cap, "%s", cfg.data_tokenizer_dir);
        if (explicit_) *explicit_ = strcmp(def, cfg.data_tokenizer_dir) != 0;
    }
    al_config_free(&cfg);
    return rc;
}

int al_cli_load_bpe(const al_cli_tokcfg *c, al_bpe *t, al_err *err) {
    char dir[4096];
    int rc = al_cli_tokenizer_dir(c, dir, sizeof dir, NULL, err);
    if (rc == 0 && (rc = al_bpe_load_dir(t, dir, err))) al_err_prefix(err, "[data] tokenizer_dir");
    return rc;
}

static void data_usage(FILE *f) {
    fprintf(f,
            "usage: autoloco data prep --format fortune|text|jsonl -o OUTDIR [options] INPUT...\n"
            "       autoloco data prep --format F -o OUTDIR --groups [options] NAME=INPUT...\n\n"
            "Tokenize text into OUTDIR/train.bin, OUTDIR/val.bin (llm.c token format: uint16\n"
            "ids, the end-of-text token before every document and at the end) and their\n"
            ".idx document indexes. INPUT is a file or a folder of files (sorted; *.dat, *.u8\n"
            "and hidden files skipped). fortune: documents separated by '%%' lines; text: by\n"
            "blank lines; jsonl: one {\"text\": ...} object per line.\n\n"
            "Tokenizers: bytes (256 bytes + end-of-document = 257) or gpt2 (GPT-2's BPE, 50257\n"
            "tokens, the same ids as tiktoken; any bytes encode, invalid UTF-8 included; text\n"
            "spelling <|endoftext|> stays text). gpt2 reads [data] tokenizer_dir's\n"
            "encoder.json and vocab.bpe (tools/setup fetches them) and encodes with several\n"
            "threads, printing progress on stderr for large inputs.\n\n"
            "options:\n"
            "  --format F        input format (required)\n"
            "  -o, --out DIR     output folder (required)\n"
            "  --tokenizer T     bytes|gpt2 (default bytes)\n"
            "  --threads N       gpt2: encoding threads (default: all cores)\n"
            "  --val-frac X      fraction of documents for validation (default 0.05)\n"
            "  --seed N          seed of the split (default 1)\n"
            "  --groups          each INPUT is one group (NAME=PATH, or PATH: named by its\n"
            "                    last component), e.g. one language: train.bin holds the\n"
            "                    groups' training documents group after group and\n"
            "                    train.groups says where each starts (sim --scenario\n"
            "                    languages: site m trains on group m); val.bin mixes the\n"
            "                    groups with the same bytes of text from each (the\n"
            "                    smallest group's validation bytes; a group's last piece\n"
            "                    cut at a UTF-8 character boundary), interleaved\n"
            "  -c FILE.ini       configuration ([data] tokenizer_dir)\n"
            "  --set S.K=V       override a key, e.g. --set data.tokenizer_dir=DIR\n");
}

/* --groups: INPUT is NAME=PATH, or PATH named by its last component. */
static int group_inputs(char **in, int n, const char **paths, char (*names)[AL_GROUP_NAME_MAX],
                        const char **namep, al_err *err) {
    if (n > AL_GROUPS_MAX)
        return al_errf(err, AL_EINVAL, "data prep --groups: %d inputs, at most %d groups", n,
                       AL_GROUPS_MAX);
    for (int k = 0; k < n; k++) {
        const char *eq = strchr(in[k], '='), *name = in[k];
        size_t len;
        if (eq) {
            paths[k] = eq + 1;
            len = (size_t)(eq - in[k]);
        } else {
            paths[k] = in[k];
            size_t end = strlen(in[k]);
            while (end > 1 && in[k][end - 1] == '/') end--;
            size_t b = end;
            while (b > 0 && in[k][b - 1] != '/') b--;
            name = in[k] + b;
            len = end - b;
        }
        if (len == 0 || len >= AL_GROUP_NAME_MAX || !*paths[k])
            return al_errf(err, AL_EINVAL,
                           "data prep --groups: input '%s': expected NAME=PATH or PATH, NAME 1 "
                           "to %d characters",
                           in[k], AL_GROUP_NAME_MAX - 1);
        memcpy(names[k], name, len);
        names[k][len] = '\0';
        namep[k] = names[k];
    }
    return 0;
}

static void progress(void *ctx, size_t done, size_t total, double s) {
    (void)ctx;
    fprintf(stderr, "data prep: tokenized %.1f of %.1f MB (%.0f%%), %.1f MB/s\n", done / 1e6,
            total / 1e6, total ? 100.0 * done / total : 100.0, s > 0 ? done / 1e6 / s : 0.0);
}

int al_cmd_data(int argc, char **argv, al_err *err) {
    if (argc < 2 || strcmp(argv[1], "prep") != 0) {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            data_usage(stdout);
            return 0;
        }
        data_usage(stderr);
        return AL_CLI_USAGE;
    }
    argc--;
    argv++;
    static const struct option opts[] = {{"format", required_argument, 0, 'f'},
                                         {"out", required_argument, 0, 'o'},
                                         {"val-frac", required_argument, 0, 'v'},
                                         {"seed", required_argument, 0, 's'},
                                         {"tokenizer", required_argument, 0, 't'},
                                         {"threads", required_argument, 0, 'T'},
                                         {"config", required_argument, 0, 'c'},
                                         {"set", required_argument, 0, 'S'},
                                         {"groups", no_argument, 0, 'g'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    bool groups = false;
    const char *format = NULL, *out = NULL, *tokenizer = "bytes";
    double val_frac = 0.05;
    long seed = 1, threads = 0;
    al_cli_tokcfg tc = {0};
    int ch, rc = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:c:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'f':
            format = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 't':
            tokenizer = optarg;
            break;
        case 'T':
            rc = al_cli_int("--threads", optarg, 1, 1024, &threads, err);
            break;
        case 'v':
            rc = al_cli_double("--val-frac", optarg, &val_frac, err);
            break;
        case 's':
            rc = al_cli_int("--seed", optarg, 0, 1L << 62, &seed, err);
            break;
        case 'c':
        case 'S':
            rc = al_cli_tokcfg_arg(&tc, ch == 'c' ? 'c' : 's', optarg, err);
            break;
        case 'g':
            groups = true;
            break;
        case 'h':
            data_usage(stdout);
            return 0;
        default:
            data_usage(stderr);
            return AL_CLI_USAGE;
        }
        if (rc) return rc;
    }
    if (!format || !out || optind >= argc) {
        data_usage(stderr);
        return AL_CLI_USAGE;
    }
    al_text_format fmt;
    if ((rc = al_text_format_parse(format, &fmt, err))) return rc;
    int gpt2 = !strcmp(tokenizer, "gpt2");
    if (!gpt2 && strcmp(tokenizer, "bytes") != 0)
        return al_errf(err, AL_EINVAL, "--tokenizer: unknown tokenizer '%s' (bytes|gpt2)",
                       tokenizer);
    al_bpe bpe = {0};
    if (gpt2 && (rc = al_cli_load_bpe(&tc, &bpe, err))) return al_err_prefix(err, "data prep");
    int nin = argc - optind;
    const char *paths[AL_GROUPS_MAX];
    char names[AL_GROUPS_MAX][AL_GROUP_NAME_MAX];
    const char *namep[AL_GROUPS_MAX];
    if (groups && (rc = group_inputs(argv + optind, nin, paths, names, namep, err))) {
        al_bpe_free(&bpe);
        return rc;
    }
    al_prep_opts o = {.val_frac = val_frac,
                      .seed = (uint64_t)seed,
                      .bpe = gpt2 ? &bpe : NULL,
                      .threads = (int)threads,
                      .progress = progress,
                      .group_names = groups ? namep : NULL};
    al_prep_stats s;
    rc = al_data_prep_ex(groups ? paths : (const char *const *)argv + optind, nin, fmt, out, &o, &s,
                         err);
    al_bpe_free(&bpe);
    if (rc) return rc;
    printf("data prep: %zu files, %zu documents (bytes: min %zu, median %zu, max %zu)\n", s.files,
           s.docs, s.min_len, s.median_len, s.max_len);
    if (gpt2)
        printf("  gpt2 tokenizer: %.1f MB in %.2f s, %.1f MB/s on %d threads, %.2f bytes a "
               "token\n",
               s.bytes / 1e6, s.encode_s, s.encode_s > 0 ? s.bytes / 1e6 / s.encode_s : 0.0,
               s.threads,
               s.train_tokens + s.val_tokens > s.docs + 2
                   ? (double)s.bytes / (double)(s.train_tokens + s.val_tokens - s.docs - 2)
                   : 0.0);
    printf("  %s/train.bin: %zu documents, %zu tokens\n", out, s.train_docs, s.train_tokens);
    printf("  %s/val.bin:   %zu documents, %zu tokens\n", out, s.val_docs, s.val_tokens);
    for (int k = 0; k < s.ngroups; k++)
        printf("  group %-8s train %zu documents (%zu bytes), val %zu bytes in %zu pieces%s\n",
               namep[k], s.group[k].train_docs, s.group[k].train_bytes, s.group[k].val_bytes,
               s.group[k].val_docs, s.group[k].val_cut ? " (the last one cut)" : "");
    if (s.ngroups) printf("  %s/train.groups: %d groups\n", out, s.ngroups);
    return 0;
}
