/* attention_launch.h (internal) — the launchers of loom's fused attention
 * kernels (attention.cu), called by attention_cuda.c. Plain C types only,
 * like cuda_launch.h. q, k, v, out and the gradients are dense
 * [bh, T, D] of one float dtype; lse is [bh, T] f32; stats is [bh, T, 2]
 * f32 (lse, rowsum(gy * out)). Nothing here synchronizes. */
#ifndef LOOM_OPS_CUDA_ATTENTION_LAUNCH_H
#define LOOM_OPS_CUDA_ATTENTION_LAUNCH_H

#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest head dim the kernels take (head dims are padded up to 32, 64,
 * 128 or 256 inside; 64 and 128 need no padding). */
#define LOOM_CU_ATTN_MAX_D 256

typedef struct loom_cu_attn {
  int dt;                /* loom_dtype of q, k, v, out, gy and the gradients: F32 0, F16 1, BF16 2 */
  int64_t bh, T, D;      /* heads (all leading dims), sequence, head dim (<= LOOM_CU_ATTN_MAX_D) */
  float scale;
  int causal;
  const void *q, *k, *v;
  void *out;             /* forward */
  float *lse;            /* forward: logsumexp of each query row */
  const void *gy;        /* backward: gradient of out */
  const float *stats;    /* backward: (lse, rowsum(gy * out)) per query row */
  void *dq, *dk, *dv;    /* backward: NULL when not wanted */
} loom_cu_attn;

/* Blocks the forward (and the dq pass) launch: bh * ceil(T / rows per
 * block); the caller refuses shapes whose count passes INT32_MAX. */
int64_t loom_cu_attention_blocks(int64_t bh, int64_t T, int64_t D);
cudaError_t loom_cu_attention_fwd(const loom_cu_attn *p, cudaStream_t s);
cudaError_t loom_cu_attention_bwd(const loom_cu_attn *p, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
