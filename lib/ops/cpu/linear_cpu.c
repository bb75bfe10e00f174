/* linear_cpu.c — the fused linear layer on the CPU.
 *
 * Forward: y = act(x·wᵀ + b), GEMM in row blocks, bias and ReLU applied to
 * each block right after it is produced, while it is still in cache.
 * Backward: one pass turns dy into dz = dy·relu'(y) (in place when the
 * engine owns dy) and sums the bias gradient in the same pass; then two
 * GEMMs give dW = dzᵀ·x and (when needed) dX = dz·w. No other full-size
 * temporaries. f16/bf16 operands are widened to f32 by the GEMM's packing
 * (loom_cpu_sgemm_widen: no widened copies) and results rounded once (CPU
 * emulation of tensor-core mixed precision) — except bf16 on a CPU with
 * AVX512_BF16, which linear_bf16.c computes without widening. The f32
 * results that must still be rounded live in scratch from the caching
 * allocator, so a training step does not map fresh pages every call. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "alloc/alloc.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/linear_bf16.h"

/* Forward row blocks: as many rows as keep the block's f32 output within
 * 512 KiB (L2 on current x86 server cores, where the bias/ReLU pass finds
 * it), at least 64. Each block packs the whole weight again, so at the
 * MLP's batch 128 one block instead of two saves a weight pass. */
#define ROW_BLOCK_BYTES (512 * 1024)
#define ROW_BLOCK_MIN 64

/* Scratch from the CPU's caching allocator (NULL on OOM; its error stays). */
static void *scratch(size_t bytes) {
  void *p = NULL;
  return loom_alloc_malloc(loom_cpu(), bytes ? bytes : 1, NULL, &p) == LOOM_OK ? p : NULL;
}
static void scratch_free(void *p) {
  if (p) loom_alloc_free(loom_cpu(), p);
}

/* A GEMM operand: t's own memory when it is dense f32/f16/bf16 (the GEMM
 * widens 16-bit while packing), else a widened f32 copy in scratch (owned). */
typedef struct operand {
  void *p;
  loom_dtype dt;
  bool owned;
} operand;

static bool gemm_dtype(loom_dtype dt) { return dt == LOOM_F32 || dt == LOOM_F16 || dt == LOOM_BF16; }

static loom_status widened(loom_tensor *t, operand *o) {
  int64_t n = loom_shape_numel(t->ndim, t->shape);
  o->p = scratch((size_t)n * sizeof(float));
  o->dt = LOOM_F32;
  o->owned = true;
  if (!o->p) return loom_set_error(LOOM_ERR_OOM, "linear: out of host memory widening an operand");
  loom_tensor *view = loom_tensor_view_raw(o->p, LOOM_F32, t->ndim, t->shape, loom_cpu());
  if (!view) { scratch_free(o->p); o->p = NULL; return loom_last_status(); }
  loom_op_args ca = {.in = {t}, .n_in = 1, .out = {view}, .n_out = 1};
  loom_cpu_copy(&ca);
  loom_tensor_release(view);
  return LOOM_OK;
}

static loom_status operand_of(loom_tensor *t, operand *o) {
  if (gemm_dtype(t->dtype) && loom_tensor_is_contiguous(t)) {
    o->p = loom_tensor_ptr(t);
    o->dt = t->dtype;
    o->owned = false;
    return LOOM_OK;
  }
  return widened(t, o);
}

/* An f32 view: t's own data when dense f32, else a widened copy. */
static loom_status as_f32(loom_tensor *t, operand *o) {
  if (t->dtype == LOOM_F32 && loom_tensor_is_contiguous(t)) return operand_of(t, o);
  return widened(t, o);
}

static void operand_free(operand *o) {
  if (o->owned) scratch_free(o->p);
  o->p = NULL;
  o->owned = false;
}

/* Element e of operand o. */
static const void *at(const operand *o, int64_t e) { return (const char *)o->p + (size_t)e * loom_dtype_size(o->dt); }

/* Out buffer: the output itself when f32, else scratch rounded at the end. */
static float *out_f32(loom_tensor *o, int64_t n) {
  if (o->dtype == LOOM_F32) return loom_tensor_ptr(o);
  return scratch((size_t)n * sizeof(float));
}

/* Rounds in chunks over the threads: a serial pass here kept the other
 * thread waiting at the next parallel region. */
#define ROUND_CHUNK 8192
static void out_done(loom_tensor *o, float *p, int64_t n) {
  if (p == loom_tensor_ptr(o)) return;
  loom_cpu_round_fn round = loom_cpu_round_fn_for(o->dtype);
  if (!round || o->dtype == LOOM_F32) {
    loom_cpu_store_f32(loom_tensor_ptr(o), o->dtype, 1, n, p);
    scratch_free(p);
    return;
  }
  uint16_t *d = loom_tensor_ptr(o);
  const int64_t nch = (n + ROUND_CHUNK - 1) / ROUND_CHUNK;
#pragma omp parallel for schedule(static) if (n >= LOOM_CPU_PAR_MIN)
  for (int64_t c = 0; c < nch; c++) {
    const int64_t j0 = c * ROUND_CHUNK, m = n - j0 < ROUND_CHUNK ? n - j0 : ROUND_CHUNK;
    round(p + j0, d + j0, m);
  }
  scratch_free(p);
}

loom_status loom_cpu_linear(loom_op_args *a) {
  LOOM_TRY(loom_cpu_isa_check());
  if (loom_cpu_linear_bf16_applies(a, false)) return loom_cpu_linear_bf16(a);
  loom_tensor *x = a->in[0], *w = a->in[1], *bias = a->in[2], *y = a->out[0];
  int act = (int)a->i[0];
  int64_t K = x->shape[x->ndim - 1];
  int64_t M = loom_shape_numel(x->ndim - 1, x->shape); /* rows, also when K == 0 */
  int64_t N = w->shape[0];
  operand fx, fw = {NULL, LOOM_F32, false}, fb = {NULL, LOOM_F32, false};
  LOOM_TRY(operand_of(x, &fx));
  loom_status st = operand_of(w, &fw);
  if (st == LOOM_OK && bias) st = as_f32(bias, &fb);
  float *py = st == LOOM_OK ? out_f32(y, M * N) : NULL;
  if (st == LOOM_OK && !py) st = loom_set_error(LOOM_ERR_OOM, "linear: out of host memory");
  /* A 16-bit y: py is f32 scratch, rounded into y row by row below. */
  loom_cpu_round_fn round =
      y->dtype == LOOM_F16 || y->dtype == LOOM_BF16 ? loom_cpu_round_fn_for(y->dtype) : NULL;
  if (st == LOOM_OK) {
    int64_t rb = N > 0 ? ROW_BLOCK_BYTES / ((int64_t)sizeof(float) * N) : M;
    if (rb < ROW_BLOCK_MIN) rb = ROW_BLOCK_MIN;
    for (int64_t r0 = 0; r0 < M; r0 += rb) {
      int64_t mb = M - r0 < rb ? M - r0 : rb;
      float *yb = py + r0 * N;
      loom_cpu_sgemm_widen(false, true, mb, N, K, 1.0f, at(&fx, r0 * K), fx.dt, K, fw.p, fw.dt, K, 0.0f, yb, N);
      /* Bias, ReLU and (16-bit y) the rounding in one pass per row, while
         the row is in cache: the same values as separate passes. */
      if (fb.p || act == LOOM_ACT_RELU || round) {
        const float *bp = fb.p;
#pragma omp parallel for schedule(static) if (mb * N >= LOOM_CPU_PAR_MIN)
        for (int64_t i = 0; i < mb; i++) {
          float *row = yb + i * N;
          if (bp && act == LOOM_ACT_RELU)
            for (int64_t j = 0; j < N; j++) { float v = row[j] + bp[j]; row[j] = v > 0.0f ? v : 0.0f; }
          else if (bp)
            for (int64_t j = 0; j < N; j++) row[j] += bp[j];
          else if (act == LOOM_ACT_RELU)
            for (int64_t j = 0; j < N; j++) row[j] = row[j] > 0.0f ? row[j] : 0.0f;
          if (round) round(row, (uint16_t *)loom_tensor_ptr(y) + (r0 + i) * N, N);
        }
      }
    }
    if (round) scratch_free(py);
    else out_done(y, py, M * N);
  }
  operand_free(&fx);
  operand_free(&fw);
  operand_free(&fb);
  return st;
}

/* z[j] = 0 where !(y[j] > 0), on 16-bit bits: y - 1 (as u16) < top. */
static void relu_mask16_scalar(uint16_t *z, const uint16_t *y, int64_t n, uint16_t top) {
  for (int64_t j = 0; j < n; j++) z[j] = (uint16_t)(y[j] - 1u) < top ? z[j] : 0;
}
#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static void relu_mask16_avx2(uint16_t *z, const uint16_t *y, int64_t n,
                                                              uint16_t top) {
  const __m256i one = _mm256_set1_epi16(1), lim = _mm256_set1_epi16((short)(top - 1));
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256i v = _mm256_sub_epi16(_mm256_loadu_si256((const __m256i *)(y + j)), one);
    const __m256i keep = _mm256_cmpeq_epi16(_mm256_min_epu16(v, lim), v); /* v <= top - 1 */
    const __m256i zv = _mm256_loadu_si256((const __m256i *)(z + j));
    _mm256_storeu_si256((__m256i *)(z + j), _mm256_and_si256(zv, keep));
  }
  relu_mask16_scalar(z + j, y + j, n - j, top);
}
#endif
static void relu_mask16(uint16_t *z, const uint16_t *y, int64_t n, uint16_t top, bool avx2) {
#if defined(__x86_64__)
  if (avx2) {
    relu_mask16_avx2(z, y, n, top);
    return;
  }
#endif
  (void)avx2;
  relu_mask16_scalar(z, y, n, top);
}

loom_status loom_cpu_linear_backward(loom_op_args *a) {
  LOOM_TRY(loom_cpu_isa_check());
  if (loom_cpu_linear_bf16_applies(a, true)) return loom_cpu_linear_bf16_backward(a);
  loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2], *y = a->in[3];
  loom_tensor *dx = a->out[0], *dw = a->out[1], *db = a->out[2];
  int act = (int)a->i[0];
  const bool relu = act == LOOM_ACT_RELU;
  bool overwrite = a->i[4] != 0;
  int64_t K = x->shape[x->ndim - 1];
  int64_t M = loom_shape_numel(x->ndim - 1, x->shape); /* rows, also when K == 0 */
  int64_t N = w->shape[0];
  loom_status st = LOOM_OK;

  /* dz in dy's dtype (masking does not change a value, and the GEMMs widen
   * 16-bit operands): dy itself when the engine owns it or when nothing
   * masks it, else one copy. Other dtypes or layouts: a widened copy. */
  operand dz = {NULL, LOOM_F32, false};
  if (gemm_dtype(gy->dtype) && loom_tensor_is_contiguous(gy)) {
    dz.p = loom_tensor_ptr(gy);
    dz.dt = gy->dtype;
    if (relu && !overwrite) {
      const size_t bytes = (size_t)(M * N) * loom_dtype_size(gy->dtype);
      void *copy = scratch(bytes);
      if (!copy) return loom_set_error(LOOM_ERR_OOM, "linear backward: out of host memory");
      if (bytes) memcpy(copy, dz.p, bytes);
      dz.p = copy;
      dz.owned = true;
    }
  } else {
    LOOM_TRY(widened(gy, &dz));
  }
  operand fy = {NULL, LOOM_F32, false};
  if (relu) {
    st = operand_of(y, &fy);
    if (st != LOOM_OK) goto out;
  }
  /* One pass: mask and bias-gradient column sums (in double, row by row).
   * Threads own column chunks. 16-bit values are widened per chunk: the
   * same comparisons and sums as on widened copies. */
  if (relu || db) {
    float *dbp = db ? out_f32(db, N) : NULL;
    if (db && !dbp) { st = loom_set_error(LOOM_ERR_OOM, "linear backward: out of host memory"); goto out; }
    int64_t chunk = 256, nch = (N + chunk - 1) / chunk;
    const operand *yo = relu ? &fy : NULL, *zo = &dz;
    const size_t zs = loom_dtype_size(dz.dt);
    const bool avx2 = loom_cpu_isa_level_now() >= LOOM_CPU_ISA_AVX2;
#pragma omp parallel for schedule(static) if (M * N >= LOOM_CPU_PAR_MIN)
    for (int64_t c = 0; c < nch; c++) {
      int64_t j0 = c * chunk, m = N - j0 < chunk ? N - j0 : chunk;
      double acc[256];
      float yw[256], zw[256];
      for (int64_t j = 0; j < m; j++) acc[j] = 0;
      for (int64_t i = 0; i < M; i++) {
        char *zrow = (char *)zo->p + (size_t)(i * N + j0) * zs;
        float *row = zo->dt == LOOM_F32 ? (float *)zrow : zw;
        const bool both16 = yo && yo->dt != LOOM_F32 && zo->dt != LOOM_F32;
        if (both16) {
          /* y > 0 on the bits: positive and at most +inf (0x7c00 f16,
           * 0x7f80 bf16), as the widened comparison; 16-bit zero bits are
           * +0, as the f32 mask writes. Masked before widening (a loop on
           * 16-bit lanes that vectorizes): the same values. */
          const uint16_t *y16 = (const uint16_t *)yo->p + i * N + j0;
          const uint16_t top = yo->dt == LOOM_F16 ? 0x7c00 : 0x7f80;
          uint16_t *z16 = (uint16_t *)zrow;
          relu_mask16(z16, y16, m, top, avx2);
        }
        if (zo->dt != LOOM_F32) loom_cpu_load_f32(zrow, zo->dt, 1, m, zw);
        if (both16) {
          /* masked above */
        } else if (yo) {
          const float *yr = loom_cpu_span_f32(yo->p, yo->dt, i * N + j0, m, yw);
          if (zo->dt == LOOM_F32) {
            for (int64_t j = 0; j < m; j++) row[j] = yr[j] > 0.0f ? row[j] : 0.0f;
          } else {
            uint16_t *z16 = (uint16_t *)zrow;
            for (int64_t j = 0; j < m; j++)
              if (!(yr[j] > 0.0f)) z16[j] = 0, row[j] = 0.0f;
          }
        }
        for (int64_t j = 0; j < m; j++) acc[j] += row[j];
      }
      if (dbp)
        for (int64_t j = 0; j < m; j++) dbp[j0 + j] = (float)acc[j];
    }
    if (db) out_done(db, dbp, N);
  }
  {
    operand fx = {NULL, LOOM_F32, false}, fw = {NULL, LOOM_F32, false};
    if (dw) st = operand_of(x, &fx);
    if (st == LOOM_OK && dx) st = operand_of(w, &fw);
    /* A 16-bit dW is rounded tile by tile when the GEMM can (K = the
       batch rows fit one K slice): no f32 dW through memory. */
    const bool dw16 = dw && st == LOOM_OK && (dw->dtype == LOOM_F16 || dw->dtype == LOOM_BF16) &&
                      loom_tensor_is_contiguous(dw) &&
                      loom_cpu_sgemm_widen_to16(true, false, N, K, M, 1.0f, dz.p, dz.dt, N, fx.p, fx.dt, K,
                                                loom_tensor_ptr(dw), dw->dtype, K);
    if (st == LOOM_OK && dw && !dw16) {
      float *p = out_f32(dw, N * K);
      if (!p) st = loom_set_error(LOOM_ERR_OOM, "linear backward: out of host memory");
      else {
        loom_cpu_sgemm_widen(true, false, N, K, M, 1.0f, dz.p, dz.dt, N, fx.p, fx.dt, K, 0.0f, p, K);
        out_done(dw, p, N * K);
      }
    }
    if (st == LOOM_OK && dx) {
      float *p = out_f32(dx, M * K);
      if (!p) st = loom_set_error(LOOM_ERR_OOM, "linear backward: out of host memory");
      else {
        loom_cpu_sgemm_widen(false, false, M, K, N, 1.0f, dz.p, dz.dt, N, fw.p, fw.dt, K, 0.0f, p, K);
        out_done(dx, p, M * K);
      }
    }
    operand_free(&fx);
    operand_free(&fw);
  }
out:
  operand_free(&fy);
  operand_free(&dz);
  return st;
}
