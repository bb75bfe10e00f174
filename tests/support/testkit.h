/* testkit.h — shared helpers for the op / autograd / nn tests:
 *  - device parameterization (docs/design.md §12): DEVICE_TEST(suite, name)
 *    defines one body taking a loom_device and registers it twice, as
 *    suite_cpu/name and suite_cuda/name; the CUDA variant skips visibly
 *    (cr_skip_test with loom_cuda_unavailable_reason()) when no GPU exists,
 *    and fails instead when LOOM_TEST_DEVICE=cuda insists on one;
 *  - a float64 reference toolkit: random host data rounded to a dtype,
 *    tensors made from it, read-back as doubles, broadcast indexing, and
 *    closeness checks with per-dtype tolerances;
 *  - a finite-difference gradient checker driven through the public API;
 *  - error assertions (status code + message fragments). */
#ifndef LOOM_TESTS_TESTKIT_H
#define LOOM_TESTS_TESTKIT_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/loom.h"

/* ---- devices ------------------------------------------------------------ */
/* Skip (or fail, if LOOM_TEST_DEVICE=cuda) unless dev is usable. */
void tk_require_device(loom_device dev);
/* In a sanitizer build, fail the test if LeakSanitizer finds unreachable
 * memory now (no-op otherwise). Criterion ignores a worker's exit status
 * after the test has reported, so LSan's exit-time report alone would not
 * fail anything: every test calls this at its end (DEVICE_TEST does). */
void tk_leak_check(void);
/* The end of a test: loom_shutdown (which must succeed: memory still
 * allocated means the test leaked a tensor or handle), then tk_leak_check,
 * so a leak checker sees only what the test itself leaked, never loom's
 * caches. DEVICE_TEST runs it as the test's .fini (also after a failed
 * assertion); other GPU tests end with it or use it as .fini. */
void tk_teardown(void);

/* ---- files ------------------------------------------------------------- */
/* A fresh directory $TMPDIR/PREFIX-XXXXXX (/tmp without TMPDIR) into dir
 * (n bytes); fails the test if it cannot be made. */
void tk_tmpdir(char *dir, size_t n, const char *prefix);
/* Remove dir and the files in it (not recursive: tests write flat). */
void tk_tmpdir_remove(const char *dir);

/* tk_teardown runs as the test's .fini, so it runs after a failed assertion
 * too: loom_shutdown then frees what the failed test still held, and
 * compute-sanitizer --leak-check reports only memory loom lost track of. */
#define DEVICE_TEST(suite, name, ...)                                         \
  static void suite##_##name##_body(loom_device dev);                         \
  Test(suite##_cpu, name, .fini = tk_teardown, ##__VA_ARGS__) {               \
    tk_require_device(loom_cpu());                                            \
    loom_scope_begin();                                                       \
    suite##_##name##_body(loom_cpu());                                        \
    loom_scope_end();                                                         \
  }                                                                           \
  Test(suite##_cuda, name, .fini = tk_teardown, ##__VA_ARGS__) {              \
    tk_require_device(loom_cuda(0));                                          \
    loom_scope_begin();                                                       \
    suite##_##name##_body(loom_cuda(0));                                      \
    loom_scope_end();                                                         \
  }                                                                           \
  static void suite##_##name##_body(loom_device dev)

/* A CPU-only test inside a scope, torn down (and leak-checked) afterwards:
 * DEVICE_TEST's CPU half, for ops or models with no CUDA path yet. */
#define CPU_TEST(suite, name, ...)                                   \
  static void suite##_##name##_body(void);                           \
  Test(suite, name, .fini = tk_teardown, ##__VA_ARGS__) {            \
    loom_scope_begin();                                              \
    suite##_##name##_body();                                         \
    loom_scope_end();                                                \
  }                                                                  \
  static void suite##_##name##_body(void)

/* ---- random data and tensors -------------------------------------------- */
/* Deterministic host RNG for test data (independent of loom's generator). */
void tk_seed(uint64_t s);
double tk_uniform(double lo, double hi);
/* Round v to what dtype dt stores (f16/bf16 round to nearest even, ints truncate). */
double tk_round(double v, loom_dtype dt);
/* n values in [lo, hi], each rounded to dt; |v| >= away (when away > 0,
 * values closer to 0 are pushed out, to keep clear of kinks). malloc'd. */
double *tk_rand_vals(int64_t n, double lo, double hi, double away, loom_dtype dt);
/* A tensor of dtype dt on dev holding vals (row-major). Follows the scope rule. */
loom_tensor *tk_tensor(const double *vals, int ndim, const int64_t *shape, loom_dtype dt, loom_device dev);
/* Random tensor plus its values (out_vals malloc'd, caller frees). */
loom_tensor *tk_rand_tensor(int ndim, const int64_t *shape, double lo, double hi, double away, loom_dtype dt,
                            loom_device dev, double **out_vals);
/* Read any tensor back as doubles (malloc'd, numel entries); asserts success. */
double *tk_read(loom_tensor *t);
/* What the running check is about (e.g. the op sweep's "op [dtype, layout,
 * shape, device]"), named in tk_read's failure messages: a sticky CUDA error
 * surfaces at the read, so without it a failure cannot be placed. */
extern const char *tk_where;
int64_t tk_numel(int ndim, const int64_t *shape);

/* Index (row-major) into a broadcast operand of shape (nd, sh) for output
 * linear index i of shape (ond, osh). */
int64_t tk_bcast_index(int64_t i, int ond, const int64_t *osh, int nd, const int64_t *sh);
/* Broadcast shape; returns false if incompatible. */
bool tk_bcast_shape(int na, const int64_t *sa, int nb, const int64_t *sb, int *nout, int64_t *out);

/* ---- comparison ---------------------------------------------------------- */
/* Relative tolerance for results rounded to dt (a few units in the last place). */
double tk_rtol(loom_dtype dt);
/* Assert |got - want| <= atol + rtol * |want| elementwise (NaN must match NaN). */
void tk_assert_close(const double *got, const double *want, int64_t n, double atol, double rtol, const char *what);
/* Assert t has shape (ndim, shape), dtype dt, and its values are close to want. */
void tk_assert_tensor(loom_tensor *t, int ndim, const int64_t *shape, loom_dtype dt, const double *want, double atol,
                      double rtol, const char *what);
void tk_assert_shape(loom_tensor *t, int ndim, const int64_t *shape, const char *what);

/* ---- errors -------------------------------------------------------------- */
/* Assert the last error has code st and its message contains every given
 * fragment (NULL-terminated list). */
void tk_assert_error_(loom_status got, loom_status want, const char *file, int line, ...);
#define tk_assert_error(got, want, ...) tk_assert_error_((got), (want), __FILE__, __LINE__, __VA_ARGS__, (const char *)NULL)
/* For tensor-returning calls: t must be NULL, last status == want, message has fragments. */
#define tk_assert_fails(t, want, ...)                                                         \
  do {                                                                                        \
    loom_tensor *tk_t_ = (t);                                                                 \
    cr_assert_null(tk_t_, "%s:%d: expected failure (NULL), got a tensor", __FILE__, __LINE__); \
    tk_assert_error_(loom_last_status(), (want), __FILE__, __LINE__, __VA_ARGS__, (const char *)NULL); \
  } while (0)

/* ---- finite differences ---------------------------------------------------- */
/* fn builds an output from inputs (autograd on); ctx is passed through. */
typedef loom_tensor *(*tk_fn)(loom_tensor **in, void *ctx);
/* For each input in[k] with requires grad: compare the analytic gradient of
 * L = sum(out * R) (R fixed random weights) with central differences of step
 * h on every element. Inputs must be f32. */
void tk_gradcheck(tk_fn fn, void *ctx, loom_tensor **in, int n_in, double h, double atol, double rtol,
                  const char *what);
/* tk_gradcheck on at most max_coords elements of each input (its first and
 * last, and random ones between: tk_seed decides which), for inputs too
 * large to difference every element; max_coords <= 0 checks them all. */
void tk_gradcheck_sampled(tk_fn fn, void *ctx, loom_tensor **in, int n_in, double h, double atol, double rtol,
                          int64_t max_coords, const char *what);

#endif
