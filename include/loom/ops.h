/* ops.h — tensor operations. Each goes through the op table (lib/ops), runs
 * on the device of its inputs, and is recorded for autograd when an input
 * requires grad (and grad mode is on).
 *
 * All inputs must be on the same device; binary ops broadcast NumPy-style
 * and need equal dtypes. Results follow the ownership rule of tensor.h.
 * Failures return NULL with loom_last_error() set; NULL inputs propagate. */
#ifndef LOOM_OPS_H
#define LOOM_OPS_H

#include "tensor.h"

LOOM_EXTERN_C_BEGIN

/* ---- elementwise --------------------------------------------------------- */
LOOM_API loom_tensor *loom_add(loom_tensor *a, loom_tensor *b);
LOOM_API loom_tensor *loom_sub(loom_tensor *a, loom_tensor *b);
LOOM_API loom_tensor *loom_mul(loom_tensor *a, loom_tensor *b);
LOOM_API loom_tensor *loom_div(loom_tensor *a, loom_tensor *b);
LOOM_API loom_tensor *loom_add_scalar(loom_tensor *a, double s);
LOOM_API loom_tensor *loom_mul_scalar(loom_tensor *a, double s);
/* s - a and s / a */
LOOM_API loom_tensor *loom_rsub_scalar(loom_tensor *a, double s);
LOOM_API loom_tensor *loom_rdiv_scalar(loom_tensor *a, double s);
LOOM_API loom_tensor *loom_pow_scalar(loom_tensor *a, double p);
LOOM_API loom_tensor *loom_neg(loom_tensor *a);
LOOM_API loom_tensor *loom_exp(loom_tensor *a);
LOOM_API loom_tensor *loom_log(loom_tensor *a);
LOOM_API loom_tensor *loom_sqrt(loom_tensor *a);
LOOM_API loom_tensor *loom_relu(loom_tensor *a);

/* ---- reductions ---------------------------------------------------------- */
/* Over dims[0..ndims); ndims == 0 reduces everything (a 0-d result). */
LOOM_API loom_tensor *loom_sum(loom_tensor *a, int ndims, const int *dims, bool keepdim);
LOOM_API loom_tensor *loom_mean(loom_tensor *a, int ndims, const int *dims, bool keepdim);
LOOM_API loom_tensor *loom_max(loom_tensor *a, int ndims, const int *dims, bool keepdim);
/* Index of the maximum along dim (first one on ties), as i64. */
LOOM_API loom_tensor *loom_argmax(loom_tensor *a, int dim, bool keepdim);
LOOM_API loom_tensor *loom_sum_all(loom_tensor *a);
LOOM_API loom_tensor *loom_mean_all(loom_tensor *a);

/* ---- linear algebra ------------------------------------------------------ */
/* op(a) @ op(b) where op transposes the last two dims when the flag is set.
 * 2-D x 2-D, or batched: leading dims broadcast. */
LOOM_API loom_tensor *loom_matmul_ex(loom_tensor *a, loom_tensor *b, bool trans_a, bool trans_b);
LOOM_API loom_tensor *loom_matmul(loom_tensor *a, loom_tensor *b);

/* y = act(x · wᵀ + b) with x [N, in], w [out, in], b [out] or NULL.
 * One op forward and backward: the bias and the activation are applied while
 * the GEMM output is hot, and backward computes dReLU, dX, dW and db without
 * extra full-size temporaries. */
typedef enum loom_activation {
  LOOM_ACT_NONE = 0,
  LOOM_ACT_RELU = 1,
} loom_activation;
LOOM_API loom_tensor *loom_linear(loom_tensor *x, loom_tensor *w, loom_tensor *b, loom_activation act);

/* ---- losses and metrics -------------------------------------------------- */
LOOM_API loom_tensor *loom_log_softmax(loom_tensor *logits, int dim);
/* Mean cross-entropy of logits [N, C] (float) against labels [N] (i32/i64/u8),
 * fused and numerically stable, computed in f32; a 0-d f32 result. */
LOOM_API loom_tensor *loom_cross_entropy(loom_tensor *logits, loom_tensor *labels);
/* Fraction of rows whose argmax equals the label, as a double. */
LOOM_API loom_status loom_accuracy(loom_tensor *logits, loom_tensor *labels, double *out);
/* Number of rows whose argmax equals the label. */
LOOM_API loom_status loom_count_correct(loom_tensor *logits, loom_tensor *labels, int64_t *out);

/* ---- GPU matmul precision ------------------------------------------------ */
/* Allow f32 matmul/linear on the GPU to use TF32 tensor cores (10-bit
 * mantissa inputs, f32 accumulation). Off by default: f32 stays f32 unless
 * the user opts in. No effect on the CPU or in builds without CUDA. The
 * setting is process-wide and may be changed between calls from any thread. */
LOOM_API void loom_set_allow_tf32(bool allow);
LOOM_API bool loom_get_allow_tf32(void);

/* ---- CPU threading ------------------------------------------------------- */
/* Threads used by CPU kernels (0 = all cores). */
LOOM_API void loom_set_num_threads(int n);
LOOM_API int loom_get_num_threads(void);
/* CPU GEMM: "auto" (loom's AVX2/AVX-512 kernels where the CPU has them, else
 * OpenBLAS when linked), "builtin" or "openblas". Same as env LOOM_CPU_GEMM. */
LOOM_API loom_status loom_set_cpu_gemm(const char *name);
/* What runs now: "openblas", "builtin-avx512", "builtin-avx2", ... */
LOOM_API const char *loom_cpu_gemm_name(void);

LOOM_EXTERN_C_END
#endif
