/* test_conv_winograd.c — the Winograd F(4x4, 3x3) and F(2x2, 3x3) convolution path
 * (lib/ops/cpu/conv_winograd.c) through the public conv2d op and its
 * backward, on channels-last f32 tensors: ResNet-20's three stage shapes at
 * their real spatial sizes, odd sizes (partial tiles at the right and
 * bottom edges), a one-row image (the rows above and below are padding), more
 * than 16 images (the filter gradient's fixed chunks), 128 channels (the
 * largest it takes) and unequal channel counts both ways.
 *
 * Each case must take the Winograd path where the CPU has AVX2 or AVX-512
 * (ctest repeats this file with LOOM_CPU_ISA=avx2 and =scalar: under
 * scalar it must fall back, with the same results), and y, dX, dW and db
 * must match a float64 reference within f32 rounding of the sums (the same
 * bound test_conv_dispatch holds every path to) — with the CPU's kernels,
 * and with the AVX-512 kernels' code emulated on 16-lane generic vectors
 * (so AVX2-only machines check the 16-lane blocking too). The results must not
 * depend on the number of threads (bit for bit), and turning the path off
 * must hand the same geometry to the direct kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/conv.h"
#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/cpu_isa.h"
#include "support/testkit.h"

TestSuite(conv_winograd, .fini = tk_teardown);

typedef struct wcase {
  int64_t N, C, H, W, O;
} wcase;

static const wcase CASES[] = {
    {4, 16, 32, 32, 16},  /* ResNet-20 stage 1 */
    {4, 32, 16, 16, 32},  /* stage 2 */
    {8, 64, 8, 8, 64},    /* stage 3 */
    {17, 16, 7, 9, 48},   /* odd sizes, N > 16 chunks, O > C */
    {2, 128, 5, 6, 128},  /* the widest it takes */
    {3, 16, 1, 2, 16},    /* one row: the taps above and below are padding */
    {1, 48, 3, 2, 16},    /* O < C, a single partial tile row */
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

/* float64 reference, NCHW, 3x3, stride 1, padding 1. */
static void ref_forward(const wcase *c, const double *x, const double *w, const double *b, bool relu, double *y) {
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t o = 0; o < c->O; o++)
      for (int64_t h = 0; h < c->H; h++)
        for (int64_t q = 0; q < c->W; q++) {
          double acc = b ? b[o] : 0;
          for (int64_t i = 0; i < 3; i++)
            for (int64_t j = 0; j < 3; j++) {
              int64_t ih = h - 1 + i, iw = q - 1 + j;
              if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
              for (int64_t ci = 0; ci < c->C; ci++)
                acc += x[((n * c->C + ci) * c->H + ih) * c->W + iw] * w[((o * c->C + ci) * 3 + i) * 3 + j];
            }
          y[((n * c->O + o) * c->H + h) * c->W + q] = relu && acc < 0 ? 0 : acc;
        }
}

static void ref_backward(const wcase *c, const double *x, const double *w, const double *dz, double *dx, double *dw,
                         double *db) {
  memset(dx, 0, (size_t)(c->N * c->C * c->H * c->W) * sizeof *dx);
  memset(dw, 0, (size_t)(c->O * c->C * 9) * sizeof *dw);
  memset(db, 0, (size_t)c->O * sizeof *db);
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t o = 0; o < c->O; o++)
      for (int64_t h = 0; h < c->H; h++)
        for (int64_t q = 0; q < c->W; q++) {
          double g = dz[((n * c->O + o) * c->H + h) * c->W + q];
          db[o] += g;
          for (int64_t i = 0; i < 3; i++)
            for (int64_t j = 0; j < 3; j++) {
              int64_t ih = h - 1 + i, iw = q - 1 + j;
              if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
              for (int64_t ci = 0; ci < c->C; ci++) {
                int64_t xi = ((n * c->C + ci) * c->H + ih) * c->W + iw, wi = ((o * c->C + ci) * 3 + i) * 3 + j;
                dx[xi] += g * w[wi];
                dw[wi] += g * x[xi];
              }
            }
        }
}

static double atol_for(int64_t K) { return 2e-6 * sqrt((double)K + 1); }

/* Winograd's error bound: |got - exact| <= kappa * 2^-24 * mag, mag the
 * same sum over magnitudes (|x|·|w| for y, |dz|·|w| for dX, |dz|·|x| for
 * dW, there the largest of a filter's nine taps). The transforms' coefficients grow the f32 rounding of the sums by a
 * factor kappa: F(2x2, 3x3) up to 16 (about 3 seen), F(4x4, 3x3)
 * (coefficients up to 8 and 1/24) up to 256 (about 73 seen); the largest
 * ratio of each case is logged. */
static double kappa_for(int tile) { return tile == 4 ? 256.0 : 16.0; }

static double check_bound(const double *got, const double *want, const double *mag, int64_t n, double kappa,
                          const char *what) {
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double err = fabs(got[i] - want[i]), unit = ldexp(mag[i], -24);
    cr_assert(err <= kappa * unit + 1e-30, "%s: element %lld is %.9g, exact %.9g: error %.3g = %.1f x 2^-24 x %.4g "
              "(bound %.0f)", what, (long long)i, got[i], want[i], err, unit > 0 ? err / unit : 0.0, mag[i], kappa);
    if (unit > 0 && err / unit > worst) worst = err / unit;
  }
  return worst;
}

static double *absv(const double *v, int64_t n) {
  double *a = malloc((size_t)n * sizeof *a);
  for (int64_t i = 0; i < n; i++) a[i] = fabs(v[i]);
  return a;
}

static loom_conv_path path_of(loom_tensor *x, loom_tensor *w, loom_tensor *b, bool relu) {
  int64_t i[12] = {0};
  i[LOOM_CONV_I_STRIDE_H] = i[LOOM_CONV_I_STRIDE_W] = 1;
  i[LOOM_CONV_I_PAD_H] = i[LOOM_CONV_I_PAD_W] = 1;
  i[LOOM_CONV_I_DIL_H] = i[LOOM_CONV_I_DIL_W] = 1;
  i[LOOM_CONV_I_GROUPS] = 1, i[LOOM_CONV_I_ACT] = relu ? LOOM_ACT_RELU : LOOM_ACT_NONE;
  loom_conv_geom g;
  cr_assert_eq(loom_conv_geom_make("conv2d", x, w, b, i, &g), LOOM_OK, "%s", loom_last_error());
  return loom_conv_cpu_choose(&g);
}

typedef struct run_out {
  double *y, *dx, *dw, *db;
  loom_conv_path path;
} run_out;

/* conv2d forward and backward on channels-last copies of the values. */
static run_out run(const wcase *c, const double *vx, const double *vw, const double *vb, const double *vg, bool relu) {
  int64_t sx[4] = {c->N, c->C, c->H, c->W}, sw[4] = {c->O, c->C, 3, 3}, sy[4] = {c->N, c->O, c->H, c->W};
  run_out r;
  loom_scope_begin();
  loom_tensor *x = tk_tensor(vx, 4, sx, LOOM_F32, loom_cpu()), *w = tk_tensor(vw, 4, sw, LOOM_F32, loom_cpu());
  loom_tensor *b = vb ? tk_tensor(vb, 1, &c->O, LOOM_F32, loom_cpu()) : NULL;
  loom_set_requires_grad(x, true);
  loom_set_requires_grad(w, true);
  if (b) loom_set_requires_grad(b, true);
  loom_tensor *xin = loom_to_memory_format(x, LOOM_FORMAT_NHWC);
  loom_conv2d_options o;
  loom_conv2d_options_init(&o);
  o.padding[0] = o.padding[1] = 1;
  o.act = relu ? LOOM_ACT_RELU : LOOM_ACT_NONE;
  r.path = path_of(xin, w, b, relu);
  loom_tensor *y = loom_conv2d(xin, w, b, &o);
  cr_assert_not_null(y, "conv2d: %s", loom_last_error());
  loom_tensor *gy = loom_to_memory_format(tk_tensor(vg, 4, sy, LOOM_F32, loom_cpu()), LOOM_FORMAT_NHWC);
  cr_assert_eq(loom_backward_with(y, gy), LOOM_OK, "backward: %s", loom_last_error());
  r.y = tk_read(y);
  r.dx = tk_read(loom_grad(x));
  r.dw = tk_read(loom_grad(w));
  r.db = b ? tk_read(loom_grad(b)) : NULL;
  loom_scope_end();
  return r;
}

static void free_out(run_out *r) { free(r->y), free(r->dx), free(r->dw), free(r->db); }

static bool same_bits(const double *a, const double *b, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], sizeof a[i]) != 0) return false;
  return true;
}

/* Every case against float64, and 1 thread against 2, with the kernels in
 * force (kern names them in messages). */
static void check_cases(const char *kern, double kappa) {
  const bool has_isa = loom_cpu_isa_level_now() != LOOM_CPU_ISA_SCALAR;
  tk_seed(4242);
  for (int k = 0; k < NCASES; k++) {
    const wcase *c = &CASES[k];
    const bool relu = k % 2 == 1, bias = k % 3 != 2;
    int64_t nx = c->N * c->C * c->H * c->W, nw = c->O * c->C * 9, ny = c->N * c->O * c->H * c->W;
    double *vx = tk_rand_vals(nx, -1, 1, 0, LOOM_F32), *vw = tk_rand_vals(nw, -1, 1, 0, LOOM_F32);
    double *vb = bias ? tk_rand_vals(c->O, -1, 1, 0, LOOM_F32) : NULL, *vg = tk_rand_vals(ny, -1, 1, 0, LOOM_F32);
    char what[200];
    snprintf(what, sizeof what, "%s/%s: N=%lld C=%lld %lldx%lld -> O=%lld bias=%d relu=%d", loom_cpu_isa(), kern,
             (long long)c->N, (long long)c->C, (long long)c->H, (long long)c->W, (long long)c->O, bias, relu);

    loom_set_num_threads(2);
    run_out two = run(c, vx, vw, vb, vg, relu);
    cr_assert_eq(two.path, has_isa ? LOOM_CONV_PATH_WINOGRAD : LOOM_CONV_PATH_GEMM, "%s: path %s", what,
                 loom_conv_path_name(two.path));

    double *want = malloc((size_t)ny * sizeof *want), *dz = malloc((size_t)ny * sizeof *dz);
    double *rdx = malloc((size_t)nx * sizeof *rdx), *rdw = malloc((size_t)nw * sizeof *rdw);
    double *rdb = malloc((size_t)c->O * sizeof *rdb);
    ref_forward(c, vx, vw, vb, relu, want);
    double *ax = absv(vx, nx), *aw = absv(vw, nw), *ab = vb ? absv(vb, c->O) : NULL;
    double *my = malloc((size_t)ny * sizeof *my), *mdx = malloc((size_t)nx * sizeof *mdx);
    double *mdw = malloc((size_t)nw * sizeof *mdw), *mdb = malloc((size_t)c->O * sizeof *mdb);
    ref_forward(c, ax, aw, ab, false, my);
    char w2[260];
    snprintf(w2, sizeof w2, "%s y", what);
    /* (A fused ReLU moves no value further from the exact one.) */
    double wy = check_bound(two.y, want, my, ny, kappa, w2);
    /* The ReLU mask is the op's own y > 0 (no flips at ties). */
    for (int64_t i = 0; i < ny; i++) dz[i] = relu && !(two.y[i] > 0) ? 0 : vg[i];
    ref_backward(c, vx, vw, dz, rdx, rdw, rdb);
    double *adz = absv(dz, ny);
    ref_backward(c, ax, aw, adz, mdx, mdw, mdb);
    /* A filter gradient's nine taps share their transform-domain sums, so
       each carries rounding from the others (a tap that never sees data, as
       the top row on a one-row image, is exactly 0 yet comes out as
       rounding): its magnitude is the largest of its nine. */
    for (int64_t kc = 0; kc < c->O * c->C; kc++) {
      double mx = 0;
      for (int t = 0; t < 9; t++) mx = mdw[kc * 9 + t] > mx ? mdw[kc * 9 + t] : mx;
      for (int t = 0; t < 9; t++) mdw[kc * 9 + t] = mx;
    }
    snprintf(w2, sizeof w2, "%s dX", what);
    double wdx = check_bound(two.dx, rdx, mdx, nx, kappa, w2);
    snprintf(w2, sizeof w2, "%s dW", what);
    double wdw = check_bound(two.dw, rdw, mdw, nw, kappa, w2);
    cr_log_info("%s: largest error / (2^-24 x magnitude): y %.1f, dX %.1f, dW %.1f (bound %.0f)", what, wy, wdx, wdw,
                kappa);
    free(ax), free(aw), free(ab), free(my), free(mdx), free(mdw), free(mdb), free(adz);
    if (bias) {
      snprintf(w2, sizeof w2, "%s db", what);
      tk_assert_close(two.db, rdb, c->O, atol_for(c->N * c->H * c->W), 1e-5, w2);
    }

    loom_set_num_threads(1);
    run_out one = run(c, vx, vw, vb, vg, relu);
    cr_assert(same_bits(one.y, two.y, ny), "%s: y differs between 1 and 2 threads", what);
    cr_assert(same_bits(one.dx, two.dx, nx), "%s: dX differs between 1 and 2 threads", what);
    cr_assert(same_bits(one.dw, two.dw, nw), "%s: dW differs between 1 and 2 threads", what);
    loom_set_num_threads(0);

    free_out(&one), free_out(&two);
    free(vx), free(vw), free(vb), free(vg), free(want), free(dz), free(rdx), free(rdw), free(rdb);
  }
}

/* Both tile sizes: F(4x4, 3x3) (the default) and F(2x2, 3x3). */
static void check_both_tiles(const char *kern) {
  const int def = loom_conv_cpu_winograd_tile();
  cr_assert_eq(def, 4, "F(4x4, 3x3) is the default");
  for (int tile = 4; tile >= 2; tile -= 2) {
    char label[64];
    snprintf(label, sizeof label, "%s F(%dx%d,3x3)", kern, tile, tile);
    loom_conv_cpu_set_winograd(tile);
    check_cases(label, kappa_for(tile));
  }
  loom_conv_cpu_set_winograd(def);
}

Test(conv_winograd, matches_float64_at_resnet_shapes_for_any_thread_count, .timeout = 600) {
  check_both_tiles(loom_conv_cpu_isa_name());
  tk_leak_check();
}

/* The AVX-512 kernels' code (16 lanes: their blocking, micro-kernel choice
 * and transforms) on generic vectors, so that a CPU without AVX-512 checks
 * it too; on AVX-512 CPUs the test above runs the real ones. */
Test(conv_winograd, the_16_lane_kernels_emulated, .timeout = 600) {
  if (loom_cpu_isa_level_now() == LOOM_CPU_ISA_SCALAR || !loom_conv_winograd_test_kernels("emu16"))
    cr_skip_test("no AVX2 here (the emulation is compiled for it)");
  check_both_tiles("emu16");
  loom_conv_winograd_test_kernels(NULL);
  tk_leak_check();
}

Test(conv_winograd, turned_off_the_direct_kernels_take_the_geometry) {
  const bool has_isa = loom_cpu_isa_level_now() != LOOM_CPU_ISA_SCALAR;
  const wcase c = {2, 32, 6, 6, 32};
  int64_t nx = c.N * c.C * c.H * c.W, nw = c.O * c.C * 9, ny = c.N * c.O * c.H * c.W;
  tk_seed(7);
  double *vx = tk_rand_vals(nx, -1, 1, 0, LOOM_F32), *vw = tk_rand_vals(nw, -1, 1, 0, LOOM_F32);
  double *vg = tk_rand_vals(ny, -1, 1, 0, LOOM_F32);
  cr_assert_eq(loom_cpu_winograd(), 4, "F(4x4, 3x3) by default");
  run_out on = run(&c, vx, vw, NULL, vg, false);
  cr_assert_eq(loom_set_cpu_winograd(0), LOOM_OK);
  cr_assert_eq(loom_cpu_winograd(), 0);
  run_out off = run(&c, vx, vw, NULL, vg, false);
  cr_assert_eq(loom_set_cpu_winograd(3), LOOM_ERR_INVALID_ARG, "tile 3");
  cr_assert(strstr(loom_last_error(), "tile 3 is not 4"), "%s", loom_last_error());
  cr_assert_eq(loom_cpu_winograd(), 0, "a rejected tile changes nothing");
  cr_assert_eq(loom_set_cpu_winograd(4), LOOM_OK);
  cr_assert_eq(on.path, has_isa ? LOOM_CONV_PATH_WINOGRAD : LOOM_CONV_PATH_GEMM);
  cr_assert_eq(off.path, has_isa ? LOOM_CONV_PATH_DIRECT : LOOM_CONV_PATH_GEMM);
  /* Two different summation orders of the same sums (F(4x4, 3x3): 16x the
     f32 bounds, as test_conv_dispatch). */
  const double wf = has_isa ? 16 : 1;
  tk_assert_close(on.y, off.y, ny, wf * atol_for(c.C * 9), wf * 1e-5, "y: Winograd vs direct");
  tk_assert_close(on.dx, off.dx, nx, wf * atol_for(c.O * 9), wf * 1e-5, "dX: Winograd vs direct");
  tk_assert_close(on.dw, off.dw, nw, wf * atol_for(c.N * c.H * c.W), wf * 1e-5, "dW: Winograd vs direct");
  free_out(&on), free_out(&off);
  free(vx), free(vw), free(vg);
  tk_leak_check();
}

Test(conv_winograd, takes_only_what_it_computes) {
  if (loom_cpu_isa_level_now() == LOOM_CPU_ISA_SCALAR) cr_skip_test("no AVX2: the path is not compiled in here");
  loom_scope_begin();
  int64_t sx[4] = {1, 16, 8, 8}, sw[4] = {16, 16, 3, 3}, sw24[4] = {24, 16, 3, 3}, sx8[4] = {1, 8, 8, 8};
  int64_t sw8[4] = {16, 8, 3, 3};
  loom_tensor *x = loom_zeros(4, sx, LOOM_F32, loom_cpu()), *w = loom_zeros(4, sw, LOOM_F32, loom_cpu());
  loom_tensor *xh = loom_to_memory_format(x, LOOM_FORMAT_NHWC);
  cr_assert_eq(path_of(xh, w, NULL, false), LOOM_CONV_PATH_WINOGRAD);
  cr_assert_neq(path_of(x, w, NULL, false), LOOM_CONV_PATH_WINOGRAD, "NCHW");
  cr_assert_neq(path_of(xh, loom_zeros(4, sw24, LOOM_F32, loom_cpu()), NULL, false), LOOM_CONV_PATH_WINOGRAD,
                "24 output channels");
  cr_assert_neq(path_of(loom_to_memory_format(loom_zeros(4, sx8, LOOM_F32, loom_cpu()), LOOM_FORMAT_NHWC),
                        loom_zeros(4, sw8, LOOM_F32, loom_cpu()), NULL, false),
                LOOM_CONV_PATH_WINOGRAD, "8 input channels");
  /* Stride 2 and padding 0 are other geometries: the direct kernels'. */
  int64_t i[12] = {0};
  i[LOOM_CONV_I_STRIDE_H] = i[LOOM_CONV_I_STRIDE_W] = 2;
  i[LOOM_CONV_I_PAD_H] = i[LOOM_CONV_I_PAD_W] = 1;
  i[LOOM_CONV_I_DIL_H] = i[LOOM_CONV_I_DIL_W] = 1;
  i[LOOM_CONV_I_GROUPS] = 1;
  loom_conv_geom g;
  cr_assert_eq(loom_conv_geom_make("conv2d", xh, w, NULL, i, &g), LOOM_OK);
  cr_assert_eq(loom_conv_cpu_choose(&g), LOOM_CONV_PATH_DIRECT, "stride 2");
  i[LOOM_CONV_I_STRIDE_H] = i[LOOM_CONV_I_STRIDE_W] = 1;
  i[LOOM_CONV_I_PAD_H] = i[LOOM_CONV_I_PAD_W] = 0;
  cr_assert_eq(loom_conv_geom_make("conv2d", xh, w, NULL, i, &g), LOOM_OK);
  cr_assert_eq(loom_conv_cpu_choose(&g), LOOM_CONV_PATH_DIRECT, "padding 0");
  loom_scope_end();
  tk_leak_check();
}

/* LOOM_CONV_WINOGRAD is read at first use (each Criterion test is a fresh
 * process); a value other than 0, 2 or 4 is warned about and ignored. */
Test(conv_winograd, env_value) {
  setenv("LOOM_CONV_WINOGRAD", "2", 1);
  cr_assert_eq(loom_cpu_winograd(), 2);
}

Test(conv_winograd, env_bad_value_keeps_the_default) {
  setenv("LOOM_CONV_WINOGRAD", "yes", 1);
  cr_assert_eq(loom_cpu_winograd(), 4);
}
