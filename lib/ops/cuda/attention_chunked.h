/* attention_chunked.h (internal) — attention on batched GEMMs, a chunk of
 * query rows at a time (attention_chunked.cu), the path that puts cuBLAS's
 * tensor cores under causal attention while keeping memory O(T) per head:
 * per chunk of tq query rows it holds a [tq, T] score block per head, never
 * [T, T]. Plain C types; the GEMMs go through a callback (attention_cuda.c
 * passes cuBLASLt, tests/cuda_emu a CPU loop), so the whole driver runs
 * under the CPU emulator too. */
#ifndef LOOM_OPS_CUDA_ATTENTION_CHUNKED_H
#define LOOM_OPS_CUDA_ATTENTION_CHUNKED_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#include "ops/cuda/attention_launch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Row-major, batched: C[b] = op(A[b]) · op(B[b]) (+ C[b] when beta is 1),
 * b < batch, operand b at base + b * stride (elements). A and B in dt; C
 * in f32 when c_f32 or dt is f32, else in dt. Sums in f32. */
typedef struct loom_attn_gemm {
  int dt;
  int c_f32;
  int ta, tb;
  int64_t M, N, K;
  const void *A; int64_t lda, sa;
  const void *B; int64_t ldb, sb;
  void *C; int64_t ldc, sc;
  int64_t batch;
  float beta;
} loom_attn_gemm;

typedef struct loom_attn_chunks {
  int (*gemm)(void *ctx, const loom_attn_gemm *g); /* 0 when done; else the error is already set */
  void *ctx;
  int64_t tq, hb;    /* query rows per chunk, heads per group */
  float *S;          /* [hb, tq, T] f32: scores, then (backward) dP */
  void *P;           /* [hb, tq, T] dt: probabilities, then (backward) dS */
  float *dkf, *dvf;  /* backward, f16/bf16: [bh, T, D] f32 sums of dk, dv (NULL for f32: dk, dv sum in place) */
  cudaError_t err;   /* the launch error when a call returns 2 */
} loom_attn_chunks;

/* Bytes of S plus P for a chunking (what the caller allocates). */
int64_t loom_attn_chunk_bytes(int dt, int64_t tq, int64_t hb, int64_t T);
/* 0: done; 1: a GEMM failed (its error is set); 2: a launch failed (c->err). */
int loom_cu_attention_chunked_fwd(const loom_cu_attn *p, loom_attn_chunks *c, cudaStream_t s);
int loom_cu_attention_chunked_bwd(const loom_cu_attn *p, loom_attn_chunks *c, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
