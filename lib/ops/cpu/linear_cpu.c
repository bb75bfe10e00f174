/* linear_cpu.c — the fused linear layer on the CPU.
 *
 * Forward: y = act(x·wᵀ + b), GEMM in row blocks, bias and ReLU applied to
 * each block right after it is produced, while it is still in cache.
 * Backward: one pass turns dy into dz = dy·relu'(y) (in place when the
 * engine owns dy) and sums the bias gradient in the same pass; then two
 * GEMMs give dW = dzᵀ·x and (when needed) dX = dz·w. No other full-size
 * temporaries. f16/bf16 operands are widened to f32 and results rounded once
 * (CPU emulation of tensor-core mixed precision) — except bf16 on a CPU with
 * AVX512_BF16, which linear_bf16.c computes without widening. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/gemm.h"
#include "core/sys.h"
#include "ops/cpu/linear_bf16.h"

#define ROW_BLOCK 64

/* An f32 contiguous view of t: t's own data, or a widened copy (owned). */
typedef struct f32_buf {
  float *p;
  bool owned;
} f32_buf;

static loom_status as_f32(loom_tensor *t, f32_buf *b) {
  if (t->dtype == LOOM_F32 && loom_tensor_is_contiguous(t)) {
    b->p = loom_tensor_ptr(t);
    b->owned = false;
    return LOOM_OK;
  }
  int64_t n = loom_shape_numel(t->ndim, t->shape);
  b->p = loom_sys_malloc((size_t)(n ? n : 1) * sizeof(float));
  b->owned = true;
  if (!b->p) return loom_set_error(LOOM_ERR_OOM, "linear: out of host memory widening an operand");
  loom_tensor *view = loom_tensor_view_raw(b->p, LOOM_F32, t->ndim, t->shape, loom_cpu());
  if (!view) { loom_sys_free(b->p); b->p = NULL; return loom_last_status(); }
  loom_op_args ca = {.in = {t}, .n_in = 1, .out = {view}, .n_out = 1};
  loom_cpu_copy(&ca);
  loom_tensor_release(view);
  return LOOM_OK;
}

static void f32_free(f32_buf *b) {
  if (b->owned) loom_sys_free(b->p);
}

/* Out buffer: the output itself when f32, else scratch rounded at the end. */
static float *out_f32(loom_tensor *o, int64_t n) {
  if (o->dtype == LOOM_F32) return loom_tensor_ptr(o);
  return loom_sys_malloc((size_t)(n ? n : 1) * sizeof(float));
}

static void out_done(loom_tensor *o, float *p, int64_t n) {
  if (p == loom_tensor_ptr(o)) return;
  loom_cpu_store_f32(loom_tensor_ptr(o), o->dtype, 1, n, p);
  loom_sys_free(p);
}

loom_status loom_cpu_linear(loom_op_args *a) {
  LOOM_TRY(loom_cpu_isa_check());
  if (loom_cpu_linear_bf16_applies(a, false)) return loom_cpu_linear_bf16(a);
  loom_tensor *x = a->in[0], *w = a->in[1], *bias = a->in[2], *y = a->out[0];
  int act = (int)a->i[0];
  int64_t K = x->shape[x->ndim - 1];
  int64_t M = loom_shape_numel(x->ndim - 1, x->shape); /* rows, also when K == 0 */
  int64_t N = w->shape[0];
  f32_buf fx, fw = {NULL, false}, fb = {NULL, false};
  LOOM_TRY(as_f32(x, &fx));
  loom_status st = as_f32(w, &fw);
  if (st == LOOM_OK && bias) st = as_f32(bias, &fb);
  float *py = st == LOOM_OK ? out_f32(y, M * N) : NULL;
  if (st == LOOM_OK && !py) st = loom_set_error(LOOM_ERR_OOM, "linear: out of host memory");
  if (st == LOOM_OK) {
    for (int64_t r0 = 0; r0 < M; r0 += ROW_BLOCK) {
      int64_t mb = M - r0 < ROW_BLOCK ? M - r0 : ROW_BLOCK;
      float *yb = py + r0 * N;
      loom_cpu_sgemm(false, true, mb, N, K, 1.0f, fx.p + r0 * K, K, fw.p, K, 0.0f, yb, N);
      if (fb.p || act == LOOM_ACT_RELU) {
        const float *bp = fb.p;
#pragma omp parallel for schedule(static) if (mb * N >= LOOM_CPU_PAR_MIN)
        for (int64_t i = 0; i < mb; i++) {
          float *row = yb + i * N;
          if (bp && act == LOOM_ACT_RELU)
            for (int64_t j = 0; j < N; j++) { float v = row[j] + bp[j]; row[j] = v > 0.0f ? v : 0.0f; }
          else if (bp)
            for (int64_t j = 0; j < N; j++) row[j] += bp[j];
          else
            for (int64_t j = 0; j < N; j++) row[j] = row[j] > 0.0f ? row[j] : 0.0f;
        }
      }
    }
    out_done(y, py, M * N);
  }
  f32_free(&fx);
  f32_free(&fw);
  f32_free(&fb);
  return st;
}

loom_status loom_cpu_linear_backward(loom_op_args *a) {
  LOOM_TRY(loom_cpu_isa_check());
  if (loom_cpu_linear_bf16_applies(a, true)) return loom_cpu_linear_bf16_backward(a);
  loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2], *y = a->in[3];
  loom_tensor *dx = a->out[0], *dw = a->out[1], *db = a->out[2];
  int act = (int)a->i[0];
  bool overwrite = a->i[4] != 0;
  int64_t K = x->shape[x->ndim - 1];
  int64_t M = loom_shape_numel(x->ndim - 1, x->shape); /* rows, also when K == 0 */
  int64_t N = w->shape[0];
  loom_status st = LOOM_OK;

  /* dz: in place over dy when allowed, else one scratch buffer. */
  float *dz;
  bool dz_owned;
  if (overwrite && gy->dtype == LOOM_F32 && loom_tensor_is_contiguous(gy)) {
    dz = loom_tensor_ptr(gy);
    dz_owned = false;
  } else {
    f32_buf t;
    LOOM_TRY(as_f32(gy, &t));
    if (!t.owned) {
      /* gy is f32 but must not be modified: copy once. */
      dz = loom_sys_malloc((size_t)(M * N > 0 ? M * N : 1) * sizeof(float));
      if (!dz) return loom_set_error(LOOM_ERR_OOM, "linear backward: out of host memory");
      memcpy(dz, t.p, (size_t)(M * N) * sizeof(float));
    } else {
      dz = t.p;
    }
    dz_owned = true;
  }
  f32_buf fy = {NULL, false};
  if (act == LOOM_ACT_RELU) {
    st = as_f32(y, &fy);
    if (st != LOOM_OK) goto out;
  }
  /* One pass: mask and bias-gradient column sums. Threads own column chunks. */
  if (act == LOOM_ACT_RELU || db) {
    float *dbp = db ? out_f32(db, N) : NULL;
    if (db && !dbp) { st = loom_set_error(LOOM_ERR_OOM, "linear backward: out of host memory"); goto out; }
    int64_t chunk = 256, nch = (N + chunk - 1) / chunk;
    const float *yp = fy.p;
#pragma omp parallel for schedule(static) if (M * N >= LOOM_CPU_PAR_MIN)
    for (int64_t c = 0; c < nch; c++) {
      int64_t j0 = c * chunk, m = N - j0 < chunk ? N - j0 : chunk;
      double acc[256];
      for (int64_t j = 0; j < m; j++) acc[j] = 0;
      for (int64_t i = 0; i < M; i++) {
        float *row = dz + i * N + j0;
        if (yp) {
          const float *yr = yp + i * N + j0;
          for (int64_t j = 0; j < m; j++) row[j] = yr[j] > 0.0f ? row[j] : 0.0f;
        }
        for (int64_t j = 0; j < m; j++) acc[j] += row[j];
      }
      if (dbp)
        for (int64_t j = 0; j < m; j++) dbp[j0 + j] = (float)acc[j];
    }
    if (db) out_done(db, dbp, N);
  }
  {
    f32_buf fx = {NULL, false}, fw = {NULL, false};
    if (dw) st = as_f32(x, &fx);
    if (st == LOOM_OK && dx) st = as_f32(w, &fw);
    if (st == LOOM_OK && dw) {
      float *p = out_f32(dw, N * K);
      if (!p) st = loom_set_error(LOOM_ERR_OOM, "linear backward: out of host memory");
      else {
        loom_cpu_sgemm(true, false, N, K, M, 1.0f, dz, N, fx.p, K, 0.0f, p, K);
        out_done(dw, p, N * K);
      }
    }
    if (st == LOOM_OK && dx) {
      float *p = out_f32(dx, M * K);
      if (!p) st = loom_set_error(LOOM_ERR_OOM, "linear backward: out of host memory");
      else {
        loom_cpu_sgemm(false, false, M, K, N, 1.0f, dz, N, fw.p, K, 0.0f, p, K);
        out_done(dx, p, M * K);
      }
    }
    if (fx.p) f32_free(&fx);
    if (fw.p) f32_free(&fw);
  }
out:
  if (fy.p) f32_free(&fy);
  if (dz_owned) loom_sys_free(dz);
  return st;
}
