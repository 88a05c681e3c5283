/* hf.c -- export to and import from the Hugging Face GPT-2 layout (see al_store.h). */
#include "al_store.h"
#include "al_tokenizer.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* X(table name, Hugging Face name after "transformer." [+ "h.{i}."], Conv1D) */
#define AL_HF_TABLE(X)                                                                             \
    X(wte, "wte.weight", 0)                                                                        \
    X(wpe, "wpe.weight", 0)                                                                        \
    X(ln1w, "ln_1.weight", 0)                                                                      \
    X(ln1b, "ln_1.bias", 0)                                                                        \
    X(qkvw, "attn.c_attn.weight", 1)                                                               \
    X(qkvb, "attn.c_attn.bias", 0)                                                                 \
    X(attprojw, "attn.c_proj.weight", 1)                                                           \
    X(attprojb, "attn.c_proj.bias", 0)                                                             \
    X(ln2w, "ln_2.weight", 0)                                                                      \
    X(ln2b, "ln_2.bias", 0)                                                                        \
    X(fcw, "mlp.c_fc.weight", 1)                                                                   \
    X(fcb, "mlp.c_fc.bias", 0)                                                                     \
    X(fcprojw, "mlp.c_proj.weight", 1)                                                             \
    X(fcprojb, "mlp.c_proj.bias", 0)                                                               \
    X(lnfw, "ln_f.weight", 0)                                                                      \
    X(lnfb, "ln_f.bias", 0)

/* One tensor of the layout in Hugging Face terms. */
typedef struct hf_tensor {
    al_st_tensor st; /* name, shape as stored there */
    int conv1d;      /* stored transposed */
    size_t rows;     /* rows taken from our tensor (V for wte) */
} hf_tensor;

static int hf_map(const al_model_config *cfg, const al_tensor_info *ti, hf_tensor *h, al_err *err) {
    memset(h, 0, sizeof *h);
    const char *base = strrchr(ti->name, '.');
    base = base ? base + 1 : ti->name;
    const char *suffix = NULL;
#define AL_HF_FIND(ours, theirs, conv)                                                             \
    if (!strcmp(base, #ours)) {                                                                    \
        suffix = theirs;                                                                           \
        h->conv1d = conv;                                                                          \
    }
    AL_HF_TABLE(AL_HF_FIND)
#undef AL_HF_FIND
    if (!suffix) return al_errf(err, AL_EUNSUPPORTED, "tensor '%s' has no GPT-2 name", ti->name);
    if (ti->unit >= 1 && ti->unit <= cfg->L)
        snprintf(h->st.name, sizeof h->st.name, "transformer.h.%d.%s", ti->unit - 1, suffix);
    else
        snprintf(h->st.name, sizeof h->st.name, "transformer.%s", suffix);
    h->rows = !strcmp(base, "wte") ? (size_t)cfg->V : (size_t)ti->rows;
    h->st.ndim = ti->cols == 1 ? 1 : 2;
    h->st.shape[0] = h->conv1d ? ti->cols : (int64_t)h->rows;
    h->st.shape[1] = h->conv1d ? ti->rows : ti->cols;
    return 0;
}

/* dst[c, r] = src[r, c] for a rows x cols matrix. */
static void transpose(float *dst, const float *src, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}

static int write_config(const char *dir, const al_model_config *c, al_err *err) {
    json_t *o = json_pack(
        "{s:[s], s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:n, s:s, s:f, s:f, s:f, s:f, s:f, s:I, s:I, "
        "s:b, s:b, s:s}",
        "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "vocab_size", (json_int_t)c->V,
        "n_positions", (json_int_t)c->T, "n_ctx", (json_int_t)c->T, "n_embd", (json_int_t)c->C,
        "n_layer", (json_int_t)c->L, "n_head", (json_int_t)c->NH, "n_inner", "activation_function",
        "gelu_new", "layer_norm_epsilon", 1e-5, "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop",
        0.0, "initializer_range", 0.02, "bos_token_id", (json_int_t)(c->V - 1), "eos_token_id",
        (json_int_t)(c->V - 1), "tie_word_embeddings", 1, "scale_attn_weights", 1, "torch_dtype",
        "float32");
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *js = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10)) : NULL;
    json_decref(o);
    int rc = js ? al_write_file_sync(path, js, strlen(js), err)
                : al_errf(err, AL_ENOMEM, "%s: out of memory", path);
    free(js);
    return rc;
}

int al_hf_export(const char *dir, const al_model_config *cfg, const float *params, al_err *err) {
    al_layout lay;
    int rc = al_layout_init(&lay, cfg, err);
    if (rc) return rc;
    hf_tensor *h = calloc((size_t)lay.ntensors, sizeof *h);
    float **tmp = calloc((size_t)lay.ntensors, sizeof *tmp);
    al_st_tensor *st = calloc((size_t)lay.ntensors, sizeof *st);
    if (!h || !tmp || !st) rc = al_errf(err, AL_ENOMEM, "export: out of memory");
    for (int k = 0; rc == 0 && k < lay.ntensors; k++) {
        const al_tensor_info *ti = &lay.tensors[k];
        if ((rc = hf_map(cfg, ti, &h[k], err))) break;
        st[k] = h[k].st;
        st[k].data = params + ti->offset;
        if (!h[k].conv1d) continue;
        if (!(tmp[k] = malloc(ti->numel * sizeof(float)))) {
            rc = al_errf(err, AL_ENOMEM, "export: out of memory");
            break;
        }
        transpose(tmp[k], params + ti->offset, (size_t)ti->rows, (size_t)ti->cols);
        st[k].data = tmp[k];
    }
    if (rc == 0) rc = al_mkdirs(dir, err);
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (rc == 0) rc = al_st_write(path, st, lay.ntensors, "pt", err);
    if (rc == 0) rc = write_config(dir, cfg, err);
    for (int k = 0; tmp && k < lay.ntensors; k++) free(tmp[k]);
    free(tmp);
    free(st);
    free(h);
    al_layout_free(&lay);
    return rc;
}

static int write_json(const char *dir, const char *name, json_t *o, al_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *js = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    int rc = js ? al_write_file_sync(path, js, strlen(js), err)
                : al_errf(err, AL_ENOMEM, "%s: out of memory", path);
    free(js);
    return rc;
}

int al_hf_export_tokenizer(const char *dir, const al_bpe *t, const al_model_config *cfg,
                           al_err *err) {
    if (t->n != cfg->V || t->eot < 0)
        return al_errf(err, AL_EMISMATCH,
                       "tokenizer %s: %d tokens%s, the model has a vocabulary of %d", t->source,
                       t->n, t->eot < 0 ? " and no <|endoftext|>" : "", cfg->V);
    char v[4200], m[4200];
    snprintf(v, sizeof v, "%s/vocab.json", dir);
    snprintf(m, sizeof m, "%s/merges.txt", dir);
    int rc = al_mkdirs(dir, err);
    if (rc == 0) rc = al_bpe_save(t, v, m, err);
    const char *eot = AL_BPE_EOT_TEXT;
    if (rc == 0)
        rc = write_json(dir, "tokenizer_config.json",
                        json_pack("{s:s, s:I, s:s, s:s, s:s, s:b, s:b}", "tokenizer_class",
                                  "GPT2Tokenizer", "model_max_length", (json_int_t)cfg->T,
                                  "bos_token", eot, "eos_token", eot, "unk_token", eot,
                                  "add_prefix_space", 0, "clean_up_tokenization_spaces", 0),
                        err);
    if (rc == 0)
        rc = write_json(
            dir, "special_tokens_map.json",
            json_pack("{s:s, s:s, s:s}", "bos_token", eot, "eos_token", eot, "unk_token", eot),
            err);
    return rc;
}

/* The preset with the config's dimensions. */
static int read_config(const char *dir, const char *want, al_model_config *cfg, al_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o) return al_errf(err, AL_EFORMAT, "%s: unreadable: %s", path, je.text);
    int rc = 0;
    const char *type = "", *act = "gelu_new";
    json_int_t L = 0, C = 0, NH = 0, T = 0, V = 0;
    json_t *inner = NULL, *tie = NULL;
    double eps = 1e-5;
    if (json_unpack(o, "{s:s, s:I, s:I, s:I, s:I, s:I, s?s, s?F, s?o, s?o}", "model_type", &type,
                    "n_layer", &L, "n_embd", &C, "n_head", &NH, "n_positions", &T, "vocab_size", &V,
                    "activation_function", &act, "layer_norm_epsilon", &eps, "n_inner", &inner,
                    "tie_word_embeddings", &tie) != 0)
        rc = al_errf(err, AL_EFORMAT,
                     "%s: needs model_type, n_layer, n_embd, n_head, n_positions and vocab_size",
                     path);
    else if (strcmp(type, "gpt2") != 0)
        rc = al_errf(err, AL_EUNSUPPORTED, "%s: model_type '%s', only 'gpt2' is supported", path,
                     type);
    else if (strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        rc =
            al_errf(err, AL_EUNSUPPORTED,
                    "%s: activation_function '%s', the model uses tanh GELU (gelu_new)", path, act);
    else if (fabs(eps - 1e-5) > 1e-12)
        rc = al_errf(err, AL_EUNSUPPORTED, "%s: layer_norm_epsilon %g, the model uses 1e-5", path,
                     eps);
    else if (inner && !json_is_null(inner) && json_integer_value(inner) != 4 * C)
        rc = al_errf(err, AL_EUNSUPPORTED, "%s: n_inner %lld, the model uses 4 * n_embd", path,
                     (long long)json_integer_value(inner));
    else if (tie && json_is_false(tie))
        rc = al_errf(err, AL_EUNSUPPORTED,
                     "%s: tie_word_embeddings is false, the model ties lm_head to wte", path);
    json_decref(o);
    if (rc) return rc;
    int found = 0;
#define AL_HF_PRESET(pn, pl, pc, pnh, pt, pv)                                                      \
    if (!found && pl == L && pc == C && pnh == NH && pt == T && pv == V)                           \
        found = al_model_preset(cfg, pn, err) == 0;
    AL_PRESET_TABLE(AL_HF_PRESET)
#undef AL_HF_PRESET
    if (!found)
        return al_errf(err, AL_EMISMATCH,
                       "%s: n_layer %lld, n_embd %lld, n_head %lld, n_positions %lld, vocab_size "
                       "%lld match no preset (%s)",
                       path, (long long)L, (long long)C, (long long)NH, (long long)T, (long long)V,
                       al_model_preset_names());
    if (want && strcmp(want, cfg->preset) != 0)
        return al_errf(err, AL_EMISMATCH, "%s: a model of preset '%s', not '%s'", path, cfg->preset,
                       want);
    return 0;
}

int al_hf_import(const char *dir, const char *want_preset, al_model_config *cfg, float **params,
                 al_err *err) {
    *params = NULL;
    int rc = read_config(dir, want_preset, cfg, err);
    if (rc) return rc;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    al_st_file f;
    if ((rc = al_st_open(&f, path, err))) return rc;
    al_layout lay;
    if ((rc = al_layout_init(&lay, cfg, err))) {
        al_st_close(&f);
        return rc;
    }
    float *p = calloc(lay.nparams, sizeof(float)); /* padded vocabulary rows: zero */
    float *tmp = NULL;
    if (!p) rc = al_errf(err, AL_ENOMEM, "import: out of memory");
    for (int k = 0; rc == 0 && k < lay.ntensors; k++) {
        const al_tensor_info *ti = &lay.tensors[k];
        hf_tensor h;
        if ((rc = hf_map(cfg, ti, &h, err))) break;
        /* the GPT-2 checkpoints on the Hub were saved without the prefix */
        const char *name = h.st.name, *bare = name + strlen("transformer.");
        if (!al_st_has(&f, name) && al_st_has(&f, bare)) name = bare;
        float *dst = p + ti->offset;
        if (h.conv1d) {
            free(tmp);
            if (!(tmp = malloc(ti->numel * sizeof(float)))) {
                rc = al_errf(err, AL_ENOMEM, "import: out of memory");
                break;
            }
            dst = tmp;
        }
        if ((rc = al_st_get(&f, name, h.st.ndim, h.st.shape, dst, err))) break;
        if (h.conv1d) transpose(p + ti->offset, tmp, (size_t)ti->cols, (size_t)ti->rows);
    }
    /* a separate output projection would be a different model */
    const char *lm = "lm_head.weight";
    int64_t shape[2] = {cfg->V, cfg->C};
    if (rc == 0 && al_st_has(&f, lm)) {
        size_t n = (size_t)cfg->V * cfg->C;
        free(tmp);
        tmp = malloc(n * sizeof(float));
        if (!tmp)
            rc = al_errf(err, AL_ENOMEM, "import: out of memory");
        else if ((rc = al_st_get(&f, lm, 2, shape, tmp, err)) == 0 &&
                 memcmp(tmp, p + lay.tensors[0].offset, n * sizeof(float)) != 0)
            rc = al_errf(err, AL_EUNSUPPORTED,
                         "%s: lm_head.weight differs from wte: the model ties them", path);
    }
    free(tmp);
    al_layout_free(&lay);
    al_st_close(&f);
    if (rc) {
        free(p);
        return rc;
    }
    *params = p;
    return 0;
}
