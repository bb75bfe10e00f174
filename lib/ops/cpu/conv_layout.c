/* conv_layout.c — per-image layout changes shared by the direct
 * convolution kernels (conv_direct.c, conv_depthwise.c): a zero-padded
 * channels-last copy of one image from either format, and NCHW planes to
 * and from pixel rows; for f16/bf16 operands the widening on the way in and
 * the rounding on the way out, one image at a time. The transposes go through 16 x 16 blocks held in
 * AVX-512 registers when the CPU kernels' instruction set is AVX-512
 * (cpu_isa.h); a scalar version covers the others. */
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_util.h"
#include "core/sys.h"

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

float *loom_conv_alloc_f(int64_t n) {
  size_t bytes = (size_t)((n + 15) / 16 * 16) * sizeof(float);
  return loom_sys_aligned_alloc(64, bytes ? bytes : 64);
}

#if defined(__x86_64__)
#include <immintrin.h>

static int has_avx512(void) { return loom_cpu_isa_level_now() >= LOOM_CPU_ISA_AVX512; }

static inline __mmask16 lanes(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u); }

/* r[i][j] -> r[j][i] for a 16 x 16 block of floats. */
__attribute__((target("avx512f"))) static inline void tr16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {
    r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; i++) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xdd);
    t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xdd);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
    r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
    r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xdd);
  }
}

/* A block of rn rows x cn columns: row i at src + i*ss (cn floats, the rest
 * read as 0), written transposed: row j (j < cn) at dst + j*ds, rn floats
 * (or all 16 when full_rows, writing zeros past rn). */
__attribute__((target("avx512f"))) static void block16(const float *src, int64_t ss, int64_t rn, int64_t cn, float *dst,
                                                      int64_t ds, bool full_rows) {
  __m512 r[16];
  const __mmask16 cm = lanes(cn);
  for (int i = 0; i < 16; i++) r[i] = i < rn ? _mm512_maskz_loadu_ps(cm, src + i * ss) : _mm512_setzero_ps();
  tr16(r);
  const __mmask16 rm = full_rows ? (__mmask16)0xFFFF : lanes(rn);
  for (int j = 0; j < cn; j++) _mm512_mask_storeu_ps(dst + j * ds, rm, r[j]);
}

/* NCHW image -> padded channels-last rows: blocks of 16 pixels x 16
 * channels. Channels past C inside the padded pitch are written as 0. */
__attribute__((target("avx512f"))) static void nchw_to_padded(const float *x, int64_t C, int64_t H, int64_t W, float *buf,
                                                             int64_t Wp, int64_t Cp, int64_t ph, int64_t pw) {
  for (int64_t ih = 0; ih < H; ih++) {
    float *drow = buf + ((ih + ph) * Wp + pw) * Cp;
    for (int64_t c0 = 0; c0 < Cp; c0 += 16)
      for (int64_t w0 = 0; w0 < W; w0 += 16)
        /* rows = channels (c0.., stride H*W), columns = pixels (w0..). */
        block16(x + (c0 * H + ih) * W + w0, H * W, min64(16, C - c0), min64(16, W - w0), drow + w0 * Cp + c0, Cp,
                true);
  }
}
#endif

void loom_conv_fill_padded(const float *x, bool nhwc, int64_t C, int64_t H, int64_t W, float *buf, int64_t Wp,
                           int64_t Cp, int64_t ph, int64_t pw) {
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
#if defined(__x86_64__)
  if (has_avx512() && Cp % 16 == 0) {
    nchw_to_padded(x, C, H, W, buf, Wp, Cp, ph, pw);
    return;
  }
#endif
  for (int64_t ih = 0; ih < H; ih++) {
    float *drow = buf + ((ih + ph) * Wp + pw) * Cp;
    for (int64_t c = 0; c < C; c++) {
      const float *src = x + (c * H + ih) * W;
      for (int64_t q = 0; q < W; q++) drow[q * Cp + c] = src[q];
    }
  }
}

void loom_conv_store_planes(float *dst, const float *src, int64_t P, int64_t C, int64_t ld) {
#if defined(__x86_64__)
  if (has_avx512()) {
    /* rows = pixels (stride ld), columns = channels; out: channel rows. */
    for (int64_t p0 = 0; p0 < P; p0 += 16)
      for (int64_t c0 = 0; c0 < C; c0 += 16)
        block16(src + p0 * ld + c0, ld, min64(16, P - p0), min64(16, C - c0), dst + c0 * P + p0, P, false);
    return;
  }
#endif
  for (int64_t c = 0; c < C; c++)
    for (int64_t p = 0; p < P; p++) dst[c * P + p] = src[p * ld + c];
}

void loom_conv_load_planes(float *dst, const float *src, int64_t P, int64_t C) {
#if defined(__x86_64__)
  if (has_avx512()) {
    /* rows = channels (stride P), columns = pixels; out: pixel rows of C. */
    for (int64_t c0 = 0; c0 < C; c0 += 16)
      for (int64_t p0 = 0; p0 < P; p0 += 16)
        block16(src + c0 * P + p0, P, min64(16, C - c0), min64(16, P - p0), dst + p0 * C + c0, C, false);
    return;
  }
#endif
  for (int64_t p = 0; p < P; p++)
    for (int64_t c = 0; c < C; c++) dst[p * C + c] = src[c * P + p];
}

void loom_conv_fill_padded_buf(loom_conv_buf x, int64_t img, bool nhwc, int64_t C, int64_t H, int64_t W, float *buf,
                               int64_t Wp, int64_t Cp, int64_t ph, int64_t pw, float *tmp) {
  const int64_t n = C * H * W;
  if (x.dt == LOOM_F32 || !nhwc) {
    loom_conv_fill_padded(loom_conv_image_f32(x, img, n, tmp), nhwc, C, H, W, buf, Wp, Cp, ph, pw);
    return;
  }
  const size_t es = loom_dtype_size(x.dt);
  const char *src = (const char *)x.p + (size_t)(img * n) * es;
  for (int64_t ih = 0; ih < H; ih++) {
    const char *s = src + (size_t)(ih * W * C) * es;
    float *dst = buf + ((ih + ph) * Wp + pw) * Cp;
    if (Cp == C) loom_cpu_load_f32(s, x.dt, 1, W * C, dst);
    else
      for (int64_t iw = 0; iw < W; iw++) loom_cpu_load_f32(s + (size_t)(iw * C) * es, x.dt, 1, C, dst + iw * Cp);
  }
}

const float *loom_conv_image_f32(loom_conv_buf x, int64_t img, int64_t n, float *tmp) {
  if (x.dt == LOOM_F32) return (const float *)x.p + img * n;
  loom_cpu_load_f32((const char *)x.p + (size_t)(img * n) * loom_dtype_size(x.dt), x.dt, 1, n, tmp);
  return tmp;
}

void loom_conv_store_image(loom_conv_buf y, int64_t img, bool nhwc, int64_t P, int64_t C, const float *rows,
                           float *tmp) {
  const int64_t n = P * C;
  if (y.dt == LOOM_F32) {
    if (!nhwc) loom_conv_store_planes((float *)y.p + img * n, rows, P, C, C);
    return; /* NHWC: written in place */
  }
  if (!nhwc) {
    loom_conv_store_planes(tmp, rows, P, C, C);
    rows = tmp;
  }
  loom_cpu_store_f32((char *)y.p + (size_t)(img * n) * loom_dtype_size(y.dt), y.dt, 1, n, rows);
}
