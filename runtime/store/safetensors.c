/* safetensors.c -- the safetensors format, F32 only (see al_store.h). */
#include "al_store.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

int al_st_write(const char *path, const al_st_tensor *t, int n, const char *format, al_err *err) {
    json_t *h = json_object();
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        size_t numel = (size_t)t[k].shape[0] * (size_t)(t[k].ndim == 2 ? t[k].shape[1] : 1);
        json_t *shape = t[k].ndim == 1 ? json_pack("[I]", (json_int_t)t[k].shape[0])
                                       : json_pack("[II]", (json_int_t)t[k].shape[0],
                                                   (json_int_t)t[k].shape[1]);
        json_object_set_new(h, t[k].name,
                            json_pack("{s:s, s:o, s:[II]}", "dtype", "F32", "shape", shape,
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + numel * 4)));
        off += numel * 4;
    }
    if (format) json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", format));
    char *js = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(h);
    if (!js) return al_errf(err, AL_ENOMEM, "%s: cannot build header", path);
    size_t hl = strlen(js), padded = (hl + 7) / 8 * 8;
    size_t total = 8 + padded + off;
    char *out = malloc(total);
    if (!out) {
        free(js);
        return al_errf(err, AL_ENOMEM, "%s: out of memory (%zu bytes)", path, total);
    }
    uint64_t hl64 = padded;
    memcpy(out, &hl64, 8); /* x86-64 and aarch64 are little-endian */
    memcpy(out + 8, js, hl);
    memset(out + 8 + hl, ' ', padded - hl);
    free(js);
    char *data = out + 8 + padded;
    for (int k = 0; k < n; k++) {
        size_t bytes = (size_t)t[k].shape[0] * (size_t)(t[k].ndim == 2 ? t[k].shape[1] : 1) * 4;
        memcpy(data, t[k].data, bytes);
        data += bytes;
    }
    int rc = al_write_file_sync(path, out, total, err);
    free(out);
    return rc;
}

int al_st_open(al_st_file *f, const char *path, al_err *err) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    int rc = al_read_file(path, &f->raw, &f->len, err);
    if (rc) return rc;
    uint64_t hl = 0;
    if (f->len < 8 || (memcpy(&hl, f->raw, 8), hl > f->len - 8)) {
        al_st_close(f);
        return al_errf(err, AL_EFORMAT, "%s: truncated safetensors header", path);
    }
    json_error_t je;
    json_t *h = json_loadb(f->raw + 8, hl, 0, &je);
    if (!h || !json_is_object(h)) {
        json_decref(h);
        al_st_close(f);
        return al_errf(err, AL_EFORMAT, "%s: bad safetensors header: %s", path, je.text);
    }
    f->header = h;
    f->data = f->raw + 8 + hl;
    f->dlen = f->len - 8 - hl;
    return 0;
}

void al_st_close(al_st_file *f) {
    json_decref(f->header);
    free(f->raw);
    memset(f, 0, sizeof *f);
}

int al_st_has(const al_st_file *f, const char *name) {
    return json_object_get(f->header, name) != NULL;
}

int al_st_get(const al_st_file *f, const char *name, int ndim, const int64_t *shape, float *out,
              al_err *err) {
    json_t *e = json_object_get(f->header, name);
    if (!e) return al_errf(err, AL_ENOTFOUND, "%s: tensor '%s' is missing", f->path, name);
    const char *dtype = NULL;
    json_t *sh = NULL;
    json_int_t b = -1, en = -1;
    if (json_unpack(e, "{s:s, s:o, s:[II]}", "dtype", &dtype, "shape", &sh, "data_offsets", &b,
                    &en) != 0 ||
        !json_is_array(sh))
        return al_errf(err, AL_EFORMAT, "%s: tensor '%s' is malformed", f->path, name);
    char want[64], got[64];
    size_t numel = 1, p = (size_t)snprintf(got, sizeof got, "[");
    int ok = json_array_size(sh) == (size_t)ndim;
    for (int i = 0; i < ndim; i++) {
        numel *= (size_t)shape[i];
        ok = ok && json_integer_value(json_array_get(sh, (size_t)i)) == shape[i];
    }
    if (ndim == 1)
        snprintf(want, sizeof want, "[%lld]", (long long)shape[0]);
    else
        snprintf(want, sizeof want, "[%lld, %lld]", (long long)shape[0], (long long)shape[1]);
    for (size_t i = 0; i < json_array_size(sh) && p < sizeof got - 24; i++)
        p += (size_t)snprintf(got + p, sizeof got - p, "%s%lld", i ? ", " : "",
                              (long long)json_integer_value(json_array_get(sh, i)));
    snprintf(got + p, sizeof got - p, "]");
    if (strcmp(dtype, "F32") != 0 || !ok)
        return al_errf(err, AL_EMISMATCH, "%s: tensor '%s' is %s %s, expected F32 %s", f->path,
                       name, dtype, got, want);
    if (b < 0 || en < b || (size_t)en > f->dlen || (size_t)(en - b) != numel * 4)
        return al_errf(err, AL_EFORMAT, "%s: tensor '%s' data offsets out of range", f->path, name);
    memcpy(out, f->data + b, numel * 4);
    return 0;
}

/* ---- checkpoint files: the parameter table's names and shapes ------------------------ */

static void table_entry(al_st_tensor *t, const char *prefix, const al_tensor_info *ti) {
    snprintf(t->name, sizeof t->name, "%s%s", prefix, ti->name);
    t->ndim = ti->cols == 1 ? 1 : 2;
    t->shape[0] = ti->rows;
    t->shape[1] = ti->cols;
}

int al_safetensors_write(const char *path, const al_layout *lay, int nparts,
                         const char *const *prefix, const float *const *buf, al_err *err) {
    int n = nparts * lay->ntensors;
    al_st_tensor *t = calloc((size_t)n, sizeof *t);
    if (!t) return al_errf(err, AL_ENOMEM, "%s: out of memory", path);
    for (int k = 0; k < n; k++) {
        const al_tensor_info *ti = &lay->tensors[k % lay->ntensors];
        table_entry(&t[k], prefix[k / lay->ntensors], ti);
        t[k].data = buf[k / lay->ntensors] + ti->offset;
    }
    int rc = al_st_write(path, t, n, NULL, err);
    free(t);
    return rc;
}

int al_safetensors_read(const char *path, const al_layout *lay, int nparts,
                        const char *const *prefix, float *const *buf, al_err *err) {
    al_st_file f;
    int rc = al_st_open(&f, path, err);
    for (int k = 0; rc == 0 && k < nparts * lay->ntensors; k++) {
        const al_tensor_info *ti = &lay->tensors[k % lay->ntensors];
        al_st_tensor t;
        table_entry(&t, prefix[k / lay->ntensors], ti);
        rc = al_st_get(&f, t.name, t.ndim, t.shape, buf[k / lay->ntensors] + ti->offset, err);
    }
    al_st_close(&f);
    return rc;
}
