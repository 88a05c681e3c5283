/*
 * policy_impl.h -- private to policies/: how a policy plugs into the registry.
 *
 * A policy is a table of settings (al_pparam), a list of state variable
 * names, and two functions. Settings and state are plain doubles (exact for
 * every integer we use), so the generic code can parse, range-check, save and
 * restore them without knowing the policy. The first N_COMMON settings and
 * S_COMMON state variables are shared by every policy.
 */
#ifndef AL_POLICY_IMPL_H
#define AL_POLICY_IMPL_H

#include <stdbool.h>

#include "al_policy.h"

enum { AL_POLICY_MAXP = 24 };

typedef enum { AL_P_REAL, AL_P_INT, AL_P_BOOL } al_pkind;

typedef struct al_pparam {
    const char *key;
    al_pkind kind;
    double def, lo, hi; /* default and inclusive range */
    const char *help;
} al_pparam;

/* common settings: par[P_H_BASE..P_MAX_COMM]; a policy's own start at P_OWN */
enum { P_H_BASE, P_H_MIN, P_H_MAX, P_MAX_COMM, P_OWN };
/* common state: st[S_ROUNDS] rounds observed, st[S_H] the H last returned */
enum { S_ROUNDS, S_H, S_OWN };

typedef struct al_policy_ops {
    const char *name;
    const al_pparam *params; /* own settings, after the common ones */
    int n_params;
    const char *const *state; /* own state names, after the common ones */
    int n_state;
    /* Check own settings (resolved common ones in p), set own state to its
     * initial value and *h to H_1 (before clipping). */
    int (*start)(al_policy *p, double *h, al_err *err);
    /* One decision; s is already checked. *h before clipping. May write p's
     * state freely: the caller works on a copy and keeps it only on success. */
    int (*next)(al_policy *p, const al_round_stats *s, double *h, al_err *err);
} al_policy_ops;

struct al_policy {
    const al_policy_ops *ops;
    double par[AL_POLICY_MAXP]; /* settings: common then own */
    double st[AL_POLICY_MAXP];  /* state: common then own */
    bool started;
    double h_base, h_min, h_max; /* resolved at start/load */
};

/* The registered policies (policies.c). */
extern const al_policy_ops al_policy_fixed, al_policy_adacomm, al_policy_qsr, al_policy_autoloco,
    al_policy_coherence, al_policy_schedule;

#endif
