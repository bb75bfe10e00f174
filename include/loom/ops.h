/* ops.h — tensor operations: creation that fills memory, views, copies and
 * casts, arithmetic, reductions, linear algebra, CNN ops and losses. Compute
 * ops go through the op table (lib/ops), run on the device of their inputs,
 * and are recorded for autograd when an input requires grad (and grad mode
 * is on); so are views, whose results share their input's storage.
 *
 * All inputs must be on the same device; binary ops broadcast NumPy-style
 * and need equal dtypes. Results follow the ownership rule of tensor.h.
 * Failures return NULL with loom_last_error() set; NULL inputs propagate. */
#ifndef LOOM_OPS_H
#define LOOM_OPS_H

#include "tensor.h"

LOOM_EXTERN_C_BEGIN

/* ---- creation ----------------------------------------------------------- */
LOOM_API loom_tensor *loom_zeros(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev);
LOOM_API loom_tensor *loom_ones(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev);
LOOM_API loom_tensor *loom_full(int ndim, const int64_t *shape, double value, loom_dtype dt, loom_device dev);
/* Copy host data (laid out row-major, of dtype dt) into a new tensor. */
LOOM_API loom_tensor *loom_from_host(const void *data, int ndim, const int64_t *shape,
                                     loom_dtype dt, loom_device dev);
/* [start, start+step, ...) up to end (exclusive). */
LOOM_API loom_tensor *loom_arange(double start, double end, double step, loom_dtype dt, loom_device dev);
/* U(0,1) / N(0,1) from the global generator (see rng.h). Float dtypes. */
LOOM_API loom_tensor *loom_rand(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev);
LOOM_API loom_tensor *loom_randn(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev);
/* Same-shaped companion (loom_empty_like: tensor.h). */
LOOM_API loom_tensor *loom_zeros_like(const loom_tensor *t);

/* ---- views (share storage) ---------------------------------------------- */
/* One dim of new_shape may be -1. Needs a viewable layout (else use reshape). */
LOOM_API loom_tensor *loom_view(loom_tensor *t, int ndim, const int64_t *shape);
/* View when possible, else a contiguous copy. */
LOOM_API loom_tensor *loom_reshape(loom_tensor *t, int ndim, const int64_t *shape);
LOOM_API loom_tensor *loom_transpose(loom_tensor *t, int dim0, int dim1);
LOOM_API loom_tensor *loom_permute(loom_tensor *t, const int *dims);
/* Elements start, start+step, ... < end along dim (step >= 1). */
LOOM_API loom_tensor *loom_slice(loom_tensor *t, int dim, int64_t start, int64_t end, int64_t step);
/* Broadcast view of t to shape (NumPy rules; no copy: broadcast dims get
 * stride 0, so write to the result only through ops, not in place). */
LOOM_API loom_tensor *loom_expand(loom_tensor *t, int ndim, const int64_t *shape);
/* t itself (retained) when contiguous, else a contiguous copy. */
LOOM_API loom_tensor *loom_contiguous(loom_tensor *t);
/* A view that shares storage but is cut off from autograd. */
LOOM_API loom_tensor *loom_detach(loom_tensor *t);

/* ---- copies and casts --------------------------------------------------- */
LOOM_API loom_tensor *loom_to_device(loom_tensor *t, loom_device dev);
LOOM_API loom_tensor *loom_cast(loom_tensor *t, loom_dtype dt);
LOOM_API loom_tensor *loom_clone(loom_tensor *t);
/* dst <- src elementwise (same shape; dtype and device may differ). */
LOOM_API loom_status loom_copy_(loom_tensor *dst, loom_tensor *src);
LOOM_API loom_status loom_fill_(loom_tensor *t, double value);
/* The n tensors (same dtype and rank, equal sizes except in dim) joined
 * along dim into a new contiguous tensor; differentiable. */
LOOM_API loom_tensor *loom_cat(int n, loom_tensor *const *tensors, int dim);
/* Copy out as dtype dt (row-major) into host memory of nbytes. */
LOOM_API loom_status loom_to_host(loom_tensor *t, void *dst, size_t nbytes, loom_dtype dt);
/* The single element as a double (t must have one element). */
LOOM_API loom_status loom_item(loom_tensor *t, double *out);

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

/* ---- convolutional networks ------------------------------------------------ */
/* 4-D image tensors are [N, C, H, W] logically, as in PyTorch. Their memory
 * is either contiguous (NCHW) or channels-last (NHWC: strides
 * [H*W*C, 1, W*C, C]); only the strides differ. Every op below accepts both
 * and returns its result in its input's format, so a model converts once at
 * its input (loom_to_memory_format) and stays in that format. */
typedef enum loom_memory_format {
  LOOM_FORMAT_NCHW = 0,      /* contiguous */
  LOOM_FORMAT_NHWC = 1,      /* channels-last */
  LOOM_FORMAT_STRIDED = 2,   /* neither (a view); ops make it NCHW first */
} loom_memory_format;
/* t itself (retained) when already in format f, else a copy (differentiable). */
LOOM_API loom_tensor *loom_to_memory_format(loom_tensor *t, loom_memory_format f);
LOOM_API loom_memory_format loom_tensor_memory_format(const loom_tensor *t);
/* 4-D with channels-last strides (size-1 dims match any stride). */
LOOM_API bool loom_tensor_is_channels_last(const loom_tensor *t);

typedef struct loom_conv2d_options {
  size_t struct_size;      /* sizeof(loom_conv2d_options) */
  int64_t stride[2];       /* 1, 1 (H, W) */
  int64_t padding[2];      /* 0, 0 (zeros, both sides) */
  int64_t dilation[2];     /* 1, 1 */
  int64_t groups;          /* 1; C_in for depthwise */
  int32_t act;             /* loom_activation: LOOM_ACT_RELU fuses bias + ReLU */
} loom_conv2d_options;
/* Sets struct_size and every default (noted beside each field). */
LOOM_API void loom_conv2d_options_init(loom_conv2d_options *o);
/* x [N, C, H, W], w [O, C/groups, KH, KW], b [O] or NULL -> [N, O, OH, OW]
 * in x's memory format; opt NULL: defaults. */
LOOM_API loom_tensor *loom_conv2d(loom_tensor *x, loom_tensor *w, loom_tensor *b, const loom_conv2d_options *opt);

typedef struct loom_batch_norm_options {
  size_t struct_size;      /* sizeof(loom_batch_norm_options) */
  bool training;           /* true: batch statistics (and running stats updated); false: running stats */
  double momentum;         /* 0.1: running = (1 - momentum) * running + momentum * batch */
  double eps;              /* 1e-5 */
  int32_t act;             /* loom_activation: LOOM_ACT_RELU fuses the ReLU into the apply pass */
} loom_batch_norm_options;
LOOM_API void loom_batch_norm_options_init(loom_batch_norm_options *o);
/* x [N, C, ...] (f32/f16/bf16); running_mean / running_var [C] f32 (updated in
 * place in training, the variance Bessel-corrected as PyTorch does; may be
 * NULL in training); weight / bias [C] f32 or NULL (affine off). Statistics
 * are computed in f32 whatever x's dtype; the result has x's dtype and format.
 * Normalization uses the biased batch variance; training needs more than one
 * value per channel. The running statistics are written in place (their
 * storage version is bumped, so a graph that saved them before refuses to
 * differentiate); the op's own backward never reads them. With act =
 * LOOM_ACT_RELU the result is relu(batch_norm(x)) in one pass, and backward
 * recomputes the ReLU mask from x. Gradients: x, weight, bias. */
LOOM_API loom_tensor *loom_batch_norm(loom_tensor *x, loom_tensor *running_mean, loom_tensor *running_var,
                                      loom_tensor *weight, loom_tensor *bias, const loom_batch_norm_options *opt);

typedef struct loom_pool2d_options {
  size_t struct_size;      /* sizeof(loom_pool2d_options) */
  int64_t kernel[2];       /* (H, W): required, so the init function takes it */
  int64_t stride[2];       /* 0: the kernel size (PyTorch's default) */
  int64_t padding[2];      /* 0; at most half the kernel (implicit -inf for max, zeros for avg) */
  bool ceil_mode;          /* false */
  bool count_include_pad;  /* avg only: true (PyTorch's default) */
} loom_pool2d_options;
LOOM_API void loom_pool2d_options_init(loom_pool2d_options *o, int64_t kernel_h, int64_t kernel_w);
/* x [N, C, H, W] -> [N, C, OH, OW], OH = floor (ceil_mode: ceil) of
 * (H + 2 pad - kernel) / stride + 1 as in PyTorch; a kernel larger than the
 * padded input is an error. opt is required (it holds the kernel size).
 * Max pooling keeps each window's argmax (first on ties, a NaN wins) and
 * backward routes the gradient there. */
LOOM_API loom_tensor *loom_max_pool2d(loom_tensor *x, const loom_pool2d_options *opt);
LOOM_API loom_tensor *loom_avg_pool2d(loom_tensor *x, const loom_pool2d_options *opt);
/* [N, C, H, W] -> [N, C, out_h, out_w] with PyTorch's adaptive windows;
 * (1, 1) is global average pooling. */
LOOM_API loom_tensor *loom_adaptive_avg_pool2d(loom_tensor *x, int64_t out_h, int64_t out_w);

/* Zero each element with probability p and scale the rest by 1/(1-p); the
 * mask comes from the global Philox generator, so a seed gives the same mask
 * on the CPU and on CUDA: element i of x in memory order is kept when
 * element i of loom_rand (same seed and offset) is >= p. Identity (x itself,
 * no random numbers drawn) when !training or p == 0; zeros when p == 1; p
 * outside [0, 1] is an error. Backward reuses the mask (kept as one bit per
 * element). */
LOOM_API loom_tensor *loom_dropout(loom_tensor *x, double p, bool training);
/* Merge dims start_dim..end_dim (negative counts from the end) into one: a
 * view when the strides allow (loom_reshape), a copy otherwise (e.g. an
 * NHWC tensor with H * W > 1); a 0-d tensor becomes [1]. */
LOOM_API loom_tensor *loom_flatten(loom_tensor *x, int start_dim, int end_dim);
/* relu(a + b) in one pass (residual joins); same shapes, or b broadcast
 * (materialized once in a's layout). Result in a's format; backward writes
 * both gradients from the output's mask in one pass. */
LOOM_API loom_tensor *loom_add_relu(loom_tensor *a, loom_tensor *b);

/* ---- transformers ---------------------------------------------------------- */
/* CPU kernels (GELU also on CUDA); on CUDA the others fail with
 * LOOM_ERR_UNSUPPORTED ("not implemented on CUDA yet") for now. Strided
 * inputs are copied to contiguous ones first. */
/* GELU, tanh approximation (GPT-2's; PyTorch's F.gelu(x, approximate="tanh")). */
LOOM_API loom_tensor *loom_gelu(loom_tensor *x);
/* exp(x) / sum(exp(x)) along dim, computed in f32 (stable: max subtracted). */
LOOM_API loom_tensor *loom_softmax(loom_tensor *x, int dim);
/* Rows of weight [V, D] picked by indices [...] (i32, i64 or u8) -> [..., D]
 * (F.embedding). An index outside [0, V) is LOOM_ERR_INVALID_ARG naming it.
 * Backward scatter-adds into weight's gradient (repeated indices add up). */
LOOM_API loom_tensor *loom_embedding(loom_tensor *indices, loom_tensor *weight);
/* LayerNorm over the last dim (F.layer_norm(x, [D], weight, bias, eps)):
 * statistics in f32 whatever x's float dtype (biased variance); weight and
 * bias [D] (any float dtype) or NULL. The mean and 1/sqrt(var + eps) of each
 * row are saved for the fused backward (gradients: x, weight, bias). */
LOOM_API loom_tensor *loom_layer_norm(loom_tensor *x, loom_tensor *weight, loom_tensor *bias, double eps);
/* softmax(q kᵀ / sqrt(D)) v for q, k, v [..., T, D] of one shape and dtype
 * (F.scaled_dot_product_attention; with is_causal, query i attends to keys
 * j <= i). Fused: the [T, T] scores are never stored — tiled online softmax
 * forward, keeping only the logsumexp of each query row ([..., T] f32), and
 * backward recomputes the scores tile by tile. Memory beyond the inputs,
 * output and gradients is O(T) per head. Computed in f32. */
LOOM_API loom_tensor *loom_scaled_dot_product_attention(loom_tensor *q, loom_tensor *k, loom_tensor *v, bool is_causal);
/* cross_entropy(x · weightᵀ, labels) for x [N, E], weight [V, E] (f32 both)
 * and labels [N] (i32, i64 or u8) without holding the [N, V] logits: rows
 * go through in chunks, the logsumexp of each row is kept ([N] f32) and
 * backward recomputes each chunk's logits. A 0-d f32 mean; gradients: x,
 * weight. */
LOOM_API loom_tensor *loom_linear_cross_entropy(loom_tensor *x, loom_tensor *weight, loom_tensor *labels);

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

/* ---- deterministic mode -------------------------------------------------- */
/* Bit-identical results from run to run on the same GPU, library versions
 * and settings (PyTorch's torch.use_deterministic_algorithms). On, the
 * cuDNN convolutions use only engines cuDNN does not mark
 * non-deterministic (CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC: those that sum
 * partial results with atomics, typically in backward-data and
 * backward-filter), and where none is left, loom's own GEMM path; a
 * cached plan chosen in the other mode is not reused. On the GPU it also
 * makes results independent of the autograd graph's shape, so activation
 * checkpointing's recompute gives the plain run's bits: the fused Linear
 * layers then skip the cuBLASLt epilogues whose use depends on the graph
 * (the ReLU mask, DRELU_BGRAD across layers, BGRADB) and take plain GEMMs
 * and loom's own bias-gradient sums. Everything else is
 * deterministic in both modes: loom's CPU kernels and its own CUDA kernels
 * use no floating-point atomics, and cuBLAS/cuBLASLt give the same bits at
 * every run on the same GPU (architecture and SM count) and library
 * version, per NVIDIA's cuBLAS documentation.
 * Off by default (cuDNN may then pick a faster non-deterministic engine).
 * Process-wide; change it between calls. Same as env LOOM_DETERMINISTIC=1
 * (or 0; also on/off, true/false), read at first use; any other value
 * makes every op fail with an error naming it until this call replaces
 * it. */
LOOM_API void loom_set_deterministic(bool on);
LOOM_API bool loom_get_deterministic(void);

/* ---- CPU threading ------------------------------------------------------- */
/* Threads used by CPU kernels (0 = all cores). */
LOOM_API void loom_set_num_threads(int n);
LOOM_API int loom_get_num_threads(void);
/* CPU GEMM: "auto" (loom's AVX2/AVX-512 kernels where the CPU has them, else
 * OpenBLAS when linked), "builtin" or "openblas". Same as env LOOM_CPU_GEMM. */
LOOM_API loom_status loom_set_cpu_gemm(const char *name);
/* What runs now: "openblas", "builtin-avx512", "builtin-avx2", ... */
LOOM_API const char *loom_cpu_gemm_name(void);
/* Instruction set of loom's CPU kernels (built-in GEMM, convolutions, f16
 * conversion): "amxbf16" (avx512bf16 plus AMX-BF16 tiles for the bf16
 * matmul and Linear GEMMs), "avx512bf16" (AVX-512 plus AVX512_BF16: bf16
 * Linear layers and channels-last conv2d use bf16 dot products with f32
 * accumulation instead of widening to f32),
 * "avx512", "avx2", "scalar" (portable C), or "auto" / NULL (the widest this
 * CPU runs: the default). Same as env LOOM_CPU_ISA, read at
 * first use; a bad LOOM_CPU_ISA makes conv2d, matmul and linear on the CPU
 * fail with its error until this call replaces it. An unknown name is
 * LOOM_ERR_INVALID_ARG, one this CPU cannot run LOOM_ERR_UNSUPPORTED; both
 * messages say what the CPU runs, and change nothing. Process-wide; change
 * it between calls. */
LOOM_API loom_status loom_set_cpu_isa(const char *name);
/* What the kernels use now: "amxbf16", "avx512bf16", "avx512", "avx2" or "scalar". */
LOOM_API const char *loom_cpu_isa(void);
/* 3x3 stride-1 padding-1 convolutions on channels-last CPU tensors (groups
 * 1, channel counts multiples of 16 up to 128, AVX2 or wider) in the
 * Winograd domain: tile 4 (the default: F(4x4, 3x3), 4x fewer multiplies
 * than direct convolution, f32 rounding grown to about 73 x 2^-24 of the
 * terms' magnitudes), 2 (F(2x2, 3x3): 2.25x fewer, about 3 x 2^-24) or 0
 * (off: the direct kernels, as on every other geometry). Same as env
 * LOOM_CONV_WINOGRAD, read at first use. Another value is
 * LOOM_ERR_INVALID_ARG and changes nothing. Process-wide; change it between
 * calls. */
LOOM_API loom_status loom_set_cpu_winograd(int tile);
/* The tile in force: 4, 2 or 0 (off). */
LOOM_API int loom_cpu_winograd(void);

LOOM_EXTERN_C_END
#endif
