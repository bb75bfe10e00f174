/* test_cpu_config.c — CPU execution settings: choosing the GEMM (API and its
 * errors) and the thread count, and that every choice computes the same
 * matmul. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "loom/loom.h"
#include "ops/cpu/gemm.h"

static double matmul_checksum(void) {
  int64_t sa[2] = {33, 17}, sb[2] = {17, 29};
  loom_manual_seed(7);
  loom_scope_begin();
  loom_tensor *c = loom_matmul(loom_randn(2, sa, LOOM_F32, loom_cpu()), loom_randn(2, sb, LOOM_F32, loom_cpu()));
  double v = -1;
  cr_assert_eq(loom_item(loom_sum_all(c), &v), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
  return v;
}

Test(cpu_config, gemm_choice_and_errors) {
  cr_assert_eq(loom_set_cpu_gemm("builtin"), LOOM_OK);
  cr_assert(strncmp(loom_cpu_gemm_name(), "builtin", 7) == 0, "got %s", loom_cpu_gemm_name());
  double builtin = matmul_checksum();
  loom_status st = loom_set_cpu_gemm("openblas");
  if (st == LOOM_OK) {  /* a build with OpenBLAS */
    cr_assert_str_eq(loom_cpu_gemm_name(), "openblas");
    double blas = matmul_checksum();
    cr_assert(fabs(blas - builtin) <= 1e-3 * (1 + fabs(builtin)), "openblas %g vs builtin %g", blas, builtin);
  } else {
    cr_assert_eq(st, LOOM_ERR_UNSUPPORTED);
    cr_assert(strstr(loom_last_error(), "OpenBLAS"), "%s", loom_last_error());
  }
  cr_assert_eq(loom_set_cpu_gemm("auto"), LOOM_OK);
  cr_assert_eq(loom_set_cpu_gemm("fastest"), LOOM_ERR_INVALID_ARG);
  cr_assert(strstr(loom_last_error(), "fastest") && strstr(loom_last_error(), "auto, builtin or openblas"), "%s",
            loom_last_error());
  cr_assert_eq(loom_set_cpu_gemm(NULL), LOOM_OK, "NULL means auto");
}

Test(cpu_config, threads) {
  loom_set_num_threads(1);
  cr_assert_eq(loom_get_num_threads(), 1);
  double one = matmul_checksum();
  loom_set_num_threads(2);
  cr_assert_eq(loom_get_num_threads(), 2);
  double two = matmul_checksum();
  cr_assert_eq(one, two, "results depend on the thread count: %.17g vs %.17g", one, two);
  loom_set_num_threads(0);
  cr_assert_geq(loom_get_num_threads(), 1);
}
