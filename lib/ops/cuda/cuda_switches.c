/* cuda_switches.c — public switches of the CUDA backend that exist in every
 * build (so a program calling them links with or without CUDA); without
 * CUDA they are recorded and have no effect. */
#include <stdbool.h>

#include "loom/ops.h"

#ifdef LOOM_HAVE_CUDA
void loom_cuda_set_tf32(bool on);  /* matmul_lt.c */
#endif

static bool g_tf32 = false;

void loom_set_allow_tf32(bool allow) {
  __atomic_store_n(&g_tf32, allow, __ATOMIC_RELAXED);
#ifdef LOOM_HAVE_CUDA
  loom_cuda_set_tf32(allow);
#endif
}

bool loom_get_allow_tf32(void) { return __atomic_load_n(&g_tf32, __ATOMIC_RELAXED); }
