/* half.h (internal) — exact fp16 <-> f32 and bf16 <-> f32 conversion.
 *
 * Header-only and LOOM_HD so CPU code and CUDA kernels share the very same
 * code and therefore produce the same bits. Pure integer bit manipulation:
 * the result never depends on the FPU's rounding mode, FTZ/DAZ flags or
 * compiler contraction.
 *
 * Rounding is round-to-nearest-even with correct subnormals; values at or
 * beyond the overflow midpoint become inf. For every non-NaN input the
 * results are bit-identical to x86 F16C (vcvtps2ph / vcvtph2ps) and to CUDA
 * __float2half_rn / __half2float / __float2bfloat16_rn / __bfloat162float.
 *
 * NaN handling (the hardware disagrees, so it is a choice):
 *  - f32 -> f16: like F16C: sign and the top 10 payload bits are kept and the
 *    quiet bit is set. (CUDA returns the canonical 0x7fff instead.)
 *  - f16 -> f32: like F16C: sign and payload kept, quiet bit set.
 *  - f32 -> bf16: like CUDA __float2bfloat16_rn: every NaN becomes 0x7fff.
 *  - bf16 -> f32: exact widening (bits << 16), like CUDA and AVX512-BF16.
 * A NaN always stays a NaN. */
#ifndef LOOM_CORE_HALF_H
#define LOOM_CORE_HALF_H

#include <stdint.h>
#include <string.h>

#ifndef LOOM_HD
#  if defined(__CUDACC__)
#    define LOOM_HD __host__ __device__
#  else
#    define LOOM_HD
#  endif
#endif

/* Bit casts: memcpy is the portable, aliasing-safe way on the host; the
 * device has dedicated intrinsics. */
static inline LOOM_HD uint32_t loom_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}

static inline LOOM_HD float loom_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

/* f32 -> IEEE binary16, round to nearest even. */
static inline LOOM_HD uint16_t loom_half_from_f32(float f) {
  const uint32_t x = loom_f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t u = x & 0x7fffffffu;

  if (u > 0x7f800000u) /* NaN: keep the top payload bits, force quiet */
    return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x03ffu));
  /* >= 65520 (midpoint of 65504 and 2^16; ties go to the even side, inf) */
  if (u >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);

  if (u >= 0x38800000u) { /* result is a normal half (|f| >= 2^-14) */
    /* Rebias the exponent (127 -> 15) in place; the carry of a round-up
     * propagates into the exponent, which is exactly right (up to 65504). */
    const uint32_t r = u - 0x38000000u;
    uint32_t h = r >> 13;
    const uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
  }
  /* |f| <= 2^-25 rounds to zero (2^-25 itself is a tie with even 0). */
  if (u <= 0x33000000u) return (uint16_t)sign;

  /* Subnormal half: value = mant * 2^(e-150), in units of 2^-24 that is
   * mant >> (126 - e); e is in [102, 112], so shift is in [14, 24]. */
  {
    const uint32_t e = u >> 23;
    const uint32_t shift = 126u - e;
    const uint32_t mant = (u & 0x7fffffu) | 0x800000u;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    /* A round-up from 0x3ff gives 0x400, the smallest normal: correct. */
    if (rem > halfway || (rem == halfway && (h & 1u))) h++;
    return (uint16_t)(sign | h);
  }
}

/* IEEE binary16 -> f32 (exact). */
static inline LOOM_HD float loom_half_to_f32(uint16_t h) {
  const uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  const uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
  uint32_t mant = (uint32_t)h & 0x3ffu;

  if (exp == 0x1fu) { /* inf, or NaN made quiet with its payload kept */
    if (mant == 0) return loom_bits_f32(sign | 0x7f800000u);
    return loom_bits_f32(sign | 0x7fc00000u | (mant << 13));
  }
  if (exp == 0) {
    if (mant == 0) return loom_bits_f32(sign);
    /* Subnormal: shift the leading 1 up to the implicit-bit position
     * (bit 10); each shift lowers the exponent by one. */
    uint32_t e = 113u; /* 127 - 14: exponent of the smallest normal half */
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      e--;
    }
    mant &= 0x3ffu;
    return loom_bits_f32(sign | (e << 23) | (mant << 13));
  }
  return loom_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* f32 -> bfloat16, round to nearest even; NaN -> 0x7fff (as CUDA does). */
static inline LOOM_HD uint16_t loom_bfloat_from_f32(float f) {
  const uint32_t x = loom_f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)0x7fffu;
  /* Adding 0x7fff plus the lsb of the kept part rounds half to even; a carry
   * out of the mantissa bumps the exponent, and the largest finite values
   * correctly overflow to inf (0x7f80). inf itself is unchanged. */
  const uint32_t lsb = (x >> 16) & 1u;
  return (uint16_t)((x + 0x7fffu + lsb) >> 16);
}

/* bfloat16 -> f32 (exact: bf16 is the top half of an f32). */
static inline LOOM_HD float loom_bfloat_to_f32(uint16_t b) {
  return loom_bits_f32((uint32_t)b << 16);
}

#endif
