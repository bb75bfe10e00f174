/* optim_cpu.c — the CPU versions of the fused optimizer updates. The
 * per-element math matches PyTorch's SGD and AdamW. Where the CPU kernels'
 * instruction set is avx2 or wider the blocks run in optim_cpu_x86.c
 * (8 lanes, the low-precision copy written in the same pass; the same
 * bits); the loops here are the portable version. */
#include <math.h>
#include <omp.h>

#include "core/half.h"
#include "core/error.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_util.h"
#include "optim/optim_cpu_x86.h"
#include "optim/optim_kernels.h"
#include "amp/unscale_kernels.h"

/* Whether the AVX2 runs apply to group g (the lowp copy's dtype included). */
static bool use_avx2(const loom_param_group *g) {
#if defined(__x86_64__)
  if (loom_cpu_isa_level_now() < LOOM_CPU_ISA_AVX2) return false;
  bool any_lowp = false;
  for (int i = 0; g->lowp && i < g->n; i++) any_lowp |= g->lowp[i] != NULL;
  if (g->grad16 && g->grad16_dtype == LOOM_F16 && !loom_cpu_f16c()) return false;
  return !any_lowp || g->lowp_dtype == LOOM_BF16 || (g->lowp_dtype == LOOM_F16 && loom_cpu_f16c());
#else
  (void)g;
  return false;
#endif
}

#define LOWP_BLOCK 4096

/* Widen elements [j0, j1) of parameter i's deferred 16-bit gradient (if
 * any) into its f32 gradient, which the caller owns and may write (grad is
 * const only to the update). */
static void take_grad16(const loom_param_group *g, int i, int64_t j0, int64_t j1) {
  if (!g->grad16 || !g->grad16[i]) return;
  loom_cpu_amp_widen_grad(g->grad16[i] + j0, g->grad16_dtype, (float *)g->grad[i] + j0, j1 - j0);
}

/* Parameter i's deferred 16-bit gradient from element j0 (NULL: none). */
static inline const uint16_t *grad16_at(const loom_param_group *g, int i, int64_t j0) {
  return g->grad16 && g->grad16[i] ? g->grad16[i] + j0 : NULL;
}

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
  const bool vec = use_avx2(g);
  const loom_sgd_consts k = {wd, mom, damp, lr, first, nesterov};
  (void)k, (void)vec; /* (used on x86-64 only) */
  for (int i = 0; i < g->n; i++) {
    float *restrict p = g->param[i], *restrict m = g->buf1 ? g->buf1[i] : NULL;
    const float *restrict gr = g->grad[i];
    int64_t n = g->numel[i], nb = (n + LOWP_BLOCK - 1) / LOWP_BLOCK;
    /* Blocks: the f32 update vectorizes, then the block's low-precision copy
     * is refreshed while it is still in cache. */
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t blk = 0; blk < nb; blk++) {
      int64_t j0 = blk * LOWP_BLOCK, j1 = j0 + LOWP_BLOCK < n ? j0 + LOWP_BLOCK : n;
#if defined(__x86_64__)
      if (vec) {
        uint16_t *lp = g->lowp && g->lowp[i] ? g->lowp[i] + j0 : NULL;
        loom_sgd_run_avx2(p + j0, m ? m + j0 : NULL, (float *)gr + j0, j1 - j0, &k, lp, g->lowp_dtype == LOOM_F16,
                          grad16_at(g, i, j0), g->grad16_dtype == LOOM_F16);
        continue;
      }
#endif
      take_grad16(g, i, j0, j1);
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
  const bool vec = use_avx2(g);
  const loom_adamw_consts k = {b1, c1, b2, c2, eps, decay, step_size, inv_bc2_sqrt};
  (void)k, (void)vec; /* (used on x86-64 only) */
  for (int i = 0; i < g->n; i++) {
    float *restrict p = g->param[i], *restrict m = g->buf1[i], *restrict v = g->buf2[i];
    const float *restrict gr = g->grad[i];
    int64_t n = g->numel[i], nb = (n + LOWP_BLOCK - 1) / LOWP_BLOCK;
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t blk = 0; blk < nb; blk++) {
      int64_t j0 = blk * LOWP_BLOCK, j1 = j0 + LOWP_BLOCK < n ? j0 + LOWP_BLOCK : n;
#if defined(__x86_64__)
      if (vec) {
        uint16_t *lp = g->lowp && g->lowp[i] ? g->lowp[i] + j0 : NULL;
        loom_adamw_run_avx2(p + j0, m + j0, v + j0, (float *)gr + j0, j1 - j0, &k, lp, g->lowp_dtype == LOOM_F16,
                            grad16_at(g, i, j0), g->grad16_dtype == LOOM_F16);
        continue;
      }
#endif
      take_grad16(g, i, j0, j1);
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
