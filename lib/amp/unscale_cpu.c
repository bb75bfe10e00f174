/* unscale_cpu.c — the CPU kernel of the one-pass unscale + non-finite check
 * over all gradients (the CPU twin of unscale.cu). Each value is widened to
 * f32 exactly (lib/core/half.h, bit-exact with the GPU), multiplied by
 * 1/scale in f32, optionally added to the master gradient, stored, and
 * tested for finiteness in the same loop. */
#include <math.h>
#include <omp.h>

#include "amp/amp_internal.h"
#include "core/half.h"
#include "ops/cpu/cpu_util.h"

#define CHUNK 16384  /* elements per work item: items are split so threads balance */

/* Returns nonzero if a non-finite value was written. */
static int run_chunk(const loom_amp_unscale_item *it, int64_t j0, int64_t j1, float inv) {
  int bad = 0;
  float *d = it->dst;
  if (it->src_dtype == LOOM_F32) {
    const float *s = it->src;
    if (it->accumulate)
      for (int64_t j = j0; j < j1; j++) { float v = d[j] + s[j] * inv; d[j] = v; bad |= !isfinite(v); }
    else
      for (int64_t j = j0; j < j1; j++) { float v = s[j] * inv; d[j] = v; bad |= !isfinite(v); }
  } else {
    /* Widen runs through the CPU kernels' conversion (F16C for f16: exact,
     * like half.h, and vectorized), then the f32 loop. */
    float w[1024];
    const char *src = it->src;
    for (int64_t b = j0; b < j1; b += 1024) {
      const int64_t n = j1 - b < 1024 ? j1 - b : 1024;
      loom_cpu_load_f32(src + (size_t)b * loom_dtype_size(it->src_dtype), it->src_dtype, 1, n, w);
      for (int64_t k = 0; k < n; k++) {
        float v = w[k] * inv;
        if (it->accumulate) v += d[b + k];
        d[b + k] = v;
        bad |= !isfinite(v);
      }
    }
  }
  return bad;
}

loom_status loom_cpu_amp_unscale(const loom_amp_unscale_item *items, int n, float inv_scale, int *found_inf) {
  /* Flatten (item, chunk) pairs into one index space so one parallel loop
   * covers every tensor, big or small. */
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += (items[i].numel + CHUNK - 1) / CHUNK;
  int bad = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : bad) if (total > 1)
  for (int64_t c = 0; c < total; c++) {
    /* Find the item of chunk c (n is small: a linear walk is fine). */
    int64_t k = c;
    int i = 0;
    for (; i < n; i++) {
      int64_t nc = (items[i].numel + CHUNK - 1) / CHUNK;
      if (k < nc) break;
      k -= nc;
    }
    int64_t j0 = k * CHUNK, j1 = j0 + CHUNK < items[i].numel ? j0 + CHUNK : items[i].numel;
    bad |= run_chunk(&items[i], j0, j1, inv_scale);
  }
  if (bad && found_inf) *found_inf = 1;
  return LOOM_OK;
}
