/* cuda_internal.h (internal, C) — what the C side of the CUDA backend
 * shares: the per-device context (compute stream, cuBLASLt handle,
 * workspace), error conversion for cuBLAS(Lt) statuses and kernel launches,
 * iteration spaces built from tensors, and the cuBLASLt GEMM with its plan
 * cache (matmul_lt.c). */
#ifndef LOOM_OPS_CUDA_INTERNAL_H
#define LOOM_OPS_CUDA_INTERNAL_H

#include <stdbool.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "device/device_internal.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/op.h"

/* A failed cuBLAS(Lt) call as a loom error naming call, file and line. */
loom_status loom_cublas_error(cublasStatus_t s, const char *call, const char *file, int line);
#define LOOM_CUBLAS_CHECK(call)                                                           \
  do {                                                                                    \
    cublasStatus_t loom_cbs_ = (call);                                                    \
    if (loom_cbs_ != CUBLAS_STATUS_SUCCESS) return loom_cublas_error(loom_cbs_, #call, __FILE__, __LINE__); \
  } while (0)
/* Launchers return cudaError_t: same conversion as LOOM_CUDA_CHECK. */
#define LOOM_LAUNCH_CHECK(call) LOOM_CUDA_CHECK(call)

/* Per-device state, created on first use (thread-safe) and kept until exit. */
typedef struct loom_cuda_ctx {
  loom_device dev;
  cudaStream_t stream;        /* the device's current compute stream */
  cublasLtHandle_t lt;
  void *workspace;            /* from the device allocator */
  size_t workspace_bytes;
  cublasHandle_t blas;        /* classic cuBLAS, created on first need (GEMMs cuBLASLt has no algorithm for) */
} loom_cuda_ctx;

/* Make dev current on this thread and return its context (NULL + error). */
loom_cuda_ctx *loom_cuda_ctx_get(loom_device dev);
/* The context of tensor t's device. */
static inline loom_cuda_ctx *loom_cuda_ctx_of(const loom_tensor *t) { return loom_cuda_ctx_get(t->storage->device); }

/* Iteration space of output o and inputs (broadcast to o's shape), dims
 * coalesced. nops counts o. */
void loom_cu_iter_build(loom_cu_iter *it, int nops, loom_tensor *const *ops);

/* Whether the kernels may read t as one dense row-major block. An empty
 * tensor always may (nothing is read): loom_tensor_is_contiguous refuses
 * fresh empty tensors such as [2, 5, 4, 0] (strides 20, 4, 1, 1: an empty
 * dim counts as 1, loom_contiguous_strides) because it multiplies by the 0,
 * and a kernel entry must not fail on what the CPU path accepts. */
static inline bool loom_cuda_dense(const loom_tensor *t) {
  return loom_shape_numel(t->ndim, t->shape) == 0 || loom_tensor_is_contiguous(t);
}

/* A contiguous device tensor with t's shape and dtype dt (not adopted by
 * any scope; release it). */
loom_tensor *loom_cuda_scratch(const loom_tensor *like, int ndim, const int64_t *shape, loom_dtype dt);
/* t itself (retained) when dense (loom_cuda_dense) with dtype dt, else a contiguous copy
 * converted to dt (release it either way). */
loom_tensor *loom_cuda_contig(loom_tensor *t, loom_dtype dt);
/* dst <- src elementwise (same shape, any dtypes) on the device. */
loom_status loom_cuda_copy_into(loom_tensor *dst, loom_tensor *src);

/* ---- cuBLASLt GEMM (matmul_lt.c) ----------------------------------------
 * Row-major description: C[M,N] (ld ldc) = op(A)[M,K] · op(B)[K,N], A stored
 * [M,K] (or [K,M] when trans_a) with leading dim lda, likewise B; `batch`
 * matrices at element strides sa, sb, sc. Epilogues (cuBLASLt's, in
 * column-major terms of the transposed problem) with their row-major
 * meaning:
 *   BIAS / RELU_BIAS / RELU_AUX_BIAS: bias[N] added to each row of C, then
 *     ReLU; AUX writes the ReLU bitmask of C (aux_ld = bits per row of C,
 *     a multiple of 128).
 *   DRELU / DRELU_BGRAD: C is multiplied by the bitmask aux (one row of
 *     aux_ld bits per row of C); BGRAD also writes bias[N] = column sums of
 *     the masked C.
 *   BGRADB: bias[M] = sums of op(A) over K (with trans_a, as in the weight
 *     gradient dW = dZᵀ·X: the column sums of the stored dZ).
 * Returns LOOM_OK, an error, or LOOM_ERR_UNSUPPORTED (no error message set)
 * when cuBLASLt has no algorithm for this fused epilogue and shape — the
 * caller falls back for this call. A DEFAULT epilogue without a cuBLASLt
 * algorithm runs on cublasGemmStridedBatchedEx instead, so it never returns
 * LOOM_ERR_UNSUPPORTED. */
typedef struct loom_lt_gemm {
  loom_dtype dt;
  bool trans_a, trans_b;
  int64_t M, N, K;
  const void *A; int64_t lda, sa;
  const void *B; int64_t ldb, sb;
  void *C; int64_t ldc, sc;
  int64_t batch;
  cublasLtEpilogue_t epilogue;
  void *bias;
  void *aux; int64_t aux_ld;
  float beta;                 /* 0: overwrite C; 1: accumulate */
  bool c_f32;                 /* C in f32 while A and B are f16/bf16 (f32 logits or an f32 accumulator
                                 from 16-bit operands); DEFAULT epilogue only */
} loom_lt_gemm;
loom_status loom_lt_gemm_run(loom_cuda_ctx *ctx, const loom_lt_gemm *g);
bool loom_cuda_tf32_allowed(void);

#endif
