/* transformer_launch.h (internal) — launchers of the transformer ops' device
 * code (issue 28: softmax.cu, layer_norm.cu, embedding.cu, linear_ce.cu),
 * the boundary between them and their C side (transformer_cuda.c,
 * linear_ce_cuda.c); plain C types only, like cuda_launch.h. Every tensor
 * is dense and row-major; dtype codes are loom_dtype's values; float math
 * is f32 whatever the storage dtype, with row sums in double as the CPU
 * kernels do. Nothing here synchronizes. */
#ifndef LOOM_OPS_CUDA_TRANSFORMER_LAUNCH_H
#define LOOM_OPS_CUDA_TRANSFORMER_LAUNCH_H

#include <stdint.h>
#include <stdbool.h>
#include <cuda_runtime_api.h>

#include "ops/cuda/cuda_launch.h" /* loom_cu_deferred_error */

#ifdef __cplusplus
extern "C" {
#endif

/* Softmax over rows of C (x, y of dtype dt): y = exp(x - max) / sum. */
cudaError_t loom_cu_softmax(int dt, const void *x, void *y, int64_t rows, int64_t C, cudaStream_t s);
/* dx = y * (gy - sum(gy * y)) per row. */
cudaError_t loom_cu_softmax_bw(int dt, const void *gy, const void *y, void *dx, int64_t rows, int64_t C,
                               cudaStream_t s);

/* LayerNorm over rows of D. */
typedef struct loom_cu_ln {
  int dt;               /* x, y, gy, dx */
  int64_t rows, D;
  double eps;
  const void *x, *gy;
  void *y, *dx;         /* dx NULL: not wanted */
  const void *w, *b;    /* [D] or NULL */
  int wdt, bdt;
  float *stats;         /* [rows, 2]: mean, rstd */
  void *dw, *db;        /* [D] or NULL */
  int dwdt, dbdt;
  float *partial;       /* backward scratch: loom_cu_ln_partial_floats(rows, D) */
} loom_cu_ln;
cudaError_t loom_cu_ln_forward(const loom_cu_ln *p, cudaStream_t s);
/* dx per row; dweight / dbias as f32 partial sums over fixed blocks of rows
 * (in row order), then the blocks summed in order in double: the same bits
 * for every run. */
cudaError_t loom_cu_ln_backward(const loom_cu_ln *p, cudaStream_t s);
int64_t loom_cu_ln_partial_floats(int64_t rows, int64_t D);

/* Embedding. Indices (dtype idt: i32, i64, u8) outside [0, V) are not
 * waited for: their output rows are zeros (forward) or skipped (backward),
 * and the first one's position goes to the deferred error record (op
 * code `op`, device_internal.h) as cross-entropy's labels do. */
cudaError_t loom_cu_embedding_fwd(int dt, const void *w, int64_t V, int64_t D, int idt, const void *idx, int64_t n,
                                  void *out, unsigned long long *bad, loom_cu_deferred_error *rec, cudaStream_t s);
/* dweight [V, D] (dtype dt, like gy) = the scatter-add of gy's n rows:
 * indices sorted stably (a parallel counting sort of (index, position)),
 * then each row of dweight summed in f32 by one thread per column over its
 * positions in order — no float atomics, the same bits every run. scratch:
 * loom_cu_embedding_bwd_scratch(n, V) bytes. */
cudaError_t loom_cu_embedding_bwd(int dt, const void *gy, int64_t V, int64_t D, int idt, const void *idx, int64_t n,
                                  void *dw, void *scratch, size_t scratch_bytes, unsigned long long *bad,
                                  loom_cu_deferred_error *rec, cudaStream_t s);
size_t loom_cu_embedding_bwd_scratch(int64_t n, int64_t V);

/* Fused projection + cross-entropy, the row kernels between the GEMMs of
 * linear_ce_cuda.c. L: nr rows of V f32 logits (rows r0.. of the batch).
 * Forward: lse[r0 + i] and the row's loss (double) into row_loss[r0 + i];
 * a label outside [0, V) gives a NaN row loss and goes to *bad. */
cudaError_t loom_cu_lce_rows(const float *L, int64_t r0, int64_t nr, int64_t V, int ldt, const void *labels,
                             float *lse, double *row_loss, unsigned long long *bad, cudaStream_t s);
/* out[0] = mean of row_loss[0..N) (NaN when N = 0), and the bad label, if
 * any, published as LOOM_DEFERRED_LINEAR_CROSS_ENTROPY. */
cudaError_t loom_cu_lce_mean(const double *row_loss, int64_t N, float *out, int64_t V, int ldt, const void *labels,
                             unsigned long long *bad, loom_cu_deferred_error *rec, cudaStream_t s);
/* Backward: L <- (exp(L - lse) - onehot(label)) * (*gy) / N in place,
 * times a power of two when scaled (for rounding to 16 bits; linear_ce.cu). */
cudaError_t loom_cu_lce_dlogits(float *L, int64_t r0, int64_t nr, int64_t V, int ldt, const void *labels,
                                const float *lse, const float *gy, int64_t N, bool scaled, cudaStream_t s);
/* dst[i] (dtype dt) = src[i] times the inverse of that power of two, rounded once. */
cudaError_t loom_cu_lce_unscale(void *dst, int dt, const float *src, int64_t n, const float *gy, int64_t N,
                                cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
