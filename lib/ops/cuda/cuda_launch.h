/* cuda_launch.h (internal) — the boundary between the C side of the CUDA
 * backend (the .c files of lib/ops/cuda: op-table kernels, cuBLASLt, error handling) and
 * the device code (the .cu files). It uses only plain C types, so the .cu
 * files never include loom's internal headers (tensor_internal.h uses C11
 * atomics that C++ cannot parse). Every launcher returns the cudaError_t of
 * the launch (cudaGetLastError), which the C caller turns into a loom error
 * naming the launcher, file and line. Nothing here synchronizes. */
#ifndef LOOM_OPS_CUDA_LAUNCH_H
#define LOOM_OPS_CUDA_LAUNCH_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_CU_MAX_DIMS 8

/* dtype codes are loom_dtype's values (F32 0, F16 1, BF16 2, I32 3, I64 4, U8 5). */

/* Strided N-d iteration space: an output shape and, for up to 3 operands
 * (0 = output), element strides (0 on broadcast dims). The C side coalesces
 * dims first, so the common case is ndim 1 with unit strides. */
typedef struct loom_cu_iter {
  int ndim;
  int64_t numel;
  int64_t shape[LOOM_CU_MAX_DIMS];
  int64_t strides[3][LOOM_CU_MAX_DIMS];
} loom_cu_iter;

/* out = ew_binary(op, a, b) (elementwise_math.h codes); all of dtype dt (float). */
cudaError_t loom_cu_binary(int ew_op, int dt, const loom_cu_iter *it, void *out, const void *a, const void *b,
                           cudaStream_t s);
/* out = ew_unary(op, a, scalar). */
cudaError_t loom_cu_unary(int ew_op, int dt, float scalar, const loom_cu_iter *it, void *out, const void *a,
                          cudaStream_t s);
/* out (dtype odt) = convert(a (dtype idt)), strided, any dtype pair. */
cudaError_t loom_cu_copy(int odt, int idt, const loom_cu_iter *it, void *out, const void *a, cudaStream_t s);

/* Reductions over a 2-D view x[r * rs + j * js] (r < rows, j < len) of a
 * float dtype: out[r] (contiguous, dtype odt) = sum (double accumulator) or
 * max (NaN propagates) over j. kind: 0 sum, 1 max. */
cudaError_t loom_cu_reduce2d(int kind, int idt, const void *x, int64_t rows, int64_t len, int64_t rs, int64_t js,
                             int odt, void *out, void *scratch, cudaStream_t s);
/* Scratch bytes loom_cu_reduce2d wants for this shape (0: none). Few long
 * rows are split across the GPU in two passes; with scratch NULL it runs
 * single-pass anyway (slower, same result up to summation order). */
size_t loom_cu_reduce2d_scratch(int64_t rows, int64_t len, int64_t rs, int64_t js);
/* out[r] (i64) = first index of the max over j (a NaN counts as the max). */
cudaError_t loom_cu_argmax2d(int idt, const void *x, int64_t rows, int64_t len, int64_t rs, int64_t js,
                             int64_t *out, cudaStream_t s);

/* Row-wise (contiguous rows of C) log-softmax, computed in f32. */
cudaError_t loom_cu_log_softmax(int dt, const void *x, void *y, int64_t rows, int64_t C, cudaStream_t s);
/* dx = dy - exp(y) * sum(dy) per row. */
cudaError_t loom_cu_log_softmax_bw(int dt, const void *dy, const void *y, void *dx, int64_t rows, int64_t C,
                                   cudaStream_t s);
/* The mapped host record of device/deferred.c (same layout as
 * loom_deferred_error). */
typedef struct loom_cu_deferred_error {
  volatile unsigned long long row;
  volatile long long label;
  volatile long long classes;
  volatile long long op;  /* LOOM_DEFERRED_* of device_internal.h */
} loom_cu_deferred_error;

/* Mean cross-entropy of x [N, C] (contiguous) against labels (dtype ldt,
 * stride lstride). row_loss: N floats of scratch. *bad holds ~0ull between
 * launches; a label outside [0, C) makes its row's loss NaN, and the
 * smallest such row (with its label and C) is published to *rec unless
 * *rec already holds an unreported one. Nothing waits for it. */
cudaError_t loom_cu_cross_entropy(int dt, const void *x, int ldt, const void *labels, int64_t lstride, int64_t N,
                                  int64_t C, float *row_loss, float *out, unsigned long long *bad,
                                  loom_cu_deferred_error *rec, cudaStream_t s);
/* dx = (softmax(x) - onehot(label)) * (*gy) / N. */
cudaError_t loom_cu_cross_entropy_bw(int dt, const float *gy, const void *x, int ldt, const void *labels,
                                     int64_t lstride, int64_t N, int64_t C, void *dx, cudaStream_t s);

/* Philox fills identical to loom_rng_fill_uniform / _normal (core/philox.h),
 * rounded to dtype dt: uniform in [lo, hi] (a = lo, b = hi) or normal
 * (a = mean, b = std). */
cudaError_t loom_cu_rng_fill(int normal, uint64_t seed, uint64_t offset, void *out, int dt, int64_t n, float a,
                             float b, cudaStream_t s);

/* n host bytes to device memory through kernel arguments (write_bytes.cu):
 * the capture-safe form of a small upload. */
cudaError_t loom_cu_write_bytes(void *dst, const void *src, size_t n, cudaStream_t s);

/* ---- CNN ops (batch_norm.cu, pool.cu, dropout.cu, add_relu.cu) ------------
 * Tensors are dense in one of two layouts: NCHW (contiguous) or NHWC
 * (channels-last); the C side (cnn_cuda.c) says which. */

/* Batch norm over x seen as [outer, C, inner] (inner == 1: channels
 * innermost, e.g. NHWC). Statistics are shifted sums per channel, reduced
 * by `splits` blocks per channel into `partial` (splits * 2 * C doubles,
 * combined in a fixed order: deterministic), then one thread per channel
 * finishes them. */
typedef struct loom_cu_bn {
  int dt;                        /* dtype of x, y, gy, dx */
  int64_t outer, C, inner;
  const void *x;
  void *y;                       /* forward result */
  const void *gy;                /* backward: incoming gradient (x's layout) */
  void *dx;                      /* backward: NULL when not needed */
  const void *w, *b;             /* [C] or NULL (1 / 0) */
  int wdt, bdt;
  float *stats;                  /* [2, C]: mean, invstd (forward writes, backward reads) */
  float *rmean, *rvar;           /* forward, training: updated in place, or NULL */
  void *dw, *db;                 /* backward results or NULL */
  int dwdt, dbdt;
  double momentum, eps;
  int relu, training;
  double *partial;               /* scratch: splits * 2 * C doubles */
  int splits;
  float *coef;                   /* scratch: 5 * C floats */
} loom_cu_bn;
int loom_cu_bn_splits(int64_t outer, int64_t C, int64_t inner);
cudaError_t loom_cu_bn_forward(const loom_cu_bn *p, cudaStream_t s);
cudaError_t loom_cu_bn_backward(const loom_cu_bn *p, cudaStream_t s);

/* Pooling over [N, C, H, W] -> [N, C, OH, OW]; windows from cnn_math.h. */
typedef struct loom_cu_pool {
  int dt, nhwc, adaptive, cip;
  int64_t N, C, H, W, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw;
} loom_cu_pool;
/* One thread per output: y and (max) the argmax, i32, h * W + w. */
cudaError_t loom_cu_max_pool_fwd(const loom_cu_pool *p, const void *x, void *y, int32_t *idx, cudaStream_t s);
cudaError_t loom_cu_avg_pool_fwd(const loom_cu_pool *p, const void *x, void *y, cudaStream_t s);
/* One thread per input element, gathering from the outputs whose windows
 * hold it (no atomics, the CPU's accumulation order). */
cudaError_t loom_cu_max_pool_bwd(const loom_cu_pool *p, const void *gy, const int32_t *idx, void *dx, cudaStream_t s);
cudaError_t loom_cu_avg_pool_bwd(const loom_cu_pool *p, const void *gy, void *dx, cudaStream_t s);

/* Dropout over n elements in memory order; mask: ceil(n/32) words. */
cudaError_t loom_cu_dropout_fwd(int dt, const void *x, void *y, uint32_t *mask, int64_t n, uint64_t seed,
                                uint64_t offset, double p, cudaStream_t s);
cudaError_t loom_cu_dropout_bwd(int dt, const void *gy, const uint32_t *mask, void *dx, int64_t n, double p,
                                cudaStream_t s);

/* The convolution's GEMM path (conv_gemm.cu, conv_gemm_cuda.c), f32 only.
 * x/dx is [N, C, H, W] at element strides xs (NCHW or NHWC); one group grp
 * of Cg channels; images [n0, n0 + nimg). The column matrix of an image is
 * [OH * OW, Cg * KH * KW], row (oh, ow), column (c, kh, kw) — the order of a
 * contiguous weight's [Cg, KH, KW] — images one after another. */
typedef struct loom_cu_conv_geom {
  int64_t N, C, H, W, Cg, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t xs[4];
} loom_cu_conv_geom;
/* cols <- the columns of x (zeros where the window is in the padding). */
cudaError_t loom_cu_conv_im2col(const float *x, const loom_cu_conv_geom *g, int64_t n0, int64_t nimg, int64_t grp,
                                float *cols, cudaStream_t s);
/* dx (group grp's channels of images n0..) <- the sum, over the columns
 * that read each element, of dcols: one thread per element gathering in a
 * fixed order (no atomics: deterministic). Every such element is written. */
cudaError_t loom_cu_conv_col2im(const float *dcols, const loom_cu_conv_geom *g, int64_t n0, int64_t nimg, int64_t grp,
                                float *dx, cudaStream_t s);

/* y = relu(a + b) and d = gy * (y > 0) (into d0 and, if not NULL, d1), n
 * elements in memory order. */
cudaError_t loom_cu_add_relu_fwd(int dt, const void *a, const void *b, void *y, int64_t n, cudaStream_t s);
cudaError_t loom_cu_add_relu_bwd(int dt, const void *gy, const void *y, void *d0, void *d1, int64_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
