/* philox.h (internal) — Philox4x32-10 and the element mappings of rng.h.
 *
 * Header-only and LOOM_HD so the CPU fills (rng.c) and CUDA kernels run the
 * same code: element i of a fill at (seed, offset) is a pure function of
 * (seed, offset + i/4, i%4), whatever the device or the thread count.
 *
 * Philox4x32-10 is the counter-based generator of Salmon et al., "Parallel
 * random numbers: as easy as 1, 2, 3" (SC'11), bit-compatible with
 * Random123's philox4x32 with 10 rounds (its known-answer vectors are in
 * tests/test_rng.c).
 *
 * Mappings (see include/loom/rng.h):
 *  - uniform: u = ((x >> 9) + 0.5) * 2^-23 — exact in float, so u is in
 *    [2^-24, 1 - 2^-24]: never 0 (log is safe) and never 1.
 *  - normal: Box–Muller on lanes (0,1) and (2,3) of a block, evaluated in
 *    double and rounded once to float, so libm differences between devices
 *    (a few double ulps) almost never change the float result.
 * The affine maps (lo + (hi-lo) u, mean + std z) are also done in double
 * with explicitly rounded operations on the device (nvcc would otherwise
 * contract them into FMAs; host builds without -mfma cannot contract). */
#ifndef LOOM_CORE_PHILOX_H
#define LOOM_CORE_PHILOX_H

#include <math.h>
#include <stdint.h>

#ifndef LOOM_HD
#  if defined(__CUDACC__)
#    define LOOM_HD __host__ __device__
#  else
#    define LOOM_HD
#  endif
#endif

#define LOOM_PHILOX_M0 0xD2511F53u
#define LOOM_PHILOX_M1 0xCD9E8D57u
#define LOOM_PHILOX_W0 0x9E3779B9u /* golden ratio */
#define LOOM_PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

typedef struct loom_philox_u4 {
  uint32_t v[4];
} loom_philox_u4;

static inline LOOM_HD void loom_philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo) {
#if defined(__CUDA_ARCH__)
  *lo = a * b;
  *hi = __umulhi(a, b);
#else
  const uint64_t p = (uint64_t)a * (uint64_t)b;
  *lo = (uint32_t)p;
  *hi = (uint32_t)(p >> 32);
#endif
}

/* One Philox4x32-10 block. */
static inline LOOM_HD loom_philox_u4 loom_philox4x32_10_block(loom_philox_u4 c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; round++) {
    if (round > 0) { /* key schedule: bump between rounds */
      k0 += LOOM_PHILOX_W0;
      k1 += LOOM_PHILOX_W1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    loom_philox_mulhilo(LOOM_PHILOX_M0, c.v[0], &hi0, &lo0);
    loom_philox_mulhilo(LOOM_PHILOX_M1, c.v[2], &hi1, &lo1);
    loom_philox_u4 n;
    n.v[0] = hi1 ^ c.v[1] ^ k0;
    n.v[1] = lo1;
    n.v[2] = hi0 ^ c.v[3] ^ k1;
    n.v[3] = lo0;
    c = n;
  }
  return c;
}

/* The block a fill uses: 64-bit counter in words 0 (low) and 1 (high),
 * words 2 and 3 zero; key = seed (low, high). */
static inline LOOM_HD loom_philox_u4 loom_philox_at(uint64_t seed, uint64_t block) {
  loom_philox_u4 c;
  c.v[0] = (uint32_t)block;
  c.v[1] = (uint32_t)(block >> 32);
  c.v[2] = 0;
  c.v[3] = 0;
  return loom_philox4x32_10_block(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* 32 random bits -> float in (0, 1); exact (23 bits + the half step fit in
 * a float's 24-bit significand). */
static inline LOOM_HD float loom_philox_uniform01(uint32_t x) {
  return ((float)(x >> 9) + 0.5f) * 0x1p-23f;
}

static inline LOOM_HD double loom_philox_dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

static inline LOOM_HD double loom_philox_dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

/* lo + (hi - lo) * u, rounded once to float. */
static inline LOOM_HD float loom_philox_affine(float u, float lo, float hi) {
  const double d = loom_philox_dadd((double)hi, -(double)lo);
  return (float)loom_philox_dadd((double)lo, loom_philox_dmul(d, (double)u));
}

/* Four uniforms in (0, 1) from one block. */
static inline LOOM_HD void loom_philox_uniform4(uint64_t seed, uint64_t block, float u[4]) {
  const loom_philox_u4 r = loom_philox_at(seed, block);
  for (int l = 0; l < 4; l++) u[l] = loom_philox_uniform01(r.v[l]);
}

/* Four standard normals (as doubles, before the final rounding) from one
 * block: Box–Muller on lanes (0,1) and (2,3). */
static inline LOOM_HD void loom_philox_normal4(uint64_t seed, uint64_t block, double z[4]) {
  float u[4];
  loom_philox_uniform4(seed, block, u);
  const double two_pi = 6.283185307179586476925286766559;
  for (int p = 0; p < 4; p += 2) {
    const double r = sqrt(loom_philox_dmul(-2.0, log((double)u[p])));
    const double t = loom_philox_dmul(two_pi, (double)u[p + 1]);
    z[p] = loom_philox_dmul(r, cos(t));
    z[p + 1] = loom_philox_dmul(r, sin(t));
  }
}

/* mean + std * z, rounded once to float. */
static inline LOOM_HD float loom_philox_scale_normal(double z, float mean, float std) {
  return (float)loom_philox_dadd((double)mean, loom_philox_dmul((double)std, z));
}

#endif
