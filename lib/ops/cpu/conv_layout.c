/* conv_layout.c — per-image layout changes shared by the direct
 * convolution kernels (conv_direct.c, conv_depthwise.c): a zero-padded
 * channels-last copy of one image from either format, and NCHW planes to
 * and from pixel rows. Transposes go through 16 x 16 blocks so both sides
 * stay within a few cache lines. */
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/conv_cpu.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Copy one image (NCHW [C][H][W] or NHWC [H][W][C]) into the interior of a
 * zeroed padded channels-last buffer [.][Wp][Cp] at (ph, pw). */
void loom_conv_fill_padded(const float *x, bool nhwc, int64_t C, int64_t H, int64_t W, float *buf, int64_t Wp, int64_t Cp,
                        int64_t ph, int64_t pw) {
  if (nhwc) {
    for (int64_t ih = 0; ih < H; ih++) {
      const float *src = x + ih * W * C;
      float *dst = buf + ((ih + ph) * Wp + pw) * Cp;
      if (Cp == C) memcpy(dst, src, (size_t)(W * C) * sizeof(float));
      else
        for (int64_t iw = 0; iw < W; iw++) memcpy(dst + iw * Cp, src + iw * C, (size_t)C * sizeof(float));
    }
    return;
  }
  /* NCHW: transpose in blocks of 16 channels x 16 pixels so reads and
   * writes both stay within a few cache lines. */
  for (int64_t ih = 0; ih < H; ih++) {
    float *drow = buf + ((ih + ph) * Wp + pw) * Cp;
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
      int64_t cn = min64(16, C - c0);
      for (int64_t w0 = 0; w0 < W; w0 += 16) {
        int64_t wn = min64(16, W - w0);
        for (int64_t c = 0; c < cn; c++) {
          const float *src = x + ((c0 + c) * H + ih) * W + w0;
          float *d = drow + w0 * Cp + c0 + c;
          for (int64_t q = 0; q < wn; q++) d[q * Cp] = src[q];
        }
      }
    }
  }
}

/* dst [C][P] (NCHW planes of one image) = src [P][ld] (first C channels). */
void loom_conv_store_planes(float *dst, const float *src, int64_t P, int64_t C, int64_t ld) {
  for (int64_t p0 = 0; p0 < P; p0 += 16) {
    int64_t pn = min64(16, P - p0);
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
      int64_t cn = min64(16, C - c0);
      for (int64_t c = 0; c < cn; c++) {
        float *d = dst + (c0 + c) * P + p0;
        const float *s = src + p0 * ld + c0 + c;
        for (int64_t q = 0; q < pn; q++) d[q] = s[q * ld];
      }
    }
  }
}

/* dst [P][C] = src [C][P] (one image's NCHW planes to pixel rows). */
void loom_conv_load_planes(float *dst, const float *src, int64_t P, int64_t C) {
  for (int64_t p0 = 0; p0 < P; p0 += 16) {
    int64_t pn = min64(16, P - p0);
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
      int64_t cn = min64(16, C - c0);
      for (int64_t c = 0; c < cn; c++) {
        const float *s = src + (c0 + c) * P + p0;
        float *d = dst + p0 * C + c0 + c;
        for (int64_t q = 0; q < pn; q++) d[q * C] = s[q];
      }
    }
  }
}

float *loom_conv_alloc_f(int64_t n) {
  size_t bytes = (size_t)((n + 15) / 16 * 16) * sizeof(float);
  return aligned_alloc(64, bytes ? bytes : 64);
}

