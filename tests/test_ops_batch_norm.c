/* test_ops_batch_norm.c — batch norm against a float64 reference: training
 * (batch statistics, running mean / Bessel-corrected running variance with
 * momentum) and eval mode, affine on and off, the fused ReLU, NCHW and NHWC
 * (and 2-D / 3-D inputs), f32 / f16 / bf16 data with f32 statistics;
 * gradients against the float64 formulas and by finite differences; PyTorch's
 * own numbers (tests/ref/batch_norm_torch.py); running-stat versions for
 * autograd; thread-count independence; and the error messages. */
#include <math.h>
#include <stdlib.h>

#include "support/testkit.h"

/* ---- float64 reference ------------------------------------------------------------- */

typedef struct bn_ref {
  double mean[64], invstd[64];
} bn_ref;

/* x, y logical row-major [N, C, S]. rm / rv updated in place in training. */
static void ref_forward(const double *x, int64_t N, int64_t C, int64_t S, const double *w, const double *b,
                        bool training, double *rm, double *rv, double mom, double eps, bool relu, double *y,
                        bn_ref *r) {
  double M = (double)(N * S);
  for (int64_t c = 0; c < C; c++) {
    double mean, var;
    if (training) {
      double s = 0, q = 0;
      for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < S; i++) s += x[(n * C + c) * S + i];
      mean = s / M;
      for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < S; i++) q += pow(x[(n * C + c) * S + i] - mean, 2);
      var = q / M;
      if (rm) {
        rm[c] = (1 - mom) * rm[c] + mom * mean;
        rv[c] = (1 - mom) * rv[c] + mom * var * M / (M - 1);
      }
    } else {
      mean = rm[c];
      var = rv[c];
    }
    double is = 1 / sqrt(var + eps);
    r->mean[c] = mean;
    r->invstd[c] = is;
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < S; i++) {
        int64_t k = (n * C + c) * S + i;
        double v = (x[k] - mean) * is * (w ? w[c] : 1) + (b ? b[c] : 0);
        y[k] = relu && v <= 0 ? 0 : v;
      }
  }
}

static void ref_backward(const double *x, const double *gy, int64_t N, int64_t C, int64_t S, const double *w,
                         const double *b, bool training, bool relu, const bn_ref *r, double *dx, double *dw,
                         double *db) {
  double M = (double)(N * S);
  for (int64_t c = 0; c < C; c++) {
    double wc = w ? w[c] : 1, bc = b ? b[c] : 0, sg = 0, sgx = 0;
    for (int pass = 0; pass < 2; pass++)
      for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < S; i++) {
          int64_t k = (n * C + c) * S + i;
          double xh = (x[k] - r->mean[c]) * r->invstd[c];
          double g = relu && xh * wc + bc <= 0 ? 0 : gy[k];
          if (pass == 0) {
            sg += g;
            sgx += g * xh;
          } else {
            dx[k] = training ? wc * r->invstd[c] * (g - sg / M - xh * sgx / M) : wc * r->invstd[c] * g;
          }
        }
    if (dw) dw[c] = sgx;
    if (db) db[c] = sg;
  }
}

/* ---- helpers ------------------------------------------------------------------------------ */

static loom_tensor *in_format(loom_tensor *t, loom_memory_format f) {
  return f == LOOM_FORMAT_NHWC ? loom_to_memory_format(t, f) : t;
}

static double tol_for(loom_dtype dt) { return dt == LOOM_F32 ? 2e-5 : dt == LOOM_F16 ? 4e-3 : 3e-2; }

static int64_t inner_of(int nd, const int64_t *sh) {
  int64_t s = 1;
  for (int d = 2; d < nd; d++) s *= sh[d];
  return s;
}

/* x values with a per-channel offset (|mean| >> std for some channels). */
static double *bn_vals(int nd, const int64_t *sh, loom_dtype dt) {
  int64_t n = tk_numel(nd, sh), S = inner_of(nd, sh);
  double *v = malloc((size_t)n * sizeof *v);
  for (int64_t k = 0; k < n; k++) {
    int64_t c = (k / S) % sh[1];
    v[k] = tk_round(tk_uniform(-2, 2) * (1 + 0.5 * (double)c) + 3.0 * (double)c, dt);
  }
  return v;
}

typedef struct fwd_case {
  int nd;
  int64_t sh[4];
  loom_memory_format fmt;
  loom_dtype dt;
  bool affine;
  int act;
} fwd_case;

static void check_training_forward(loom_device dev, fwd_case k) {
  int64_t N = k.sh[0], C = k.sh[1], S = inner_of(k.nd, k.sh), n = tk_numel(k.nd, k.sh);
  double *xv = bn_vals(k.nd, k.sh, k.dt);
  double *w = tk_rand_vals(C, 0.5, 1.5, 0, LOOM_F32), *b = tk_rand_vals(C, -0.5, 0.5, 0, LOOM_F32);
  double *rm = tk_rand_vals(C, -1, 1, 0, LOOM_F32), *rv = tk_rand_vals(C, 0.5, 2, 0, LOOM_F32);
  loom_tensor *x = in_format(tk_tensor(xv, k.nd, k.sh, k.dt, dev), k.fmt);
  loom_tensor *trm = tk_tensor(rm, 1, &C, LOOM_F32, dev), *trv = tk_tensor(rv, 1, &C, LOOM_F32, dev);
  loom_tensor *tw = k.affine ? tk_tensor(w, 1, &C, LOOM_F32, dev) : NULL;
  loom_tensor *tb = k.affine ? tk_tensor(b, 1, &C, LOOM_F32, dev) : NULL;
  loom_batch_norm_options o;
  loom_batch_norm_options_init(&o);
  o.act = k.act;
  o.momentum = 0.25;
  loom_tensor *y = loom_batch_norm(x, trm, trv, tw, tb, &o);
  double *want = malloc((size_t)n * sizeof *want);
  bn_ref r;
  ref_forward(xv, N, C, S, k.affine ? w : NULL, k.affine ? b : NULL, true, rm, rv, 0.25, 1e-5, k.act == LOOM_ACT_RELU,
              want, &r);
  char what[160];
  snprintf(what, sizeof what, "batch_norm train %dd %s %s affine=%d act=%d", k.nd,
           k.fmt == LOOM_FORMAT_NHWC ? "NHWC" : "NCHW", loom_dtype_name(k.dt), k.affine, k.act);
  double t = tol_for(k.dt);
  tk_assert_tensor(y, k.nd, k.sh, k.dt, want, t, t, what);
  cr_assert_eq(loom_tensor_memory_format(y), loom_tensor_memory_format(x), "%s: output format %d, input %d", what,
               loom_tensor_memory_format(y), loom_tensor_memory_format(x));
  /* Running statistics: f32, computed from f32 statistics whatever x's dtype. */
  tk_assert_tensor(trm, 1, &C, LOOM_F32, rm, 1e-5, 1e-5, "running_mean");
  tk_assert_tensor(trv, 1, &C, LOOM_F32, rv, 1e-5, 1e-5, "running_var (unbiased)");
  free(xv), free(w), free(b), free(rm), free(rv), free(want);
}

DEVICE_TEST(batch_norm, training_forward_matches_reference) {
  tk_seed(101);
  loom_dtype dts[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
  for (int f = 0; f < 2; f++)
    for (int d = 0; d < 3; d++)
      for (int affine = 0; affine < 2; affine++)
        for (int act = 0; act < 2; act++) {
          fwd_case k = {4, {4, 3, 5, 6}, f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW, dts[d], affine, act};
          check_training_forward(dev, k);
        }
}

DEVICE_TEST(batch_norm, training_forward_other_ranks_and_sizes) {
  tk_seed(102);
  /* [N, C] and [N, C, 1, 1] (channels innermost), [N, C, L], a C that is not
   * a multiple of the vector width, and tensors large enough for the
   * multithreaded paths (more rows than tiles, several row blocks). */
  fwd_case ks[] = {
      {2, {7, 5}, LOOM_FORMAT_NCHW, LOOM_F32, true, LOOM_ACT_NONE},
      {2, {9, 3}, LOOM_FORMAT_NCHW, LOOM_F16, true, LOOM_ACT_RELU},
      {3, {3, 4, 10}, LOOM_FORMAT_NCHW, LOOM_F32, true, LOOM_ACT_RELU},
      {4, {5, 6, 1, 1}, LOOM_FORMAT_NHWC, LOOM_F32, true, LOOM_ACT_NONE},
      {4, {2, 19, 3, 5}, LOOM_FORMAT_NHWC, LOOM_BF16, false, LOOM_ACT_RELU},
      {4, {8, 16, 16, 17}, LOOM_FORMAT_NCHW, LOOM_F32, true, LOOM_ACT_RELU},
      {4, {8, 16, 16, 17}, LOOM_FORMAT_NHWC, LOOM_F32, true, LOOM_ACT_RELU},
      {4, {4, 40, 17, 9}, LOOM_FORMAT_NHWC, LOOM_F16, true, LOOM_ACT_NONE},
  };
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) check_training_forward(dev, ks[i]);
}

DEVICE_TEST(batch_norm, eval_uses_running_stats) {
  tk_seed(103);
  int64_t sh[4] = {3, 4, 3, 5}, C = 4, n = 180;
  for (int f = 0; f < 2; f++)
    for (int act = 0; act < 2; act++) {
      double *xv = bn_vals(4, sh, LOOM_F32), *w = tk_rand_vals(C, 0.5, 1.5, 0, LOOM_F32);
      double *b = tk_rand_vals(C, -0.5, 0.5, 0, LOOM_F32), *rm = tk_rand_vals(C, -1, 5, 0, LOOM_F32);
      double *rv = tk_rand_vals(C, 0.5, 2, 0, LOOM_F32);
      loom_tensor *x = in_format(tk_tensor(xv, 4, sh, LOOM_F32, dev), f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW);
      loom_tensor *trm = tk_tensor(rm, 1, &C, LOOM_F32, dev), *trv = tk_tensor(rv, 1, &C, LOOM_F32, dev);
      loom_batch_norm_options o;
      loom_batch_norm_options_init(&o);
      o.training = false;
      o.act = act;
      o.eps = 1e-3;
      loom_tensor *y = loom_batch_norm(x, trm, trv, tk_tensor(w, 1, &C, LOOM_F32, dev), tk_tensor(b, 1, &C, LOOM_F32, dev), &o);
      double want[180];
      bn_ref r;
      ref_forward(xv, 3, C, 15, w, b, false, rm, rv, 0, 1e-3, act, want, &r);
      tk_assert_tensor(y, 4, sh, LOOM_F32, want, 2e-5, 2e-5, "batch_norm eval");
      tk_assert_tensor(trm, 1, &C, LOOM_F32, rm, 0, 0, "eval leaves running_mean alone");
      tk_assert_tensor(trv, 1, &C, LOOM_F32, rv, 0, 0, "eval leaves running_var alone");
      (void)n;
      free(xv), free(w), free(b), free(rm), free(rv);
    }
}

DEVICE_TEST(batch_norm, training_without_running_stats) {
  tk_seed(104);
  int64_t sh[3] = {4, 2, 6}, n = 48;
  double *xv = bn_vals(3, sh, LOOM_F32), want[48];
  bn_ref r;
  ref_forward(xv, 4, 2, 6, NULL, NULL, true, NULL, NULL, 0.1, 1e-5, false, want, &r);
  tk_assert_tensor(loom_batch_norm(tk_tensor(xv, 3, sh, LOOM_F32, dev), NULL, NULL, NULL, NULL, NULL), 3, sh, LOOM_F32,
                   want, 2e-5, 2e-5, "batch_norm, no running stats, default options");
  (void)n;
  free(xv);
}

/* ---- gradients ------------------------------------------------------------------------------ */

static void check_backward(loom_device dev, fwd_case k, bool training) {
  int64_t N = k.sh[0], C = k.sh[1], S = inner_of(k.nd, k.sh), n = tk_numel(k.nd, k.sh);
  double *xv = bn_vals(k.nd, k.sh, k.dt), *gv = tk_rand_vals(n, -1, 1, 0, k.dt);
  double *w = tk_rand_vals(C, 0.5, 1.5, 0, LOOM_F32), *b = tk_rand_vals(C, -0.5, 0.5, 0, LOOM_F32);
  double *rm = tk_rand_vals(C, -1, 5, 0, LOOM_F32), *rv = tk_rand_vals(C, 0.5, 2, 0, LOOM_F32);
  loom_tensor *x = tk_tensor(xv, k.nd, k.sh, k.dt, dev);
  loom_set_requires_grad(x, true);
  loom_tensor *tw = tk_tensor(w, 1, &C, LOOM_F32, dev), *tb = tk_tensor(b, 1, &C, LOOM_F32, dev);
  if (k.affine) {
    loom_set_requires_grad(tw, true);
    loom_set_requires_grad(tb, true);
  }
  loom_batch_norm_options o;
  loom_batch_norm_options_init(&o);
  o.training = training;
  o.act = k.act;
  loom_tensor *y = loom_batch_norm(in_format(x, k.fmt), tk_tensor(rm, 1, &C, LOOM_F32, dev),
                                   tk_tensor(rv, 1, &C, LOOM_F32, dev), k.affine ? tw : NULL, k.affine ? tb : NULL, &o);
  cr_assert_not_null(y, "%s", loom_last_error());
  /* The incoming gradient arrives in the output's layout. */
  loom_tensor *gy = in_format(tk_tensor(gv, k.nd, k.sh, k.dt, dev), k.fmt);
  cr_assert_eq(loom_backward_with(y, gy), LOOM_OK, "%s", loom_last_error());
  double *dx = malloc((size_t)n * sizeof *dx), dw[64], db[64];
  bn_ref r;
  double *yv = malloc((size_t)n * sizeof *yv);
  ref_forward(xv, N, C, S, k.affine ? w : NULL, k.affine ? b : NULL, training, rm, rv, 0.1, 1e-5, k.act, yv, &r);
  ref_backward(xv, gv, N, C, S, k.affine ? w : NULL, k.affine ? b : NULL, training, k.act, &r, dx, dw, db);
  char what[160];
  snprintf(what, sizeof what, "batch_norm backward %s %s %s affine=%d act=%d", training ? "train" : "eval",
           k.fmt == LOOM_FORMAT_NHWC ? "NHWC" : "NCHW", loom_dtype_name(k.dt), k.affine, k.act);
  double t = k.dt == LOOM_F32 ? 1e-4 : tol_for(k.dt) * 2;
  tk_assert_tensor(loom_grad(x), k.nd, k.sh, k.dt, dx, t, t, what);
  if (k.affine) {
    tk_assert_tensor(loom_grad(tw), 1, &C, LOOM_F32, dw, 2e-4, 2e-4, "dweight");
    tk_assert_tensor(loom_grad(tb), 1, &C, LOOM_F32, db, 2e-4, 2e-4, "dbias");
  }
  free(xv), free(gv), free(w), free(b), free(rm), free(rv), free(dx), free(yv);
}

DEVICE_TEST(batch_norm, backward_matches_reference) {
  tk_seed(111);
  loom_dtype dts[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};
  for (int training = 0; training < 2; training++)
    for (int f = 0; f < 2; f++)
      for (int d = 0; d < 3; d++)
        for (int act = 0; act < 2; act++) {
          fwd_case k = {4, {3, 4, 5, 3}, f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW, dts[d], d != 1, act};
          check_backward(dev, k, training);
        }
  fwd_case big[] = {{4, {8, 16, 16, 17}, LOOM_FORMAT_NCHW, LOOM_F32, true, LOOM_ACT_RELU},
                    {4, {8, 16, 16, 17}, LOOM_FORMAT_NHWC, LOOM_F32, true, LOOM_ACT_RELU},
                    {2, {33, 7}, LOOM_FORMAT_NCHW, LOOM_F32, true, LOOM_ACT_NONE}};
  for (int i = 0; i < 3; i++) check_backward(dev, big[i], true);
}

typedef struct gc_ctx {
  loom_memory_format fmt;
  bool training;
  int act;
  loom_tensor *rm, *rv;
} gc_ctx;

static loom_tensor *bn_fn(loom_tensor **in, void *p) {
  gc_ctx *c = p;
  loom_batch_norm_options o;
  loom_batch_norm_options_init(&o);
  o.training = c->training;
  o.act = c->act;
  return loom_batch_norm(in_format(in[0], c->fmt), c->rm, c->rv, in[1], in[2], &o);
}

DEVICE_TEST(batch_norm, finite_difference_gradients) {
  tk_seed(121);
  int64_t sh[4] = {3, 2, 3, 2}, C = 2;
  double rmv[2] = {0.3, -0.2}, rvv[2] = {1.5, 0.7};
  for (int training = 0; training < 2; training++)
    for (int f = 0; f < 2; f++)
      for (int act = 0; act < 2; act++) {
        double *xv = tk_rand_vals(36, -2, 2, 0.05, LOOM_F32);
        loom_tensor *in[3] = {tk_tensor(xv, 4, sh, LOOM_F32, dev), tk_rand_tensor(1, &C, 0.5, 1.5, 0, LOOM_F32, dev, NULL),
                              tk_rand_tensor(1, &C, -0.3, 0.3, 0, LOOM_F32, dev, NULL)};
        for (int k = 0; k < 3; k++) loom_set_requires_grad(in[k], true);
        gc_ctx c = {f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW, training, act, tk_tensor(rmv, 1, &C, LOOM_F32, dev),
                    tk_tensor(rvv, 1, &C, LOOM_F32, dev)};
        char what[96];
        snprintf(what, sizeof what, "batch_norm gradcheck train=%d %s act=%d", training, f ? "NHWC" : "NCHW", act);
        tk_gradcheck(bn_fn, &c, in, 3, 1e-3, 3e-3, 1e-2, what);
        free(xv);
      }
}

/* ---- PyTorch's numbers ------------------------------------------------------------------------ */

/* Output of tests/ref/batch_norm_torch.py (torch 1.13, float64). */
static const double TORCH_Y[24] = {0.0364650561, 0.284966215, 0.499833926, 0.651986808, 0.844090928, 0.785530539, 0.506805465, 0.0456397107, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.308374183, 1.00040206, 1.14471712, 1.08995245, 0.843520248};
static const double TORCH_RM1[3] = {-0.0198582046, 0.354561105, 0.617744607};
static const double TORCH_RV1[3] = {0.960500755, 1.40050956, 2.00980461};
static const double TORCH_DX[24] = {0.298069184, 0.140903097, -0.0326802488, -0.203596862, 0.392382387, 0.181845184, -0.00753528353, -0.170539715, -0.0710186341, -0.0327017793, 0.00297486453, 0.0311826243, -0.0187282137, -0.00637980333, -0.0458345994, -0.131752554, 0.180694986, 0.0542740688, -0.0718248142, -0.559296814, -0.22858643, -0.069391591, 0.099289006, 0.26825194};
static const double TORCH_DW[3] = {3.25748648, 1.09738112, 0.764814737};
static const double TORCH_DB[3] = {3.64096491, 0.829016436, 0.891864311};
static const double TORCH_RM2[3] = {0.256311944, 0.810034426, 1.11903814};
static const double TORCH_RV2[3] = {0.717726091, 1.01823885, 1.5642167};
static const double TORCH_YEVAL[24] = {-0.251271271, -0.0378515481, 0.146682833, 0.27735597, 1.25147287, 1.21289194, 1.02926144, 0.725434829, 1.09317484, 0.50487438, -0.0428894186, -0.475979194, -0.819695984, -0.838646153, -0.778097871, -0.646246104, -0.254871033, 0.148789172, 0.551421126, 0.898530348, 2.2415195, 2.39786109, 2.3385326, 2.07156391};

DEVICE_TEST(batch_norm, torch_reference) {
  int64_t sh[4] = {2, 3, 2, 2}, C = 3;
  double xv[24], x2v[24], gv[24], w[3], b[3], rm[3], rv[3];
  for (int i = 0; i < 24; i++) {
    int c = (i / 4) % 3;
    xv[i] = (float)(sin(0.37 * i) * (1 + 0.5 * c) + c);
    x2v[i] = (float)(xv[i] * 0.5 + 1);
    gv[i] = cos(0.23 * i);
  }
  for (int c = 0; c < 3; c++) w[c] = 0.5 + 0.25 * c, b[c] = 0.1 * c - 0.1, rm[c] = 0.2 * c, rv[c] = 1 + 0.5 * c;
  for (int f = 0; f < 2; f++) {
    loom_memory_format fmt = f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW;
    loom_tensor *x = tk_tensor(xv, 4, sh, LOOM_F32, dev), *tw = tk_tensor(w, 1, &C, LOOM_F32, dev);
    loom_tensor *tb = tk_tensor(b, 1, &C, LOOM_F32, dev);
    loom_tensor *trm = tk_tensor(rm, 1, &C, LOOM_F32, dev), *trv = tk_tensor(rv, 1, &C, LOOM_F32, dev);
    loom_set_requires_grad(x, true);
    loom_set_requires_grad(tw, true);
    loom_set_requires_grad(tb, true);
    loom_batch_norm_options o;
    loom_batch_norm_options_init(&o);
    o.act = LOOM_ACT_RELU;
    loom_tensor *y = loom_batch_norm(in_format(x, fmt), trm, trv, tw, tb, &o);
    tk_assert_tensor(y, 4, sh, LOOM_F32, TORCH_Y, 1e-6, 1e-5, "torch: relu(batch_norm) training");
    tk_assert_tensor(trm, 1, &C, LOOM_F32, TORCH_RM1, 1e-6, 1e-6, "torch: running_mean after step 1");
    tk_assert_tensor(trv, 1, &C, LOOM_F32, TORCH_RV1, 1e-6, 1e-6, "torch: running_var after step 1");
    cr_assert_eq(loom_backward_with(y, in_format(tk_tensor(gv, 4, sh, LOOM_F32, dev), fmt)), LOOM_OK, "%s",
                 loom_last_error());
    tk_assert_tensor(loom_grad(x), 4, sh, LOOM_F32, TORCH_DX, 1e-6, 1e-5, "torch: dx");
    tk_assert_tensor(loom_grad(tw), 1, &C, LOOM_F32, TORCH_DW, 1e-6, 1e-5, "torch: dweight");
    tk_assert_tensor(loom_grad(tb), 1, &C, LOOM_F32, TORCH_DB, 1e-6, 1e-5, "torch: dbias");
    o.act = LOOM_ACT_NONE;
    o.momentum = 0.3;
    cr_assert_not_null(loom_batch_norm(in_format(tk_tensor(x2v, 4, sh, LOOM_F32, dev), fmt), trm, trv, tw, tb, &o));
    tk_assert_tensor(trm, 1, &C, LOOM_F32, TORCH_RM2, 1e-6, 1e-6, "torch: running_mean after step 2");
    tk_assert_tensor(trv, 1, &C, LOOM_F32, TORCH_RV2, 1e-6, 1e-6, "torch: running_var after step 2");
    o.training = false;
    tk_assert_tensor(loom_batch_norm(in_format(x, fmt), trm, trv, tw, tb, &o), 4, sh, LOOM_F32, TORCH_YEVAL, 1e-6, 1e-5,
                     "torch: eval");
  }
}

/* ---- mixed precision, versions, threads ---------------------------------------------------- */

DEVICE_TEST(batch_norm, f16_data_f32_statistics) {
  /* f16 values around 1000 with a spread of about 1: an f16 accumulator
   * (ulp 0.5 there, sums overflow at 65504) would get the variance wrong. */
  tk_seed(131);
  int64_t sh[4] = {16, 2, 8, 8}, C = 2, n = 2048;
  double *xv = malloc((size_t)n * sizeof *xv);
  for (int64_t k = 0; k < n; k++) xv[k] = tk_round(1000 + tk_uniform(-2, 2), LOOM_F16);
  double rm[2] = {0, 0}, rv[2] = {1, 1}, want[2048];
  loom_tensor *trm = tk_tensor(rm, 1, &C, LOOM_F32, dev), *trv = tk_tensor(rv, 1, &C, LOOM_F32, dev);
  for (int f = 0; f < 2; f++) {
    loom_tensor *y = loom_batch_norm(in_format(tk_tensor(xv, 4, sh, LOOM_F16, dev), f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW),
                                     trm, trv, NULL, NULL, NULL);
    bn_ref r;
    ref_forward(xv, 16, 2, 64, NULL, NULL, true, rm, rv, 0.1, 1e-5, false, want, &r);
    tk_assert_tensor(y, 4, sh, LOOM_F16, want, 4e-3, 4e-3, "f16 batch_norm with a large mean");
    tk_assert_tensor(trv, 1, &C, LOOM_F32, rv, 1e-5, 1e-4, "running_var from f16 data");
    tk_assert_tensor(trm, 1, &C, LOOM_F32, rm, 1e-5, 1e-5, "running_mean from f16 data");
  }
  free(xv);
}

DEVICE_TEST(batch_norm, running_stat_updates_bump_versions) {
  int64_t sh[2] = {4, 2}, C = 2;
  double xv[8] = {1, 2, 3, 4, 5, 6, 7, 9}, ones[2] = {1, 1};
  loom_tensor *x = tk_tensor(xv, 2, sh, LOOM_F32, dev);
  loom_tensor *rm = loom_zeros(1, &C, LOOM_F32, dev), *rv = loom_ones(1, &C, LOOM_F32, dev);
  /* A graph that saved running_mean before an update (mul saves both inputs). */
  loom_tensor *p = tk_tensor(ones, 1, &C, LOOM_F32, dev);
  loom_set_requires_grad(p, true);
  loom_tensor *z = loom_sum_all(loom_mul(p, rm));
  loom_batch_norm_options o;
  loom_batch_norm_options_init(&o);
  o.training = false;
  cr_assert_not_null(loom_batch_norm(x, rm, rv, NULL, NULL, &o), "%s", loom_last_error());
  cr_assert_eq(loom_backward(z), LOOM_OK, "eval mode writes nothing: %s", loom_last_error());
  z = loom_sum_all(loom_mul(p, rm));
  /* Training updates running_mean in place: the saved copy is stale now... */
  loom_tensor *xg = tk_tensor(xv, 2, sh, LOOM_F32, dev);
  loom_set_requires_grad(xg, true);
  loom_tensor *y = loom_batch_norm(xg, rm, rv, NULL, NULL, NULL);
  cr_assert_not_null(y, "%s", loom_last_error());
  tk_assert_error(loom_backward(z), LOOM_ERR_STATE, "modified in place");
  /* ...while the batch norm's own backward does not depend on it. */
  cr_assert_eq(loom_backward(loom_sum_all(loom_mul(y, y))), LOOM_OK, "%s", loom_last_error());
  cr_assert_not_null(loom_grad(xg));
}

DEVICE_TEST(batch_norm, same_result_with_any_thread_count) {
  if (dev.kind != LOOM_CPU) cr_skip_test("the thread count is a CPU setting");
  tk_seed(141);
  int64_t sh[4] = {8, 24, 16, 12}, C = 24;
  for (int f = 0; f < 2; f++) {
    loom_tensor *x = in_format(tk_rand_tensor(4, sh, -3, 5, 0, LOOM_F32, dev, NULL), f ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW);
    loom_tensor *rm[2], *y[2];
    int before = loom_get_num_threads();
    for (int t = 0; t < 2; t++) {
      loom_set_num_threads(t + 1);
      rm[t] = loom_zeros(1, &C, LOOM_F32, dev);
      y[t] = loom_batch_norm(x, rm[t], loom_ones(1, &C, LOOM_F32, dev), NULL, NULL, NULL);
    }
    loom_set_num_threads(before);
    double *a = tk_read(y[0]), *b = tk_read(y[1]), *ma = tk_read(rm[0]), *mb = tk_read(rm[1]);
    for (int64_t i = 0; i < tk_numel(4, sh); i++) cr_assert_eq(a[i], b[i], "element %lld differs with 1 vs 2 threads", (long long)i);
    for (int c = 0; c < C; c++) cr_assert_eq(ma[c], mb[c], "running_mean[%d] differs with 1 vs 2 threads", c);
    free(a), free(b), free(ma), free(mb);
  }
}

/* ---- errors ---------------------------------------------------------------------------------- */

DEVICE_TEST(batch_norm, errors) {
  int64_t sh[4] = {2, 3, 2, 2}, C = 3, C2 = 2, sh1 = 3, one[2] = {1, 3};
  loom_tensor *x = loom_zeros(4, sh, LOOM_F32, dev);
  loom_tensor *rm = loom_zeros(1, &C, LOOM_F32, dev), *rv = loom_ones(1, &C, LOOM_F32, dev);
  loom_batch_norm_options o;
  loom_batch_norm_options_init(&o);
  tk_assert_fails(loom_batch_norm(x, rm, rv, loom_ones(1, &C2, LOOM_F32, dev), NULL, NULL), LOOM_ERR_SHAPE, "weight",
                  "[2]", "[3]");
  tk_assert_fails(loom_batch_norm(x, rm, loom_ones(1, &C, LOOM_F16, dev), NULL, NULL, NULL), LOOM_ERR_DTYPE,
                  "running_var", "f32");
  tk_assert_fails(loom_batch_norm(x, rm, NULL, NULL, NULL, NULL), LOOM_ERR_INVALID_ARG, "running_var");
  o.training = false;
  tk_assert_fails(loom_batch_norm(x, NULL, NULL, NULL, NULL, &o), LOOM_ERR_INVALID_ARG, "evaluation", "running_mean");
  loom_batch_norm_options_init(&o);
  tk_assert_fails(loom_batch_norm(loom_zeros(2, one, LOOM_F32, dev), NULL, NULL, NULL, NULL, NULL), LOOM_ERR_SHAPE,
                  "1 value", "per channel");
  tk_assert_fails(loom_batch_norm(loom_zeros(1, &sh1, LOOM_F32, dev), NULL, NULL, NULL, NULL, NULL), LOOM_ERR_SHAPE,
                  "[N, C, ...]");
  tk_assert_fails(loom_batch_norm(loom_zeros(4, sh, LOOM_I32, dev), NULL, NULL, NULL, NULL, NULL), LOOM_ERR_DTYPE, "x",
                  "i32");
  loom_tensor *rg = loom_zeros(1, &C, LOOM_F32, dev);
  loom_set_requires_grad(rg, true);
  tk_assert_fails(loom_batch_norm(x, rg, rv, NULL, NULL, NULL), LOOM_ERR_INVALID_ARG, "running_mean", "requires grad");
  o.momentum = 2;
  tk_assert_fails(loom_batch_norm(x, rm, rv, NULL, NULL, &o), LOOM_ERR_INVALID_ARG, "momentum");
  loom_batch_norm_options_init(&o);
  o.eps = -1;
  tk_assert_fails(loom_batch_norm(x, rm, rv, NULL, NULL, &o), LOOM_ERR_INVALID_ARG, "eps");
  loom_batch_norm_options_init(&o);
  o.act = 7;
  tk_assert_fails(loom_batch_norm(x, rm, rv, NULL, NULL, &o), LOOM_ERR_INVALID_ARG, "activation");
  loom_batch_norm_options_init(&o);
  o.struct_size = 0;
  tk_assert_fails(loom_batch_norm(x, rm, rv, NULL, NULL, &o), LOOM_ERR_INVALID_ARG, "options.struct_size");
  /* A strided running statistic cannot be updated in place through a copy. */
  int64_t six = 6;
  loom_tensor *wide = loom_zeros(1, &six, LOOM_F32, dev);
  tk_assert_fails(loom_batch_norm(x, loom_slice(wide, 0, 0, 6, 2), rv, NULL, NULL, NULL), LOOM_ERR_INVALID_ARG,
                  "contiguous");
  /* NULL propagates with the first error's message. */
  tk_assert_fails(loom_batch_norm(loom_reshape(x, 1, &C), rm, rv, NULL, NULL, NULL), LOOM_ERR_SHAPE, "reshape");
  loom_clear_error();
  tk_assert_fails(loom_batch_norm(NULL, rm, rv, NULL, NULL, NULL), LOOM_ERR_NULL_INPUT, "batch_norm", "x");
  /* Running statistics are left untouched by failed calls. */
  double zeros[3] = {0, 0, 0};
  tk_assert_tensor(rm, 1, &C, LOOM_F32, zeros, 0, 0, "running_mean after errors");
}
