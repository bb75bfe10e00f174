/* sweep.h — what the op sweep's cases share (tests/test_op_sweep.c runs
 * them): the sweep's dimensions (dtype × layout × shape class × device, one
 * sw_config per run of a case), inputs made in a config's dtype and layout,
 * results checked against a float64 reference with the tolerance the dtype
 * allows, and gradient checks.
 *
 * A case is `void sw_case_x(const sw_config *c)`: it picks its dimensions for
 * c->shape (a table per case, indexed by shape class), makes every float
 * input with sw_input (c's dtype, layout and device), computes the float64
 * reference from the values sw_input returns (rounded to the dtype: the
 * reference is exact for the inputs the kernel sees), checks with
 * sw_expect, and, when the op is differentiable, calls sw_gradcheck. */
#ifndef LOOM_TESTS_OP_SWEEP_SWEEP_H
#define LOOM_TESTS_OP_SWEEP_SWEEP_H

#include "support/testkit.h"

/* ---- the sweep's dimensions ------------------------------------------------ */

/* How an input is laid out in memory (its logical shape never changes):
 *  CONTIGUOUS      a fresh row-major tensor;
 *  SLICED          a view into a larger tensor: a storage offset, and every
 *                  dim padded, so the outer strides are not the dense ones
 *                  (the padding holds NaN, or an invalid label for integer
 *                  inputs: a kernel that reads it is caught);
 *  TRANSPOSED      the last two dims swapped (a transposed view of a dense
 *                  tensor); a 1-D input, which has nothing to swap, is every
 *                  other element of a vector twice as long;
 *  CHANNELS_LAST   4-D inputs with NHWC strides; other inputs contiguous. */
typedef enum sw_layout { SW_CONTIGUOUS, SW_SLICED, SW_TRANSPOSED, SW_CHANNELS_LAST, SW_NLAYOUTS } sw_layout;

/* Shape classes (each case has its own dimensions for each):
 *  SMALL   a few elements per dim, every dim different;
 *  EMPTY   a zero-size dimension (the op returns an empty or a reduced-over-
 *          nothing result, or refuses with a clear error: the case says which);
 *  ONE     every dim 1;
 *  ODD     sizes like 7, 13, 127 (vector tails, blocks that do not divide);
 *  BATCH1  batch (leading) dim 1;
 *  BIG     >= 2^20 elements in an input or the output;
 *  WIDE    >= 2048 channels / features (conv, batch norm, pools, linear). */
typedef enum sw_shape { SW_SMALL, SW_EMPTY, SW_ONE, SW_ODD, SW_BATCH1, SW_BIG, SW_WIDE, SW_NSHAPES } sw_shape;

/* Bit masks of the dimensions, for the case table's declarations. */
#define SW_F32 (1u << 0)
#define SW_F16 (1u << 1)
#define SW_BF16 (1u << 2)
#define SW_FLOATS (SW_F32 | SW_F16 | SW_BF16)
#define SW_LAYOUT(l) (1u << (l))
#define SW_DENSE_LAYOUTS (SW_LAYOUT(SW_CONTIGUOUS) | SW_LAYOUT(SW_SLICED) | SW_LAYOUT(SW_TRANSPOSED))
#define SW_ALL_LAYOUTS (SW_DENSE_LAYOUTS | SW_LAYOUT(SW_CHANNELS_LAST))
#define SW_SHAPE(s) (1u << (s))
/* Every op covers these; WIDE is for the ops with channels / features. */
#define SW_EVERY_SHAPE (SW_SHAPE(SW_SMALL) | SW_SHAPE(SW_EMPTY) | SW_SHAPE(SW_ONE) | SW_SHAPE(SW_ODD) | \
                        SW_SHAPE(SW_BATCH1) | SW_SHAPE(SW_BIG))
#define SW_ALL_SHAPES (SW_EVERY_SHAPE | SW_SHAPE(SW_WIDE))

typedef struct sw_config {
  loom_dtype dtype;
  sw_layout layout;
  sw_shape shape;
  loom_device dev;
  bool refused;     /* the op is declared to refuse this layout: sw_expect checks for the error */
  int grad_coords;  /* coordinates per input a finite-difference check visits (0: sw_gradcheck decides) */
} sw_config;

/* How many inputs sw_input(_vals) made since the driver zeroed it whose
 * strides are not the dense row-major ones (a layout on shapes with size-1
 * dims can leave a view dense: [1, 5] sliced is). */
extern int sw_strided_inputs;

const char *sw_layout_name(sw_layout l);
const char *sw_shape_name(sw_shape s);

/* The op and config under test, "add [f16, sliced, odd, cpu]": every
 * message of the sweep starts with it. Set by the driver. */
extern char sw_ctx[256];

/* ---- inputs ------------------------------------------------------------------ */

/* A random input of logical shape (ndim, shape) in c's dtype, layout and
 * device, values in [lo, hi] with |v| >= away (tk_rand_vals); *vals gets the
 * values (row-major over the logical shape, rounded to the dtype; caller
 * frees). */
loom_tensor *sw_input(const sw_config *c, int ndim, const int64_t *shape, double lo, double hi, double away,
                      double **vals);
/* vals (row-major) as a tensor of dtype dt in c's layout and device. */
loom_tensor *sw_input_vals(const sw_config *c, int ndim, const int64_t *shape, loom_dtype dt, const double *vals);

/* ---- results ---------------------------------------------------------------------- */

/* Tolerances of a result in dtype dt against its float64 reference, when
 * each result element sums `terms` products of inputs of magnitude ~1:
 *  - f32: atol 1e-5 * sqrt(terms) (f32 accumulation error grows like the
 *    square root of the terms for random signs), rtol 2e-6;
 *  - f16 / bf16: the kernels compute in f32 and round the result once to
 *    16 bits, so the reference (float64, from the same rounded inputs) is
 *    off by at most half a unit in the last place of the result: rtol one
 *    whole unit (2^-10 for f16, 2^-7 for bf16: room for one more rounding of
 *    an intermediate), atol the f32 one plus f16's subnormal spacing 2^-24. */
double sw_atol(loom_dtype dt, double terms);
double sw_rtol(loom_dtype dt);

/* t must have shape (ndim, shape), dtype c->dtype and values close to want
 * (sw_atol / sw_rtol of c->dtype). When c->refused and an input is really
 * strided (sw_strided_inputs), t must instead be NULL with an error naming
 * "contiguous": returns false then (the case stops), else true. */
bool sw_expect(const sw_config *c, loom_tensor *t, int ndim, const int64_t *shape, const double *want, double terms,
               const char *what);
/* sw_expect with each element's relative tolerance taken against scale[i]
 * (when larger than the expected value): for results that add terms of
 * larger magnitude which cancel, where a rounding of a term is the error. */
bool sw_expect_scaled(const sw_config *c, loom_tensor *t, int ndim, const int64_t *shape, const double *want,
                      const double *scale, double terms, const char *what);
/* sw_expect for a result of another dtype, with explicit tolerances. */
bool sw_expect_as(const sw_config *c, loom_tensor *t, int ndim, const int64_t *shape, loom_dtype dt,
                  const double *want, double atol, double rtol, const char *what);
/* A call that must fail: NULL result, status st, message naming `frag`. */
void sw_expect_error(loom_tensor *t, loom_status st, const char *frag, const char *what);

/* ---- gradients ----------------------------------------------------------------------- */

/* The gradient of fn with respect to in[k] for each k in grad_mask (made to
 * require grad here):
 *  - f32: against central finite differences of step h, on every element
 *    of contiguous inputs up to 512 elements, else on 8 of them (first,
 *    last, and random ones), or on c->grad_coords when that is set;
 *  - f16 / bf16 (too coarse for finite differences): against the f32
 *    gradient of the same function at the same (exactly widened) inputs,
 *    itself checked by finite differences in the f32 configs: within 8
 *    units of the 16-bit last place of the largest gradient element (a
 *    backward rule chains a few ops, each rounding its result once). */
void sw_gradcheck(const sw_config *c, tk_fn fn, void *ctx, loom_tensor **in, int n, unsigned grad_mask, double h,
                  const char *what);

/* ---- dimensions shared by several cases ---------------------------------------------------- */
/* [N, C, H, W] per shape class, for the elementwise ops, reductions, views,
 * dropout and add_relu (4-D, so channels-last applies to them too). */
extern const int64_t sw_nchw[SW_NSHAPES][4];

/* ---- small helpers ------------------------------------------------------------------------ */
/* float64 log-softmax of v [R, C] along dim (0 or 1) into out (cases_loss.c). */
void sw_ref_log_softmax(const double *v, int64_t R, int64_t C, int dim, double *out);
double *sw_alloc(int64_t n);  /* zeroed, n may be 0; asserts */
int64_t sw_numel(int ndim, const int64_t *shape);

/* ---- the cases (one per op; tests/op_sweep/cases_*.c) ---------------------------------- */
typedef void (*sw_case_fn)(const sw_config *c);

/* cases_elementwise.c */
void sw_case_add(const sw_config *c);
void sw_case_sub(const sw_config *c);
void sw_case_mul(const sw_config *c);
void sw_case_div(const sw_config *c);
void sw_case_add_scalar(const sw_config *c);
void sw_case_mul_scalar(const sw_config *c);
void sw_case_rsub_scalar(const sw_config *c);
void sw_case_rdiv_scalar(const sw_config *c);
void sw_case_pow_scalar(const sw_config *c);
void sw_case_neg(const sw_config *c);
void sw_case_exp(const sw_config *c);
void sw_case_log(const sw_config *c);
void sw_case_sqrt(const sw_config *c);
void sw_case_relu(const sw_config *c);
void sw_case_relu_backward(const sw_config *c);
void sw_case_eq(const sw_config *c);
/* cases_reduce.c */
void sw_case_sum(const sw_config *c);
void sw_case_max(const sw_config *c);
void sw_case_argmax(const sw_config *c);
/* cases_linalg.c */
void sw_case_matmul(const sw_config *c);
void sw_case_linear(const sw_config *c);
void sw_case_linear_backward(const sw_config *c);
/* cases_loss.c */
void sw_case_log_softmax(const sw_config *c);
void sw_case_log_softmax_backward(const sw_config *c);
void sw_case_cross_entropy(const sw_config *c);
void sw_case_cross_entropy_backward(const sw_config *c);
/* cases_views.c */
void sw_case_copy(const sw_config *c);
void sw_case_view_reshape(const sw_config *c);
void sw_case_view_permute(const sw_config *c);
void sw_case_view_slice(const sw_config *c);
void sw_case_view_expand(const sw_config *c);
/* cases_conv_bn.c */
void sw_case_conv2d(const sw_config *c);
void sw_case_conv2d_backward(const sw_config *c);
void sw_case_batch_norm(const sw_config *c);
void sw_case_batch_norm_backward(const sw_config *c);
/* cases_cnn.c */
void sw_case_max_pool2d(const sw_config *c);
void sw_case_max_pool2d_backward(const sw_config *c);
void sw_case_avg_pool2d(const sw_config *c);
void sw_case_adaptive_avg_pool2d(const sw_config *c);
void sw_case_avg_pool2d_backward(const sw_config *c);
void sw_case_dropout(const sw_config *c);
void sw_case_dropout_backward(const sw_config *c);
void sw_case_add_relu(const sw_config *c);
void sw_case_add_relu_backward(const sw_config *c);
/* cases_cat.c */
void sw_case_cat(const sw_config *c);
/* cases_transformer.c */
void sw_case_gelu(const sw_config *c);
void sw_case_gelu_backward(const sw_config *c);
void sw_case_softmax(const sw_config *c);
void sw_case_softmax_backward(const sw_config *c);
void sw_case_embedding(const sw_config *c);
void sw_case_embedding_backward(const sw_config *c);
void sw_case_layer_norm(const sw_config *c);
void sw_case_layer_norm_backward(const sw_config *c);
void sw_case_attention(const sw_config *c);
void sw_case_attention_backward(const sw_config *c);
void sw_case_linear_cross_entropy(const sw_config *c);
void sw_case_linear_cross_entropy_backward(const sw_config *c);

#endif
