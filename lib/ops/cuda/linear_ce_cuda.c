/* linear_ce_cuda.c — the final projection fused with the cross-entropy on
 * CUDA (LINEAR_CROSS_ENTROPY and its backward; the CPU kernel is
 * lib/ops/cpu/linear_ce_cpu.c, whose contract this keeps: x and w both f32,
 * f16 or bf16, logits summed in f32, mean loss and lse [N] f32, dx and dw in
 * x's dtype). Rows go through in chunks whose logits fit in CHUNK_FLOATS,
 * so the [N, V] logits never exist in full: per chunk, the logits
 * x·wᵀ on cuBLASLt (matmul_lt.c), then linear_ce.cu's row kernel writes
 * each row's lse and loss; one kernel takes the mean at the end. Backward
 * recomputes each chunk's logits, turns them into (softmax - onehot) gy/N
 * in place (times a power of two for 16-bit operands, see the backward) and runs the two GEMMs: dx rows = dlogits·w, dw += dlogitsᵀ·x
 * (the first chunk overwrites, the others accumulate: beta 1). Chunks run in
 * order on one stream, so the result does not depend on timing. Labels
 * outside [0, V) are reported through device/deferred.c (the CPU fails at
 * once). */
#ifdef LOOM_HAVE_CUDA
#include <string.h>

#include "alloc/alloc.h"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/transformer_launch.h"

/* 64 MiB of f32 logits per chunk: GPT-2's 50257 classes give 333 rows, a
 * GEMM large enough to run at full speed. */
#define CHUNK_FLOATS ((int64_t)1 << 24)

static int64_t chunk_rows(int64_t N, int64_t V) {
  int64_t r = CHUNK_FLOATS / V;
  if (r < 1) r = 1;
  return r < N ? r : (N > 0 ? N : 1);
}

/* Row-major C[M,N] = op(A)·op(B) (+ C when beta is 1): A and B in dt, C in
 * f32 when c_f32 (logits, the dw accumulator), else in dt. */
static loom_status gemm(loom_cuda_ctx *c, loom_dtype dt, bool c_f32, bool ta, bool tb, int64_t M, int64_t N,
                        int64_t K, const void *A, int64_t lda, const void *B, int64_t ldb, void *C, int64_t ldc,
                        float beta) {
  if (M == 0 || N == 0) return LOOM_OK;
  if (K == 0) {
    size_t es = c_f32 ? sizeof(float) : loom_dtype_size(dt);
    if (beta == 0.0f) LOOM_CUDA_CHECK(cudaMemsetAsync(C, 0, (size_t)(M * ldc) * es, c->stream));
    return LOOM_OK;
  }
  loom_lt_gemm g = {.dt = dt, .trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K,
                    .A = A, .lda = lda, .B = B, .ldb = ldb, .C = C, .ldc = ldc, .batch = 1,
                    /* DEFAULT always runs (cublasGemmEx when cuBLASLt has no algorithm) */
                    .epilogue = CUBLASLT_EPILOGUE_DEFAULT, .beta = beta, .c_f32 = c_f32};
  return loom_lt_gemm_run(c, &g);
}

/* Row r of a dense [*, E] matrix of dtype dt. */
static const void *row_of(const void *base, loom_dtype dt, int64_t r, int64_t E) {
  return (const char *)base + (size_t)(r * E) * loom_dtype_size(dt);
}

/* f32 logits of rows [r0, r0 + nr) into L [nr, V]: x and w in dt, f32 sums. */
static loom_status logits(loom_cuda_ctx *c, loom_dtype dt, const void *x, const void *w, int64_t r0, int64_t nr,
                          int64_t V, int64_t E, float *L) {
  return gemm(c, dt, true, false, true, nr, V, E, row_of(x, dt, r0, E), E, w, E, L, V, 0.0f);
}

/* n contiguous elements of src (sdt) into dst (ddt), rounding to nearest even. */
static loom_status convert(loom_cuda_ctx *c, void *dst, loom_dtype ddt, const void *src, loom_dtype sdt, int64_t n) {
  if (n == 0) return LOOM_OK;
  loom_cu_iter it;
  memset(&it, 0, sizeof it);
  it.ndim = 1;
  it.numel = it.shape[0] = n;
  it.strides[0][0] = it.strides[1][0] = 1;
  cudaError_t e = loom_cu_copy(ddt, sdt, &it, dst, src, c->stream);
  return e == cudaSuccess ? LOOM_OK : loom_cuda_error(e, "loom_cu_copy", __FILE__, __LINE__);
}

loom_status loom_cuda_linear_cross_entropy(loom_op_args *a) {
  loom_tensor *x = a->in[0], *w = a->in[1], *labels = a->in[2];
  int64_t N = x->shape[0], E = x->shape[1], V = w->shape[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(a->out[0]);
  if (!c) return loom_last_status();
  LOOM_TRY(loom_deferred_check(c->dev)); /* a bad label an earlier call found */
  unsigned long long *bad;
  loom_deferred_error *rec;
  LOOM_TRY(loom_deferred_slots(c->dev, &bad, &rec));
  int64_t R = chunk_rows(N, V);
  void *L = NULL, *rl = NULL;
  loom_status st = loom_alloc_malloc(c->dev, (size_t)(R * V) * sizeof(float), NULL, &L);
  if (st == LOOM_OK) st = loom_alloc_malloc(c->dev, (size_t)(N > 0 ? N : 1) * sizeof(double), NULL, &rl);
  const void *px = loom_tensor_ptr(x), *pw = loom_tensor_ptr(w);
  float *plse = loom_tensor_ptr(a->out[1]);
  for (int64_t r0 = 0; r0 < N && st == LOOM_OK; r0 += R) {
    int64_t nr = N - r0 < R ? N - r0 : R;
    st = logits(c, x->dtype, px, pw, r0, nr, V, E, L);
    if (st == LOOM_OK) {
      cudaError_t e = loom_cu_lce_rows(L, r0, nr, V, labels->dtype, loom_tensor_ptr(labels), plse, rl, bad, c->stream);
      if (e != cudaSuccess) st = loom_cuda_error(e, "loom_cu_lce_rows", __FILE__, __LINE__);
    }
  }
  if (st == LOOM_OK) {
    cudaError_t e = loom_cu_lce_mean(rl, N, loom_tensor_ptr(a->out[0]), V, labels->dtype, loom_tensor_ptr(labels), bad,
                                     (loom_cu_deferred_error *)rec, c->stream);
    if (e != cudaSuccess) st = loom_cuda_error(e, "loom_cu_lce_mean", __FILE__, __LINE__);
  }
  loom_alloc_free(c->dev, L);
  loom_alloc_free(c->dev, rl);
  return st;
}

loom_status loom_cuda_linear_cross_entropy_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2], *labels = a->in[3], *lse = a->in[4];
  loom_tensor *dx = a->out[0], *dw = a->out[1];
  loom_tensor *any = dx ? dx : dw;
  if (!any) return LOOM_OK;
  int64_t N = x->shape[0], E = x->shape[1], V = w->shape[0];
  loom_dtype dt = x->dtype;
  bool lowp = dt != LOOM_F32;
  loom_cuda_ctx *c = loom_cuda_ctx_of(any);
  if (!c) return loom_last_status();
  if (N == 0 || E == 0) {
    if (dw && V * E > 0)
      LOOM_CUDA_CHECK(cudaMemsetAsync(loom_tensor_ptr(dw), 0, (size_t)(V * E) * loom_dtype_size(dt), c->stream));
    return LOOM_OK;
  }
  /* 16-bit x and w: the softmax gradient is rounded to dt for the two GEMMs
   * (as torch.autocast's bf16 lm_head backward), scaled by a power of two
   * first (linear_ce.cu: f16 would hold most of it only as subnormals); both
   * GEMMs sum into f32 (Xf per chunk, Wf over the chunks) and are unscaled
   * and rounded once. */
  int64_t R = chunk_rows(N, V);
  void *L = NULL, *Lh = NULL, *Wf = NULL, *Xf = NULL;
  loom_status st = loom_alloc_malloc(c->dev, (size_t)(R * V) * sizeof(float), NULL, &L);
  if (st == LOOM_OK && lowp) st = loom_alloc_malloc(c->dev, (size_t)(R * V) * loom_dtype_size(dt), NULL, &Lh);
  if (st == LOOM_OK && lowp && dw) st = loom_alloc_malloc(c->dev, (size_t)(V * E) * sizeof(float), NULL, &Wf);
  if (st == LOOM_OK && lowp && dx) st = loom_alloc_malloc(c->dev, (size_t)(R * E) * sizeof(float), NULL, &Xf);
  const void *px = loom_tensor_ptr(x), *pw = loom_tensor_ptr(w);
  const float *pgy = loom_tensor_ptr(gy);
  for (int64_t r0 = 0; r0 < N && st == LOOM_OK; r0 += R) {
    int64_t nr = N - r0 < R ? N - r0 : R;
    st = logits(c, dt, px, pw, r0, nr, V, E, L);
    if (st == LOOM_OK) {
      cudaError_t e = loom_cu_lce_dlogits(L, r0, nr, V, labels->dtype, loom_tensor_ptr(labels), loom_tensor_ptr(lse),
                                          pgy, N, lowp, c->stream);
      if (e != cudaSuccess) st = loom_cuda_error(e, "loom_cu_lce_dlogits", __FILE__, __LINE__);
    }
    const void *D = L;
    if (st == LOOM_OK && lowp) {
      st = convert(c, Lh, dt, L, LOOM_F32, nr * V);
      D = Lh;
    }
    void *dxr = dx ? (void *)row_of(loom_tensor_ptr(dx), dt, r0, E) : NULL;
    if (st == LOOM_OK && dx) st = gemm(c, dt, lowp, false, false, nr, E, V, D, V, pw, E, lowp ? Xf : dxr, E, 0.0f);
    if (st == LOOM_OK && dx && lowp) {
      cudaError_t e = loom_cu_lce_unscale(dxr, (int)dt, Xf, nr * E, pgy, N, c->stream);
      if (e != cudaSuccess) st = loom_cuda_error(e, "loom_cu_lce_unscale", __FILE__, __LINE__);
    }
    if (st == LOOM_OK && dw)
      st = gemm(c, dt, lowp, true, false, V, E, nr, D, V, row_of(px, dt, r0, E), E, lowp ? Wf : loom_tensor_ptr(dw), E,
                r0 == 0 ? 0.0f : 1.0f);
  }
  if (st == LOOM_OK && dw && lowp) {
    cudaError_t e = loom_cu_lce_unscale(loom_tensor_ptr(dw), (int)dt, Wf, V * E, pgy, N, c->stream);
    if (e != cudaSuccess) st = loom_cuda_error(e, "loom_cu_lce_unscale", __FILE__, __LINE__);
  }
  loom_alloc_free(c->dev, Xf);
  loom_alloc_free(c->dev, L);
  loom_alloc_free(c->dev, Lh);
  loom_alloc_free(c->dev, Wf);
  return st;
}
#endif
