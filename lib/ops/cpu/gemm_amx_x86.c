/* gemm_amx_x86.c — the AMX-BF16 pieces of the bf16 GEMM (gemm_bf16.c
 * drives them): the 32 x 32 micro-kernel on tile registers, the packing of
 * an A block into the row layout the tiles load, the Linux permission to
 * use the tile state, and a plain-C model of the micro-kernel that tests run
 * on CPUs without AMX.
 *
 * The kernel keeps four 16 x 16 f32 accumulator tiles (tmm0-3) for a 32 x 32
 * block of C, and per step of 32 k loads two A tiles (16 rows x 16 pair
 * words) and two B tiles (16 pairs x 16 columns) and issues four
 * TDPBF16PS. B is the pair-interleaved sliver gemm_bf16_x86.c packs (kp
 * groups of 32 words), which is already the B tile's layout: tile row p is
 * group p, 16 columns of it, the row stride 128 bytes. A is packed here as
 * [32 rows][kpp words], row-major, which is the A tile's layout. kpp (pairs
 * per slice) is a multiple of 16; pairs past K are zero in both.
 *
 * Numerics: TDPBF16PS adds each pair's two exact products to the f32
 * accumulator, treating bf16 subnormal inputs as zero and flushing subnormal
 * results, the rounding gemm_bf16.h bounds (K * 2^-24 * sum|a_k b_k|). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* syscall() */
#endif
#include "ops/cpu/gemm_bf16_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f")))

enum { AR = LOOM_AMX_MR, NR = LOOM_BF16_NR };

/* Linux keeps the 8 KiB tile data out of a thread's saved state until the
 * process asks for it (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
 * without it the first tile instruction is a SIGILL. */
bool loom_amx_request_permission(void) {
#if defined(__linux__)
  enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
  return false; /* only Linux's way of enabling the tile state is known here */
#endif
}

/* The tile configuration: palette 1, all eight tiles 16 rows x 64 bytes. */
typedef struct __attribute__((packed, aligned(64))) tilecfg {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tilecfg;

AMX_TARGET void loom_amx_tiles_begin(void) {
  tilecfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
}

AMX_TARGET void loom_amx_tiles_end(void) { _tile_release(); }

AMX_TARGET void loom_gemm_amx_ukr_32x32(int64_t kpp, const uint32_t *a, const uint32_t *b, float *c) {
  const size_t sa = (size_t)kpp * 4, sb = NR * 4;
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t p = 0; p < kpp; p += 16) {
    _tile_loadd(4, a + p, sa);
    _tile_loadd(5, a + 16 * kpp + p, sa);
    _tile_loadd(6, b + p * NR, sb);
    _tile_loadd(7, b + p * NR + 16, sb);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, NR * 4);
  _tile_stored(1, c + 16, NR * 4);
  _tile_stored(2, c + 16 * NR, NR * 4);
  _tile_stored(3, c + 16 * NR + 16, NR * 4);
}

static float bf16_at(uint32_t w, int hi) {
  uint32_t u = hi ? (w & 0xFFFF0000u) : (w << 16);
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* The same block in plain C, pair by pair in the tile's order (tests). */
void loom_gemm_amx_ukr_model(int64_t kpp, const uint32_t *a, const uint32_t *b, float *c) {
  for (int r = 0; r < AR; r++)
    for (int n = 0; n < NR; n++) {
      float acc = 0.0f;
      for (int64_t p = 0; p < kpp; p++) {
        const uint32_t x = a[r * kpp + p], y = b[p * NR + n];
        acc += bf16_at(x, 0) * bf16_at(y, 0) + bf16_at(x, 1) * bf16_at(y, 1);
      }
      c[r * NR + n] = acc;
    }
}

/* Rows [i0, i0+m) (m <= 32) of op(A) over k in [k0, k0+kc) into dst
 * [32][kpp] words: row r's pair p is (k0+2p, k0+2p+1); pairs past kc, halves
 * at k >= K and rows past m are zero. at: A is [K,M]. */
void loom_gemm_amx_pack_a(bool at, const uint16_t *A, int64_t lda, int64_t K, int64_t k0, int64_t kc, int64_t i0,
                          int64_t m, int64_t kpp, uint32_t *dst) {
  const int64_t kend = k0 + kc < K ? k0 + kc : K;
  const int64_t n = kend - k0; /* values of each row in this slice */
  memset(dst, 0, (size_t)(AR * kpp) * sizeof(uint32_t));
  if (!at) {
    for (int64_t r = 0; r < m; r++) memcpy(dst + r * kpp, A + (i0 + r) * lda + k0, (size_t)n * sizeof(uint16_t));
    return;
  }
  for (int64_t k = 0; k < n; k++) {
    const uint16_t *row = A + (k0 + k) * lda + i0;
    uint16_t *d = (uint16_t *)dst + k; /* halves in memory order: lo = even k */
    for (int64_t r = 0; r < m; r++) d[r * 2 * kpp] = row[r];
  }
}

#else
typedef int loom_gemm_amx_x86_unused; /* ISO C forbids an empty translation unit. */
#endif
