/* cpu_config.c — CPU execution settings: thread count, which GEMM runs, the
 * kernels' instruction set, and the Winograd convolutions' tile. */
#include <omp.h>

#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu_threads.h"
#include "ops/op.h"

static int g_threads = 0;

void loom_set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  g_threads = n;
  omp_set_num_threads(n);
  loom_cpu_gemm_set_threads(n);
}

bool loom_cpu_threads_explicit(void) { return g_threads > 0; }

int loom_get_num_threads(void) { return g_threads > 0 ? g_threads : omp_get_max_threads(); }

loom_status loom_set_cpu_gemm(const char *name) {
  int r = loom_cpu_gemm_set_policy(name);
  if (r == -1) return loom_set_error(LOOM_ERR_INVALID_ARG, "set_cpu_gemm: '%s' is not auto, builtin or openblas", name ? name : "(null)");
  if (r == -2) return loom_set_error(LOOM_ERR_UNSUPPORTED, "set_cpu_gemm: this build has no OpenBLAS (LOOM_BLAS=OFF or libopenblas-dev missing)");
  return LOOM_OK;
}

const char *loom_cpu_gemm_name(void) { return loom_cpu_gemm_impl(); }

loom_status loom_set_cpu_isa(const char *name) {
  loom_cpu_isa_level l;
  bool forced;
  LOOM_TRY(loom_cpu_isa_parse("set_cpu_isa", name, &l, &forced));
  loom_cpu_isa_force(l, forced);
  return LOOM_OK;
}

const char *loom_cpu_isa(void) { return loom_cpu_isa_level_name(loom_cpu_isa_level_now()); }

loom_status loom_set_cpu_winograd(int tile) {
  if (!loom_conv_cpu_set_winograd(tile))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "set_cpu_winograd: tile %d is not 4 (F(4x4, 3x3)), 2 (F(2x2, 3x3)) or 0 (off)", tile);
  return LOOM_OK;
}

int loom_cpu_winograd(void) { return loom_conv_cpu_winograd_tile(); }
