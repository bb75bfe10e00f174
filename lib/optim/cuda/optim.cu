/* optim.cu — the fused multi-tensor optimizer updates on the GPU: one
 * launch updates every parameter of a group. Each block owns one chunk of
 * LOOM_CU_OPT_CHUNK elements of one tensor (found by binary search over the
 * tensors' first chunks), so small and large tensors share one grid. The
 * per-element math is lib/optim/optim_cpu.c's (PyTorch's SGD and AdamW);
 * lowp copies (f16/bf16, for mixed precision) are refreshed in the same pass.
 * The gradients come by value in the launch (optim_launch.h says why), up
 * to LOOM_CU_OPT_GRADS_PER_LAUNCH tensors a launch.
 *
 * What changes from step to step lives on the device (loom_cu_opt_dev):
 * each parameter's update count, read here to decide SGD's first step and
 * AdamW's bias corrections, and committed by a second tiny kernel; and the
 * loss scaler's skip flag, which both kernels read first; and an attached LR
 * schedule's position, from which the update evaluates its lr (lr_eval.h,
 * the host's formula). So a step never
 * needs the host to know whether the previous one was skipped, and the
 * launches take only fixed addresses (capture-friendly). */
#include <math.h>
#include <string.h>
#include "ops/cuda/cuda_dtype.cuh"
#include "optim/cuda/optim_launch.h"

/* 1 - beta^t for t >= 1: the host's table (the CPU's own expression) or,
 * past it, the same expression in device double arithmetic. */
static __device__ __forceinline__ float bias_correction(const float *tab, int64_t len, double beta, int64_t t) {
  if (t <= len) return tab[t - 1];
  return (float)(1.0 - pow(beta, (double)t));
}

/* The gradients of entries [base, base + n) of the table, by value, and the
 * first chunk of entry base (block 0 of this launch). */
typedef struct opt_grads {
  int base, n;
  int64_t chunk0;
  const float *g[LOOM_CU_OPT_GRADS_PER_LAUNCH];
} opt_grads;

static __global__ void k_optim(const loom_cu_opt_tensor *ts, opt_grads gr, loom_cu_opt_hparams h, loom_cu_opt_dev d) {
  if (d.skip && *d.skip) return;
  const int64_t chunk = gr.chunk0 + (int64_t)blockIdx.x;
  int lo = gr.base, hi = gr.base + gr.n - 1;
  while (lo < hi) {  /* last tensor whose first chunk is <= chunk */
    int mid = (lo + hi + 1) / 2;
    if (ts[mid].first_chunk <= chunk) lo = mid;
    else hi = mid - 1;
  }
  const loom_cu_opt_tensor t = ts[lo];
  const float *grad = gr.g[lo - gr.base];
  const int64_t start = (chunk - t.first_chunk) * LOOM_CU_OPT_CHUNK;
  int64_t end = start + LOOM_CU_OPT_CHUNK;
  if (end > t.numel) end = t.numel;
  /* This parameter's update count before this step (device state). */
  const int64_t prior = d.counts ? d.counts[t.pidx] : 0;
  const int first_step = d.counts ? prior == 0 : h.first_step;
  const float bc1 = d.counts ? bias_correction(d.bc1, d.bc_len, d.beta1, prior + 1) : h.bias_correction1;
  const float bc2 = d.counts ? bias_correction(d.bc2, d.bc_len, d.beta2, prior + 1) : h.bias_correction2;
  /* The CPU kernel's expressions in its evaluation order, each product and
   * sum rounded on its own (__fmul_rn/__fadd_rn): nvcc would otherwise
   * contract them into FMAs, and the update would drift from the CPU's by
   * an ulp per step. AdamW multiplies by 1/sqrt(bc2), as the CPU does. */
  const float lr = d.has_sched ? (float)loom_lr_eval(&d.sched, d.counts[d.n_params + 1]) : h.group_lr[t.group];
  const float wd = h.group_wd[t.group];
  const float step_size = lr / bc1;
  const float inv_bc2_sqrt = 1.0f / sqrtf(bc2);
  const float decay = __fsub_rn(1.0f, __fmul_rn(lr, wd));
  const float damp = 1.0f - h.dampening;
  const float c1 = 1.0f - h.beta1, c2 = 1.0f - h.beta2;
  for (int64_t j = start + threadIdx.x; j < end; j += blockDim.x) {
    float p = t.param[j];
    const float g = grad[j];
    if (h.kind == 0) {
      float dd = __fadd_rn(g, __fmul_rn(wd, p));
      if (t.buf1) {
        float b = first_step ? dd : __fadd_rn(__fmul_rn(h.momentum, t.buf1[j]), __fmul_rn(damp, dd));
        t.buf1[j] = b;
        dd = h.nesterov ? __fadd_rn(dd, __fmul_rn(h.momentum, b)) : b;
      }
      p = __fsub_rn(p, __fmul_rn(lr, dd));
    } else {
      const float m = __fadd_rn(__fmul_rn(h.beta1, t.buf1[j]), __fmul_rn(c1, g));
      const float v = __fadd_rn(__fmul_rn(h.beta2, t.buf2[j]), __fmul_rn(__fmul_rn(c2, g), g));
      t.buf1[j] = m;
      t.buf2[j] = v;
      const float denom = __fadd_rn(__fmul_rn(sqrtf(v), inv_bc2_sqrt), h.eps);
      p = __fsub_rn(__fmul_rn(p, decay), __fmul_rn(step_size, m) / denom);
    }
    t.param[j] = p;
    if (t.lowp) t.lowp[j] = h.lowp_bf16 ? loom_cu_f2bf(p) : loom_cu_f2h(p);
  }
}

/* After the update (same stream): one more update for every listed
 * parameter and for the optimizer, unless the step was skipped. */
static __global__ void k_optim_commit(const loom_cu_opt_tensor *ts, int n, loom_cu_opt_dev d) {
  if (d.has_sched && blockIdx.x == 0 && threadIdx.x == 0) d.counts[d.n_params + 1] += 1;
  if (d.skip && *d.skip) return;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) d.counts[ts[i].pidx] += 1;
  if (blockIdx.x == 0 && threadIdx.x == 0) d.counts[d.n_params] += 1;
}

extern "C" cudaError_t loom_cu_optim_step(const loom_cu_opt_tensor *tensors, const loom_cu_opt_tensor *host_tensors,
                                          const float *const *grads, int n, int64_t total_chunks,
                                          loom_cu_opt_hparams h, loom_cu_opt_dev d, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  /* Every update launch before the commit: the commit moves the counts and
   * the schedule position that the updates read. */
  for (int base = 0; base < n; base += LOOM_CU_OPT_GRADS_PER_LAUNCH) {
    opt_grads gr;
    memset(&gr, 0, sizeof gr);  /* the unused slots too: a captured graph bakes them in */
    gr.base = base;
    gr.n = n - base < LOOM_CU_OPT_GRADS_PER_LAUNCH ? n - base : LOOM_CU_OPT_GRADS_PER_LAUNCH;
    gr.chunk0 = host_tensors[base].first_chunk;
    for (int i = 0; i < gr.n; i++) gr.g[i] = grads[base + i];
    const int64_t end = base + gr.n < n ? host_tensors[base + gr.n].first_chunk : total_chunks;
    if (end > gr.chunk0) {
      k_optim<<<(unsigned)(end - gr.chunk0), 256, 0, s>>>(tensors, gr, h, d);
      cudaError_t e = cudaGetLastError();
      if (e != cudaSuccess) return e;
    }
  }
  if (d.counts) {
    k_optim_commit<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(tensors, n, d);
    return cudaGetLastError();
  }
  return cudaSuccess;
}
