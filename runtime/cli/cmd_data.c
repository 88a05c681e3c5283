/* cmd_data.c -- `autoloco data prep`: text to token files. */
#include "al_cli.h"
#include "al_data.h"

#include <getopt.h>
#include <string.h>

static void data_usage(FILE *f) {
    fprintf(f,
            "usage: autoloco data prep --format fortune|text|jsonl -o OUTDIR [options] INPUT...\n\n"
            "Tokenize text with the byte tokenizer (256 bytes + end-of-document = 257) into\n"
            "OUTDIR/train.bin, OUTDIR/val.bin (llm.c token format) and their .idx document\n"
            "indexes. INPUT is a file or a folder of files (sorted; *.dat, *.u8 and hidden\n"
            "files skipped). fortune: documents separated by '%%' lines; text: by blank\n"
            "lines; jsonl: one {\"text\": ...} object per line.\n\n"
            "options:\n"
            "  --format F        input format (required)\n"
            "  -o, --out DIR     output folder (required)\n"
            "  --val-frac X      fraction of documents for validation (default 0.05)\n"
            "  --seed N          seed of the split (default 1)\n");
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
    static const struct option opts[] = {
        {"format", required_argument, 0, 'f'},   {"out", required_argument, 0, 'o'},
        {"val-frac", required_argument, 0, 'v'}, {"seed", required_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    const char *format = NULL, *out = NULL;
    double val_frac = 0.05;
    long seed = 1;
    int ch, rc = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'f':
            format = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'v':
            rc = al_cli_double("--val-frac", optarg, &val_frac, err);
            break;
        case 's':
            rc = al_cli_int("--seed", optarg, 0, 1L << 62, &seed, err);
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
    al_prep_stats s;
    rc = al_data_prep((const char *const *)argv + optind, argc - optind, fmt, out, val_frac,
                      (uint64_t)seed, &s, err);
    if (rc) return rc;
    printf("data prep: %zu files, %zu documents (bytes: min %zu, median %zu, max %zu)\n", s.files,
           s.docs, s.min_len, s.median_len, s.max_len);
    printf("  %s/train.bin: %zu documents, %zu tokens\n", out, s.train_docs, s.train_tokens);
    printf("  %s/val.bin:   %zu documents, %zu tokens\n", out, s.val_docs, s.val_tokens);
    return 0;
}
