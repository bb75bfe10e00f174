/* softmax_cpu.c — softmax over the last dim and its backward on the CPU,
 * computed in f32 whatever the float dtype (rows widened one at a time). */
#include <math.h>
#include <omp.h>

#include "core/sys.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/elementwise_math.h" /* loom_exp_host_f: a vectorizable expf */

/* Rows of C elements, each thread with its own f32 row buffers (two: the
 * backward reads gy and y side by side). */
#define ROWS_WITH_BUFFERS(NAME, ROWS, C, BODY)                                                         \
  do {                                                                                                \
    loom_status st_ = LOOM_OK;                                                                        \
    int nt_ = (ROWS) * (C) >= LOOM_CPU_PAR_MIN ? omp_get_max_threads() : 1;                           \
    _Pragma("omp parallel num_threads(nt_)")                                                          \
    {                                                                                                 \
      float *r0 = loom_sys_malloc((size_t)((C) > 0 ? (C) : 1) * 2 * sizeof(float));                   \
      float *r1 = r0 ? r0 + (C) : NULL;                                                               \
      if (!r0) {                                                                                      \
        _Pragma("omp atomic write") st_ = LOOM_ERR_OOM;                                               \
      } else {                                                                                        \
        _Pragma("omp for schedule(static)") for (int64_t i = 0; i < (ROWS); i++) { BODY }             \
      }                                                                                               \
      loom_sys_free(r0);                                                                              \
    }                                                                                                 \
    if (st_ != LOOM_OK) return loom_set_error(st_, "%s: out of host memory for a row of %lld", NAME, (long long)(C)); \
  } while (0)

loom_status loom_cpu_softmax(loom_op_args *a) {
  loom_tensor *x = a->in[0], *o = a->out[0];
  int64_t C = x->shape[x->ndim - 1];
  int64_t rows = C ? loom_shape_numel(x->ndim, x->shape) / C : 0;
  size_t es = loom_dtype_size(x->dtype);
  const char *px = loom_tensor_ptr(x);
  char *po = loom_tensor_ptr(o);
  ROWS_WITH_BUFFERS("softmax", rows, C, {
    (void)r1;
    loom_cpu_load_f32(px + (size_t)(i * C) * es, x->dtype, 1, C, r0);
    float m = -INFINITY;
    for (int64_t j = 0; j < C; j++) m = r0[j] > m ? r0[j] : m;
    double s = 0;
    /* A row of -inf only: m is -inf and every exp is NaN, as in PyTorch. */
    for (int64_t j = 0; j < C; j++) r0[j] = loom_exp_host_f(r0[j] - m);
    for (int64_t j = 0; j < C; j++) s += r0[j];
    float inv = (float)(1.0 / s);
    for (int64_t j = 0; j < C; j++) r0[j] *= inv;
    loom_cpu_store_f32(po + (size_t)(i * C) * es, o->dtype, 1, C, r0);
  });
  return LOOM_OK;
}

/* dx = y * (gy - sum(gy * y)) per row. */
loom_status loom_cpu_softmax_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *y = a->in[1], *o = a->out[0];
  int64_t C = y->shape[y->ndim - 1];
  int64_t rows = C ? loom_shape_numel(y->ndim, y->shape) / C : 0;
  size_t es = loom_dtype_size(y->dtype);
  const char *pg = loom_tensor_ptr(gy), *py = loom_tensor_ptr(y);
  char *po = loom_tensor_ptr(o);
  ROWS_WITH_BUFFERS("softmax backward", rows, C, {
    loom_cpu_load_f32(pg + (size_t)(i * C) * es, gy->dtype, 1, C, r0);
    loom_cpu_load_f32(py + (size_t)(i * C) * es, y->dtype, 1, C, r1);
    double s = 0;
    for (int64_t j = 0; j < C; j++) s += (double)r0[j] * (double)r1[j];
    float fs = (float)s;
    for (int64_t j = 0; j < C; j++) r0[j] = r1[j] * (r0[j] - fs);
    loom_cpu_store_f32(po + (size_t)(i * C) * es, o->dtype, 1, C, r0);
  });
  return LOOM_OK;
}
