/* conv_winograd.c — 3x3 stride-1 convolutions in the Winograd domain
 * (Lavin & Gray 2016): F(4x4, 3x3) by default, 36 multiplies for each 4x4
 * block of outputs where direct convolution needs 144 (4x fewer), or
 * F(2x2, 3x3), 16 for 36 (2.25x). ResNet-20's training step is 88 %
 * convolutions and the direct kernels already run them at the core's FMA
 * rate, so only less arithmetic makes it faster.
 *
 * Forward:  Y = Aᵀ [ U ⊙ V ] A per output tile, U = G g Gᵀ (the weight,
 *   transformed once per call), V = Bᵀ d B (the tile's (m+2)x(m+2) input
 *   patch). Summing U ⊙ V over input channels is, for each of the P =
 *   (m+2)² transform-domain points, a GEMM [tiles x C] x [C x K], run here
 *   on blocks of tiles whose V and M = U ⊙ V stay in L2 between the steps.
 * Backward-data: the same computation on dy with the weight rotated by 180°
 *   and its channel axes swapped (padding 1 keeps the geometry).
 * Backward-filter: the transpose of the forward's bilinear form (Winograd's
 *   transposition principle): dW = Gᵀ [ Σ_tiles (A dy Aᵀ) ⊙ (Bᵀ d B) ] G,
 *   the sum over tiles being, per point, a GEMM [K x tiles] x [tiles x C]
 *   with a long reduction; partial sums are kept per fixed chunk of images and
 *   added in order, so dW does not depend on the number of threads.
 *
 * Scope (loom_conv_winograd_applies): NHWC, groups 1, 3x3, stride 1,
 * padding 1, dilation 1, channel counts multiples of 16 up to 128 (beyond,
 * the transformed weight no longer stays in L2), and the direct kernels'
 * instruction set AVX-512 or AVX2 (conv_winograd_x86.c has both).
 * Activations (x, y, dy, dx) may be f32, f16 or bf16: the kernels widen
 * them as they read them and round results as they store them, so a 16-bit
 * convolution costs no f32 copies and gives this path's f32 results
 * rounded once (the widening contract of mixed precision on the CPU).
 *
 * Numerics: f32 throughout, but the transforms' coefficients (F(4x4): up to
 * 8 and down to 1/24) grow the rounding of the sums: measured against
 * float64, errors reach about 73 x 2⁻²⁴ of the sum of the terms' magnitudes
 * for F(4x4, 3x3) and 3 x 2⁻²⁴ for F(2x2, 3x3), where a plain f32 sum stays
 * near 1-2 (tests/test_conv_winograd.c holds them to 256 and 16). That is
 * what cuDNN's and oneDNN's Winograd kernels trade for speed too; results
 * differ from the direct path's, and each is the same for any thread count.
 * LOOM_CONV_WINOGRAD=2 picks the smaller tile, =0 the direct kernels. */
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "loom/log.h"
#include "loom/ops.h"
#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/conv_winograd_kern.h"
#include "ops/cpu/cpu_util.h"
#include "core/sys.h"

#define WG_DEFAULT_TILE 4
static atomic_int g_tile = -1; /* -1: not read yet; 0 off; 2 or 4: output tile */

bool loom_conv_cpu_set_winograd(int tile) {
  if (tile != 0 && tile != 2 && tile != 4) return false;
  atomic_store(&g_tile, tile);
  return true;
}

int loom_conv_cpu_winograd_tile(void) {
  int t = atomic_load(&g_tile);
  if (t < 0) {
    /* LOOM_CONV_WINOGRAD=0 turns it off, =2 / =4 picks the tile (benchmarks
       time them side by side). */
    const char *e = getenv("LOOM_CONV_WINOGRAD");
    t = WG_DEFAULT_TILE;
    if (e && e[0]) {
      if (!strcmp(e, "0") || !strcmp(e, "2") || !strcmp(e, "4")) t = e[0] - '0';
      else loom_log_msg(LOOM_LOG_WARN, "LOOM_CONV_WINOGRAD='%s' is not 0, 2 or 4; using %d", e, WG_DEFAULT_TILE);
    }
    atomic_store(&g_tile, t);
  }
  return t;
}

bool loom_conv_cpu_winograd_enabled(void) { return loom_conv_cpu_winograd_tile() != 0; }

static _Atomic(const loom_wg_isa *) g_test_kernels = NULL;

bool loom_conv_winograd_test_kernels(const char *name) {
  const loom_wg_isa *is = NULL;
  if (name && !strcmp(name, "emu16")) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !loom_wg_isa_emu16.name) return false;
#endif
    is = &loom_wg_isa_emu16;
  } else if (name) {
    return false;
  }
  atomic_store(&g_test_kernels, is);
  return true;
}

/* The kernels of the direct path's instruction set (the same CPU checks and
 * LOOM_CPU_ISA / loom_conv_cpu_select_isa choice; tests may put the
 * emulated 16-lane ones in their place), or NULL. */
static const loom_wg_isa *cur_isa(void) {
  const char *n = loom_conv_cpu_isa_name();
  const loom_wg_isa *t = atomic_load(&g_test_kernels);
  if (t && strcmp(n, "none") != 0) return t;
  const loom_wg_isa *is = !strcmp(n, "avx512") ? &loom_wg_isa_avx512 : !strcmp(n, "avx2") ? &loom_wg_isa_avx2 : NULL;
  /* The AVX2 kernels convert f16 with F16C (every AVX2 CPU made has it). */
  if (is == &loom_wg_isa_avx2 && !loom_cpu_f16c()) return NULL;
  return is && is->name ? is : NULL;
}

bool loom_conv_winograd_applies(const loom_conv_geom *g) {
  if (!loom_conv_cpu_winograd_enabled() || loom_conv_cpu_gemm_forced() || !cur_isa()) return false;
  return g->nhwc && g->G == 1 && g->KH == 3 && g->KW == 3 && g->sh == 1 && g->sw == 1 && g->ph == 1 &&
         g->pw == 1 && g->dh == 1 && g->dw == 1 && g->C % 16 == 0 && g->O % 16 == 0 && g->C <= 128 &&
         g->O <= 128 && g->OH == g->H && g->OW == g->W && g->N > 0 && g->H > 0 && g->W > 0;
}

/* The transform matrices G (alpha x 3) of F(2x2, 3x3) and F(4x4, 3x3), in
 * double for the weight's and the filter gradient's transforms (scalar,
 * once per call). */
static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
static const double G4[6][3] = {{1.0 / 4, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
static double gmat(int m, int i, int j) { return m == 4 ? G4[i][j] : G2[i][j]; }

static loom_wg_geom wg_of(const loom_conv_geom *g, int m) {
  loom_wg_geom w = {g->N, g->H, g->W, (g->H + m - 1) / m, (g->W + m - 1) / m, 0};
  w.ntiles = w.N * w.TH * w.TW;
  return w;
}

/* Tiles per block: a multiple of 12 (the forward micro-kernels' heights)
 * such that V and M (P points x tiles x channels each) take about 384 KiB
 * of L2. */
static int64_t block_tiles(int64_t cin, int64_t cout, int P) {
  int64_t t = 98304 / P / (cin + cout) / 12 * 12;
  return t < 12 ? 12 : t > 96 ? 96 : t;
}

static int threads_for(int64_t work) {
  int nt = loom_get_num_threads();
  if (nt < 1) nt = 1;
  if (nt > work) nt = (int)(work > 0 ? work : 1);
  return nt;
}

/* u [P][cin][cout] = G g Gᵀ (alpha x alpha points, alpha = m + 2) for
 * g[i][j] = w at (ko, ci, i, j) where (ko, ci) = (k, c) for the forward,
 * and (c, k) rotated by 180° for the data gradient. w is [O][C][3][3]. */
static void weight_transform(const float *wt, int64_t O, int64_t C, bool data_grad, int m, float *u) {
  const int64_t cin = data_grad ? O : C, cout = data_grad ? C : O;
  const int a = m + 2;
  for (int64_t ci = 0; ci < cin; ci++)
    for (int64_t co = 0; co < cout; co++) {
      double g[3][3], t[6][3];
      const float *src = data_grad ? wt + (ci * C + co) * 9 : wt + (co * C + ci) * 9;
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) g[i][j] = data_grad ? src[(2 - i) * 3 + (2 - j)] : src[i * 3 + j];
      for (int i = 0; i < a; i++)
        for (int j = 0; j < 3; j++) t[i][j] = gmat(m, i, 0) * g[0][j] + gmat(m, i, 1) * g[1][j] + gmat(m, i, 2) * g[2][j];
      for (int i = 0; i < a; i++)
        for (int j = 0; j < a; j++)
          u[((i * a + j) * cin + ci) * cout + co] =
              (float)(t[i][0] * gmat(m, j, 0) + t[i][1] * gmat(m, j, 1) + t[i][2] * gmat(m, j, 2));
    }
}

/* out = conv3x3(in, u) + bias, ReLU'd if relu: in [N][H][W][cin], out
 * [N][H][W][cout], padding 1; blocks of tiles split between threads (each
 * output written by one tile: the same result for any thread count). */
static loom_status wg_conv(const loom_wg_geom *w, int m, loom_conv_buf in, int64_t cin, const float *u, int64_t cout,
                           const float *bias, bool relu, loom_conv_buf out, const char *what) {
  const loom_wg_isa *is = cur_isa();
  const int P = (m + 2) * (m + 2);
  const int64_t T = block_tiles(cin, cout, P), nblk = (w->ntiles + T - 1) / T;
  const int nt = threads_for(nblk);
  const int64_t per = P * T * (cin + cout);
  float *scratch = loom_conv_alloc_f(per * nt);
  if (!scratch)
    return loom_set_error(LOOM_ERR_OOM, "conv2d %s (Winograd): out of host memory for %lld floats of tile buffers",
                          what, (long long)(per * nt));
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int64_t b = 0; b < nblk; b++) {
    float *v = scratch + per * omp_get_thread_num(), *mm = v + P * T * cin;
    (m == 4 ? is->input4 : is->input)(w, in.p, in.dt, cin, b * T, T, v);
    for (int p = 0; p < P; p++)
      is->gemm(T, cout, cin, v + p * T * cin, cin, 1, u + p * cin * cout, cout, mm + p * T * cout, cout, false);
    (m == 4 ? is->output4 : is->output)(w, mm, cout, b * T, T, bias, relu, out.p, out.dt);
  }
  loom_sys_free(scratch);
  return LOOM_OK;
}

static loom_status wg_data_pass(const loom_conv_geom *g, loom_conv_buf in, const float *wt, const float *b,
                                loom_conv_buf out, bool data_grad) {
  const char *what = data_grad ? "backward-data" : "forward";
  if (!cur_isa()) return loom_set_error(LOOM_ERR_UNSUPPORTED, "conv2d %s: the Winograd path needs AVX2 or AVX-512", what);
  const int m = loom_conv_cpu_winograd_tile() == 2 ? 2 : 4;
  loom_wg_geom w = wg_of(g, m);
  float *u = loom_conv_alloc_f((m + 2) * (m + 2) * g->C * g->O);
  if (!u) return loom_set_error(LOOM_ERR_OOM, "conv2d %s (Winograd): out of host memory for the weight", what);
  weight_transform(wt, g->O, g->C, data_grad, m, u);
  loom_status st = data_grad ? wg_conv(&w, m, in, g->O, u, g->C, NULL, false, out, what)
                             : wg_conv(&w, m, in, g->C, u, g->O, b, g->act == LOOM_ACT_RELU, out, what);
  loom_sys_free(u);
  return st;
}

loom_status loom_conv_winograd_forward(const loom_conv_geom *g, loom_conv_buf x, const float *wt, const float *b,
                                       loom_conv_buf y) {
  return wg_data_pass(g, x, wt, b, y, false);
}

loom_status loom_conv_winograd_backward_data(const loom_conv_geom *g, loom_conv_buf dy, const float *wt,
                                             loom_conv_buf dx) {
  return wg_data_pass(g, dy, wt, NULL, dx, true);
}

/* Chunks of images whose transform-domain partial sums are added in order:
 * a function of N only, so dW is the same for any number of threads. */
static int64_t filter_chunks(int64_t N) { return N < 16 ? N : 16; }

loom_status loom_conv_winograd_backward_filter(const loom_conv_geom *g, loom_conv_buf x, loom_conv_buf dy, float *dw) {
  const loom_wg_isa *is = cur_isa();
  if (!is) return loom_set_error(LOOM_ERR_UNSUPPORTED, "conv2d backward-filter: the Winograd path needs AVX2 or AVX-512");
  const int m = loom_conv_cpu_winograd_tile() == 2 ? 2 : 4, a = m + 2, P = a * a;
  loom_wg_geom w = wg_of(g, m);
  const int64_t C = g->C, K = g->O, T = block_tiles(C, K, P);
  const int64_t nch = filter_chunks(w.N), per_img = w.TH * w.TW;
  const int nt = threads_for(nch);
  const int64_t per = P * T * (C + K), acc_n = P * K * C;
  float *scratch = loom_conv_alloc_f(per * nt);
  float *acc = loom_conv_alloc_f(acc_n * nch);
  if (!scratch || !acc) {
    loom_sys_free(scratch);
    loom_sys_free(acc);
    return loom_set_error(LOOM_ERR_OOM, "conv2d backward-filter (Winograd): out of host memory for %lld floats of buffers",
                          (long long)(per * nt + acc_n * nch));
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int64_t ch = 0; ch < nch; ch++) {
    float *v = scratch + per * omp_get_thread_num(), *e = v + P * T * C, *ac = acc + acc_n * ch;
    /* The chunk's tiles only: those of the next chunk read as zero rows. */
    loom_wg_geom wc = w;
    wc.ntiles = (w.N * (ch + 1) / nch) * per_img;
    const int64_t t_begin = (w.N * ch / nch) * per_img;
    for (int64_t t0 = t_begin; t0 < wc.ntiles; t0 += T) {
      (m == 4 ? is->input4 : is->input)(&wc, x.p, x.dt, C, t0, T, v);
      (m == 4 ? is->dy4 : is->dy)(&wc, dy.p, dy.dt, K, t0, T, e);
      /* ac[p] [K x C] (+)= e[p]ᵀ [K x T] x v[p] [T x C] */
      for (int p = 0; p < P; p++)
        is->gemm(K, C, T, e + p * T * K, 1, K, v + p * T * C, C, ac + p * K * C, C, t0 != t_begin);
    }
  }
  /* Sum the chunks in order, then dW = Gᵀ â G. */
  for (int64_t ch = 1; ch < nch; ch++)
    for (int64_t i = 0; i < acc_n; i++) acc[i] += acc[acc_n * ch + i];
  for (int64_t k = 0; k < K; k++)
    for (int64_t c = 0; c < C; c++) {
      double t[3][6];
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < a; j++) {
          double sum = 0;
          for (int q = 0; q < a; q++) sum += gmat(m, q, i) * acc[((q * a + j) * K + k) * C + c];
          t[i][j] = sum;
        }
      float *o = dw + (k * C + c) * 9;
      for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
          double sum = 0;
          for (int q = 0; q < a; q++) sum += t[i][q] * gmat(m, q, j);
          o[i * 3 + j] = (float)sum;
        }
    }
  loom_sys_free(scratch);
  loom_sys_free(acc);
  return LOOM_OK;
}
