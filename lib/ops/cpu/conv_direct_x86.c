/* conv_direct_x86.c — AVX-512 instantiations of the direct convolution's
 * micro-kernels (see conv_direct_kern.h for what they compute).
 *
 * Every kernel keeps its whole MR x OVB tile of 16-float accumulators in
 * zmm registers (at most 28 of the 32, leaving room for the OVB weight
 * vectors): per reduction step it loads OVB vectors and issues MR*OVB FMAs
 * whose broadcast operand comes straight from memory. The pixel pitch PS
 * is a template constant (16, 32, 64, 128 floats: padded channel counts
 * 16/32/64 at stride 1 and 2) so each broadcast address is an immediate
 * offset; a runtime-pitch variant covers the rest. The library is compiled
 * for baseline x86-64: each function carries its own target attribute and
 * is only reached after __builtin_cpu_supports("avx512f"). */
#include "ops/cpu/conv_direct_kern.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define U_(x) _Pragma(#x)
#define UNROLL(n) U_(GCC unroll n)

/* ---- pixel-broadcast ------------------------------------------------------- */
#define PB_BODY(MR, OVB, PSX)                                                                  \
  __m512 acc[MR][OVB];                                                                         \
  UNROLL(28) for (int i = 0; i < MR; i++) UNROLL(4) for (int j = 0; j < OVB; j++) acc[i][j] =  \
      _mm512_setzero_ps();                                                                     \
  const int64_t K = a->K, ws = a->ws;                                                          \
  for (int t = 0; t < a->ntaps; t++) {                                                         \
    const float *xp = a->x + a->xoff[t];                                                       \
    const float *wp = a->w[t];                                                                 \
    for (int64_t c = 0; c < K; c++) {                                                          \
      __m512 wv[OVB];                                                                          \
      UNROLL(4) for (int j = 0; j < OVB; j++) wv[j] = _mm512_load_ps(wp + 16 * j);             \
      UNROLL(28) for (int i = 0; i < MR; i++) {                                                \
        const __m512 b = _mm512_set1_ps(xp[i * (PSX)]);                                        \
        UNROLL(4) for (int j = 0; j < OVB; j++) acc[i][j] = _mm512_fmadd_ps(b, wv[j], acc[i][j]); \
      }                                                                                        \
      xp += 1;                                                                                 \
      wp += ws;                                                                                \
    }                                                                                          \
  }                                                                                            \
  __m512 bv[OVB];                                                                              \
  const __mmask16 lm = (__mmask16)a->lastmask;                                                 \
  UNROLL(4) for (int j = 0; j < OVB; j++) bv[j] =                                              \
      a->bias ? _mm512_maskz_loadu_ps(j == OVB - 1 ? lm : (__mmask16)0xFFFF, a->bias + 16 * j) \
              : _mm512_setzero_ps();                                                           \
  const __m512 zero = _mm512_setzero_ps();                                                     \
  UNROLL(28) for (int i = 0; i < MR; i++) {                                                    \
    if (i >= a->mr) break;                                                                     \
    float *yp = a->y + i * a->yps;                                                             \
    UNROLL(4) for (int j = 0; j < OVB; j++) {                                                  \
      __m512 v = _mm512_add_ps(acc[i][j], bv[j]);                                              \
      if (a->relu) v = _mm512_max_ps(v, zero);                                                 \
      if (j == OVB - 1) _mm512_mask_storeu_ps(yp + 16 * j, lm, v);                             \
      else _mm512_storeu_ps(yp + 16 * j, v);                                                   \
    }                                                                                          \
  }

#define PB_KERNEL(MR, OVB, PS)                                                                 \
  __attribute__((target("avx512f"))) static void pb_##MR##x##OVB##_p##PS(const loom_pb_args *a) { \
    PB_BODY(MR, OVB, PS)                                                                       \
  }
#define PB_KERNEL_RT(MR, OVB)                                                                  \
  __attribute__((target("avx512f"))) static void pb_##MR##x##OVB##_prt(const loom_pb_args *a) { \
    const int64_t ps = a->ps;                                                                  \
    PB_BODY(MR, OVB, ps)                                                                       \
  }

/* The tiles: at most 28 accumulators. */
#define PB_ALL_PS(MR, OVB) \
  PB_KERNEL(MR, OVB, 16) PB_KERNEL(MR, OVB, 32) PB_KERNEL(MR, OVB, 64) PB_KERNEL(MR, OVB, 128) PB_KERNEL_RT(MR, OVB)
PB_ALL_PS(28, 1)
PB_ALL_PS(16, 1)
PB_ALL_PS(14, 1)
PB_ALL_PS(8, 1)
PB_ALL_PS(14, 2)
PB_ALL_PS(8, 2)
PB_ALL_PS(7, 2)
PB_ALL_PS(4, 2)
PB_ALL_PS(8, 3)
PB_ALL_PS(4, 3)
PB_ALL_PS(7, 4)
PB_ALL_PS(4, 4)

#define PB_ENTRIES(MR, OVB)                                                                    \
  {MR, OVB, 16, pb_##MR##x##OVB##_p16}, {MR, OVB, 32, pb_##MR##x##OVB##_p32},                  \
  {MR, OVB, 64, pb_##MR##x##OVB##_p64}, {MR, OVB, 128, pb_##MR##x##OVB##_p128},                \
  {MR, OVB, 0, pb_##MR##x##OVB##_prt}
const loom_pb_kernel loom_pb_kernels_avx512[] = {
    PB_ENTRIES(28, 1), PB_ENTRIES(16, 1), PB_ENTRIES(14, 1), PB_ENTRIES(8, 1),
    PB_ENTRIES(14, 2), PB_ENTRIES(8, 2),  PB_ENTRIES(7, 2),  PB_ENTRIES(4, 2),
    PB_ENTRIES(8, 3),  PB_ENTRIES(4, 3),  PB_ENTRIES(7, 4),  PB_ENTRIES(4, 4),
};
const int loom_pb_kernels_avx512_count = (int)(sizeof loom_pb_kernels_avx512 / sizeof loom_pb_kernels_avx512[0]);

/* ---- channel-broadcast -------------------------------------------------------- */
#define CB_KERNEL(MRC, OVB)                                                                    \
  __attribute__((target("avx512f"))) static void cb_##MRC##x##OVB(const loom_cb_args *a) {     \
    __m512 acc[MRC][OVB];                                                                      \
    UNROLL(28) for (int i = 0; i < MRC; i++) UNROLL(4) for (int j = 0; j < OVB; j++) acc[i][j] = \
        _mm512_setzero_ps();                                                                   \
    const __mmask16 lm = (__mmask16)a->lastmask;                                               \
    const int64_t cols = a->cols, xps = a->xps, dyps = a->dyps;                                \
    for (int64_t r = 0; r < a->rows; r++) {                                                    \
      const float *xp = a->x + r * a->xrs;                                                     \
      const float *dp = a->dy + r * a->dyrs;                                                   \
      for (int64_t q = 0; q < cols; q++) {                                                     \
        __m512 dv[OVB];                                                                        \
        UNROLL(4) for (int j = 0; j < OVB; j++) dv[j] =                                        \
            j == OVB - 1 ? _mm512_maskz_loadu_ps(lm, dp + 16 * j) : _mm512_loadu_ps(dp + 16 * j); \
        UNROLL(28) for (int i = 0; i < MRC; i++) {                                             \
          const __m512 b = _mm512_set1_ps(xp[i]);                                              \
          UNROLL(4) for (int j = 0; j < OVB; j++) acc[i][j] = _mm512_fmadd_ps(b, dv[j], acc[i][j]); \
        }                                                                                      \
        xp += xps;                                                                             \
        dp += dyps;                                                                            \
      }                                                                                        \
    }                                                                                          \
    UNROLL(28) for (int i = 0; i < MRC; i++) {                                                 \
      if (i >= a->mrc) break;                                                                  \
      float *d = a->dw + i * a->dws;                                                           \
      UNROLL(4) for (int j = 0; j < OVB; j++) {                                                \
        __mmask16 m = j == OVB - 1 ? lm : (__mmask16)0xFFFF;                                   \
        _mm512_mask_storeu_ps(d + 16 * j, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, d + 16 * j), acc[i][j])); \
      }                                                                                        \
    }                                                                                          \
  }
CB_KERNEL(16, 1)
CB_KERNEL(8, 1)
CB_KERNEL(12, 2)
CB_KERNEL(8, 2)
CB_KERNEL(8, 3)
CB_KERNEL(6, 4)
CB_KERNEL(4, 4)

const loom_cb_kernel loom_cb_kernels_avx512[] = {
    {16, 1, cb_16x1}, {8, 1, cb_8x1}, {12, 2, cb_12x2}, {8, 2, cb_8x2}, {8, 3, cb_8x3}, {6, 4, cb_6x4}, {4, 4, cb_4x4},
};
const int loom_cb_kernels_avx512_count = (int)(sizeof loom_cb_kernels_avx512 / sizeof loom_cb_kernels_avx512[0]);

#else
const loom_pb_kernel loom_pb_kernels_avx512[1] = {{0, 0, 0, 0}};
const int loom_pb_kernels_avx512_count = 0;
const loom_cb_kernel loom_cb_kernels_avx512[1] = {{0, 0, 0}};
const int loom_cb_kernels_avx512_count = 0;
#endif
