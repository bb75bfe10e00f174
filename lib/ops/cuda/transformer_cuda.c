/* transformer_cuda.c — the op-table entries of the CUDA backend for
 * softmax, embedding and layer norm (issue 28; the device code is in
 * softmax.cu, embedding.cu and layer_norm.cu, the fused projection +
 * cross-entropy in linear_ce_cuda.c). The shape rules
 * (shape_rules_transformer.c) have already refused strided inputs, so each
 * entry unpacks dense tensors into launch arguments and enqueues the
 * kernels on the device's compute stream. Embedding indices outside the
 * table are found on the GPU and reported through device/deferred.c (at the
 * next call that waits for the GPU, or the next embedding), where the CPU
 * kernel fails at once: the one difference between the two backends. */
#ifdef LOOM_HAVE_CUDA
#include "alloc/alloc.h"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/transformer_launch.h"

static int64_t rows_of(const loom_tensor *t, int64_t last) {
  return last ? loom_shape_numel(t->ndim, t->shape) / last : 0;
}

/* ---- softmax ------------------------------------------------------------- */

loom_status loom_cuda_softmax(loom_op_args *a) {
  loom_tensor *x = a->in[0], *o = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  int64_t C = x->shape[x->ndim - 1];
  LOOM_LAUNCH_CHECK(loom_cu_softmax(x->dtype, loom_tensor_ptr(x), loom_tensor_ptr(o), rows_of(x, C), C, c->stream));
  return LOOM_OK;
}

loom_status loom_cuda_softmax_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *y = a->in[1], *o = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  int64_t C = y->shape[y->ndim - 1];
  LOOM_LAUNCH_CHECK(loom_cu_softmax_bw(y->dtype, loom_tensor_ptr(gy), loom_tensor_ptr(y), loom_tensor_ptr(o),
                                       rows_of(y, C), C, c->stream));
  return LOOM_OK;
}

/* ---- embedding ----------------------------------------------------------- */

/* The GPU sort keys and positions are 32-bit. */
static loom_status fits_int32(const char *op, int64_t n, int64_t V) {
  if (n >= INT32_MAX || V >= INT32_MAX)
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "%s: %lld indices into %lld rows: the CUDA kernel takes fewer than 2^31 of each",
                          op, (long long)n, (long long)V);
  return LOOM_OK;
}

loom_status loom_cuda_embedding(loom_op_args *a) {
  loom_tensor *idx = a->in[0], *w = a->in[1], *o = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  LOOM_TRY(loom_deferred_check(c->dev)); /* a bad index an earlier call found */
  unsigned long long *bad;
  loom_deferred_error *rec;
  LOOM_TRY(loom_deferred_slots(c->dev, &bad, &rec));
  int64_t n = loom_shape_numel(idx->ndim, idx->shape);
  LOOM_LAUNCH_CHECK(loom_cu_embedding_fwd(w->dtype, loom_tensor_ptr(w), w->shape[0], w->shape[1], idx->dtype,
                                          loom_tensor_ptr(idx), n, loom_tensor_ptr(o), bad,
                                          (loom_cu_deferred_error *)rec, c->stream));
  return LOOM_OK;
}

loom_status loom_cuda_embedding_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *idx = a->in[1], *o = a->out[0];
  loom_cuda_ctx *c = loom_cuda_ctx_of(o);
  if (!c) return loom_last_status();
  LOOM_TRY(loom_deferred_check(c->dev));
  int64_t n = loom_shape_numel(idx->ndim, idx->shape), V = o->shape[0], D = o->shape[1];
  LOOM_TRY(fits_int32("embedding backward", n, V));
  unsigned long long *bad;
  loom_deferred_error *rec;
  LOOM_TRY(loom_deferred_slots(c->dev, &bad, &rec));
  /* Sort buffers: from the allocator, back right after the launches (stream-ordered). */
  size_t sb = loom_cu_embedding_bwd_scratch(n, V);
  void *scratch = NULL;
  if (sb) LOOM_TRY(loom_alloc_malloc(c->dev, sb, NULL, &scratch));
  cudaError_t e = loom_cu_embedding_bwd(gy->dtype, loom_tensor_ptr(gy), V, D, idx->dtype, loom_tensor_ptr(idx), n,
                                        loom_tensor_ptr(o), scratch, sb, bad, (loom_cu_deferred_error *)rec, c->stream);
  loom_alloc_free(c->dev, scratch);
  LOOM_LAUNCH_CHECK(e);
  return LOOM_OK;
}

/* ---- layer norm ------------------------------------------------------------ */

loom_status loom_cuda_layer_norm(loom_op_args *a) {
  loom_tensor *x = a->in[0], *w = a->n_in > 1 ? a->in[1] : NULL, *b = a->n_in > 2 ? a->in[2] : NULL;
  loom_cuda_ctx *c = loom_cuda_ctx_of(a->out[0]);
  if (!c) return loom_last_status();
  int64_t D = x->shape[x->ndim - 1];
  loom_cu_ln p = {.dt = x->dtype, .rows = rows_of(x, D), .D = D, .eps = a->f[0], .x = loom_tensor_ptr(x),
                  .y = loom_tensor_ptr(a->out[0]), .w = w ? loom_tensor_ptr(w) : NULL,
                  .b = b ? loom_tensor_ptr(b) : NULL, .wdt = w ? (int)w->dtype : 0, .bdt = b ? (int)b->dtype : 0,
                  .stats = loom_tensor_ptr(a->out[1])};
  LOOM_LAUNCH_CHECK(loom_cu_ln_forward(&p, c->stream));
  return LOOM_OK;
}

loom_status loom_cuda_layer_norm_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *x = a->in[1], *stats = a->in[2], *w = a->n_in > 3 ? a->in[3] : NULL;
  loom_tensor *dx = a->out[0], *dw = a->out[1], *db = a->out[2];
  loom_tensor *any = dx ? dx : dw ? dw : db;
  if (!any) return LOOM_OK;
  loom_cuda_ctx *c = loom_cuda_ctx_of(any);
  if (!c) return loom_last_status();
  int64_t D = x->shape[x->ndim - 1], rows = rows_of(x, D);
  /* The kernels read gy in x's dtype (the CPU widens each separately). */
  loom_tensor *g = loom_cuda_contig(gy, x->dtype);
  if (!g) return loom_last_status();
  loom_cu_ln p = {.dt = x->dtype, .rows = rows, .D = D, .x = loom_tensor_ptr(x), .gy = loom_tensor_ptr(g),
                  .dx = dx ? loom_tensor_ptr(dx) : NULL, .w = w ? loom_tensor_ptr(w) : NULL,
                  .wdt = w ? (int)w->dtype : 0, .stats = loom_tensor_ptr(stats),
                  .dw = dw ? loom_tensor_ptr(dw) : NULL, .db = db ? loom_tensor_ptr(db) : NULL,
                  .dwdt = dw ? (int)dw->dtype : 0, .dbdt = db ? (int)db->dtype : 0};
  void *partial = NULL;
  size_t pb = (dw || db) ? (size_t)loom_cu_ln_partial_floats(rows, D) * sizeof(float) : 0;
  if (pb && loom_alloc_malloc(c->dev, pb, NULL, &partial) != LOOM_OK) {
    loom_tensor_release(g);
    return loom_last_status();
  }
  p.partial = partial;
  cudaError_t e = loom_cu_ln_backward(&p, c->stream);
  loom_alloc_free(c->dev, partial);
  loom_tensor_release(g);
  LOOM_LAUNCH_CHECK(e);
  return LOOM_OK;
}
#endif
