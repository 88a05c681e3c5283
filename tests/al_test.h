/* al_test.h -- helpers shared by the cmocka tests: random fills, float<->double
 * copies, error measures, and an assert that prints both sides. */
#ifndef AL_TEST_H
#define AL_TEST_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "al_base.h"

static inline void t_fill(al_rng *r, float *x, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * (2.0 * al_rng_uniform(r) - 1.0));
}
static inline void t_fill_d(al_rng *r, double *x, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * (2.0 * al_rng_uniform(r) - 1.0);
}
static inline double *t_to_d(const float *x, size_t n) {
    double *d = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
/* max |a - b| / max(max |b|, tiny): error relative to the reference's scale */
static inline double t_max_rel_err(const float *a, const double *b, size_t n) {
    double num = 0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / den;
}
static inline double t_max_rel_err_dd(const double *a, const double *b, size_t n) {
    double num = 0, den = 1e-300;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return num / den;
}

/* Assert err <= tol and report the measured value either way. */
#define assert_err_below(what, err, tol)                                                           \
    do {                                                                                           \
        double e_ = (err), t_ = (tol);                                                             \
        print_message("  %-40s rel err %.3e (tol %.1e)\n", (what), e_, t_);                        \
        if (!(e_ <= t_)) fail_msg("%s: relative error %.3e above %.1e", (what), e_, t_);           \
    } while (0)

/* Assert |a - b| <= tol (doubles; tol 0: exactly equal), printing both sides. */
#define assert_double_near(a, b, tol)                                                              \
    do {                                                                                           \
        double a_ = (a), b_ = (b), t_ = (tol);                                                     \
        if (!(fabs(a_ - b_) <= t_))                                                                \
            fail_msg("%s = %.17g, expected %s = %.17g (tol %g)", #a, a_, #b, b_, t_);              \
    } while (0)

#endif
