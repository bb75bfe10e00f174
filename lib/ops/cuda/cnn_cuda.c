/* cnn_cuda.c — the op-table entries of the CUDA backend for batch norm,
 * pooling, dropout and add_relu: they read the layout (NCHW or NHWC) and
 * geometry from the tensors, take scratch from the device allocator
 * (stream-ordered: freed right after the launch, reused only by later work
 * on the same stream) and launch the device code of batch_norm.cu, pool.cu,
 * dropout.cu and add_relu.cu on the device's compute stream. */
#ifdef LOOM_HAVE_CUDA
#include <string.h>

#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/shape_rules.h"

static int64_t numel(const loom_tensor *t) { return loom_shape_numel(t->ndim, t->shape); }

/* ---- batch norm ---------------------------------------------------------------- */

static void bn_geometry(const loom_tensor *x, loom_cu_bn *p) {
  int64_t n = numel(x);
  p->C = x->shape[1];
  if (loom_cnn_format(x) == LOOM_FORMAT_NHWC) {
    p->inner = 1;
    p->outer = p->C ? n / p->C : 0;
  } else {
    p->outer = x->shape[0];
    p->inner = (p->outer > 0 && p->C > 0) ? n / (p->outer * p->C) : 0;
  }
}

static void bn_affine(loom_cu_bn *p, loom_tensor *w, loom_tensor *b) {
  p->w = w ? loom_tensor_ptr(w) : NULL;
  p->wdt = w ? (int)w->dtype : 0;
  p->b = b ? loom_tensor_ptr(b) : NULL;
  p->bdt = b ? (int)b->dtype : 0;
}

/* The reduction and coefficient scratch of one call. */
static loom_status bn_scratch(loom_tensor *like, loom_cu_bn *p, bool sums, loom_tensor **partial, loom_tensor **coef) {
  int64_t np = (int64_t)p->splits * 2 * (p->C ? p->C : 1), nc = 5 * (p->C ? p->C : 1);
  *partial = sums ? loom_cuda_scratch(like, 1, &np, LOOM_I64) : NULL;  /* 8-byte slots for doubles */
  *coef = loom_cuda_scratch(like, 1, &nc, LOOM_F32);
  if ((sums && !*partial) || !*coef) {
    loom_tensor_release(*partial);
    loom_tensor_release(*coef);
    return loom_last_status();
  }
  p->partial = sums ? loom_tensor_ptr(*partial) : NULL;
  p->coef = loom_tensor_ptr(*coef);
  return LOOM_OK;
}

/* in: x, weight, bias, running_mean, running_var; out: y, stats. */
loom_status loom_cuda_batch_norm(loom_op_args *a) {
  loom_tensor *x = a->in[0], *rm = a->in[3], *rv = a->in[4], *y = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(y);
  if (!c) return loom_last_status();
  loom_cu_bn p;
  memset(&p, 0, sizeof p);
  bn_geometry(x, &p);
  bn_affine(&p, a->in[1], a->in[2]);
  p.dt = x->dtype;
  p.x = loom_tensor_ptr(x);
  p.y = loom_tensor_ptr(y);
  p.stats = loom_tensor_ptr(a->out[1]);
  p.rmean = rm ? loom_tensor_ptr(rm) : NULL;
  p.rvar = rv ? loom_tensor_ptr(rv) : NULL;
  p.momentum = a->f[0];
  p.eps = a->f[1];
  p.training = a->i[0] != 0;
  p.relu = a->i[1] == LOOM_ACT_RELU;
  p.splits = loom_cu_bn_splits(p.outer, p.C, p.inner);
  loom_tensor *partial, *coef;
  LOOM_TRY(bn_scratch(y, &p, p.training, &partial, &coef));
  cudaError_t e = loom_cu_bn_forward(&p, c->stream);
  loom_tensor_release(partial);
  loom_tensor_release(coef);
  LOOM_LAUNCH_CHECK(e);
  return LOOM_OK;
}

/* in: gy, x, weight, bias, stats; out: dx, dweight, dbias (each optional). */
loom_status loom_cuda_batch_norm_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *x = a->in[1], *dx = a->out[0], *dw = a->out[1], *db = a->out[2];
  loom_cuda_ctx *c = loom_cuda_ctx_of(x);
  if (!c) return loom_last_status();
  loom_cu_bn p;
  memset(&p, 0, sizeof p);
  bn_geometry(x, &p);
  bn_affine(&p, a->in[2], a->in[3]);
  p.dt = x->dtype;
  p.x = loom_tensor_ptr(x);
  p.gy = loom_tensor_ptr(gy);
  p.dx = dx ? loom_tensor_ptr(dx) : NULL;
  p.stats = loom_tensor_ptr(a->in[4]);
  p.dw = dw ? loom_tensor_ptr(dw) : NULL;
  p.dwdt = dw ? (int)dw->dtype : 0;
  p.db = db ? loom_tensor_ptr(db) : NULL;
  p.dbdt = db ? (int)db->dtype : 0;
  p.training = a->i[0] != 0;
  p.relu = a->i[1] == LOOM_ACT_RELU;
  p.splits = loom_cu_bn_splits(p.outer, p.C, p.inner);
  loom_tensor *partial, *coef;
  LOOM_TRY(bn_scratch(x, &p, p.training || dw || db, &partial, &coef));
  cudaError_t e = loom_cu_bn_backward(&p, c->stream);
  loom_tensor_release(partial);
  loom_tensor_release(coef);
  LOOM_LAUNCH_CHECK(e);
  return LOOM_OK;
}

/* ---- pooling ------------------------------------------------------------------------ */

/* x: the input-shaped tensor, y: the output-shaped one; format: their layout. */
static loom_cu_pool pool_desc(const loom_op_args *a, const loom_tensor *x, const loom_tensor *y, int format) {
  loom_cu_pool p;
  memset(&p, 0, sizeof p);
  p.dt = x->dtype;
  p.nhwc = format == LOOM_FORMAT_NHWC;
  p.adaptive = (int)a->i[8];
  p.cip = (int)a->i[7];
  p.N = x->shape[0];
  p.C = x->shape[1];
  p.H = x->shape[2];
  p.W = x->shape[3];
  p.OH = y->shape[2];
  p.OW = y->shape[3];
  p.kh = a->i[0];
  p.kw = a->i[1];
  p.sh = a->i[2];
  p.sw = a->i[3];
  p.ph = a->i[4];
  p.pw = a->i[5];
  return p;
}

loom_status loom_cuda_max_pool2d(loom_op_args *a) {
  loom_tensor *x = a->in[0], *y = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(y);
  if (!c) return loom_last_status();
  loom_cu_pool p = pool_desc(a, x, y, loom_cnn_format(x));
  LOOM_LAUNCH_CHECK(loom_cu_max_pool_fwd(&p, loom_tensor_ptr(x), loom_tensor_ptr(y), loom_tensor_ptr(a->out[1]), c->stream));
  return LOOM_OK;
}

loom_status loom_cuda_max_pool2d_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *dx = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(dx);
  if (!c) return loom_last_status();
  loom_cu_pool p = pool_desc(a, dx, gy, (int)a->i[11]);
  LOOM_LAUNCH_CHECK(loom_cu_max_pool_bwd(&p, loom_tensor_ptr(gy), loom_tensor_ptr(a->in[1]), loom_tensor_ptr(dx), c->stream));
  return LOOM_OK;
}

loom_status loom_cuda_avg_pool2d(loom_op_args *a) {
  loom_tensor *x = a->in[0], *y = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(y);
  if (!c) return loom_last_status();
  loom_cu_pool p = pool_desc(a, x, y, loom_cnn_format(x));
  LOOM_LAUNCH_CHECK(loom_cu_avg_pool_fwd(&p, loom_tensor_ptr(x), loom_tensor_ptr(y), c->stream));
  return LOOM_OK;
}

loom_status loom_cuda_avg_pool2d_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *dx = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(dx);
  if (!c) return loom_last_status();
  loom_cu_pool p = pool_desc(a, dx, gy, (int)a->i[11]);
  LOOM_LAUNCH_CHECK(loom_cu_avg_pool_bwd(&p, loom_tensor_ptr(gy), loom_tensor_ptr(dx), c->stream));
  return LOOM_OK;
}

/* ---- dropout and add_relu ------------------------------------------------------------- */

loom_status loom_cuda_dropout(loom_op_args *a) {
  loom_tensor *x = a->in[0], *y = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(y);
  if (!c) return loom_last_status();
  LOOM_LAUNCH_CHECK(loom_cu_dropout_fwd(x->dtype, loom_tensor_ptr(x), loom_tensor_ptr(y), loom_tensor_ptr(a->out[1]),
                                        numel(x), (uint64_t)a->i[0], (uint64_t)a->i[1], a->f[0], c->stream));
  return LOOM_OK;
}

loom_status loom_cuda_dropout_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *dx = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(dx);
  if (!c) return loom_last_status();
  LOOM_LAUNCH_CHECK(loom_cu_dropout_bwd(gy->dtype, loom_tensor_ptr(gy), loom_tensor_ptr(a->in[1]), loom_tensor_ptr(dx),
                                        numel(gy), a->f[0], c->stream));
  return LOOM_OK;
}

loom_status loom_cuda_add_relu(loom_op_args *a) {
  loom_tensor *y = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(y);
  if (!c) return loom_last_status();
  LOOM_LAUNCH_CHECK(loom_cu_add_relu_fwd(y->dtype, loom_tensor_ptr(a->in[0]), loom_tensor_ptr(a->in[1]),
                                         loom_tensor_ptr(y), numel(y), c->stream));
  return LOOM_OK;
}

loom_status loom_cuda_add_relu_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *y = a->in[1];
  loom_tensor *d0 = a->out[0] ? a->out[0] : a->out[1], *d1 = a->out[0] ? a->out[1] : NULL;
  if (!d0) return LOOM_OK;
  loom_cuda_ctx *c = loom_cuda_ctx_of(y);
  if (!c) return loom_last_status();
  LOOM_LAUNCH_CHECK(loom_cu_add_relu_bwd(y->dtype, loom_tensor_ptr(gy), loom_tensor_ptr(y), loom_tensor_ptr(d0),
                                         d1 ? loom_tensor_ptr(d1) : NULL, numel(y), c->stream));
  return LOOM_OK;
}
#endif
