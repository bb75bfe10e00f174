/* criterion_or_tsan.h — include instead of <criterion/criterion.h> in tests
 * that must also run under ThreadSanitizer (the loader and data tests). */
#ifndef LOOM_TESTS_CRITERION_OR_TSAN_H
#define LOOM_TESTS_CRITERION_OR_TSAN_H
#include <math.h>
#if defined(__SANITIZE_THREAD__)
/* Criterion cannot start under ThreadSanitizer (its boxfort arena maps fixed
 * addresses inside TSan's shadow memory: Snaipe/Criterion#274). In a TSan
 * build (-DLOOM_SANITIZE=thread) the same tests run in-process through this
 * minimal stand-in: Test/TestSuite register functions, asserts print the
 * failed condition and exit(1), main runs everything in order. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef struct shim_suite_opts { void (*init)(void); void (*fini)(void); } shim_suite_opts;
static struct { const char *suite, *name; void (*fn)(void); } shim_tests[128];
static struct { const char *suite; shim_suite_opts o; } shim_suites[32];
static int shim_ntests, shim_nsuites;
static void shim_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s:%d: assertion failed: %s ", file, line, cond);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  exit(1);
}
#define SHIM_ID(a, b) shim_##a##_##b
#define Test(S, N, ...)                                                                    \
  static void SHIM_ID(S, N)(void);                                                         \
  __attribute__((constructor)) static void SHIM_ID(reg_##S, N)(void) {                     \
    shim_tests[shim_ntests].suite = #S;                                                    \
    shim_tests[shim_ntests].name = #N;                                                     \
    shim_tests[shim_ntests++].fn = SHIM_ID(S, N);                                          \
  }                                                                                        \
  static void SHIM_ID(S, N)(void)
#define TestSuite(S, ...)                                                                  \
  __attribute__((constructor)) static void shim_suite_##S(void) {                          \
    shim_suites[shim_nsuites].suite = #S;                                                  \
    shim_suites[shim_nsuites++].o = (shim_suite_opts){__VA_ARGS__};                        \
  }
#define cr_assert(cond, ...) \
  do { if (!(cond)) shim_fail(__FILE__, __LINE__, #cond, "" __VA_ARGS__); } while (0)
#define cr_assert_eq(a, b, ...) cr_assert((a) == (b), __VA_ARGS__)
#define cr_assert_neq(a, b, ...) cr_assert((a) != (b), __VA_ARGS__)
#define cr_assert_gt(a, b, ...) cr_assert((a) > (b), __VA_ARGS__)
#define cr_assert_geq(a, b, ...) cr_assert((a) >= (b), __VA_ARGS__)
#define cr_assert_lt(a, b, ...) cr_assert((a) < (b), __VA_ARGS__)
#define cr_assert_leq(a, b, ...) cr_assert((a) <= (b), __VA_ARGS__)
#define cr_assert_null(p, ...) cr_assert((p) == NULL, __VA_ARGS__)
#define cr_assert_not_null(p, ...) cr_assert((p) != NULL, __VA_ARGS__)
#define cr_assert_float_eq(a, b, eps, ...) cr_assert(fabs((double)(a) - (double)(b)) <= (eps), __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) cr_assert(strcmp((a), (b)) == 0, __VA_ARGS__)
#define cr_skip_test(...) do { fprintf(stderr, "  skipped: " __VA_ARGS__); fprintf(stderr, "\n"); return; } while (0)
int main(void) {
  for (int i = 0; i < shim_ntests; i++) {
    shim_suite_opts o = {0};
    for (int s = 0; s < shim_nsuites; s++)
      if (strcmp(shim_suites[s].suite, shim_tests[i].suite) == 0) o = shim_suites[s].o;
    fprintf(stderr, "[tsan] %s::%s\n", shim_tests[i].suite, shim_tests[i].name);
    if (o.init) o.init();
    shim_tests[i].fn();
    if (o.fini) o.fini();
  }
  fprintf(stderr, "[tsan] %d tests passed\n", shim_ntests);
  return 0;
}
#else
#include <criterion/criterion.h>
#endif
#endif
