/* api_random.c — rand / randn from the global Philox generator. Numbers
 * come from (seed, offset) of the global generator, so every device gets the
 * same ones: drawn on the host for the CPU, by the same Philox code in a
 * kernel for CUDA tensors. */
#include <stdlib.h>

#include "core/capture.h"
#include "loom/rng.h"
#include "ops/op.h"
#include "core/sys.h"
#if defined(LOOM_HAVE_CUDA) && defined(LOOM_CUDA_OPS)
#include "ops/cuda/cuda_kernels.h"
#endif

static loom_tensor *random_tensor(const char *fn, int normal, int ndim, const int64_t *shape, loom_dtype dt,
                                  loom_device dev) {
  if (!loom_dtype_is_float(dt)) {
    loom_set_error(LOOM_ERR_DTYPE, "%s: needs a float dtype, got %s", fn, loom_dtype_name(dt));
    return NULL;
  }
  loom_tensor *t = loom_tensor_alloc_raw(ndim, shape, dt, dev);
  if (!t) return NULL;
  int64_t n = loom_shape_numel(ndim, shape);
#if defined(LOOM_HAVE_CUDA) && defined(LOOM_CUDA_OPS)
  if (dev.kind == LOOM_CUDA) {
    /* Drawn on the device: the same Philox numbers (core/philox.h), no
     * host buffer, no copy. */
    uint64_t dseed, doffset;
    const char *prev_op = loom_capture_set_op(fn);  /* names it if a capture is open */
    loom_rng_global_reserve((size_t)n, &dseed, &doffset);
    loom_capture_set_op(prev_op);
    if (loom_cuda_rng_fill(t, normal, dseed, doffset, 0.0f, 1.0f) != LOOM_OK) {
      loom_error_prefix("%s", fn);
      loom_tensor_release(t);
      return NULL;
    }
    return loom_tensor_adopt(t);
  }
#endif
  float *host = loom_sys_malloc((size_t)(n ? n : 1) * sizeof(float));
  if (!host) {
    loom_tensor_release(t);
    loom_set_error(LOOM_ERR_OOM, "%s: out of host memory for %lld values", fn, (long long)n);
    return NULL;
  }
  uint64_t seed, offset;
  const char *prev_op = loom_capture_set_op(fn);
  loom_rng_global_reserve((size_t)n, &seed, &offset);
  loom_capture_set_op(prev_op);
  if (normal) loom_rng_fill_normal(seed, offset, host, (size_t)n, 0.0f, 1.0f);
  else loom_rng_fill_uniform(seed, offset, host, (size_t)n, 0.0f, 1.0f);
  loom_status st;
  if (dt == LOOM_F32) {
    st = loom_copy_from_host_raw(t, host);
  } else {
    loom_tensor *src = loom_tensor_view_raw(host, LOOM_F32, ndim, shape, loom_cpu());
    st = src ? loom_copy_(t, src) : loom_last_status();
    loom_tensor_release(src);
  }
  loom_sys_free(host);
  if (st != LOOM_OK) {
    loom_tensor_release(t);
    return NULL;
  }
  return loom_tensor_adopt(t);
}

loom_tensor *loom_rand(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev) {
  return random_tensor("rand", 0, ndim, shape, dt, dev);
}

loom_tensor *loom_randn(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev) {
  return random_tensor("randn", 1, ndim, shape, dt, dev);
}

