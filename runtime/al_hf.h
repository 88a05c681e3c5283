/*
 * al_hf.h -- the Hugging Face GPT-2 layout: a folder with config.json and
 * model.safetensors that transformers' GPT2LMHeadModel.from_pretrained loads.
 *
 * Names: transformer.wte.weight [V, C], transformer.wpe.weight [T, C],
 * transformer.h.{i}.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
 * mlp.c_proj}.{weight, bias}, transformer.ln_f.{weight, bias}; the output
 * projection is tied to wte (no lm_head.weight). GPT-2's linear layers are
 * Conv1D, whose weight is stored [in, out] (y = x W + b), while ours are
 * [out, in] (y = x W^T + b, al_kernels.h): the four block matrices are
 * transposed on the way out and back. The vocabulary is cut from Vp back to V
 * rows; an import pads it with zero rows. Padded rows stay zero in training
 * (no gradient reaches them, AdamW and weight decay keep 0 at 0), so export
 * then import of a trained checkpoint is bit-identical; a checkpoint whose
 * padded rows were not zero would come back with them zeroed (they never
 * affect the model's output).
 */
#ifndef AL_HF_H
#define AL_HF_H

#include "al_model.h"

/* Write DIR/config.json and DIR/model.safetensors (DIR is created). */
int al_hf_export(const char *dir, const al_model_config *cfg, const float *params, al_err *err);

/* Read DIR (config.json, model.safetensors; names with or without the
 * "transformer." prefix, F32) into a new host buffer (*params, malloc'd) for
 * the preset whose L, C, NH, T and V equal the config's (want_preset, if not
 * NULL, must be that one). One-line errors name the file and the field or
 * tensor at fault. */
int al_hf_import(const char *dir, const char *want_preset, al_model_config *cfg, float **params,
                 al_err *err);

#endif
