/*
 * al_safetensors.h -- the safetensors file format (F32 tensors only).
 *
 * A file is: u64 little-endian header length, a JSON header {name: {dtype,
 * shape, data_offsets: [begin, end]}, optionally "__metadata__": {str: str}}
 * padded with spaces to a multiple of 8, then the raw little-endian data.
 * Checkpoints use it with the parameter table's names (al_ckpt.h); the Hugging
 * Face export (al_hf.h) with GPT-2's names and shapes.
 */
#ifndef AL_SAFETENSORS_H
#define AL_SAFETENSORS_H

#include "al_model.h"

/* One tensor to write: ndim 1 or 2, data row-major. */
typedef struct al_st_tensor {
    char name[96];
    int ndim;
    int64_t shape[2];
    const float *data;
} al_st_tensor;

/* Write n tensors (in that order) as F32; format != NULL adds
 * "__metadata__": {"format": format} (Hugging Face expects "pt"). */
int al_st_write(const char *path, const al_st_tensor *t, int n, const char *format, al_err *err);

/* A file read whole, its header parsed. */
typedef struct al_st_file {
    char path[512];
    char *raw;
    size_t len;
    void *header; /* json_t * */
    const char *data;
    size_t dlen;
} al_st_file;
/* AL_EIO (cannot read) or AL_EFORMAT (truncated, bad header). */
int al_st_open(al_st_file *f, const char *path, al_err *err);
void al_st_close(al_st_file *f);
int al_st_has(const al_st_file *f, const char *name);
/* Copy tensor `name` into out; it must be F32 with exactly this shape.
 * AL_ENOTFOUND (absent), AL_EMISMATCH (dtype or shape), AL_EFORMAT (offsets);
 * the message names the file and the tensor. */
int al_st_get(const al_st_file *f, const char *name, int ndim, const int64_t *shape, float *out,
              al_err *err);

/* Checkpoint files: nparts buffers laid out as `lay`; tensor names are
 * prefix[i] + table name (e.g. "m.h.0.qkvw"). */
int al_safetensors_write(const char *path, const al_layout *lay, int nparts,
                         const char *const *prefix, const float *const *buf, al_err *err);
/* Read every tensor of every part into buf[i]; each must exist with dtype F32
 * and the table's shape. */
int al_safetensors_read(const char *path, const al_layout *lay, int nparts,
                        const char *const *prefix, float *const *buf, al_err *err);

#endif
