/* linear_cuda.c — the fused linear layer on cuBLASLt.
 *
 * Forward, y = act(x·wᵀ + b): one cublasLtMatmul with the epilogue
 *   RELU_AUX_BIAS (ReLU, bias, and the ReLU bitmask written to out[1] when
 *   autograd will need it), RELU_BIAS (no mask needed), BIAS or RELU
 *   (no bias) or DEFAULT.
 * Backward (LINEAR_BACKWARD; inputs gy, x, w, in3; see the grad rule in
 *   autograd/grad_rules.c for how the chain is set up):
 *   - own dReLU (act = ReLU, the input gradient not already masked): one
 *     pass dz = gy·(y > 0), over gy in place when the engine owns it;
 *   - dW = dzᵀ·x with the BGRADB epilogue, which also writes db;
 *   - dX = dz·w, skipped when the input needs no gradient (first layer).
 *     When the input x is the output of another fused Linear→ReLU whose only
 *     consumer is this layer (i[6] set; in3 is then that layer's bitmask),
 *     this GEMM runs with DRELU_BGRAD: it writes the previous layer's dZ
 *     (dX masked by its ReLU) and its bias gradient (out[3]) in the same
 *     call, so the previous layer's backward does no dReLU pass and no
 *     bias-gradient reduction (apex fused_dense style).
 * Fallbacks: when cuBLASLt reports no algorithm for an epilogue and shape
 *   (decided per plan key in matmul_lt.c, never process-wide), or when the
 *   unfused path is forced (benchmarks), the same results come from a plain
 *   GEMM plus separate kernels (bias add, ReLU, dReLU from y/x > 0, a column
 *   sum for bias gradients). loom's own kernels never read the bitmask (its
 *   bit layout is cuBLASLt's business): the fallbacks use y > 0 and x > 0.
 *   A mask the forward could not have cuBLASLt write is tagged on the mask
 *   tensor itself (mask_unwritten), so only the backward that consumes that
 *   very mask avoids DRELU_BGRAD; every other layer keeps fusing.
 * Bias vectors reach cuBLASLt 16-byte aligned (a misaligned view is copied
 *   first): the epilogues read them with vector loads.
 * Deterministic mode (loom_set_deterministic): results must not depend on
 *   the shape of the autograd graph, so that activation checkpointing (whose
 *   segment boundaries cut the Linear→ReLU chains, and whose first forward
 *   pass needs no ReLU mask while the recompute does) gives the plain run's
 *   bits. cuBLASLt sums a bias gradient in its own order inside BGRADB or
 *   DRELU_BGRAD, and which of the two (or none) a layer gets depends on the
 *   graph; an epilogue with or without AUX is another plan that may run
 *   another kernel. So in that mode the forward always uses the epilogue
 *   without AUX (the mask is zeroed and tagged unwritten, as in the
 *   fallback) and the backward takes the unfused path: plain GEMMs (one plan
 *   per shape whoever calls), dReLU from y > 0, bias gradients from loom's
 *   fixed-order column sum. The first GPU run found the difference: b1 of an
 *   MLP one f32 ulp off under checkpoint_every=1. */
#ifdef LOOM_HAVE_CUDA
#include <stdint.h>
#include <string.h>

#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/deterministic.h"
#include "ops/elementwise_math.h"

static bool g_force_unfused = false;

void loom_cuda_linear_force_unfused(bool on) { __atomic_store_n(&g_force_unfused, on, __ATOMIC_RELAXED); }

bool loom_cuda_linear_unfused_forced(void) { return __atomic_load_n(&g_force_unfused, __ATOMIC_RELAXED); }

/* The tag of a ReLU mask cuBLASLt did not write (its user_tag: a mask is a
 * fresh op output, which no other subsystem tags). */
static char g_mask_unwritten;

static bool mask_written(const loom_tensor *mask) { return mask->user_tag != &g_mask_unwritten; }

/* t's data, or a 16-byte aligned copy of it (*tmp, released by the caller). */
static void *aligned16(loom_tensor *t, loom_tensor **tmp) {
  *tmp = NULL;
  if (((uintptr_t)loom_tensor_ptr(t) & 15) == 0) return loom_tensor_ptr(t);
  *tmp = loom_cuda_scratch(t, t->ndim, t->shape, t->dtype);  /* fresh allocations are 512-byte aligned */
  if (!*tmp || loom_cuda_copy_into(*tmp, t) != LOOM_OK) return NULL;
  return loom_tensor_ptr(*tmp);
}

/* Elementwise helpers on whole contiguous tensors of one shape/broadcast. */
static loom_status binary(loom_cuda_ctx *c, int op, loom_tensor *out, loom_tensor *x, loom_tensor *y) {
  loom_tensor *ops[3] = {out, x, y};
  loom_cu_iter it;
  loom_cu_iter_build(&it, 3, ops);
  LOOM_LAUNCH_CHECK(loom_cu_binary(op, out->dtype, &it, loom_tensor_ptr(out), loom_tensor_ptr(x), loom_tensor_ptr(y),
                                   c->stream));
  return LOOM_OK;
}

static loom_status relu_inplace(loom_cuda_ctx *c, loom_tensor *t) {
  loom_tensor *ops[2] = {t, t};
  loom_cu_iter it;
  loom_cu_iter_build(&it, 2, ops);
  LOOM_LAUNCH_CHECK(loom_cu_unary(LOOM_EW_RELU, t->dtype, 0.0f, &it, loom_tensor_ptr(t), loom_tensor_ptr(t), c->stream));
  return LOOM_OK;
}

/* out[j] = sum_i z[i*N + j] (z contiguous [M, N]). */
static loom_status col_sum(loom_cuda_ctx *c, const loom_tensor *z, int64_t M, int64_t N, loom_tensor *out) {
  LOOM_LAUNCH_CHECK(loom_cu_reduce2d(0, z->dtype, loom_tensor_ptr(z), N, M, 1, N, out->dtype, loom_tensor_ptr(out),
                                     NULL, c->stream));  /* columns: never split */
  return LOOM_OK;
}

static loom_status zero(loom_cuda_ctx *c, loom_tensor *t) {
  size_t n = (size_t)loom_shape_numel(t->ndim, t->shape) * loom_dtype_size(t->dtype);
  if (n) LOOM_CUDA_CHECK(cudaMemsetAsync(loom_tensor_ptr(t), 0, n, c->stream));
  return LOOM_OK;
}

/* Row-major GEMM C[M,N] = op(A)·op(B) with an epilogue; handles empty
 * problems (K = 0 gives zeros) without calling cuBLASLt. */
static loom_status gemm(loom_cuda_ctx *c, loom_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                        const void *A, int64_t lda, const void *B, int64_t ldb, loom_tensor *C,
                        cublasLtEpilogue_t epi, void *bias, void *aux, int64_t aux_ld) {
  if (M == 0 || N == 0) return LOOM_OK;
  if (K == 0) {
    if (epi != CUBLASLT_EPILOGUE_DEFAULT) return LOOM_ERR_UNSUPPORTED;
    return zero(c, C);
  }
  loom_lt_gemm g = {.dt = dt, .trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K,
                    .A = A, .lda = lda, .B = B, .ldb = ldb, .C = loom_tensor_ptr(C), .ldc = N, .batch = 1,
                    .epilogue = epi, .bias = bias, .aux = aux, .aux_ld = aux_ld};
  return loom_lt_gemm_run(c, &g);
}

/* A plain GEMM (it always runs: cublasGemmEx when cuBLASLt has no algorithm). */
static loom_status gemm_plain(loom_cuda_ctx *c, loom_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                              const void *A, int64_t lda, const void *B, int64_t ldb, loom_tensor *C) {
  return gemm(c, dt, ta, tb, M, N, K, A, lda, B, ldb, C, CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0);
}

loom_status loom_cuda_linear(loom_op_args *a) {
  loom_tensor *x = a->in[0], *w = a->in[1], *b = a->n_in > 2 ? a->in[2] : NULL, *y = a->out[0];
  loom_tensor *mask = a->n_out > 1 ? a->out[1] : NULL;
  bool relu = a->i[0] == LOOM_ACT_RELU;
  loom_cuda_ctx *c = loom_cuda_ctx_of(y);
  if (!c) return loom_last_status();
  int64_t K = x->shape[x->ndim - 1];
  int64_t N = w->shape[0];
  int64_t M = K ? loom_shape_numel(x->ndim, x->shape) / K : loom_shape_numel(y->ndim, y->shape) / (N ? N : 1);
  if (M == 0 || N == 0) return LOOM_OK;
  loom_dtype dt = y->dtype;
  loom_tensor *xc = loom_cuda_contig(x, dt), *wc = xc ? loom_cuda_contig(w, dt) : NULL;
  loom_tensor *bc = (wc && b) ? loom_cuda_contig(b, dt) : NULL;
  loom_status st = (!xc || !wc || (b && !bc)) ? loom_last_status() : LOOM_OK;
  bool fused_done = false;
  loom_tensor *bal = NULL;
  bool aux = mask && !loom_get_deterministic();  /* see "Deterministic mode" above */
  if (st == LOOM_OK && !loom_cuda_linear_unfused_forced()) {
    cublasLtEpilogue_t epi;
    if (relu) epi = bc ? (aux ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_BIAS)
                       : (aux ? CUBLASLT_EPILOGUE_RELU_AUX : CUBLASLT_EPILOGUE_RELU);
    else epi = bc ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    void *bias = bc ? aligned16(bc, &bal) : NULL;
    if (bc && !bias) st = loom_last_status();
    if (st == LOOM_OK)
      st = gemm(c, dt, false, true, M, N, K, loom_tensor_ptr(xc), K, loom_tensor_ptr(wc), K, y, epi, bias,
                aux ? loom_tensor_ptr(mask) : NULL, aux ? mask->shape[1] * 8 : 0);
    if (st == LOOM_OK) fused_done = true;
    else if (st == LOOM_ERR_UNSUPPORTED) st = LOOM_OK;
  }
  loom_tensor_release(bal);
  if (mask) mask->user_tag = fused_done && aux ? NULL : &g_mask_unwritten;
  if (st == LOOM_OK && fused_done && mask && !aux) st = zero(c, mask);  /* deterministic mode: never read */
  if (st == LOOM_OK && !fused_done) {
    /* The unfused path: GEMM, then bias, then ReLU, three kernels. */
    st = gemm_plain(c, dt, false, true, M, N, K, loom_tensor_ptr(xc), K, loom_tensor_ptr(wc), K, y);
    if (st == LOOM_OK && bc) st = binary(c, LOOM_EW_ADD, y, y, bc);
    if (st == LOOM_OK && relu) st = relu_inplace(c, y);
    /* Nothing reads this mask (see g_mask_gap_*); keep it deterministic. */
    if (st == LOOM_OK && mask) st = zero(c, mask);
  }
  loom_tensor_release(xc);
  loom_tensor_release(wc);
  loom_tensor_release(bc);
  return st;
}

loom_status loom_cuda_linear_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2], *in3 = a->n_in > 3 ? a->in[3] : NULL;
  loom_tensor *dx = a->out[0], *dw = a->out[1], *db = a->out[2], *db_prev = a->out[3];
  bool relu = a->i[0] == LOOM_ACT_RELU;
  bool overwrite = a->i[4] != 0;
  bool chain = a->i[6] != 0;
  loom_cuda_ctx *c = loom_cuda_ctx_of(x);
  if (!c) return loom_last_status();
  loom_dtype dt = w->dtype;
  int64_t K = x->shape[x->ndim - 1];
  int64_t N = w->shape[0];
  int64_t M = K ? loom_shape_numel(x->ndim, x->shape) / K : loom_shape_numel(gy->ndim, gy->shape) / (N ? N : 1);
  if (chain && (relu || !in3 || in3->dtype != LOOM_U8 || in3->ndim != 2 || in3->shape[0] != M ||
                in3->shape[1] * 8 < K || (in3->shape[1] * 8) % 128 != 0 || !loom_cuda_dense(in3)))
    return loom_set_error(LOOM_ERR_INTERNAL, "linear backward: inconsistent ReLU-mask chaining arguments");
  if (relu && (!in3 || !loom_dtype_is_float(in3->dtype)))
    return loom_set_error(LOOM_ERR_INTERNAL, "linear backward: ReLU needs the layer's output");
  bool fuse = !loom_cuda_linear_unfused_forced() && !loom_get_deterministic();  /* see "Deterministic mode" */
  loom_status st = LOOM_OK;

  /* dz = gy, masked by this layer's ReLU (in place when the engine owns gy). */
  loom_tensor *dz;
  if (relu) {
    if (gy->dtype != dt || in3->dtype != dt)
      return loom_set_error(LOOM_ERR_DTYPE, "linear backward: gradient %s / output %s do not match the layer's %s",
                            loom_dtype_name(gy->dtype), loom_dtype_name(in3->dtype), loom_dtype_name(dt));
    if (overwrite && loom_cuda_dense(gy)) dz = loom_tensor_retain(gy);
    else dz = loom_cuda_scratch(gy, gy->ndim, gy->shape, dt);
    if (!dz) return loom_last_status();
    st = binary(c, LOOM_EW_RELU_BW, dz, gy, in3);
  } else {
    dz = loom_cuda_contig(gy, dt);
    if (!dz) return loom_last_status();
  }
  loom_tensor *xc = NULL, *wc = NULL;
  if (st == LOOM_OK && (dw || (chain && dx))) {
    xc = loom_cuda_contig(x, dt);
    if (!xc) st = loom_last_status();
  }
  if (st == LOOM_OK && dx) {
    wc = loom_cuda_contig(w, dt);
    if (!wc) st = loom_last_status();
  }

  /* dW = dzᵀ·x, with db from the BGRADB epilogue when it can (db is a
   * fresh output: allocator-aligned). */
  bool db_done = false;
  if (st == LOOM_OK && dw) {
    if (fuse && db && db->dtype == dt && M > 0 && N > 0 && K > 0 && ((uintptr_t)loom_tensor_ptr(db) & 15) == 0) {
      st = gemm(c, dt, true, false, N, K, M, loom_tensor_ptr(dz), N, loom_tensor_ptr(xc), K, dw,
                CUBLASLT_EPILOGUE_BGRADB, loom_tensor_ptr(db), NULL, 0);
      if (st == LOOM_OK) db_done = true;
      else if (st == LOOM_ERR_UNSUPPORTED) st = LOOM_OK;
    }
    if (st == LOOM_OK && !db_done)
      st = gemm_plain(c, dt, true, false, N, K, M, loom_tensor_ptr(dz), N, loom_tensor_ptr(xc), K, dw);
  }
  if (st == LOOM_OK && db && !db_done) st = col_sum(c, dz, M, N, db);

  /* dX = dz·w; with chaining, also the previous layer's dReLU and db. */
  if (st == LOOM_OK && dx) {
    bool done = false;
    if (chain && fuse && mask_written(in3) && M > 0 && K > 0 && N > 0 && (!db_prev || db_prev->dtype == dt) &&
        (!db_prev || ((uintptr_t)loom_tensor_ptr(db_prev) & 15) == 0)) {
      st = gemm(c, dt, false, false, M, K, N, loom_tensor_ptr(dz), N, loom_tensor_ptr(wc), K, dx,
                db_prev ? CUBLASLT_EPILOGUE_DRELU_BGRAD : CUBLASLT_EPILOGUE_DRELU,
                db_prev ? loom_tensor_ptr(db_prev) : NULL, loom_tensor_ptr(in3), in3->shape[1] * 8);
      if (st == LOOM_OK) done = true;
      else if (st == LOOM_ERR_UNSUPPORTED) st = LOOM_OK;
    }
    if (st == LOOM_OK && !done) {
      st = gemm_plain(c, dt, false, false, M, K, N, loom_tensor_ptr(dz), N, loom_tensor_ptr(wc), K, dx);
      if (st == LOOM_OK && chain) {
        /* The previous layer's dReLU from its output (our x), then its db. */
        st = binary(c, LOOM_EW_RELU_BW, dx, dx, xc);
        if (st == LOOM_OK && db_prev) st = col_sum(c, dx, M, K, db_prev);
      }
    }
  } else if (st == LOOM_OK && db_prev) {
    st = loom_set_error(LOOM_ERR_INTERNAL, "linear backward: a chained bias gradient needs the input gradient");
  }
  loom_tensor_release(dz);
  loom_tensor_release(xc);
  loom_tensor_release(wc);
  return st;
}
#endif
