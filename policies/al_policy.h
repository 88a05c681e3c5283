/*
 * al_policy.h -- sync-interval policies (DESIGN.md §4): after every round, pick
 * the number of inner steps H of the next interval from the round's scalar
 * statistics. One interface, a registry by name:
 *   fixed     H = h (DiLoCo)
 *   adacomm   H = ⌈sqrt(L_r/L_0 · η_0/η_r) · H_base⌉      (Wang & Joshi 2018)
 *   qsr       H = max(H_base, ⌊(a/η_r)²⌋)                  (Gu et al. 2023)
 *   autoloco  H moved by the coherence of the sites' progress (docs/outer.md):
 *             grows ×grow (2) to cap·H_base (2) while the normalised coherence
 *             is ≥ c_min (0.75), shrinks ×shrink (0.7), never below H_base, on
 *             a loss spike or when its EMA falls below c_low (0.5: the sites'
 *             independent noise outweighs what they share)
 *
 * A policy is a pure, deterministic state machine: the same settings, state
 * and statistics give the same H on every site and every machine (every
 * multiply-add is an explicit fma; no randomness, no clock, no I/O). Sites
 * must never choose H alone: they feed the same round statistics, which every
 * site receives, and compare the decision in the next handshake.
 *
 * Life cycle: al_policy_create(name) → al_policy_set(key, value)... (the
 * [policy] config section) → al_policy_start (validates, returns H_1) or
 * al_policy_load (a checkpoint's state) → al_policy_next_interval after each
 * round. Settings cannot change after start.
 *
 * Settings every policy has: h_base (the DiLoCo interval, default 100),
 * h_min (default 0 = max(1, h_base/4)), h_max (default 0 = 8·h_base).
 * Every H returned is clipped to [h_min, h_max].
 *
 * Bandwidth floor, for every policy: max_comm_fraction f (0 = off, the
 * default) raises the rule's H to at least ⌈t_c·(1 − f)/(f·t_s)⌉, where t_c
 * is the round's comm_s (the slowest member's measured exchange of the
 * previous round: the link's cost of one sync) and t_s = compute_s/steps (the
 * slowest member's seconds per inner step), so that the projected share of a
 * round's wall time spent communicating, t_c/(t_c + H·t_s), stays <= f. It
 * needs a measurement: rounds with comm_s = 0 have no floor (the first two
 * intervals: round 0's statistics are sent before any exchange); h_max still bounds it. The inputs
 * are the round's combined statistics, so every site computes the same floor; but they are measured
 * times, so with the floor on, H is no longer reproducible from run to run.
 */
#ifndef AL_POLICY_H
#define AL_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "al_base.h"
#include "al_outer.h" /* al_round_stats */

typedef struct al_policy al_policy;

/* Number of registered policies and their names ("fixed", "adacomm", ...). */
size_t al_policy_count(void);
const char *al_policy_name_at(size_t i);

/* One setting of a policy, for documentation (docs/config.md): kind "real",
 * "int" or "bool"; the default and the inclusive range. */
typedef struct al_policy_setting {
    const char *key, *kind, *help;
    double def, lo, hi;
} al_policy_setting;
/* The i-th setting of policy `name` (NULL: the settings every policy has);
 * false past the last one or for an unknown name. */
bool al_policy_setting_at(const char *name, size_t i, al_policy_setting *out);

/* A policy by name with default settings. AL_ENOTFOUND lists the known names. */
int al_policy_create(al_policy **out, const char *name, al_err *err);
void al_policy_free(al_policy *p);
const char *al_policy_name(const al_policy *p);

/* Set one setting from its config text. AL_ECONFIG, naming the key, for a key
 * this policy does not have (the message lists those it has), a value that
 * does not parse or is out of range, or a policy already started. */
int al_policy_set(al_policy *p, const char *key, const char *value, al_err *err);

/* Convenience for a config loader: create from a section's n key/value pairs,
 * in which `name` selects the policy (required) and the rest are settings. On
 * error *bad (may be NULL) is the index of the pair at fault (or -1), so the
 * loader can name its file and line; *out is NULL. */
int al_policy_create_kv(al_policy **out, const char *const *keys, const char *const *values,
                        size_t n, int *bad, al_err *err);

/* Validate the settings as a whole (h_min <= h_base <= h_max, ...), reset the
 * state, and return the first interval H_1. */
int al_policy_start(al_policy *p, int64_t *h_first, al_err *err);

/* The interval of the next round from the statistics of the round just done.
 * Statistics are checked first (al_round_stats_check): NaN/Inf is refused with
 * AL_ENUMERIC naming the field, and on any error the policy's state is left
 * exactly as it was. */
int al_policy_next_interval(al_policy *p, const al_round_stats *stats, int64_t *h, al_err *err);

/* The bandwidth floor the statistics imply (0: off or nothing measured yet);
 * next_interval returns at least this (up to h_max). */
double al_policy_comm_floor(const al_policy *p, const al_round_stats *s);

/* The H last returned (H_1 right after start). */
int64_t al_policy_current(const al_policy *p);

/* The resolved h_base (valid after start or load; before, the setting). The
 * simulator and the agent derive S_ref = h_base·η_peak from it. */
double al_policy_h_base(const al_policy *p);

/* The resolved settings as "key=value" lines (name first), for logs, the
 * run's manifest and its config hash. Returns the length it needs (like
 * snprintf); writes at most cap bytes, NUL-terminated when cap > 0. */
size_t al_policy_settings(const al_policy *p, char *buf, size_t cap);

/* The state as "key=value" lines (doubles written exactly, as hex floats), for
 * a checkpoint's manifest. Same return convention as al_policy_settings. */
size_t al_policy_save(const al_policy *p, char *buf, size_t cap);
/* Restore a state written by al_policy_save into a policy of the same name
 * created with the run's settings (validated as by start). AL_EFORMAT naming
 * the line for anything missing, unknown or unparsable; p untouched on error. */
int al_policy_load(al_policy *p, const char *text, al_err *err);

#endif
