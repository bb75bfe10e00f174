/* optim.cu — the fused multi-tensor optimizer updates on the GPU: one
 * launch updates every parameter of a group. Each block owns one chunk of
 * LOOM_CU_OPT_CHUNK elements of one tensor (found by binary search over the
 * tensors' first chunks), so small and large tensors share one grid. The
 * per-element math is lib/optim/optim_cpu.c's (PyTorch's SGD and AdamW);
 * lowp copies (f16/bf16, for mixed precision) are refreshed in the same pass. */
#include <math.h>
#include "ops/cuda/cuda_launch.h"
#include "core/half.h"

__global__ void k_optim(const loom_cu_opt_tensor *ts, int n, loom_cu_opt_hparams h) {
  const int64_t chunk = blockIdx.x;
  int lo = 0, hi = n - 1;
  while (lo < hi) {  /* last tensor whose first chunk is <= chunk */
    int mid = (lo + hi + 1) / 2;
    if (ts[mid].first_chunk <= chunk) lo = mid;
    else hi = mid - 1;
  }
  const loom_cu_opt_tensor t = ts[lo];
  const int64_t start = (chunk - t.first_chunk) * LOOM_CU_OPT_CHUNK;
  int64_t end = start + LOOM_CU_OPT_CHUNK;
  if (end > t.numel) end = t.numel;
  /* The CPU kernel's expressions in its evaluation order, each product and
   * sum rounded on its own (__fmul_rn/__fadd_rn): nvcc would otherwise
   * contract them into FMAs, and the update would drift from the CPU's by
   * an ulp per step. AdamW multiplies by 1/sqrt(bc2), as the CPU does. */
  const float step_size = h.lr / h.bias_correction1;
  const float inv_bc2_sqrt = 1.0f / sqrtf(h.bias_correction2);
  const float decay = __fsub_rn(1.0f, __fmul_rn(h.lr, h.weight_decay));
  const float damp = 1.0f - h.dampening;
  const float c1 = 1.0f - h.beta1, c2 = 1.0f - h.beta2;
  for (int64_t j = start + threadIdx.x; j < end; j += blockDim.x) {
    float p = t.param[j];
    const float g = t.grad[j];
    if (h.kind == 0) {
      float d = __fadd_rn(g, __fmul_rn(h.weight_decay, p));
      if (t.buf1) {
        float b = h.first_step ? d : __fadd_rn(__fmul_rn(h.momentum, t.buf1[j]), __fmul_rn(damp, d));
        t.buf1[j] = b;
        d = h.nesterov ? __fadd_rn(d, __fmul_rn(h.momentum, b)) : b;
      }
      p = __fsub_rn(p, __fmul_rn(h.lr, d));
    } else {
      const float m = __fadd_rn(__fmul_rn(h.beta1, t.buf1[j]), __fmul_rn(c1, g));
      const float v = __fadd_rn(__fmul_rn(h.beta2, t.buf2[j]), __fmul_rn(__fmul_rn(c2, g), g));
      t.buf1[j] = m;
      t.buf2[j] = v;
      const float denom = __fadd_rn(__fmul_rn(sqrtf(v), inv_bc2_sqrt), h.eps);
      p = __fsub_rn(__fmul_rn(p, decay), __fmul_rn(step_size, m) / denom);
    }
    t.param[j] = p;
    if (t.lowp) t.lowp[j] = h.lowp_bf16 ? loom_bfloat_from_f32(p) : loom_half_from_f32(p);
  }
}

extern "C" cudaError_t loom_cu_optim_step(const loom_cu_opt_tensor *tensors, int n, int64_t total_chunks,
                                          loom_cu_opt_hparams h, cudaStream_t s) {
  if (n == 0 || total_chunks == 0) return cudaSuccess;
  k_optim<<<(unsigned)total_chunks, 256, 0, s>>>(tensors, n, h);
  return cudaGetLastError();
}
