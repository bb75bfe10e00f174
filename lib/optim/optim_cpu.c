/* optim_cpu.c — the CPU versions of the fused optimizer updates. The
 * per-element math matches PyTorch's SGD and AdamW. */
#include <math.h>
#include <omp.h>

#include "core/half.h"
#include "core/error.h"
#include "optim/optim_kernels.h"

#define LOWP_BLOCK 4096

/* Refresh elements [j0, j1) of parameter i's low-precision copy (if any). */
static void store_lowp(const loom_param_group *g, int i, int64_t j0, int64_t j1, const float *p) {
  if (!g->lowp || !g->lowp[i]) return;
  uint16_t *d = g->lowp[i];
  if (g->lowp_dtype == LOOM_BF16)
    for (int64_t j = j0; j < j1; j++) d[j] = loom_bfloat_from_f32(p[j]);
  else
    for (int64_t j = j0; j < j1; j++) d[j] = loom_half_from_f32(p[j]);
}

loom_status loom_cpu_sgd_step(const loom_param_group *g, const loom_sgd_hparams *h) {
  for (int i = 0; i < g->n; i++) {
    float *p = g->param[i], *m = g->buf1 ? g->buf1[i] : NULL;
    const float *gr = g->grad[i];
    int64_t n = g->numel[i], nb = (n + LOWP_BLOCK - 1) / LOWP_BLOCK;
    /* Blocks: the f32 update vectorizes, then the block's low-precision copy
     * is refreshed while it is still in cache. */
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t blk = 0; blk < nb; blk++) {
      int64_t j0 = blk * LOWP_BLOCK, j1 = j0 + LOWP_BLOCK < n ? j0 + LOWP_BLOCK : n;
      for (int64_t j = j0; j < j1; j++) {
        float d = gr[j] + h->weight_decay * p[j];
        if (m) {
          float b = h->first_step ? d : h->momentum * m[j] + (1.0f - h->dampening) * d;
          m[j] = b;
          d = h->nesterov ? d + h->momentum * b : b;
        }
        p[j] -= h->lr * d;
      }
      store_lowp(g, i, j0, j1, p);
    }
  }
  return LOOM_OK;
}

loom_status loom_cpu_adamw_step(const loom_param_group *g, const loom_adamw_hparams *h) {
  const float step_size = h->lr / h->bias_correction1;
  const float bc2_sqrt = sqrtf(h->bias_correction2);
  const float decay = 1.0f - h->lr * h->weight_decay;
  for (int i = 0; i < g->n; i++) {
    float *p = g->param[i], *m = g->buf1[i], *v = g->buf2[i];
    const float *gr = g->grad[i];
    int64_t n = g->numel[i], nb = (n + LOWP_BLOCK - 1) / LOWP_BLOCK;
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t blk = 0; blk < nb; blk++) {
      int64_t j0 = blk * LOWP_BLOCK, j1 = j0 + LOWP_BLOCK < n ? j0 + LOWP_BLOCK : n;
      for (int64_t j = j0; j < j1; j++) {
        float gj = gr[j];
        p[j] *= decay;
        m[j] = h->beta1 * m[j] + (1.0f - h->beta1) * gj;
        v[j] = h->beta2 * v[j] + (1.0f - h->beta2) * gj * gj;
        float denom = sqrtf(v[j]) / bc2_sqrt + h->eps;
        p[j] -= step_size * m[j] / denom;
      }
      store_lowp(g, i, j0, j1, p);
    }
  }
  return LOOM_OK;
}
