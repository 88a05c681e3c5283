/* agent_ckpt.h -- checkpoints: the trainer's, plus outer.bin and agent.json
 * (agent_ckpt.c; rank 2: it calls agent_stream.c). */
#ifndef AL_AGENT_CKPT_H
#define AL_AGENT_CKPT_H

#include "agent_impl.h"

int ag_save(agent *a, al_err *err);
/* --resume: the checkpoint at (or the newest under) path. */
int ag_load(agent *a, const char *path, al_err *err);

#endif
