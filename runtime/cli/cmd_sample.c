/* cmd_sample.c -- `autoloco sample`: text from a checkpoint, with a KV cache. */
#include "al_store.h"
#include "al_cli.h"
#include "al_sample.h"
#include "al_tokenizer.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void sample_usage(FILE *f) {
    fprintf(f,
            "usage: autoloco sample --ckpt PATH [options]\n\n"
            "Generate from a checkpoint (train's, or an agent's theta_global) one position at\n"
            "a time with a KV cache, on the CPU. A generation is a document: it starts with\n"
            "the end-of-document token at position 0, then the prompt, and stops at the next\n"
            "end-of-document, after --tokens tokens, or when the context (T) is full.\n"
            "Byte models print text; GPT-2-vocabulary models too, through GPT-2's tokenizer:\n"
            "the checkpoint's own (vocab.json and merges.txt, from an import) or [data]\n"
            "tokenizer_dir's (tools/setup fetches it); without one they print token ids\n"
            "(--vocab: an llm.c tokenizer file instead). The speed goes to stderr. The same\n"
            "seed gives the same text.\n\n"
            "options:\n"
            "  --ckpt PATH        checkpoint folder, or a folder of step-* checkpoints (newest)\n"
            "  --prompt TEXT      the document's beginning (text; a model without a tokenizer:\n"
            "                     token ids separated by spaces or commas)\n"
            "  --tokens N         tokens to generate (default 200)\n"
            "  --temperature T    softmax temperature, 0 = greedy (default 1.0)\n"
            "  --top-k K          sample among the K most likely (default 40; 0 = all)\n"
            "  --seed S           sampling seed (default 1337)\n"
            "  --theta W          auto|local|global: an agent's checkpoint holds both\n"
            "                     (default auto: theta_global where present)\n"
            "  --vocab FILE       llm.c tokenizer file (gpt2_tokenizer.bin) to print text\n"
            "  --threads N        kernel threads (default 1: a step is one row, and more\n"
            "                     threads cost more than they give on small models)\n"
            "  --json             one JSON object instead of the text\n"
            "  --config FILE.ini  configuration ([data] tokenizer_dir)\n"
            "  --set S.K=V        override a key, e.g. --set data.tokenizer_dir=DIR\n");
}

/* llm.c's tokenizer file: 256 uint32 (magic 20240328, version, vocabulary
 * size, ...), then per token a length byte and the bytes. */
typedef struct vocab {
    char **tok;
    int n;
} vocab;

static void vocab_free(vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->tok[i]);
    free(v->tok);
    memset(v, 0, sizeof *v);
}

static int vocab_load(vocab *v, const char *path, int V, al_err *err) {
    memset(v, 0, sizeof *v);
    char *raw;
    size_t len;
    int rc = al_read_file(path, &raw, &len, err);
    if (rc) return al_err_prefix(err, "--vocab");
    uint32_t h[256];
    if (len < sizeof h) {
        free(raw);
        return al_errf(err, AL_EFORMAT, "--vocab %s: truncated header", path);
    }
    memcpy(h, raw, sizeof h);
    if (h[0] != 20240328 || (h[1] != 1 && h[1] != 2))
        rc = al_errf(err, AL_EFORMAT,
                     "--vocab %s: not an llm.c tokenizer file (magic %u, version %u)", path, h[0],
                     h[1]);
    else if ((int)h[2] != V)
        rc = al_errf(err, AL_EMISMATCH, "--vocab %s: vocabulary %u, the model has %d", path, h[2],
                     V);
    else if (!(v->tok = calloc((size_t)V, sizeof *v->tok)))
        rc = al_errf(err, AL_ENOMEM, "--vocab: out of memory");
    size_t at = sizeof h;
    for (int i = 0; rc == 0 && i < V; i++) {
        size_t n = at < len ? (unsigned char)raw[at] : 0;
        if (n == 0 || at + 1 + n > len) {
            rc = al_errf(err, AL_EFORMAT, "--vocab %s: truncated or empty entry at token %d", path,
                         i);
            break;
        }
        if (!(v->tok[i] = malloc(n + 1))) {
            rc = al_errf(err, AL_ENOMEM, "--vocab: out of memory");
            break;
        }
        memcpy(v->tok[i], raw + at + 1, n);
        v->tok[i][n] = '\0';
        v->n = i + 1;
        at += 1 + n;
    }
    free(raw);
    if (rc) vocab_free(v);
    return rc;
}

/* Tokens as text: through GPT-2's tokenizer or the vocabulary file, else
 * bytes (byte models) or ids. */
static char *decode(const al_bpe *bpe, const vocab *v, const al_model_config *c, const int *tok,
                    int n) {
    if (bpe) {
        uint32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
        char *s = NULL;
        size_t len;
        for (int i = 0; ids && i < n; i++) ids[i] = (uint32_t)tok[i];
        if (ids && al_bpe_decode(bpe, ids, (size_t)n, &s, &len, NULL) != 0) s = NULL;
        free(ids);
        return s;
    }
    size_t cap = 64, len = 0;
    char *s = malloc(cap);
    for (int i = 0; s && i < n; i++) {
        char id[16];
        const char *piece = id;
        if (v->tok)
            piece = v->tok[tok[i]];
        else if (c->V == 257)
            id[0] = (char)tok[i], id[1] = '\0';
        else
            snprintf(id, sizeof id, "%s%d", len ? " " : "", tok[i]);
        size_t pl = strlen(piece);
        if (c->V == 257 && !v->tok && tok[i] == 0) pl = 1; /* a NUL byte */
        if (len + pl + 1 > cap) {
            char *ns = realloc(s, cap = 2 * (len + pl + 1));
            if (!ns) {
                free(s);
                return NULL;
            }
            s = ns;
        }
        memcpy(s + len, piece, pl);
        len += pl;
    }
    if (s) s[len] = '\0';
    return s;
}

/* The prompt as tokens after the end-of-document token (V - 1). */
static int encode(const al_bpe *bpe, const al_model_config *c, const char *text, int **tok, int *n,
                  al_err *err) {
    size_t len = strlen(text);
    *tok = malloc((len + 1) * sizeof(int));
    if (!*tok) return al_errf(err, AL_ENOMEM, "--prompt: out of memory");
    (*tok)[0] = c->V - 1;
    *n = 1;
    if (bpe) { /* GPT-2's BPE: never more ids than bytes */
        al_bpe_enc e;
        al_bpe_ids ids = {0};
        int rc = al_bpe_enc_init(&e, bpe, err);
        if (rc == 0) rc = al_bpe_encode(&e, text, len, &ids, err);
        for (size_t i = 0; rc == 0 && i < ids.n; i++) (*tok)[(*n)++] = (int)ids.v[i];
        al_bpe_ids_free(&ids);
        al_bpe_enc_free(&e);
        return rc ? al_err_prefix(err, "--prompt") : 0;
    }
    if (c->V == 257) {
        for (size_t i = 0; i < len; i++) (*tok)[(*n)++] = (unsigned char)text[i];
        return 0;
    }
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long id = strtol(p, &end, 10);
        if (end == p || errno || id < 0 || id >= c->V) {
            free(*tok);
            *tok = NULL;
            return al_errf(err, AL_EINVAL,
                           "--prompt: '%.20s' is not a token id in 0..%d (a model with a "
                           "%d-token vocabulary takes ids)",
                           p, c->V - 1, c->V);
        }
        (*tok)[(*n)++] = (int)id;
        p = end;
    }
    return 0;
}

char *al_cli_utf8(char *s) {
    json_t *j = json_string(s); /* NULL unless valid UTF-8 */
    if (!j)
        for (char *p = s; *p; p++)
            if ((unsigned char)*p >= 0x80) *p = '?';
    json_decref(j);
    return s;
}

/* One generation from a checkpoint: what `sample` prints and the demo shows. */
typedef struct gen {
    al_model_config cfg;
    al_theta theta;
    char dir[4096];
    vocab voc;
    al_bpe bpe;
    int has_bpe;
    int *ptok, np, *out, nout, eot; /* eot: the last token ended the document */
    char *ptext, *text;             /* the prompt and the continuation, decoded */
    double seconds;
    const char *why; /* why it stopped */
} gen;

static void gen_free(gen *g) {
    vocab_free(&g->voc);
    if (g->has_bpe) al_bpe_free(&g->bpe);
    free(g->ptok);
    free(g->out);
    free(g->ptext);
    free(g->text);
    memset(g, 0, sizeof *g);
}

/* GPT-2's tokenizer for a GPT-2-vocabulary model: the checkpoint's own
 * files (an import's), else the configured folder. Not found where nobody
 * configured one: token ids, with a note on stderr. */
static int gen_tokenizer(gen *g, const al_cli_tokcfg *tc, al_err *err) {
    char own[4200], dir[4096];
    snprintf(own, sizeof own, "%s/vocab.json", g->dir);
    FILE *f = fopen(own, "r");
    int rc, explicit_ = 0;
    if (f) {
        fclose(f);
        rc = al_bpe_load_dir(&g->bpe, g->dir, err);
    } else if ((rc = al_cli_tokenizer_dir(tc, dir, sizeof dir, &explicit_, err)) == 0 &&
               (rc = al_bpe_load_dir(&g->bpe, dir, err)) != 0) {
        if (!explicit_ && rc == AL_ENOTFOUND) {
            fprintf(stderr, "sample: printing token ids: %s\n", err->msg);
            return 0;
        }
        al_err_prefix(err, "[data] tokenizer_dir");
    }
    if (rc == 0 && g->bpe.n != g->cfg.V) {
        rc = al_errf(err, AL_EMISMATCH, "tokenizer %s: %d tokens, the model has %d", g->bpe.source,
                     g->bpe.n, g->cfg.V);
        al_bpe_free(&g->bpe);
    }
    g->has_bpe = rc == 0;
    return rc;
}

static int gen_run(gen *g, const char *ckpt, al_theta theta, const char *prompt, const char *vpath,
                   const al_cli_tokcfg *tc, const al_sample_opts *opts, al_err *err) {
    memset(g, 0, sizeof *g);
    g->theta = theta;
    al_log log;
    al_log_init(&log, AL_LOG_WARN, stderr);
    float *params = NULL;
    int rc =
        al_ckpt_read_params(ckpt, &g->theta, &log, &g->cfg, &params, g->dir, sizeof g->dir, err);
    if (rc) return rc;
    al_decoder d = {0};
    al_sample_opts so = *opts;
    so.stop = g->cfg.V - 1;
    if (!(g->out = malloc((size_t)so.max_tokens * sizeof(int))))
        rc = al_errf(err, AL_ENOMEM, "sample: out of memory");
    if (rc == 0 && vpath) rc = vocab_load(&g->voc, vpath, g->cfg.V, err);
    if (rc == 0 && !vpath && g->cfg.V == AL_GPT2_VOCAB) rc = gen_tokenizer(g, tc, err);
    const al_bpe *bpe = g->has_bpe ? &g->bpe : NULL;
    if (rc == 0) rc = encode(bpe, &g->cfg, prompt, &g->ptok, &g->np, err);
    if (rc == 0) rc = al_decoder_init(&d, &g->cfg, params, err);
    double t0 = al_now();
    if (rc == 0 && (rc = al_generate(&d, g->ptok, g->np, &so, g->out, &g->nout, err)))
        al_err_prefix(err, "--prompt");
    g->seconds = al_now() - t0;
    al_decoder_free(&d);
    free(params);
    if (rc == 0) {
        g->eot = g->nout > 0 && g->out[g->nout - 1] == so.stop;
        g->why =
            g->eot ? "end of document" : (g->nout == so.max_tokens ? "--tokens" : "context full");
        g->ptext = decode(bpe, &g->voc, &g->cfg, g->ptok + 1, g->np - 1);
        g->text = decode(bpe, &g->voc, &g->cfg, g->out, g->nout - g->eot);
        if (!g->ptext || !g->text) rc = al_errf(err, AL_ENOMEM, "sample: out of memory");
    }
    if (rc) gen_free(g);
    return rc;
}

int al_cli_sample(const char *ckpt, int tokens, double temperature, int top_k, uint64_t seed,
                  char **text, al_err *err) {
    gen g;
    al_sample_opts so = {tokens, temperature, top_k, seed, -1};
    al_cli_tokcfg tc = {0};
    int rc = gen_run(&g, ckpt, AL_THETA_AUTO, "", NULL, &tc, &so, err);
    if (rc) return rc;
    *text = g.text;
    g.text = NULL;
    gen_free(&g);
    return 0;
}

int al_cmd_sample(int argc, char **argv, al_err *err) {
    static const struct option opts[] = {
        {"ckpt", required_argument, 0, 'c'},   {"prompt", required_argument, 0, 'p'},
        {"tokens", required_argument, 0, 'n'}, {"temperature", required_argument, 0, 't'},
        {"top-k", required_argument, 0, 'k'},  {"seed", required_argument, 0, 's'},
        {"theta", required_argument, 0, 'W'},  {"vocab", required_argument, 0, 'v'},
        {"json", no_argument, 0, 'j'},         {"threads", required_argument, 0, 'T'},
        {"config", required_argument, 0, 'C'}, {"set", required_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    al_cli_tokcfg tc = {0};
    const char *ckpt = NULL, *prompt = "", *vpath = NULL;
    long ntok = 200, topk = 40, seed = 1337, threads = 1;
    double temp = 1.0;
    al_theta theta = AL_THETA_AUTO;
    int json = 0, ch, rc = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            ckpt = optarg;
            break;
        case 'p':
            prompt = optarg;
            break;
        case 'n':
            rc = al_cli_int("--tokens", optarg, 1, 1 << 20, &ntok, err);
            break;
        case 't':
            rc = al_cli_double("--temperature", optarg, &temp, err);
            if (rc == 0 && !(temp >= 0 && temp <= 100))
                rc = al_errf(err, AL_EINVAL, "--temperature: %g is out of range [0, 100]", temp);
            break;
        case 'k':
            rc = al_cli_int("--top-k", optarg, 0, 1 << 30, &topk, err);
            break;
        case 's':
            rc = al_cli_int("--seed", optarg, 0, 1L << 62, &seed, err);
            break;
        case 'W':
            rc = al_theta_parse(optarg, &theta, err);
            break;
        case 'v':
            vpath = optarg;
            break;
        case 'T':
            rc = al_cli_int("--threads", optarg, 1, 1024, &threads, err);
            break;
        case 'j':
            json = 1;
            break;
        case 'C':
        case 'S':
            rc = al_cli_tokcfg_arg(&tc, ch == 'C' ? 'c' : 's', optarg, err);
            break;
        case 'h':
            sample_usage(stdout);
            return 0;
        default:
            sample_usage(stderr);
            return AL_CLI_USAGE;
        }
        if (rc) return rc;
    }
    if (optind < argc)
        return al_errf(err, AL_EINVAL, "sample: unexpected argument '%s'", argv[optind]);
    if (!ckpt) return al_errf(err, AL_EINVAL, "sample: --ckpt PATH is required");
    al_threads_set((int)threads);
    gen g;
    al_sample_opts so = {(int)ntok, temp, (int)topk, (uint64_t)seed, -1};
    if ((rc = gen_run(&g, ckpt, theta, prompt, vpath, &tc, &so, err))) return rc;
    const char *th = g.theta == AL_THETA_GLOBAL ? "global" : "local";
    double tps = g.seconds > 0 ? (g.np + g.nout) / g.seconds : 0.0;
    if (json) {
        json_t *ids = json_array();
        for (int i = 0; i < g.nout; i++) json_array_append_new(ids, json_integer(g.out[i]));
        json_t *o =
            json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:s, s:f, s:I}", "checkpoint", g.dir,
                      "preset", g.cfg.preset, "theta", th, "prompt",
                      json_string(al_cli_utf8(g.ptext)), "text", json_string(al_cli_utf8(g.text)),
                      "tokens", ids, "stop", g.why, "tokens_per_s", tps, "seed", (json_int_t)seed);
        char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
        printf("%s\n", js ? js : "{}");
        free(js);
        json_decref(o);
    } else {
        int ids = g.cfg.V != 257 && !g.voc.tok && !g.has_bpe && g.np > 1;
        printf("%s%s%s\n", g.ptext, ids ? " " : "", g.text);
    }
    fprintf(stderr,
            "sample: %s (theta_%s, preset %s): %d prompt + %d new tokens in %.3f s, %.0f "
            "tokens/s; stopped: %s\n",
            g.dir, th, g.cfg.preset, g.np, g.nout, g.seconds, tps, g.why);
    gen_free(&g);
    return 0;
}
