/* optim_cpu.c — the CPU versions of the fused optimizer updates. The
 * per-element math matches PyTorch's SGD and AdamW. */
#include <math.h>
#include <omp.h>

#include "core/half.h"
#include "core/error.h"
#include "ops/cpu/cpu_util.h"
#include "optim/optim_kernels.h"

#define LOWP_BLOCK 4096

/* Refresh elements [j0, j1) of parameter i's low-precision copy (if any),
 * through the CPU kernels' conversion (F16C for f16 where the instruction
 * set allows: bit-identical to half.h, several times faster). */
static void store_lowp(const loom_param_group *g, int i, int64_t j0, int64_t j1, const float *p) {
  if (!g->lowp || !g->lowp[i]) return;
  loom_cpu_store_f32(g->lowp[i] + j0, g->lowp_dtype, 1, j1 - j0, p + j0);
}

loom_status loom_cpu_sgd_step(const loom_param_group *g, const loom_sgd_hparams *h) {
  const float wd = h->weight_decay, mom = h->momentum, damp = 1.0f - h->dampening, lr = h->lr;
  const int first = h->first_step, nesterov = h->nesterov;
  for (int i = 0; i < g->n; i++) {
    float *restrict p = g->param[i], *restrict m = g->buf1 ? g->buf1[i] : NULL;
    const float *restrict gr = g->grad[i];
    int64_t n = g->numel[i], nb = (n + LOWP_BLOCK - 1) / LOWP_BLOCK;
    /* Blocks: the f32 update vectorizes, then the block's low-precision copy
     * is refreshed while it is still in cache. */
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t blk = 0; blk < nb; blk++) {
      int64_t j0 = blk * LOWP_BLOCK, j1 = j0 + LOWP_BLOCK < n ? j0 + LOWP_BLOCK : n;
      for (int64_t j = j0; j < j1; j++) {
        float d = gr[j] + wd * p[j];
        if (m) {
          float b = first ? d : mom * m[j] + damp * d;
          m[j] = b;
          d = nesterov ? d + mom * b : b;
        }
        p[j] -= lr * d;
      }
      store_lowp(g, i, j0, j1, p);
    }
  }
  return LOOM_OK;
}

loom_status loom_cpu_adamw_step(const loom_param_group *g, const loom_adamw_hparams *h) {
  /* Locals and restrict pointers: the loop must not reload h-> after each
   * store, and must vectorize (with -fno-math-errno for sqrtf). */
  const float step_size = h->lr / h->bias_correction1;
  const float inv_bc2_sqrt = 1.0f / sqrtf(h->bias_correction2);
  const float decay = 1.0f - h->lr * h->weight_decay;
  const float b1 = h->beta1, b2 = h->beta2, c1 = 1.0f - h->beta1, c2 = 1.0f - h->beta2, eps = h->eps;
  for (int i = 0; i < g->n; i++) {
    float *restrict p = g->param[i], *restrict m = g->buf1[i], *restrict v = g->buf2[i];
    const float *restrict gr = g->grad[i];
    int64_t n = g->numel[i], nb = (n + LOWP_BLOCK - 1) / LOWP_BLOCK;
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t blk = 0; blk < nb; blk++) {
      int64_t j0 = blk * LOWP_BLOCK, j1 = j0 + LOWP_BLOCK < n ? j0 + LOWP_BLOCK : n;
      for (int64_t j = j0; j < j1; j++) {
        float gj = gr[j];
        float mj = b1 * m[j] + c1 * gj;
        float vj = b2 * v[j] + c2 * gj * gj;
        m[j] = mj;
        v[j] = vj;
        p[j] = p[j] * decay - step_size * mj / (sqrtf(vj) * inv_bc2_sqrt + eps);
      }
      store_lowp(g, i, j0, j1, p);
    }
  }
  return LOOM_OK;
}
