/* conv_winograd_kern.h (internal) — the vector kernels of the Winograd
 * F(2x2, 3x3) and F(4x4, 3x3) convolutions (conv_winograd.c), one table per instruction set:
 * conv_winograd_x86.c instantiates them for AVX-512 (16 floats per vector)
 * and AVX2+FMA (8), and for tests on 16-lane generic vectors. Nothing here
 * may be called unless the CPU has the ISA.
 *
 * Layouts: activations NHWC [N][H][W][ch]; transform-domain blocks
 * [16 points][nt tiles][ch] (a point's tiles are rows of ch floats); tiles
 * are 2x2 (or 4x4) outputs, numbered image by image, row by row; tile indices at or
 * past g->ntiles are zero rows (the last block's padding). Channel counts
 * are multiples of 16. */
#ifndef LOOM_OPS_CPU_CONV_WINOGRAD_KERN_H
#define LOOM_OPS_CPU_CONV_WINOGRAD_KERN_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "loom/dtype.h"

typedef struct loom_wg_geom {
  int64_t N, H, W, TH, TW, ntiles;  /* images N of H x W; TH x TW tiles per image */
} loom_wg_geom;  /* tiles of 2x2 outputs (F(2x2, 3x3)) or 4x4 (F(4x4, 3x3)) */

/* The tile bookkeeping every transform shares (plain C: the same for each
 * instruction set). Tile gt (< ntiles) of T x T outputs reads the S x S
 * window from (row, col) * T + off of its channels-last image with C
 * channels: src[i*S + j] = element offset of pixel (i, j), -1 outside the
 * image (padding, or past the edge). */
static inline void loom_wg_window(const loom_wg_geom *w, int64_t gt, int T, int off, int S, int64_t C, int64_t *src) {
  const int64_t per_img = w->TH * w->TW, n = gt / per_img, r = gt % per_img;
  const int64_t y0 = (r / w->TW) * T + off, x0 = (r % w->TW) * T + off, img = n * w->H * w->W * C;
  for (int i = 0; i < S; i++)
    for (int j = 0; j < S; j++) {
      const int64_t y = y0 + i, x = x0 + j;
      src[i * S + j] = y >= 0 && y < w->H && x >= 0 && x < w->W ? img + (y * w->W + x) * C : -1;
    }
}
/* A block's rows past the last tile: tile t of the P points of v [P][nt][C]
 * is zero (the GEMMs then read zeros). */
static inline void loom_wg_zero_tile(float *v, int P, int64_t nt, int64_t t, int64_t C) {
  for (int p = 0; p < P; p++) memset(v + (p * nt + t) * C, 0, (size_t)C * sizeof(float));
}

typedef struct loom_wg_isa {
  const char *name;
  /* v [16][nt][cin] = Bᵀ d B of tiles [t0, t0 + nt) of in (padding 1; in
   * of dtype f32, f16 or bf16, widened as it is read). */
  void (*input)(const loom_wg_geom *g, const void *in, loom_dtype dt, int64_t cin, int64_t t0, int64_t nt, float *v);
  /* out tiles [t0, t0 + nt) = Aᵀ m A (+ bias, ReLU'd if relu), m [16][nt][cout];
   * out of dtype f32, f16 or bf16 (rounded once, to nearest even). */
  void (*output)(const loom_wg_geom *g, const float *m, int64_t cout, int64_t t0, int64_t nt, const float *bias,
                 bool relu, void *out, loom_dtype dt);
  /* e [16][nt][K] = A dy Aᵀ of the 2x2 dy tiles [t0, t0 + nt) (dy f32, f16 or bf16). */
  void (*dy)(const loom_wg_geom *g, const void *dy, loom_dtype dt, int64_t K, int64_t t0, int64_t nt, float *e);
  /* The same three for F(4x4, 3x3): 6x6 input tiles, 36 points, 4x4 outputs. */
  void (*input4)(const loom_wg_geom *g, const void *in, loom_dtype dt, int64_t cin, int64_t t0, int64_t nt, float *v);
  void (*output4)(const loom_wg_geom *g, const float *m, int64_t cout, int64_t t0, int64_t nt, const float *bias,
                  bool relu, void *out, loom_dtype dt);
  void (*dy4)(const loom_wg_geom *g, const void *dy, loom_dtype dt, int64_t K, int64_t t0, int64_t nt, float *e);
  /* out [rows x ncol] (+)= a [rows x depth] (element (r, d) at a[r*ars +
   * d*acs]) x b [depth x ncol] (ld ldb); rows a multiple of 12 or of 16,
   * ncol of 16. */
  void (*gemm)(int64_t rows, int64_t ncol, int64_t depth, const float *a, int64_t ars, int64_t acs, const float *b,
               int64_t ldb, float *out, int64_t ldo, bool accumulate);
} loom_wg_isa;

/* name NULL where not compiled. emu16: the AVX-512 kernels' code on
 * 16-lane generic vectors (needs AVX2; tests only). */
extern const loom_wg_isa loom_wg_isa_avx512, loom_wg_isa_avx2, loom_wg_isa_emu16;

#endif
