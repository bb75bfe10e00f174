/* deferred.cuh — the device side of the deferred error record
 * (device/deferred.c): kernels that find a bad index or label cannot stop
 * the host, so they atomicMin the first bad row into a device word, and one
 * thread publishes it to the mapped host record afterwards. */
#ifndef LOOM_OPS_CUDA_DEFERRED_CUH
#define LOOM_OPS_CUDA_DEFERRED_CUH

#include "ops/cuda/cuda_launch.h" /* loom_cu_deferred_error */

/* One thread, after the kernels that wrote *bad (~0ull: nothing bad): the
 * first bad row r goes to *rec with value_at(r), classes and op, unless the
 * host has not reported the previous one yet; then *bad is cleared for the
 * next launch. */
template <typename ValueAt>
static __device__ inline void loom_cu_publish_bad(unsigned long long *bad, loom_cu_deferred_error *rec, int op,
                                                  int64_t classes, ValueAt value_at) {
  const unsigned long long r = *bad;
  if (r == ~0ull) return;
  if (rec->row == ~0ull) {
    rec->label = value_at((int64_t)r);
    rec->classes = classes;
    rec->op = op;
    __threadfence_system(); /* the fields before row, as the host reads them */
    rec->row = r;
  }
  *bad = ~0ull;
}

#endif
