/* linear_bf16.c — the fused linear layer for bf16 operands on CPUs with
 * AVX512_BF16 (the instruction set avx512bf16, cpu_isa.h): the three GEMMs
 * run on bf16 directly (gemm_bf16.h) instead of on widened f32 copies.
 *
 * Forward: y = act(x·wᵀ + b), bias and ReLU applied and the result rounded
 * to bf16 per finished tile. Backward: dz = dy·relu'(y) stays bf16 (masking
 * does not change a value) and the bias gradient is summed in the same pass;
 * dW = dzᵀ·x and dX = dz·w. linear_cpu.c calls in here when
 * loom_cpu_linear_bf16_applies says so; everything else (and every CPU
 * without the instruction, or LOOM_CPU_ISA=avx512 and narrower) takes the
 * widening path. */
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/gemm_bf16.h"
#include "ops/cpu/linear_bf16.h"
#include "core/sys.h"

static bool dense_bf16(const loom_tensor *t) { return t && t->dtype == LOOM_BF16 && loom_tensor_is_contiguous(t); }
static bool out_ok(const loom_tensor *t) {
  return !t || ((t->dtype == LOOM_BF16 || t->dtype == LOOM_F32) && loom_tensor_is_contiguous(t));
}

/* Where a GEMM result for output t goes: its f32 or its bf16 memory. */
static loom_gemm_bf16_out out_to(loom_tensor *t, int64_t ld) {
  loom_gemm_bf16_out o = {0};
  if (t->dtype == LOOM_F32) o.c = loom_tensor_ptr(t), o.ldc = ld;
  else o.y = loom_tensor_ptr(t), o.ldy = ld;
  return o;
}

bool loom_cpu_linear_bf16_applies(const loom_op_args *a, bool backward) {
  if (!loom_cpu_gemm_bf16_runs()) return false;
  if (backward) {
    const loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2], *y = a->in[3];
    const int64_t K = x->shape[x->ndim - 1];
    if (K <= 0 || loom_shape_numel(x->ndim, x->shape) == 0 || w->shape[0] <= 0) return false;
    if (!dense_bf16(gy) || !dense_bf16(x) || !dense_bf16(w)) return false;
    if (a->i[0] == LOOM_ACT_RELU && !dense_bf16(y)) return false;
    return out_ok(a->out[0]) && out_ok(a->out[1]);
  }
  const loom_tensor *x = a->in[0], *w = a->in[1], *y = a->out[0];
  const int64_t K = x->shape[x->ndim - 1];
  if (K <= 0 || loom_shape_numel(x->ndim, x->shape) == 0 || w->shape[0] <= 0) return false;
  return dense_bf16(x) && dense_bf16(w) && out_ok(y);
}

loom_status loom_cpu_linear_bf16(loom_op_args *a) {
  loom_tensor *x = a->in[0], *w = a->in[1], *bias = a->in[2], *y = a->out[0];
  const int64_t K = x->shape[x->ndim - 1], M = loom_shape_numel(x->ndim, x->shape) / K, N = w->shape[0];
  float *bf = NULL;
  if (bias) {
    bf = loom_sys_malloc((size_t)N * sizeof(float));
    if (!bf) return loom_set_error(LOOM_ERR_OOM, "linear: out of host memory for the bias");
    loom_cpu_load_f32(loom_tensor_ptr(bias), bias->dtype, bias->strides[0], N, bf);
  }
  loom_gemm_bf16_out o = out_to(y, N);
  o.bias = bf;
  o.relu = a->i[0] == LOOM_ACT_RELU;
  loom_status st = loom_cpu_gemm_bf16(false, true, M, N, K, loom_tensor_ptr(x), K, loom_tensor_ptr(w), K, &o);
  loom_sys_free(bf);
  return st;
}

/* Threads own column chunks; f32 partial sums over 16 rows, then double. */
void loom_cpu_bf16_mask_bias_grad(uint16_t *dz, const uint16_t *y, int64_t M, int64_t N, float *db) {
  const int64_t chunk = 256, nch = (N + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (M * N >= LOOM_CPU_PAR_MIN)
  for (int64_t c = 0; c < nch; c++) {
    const int64_t j0 = c * chunk, m = N - j0 < chunk ? N - j0 : chunk;
    double acc[256];
    float part[256];
    for (int64_t j = 0; j < m; j++) acc[j] = 0;
    for (int64_t i0 = 0; i0 < M; i0 += 16) {
      /* f32 partial sums over 16 rows (vectorizes), then double. */
      for (int64_t j = 0; j < m; j++) part[j] = 0.0f;
      const int64_t i1 = i0 + 16 < M ? i0 + 16 : M;
      for (int64_t i = i0; i < i1; i++) {
        uint16_t *row = dz + i * N + j0;
        if (y) {
          const uint16_t *yr = y + i * N + j0;
          for (int64_t j = 0; j < m; j++) row[j] = (uint16_t)(yr[j] - 1u) < 0x7f80u ? row[j] : 0;
        }
        if (db)
          for (int64_t j = 0; j < m; j++) part[j] += loom_bfloat_to_f32(row[j]);
      }
      for (int64_t j = 0; j < m; j++) acc[j] += part[j];
    }
    if (db)
      for (int64_t j = 0; j < m; j++) db[j0 + j] = (float)acc[j];
  }
}

loom_status loom_cpu_linear_bf16_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2], *y = a->in[3];
  loom_tensor *dx = a->out[0], *dw = a->out[1], *db = a->out[2];
  const bool relu = a->i[0] == LOOM_ACT_RELU, overwrite = a->i[4] != 0;
  const int64_t K = x->shape[x->ndim - 1], M = loom_shape_numel(x->ndim, x->shape) / K, N = w->shape[0];

  /* dz: over dy when the engine owns it, else a copy (only needed when
     the mask changes it). */
  uint16_t *dz = loom_tensor_ptr(gy), *dz_own = NULL;
  if (relu && !overwrite) {
    dz_own = loom_sys_malloc((size_t)(M * N) * sizeof(uint16_t));
    if (!dz_own) return loom_set_error(LOOM_ERR_OOM, "linear backward: out of host memory for dZ");
    memcpy(dz_own, dz, (size_t)(M * N) * sizeof(uint16_t));
    dz = dz_own;
  }
  loom_status st = LOOM_OK;
  float *dbp = NULL;
  if (db) {
    dbp = db->dtype == LOOM_F32 && loom_tensor_is_contiguous(db) ? loom_tensor_ptr(db) : loom_sys_malloc((size_t)N * sizeof(float));
    if (!dbp) st = loom_set_error(LOOM_ERR_OOM, "linear backward: out of host memory");
  }
  if (st == LOOM_OK && (relu || db)) {
    loom_cpu_bf16_mask_bias_grad(dz, relu ? loom_tensor_ptr(y) : NULL, M, N, dbp);
    if (db && dbp != loom_tensor_ptr(db)) loom_cpu_store_f32(loom_tensor_ptr(db), db->dtype, db->strides[0], N, dbp);
  }
  if (st == LOOM_OK && dw) {
    loom_gemm_bf16_out o = out_to(dw, K);
    st = loom_cpu_gemm_bf16(true, false, N, K, M, dz, N, loom_tensor_ptr(x), K, &o);
  }
  if (st == LOOM_OK && dx) {
    loom_gemm_bf16_out o = out_to(dx, K);
    st = loom_cpu_gemm_bf16(false, false, M, K, N, dz, N, loom_tensor_ptr(w), K, &o);
  }
  if (dbp && (!db || dbp != loom_tensor_ptr(db))) loom_sys_free(dbp);
  loom_sys_free(dz_own);
  return st;
}
