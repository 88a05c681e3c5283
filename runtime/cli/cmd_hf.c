/* cmd_hf.c -- `autoloco export` and `autoloco import`: checkpoints to and from
 * other tools' layouts (today Hugging Face's GPT-2, see al_store.h). */
#include "al_store.h"
#include "al_cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void export_usage(FILE *f) {
    fprintf(f,
            "usage: autoloco export --format hf --ckpt PATH -o DIR [--theta auto|local|global]\n\n"
            "Write DIR/config.json and DIR/model.safetensors in Hugging Face GPT2LMHeadModel's\n"
            "layout (its tensor names, Conv1D weights [in, out], the vocabulary cut back to\n"
            "its real size, n_positions = T), so that from_pretrained(DIR) loads the model.\n"
            "--theta: an agent's checkpoint holds theta_local and theta_global (default auto:\n"
            "theta_global where present).\n");
}

static void import_usage(FILE *f) {
    fprintf(f, "usage: autoloco import --format hf DIR -o CKPT [--preset P]\n\n"
               "Read a Hugging Face GPT-2 folder (config.json, model.safetensors in float32;\n"
               "tensor names with or without 'transformer.') and write a checkpoint under CKPT\n"
               "(CKPT/step-00000000: parameters, zero AdamW moments) that sample, eval, export\n"
               "and train --resume take. The preset is the one with the config's dimensions;\n"
               "--preset P insists on one.\n");
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
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    const char *fmt = NULL, *ckpt = NULL, *out = NULL;
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
    rc = al_hf_export(out, &cfg, params, err);
    free(params);
    if (rc) return al_err_prefix(err, "export");
    printf("exported %s (theta_%s, preset %s) to %s/{config.json,model.safetensors}\n", dir,
           theta == AL_THETA_GLOBAL ? "global" : "local", cfg.preset, out);
    return 0;
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
        if (rc == 0) rc = al_ckpt_save(out, &tr, "", 0, dir, sizeof dir, err);
        al_trainer_free(&tr);
    }
    free(params);
    if (rc) return al_err_prefix(err, "import");
    printf("imported %s (preset %s) into %s\n", in, cfg.preset, dir);
    return 0;
}
