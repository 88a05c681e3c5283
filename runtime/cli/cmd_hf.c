/* cmd_hf.c -- `autoloco export` and `autoloco import`: checkpoints to and from
 * other tools' layouts (today Hugging Face's GPT-2, see al_store.h). */
#include "al_store.h"
#include "al_cli.h"
#include "al_tokenizer.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void export_usage(FILE *f) {
    fprintf(f, "usage: autoloco export --format hf --ckpt PATH -o DIR [--theta auto|local|global]\n"
               "                       [--config FILE.ini] [--set data.tokenizer_dir=DIR]\n\n"
               "Write DIR/config.json and DIR/model.safetensors in Hugging Face GPT2LMHeadModel's\n"
               "layout (its tensor names, Conv1D weights [in, out], the vocabulary cut back to\n"
               "its real size, n_positions = T), so that from_pretrained(DIR) loads the model.\n"
               "--theta: an agent's checkpoint holds theta_local and theta_global (default auto:\n"
               "theta_global where present). A GPT-2-vocabulary model gets its tokenizer beside\n"
               "the weights (vocab.json, merges.txt, tokenizer_config.json,\n"
               "special_tokens_map.json): the checkpoint's own (an import's), else [data]\n"
               "tokenizer_dir's; without one the export is refused.\n");
}

static void import_usage(FILE *f) {
    fprintf(f, "usage: autoloco import --format hf DIR -o CKPT [--preset P]\n\n"
               "Read a Hugging Face GPT-2 folder (config.json, model.safetensors in float32;\n"
               "tensor names with or without 'transformer.') and write a checkpoint under CKPT\n"
               "(CKPT/step-00000000: parameters, zero AdamW moments) that sample, eval, export\n"
               "and train --resume take. The preset is the one with the config's dimensions;\n"
               "--preset P insists on one. A tokenizer in DIR (vocab.json and merges.txt) is\n"
               "checked and kept in the checkpoint, where sample and export find it.\n");
}

/* --format: the layouts known; one today. */
static int check_format(const char *fmt, al_err *err) {
    if (!fmt) return al_errf(err, AL_EINVAL, "--format is required (known: hf)");
    if (strcmp(fmt, "hf") != 0)
        return al_errf(err, AL_EINVAL, "--format: unknown format '%s' (known: hf)", fmt);
    return 0;
}

int al_cmd_export(int argc, char **argv, al_err *err) {
    static const struct option opts[] = {
        {"format", required_argument, 0, 'f'}, {"ckpt", required_argument, 0, 'c'},
        {"out", required_argument, 0, 'o'},    {"theta", required_argument, 0, 'W'},
        {"config", required_argument, 0, 'C'}, {"set", required_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    const char *fmt = NULL, *ckpt = NULL, *out = NULL;
    al_cli_tokcfg tc = {0};
    al_theta theta = AL_THETA_AUTO;
    int ch, rc = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'f':
            fmt = optarg;
            break;
        case 'c':
            ckpt = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'W':
            rc = al_theta_parse(optarg, &theta, err);
            break;
        case 'C':
        case 'S':
            rc = al_cli_tokcfg_arg(&tc, ch == 'C' ? 'c' : 's', optarg, err);
            break;
        case 'h':
            export_usage(stdout);
            return 0;
        default:
            export_usage(stderr);
            return AL_CLI_USAGE;
        }
        if (rc) return rc;
    }
    if (optind < argc)
        return al_errf(err, AL_EINVAL, "export: unexpected argument '%s'", argv[optind]);
    if ((rc = check_format(fmt, err))) return rc;
    if (!ckpt || !out)
        return al_errf(err, AL_EINVAL, "export: --ckpt PATH and -o DIR are required");
    al_log log;
    al_log_init(&log, AL_LOG_WARN, stderr);
    al_model_config cfg;
    float *params = NULL;
    char dir[4096];
    if ((rc = al_ckpt_read_params(ckpt, &theta, &log, &cfg, &params, dir, sizeof dir, err)))
        return rc;
    /* GPT-2's vocabulary: the tokenizer goes too (the checkpoint's own first) */
    al_bpe bpe = {0};
    int tok = cfg.V == AL_GPT2_VOCAB;
    if (tok) {
        char own[4200];
        snprintf(own, sizeof own, "%s/vocab.json", dir);
        FILE *f = fopen(own, "r");
        if (f) fclose(f);
        rc = f ? al_bpe_load_dir(&bpe, dir, err) : al_cli_load_bpe(&tc, &bpe, err);
    }
    if (rc == 0) rc = al_hf_export(out, &cfg, params, err);
    if (rc == 0 && tok) rc = al_hf_export_tokenizer(out, &bpe, &cfg, err);
    free(params);
    al_bpe_free(&bpe);
    if (rc) return al_err_prefix(err, "export");
    printf("exported %s (theta_%s, preset %s) to %s/{config.json,model.safetensors%s}\n", dir,
           theta == AL_THETA_GLOBAL ? "global" : "local", cfg.preset, out,
           tok ? ",vocab.json,merges.txt,tokenizer_config.json,special_tokens_map.json" : "");
    return 0;
}

/* The tokenizer's files as read, written into the checkpoint. */
typedef struct tok_files {
    char *data[2];
    size_t len[2];
} tok_files;

static int tok_write(void *ctx, int i, const char *path, al_err *err) {
    const tok_files *tf = ctx;
    return al_write_file_sync(path, tf->data[i], tf->len[i], err);
}

int al_cmd_import(int argc, char **argv, al_err *err) {
    static const struct option opts[] = {{"format", required_argument, 0, 'f'},
                                         {"out", required_argument, 0, 'o'},
                                         {"preset", required_argument, 0, 'P'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *fmt = NULL, *out = NULL, *preset = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'f':
            fmt = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'P':
            preset = optarg;
            break;
        case 'h':
            import_usage(stdout);
            return 0;
        default:
            import_usage(stderr);
            return AL_CLI_USAGE;
        }
    }
    int rc = check_format(fmt, err);
    if (rc) return rc;
    if (optind != argc - 1 || !out)
        return al_errf(err, AL_EINVAL, "import: one input folder DIR and -o CKPT are required");
    const char *in = argv[optind];
    al_model_config cfg;
    float *params = NULL;
    if ((rc = al_hf_import(in, preset, &cfg, &params, err))) return al_err_prefix(err, "import");
    /* a tokenizer beside the weights: checked, then kept in the checkpoint */
    tok_files tf = {{NULL, NULL}, {0, 0}};
    char vj[4200], mt[4200];
    snprintf(vj, sizeof vj, "%s/vocab.json", in);
    snprintf(mt, sizeof mt, "%s/merges.txt", in);
    FILE *f = fopen(vj, "r");
    int tok = f != NULL;
    if (f) fclose(f);
    if (tok) {
        al_bpe bpe;
        rc = al_bpe_load(&bpe, vj, mt, err);
        if (rc == 0 && bpe.n != cfg.V)
            rc = al_errf(err, AL_EMISMATCH, "%s: %d tokens, the model has a vocabulary of %d", vj,
                         bpe.n, cfg.V);
        if (rc == 0) al_bpe_free(&bpe);
        if (rc == 0) rc = al_read_file(vj, &tf.data[0], &tf.len[0], err);
        if (rc == 0) rc = al_read_file(mt, &tf.data[1], &tf.len[1], err);
        if (rc) {
            free(params);
            free(tf.data[0]);
            return al_err_prefix(err, "import");
        }
    }
    static const char *const tok_names[] = {"vocab.json", "merges.txt"};
    al_ckpt_extra extra = {.nfiles = tok ? 2 : 0, .files = tok_names, .write = tok_write};
    /* a trainer carries the parameters into a checkpoint that resumes too */
    al_train_opts o;
    al_train_opts_default(&o);
    o.batch = 1;
    o.seq = 1;
    al_trainer tr;
    char dir[4096];
    rc = al_trainer_init(&tr, &cfg, &o, NULL, NULL, err);
    if (rc == 0) {
        rc = al_model_from_host(&tr.model, tr.model.params, params, tr.model.lay.nparams, err);
        if (rc == 0) rc = al_ckpt_save_ex(out, &tr, "", 0, &extra, &tf, dir, sizeof dir, err);
        al_trainer_free(&tr);
    }
    free(params);
    free(tf.data[0]);
    free(tf.data[1]);
    if (rc) return al_err_prefix(err, "import");
    printf("imported %s (preset %s%s) into %s\n", in, cfg.preset, tok ? ", with its tokenizer" : "",
           dir);
    return 0;
}
