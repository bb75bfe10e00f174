/* add_relu_cpu.c — the residual join relu(a + b) on the CPU and its
 * backward. The public function gives a, b and the result one shape and one
 * dense layout (NCHW or NHWC), so both walk memory straight through in one
 * pass: forward reads a and b and writes y; backward reads gy and y and
 * writes the masked gradient for each input that needs one. f16/bf16 run
 * in registers on AVX2 (ew16_x86.h), elsewhere through f32 buffers. */
#include <omp.h>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/ew16_x86.h"

#define RUN 4096  /* elements per task */

loom_status loom_cpu_add_relu(loom_op_args *a) {
  loom_tensor *x = a->in[0], *z = a->in[1], *y = a->out[0];
  loom_dtype dt = x->dtype;
  int64_t n = loom_shape_numel(x->ndim, x->shape);
  const void *px = loom_tensor_ptr(x), *pz = loom_tensor_ptr(z);
  void *py = loom_tensor_ptr(y);
  const bool r16 = loom_ew16_avx2_ok(dt);
#pragma omp parallel for schedule(static) if (n >= LOOM_CPU_PAR_MIN)
  for (int64_t e0 = 0; e0 < n; e0 += RUN) {
    int64_t m = n - e0 < RUN ? n - e0 : RUN;
    if (r16) {
      loom_ew16_add_relu_avx2((const uint16_t *)px + e0, (const uint16_t *)pz + e0, (uint16_t *)py + e0, m, dt);
      continue;
    }
    float ba[RUN], bb[RUN], bo[RUN];
    const float *u = loom_cpu_span_f32(px, dt, e0, m, ba), *v = loom_cpu_span_f32(pz, dt, e0, m, bb);
    float *o = loom_cpu_out_f32(py, dt, e0, bo);
    for (int64_t j = 0; j < m; j++) {
      float s = u[j] + v[j];
      o[j] = s > 0.0f ? s : 0.0f;
    }
    loom_cpu_out_commit(py, dt, e0, m, o);
  }
  return LOOM_OK;
}

/* in: gy, y; out: the gradient for a and/or for b (the same values). */
loom_status loom_cpu_add_relu_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *y = a->in[1], *o0 = a->out[0], *o1 = a->out[1];
  loom_dtype dt = y->dtype;
  int64_t n = loom_shape_numel(y->ndim, y->shape);
  const void *pg = loom_tensor_ptr(gy), *py = loom_tensor_ptr(y);
  void *d0 = o0 ? loom_tensor_ptr(o0) : NULL, *d1 = o1 ? loom_tensor_ptr(o1) : NULL;
  if (!d0) d0 = d1, d1 = NULL;
  if (!d0) return LOOM_OK;
  const bool r16 = loom_ew16_avx2_ok(dt) && gy->dtype == dt;
#pragma omp parallel for schedule(static) if (n >= LOOM_CPU_PAR_MIN)
  for (int64_t e0 = 0; e0 < n; e0 += RUN) {
    int64_t m = n - e0 < RUN ? n - e0 : RUN;
    if (r16) {
      loom_ew16_relu_mask_avx2((const uint16_t *)pg + e0, (const uint16_t *)py + e0, (uint16_t *)d0 + e0,
                               d1 ? (uint16_t *)d1 + e0 : NULL, m, dt);
      continue;
    }
    float bg[RUN], by[RUN], bo[RUN];
    const float *g = loom_cpu_span_f32(pg, dt, e0, m, bg), *v = loom_cpu_span_f32(py, dt, e0, m, by);
    float *o = loom_cpu_out_f32(d0, dt, e0, bo);
    for (int64_t j = 0; j < m; j++) {
      float gj = g[j];  /* loaded unconditionally: the select vectorizes, no branch to mispredict */
      o[j] = v[j] > 0.0f ? gj : 0.0f;
    }
    loom_cpu_out_commit(d0, dt, e0, m, o);
    if (d1) {
      if (dt == LOOM_F32) memcpy((float *)d1 + e0, o, (size_t)m * sizeof(float));
      else loom_cpu_out_commit(d1, dt, e0, m, o);
    }
  }
  return LOOM_OK;
}
