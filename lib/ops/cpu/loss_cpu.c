/* loss_cpu.c — log-softmax and the fused cross-entropy on the CPU, always
 * computed in f32 (inputs of any float dtype are widened per row). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "core/sys.h"

#define MAX_STACK_ROW 4096

static int64_t label_at(const loom_tensor *l, int64_t i) {
  const char *p = loom_tensor_ptr(l);
  int64_t s = l->strides[0];
  switch (l->dtype) {
    case LOOM_I32: return ((const int32_t *)p)[i * s];
    case LOOM_I64: return ((const int64_t *)p)[i * s];
    case LOOM_U8: return ((const uint8_t *)p)[i * s];
    default: return -1;
  }
}

/* Row log-sum-exp with max subtraction (stable), split as m + log(s): callers
 * form (x - m) - log(s) so that large logits (|x| ~ 1e3, where an f32 ulp is
 * 6e-5) do not lose the result's precision to rounding m + log(s) first. */
static float row_max_logsum(const float *r, int64_t C, float *logsum) {
  float m = -INFINITY;
  for (int64_t j = 0; j < C; j++) m = r[j] > m ? r[j] : m;
  if (isinf(m) && m < 0) {
    *logsum = 0.0f;
    return m;
  }
  double s = 0;
  for (int64_t j = 0; j < C; j++) s += expf(r[j] - m);
  *logsum = (float)log(s);
  return m;
}

/* Run fn over rows with a per-thread f32 row buffer. */
#define FOR_ROWS_F32(T, ROWS, C, BODY)                                                   \
  do {                                                                                   \
    loom_status st_ = LOOM_OK;                                                           \
    int nt_ = (ROWS) * (C) >= LOOM_CPU_PAR_MIN ? omp_get_max_threads() : 1;              \
    _Pragma("omp parallel num_threads(nt_)")                                             \
    {                                                                                    \
      float stackbuf[MAX_STACK_ROW];                                                     \
      float *rowbuf = (C) <= MAX_STACK_ROW ? stackbuf : loom_sys_malloc((size_t)(C) * sizeof(float)); \
      if (!rowbuf) st_ = LOOM_ERR_OOM;                                                   \
      else {                                                                             \
        _Pragma("omp for schedule(static)")                                              \
        for (int64_t i = 0; i < (ROWS); i++) { BODY }                                    \
        if (rowbuf != stackbuf) loom_sys_free(rowbuf);                                            \
      }                                                                                  \
    }                                                                                    \
    if (st_ != LOOM_OK) return loom_set_error(st_, "%s: out of host memory for a row of %lld", T, (long long)(C)); \
  } while (0)

loom_status loom_cpu_log_softmax(loom_op_args *a) {
  loom_tensor *x = a->in[0], *o = a->out[0];
  int64_t C = x->shape[x->ndim - 1];
  int64_t rows = loom_shape_numel(x->ndim, x->shape) / (C ? C : 1);
  size_t es = loom_dtype_size(x->dtype);
  const char *px = loom_tensor_ptr(x);
  char *po = loom_tensor_ptr(o);
  FOR_ROWS_F32("log_softmax", rows, C, {
    loom_cpu_load_f32(px + (size_t)(i * C) * es, x->dtype, 1, C, rowbuf);
    float ls;
    float m = row_max_logsum(rowbuf, C, &ls);
    for (int64_t j = 0; j < C; j++) rowbuf[j] = (rowbuf[j] - m) - ls;
    loom_cpu_store_f32(po + (size_t)(i * C) * es, o->dtype, 1, C, rowbuf);
  });
  return LOOM_OK;
}

/* dx = dy - exp(y) * sum(dy) per row (y = log_softmax output). */
loom_status loom_cpu_log_softmax_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *y = a->in[1], *o = a->out[0];
  int64_t C = y->shape[y->ndim - 1];
  int64_t rows = loom_shape_numel(y->ndim, y->shape) / (C ? C : 1);
  size_t es = loom_dtype_size(y->dtype);
  const char *pg = loom_tensor_ptr(gy), *py = loom_tensor_ptr(y);
  char *po = loom_tensor_ptr(o);
  FOR_ROWS_F32("log_softmax backward", rows, C, {
    float yr[256];
    double s = 0;
    loom_cpu_load_f32(pg + (size_t)(i * C) * es, gy->dtype, 1, C, rowbuf);
    for (int64_t j = 0; j < C; j++) s += rowbuf[j];
    for (int64_t j0 = 0; j0 < C; j0 += 256) {
      int64_t m = C - j0 < 256 ? C - j0 : 256;
      loom_cpu_load_f32(py + (size_t)(i * C + j0) * es, y->dtype, 1, m, yr);
      for (int64_t j = 0; j < m; j++) rowbuf[j0 + j] -= expf(yr[j]) * (float)s;
    }
    loom_cpu_store_f32(po + (size_t)(i * C) * es, o->dtype, 1, C, rowbuf);
  });
  return LOOM_OK;
}

static loom_status check_labels(const loom_tensor *labels, int64_t N, int64_t C) {
  for (int64_t i = 0; i < N; i++) {
    int64_t l = label_at(labels, i);
    if (l < 0 || l >= C)
      return loom_set_error(LOOM_ERR_INVALID_ARG, "cross_entropy: label %lld at row %lld is outside [0, %lld)",
                            (long long)l, (long long)i, (long long)C);
  }
  return LOOM_OK;
}

loom_status loom_cpu_cross_entropy(loom_op_args *a) {
  loom_tensor *x = a->in[0], *labels = a->in[1], *o = a->out[0];
  int64_t N = x->shape[0], C = x->shape[1];
  LOOM_TRY(check_labels(labels, N, C));
  size_t es = loom_dtype_size(x->dtype);
  const char *px = loom_tensor_ptr(x);
  double total = 0;
  loom_status st_ = LOOM_OK;
#pragma omp parallel if (N * C >= LOOM_CPU_PAR_MIN) reduction(+ : total)
  {
    float stackbuf[MAX_STACK_ROW];
    float *rowbuf = C <= MAX_STACK_ROW ? stackbuf : loom_sys_malloc((size_t)C * sizeof(float));
    if (!rowbuf) st_ = LOOM_ERR_OOM;
    else {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < N; i++) {
        loom_cpu_load_f32(px + (size_t)(i * C) * es, x->dtype, 1, C, rowbuf);
        float ls;
        float m = row_max_logsum(rowbuf, C, &ls);
        total += (double)(m - rowbuf[label_at(labels, i)]) + (double)ls;
      }
      if (rowbuf != stackbuf) loom_sys_free(rowbuf);
    }
  }
  if (st_ != LOOM_OK) return loom_set_error(st_, "cross_entropy: out of host memory");
  *(float *)loom_tensor_ptr(o) = N > 0 ? (float)(total / (double)N) : NAN;
  return LOOM_OK;
}

/* dlogits = (softmax(x) - onehot(label)) * dy / N */
loom_status loom_cpu_cross_entropy_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *x = a->in[1], *labels = a->in[2], *o = a->out[0];
  int64_t N = x->shape[0], C = x->shape[1];
  float g = *(const float *)loom_tensor_ptr(gy) / (float)(N > 0 ? N : 1);
  size_t es = loom_dtype_size(x->dtype);
  const char *px = loom_tensor_ptr(x);
  char *po = loom_tensor_ptr(o);
  FOR_ROWS_F32("cross_entropy backward", N, C, {
    loom_cpu_load_f32(px + (size_t)(i * C) * es, x->dtype, 1, C, rowbuf);
    float ls;
    float m = row_max_logsum(rowbuf, C, &ls);
    for (int64_t j = 0; j < C; j++) rowbuf[j] = expf((rowbuf[j] - m) - ls) * g;
    rowbuf[label_at(labels, i)] -= g;
    loom_cpu_store_f32(po + (size_t)(i * C) * es, o->dtype, 1, C, rowbuf);
  });
  return LOOM_OK;
}
