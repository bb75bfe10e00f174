/* test_cpu_config.c — CPU execution settings: choosing the GEMM (API and its
 * errors), the thread count and the kernels' instruction set (API, env
 * LOOM_CPU_ISA and their errors), and that every choice computes the same
 * matmul. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "loom/loom.h"
#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/gemm_bf16.h"

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

/* A conv2d + matmul on the CPU: LOOM_OK or the first error. */
static loom_status conv_and_matmul(void) {
  int64_t sx[4] = {1, 3, 5, 5}, sw[4] = {4, 3, 3, 3}, sa[2] = {3, 4}, sb[2] = {4, 5};
  loom_scope_begin();
  loom_status st = LOOM_OK;
  if (!loom_conv2d(loom_ones(4, sx, LOOM_F32, loom_cpu()), loom_ones(4, sw, LOOM_F32, loom_cpu()), NULL, NULL))
    st = loom_last_status();
  else if (!loom_matmul(loom_ones(2, sa, LOOM_F32, loom_cpu()), loom_ones(2, sb, LOOM_F32, loom_cpu())))
    st = loom_last_status();
  loom_scope_end();
  return st;
}

/* Each instruction set the CPU runs: the name reads back, the GEMM and the
 * conv kernels follow it, and the matmul agrees with the widest's. */
Test(cpu_config, isa_choice) {
  const char *widest = loom_cpu_isa();
  cr_assert_str_eq(widest, loom_cpu_isa_level_name(loom_cpu_isa_best()));
  cr_assert_eq(loom_set_cpu_gemm("builtin"), LOOM_OK);
  double ref = matmul_checksum();
  /* amxbf16 and avx512bf16 differ from avx512 only for bf16 matmul / linear. */
  static const char *names[] = {"amxbf16", "avx512bf16", "avx512", "avx2", "scalar"};
  static const char *gemm[] = {"builtin-avx512", "builtin-avx512", "builtin-avx512", "builtin-avx2", "builtin-generic"};
  static const char *conv[] = {"avx512", "avx512", "avx512", "avx2", "none"};
  int ran = 0;
  for (int k = 0; k < 5; k++) {
    if (!loom_cpu_isa_runs((loom_cpu_isa_level)(4 - k))) continue;
    cr_assert_eq(loom_set_cpu_isa(names[k]), LOOM_OK, "%s", loom_last_error());
    cr_assert_str_eq(loom_cpu_isa(), names[k]);
    cr_assert_str_eq(loom_cpu_gemm_name(), gemm[k]);
    cr_assert_str_eq(loom_conv_cpu_isa_name(), conv[k]);
    cr_assert_eq(loom_cpu_gemm_bf16_runs(), k <= 1, "%s: the bf16 GEMM runs only under amxbf16 and avx512bf16",
                 names[k]);
    double v = matmul_checksum();
    cr_assert(fabs(v - ref) <= 1e-4 * (1 + fabs(ref)), "%s: %.9g vs %.9g", names[k], v, ref);
    cr_assert_eq(conv_and_matmul(), LOOM_OK, "%s: %s", names[k], loom_last_error());
    ran++;
  }
  cr_assert_geq(ran, 1, "scalar always runs");
  cr_assert_eq(loom_set_cpu_isa("auto"), LOOM_OK);
  cr_assert_str_eq(loom_cpu_isa(), widest);
  cr_assert_eq(loom_set_cpu_isa("scalar"), LOOM_OK);
  cr_assert_eq(loom_set_cpu_isa(NULL), LOOM_OK, "NULL means auto");
  cr_assert_str_eq(loom_cpu_isa(), widest);
}

/* Unknown names and sets this CPU cannot run are errors that say what it
 * runs, and change nothing. */
Test(cpu_config, isa_errors) {
  cr_assert_eq(loom_set_cpu_isa("scalar"), LOOM_OK);
  cr_assert_eq(loom_set_cpu_isa("sse9"), LOOM_ERR_INVALID_ARG);
  cr_assert(strstr(loom_last_error(), "'sse9' is not auto, amxbf16, avx512bf16, avx512, avx2 or scalar") &&
                strstr(loom_last_error(), "this CPU runs"),
            "%s", loom_last_error());
  cr_assert_str_eq(loom_cpu_isa(), "scalar", "a rejected name changes nothing");
  /* A CPU with AVX-512 but no AVX512_BF16 (pretended; the limit only
   * narrows, so on a CPU without AVX-512 it runs what it has). */
  const bool has512 = loom_cpu_isa_runs(LOOM_CPU_ISA_AVX512);
  loom_cpu_isa_test_limit(LOOM_CPU_ISA_AVX512);
  cr_assert_eq(loom_set_cpu_isa("avx512bf16"), LOOM_ERR_UNSUPPORTED);
  cr_assert(strstr(loom_last_error(), has512 ? "cannot run avx512bf16 kernels; it runs avx512, avx2 and scalar"
                                             : "cannot run avx512bf16 kernels; it runs avx2 and scalar"),
            "%s", loom_last_error());
  cr_assert_eq(loom_set_cpu_isa("auto"), LOOM_OK);
  cr_assert(!loom_cpu_gemm_bf16_runs(), "no bf16 GEMM without AVX512_BF16: bf16 widens to f32");
  cr_assert_eq(loom_set_cpu_isa("scalar"), LOOM_OK);
  /* A CPU with AVX2 at most (pretended). */
  loom_cpu_isa_test_limit(LOOM_CPU_ISA_AVX2);
  cr_assert_eq(loom_set_cpu_isa("avx512"), LOOM_ERR_UNSUPPORTED);
  cr_assert(strstr(loom_last_error(), "cannot run avx512 kernels; it runs avx2 and scalar"), "%s", loom_last_error());
  cr_assert_str_eq(loom_cpu_isa(), "scalar");
  /* Without AVX2 at all. */
  loom_cpu_isa_test_limit(LOOM_CPU_ISA_SCALAR);
  cr_assert_eq(loom_set_cpu_isa("avx2"), LOOM_ERR_UNSUPPORTED);
  cr_assert(strstr(loom_last_error(), "cannot run avx2 kernels; it runs scalar"), "%s", loom_last_error());
  cr_assert_eq(loom_set_cpu_isa("auto"), LOOM_OK);
  cr_assert_str_eq(loom_cpu_isa(), "scalar", "auto is the widest the CPU runs");
  cr_assert_eq(conv_and_matmul(), LOOM_OK, "%s", loom_last_error());
  loom_cpu_isa_test_limit(-1);
}

/* LOOM_CPU_ISA is read at the first use (each Criterion test is a fresh process). */
Test(cpu_config, isa_env_value) {
  setenv("LOOM_CPU_ISA", "scalar", 1);
  cr_assert_str_eq(loom_cpu_isa(), "scalar");
  cr_assert_str_eq(loom_conv_cpu_isa_name(), "none");
  cr_assert_eq(conv_and_matmul(), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_set_cpu_isa("auto"), LOOM_OK, "the API overrides the environment");
  cr_assert_str_eq(loom_cpu_isa(), loom_cpu_isa_level_name(loom_cpu_isa_best()));
}

/* A bad LOOM_CPU_ISA: the kernels that have an instruction-set choice fail
 * with an error naming the variable, what was wrong and what the CPU runs
 * (nothing aborts; ops without a choice still run), until the API sets a
 * valid value. */
Test(cpu_config, isa_env_unknown_is_an_error) {
  setenv("LOOM_CPU_ISA", "avx1024", 1);
  cr_assert_eq(conv_and_matmul(), LOOM_ERR_INVALID_ARG);
  cr_assert(strstr(loom_last_error(), "LOOM_CPU_ISA: 'avx1024' is not auto, amxbf16, avx512bf16, avx512, avx2 or scalar (this CPU runs"),
            "%s", loom_last_error());
  cr_assert_eq(conv_and_matmul(), LOOM_ERR_INVALID_ARG, "every use, not only the first");
  int64_t n = 4;
  loom_scope_begin();
  cr_assert_not_null(loom_add(loom_ones(1, &n, LOOM_F32, loom_cpu()), loom_ones(1, &n, LOOM_F32, loom_cpu())),
                     "%s", loom_last_error());
  loom_scope_end();
  cr_assert_eq(loom_set_cpu_isa("avx2x"), LOOM_ERR_INVALID_ARG);
  cr_assert_eq(conv_and_matmul(), LOOM_ERR_INVALID_ARG, "a rejected API call keeps the environment's error");
  cr_assert_eq(loom_set_cpu_isa(NULL), LOOM_OK);
  cr_assert_eq(conv_and_matmul(), LOOM_OK, "%s", loom_last_error());
}

Test(cpu_config, isa_env_cpu_cannot_run) {
  loom_cpu_isa_test_limit(LOOM_CPU_ISA_SCALAR);
  setenv("LOOM_CPU_ISA", "avx512", 1);
  cr_assert_eq(conv_and_matmul(), LOOM_ERR_UNSUPPORTED);
  cr_assert(strstr(loom_last_error(), "LOOM_CPU_ISA: this CPU cannot run avx512 kernels; it runs scalar"), "%s",
            loom_last_error());
  cr_assert_str_eq(loom_cpu_isa(), "scalar", "meanwhile the widest it runs");
  loom_cpu_isa_test_limit(-1);
}
