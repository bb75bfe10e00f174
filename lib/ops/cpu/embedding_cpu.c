/* embedding_cpu.c — the embedding lookup on the CPU: a gather of weight rows
 * forward (indices checked against the table first: a bad index is an
 * error, never a read outside it), a scatter-add into the weight gradient
 * backward. The backward splits the work by columns, so every thread adds
 * into its own columns in index order: no atomics, the same sums for any
 * thread count. */
#include <omp.h>
#include <string.h>

#include "core/sys.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"

static int64_t index_at(const loom_tensor *t, const void *p, int64_t i) {
  switch (t->dtype) {
    case LOOM_I32: return ((const int32_t *)p)[i];
    case LOOM_I64: return ((const int64_t *)p)[i];
    case LOOM_U8: return ((const uint8_t *)p)[i];
    default: return -1;
  }
}

static loom_status check_indices(const char *op, const loom_tensor *idx, int64_t n, int64_t V) {
  const void *p = loom_tensor_ptr(idx);
  for (int64_t i = 0; i < n; i++) {
    int64_t v = index_at(idx, p, i);
    if (v < 0 || v >= V)
      return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: index %lld at position %lld is outside [0, %lld)", op,
                            (long long)v, (long long)i, (long long)V);
  }
  return LOOM_OK;
}

loom_status loom_cpu_embedding(loom_op_args *a) {
  loom_tensor *idx = a->in[0], *w = a->in[1], *o = a->out[0];
  int64_t n = loom_shape_numel(idx->ndim, idx->shape), V = w->shape[0], D = w->shape[1];
  LOOM_TRY(check_indices("embedding", idx, n, V));
  size_t row = (size_t)D * loom_dtype_size(w->dtype);
  const char *pw = loom_tensor_ptr(w);
  const void *pi = loom_tensor_ptr(idx);
  char *po = loom_tensor_ptr(o);
#pragma omp parallel for schedule(static) if (n * D >= LOOM_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) memcpy(po + (size_t)i * row, pw + (size_t)index_at(idx, pi, i) * row, row);
  return LOOM_OK;
}

#define COLS 64 /* columns one task adds (a cache line or four of f32) */

loom_status loom_cpu_embedding_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *idx = a->in[1], *o = a->out[0];
  int64_t n = loom_shape_numel(idx->ndim, idx->shape), V = o->shape[0], D = o->shape[1];
  LOOM_TRY(check_indices("embedding backward", idx, n, V));
  size_t es = loom_dtype_size(gy->dtype);
  const char *pg = loom_tensor_ptr(gy);
  const void *pi = loom_tensor_ptr(idx);
  char *po = loom_tensor_ptr(o);
  int64_t tasks = (D + COLS - 1) / COLS;
  /* f32 sums: the output is f32 already, or accumulated in f32 per task
   * over every row of the table (V x COLS floats) and rounded once. */
  loom_status st = LOOM_OK;
#pragma omp parallel if (n * D >= LOOM_CPU_PAR_MIN)
  {
    float *acc = o->dtype == LOOM_F32 ? NULL : loom_sys_malloc((size_t)(V > 0 ? V : 1) * COLS * sizeof(float));
    if (o->dtype != LOOM_F32 && !acc) {
#pragma omp atomic write
      st = LOOM_ERR_OOM;
    } else {
#pragma omp for schedule(static)
      for (int64_t t = 0; t < tasks; t++) {
        int64_t c0 = t * COLS, nc = D - c0 < COLS ? D - c0 : COLS;
        float *dst = acc ? acc : (float *)po + c0;
        int64_t ld = acc ? COLS : D;
        for (int64_t v = 0; v < V; v++) memset(dst + v * ld, 0, (size_t)nc * sizeof(float));
        float buf[COLS];
        for (int64_t i = 0; i < n; i++) {
          const float *g = loom_cpu_span_f32(pg, gy->dtype, i * D + c0, nc, buf);
          float *r = dst + index_at(idx, pi, i) * ld;
          for (int64_t j = 0; j < nc; j++) r[j] += g[j];
        }
        if (acc)
          for (int64_t v = 0; v < V; v++) loom_cpu_store_f32(po + (size_t)(v * D + c0) * es, o->dtype, 1, nc, acc + v * COLS);
      }
    }
    loom_sys_free(acc);
  }
  if (st != LOOM_OK) return loom_set_error(st, "embedding backward: out of host memory");
  return LOOM_OK;
}
