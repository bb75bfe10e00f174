/* attention_cuda.c — the op-table entries of fused attention on CUDA
 * (ATTENTION, ATTENTION_BACKWARD): they read the geometry from the tensors
 * (dense, checked by the shape rule), refuse head dims the kernels do not
 * take, and launch loom's own kernels (attention.cu) on the device's
 * compute stream. No scratch memory: beyond its inputs and outputs the op
 * keeps O(T) per head (lse, and backward's stats). cuDNN's fused attention
 * is not used (yet).
 *
 f16 and bf16 take the chunked path (attention_chunked.cu): batched
 * cuBLASLt GEMMs over chunks of query rows with row kernels between them, so
 * the products run on tensor cores. On the H200 (2026-11-28) it took GPT-2
 * 124M bf16 from 92,918 to 143,008 tokens/s, and bf16 attention forward +
 * backward at 4 x 12 x 1024 x 64 from 2.43 to 1.08 ms. f32 stays on the fused
 * kernels (TF32 is opt-in). LOOM_CUDA_ATTENTION=fused or =chunked forces one
 * path for every dtype (tests, benchmarks). The chunked scratch is [heads per group, rows per chunk, T] (S in f32,
 * P in the dtype, at most CHUNK_BUDGET bytes unless one head's chunk is
 * larger), plus f32 sums of dk, dv for 16-bit dtypes. */
#ifdef LOOM_HAVE_CUDA
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "ops/cuda/attention_chunked.h"
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

/* ---- the chunked path ---------------------------------------------------------------- */

#define CHUNK_ROWS 128                      /* query rows per chunk */
#define CHUNK_BUDGET ((int64_t)256 << 20)   /* bytes of S + P per head group */

static bool chunked_wanted(int dt) {
  const char *e = getenv("LOOM_CUDA_ATTENTION");
  if (e && !strcmp(e, "chunked")) return true;
  if (e && !strcmp(e, "fused")) return false;
  return dt != (int)LOOM_F32;
}

static int lt_gemm(void *ctx, const loom_attn_gemm *g) {
  loom_lt_gemm l = {.dt = (loom_dtype)g->dt, .trans_a = g->ta, .trans_b = g->tb, .M = g->M, .N = g->N, .K = g->K,
                    .A = g->A, .lda = g->lda, .sa = g->sa, .B = g->B, .ldb = g->ldb, .sb = g->sb,
                    .C = g->C, .ldc = g->ldc, .sc = g->sc, .batch = g->batch,
                    .epilogue = CUBLASLT_EPILOGUE_DEFAULT, .beta = g->beta, .c_f32 = g->c_f32 != 0};
  return loom_lt_gemm_run((loom_cuda_ctx *)ctx, &l) == LOOM_OK ? 0 : 1;
}

static loom_status chunked(loom_cuda_ctx *c, const loom_cu_attn *p, bool bw) {
  loom_attn_chunks ch = {.gemm = lt_gemm, .ctx = c};
  ch.tq = p->T < CHUNK_ROWS ? p->T : CHUNK_ROWS;
  int64_t per_head = loom_attn_chunk_bytes(p->dt, ch.tq, 1, p->T);
  ch.hb = per_head > 0 ? CHUNK_BUDGET / per_head : p->bh;
  if (ch.hb < 1) ch.hb = 1;
  if (ch.hb > p->bh) ch.hb = p->bh;
  void *S = NULL, *P = NULL, *dkf = NULL, *dvf = NULL;
  size_t block = (size_t)(ch.hb * ch.tq * p->T), all = (size_t)(p->bh * p->T * p->D) * sizeof(float);
  loom_status st = loom_alloc_malloc(c->dev, block * sizeof(float), NULL, &S);
  if (st == LOOM_OK) st = loom_alloc_malloc(c->dev, block * loom_dtype_size((loom_dtype)p->dt), NULL, &P);
  if (st == LOOM_OK && bw && p->dt != 0 && p->dk) st = loom_alloc_malloc(c->dev, all, NULL, &dkf);
  if (st == LOOM_OK && bw && p->dt != 0 && p->dv) st = loom_alloc_malloc(c->dev, all, NULL, &dvf);
  if (st == LOOM_OK) {
    ch.S = S, ch.P = P, ch.dkf = dkf, ch.dvf = dvf;
    int rc = bw ? loom_cu_attention_chunked_bwd(p, &ch, c->stream) : loom_cu_attention_chunked_fwd(p, &ch, c->stream);
    if (rc == 1) st = loom_last_status();
    else if (rc == 2) st = loom_cuda_error(ch.err, bw ? "attention backward (chunked)" : "attention (chunked)", __FILE__, __LINE__);
  }
  loom_alloc_free(c->dev, S);
  loom_alloc_free(c->dev, P);
  loom_alloc_free(c->dev, dkf);
  loom_alloc_free(c->dev, dvf);
  return st;
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
  if (chunked_wanted(p.dt)) return chunked(c, &p, false);
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
  if (chunked_wanted(p.dt)) return chunked(c, &p, true);
  LOOM_LAUNCH_CHECK(loom_cu_attention_bwd(&p, c->stream));
  return LOOM_OK;
}

#endif
