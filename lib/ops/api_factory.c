/* api_factory.c — tensors made with their contents: zeros / ones / full
 * (the COPY kernel broadcasts one value), from host data, and arange.
 * Uninitialized ones (loom_empty) are the tensor layer's; rand / randn are
 * api_random.c. */
#include <math.h>
#include <stdlib.h>

#include "ops/cpu/cpu_util.h"
#include "ops/op.h"
#include "core/sys.h"

/* dst (contiguous) <- src converted from f64 to dst's dtype, through a host buffer. */
static loom_status convert_from_f64_host(loom_tensor *dst, const double *src) {
  int64_t n = loom_shape_numel(dst->ndim, dst->shape);
  size_t es = loom_dtype_size(dst->dtype);
  void *tmp = loom_sys_malloc((size_t)(n ? n : 1) * es);
  if (!tmp) return loom_set_error(LOOM_ERR_OOM, "out of host memory converting %lld values", (long long)n);
  for (int64_t i = 0; i < n; i++) loom_cpu_store_f64(tmp, dst->dtype, i, src[i]);
  loom_status st = loom_copy_from_host_raw(dst, tmp);
  loom_sys_free(tmp);
  return st;
}

loom_tensor *loom_full(int ndim, const int64_t *shape, double value, loom_dtype dt, loom_device dev) {
  loom_tensor *t = loom_tensor_alloc_raw(ndim, shape, dt, dev);
  if (!t) return NULL;
  if (loom_fill_(t, value) != LOOM_OK) {
    loom_tensor_release(t);
    return NULL;
  }
  return loom_tensor_adopt(t);
}

loom_tensor *loom_zeros(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev) {
  return loom_full(ndim, shape, 0.0, dt, dev);
}
loom_tensor *loom_ones(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev) {
  return loom_full(ndim, shape, 1.0, dt, dev);
}
loom_tensor *loom_zeros_like(const loom_tensor *t) {
  return t ? loom_zeros(t->ndim, t->shape, t->dtype, t->storage->device) : NULL;
}

loom_tensor *loom_from_host(const void *data, int ndim, const int64_t *shape, loom_dtype dt, loom_device dev) {
  if (!data) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_from_host: data is NULL");
    return NULL;
  }
  loom_tensor *t = loom_tensor_alloc_raw(ndim, shape, dt, dev);
  if (!t) return NULL;
  if (loom_copy_from_host_raw(t, data) != LOOM_OK) {
    loom_tensor_release(t);
    return NULL;
  }
  return loom_tensor_adopt(t);
}

loom_tensor *loom_arange(double start, double end, double step, loom_dtype dt, loom_device dev) {
  if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step)) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_arange: step must be non-zero and bounds finite (start %g, end %g, step %g)",
                   start, end, step);
    return NULL;
  }
  double cnt = ceil((end - start) / step);
  /* The count must fit an int64 and its bytes a size_t (checked here: the
   * cast below would otherwise be undefined and the error meaningless). */
  if (!(cnt <= (double)(INT64_MAX / 16))) {
    loom_set_error(LOOM_ERR_INVALID_ARG,
                   "loom_arange: [%g, %g) in steps of %g has %g elements, which overflows a tensor's size (at most "
                   "%lld); check start, end and step",
                   start, end, step, cnt, (long long)(INT64_MAX / 16));
    return NULL;
  }
  int64_t n = cnt > 0 ? (int64_t)cnt : 0;
  double *host = loom_sys_malloc((size_t)(n ? n : 1) * sizeof *host);
  if (!host) {
    loom_set_error(LOOM_ERR_OOM, "loom_arange: out of host memory for %lld elements", (long long)n);
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) host[i] = start + (double)i * step;
  loom_tensor *t = loom_tensor_alloc_raw(1, &n, dt, dev);
  if (t && convert_from_f64_host(t, host) != LOOM_OK) {
    loom_tensor_release(t);
    t = NULL;
  }
  loom_sys_free(host);
  return loom_tensor_adopt(t);
}

