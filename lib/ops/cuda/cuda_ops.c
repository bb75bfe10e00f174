/* cuda_ops.c — the op-table entries of the CUDA backend for elementwise
 * ops, copies/casts, reductions, log-softmax and cross-entropy, and the
 * Philox fill (the fused optimizer steps are in optim_cuda.c). Each unpacks the tensors
 * (shapes, strides, dtypes) into plain launch arguments, enqueues the device
 * code of the .cu files on the device's compute stream and turns a failed
 * launch into a loom error naming the launcher, file and line. */
#ifdef LOOM_HAVE_CUDA
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/elementwise_math.h"

/* ---- elementwise --------------------------------------------------------- */

static loom_status ew_binary(loom_op_args *a, int op) {
  loom_tensor *o = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  loom_tensor *ops[3] = {o, a->in[0], a->in[1]};
  loom_cu_iter it;
  loom_cu_iter_build(&it, 3, ops);
  LOOM_LAUNCH_CHECK(loom_cu_binary(op, o->dtype, &it, loom_tensor_ptr(o), loom_tensor_ptr(a->in[0]),
                                   loom_tensor_ptr(a->in[1]), c->stream));
  return LOOM_OK;
}

static loom_status ew_unary(loom_op_args *a, int op) {
  loom_tensor *o = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  loom_tensor *ops[2] = {o, a->in[0]};
  loom_cu_iter it;
  loom_cu_iter_build(&it, 2, ops);
  LOOM_LAUNCH_CHECK(loom_cu_unary(op, o->dtype, (float)a->f[0], &it, loom_tensor_ptr(o), loom_tensor_ptr(a->in[0]),
                                  c->stream));
  return LOOM_OK;
}

#define CUDA_EW(name, kind, code) \
  loom_status name(loom_op_args *a) { return ew_##kind(a, code); }
CUDA_EW(loom_cuda_add, binary, LOOM_EW_ADD)
CUDA_EW(loom_cuda_sub, binary, LOOM_EW_SUB)
CUDA_EW(loom_cuda_mul, binary, LOOM_EW_MUL)
CUDA_EW(loom_cuda_div, binary, LOOM_EW_DIV)
CUDA_EW(loom_cuda_eq, binary, LOOM_EW_EQ)
CUDA_EW(loom_cuda_relu_backward, binary, LOOM_EW_RELU_BW)
CUDA_EW(loom_cuda_add_scalar, unary, LOOM_EW_ADD_S)
CUDA_EW(loom_cuda_mul_scalar, unary, LOOM_EW_MUL_S)
CUDA_EW(loom_cuda_rsub_scalar, unary, LOOM_EW_RSUB_S)
CUDA_EW(loom_cuda_rdiv_scalar, unary, LOOM_EW_RDIV_S)
CUDA_EW(loom_cuda_pow_scalar, unary, LOOM_EW_POW_S)
CUDA_EW(loom_cuda_neg, unary, LOOM_EW_NEG)
CUDA_EW(loom_cuda_exp, unary, LOOM_EW_EXP)
CUDA_EW(loom_cuda_log, unary, LOOM_EW_LOG)
CUDA_EW(loom_cuda_sqrt, unary, LOOM_EW_SQRT)
CUDA_EW(loom_cuda_relu, unary, LOOM_EW_RELU)
CUDA_EW(loom_cuda_gelu, unary, LOOM_EW_GELU)
CUDA_EW(loom_cuda_gelu_backward, binary, LOOM_EW_GELU_BW)

/* Strided copy with dtype conversion; the source may be a broadcast view
 * (stride 0), which is how fill_ works. */
loom_status loom_cuda_copy(loom_op_args *a) {
  loom_tensor *o = a->out[0], *x = a->in[0];
  if (x->storage->device.kind != LOOM_CUDA || o->storage->device.kind != LOOM_CUDA)
    return loom_set_error(LOOM_ERR_DEVICE, "copy: the CUDA copy kernel needs both tensors on the GPU");
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  loom_tensor *ops[2] = {o, x};
  loom_cu_iter it;
  loom_cu_iter_build(&it, 2, ops);
  LOOM_LAUNCH_CHECK(loom_cu_copy(o->dtype, x->dtype, &it, loom_tensor_ptr(o), loom_tensor_ptr(x), c->stream));
  return LOOM_OK;
}

/* ---- reductions ---------------------------------------------------------- */

/* Describe x with the dims in mask reduced as a 2-D view [rows, len] at
 * x[r*rs + j*js] when possible; else gather a contiguous copy with the
 * reduced dims last (*tmp, owned). */
static loom_status reduce_view(loom_tensor *x, unsigned mask, loom_tensor **tmp, const void **base, int64_t *rows,
                               int64_t *len, int64_t *rs, int64_t *js) {
  int64_t kshape[LOOM_MAX_DIMS], kstr[LOOM_MAX_DIMS], rshape[LOOM_MAX_DIMS], rstr[LOOM_MAX_DIMS];
  int nk = 0, nr = 0;
  *rows = 1;
  *len = 1;
  for (int d = 0; d < x->ndim; d++) {
    if (x->shape[d] == 1) continue;
    if (mask >> d & 1) { rshape[nr] = x->shape[d]; rstr[nr++] = x->strides[d]; *len *= x->shape[d]; }
    else { kshape[nk] = x->shape[d]; kstr[nk++] = x->strides[d]; *rows *= x->shape[d]; }
  }
  /* Each group must collapse to a single stride. */
  bool ok = true;
  for (int i = 0; i + 1 < nk; i++) ok = ok && kstr[i] == kstr[i + 1] * kshape[i + 1];
  for (int i = 0; i + 1 < nr; i++) ok = ok && rstr[i] == rstr[i + 1] * rshape[i + 1];
  *tmp = NULL;
  if (ok) {
    *rs = nk ? kstr[nk - 1] : 0;
    *js = nr ? rstr[nr - 1] : 0;
    *base = loom_tensor_ptr(x);
    return LOOM_OK;
  }
  int64_t shape[LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < nk; i++) { shape[n] = kshape[i]; strides[n++] = kstr[i]; }
  for (int i = 0; i < nr; i++) { shape[n] = rshape[i]; strides[n++] = rstr[i]; }
  loom_tensor *view = loom_tensor_new_header(x->storage, x->offset, x->dtype, n, shape, strides);
  if (!view) return loom_last_status();
  *tmp = loom_cuda_contig(view, LOOM_F32);
  loom_tensor_release(view);
  if (!*tmp) return loom_last_status();
  *base = loom_tensor_ptr(*tmp);
  *rs = *len;
  *js = 1;
  return LOOM_OK;
}

static loom_status reduce(loom_op_args *a, int kind) {
  loom_tensor *x = a->in[0], *o = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  loom_tensor *tmp;
  const void *base;
  int64_t rows, len, rs, js;
  LOOM_TRY(reduce_view(x, (unsigned)a->i[0], &tmp, &base, &rows, &len, &rs, &js));
  loom_dtype idt = tmp ? LOOM_F32 : x->dtype;
  /* Partials of a split reduction: from the allocator, back right after the
   * launches (stream-ordered). */
  void *scratch = NULL;
  size_t sb = loom_cu_reduce2d_scratch(rows, len, rs, js);
  if (sb && loom_alloc_malloc(c->dev, sb, NULL, &scratch) != LOOM_OK) {
    loom_tensor_release(tmp);
    return loom_last_status();
  }
  cudaError_t e = loom_cu_reduce2d(kind, idt, base, rows, len, rs, js, o->dtype, loom_tensor_ptr(o), scratch, c->stream);
  loom_alloc_free(c->dev, scratch);
  loom_tensor_release(tmp);
  LOOM_LAUNCH_CHECK(e);
  return LOOM_OK;
}

loom_status loom_cuda_sum(loom_op_args *a) { return reduce(a, 0); }
loom_status loom_cuda_max(loom_op_args *a) { return reduce(a, 1); }

loom_status loom_cuda_argmax(loom_op_args *a) {
  loom_tensor *x = a->in[0], *o = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  loom_tensor *tmp;
  const void *base;
  int64_t rows, len, rs, js;
  LOOM_TRY(reduce_view(x, 1u << a->i[0], &tmp, &base, &rows, &len, &rs, &js));
  loom_dtype idt = tmp ? LOOM_F32 : x->dtype;
  cudaError_t e = loom_cu_argmax2d(idt, base, rows, len, rs, js, loom_tensor_ptr(o), c->stream);
  loom_tensor_release(tmp);
  LOOM_LAUNCH_CHECK(e);
  return LOOM_OK;
}

/* ---- log-softmax and cross-entropy ------------------------------------- */

/* The API hands these kernels contiguous inputs; make sure of it (an empty
 * one is accepted whatever its strides: the kernels read nothing). */
static loom_status need_contig(const char *op, const loom_tensor *t) {
  if (!loom_cuda_dense(t))
    return loom_set_error(LOOM_ERR_INTERNAL, "%s: the CUDA kernel expects a contiguous input", op);
  return LOOM_OK;
}

loom_status loom_cuda_log_softmax(loom_op_args *a) {
  loom_tensor *x = a->in[0], *o = a->out[0];
  LOOM_TRY(need_contig("log_softmax", x));
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  int64_t C = x->shape[x->ndim - 1];
  int64_t rows = C ? loom_shape_numel(x->ndim, x->shape) / C : 0;
  LOOM_LAUNCH_CHECK(loom_cu_log_softmax(x->dtype, loom_tensor_ptr(x), loom_tensor_ptr(o), rows, C, c->stream));
  return LOOM_OK;
}

loom_status loom_cuda_log_softmax_backward(loom_op_args *a) {
  loom_tensor *o = a->out[0], *y = a->in[1];
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  LOOM_TRY(need_contig("log_softmax backward", y));
  loom_tensor *gy = loom_cuda_contig(a->in[0], y->dtype);
  if (!gy) return loom_last_status();
  int64_t C = y->shape[y->ndim - 1];
  int64_t rows = C ? loom_shape_numel(y->ndim, y->shape) / C : 0;
  cudaError_t e = loom_cu_log_softmax_bw(y->dtype, loom_tensor_ptr(gy), loom_tensor_ptr(y), loom_tensor_ptr(o), rows,
                                         C, c->stream);
  loom_tensor_release(gy);
  LOOM_LAUNCH_CHECK(e);
  return LOOM_OK;
}

_Static_assert(sizeof(loom_cu_deferred_error) == sizeof(loom_deferred_error), "one record, two views");

/* Labels outside [0, C) are found by the kernels and reported without a
 * host wait (device/deferred.c): at the next call that waits for the GPU,
 * or here at the next cross_entropy. The CPU reports them at once. */
loom_status loom_cuda_cross_entropy(loom_op_args *a) {
  loom_tensor *x = a->in[0], *labels = a->in[1], *o = a->out[0];
  LOOM_TRY(need_contig("cross_entropy", x));
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  LOOM_TRY(loom_deferred_check(c->dev));
  unsigned long long *bad;
  loom_deferred_error *rec;
  LOOM_TRY(loom_deferred_slots(c->dev, &bad, &rec));
  int64_t N = x->shape[0], C = x->shape[1];
  int64_t one = N > 0 ? N : 1;
  loom_tensor *rows = loom_cuda_scratch(x, 1, &one, LOOM_F32);
  if (!rows) return loom_last_status();
  cudaError_t e = loom_cu_cross_entropy(x->dtype, loom_tensor_ptr(x), labels->dtype, loom_tensor_ptr(labels),
                                        labels->strides[0], N, C, loom_tensor_ptr(rows), loom_tensor_ptr(o), bad,
                                        (loom_cu_deferred_error *)rec, c->stream);
  loom_tensor_release(rows);
  LOOM_LAUNCH_CHECK(e);
  return LOOM_OK;
}

loom_status loom_cuda_cross_entropy_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *x = a->in[1], *labels = a->in[2], *o = a->out[0];
  LOOM_TRY(need_contig("cross_entropy backward", x));
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  loom_tensor *g = loom_cuda_contig(gy, LOOM_F32);
  if (!g) return loom_last_status();
  cudaError_t e = loom_cu_cross_entropy_bw(x->dtype, loom_tensor_ptr(g), loom_tensor_ptr(x), labels->dtype,
                                           loom_tensor_ptr(labels), labels->strides[0], x->shape[0], x->shape[1],
                                           loom_tensor_ptr(o), c->stream);
  loom_tensor_release(g);
  LOOM_LAUNCH_CHECK(e);
  return LOOM_OK;
}

/* ---- Philox fill --------------------------------------------------------- */

loom_status loom_cuda_rng_fill(loom_tensor *t, int normal, uint64_t seed, uint64_t offset, float lo_or_mean,
                               float hi_or_std) {
  if (!loom_cuda_dense(t) || !loom_dtype_is_float(t->dtype))
    return loom_set_error(LOOM_ERR_INTERNAL, "rng fill: needs a contiguous float tensor");
  loom_cuda_ctx *c = loom_cuda_ctx_of(t);
  if (!c) return loom_last_status();
  LOOM_LAUNCH_CHECK(loom_cu_rng_fill(normal, seed, offset, loom_tensor_ptr(t), t->dtype,
                                     loom_shape_numel(t->ndim, t->shape), lo_or_mean, hi_or_std, c->stream));
  return LOOM_OK;
}

#endif
