/* cuda_ops.c — the op-table entries of the CUDA backend for elementwise
 * ops, copies/casts, reductions, log-softmax and cross-entropy, the fused
 * multi-tensor optimizer steps and the Philox fill. Each unpacks the tensors
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
#include "optim/optim_kernels.h"

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
  cudaError_t e = loom_cu_reduce2d(kind, idt, base, rows, len, rs, js, o->dtype, loom_tensor_ptr(o), c->stream);
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

/* The API hands these kernels contiguous inputs; make sure of it. */
static loom_status need_contig(const char *op, const loom_tensor *t) {
  if (!loom_tensor_is_contiguous(t))
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

/* The label flag is one word per device: serialize its users. */
static pthread_mutex_t g_flag_lock = PTHREAD_MUTEX_INITIALIZER;

static loom_status ce_forward(loom_cuda_ctx *c, loom_tensor *x, loom_tensor *labels, loom_tensor *o) {
  int64_t N = x->shape[0], C = x->shape[1];
  int64_t one = N > 0 ? N : 1;
  loom_tensor *rows = loom_cuda_scratch(x, 1, &one, LOOM_F32);
  if (!rows) return loom_last_status();
  loom_status st = LOOM_OK;
  cudaError_t e = cudaMemsetAsync(c->flag, 0xff, sizeof *c->flag, c->stream);
  if (e != cudaSuccess) st = loom_cuda_error(e, "cudaMemsetAsync(label flag)", __FILE__, __LINE__);
  if (st == LOOM_OK) {
    e = loom_cu_cross_entropy(x->dtype, loom_tensor_ptr(x), labels->dtype, loom_tensor_ptr(labels), labels->strides[0],
                              N, C, loom_tensor_ptr(rows), loom_tensor_ptr(o), c->flag, c->stream);
    if (e != cudaSuccess) st = loom_cuda_error(e, "loom_cu_cross_entropy", __FILE__, __LINE__);
  }
  if (st == LOOM_OK) {
    e = cudaMemcpyAsync(c->flag_host, c->flag, sizeof *c->flag, cudaMemcpyDeviceToHost, c->stream);
    if (e != cudaSuccess) st = loom_cuda_error(e, "cudaMemcpyAsync(label flag)", __FILE__, __LINE__);
  }
  /* Labels are checked like the CPU does, before anyone uses the loss: this
   * waits for the loss kernels (a few microseconds at MNIST sizes). */
  if (st == LOOM_OK) {
    e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) st = loom_cuda_error(e, "cudaStreamSynchronize(label check)", __FILE__, __LINE__);
  }
  if (st == LOOM_OK && *c->flag_host != ~0ull) {
    int64_t r = (int64_t)*c->flag_host;
    int64_t lab = 0;
    /* Read the offending label for the message. */
    size_t es = loom_dtype_size(labels->dtype);
    unsigned char buf[8] = {0};
    e = cudaMemcpy(buf, (const char *)loom_tensor_ptr(labels) + (size_t)(r * labels->strides[0]) * es, es,
                   cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) {
      if (labels->dtype == LOOM_I32) { int32_t v; memcpy(&v, buf, 4); lab = v; }
      else if (labels->dtype == LOOM_I64) memcpy(&lab, buf, 8);
      else lab = buf[0];
    } else {
      (void)cudaGetLastError();
    }
    st = loom_set_error(LOOM_ERR_INVALID_ARG, "cross_entropy: label %lld at row %lld is outside [0, %lld)",
                        (long long)lab, (long long)r, (long long)C);
  }
  loom_tensor_release(rows);
  return st;
}

loom_status loom_cuda_cross_entropy(loom_op_args *a) {
  loom_tensor *x = a->in[0], *labels = a->in[1], *o = a->out[0];
  LOOM_TRY(need_contig("cross_entropy", x));
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  pthread_mutex_lock(&g_flag_lock);
  loom_status st = ce_forward(c, x, labels, o);
  pthread_mutex_unlock(&g_flag_lock);
  return st;
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
  if (!loom_tensor_is_contiguous(t) || !loom_dtype_is_float(t->dtype))
    return loom_set_error(LOOM_ERR_INTERNAL, "rng fill: needs a contiguous float tensor");
  loom_cuda_ctx *c = loom_cuda_ctx_of(t);
  if (!c) return loom_last_status();
  LOOM_LAUNCH_CHECK(loom_cu_rng_fill(normal, seed, offset, loom_tensor_ptr(t), t->dtype,
                                     loom_shape_numel(t->ndim, t->shape), lo_or_mean, hi_or_std, c->stream));
  return LOOM_OK;
}

/* ---- fused optimizer steps ---------------------------------------------- */

/* Pack the group into a device table and launch once. The table lives in
 * memory from the device allocator, freed right after the launch: the
 * allocator only hands it out again to work ordered after this kernel on
 * the same stream. */
static loom_status optim_step(loom_device dev, const loom_param_group *g, loom_cu_opt_hparams h) {
  if (g->n == 0) return LOOM_OK;
  loom_cuda_ctx *c = loom_cuda_ctx_get(dev);
  if (!c) return loom_last_status();
  loom_cu_opt_tensor *host = malloc((size_t)g->n * sizeof *host);
  if (!host) return loom_set_error(LOOM_ERR_OOM, "optimizer step: out of host memory");
  int64_t chunks = 0;
  int n = 0;
  for (int i = 0; i < g->n; i++) {
    if (g->numel[i] == 0) continue;
    if (h.kind == 1 && (!g->buf1 || !g->buf2 || !g->buf1[i] || !g->buf2[i])) {
      free(host);
      return loom_set_error(LOOM_ERR_INTERNAL, "AdamW step: parameter %d has no state buffers", i);
    }
    host[n].param = g->param[i];
    host[n].grad = g->grad[i];
    host[n].buf1 = g->buf1 ? g->buf1[i] : NULL;
    host[n].buf2 = g->buf2 ? g->buf2[i] : NULL;
    host[n].lowp = g->lowp ? g->lowp[i] : NULL;
    host[n].numel = g->numel[i];
    host[n].first_chunk = chunks;
    chunks += (g->numel[i] + LOOM_CU_OPT_CHUNK - 1) / LOOM_CU_OPT_CHUNK;
    n++;
  }
  loom_status st = LOOM_OK;
  void *dtab = NULL;
  if (n > 0) {
    loom_stream *s = loom_stream_current(dev);
    st = s ? loom_alloc_malloc(dev, (size_t)n * sizeof *host, s, &dtab) : loom_last_status();
    if (st == LOOM_OK) {
      /* From pageable memory: the call returns once the bytes are staged, so
       * the host table may be freed right after. */
      cudaError_t e = cudaMemcpyAsync(dtab, host, (size_t)n * sizeof *host, cudaMemcpyHostToDevice, c->stream);
      if (e != cudaSuccess) st = loom_cuda_error(e, "cudaMemcpyAsync(optimizer table)", __FILE__, __LINE__);
    }
    if (st == LOOM_OK) {
      cudaError_t e = loom_cu_optim_step(dtab, n, chunks, h, c->stream);
      if (e != cudaSuccess) st = loom_cuda_error(e, "loom_cu_optim_step", __FILE__, __LINE__);
    }
    loom_alloc_free(dev, dtab);
  }
  free(host);
  return st;
}

loom_status loom_cuda_sgd_step(loom_device dev, const loom_param_group *g, const loom_sgd_hparams *hp) {
  loom_cu_opt_hparams h = {0};
  h.kind = 0;
  h.lowp_bf16 = g->lowp_dtype == LOOM_BF16;
  h.lr = hp->lr;
  h.momentum = hp->momentum;
  h.dampening = hp->dampening;
  h.weight_decay = hp->weight_decay;
  h.nesterov = hp->nesterov;
  h.first_step = hp->first_step;
  h.bias_correction1 = 1.0f;
  h.bias_correction2 = 1.0f;
  return optim_step(dev, g, h);
}

loom_status loom_cuda_adamw_step(loom_device dev, const loom_param_group *g, const loom_adamw_hparams *hp) {
  loom_cu_opt_hparams h = {0};
  h.kind = 1;
  h.lowp_bf16 = g->lowp_dtype == LOOM_BF16;
  h.lr = hp->lr;
  h.weight_decay = hp->weight_decay;
  h.beta1 = hp->beta1;
  h.beta2 = hp->beta2;
  h.eps = hp->eps;
  h.bias_correction1 = hp->bias_correction1;
  h.bias_correction2 = hp->bias_correction2;
  return optim_step(dev, g, h);
}
#endif
