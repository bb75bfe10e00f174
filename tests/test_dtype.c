/* test_dtype.c — dtype properties and exact fp16/bf16 conversion.
 *
 * fp16 is checked against the x86 F16C instructions (the hardware the CPU
 * backend must match bit for bit) at every rounding boundary and on a large
 * random sweep; bf16 against an independent reference that rounds with
 * double arithmetic and explicit tie handling. */
#include <criterion/criterion.h>
#include <float.h>
#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/half.h"
#include "loom/dtype.h"

/* ---- helpers ------------------------------------------------------------- */

static uint32_t fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* xorshift64*: a fixed, seedable stream of test inputs. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* The hardware: F16C with round-to-nearest-even encoded in the instruction
 * (independent of MXCSR). target attributes keep the rest of the build at
 * the baseline ISA. */
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f) {
  return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

static void need_f16c(void) {
  /* CPUID leaf 1 (clang before 15 does not know __builtin_cpu_supports("f16c")). */
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_F16C))
    cr_skip_test("this CPU has no F16C: no hardware reference to compare with");
}

static int checked_count;

static void check_f16(float f) {
  uint16_t want = hw_f32_to_f16(f);
  uint16_t got = loom_f32_to_f16(f);
  checked_count++;
  cr_assert_eq(got, want, "f32 0x%08x (%a): loom 0x%04x, F16C 0x%04x", fbits(f), (double)f, got, want);
}

/* ---- dtype properties ------------------------------------------------------ */

Test(dtype, sizes_names_kinds) {
  cr_assert_eq(loom_dtype_size(LOOM_F32), 4);
  cr_assert_eq(loom_dtype_size(LOOM_F16), 2);
  cr_assert_eq(loom_dtype_size(LOOM_BF16), 2);
  cr_assert_eq(loom_dtype_size(LOOM_I32), 4);
  cr_assert_eq(loom_dtype_size(LOOM_I64), 8);
  cr_assert_eq(loom_dtype_size(LOOM_U8), 1);
  cr_assert_eq(loom_dtype_size((loom_dtype)LOOM_DTYPE_COUNT), 0);
  cr_assert_eq(loom_dtype_size((loom_dtype)-1), 0);

  cr_assert_str_eq(loom_dtype_name(LOOM_F32), "f32");
  cr_assert_str_eq(loom_dtype_name(LOOM_F16), "f16");
  cr_assert_str_eq(loom_dtype_name(LOOM_BF16), "bf16");
  cr_assert_str_eq(loom_dtype_name(LOOM_I32), "i32");
  cr_assert_str_eq(loom_dtype_name(LOOM_I64), "i64");
  cr_assert_str_eq(loom_dtype_name(LOOM_U8), "u8");
  cr_assert_str_eq(loom_dtype_name((loom_dtype)99), "?");

  cr_assert(loom_dtype_is_float(LOOM_F32));
  cr_assert(loom_dtype_is_float(LOOM_F16));
  cr_assert(loom_dtype_is_float(LOOM_BF16));
  cr_assert_not(loom_dtype_is_float(LOOM_I32));
  cr_assert_not(loom_dtype_is_float(LOOM_I64));
  cr_assert_not(loom_dtype_is_float(LOOM_U8));
  cr_assert_not(loom_dtype_is_float((loom_dtype)42));

  for (int d = 0; d < LOOM_DTYPE_COUNT; d++) cr_assert(loom_dtype_valid(d), "dtype %d", d);
  cr_assert_not(loom_dtype_valid(-1));
  cr_assert_not(loom_dtype_valid(LOOM_DTYPE_COUNT));
}

/* ---- fp16 ------------------------------------------------------------------ */

Test(f16, widen_all_65536_patterns_matches_hardware_and_formula) {
  need_f16c();
  for (uint32_t h = 0; h < 0x10000u; h++) {
    float got = loom_f16_to_f32((uint16_t)h);
    float want = hw_f16_to_f32((uint16_t)h);
    cr_assert_eq(fbits(got), fbits(want), "f16 0x%04x: loom 0x%08x, F16C 0x%08x", h, fbits(got), fbits(want));

    /* Independent value check for finite halves: (-1)^s * m * 2^(e-25). */
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e != 0x1f) {
      double v = e == 0 ? ldexp((double)m, -24) : ldexp((double)(m | 0x400), (int)e - 25);
      if (h & 0x8000) v = -v;
      cr_assert_eq((double)got, v, "f16 0x%04x -> %a, expected %a", h, (double)got, v);
      cr_assert_eq(signbit(got) != 0, (h & 0x8000) != 0, "f16 0x%04x sign", h);
    }
  }
}

Test(f16, round_trip_all_65536_patterns) {
  for (uint32_t h = 0; h < 0x10000u; h++) {
    float f = loom_f16_to_f32((uint16_t)h);
    uint16_t back = loom_f32_to_f16(f);
    bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (is_nan) {
      cr_assert(isnan(f), "f16 NaN 0x%04x widened to a non-NaN", h);
      /* NaN stays NaN, made quiet, sign and payload kept. */
      cr_assert_eq(back, h | 0x0200u, "f16 NaN 0x%04x came back as 0x%04x", h, back);
    } else {
      cr_assert_eq(back, h, "f16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
    }
  }
}

/* Every rounding boundary: each half value, the midpoint between it and the
 * next half (a tie), and the floats one ulp either side of both; both signs.
 * This covers subnormals, the normal/subnormal border, and overflow. */
Test(f16, narrow_every_boundary_matches_hardware) {
  need_f16c();
  checked_count = 0;
  for (uint32_t h = 0; h < 0x7c00u; h++) {
    float a = loom_f16_to_f32((uint16_t)h);
    /* Past 65504 the "next half" is 65536 (= the would-be exponent 31). */
    float b = h + 1 < 0x7c00u ? loom_f16_to_f32((uint16_t)(h + 1)) : 65536.0f;
    float mid = (float)(((double)a + (double)b) / 2); /* exact: 12 bits */
    cr_assert_eq((double)mid, ((double)a + (double)b) / 2);
    float pts[6] = {a, nextafterf(a, 0), nextafterf(a, INFINITY), mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
    for (int i = 0; i < 6; i++) {
      check_f16(pts[i]);
      check_f16(-pts[i]);
    }
  }
  cr_assert_gt(checked_count, 6 * 2 * 0x7000);
}

Test(f16, narrow_special_values) {
  need_f16c();
  /* Overflow: 65504 is the largest half; 65520 is the tie with 2^16 -> inf. */
  cr_assert_eq(loom_f32_to_f16(65504.0f), 0x7bff);
  cr_assert_eq(loom_f32_to_f16(65519.99f), 0x7bff);
  cr_assert_eq(loom_f32_to_f16(nextafterf(65520.0f, 0)), 0x7bff);
  cr_assert_eq(loom_f32_to_f16(65520.0f), 0x7c00);
  cr_assert_eq(loom_f32_to_f16(-65520.0f), 0xfc00);
  cr_assert_eq(loom_f32_to_f16(1e30f), 0x7c00);
  cr_assert_eq(loom_f32_to_f16(FLT_MAX), 0x7c00);
  cr_assert_eq(loom_f32_to_f16(INFINITY), 0x7c00);
  cr_assert_eq(loom_f32_to_f16(-INFINITY), 0xfc00);
  /* Zeros, and the underflow edge: 2^-25 is a tie with 0 (even). */
  cr_assert_eq(loom_f32_to_f16(0.0f), 0x0000);
  cr_assert_eq(loom_f32_to_f16(-0.0f), 0x8000);
  cr_assert_eq(loom_f32_to_f16(0x1p-25f), 0x0000);
  cr_assert_eq(loom_f32_to_f16(nextafterf(0x1p-25f, 1)), 0x0001);
  cr_assert_eq(loom_f32_to_f16(0x1.8p-25f), 0x0001);
  cr_assert_eq(loom_f32_to_f16(0x1p-24f), 0x0001);
  cr_assert_eq(loom_f32_to_f16(0x1.8p-24f), 0x0002); /* 1.5 ulp: tie -> even 2 */
  cr_assert_eq(loom_f32_to_f16(0x1p-14f), 0x0400);  /* smallest normal */
  cr_assert_eq(loom_f32_to_f16(0x1.ffcp-15f), 0x0400); /* 1023.5 ulp: tie -> 1024 */
  cr_assert_eq(loom_f32_to_f16(0x1.ff8p-15f), 0x03ff); /* 1023 ulp: exact */
  cr_assert_eq(loom_f32_to_f16(1.0f), 0x3c00);
  cr_assert_eq(loom_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie -> even */
  cr_assert_eq(loom_f32_to_f16(1.0f + 0x3p-11f), 0x3c02); /* tie -> even */
  cr_assert_eq(loom_f32_to_f16(FLT_MIN), 0x0000);
  cr_assert_eq(loom_f32_to_f16(-FLT_TRUE_MIN), 0x8000);

  /* NaNs stay NaN (quiet, sign kept), as F16C does, for a range of payloads. */
  const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu,
                           0xffffffffu, 0x7fa00000u, 0x7f802000u, 0x7fbfe000u, 0x7fc0dead};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    float f = bitsf(nans[i]);
    uint16_t h = loom_f32_to_f16(f);
    cr_assert((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0, "NaN 0x%08x -> non-NaN 0x%04x", nans[i], h);
    cr_assert(h & 0x0200, "NaN 0x%08x -> signaling 0x%04x", nans[i], h);
    check_f16(f);
  }
}

Test(f16, narrow_random_sweep_matches_hardware) {
  need_f16c();
  rng_state = 0x1234567887654321ull;
  /* 2^24 arbitrary bit patterns (all exponents: NaN, inf, huge, tiny)... */
  for (uint32_t i = 0; i < (1u << 24); i++) check_f16(bitsf(rnd32()));
  /* ...and 2^24 within the half range (exponents 101..143), where the
   * rounding actually happens. */
  for (uint32_t i = 0; i < (1u << 24); i++) {
    uint32_t r = rnd32();
    uint32_t e = 101u + (r >> 24) % 43u;
    check_f16(bitsf((r & 0x80000000u) | (e << 23) | (rnd32() & 0x7fffffu)));
  }
}

/* ---- bf16 ------------------------------------------------------------------ */

static double bf16_value(uint32_t mag) { /* |bf16| pattern -> value; 0x7f80 = 2^128 */
  return (double)bitsf(mag << 16);
}

/* Independent reference: take the two bf16 neighbours of |f| (truncation and
 * the next pattern up), compare the distances in exact double arithmetic,
 * break ties towards an even mantissa. The next pattern above the largest
 * finite bf16 (0x7f7f) is treated as 2^128, which is what IEEE overflow
 * rounding uses. NaN -> 0x7fff, as CUDA __float2bfloat16_rn. */
static uint16_t ref_f32_to_bf16(float f) {
  uint32_t x = fbits(f);
  if (isnan(f)) return 0x7fff;
  uint32_t sign = (x >> 16) & 0x8000u;
  if (isinf(f)) return (uint16_t)(sign | 0x7f80u);
  double v = fabs((double)f);
  uint32_t lo = (x & 0x7fffffffu) >> 16, hi = lo + 1;
  double vlo = bf16_value(lo);
  double vhi = hi == 0x7f80u ? ldexp(1.0, 128) : bf16_value(hi);
  double dlo = v - vlo, dhi = vhi - v; /* exact: few significant bits */
  cr_assert(dlo >= 0 && dhi > 0);
  uint32_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1u) ? hi : lo);
  return (uint16_t)(sign | pick);
}

static void check_bf16(float f) {
  uint16_t want = ref_f32_to_bf16(f);
  uint16_t got = loom_f32_to_bf16(f);
  cr_assert_eq(got, want, "f32 0x%08x (%a): loom 0x%04x, reference 0x%04x", fbits(f), (double)f, got, want);
}

Test(bf16, widen_and_round_trip_all_65536_patterns) {
  for (uint32_t b = 0; b < 0x10000u; b++) {
    float f = loom_bf16_to_f32((uint16_t)b);
    cr_assert_eq(fbits(f), b << 16, "bf16 0x%04x widened to 0x%08x", b, fbits(f));
    uint16_t back = loom_f32_to_bf16(f);
    if (isnan(f))
      cr_assert_eq(back, 0x7fff, "bf16 NaN 0x%04x came back as 0x%04x", b, back);
    else
      cr_assert_eq(back, b, "bf16 0x%04x -> 0x%04x", b, back);
  }
}

Test(bf16, narrow_every_boundary_matches_reference) {
  for (uint32_t b = 0; b < 0x7f80u; b++) {
    uint32_t base = b << 16;
    /* the bf16 value itself, the tie above it, and their float neighbours */
    uint32_t pts[6] = {base, base + 1, base ? base - 1 : 0, base + 0x8000u, base + 0x7fffu, base + 0x8001u};
    for (int i = 0; i < 6; i++) {
      check_bf16(bitsf(pts[i]));
      check_bf16(bitsf(pts[i] | 0x80000000u));
    }
  }
}

Test(bf16, narrow_special_values) {
  cr_assert_eq(loom_f32_to_bf16(0.0f), 0x0000);
  cr_assert_eq(loom_f32_to_bf16(-0.0f), 0x8000);
  cr_assert_eq(loom_f32_to_bf16(1.0f), 0x3f80);
  cr_assert_eq(loom_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);  /* tie -> even */
  cr_assert_eq(loom_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);  /* tie -> even */
  cr_assert_eq(loom_f32_to_bf16(FLT_MAX), 0x7f80);         /* rounds past the max */
  cr_assert_eq(loom_f32_to_bf16(-FLT_MAX), 0xff80);
  cr_assert_eq(loom_f32_to_bf16(bitsf(0x7f7f7fffu)), 0x7f7f); /* just below the overflow tie */
  cr_assert_eq(loom_f32_to_bf16(bitsf(0x7f7f8000u)), 0x7f80); /* the tie: odd 0x7f7f -> inf */
  cr_assert_eq(loom_f32_to_bf16(INFINITY), 0x7f80);
  cr_assert_eq(loom_f32_to_bf16(-INFINITY), 0xff80);
  cr_assert_eq(loom_f32_to_bf16(FLT_TRUE_MIN), 0x0000);
  cr_assert_eq(loom_f32_to_bf16(bitsf(0x00008000u)), 0x0000); /* subnormal tie -> even 0 */
  cr_assert_eq(loom_f32_to_bf16(bitsf(0x00018000u)), 0x0002); /* subnormal tie -> even 2 */
  cr_assert_eq(loom_f32_to_bf16(bitsf(0x007fffffu)), 0x0080); /* largest subnormal -> FLT_MIN */
  const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++)
    cr_assert_eq(loom_f32_to_bf16(bitsf(nans[i])), 0x7fff, "NaN 0x%08x", nans[i]);
}

Test(bf16, narrow_random_sweep_matches_reference) {
  rng_state = 0xC0FFEE0DDF00Dull;
  for (uint32_t i = 0; i < (1u << 24); i++) check_bf16(bitsf(rnd32()));
}
