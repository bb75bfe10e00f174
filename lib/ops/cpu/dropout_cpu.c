/* dropout_cpu.c — dropout forward and backward on the CPU. The keep mask is
 * one bit per element in memory order (bit j of 32-bit word w: element
 * 32w + j), drawn from Philox at the (seed, offset) the public function
 * reserved — the same bits the CUDA kernel draws (cnn_math.h). Kept values
 * are scaled by 1/(1-p) in f32; backward applies the same mask and scale. */
#include <omp.h>
#include <string.h>

#include "ops/cnn_math.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"

#define WORDS 32  /* mask words per task: 1024 elements */

static float keep_scale(double p) { return p < 1.0 ? (float)(1.0 / (1.0 - p)) : 0.0f; }

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

/* d = keep ? s * scale : 0 for m elements from their mask words: each word
 * is spread into 32 all-ones / zero lanes, and the select is a vector AND. */
static void masked_scale(const void *src, loom_dtype dt, void *dst, int64_t e0, int64_t m, const uint32_t *bits,
                         float scale) {
  float in[WORDS * 32], out[WORDS * 32];
  int32_t lanes[32];
  const float *s = loom_cpu_span_f32(src, dt, e0, m, in);
  float *d = loom_cpu_out_f32(dst, dt, e0, out);
  v4f sc = {scale, scale, scale, scale};
  for (int64_t w = 0; w * 32 < m; w++) {
    for (int j = 0; j < 32; j++) lanes[j] = -(int32_t)(bits[w] >> j & 1u);
    int64_t j0 = w * 32, n = m - j0 < 32 ? m - j0 : 32, j = 0;
    for (; j + 4 <= n; j += 4) {
      v4f v;
      v4i k;
      memcpy(&v, s + j0 + j, sizeof v);
      memcpy(&k, lanes + j, sizeof k);
      v = (v4f)((v4i)(v * sc) & k);
      memcpy(d + j0 + j, &v, sizeof v);
    }
    for (; j < n; j++) d[j0 + j] = lanes[j] ? s[j0 + j] * scale : 0.0f;
  }
  loom_cpu_out_commit(dst, dt, e0, m, d);
}

/* in: x; out: y, mask. f[0] p; i[0], i[1] seed and offset. */
loom_status loom_cpu_dropout(loom_op_args *a) {
  loom_tensor *x = a->in[0], *y = a->out[0];
  int64_t n = loom_shape_numel(x->ndim, x->shape), nwords = (n + 31) / 32;
  uint32_t *mask = loom_tensor_ptr(a->out[1]);
  double p = a->f[0];
  uint64_t seed = (uint64_t)a->i[0], offset = (uint64_t)a->i[1];
  float scale = keep_scale(p);
  uint32_t thr = loom_dropout_threshold(p);
  int64_t tasks = (nwords + WORDS - 1) / WORDS;
#pragma omp parallel for schedule(static) if (n >= LOOM_CPU_PAR_MIN / 8)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t w0 = t * WORDS, nw = nwords - w0 < WORDS ? nwords - w0 : WORDS;
    for (int64_t w = 0; w < nw; w++) mask[w0 + w] = loom_dropout_word(seed, offset, w0 + w, thr);
    int64_t e0 = w0 * 32, m = n - e0 < nw * 32 ? n - e0 : nw * 32;
    masked_scale(loom_tensor_ptr(x), x->dtype, loom_tensor_ptr(y), e0, m, mask + w0, scale);
  }
  return LOOM_OK;
}

/* in: gy, mask; out: dx. f[0] p. */
loom_status loom_cpu_dropout_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *dx = a->out[0];
  int64_t n = loom_shape_numel(gy->ndim, gy->shape), nwords = (n + 31) / 32;
  const uint32_t *mask = loom_tensor_ptr(a->in[1]);
  float scale = keep_scale(a->f[0]);
  int64_t tasks = (nwords + WORDS - 1) / WORDS;
#pragma omp parallel for schedule(static) if (n >= LOOM_CPU_PAR_MIN)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t w0 = t * WORDS, nw = nwords - w0 < WORDS ? nwords - w0 : WORDS;
    int64_t e0 = w0 * 32, m = n - e0 < nw * 32 ? n - e0 : nw * 32;
    masked_scale(loom_tensor_ptr(gy), gy->dtype, loom_tensor_ptr(dx), e0, m, mask + w0, scale);
  }
  return LOOM_OK;
}
