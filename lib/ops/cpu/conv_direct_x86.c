/* conv_direct_x86.c — AVX-512 and AVX2+FMA instantiations of the direct
 * convolution's micro-kernels (see conv_direct_kern.h for what they compute).
 *
 * Every kernel keeps its whole MR x OVB tile of accumulators in registers
 * (AVX-512: at most 28 of the 32 zmm, leaving room for the OVB weight
 * vectors; AVX2: at most 12 of the 16 ymm): per reduction step it loads OVB
 * vectors and issues MR*OVB FMAs, on AVX-512 with the broadcast operand
 * straight from memory. The pixel pitch PS
 * is a template constant (16, 32, 64, 128 floats: padded channel counts
 * 16/32/64 at stride 1 and 2) so each broadcast address is an immediate
 * offset; a runtime-pitch variant covers the rest. The library is compiled
 * for baseline x86-64: each function carries its own target attribute and
 * is only reached after __builtin_cpu_supports says the CPU has its ISA. */
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
static const loom_pb_kernel pb_avx512[] = {
    PB_ENTRIES(28, 1), PB_ENTRIES(16, 1), PB_ENTRIES(14, 1), PB_ENTRIES(8, 1),
    PB_ENTRIES(14, 2), PB_ENTRIES(8, 2),  PB_ENTRIES(7, 2),  PB_ENTRIES(4, 2),
    PB_ENTRIES(8, 3),  PB_ENTRIES(4, 3),  PB_ENTRIES(7, 4),  PB_ENTRIES(4, 4),
};

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

static const loom_cb_kernel cb_avx512[] = {
    {16, 1, cb_16x1}, {8, 1, cb_8x1}, {12, 2, cb_12x2}, {8, 2, cb_8x2}, {8, 3, cb_8x3}, {6, 4, cb_6x4}, {4, 4, cb_4x4},
};
const loom_conv_isa loom_conv_isa_avx512 = {"avx512", 16, pb_avx512, (int)(sizeof pb_avx512 / sizeof pb_avx512[0]),
                                            cb_avx512, (int)(sizeof cb_avx512 / sizeof cb_avx512[0])};

/* ---- AVX2 + FMA: 16 ymm registers, so at most 12 accumulators (+ the
 * weight or dy vectors and one broadcast) and blocks of at most 2 output
 * vectors in the pixel-broadcast kernels; no embedded broadcasts or mask
 * registers: vbroadcastss, and vmaskmov with a prefix-lane mask vector. */
__attribute__((target("avx2,fma"))) static inline __m256i prefix8(uint16_t m) {
  const int n = __builtin_popcount((unsigned)(m & 0xFFu));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#define PB2_BODY(MR, OVB, PSX)                                                                 \
  __m256 acc[MR][OVB];                                                                         \
  UNROLL(12) for (int i = 0; i < MR; i++) UNROLL(4) for (int j = 0; j < OVB; j++) acc[i][j] =  \
      _mm256_setzero_ps();                                                                     \
  const int64_t K = a->K, ws = a->ws;                                                          \
  for (int t = 0; t < a->ntaps; t++) {                                                         \
    const float *xp = a->x + a->xoff[t];                                                       \
    const float *wp = a->w[t];                                                                 \
    for (int64_t c = 0; c < K; c++) {                                                          \
      __m256 wv[OVB];                                                                          \
      UNROLL(4) for (int j = 0; j < OVB; j++) wv[j] = _mm256_load_ps(wp + 8 * j);              \
      UNROLL(12) for (int i = 0; i < MR; i++) {                                                \
        const __m256 b = _mm256_broadcast_ss(xp + i * (PSX));                                  \
        UNROLL(4) for (int j = 0; j < OVB; j++) acc[i][j] = _mm256_fmadd_ps(b, wv[j], acc[i][j]); \
      }                                                                                        \
      xp += 1;                                                                                 \
      wp += ws;                                                                                \
    }                                                                                          \
  }                                                                                            \
  const __m256i lm = prefix8(a->lastmask), full = _mm256_set1_epi32(-1);                       \
  __m256 bv[OVB];                                                                              \
  UNROLL(4) for (int j = 0; j < OVB; j++) bv[j] =                                              \
      a->bias ? _mm256_maskload_ps(a->bias + 8 * j, j == OVB - 1 ? lm : full) : _mm256_setzero_ps(); \
  const __m256 zero = _mm256_setzero_ps();                                                     \
  UNROLL(12) for (int i = 0; i < MR; i++) {                                                    \
    if (i >= a->mr) break;                                                                     \
    float *yp = a->y + i * a->yps;                                                             \
    UNROLL(4) for (int j = 0; j < OVB; j++) {                                                  \
      __m256 v = _mm256_add_ps(acc[i][j], bv[j]);                                              \
      if (a->relu) v = _mm256_max_ps(v, zero);                                                 \
      if (j == OVB - 1) _mm256_maskstore_ps(yp + 8 * j, lm, v);                                \
      else _mm256_storeu_ps(yp + 8 * j, v);                                                    \
    }                                                                                          \
  }

#define PB2_KERNEL(MR, OVB, PS)                                                                \
  __attribute__((target("avx2,fma"))) static void pb2_##MR##x##OVB##_p##PS(const loom_pb_args *a) { \
    PB2_BODY(MR, OVB, PS)                                                                      \
  }
#define PB2_KERNEL_RT(MR, OVB)                                                                 \
  __attribute__((target("avx2,fma"))) static void pb2_##MR##x##OVB##_prt(const loom_pb_args *a) { \
    const int64_t ps = a->ps;                                                                  \
    PB2_BODY(MR, OVB, ps)                                                                      \
  }
#define PB2_ALL_PS(MR, OVB) \
  PB2_KERNEL(MR, OVB, 16) PB2_KERNEL(MR, OVB, 32) PB2_KERNEL(MR, OVB, 64) PB2_KERNEL(MR, OVB, 128) PB2_KERNEL_RT(MR, OVB)
PB2_ALL_PS(12, 1)
PB2_ALL_PS(8, 1)
PB2_ALL_PS(6, 2)
PB2_ALL_PS(4, 2)

#define PB2_ENTRIES(MR, OVB)                                                                   \
  {MR, OVB, 16, pb2_##MR##x##OVB##_p16}, {MR, OVB, 32, pb2_##MR##x##OVB##_p32},                \
  {MR, OVB, 64, pb2_##MR##x##OVB##_p64}, {MR, OVB, 128, pb2_##MR##x##OVB##_p128},              \
  {MR, OVB, 0, pb2_##MR##x##OVB##_prt}
static const loom_pb_kernel pb_avx2[] = {
    PB2_ENTRIES(12, 1), PB2_ENTRIES(8, 1), PB2_ENTRIES(6, 2), PB2_ENTRIES(4, 2),
};

#define CB2_KERNEL(MRC, OVB)                                                                   \
  __attribute__((target("avx2,fma"))) static void cb2_##MRC##x##OVB(const loom_cb_args *a) {   \
    __m256 acc[MRC][OVB];                                                                      \
    UNROLL(12) for (int i = 0; i < MRC; i++) UNROLL(4) for (int j = 0; j < OVB; j++) acc[i][j] = \
        _mm256_setzero_ps();                                                                   \
    const __m256i lm = prefix8(a->lastmask), full = _mm256_set1_epi32(-1);                     \
    const int64_t cols = a->cols, xps = a->xps, dyps = a->dyps;                                \
    for (int64_t r = 0; r < a->rows; r++) {                                                    \
      const float *xp = a->x + r * a->xrs;                                                     \
      const float *dp = a->dy + r * a->dyrs;                                                   \
      for (int64_t q = 0; q < cols; q++) {                                                     \
        __m256 dv[OVB];                                                                        \
        UNROLL(4) for (int j = 0; j < OVB; j++) dv[j] =                                        \
            j == OVB - 1 ? _mm256_maskload_ps(dp + 8 * j, lm) : _mm256_loadu_ps(dp + 8 * j);   \
        UNROLL(12) for (int i = 0; i < MRC; i++) {                                             \
          const __m256 b = _mm256_broadcast_ss(xp + i);                                        \
          UNROLL(4) for (int j = 0; j < OVB; j++) acc[i][j] = _mm256_fmadd_ps(b, dv[j], acc[i][j]); \
        }                                                                                      \
        xp += xps;                                                                             \
        dp += dyps;                                                                            \
      }                                                                                        \
    }                                                                                          \
    UNROLL(12) for (int i = 0; i < MRC; i++) {                                                 \
      if (i >= a->mrc) break;                                                                  \
      float *d = a->dw + i * a->dws;                                                           \
      UNROLL(4) for (int j = 0; j < OVB; j++) {                                                \
        __m256i m = j == OVB - 1 ? lm : full;                                                  \
        _mm256_maskstore_ps(d + 8 * j, m, _mm256_add_ps(_mm256_maskload_ps(d + 8 * j, m), acc[i][j])); \
      }                                                                                        \
    }                                                                                          \
  }
CB2_KERNEL(12, 1)
CB2_KERNEL(8, 1)
CB2_KERNEL(6, 2)
CB2_KERNEL(4, 2)
CB2_KERNEL(4, 3)
CB2_KERNEL(3, 4)

static const loom_cb_kernel cb_avx2[] = {
    {12, 1, cb2_12x1}, {8, 1, cb2_8x1}, {6, 2, cb2_6x2}, {4, 2, cb2_4x2}, {4, 3, cb2_4x3}, {3, 4, cb2_3x4},
};
const loom_conv_isa loom_conv_isa_avx2 = {"avx2", 8, pb_avx2, (int)(sizeof pb_avx2 / sizeof pb_avx2[0]), cb_avx2,
                                          (int)(sizeof cb_avx2 / sizeof cb_avx2[0])};

#else
const loom_conv_isa loom_conv_isa_avx512 = {"avx512", 16, NULL, 0, NULL, 0};
const loom_conv_isa loom_conv_isa_avx2 = {"avx2", 8, NULL, 0, NULL, 0};
#endif
