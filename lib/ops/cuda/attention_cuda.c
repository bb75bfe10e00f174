/* attention_cuda.c — the op-table entries of fused attention on CUDA
 * (ATTENTION, ATTENTION_BACKWARD): they read the geometry from the tensors
 * (dense, checked by the shape rule), refuse head dims the kernels do not
 * take, and launch loom's own kernels (attention.cu) on the device's
 * compute stream. No scratch memory: beyond its inputs and outputs the op
 * keeps O(T) per head (lse, and backward's stats). cuDNN's fused attention
 * is not used (yet): these kernels are the only CUDA path. */
#ifdef LOOM_HAVE_CUDA
#include <limits.h>

#include "ops/cuda/attention_launch.h"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_kernels.h"

/* Geometry and attributes of q ([..., T, D]); errors for what the kernels
 * cannot run. */
static loom_status attn_shape(const char *op, const loom_op_args *a, const loom_tensor *q, loom_cu_attn *p) {
  p->dt = (int)q->dtype;
  p->T = q->shape[q->ndim - 2];
  p->D = q->shape[q->ndim - 1];
  p->bh = loom_shape_numel(q->ndim - 2, q->shape);
  p->scale = (float)a->f[0];
  p->causal = a->i[0] != 0;
  if (p->D > LOOM_CU_ATTN_MAX_D)
    return loom_set_error(LOOM_ERR_UNSUPPORTED,
                          "%s: head dim %lld is above %d, the largest the CUDA kernels take; split the heads or run "
                          "attention on the CPU",
                          op, (long long)p->D, LOOM_CU_ATTN_MAX_D);
  if (loom_cu_attention_blocks(p->bh, p->T, p->D) > INT_MAX)
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "%s: %lld heads of T = %lld need more thread blocks than one launch takes",
                          op, (long long)p->bh, (long long)p->T);
  return LOOM_OK;
}

static const void *cptr(const loom_tensor *t) { return t ? loom_tensor_ptr((loom_tensor *)t) : NULL; }
static void *ptr(loom_tensor *t) { return t ? loom_tensor_ptr(t) : NULL; }

/* in: q, k, v; out: out, lse. */
loom_status loom_cuda_attention(loom_op_args *a) {
  loom_cuda_ctx *c = loom_cuda_ctx_of(a->out[0]);
  if (!c) return loom_last_status();
  loom_cu_attn p = {0};
  LOOM_TRY(attn_shape("attention", a, a->in[0], &p));
  p.q = cptr(a->in[0]);
  p.k = cptr(a->in[1]);
  p.v = cptr(a->in[2]);
  p.out = ptr(a->out[0]);
  p.lse = ptr(a->out[1]);
  LOOM_LAUNCH_CHECK(loom_cu_attention_fwd(&p, c->stream));
  return LOOM_OK;
}

/* in: gy, q, k, v, stats; out: dq, dk, dv (each NULL when not wanted). */
loom_status loom_cuda_attention_backward(loom_op_args *a) {
  loom_tensor *any = a->out[0] ? a->out[0] : a->out[1] ? a->out[1] : a->out[2];
  if (!any) return LOOM_OK;
  loom_cuda_ctx *c = loom_cuda_ctx_of(any);
  if (!c) return loom_last_status();
  loom_cu_attn p = {0};
  LOOM_TRY(attn_shape("attention_backward", a, a->in[1], &p));
  p.gy = cptr(a->in[0]);
  p.q = cptr(a->in[1]);
  p.k = cptr(a->in[2]);
  p.v = cptr(a->in[3]);
  p.stats = cptr(a->in[4]);
  p.dq = ptr(a->out[0]);
  p.dk = ptr(a->out[1]);
  p.dv = ptr(a->out[2]);
  LOOM_LAUNCH_CHECK(loom_cu_attention_bwd(&p, c->stream));
  return LOOM_OK;
}

#endif
