/* cases_linalg.c — the op sweep's cases for matmul and the fused linear
 * layer (and, through linear's gradient, linear_backward). */
#include <math.h>

#include "op_sweep/sweep.h"

/* ---- matmul --------------------------------------------------------------------- */

/* {batch, M, K, N}. EMPTY: K = 0 (the product is all zeros); BIG: a
 * [2, 512, 1024] result; WIDE: 2048 terms per result. */
static const int64_t MM[SW_NSHAPES][4] = {
    [SW_SMALL] = {2, 3, 4, 5}, [SW_EMPTY] = {2, 3, 0, 5},       [SW_ONE] = {1, 1, 1, 1},
    [SW_ODD] = {3, 7, 13, 127}, [SW_BATCH1] = {1, 3, 4, 5},     [SW_BIG] = {2, 512, 16, 1024},
    [SW_WIDE] = {1, 3, 2048, 5},
};

/* a [B, M, K] @ bᵀ with b [N, K] (batched, trans_b): [B, M, N]. */
static loom_tensor *matmul_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_matmul_ex(in[0], in[1], false, true);
}

/* want[b][i][j] = sum_k a[b][i][k] * b(k, j), b(k, j) = vb[k * sk + j * sj]. */
static void ref_matmul(const int64_t *d, const double *va, const double *vb, int64_t sk, int64_t sj, double *want) {
  int64_t B = d[0], M = d[1], K = d[2], N = d[3];
  for (int64_t n = 0; n < B; n++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double z = 0;
        for (int64_t k = 0; k < K; k++) z += va[(n * M + i) * K + k] * vb[k * sk + j * sj];
        want[(n * M + i) * N + j] = z;
      }
}

/* a @ bᵀ (checked with its gradient) and a @ b2 with b2 [K, N] (forward):
 * each operand in the config's layout, so the CPU GEMM sees row-major,
 * column-major (transposed) and padded (sliced) operands. */
void sw_case_matmul(const sw_config *c) {
  const int64_t *d = MM[c->shape];
  int64_t sa[3] = {d[0], d[1], d[2]}, sb[2] = {d[3], d[2]}, sb2[2] = {d[2], d[3]}, so[3] = {d[0], d[1], d[3]};
  double *va, *vb, *vb2, *want = sw_alloc(sw_numel(3, so));
  loom_tensor *in[2] = {sw_input(c, 3, sa, -1, 1, 0, &va), sw_input(c, 2, sb, -1, 1, 0, &vb)};
  loom_tensor *b2 = sw_input(c, 2, sb2, -1, 1, 0, &vb2);
  ref_matmul(d, va, vb, 1, d[2], want);
  if (sw_expect(c, matmul_fn(in, NULL), 3, so, want, (double)d[2], "matmul_ex(a, b, trans_b)")) {
    ref_matmul(d, va, vb2, d[3], 1, want);
    sw_expect(c, loom_matmul(in[0], b2), 3, so, want, (double)d[2], "matmul(a, b2)");
    sw_gradcheck(c, matmul_fn, NULL, in, 2, 3u, 1e-2, "gradient");
  }
  free(want);
  free(va);
  free(vb);
  free(vb2);
}

/* ---- linear ----------------------------------------------------------------------- */

/* {M (rows), K (in), N (out)}. EMPTY: no rows; BIG: a [1024, 1024] result;
 * WIDE: 2048 features in and out. */
static const int64_t LIN[SW_NSHAPES][3] = {
    [SW_SMALL] = {3, 4, 5},   [SW_EMPTY] = {0, 4, 5},     [SW_ONE] = {1, 1, 1},         [SW_ODD] = {7, 13, 127},
    [SW_BATCH1] = {1, 4, 5},  [SW_BIG] = {1024, 32, 1024}, [SW_WIDE] = {3, 2048, 2048},
};

/* relu(x wᵀ + b): x [M, K], w [N, K], b [N]. */
static loom_tensor *linear_fn(loom_tensor **in, void *ctx) {
  (void)ctx;
  return loom_linear(in[0], in[1], in[2], LOOM_ACT_RELU);
}

typedef struct lin_data {
  loom_tensor *in[3];
  double *v[3];
} lin_data;

/* The step of linear's finite differences: 1e-3, larger with more terms
 * and outputs (an input moves N outputs of ~sqrt(K) magnitude, whose f32
 * rounding would otherwise swamp the difference). No x wᵀ + b lies closer
 * to 0 than two steps (where it can, see below), so no difference crosses
 * ReLU's kink. */
static double lin_h(const int64_t *d) { return 1e-3 * fmax(1.0, sqrt((double)(d[1] * d[2])) / 64); }

/* x w_jᵀ for row i, column j. */
static double lin_dot(const double *x, const double *w, int64_t K, int64_t i, int64_t j) {
  double z = 0;
  for (int64_t k = 0; k < K; k++) z += x[i * K + k] * w[j * K + k];
  return z;
}

/* Move each bias (in steps, keeping it representable in dt) until its
 * column of x wᵀ + b keeps 2 steps clear of ReLU's kink (left as drawn when
 * 64 moves find no such place). With more than 64 rows (BIG) a clear place
 * is unlikely: there the biases put whole columns clear of the kink instead,
 * alternately above (ReLU passes) and below (ReLU blocks). */
static void bias_off_kink(const int64_t *d, const double *x, const double *w, double *b, loom_dtype dt) {
  int64_t M = d[0], K = d[1], N = d[2];
  double h = lin_h(d);
  for (int64_t j = 0; j < N; j++) {
    if (M > 64) {
      double most = 0;
      for (int64_t i = 0; i < M; i++) most = fmax(most, fabs(lin_dot(x, w, K, i, j)));
      b[j] = tk_round((j % 2 ? -1 : 1) * (most + 4 * h), dt);
      continue;
    }
    for (int tries = 0; tries < 64; tries++) {
      double cand = tk_round(b[j] + tries * 4 * h * (tries % 2 ? 1 : -1), dt), least = INFINITY;
      for (int64_t i = 0; i < M && least >= 2 * h; i++) least = fmin(least, fabs(lin_dot(x, w, K, i, j) + cand));
      if (least >= 2 * h) {
        b[j] = cand;
        break;
      }
    }
  }
}

static void linear_make(const sw_config *c, lin_data *d) {
  const int64_t *dim = LIN[c->shape];
  int64_t sx[2] = {dim[0], dim[1]}, sw[2] = {dim[2], dim[1]}, sb[1] = {dim[2]};
  d->in[0] = sw_input(c, 2, sx, -1, 1, 0, &d->v[0]);
  d->in[1] = sw_input(c, 2, sw, -1, 1, 0, &d->v[1]);
  d->v[2] = tk_rand_vals(dim[2], -1, 1, 0, c->dtype);
  bias_off_kink(dim, d->v[0], d->v[1], d->v[2], c->dtype);
  d->in[2] = sw_input_vals(c, 1, sb, c->dtype, d->v[2]);
}

static void lin_free(lin_data *d) {
  for (int k = 0; k < 3; k++) free(d->v[k]);
}

/* Runs LINEAR_BACKWARD (dX, dW, db in one op). */
void sw_case_linear_backward(const sw_config *c) {
  lin_data d;
  linear_make(c, &d);
  sw_gradcheck(c, linear_fn, NULL, d.in, 3, 7u, lin_h(LIN[c->shape]), "gradient (linear_backward)");
  lin_free(&d);
}

void sw_case_linear(const sw_config *c) {
  const int64_t *dim = LIN[c->shape];
  int64_t M = dim[0], K = dim[1], N = dim[2], so[2] = {M, N};
  lin_data d;
  linear_make(c, &d);
  double *want = sw_alloc(M * N), *scale = sw_alloc(M * N);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double z = lin_dot(d.v[0], d.v[1], K, i, j);
      want[i * N + j] = fmax(z + d.v[2][j], 0.0);
      scale[i * N + j] = fabs(z) + fabs(d.v[2][j]);
    }
  /* In f16/bf16 the product x wᵀ is rounded to the dtype before the bias is
   * added (loom's unfused path by design; cuBLASLt's bias epilogue on the
   * GPU too), so where the bias cancels much of a product the error is a
   * rounding of |x wᵀ|, not of the result: in the first GPU runs' bf16
   * "odd" case the product -0.919 plus the bias 0.996 gave 0.0781 against
   * 0.0769, within the product's half ulp (0.00195), 2.5 of the result's. */
  bool ok = c->dtype == LOOM_F32 ? sw_expect(c, linear_fn(d.in, NULL), 2, so, want, (double)K, "linear + ReLU")
                                 : sw_expect_scaled(c, linear_fn(d.in, NULL), 2, so, want, scale, (double)K, "linear + ReLU");
  free(want);
  free(scale);
  if (ok && c->shape == SW_EMPTY) {
    /* No input features either: the result is relu(b) on every row. */
    int64_t sx[2] = {3, 0}, sw[2] = {N, 0}, s3[2] = {3, N};
    double *v0, *v1, *w3 = sw_alloc(3 * N);
    loom_tensor *x = sw_input(c, 2, sx, -1, 1, 0, &v0), *w = sw_input(c, 2, sw, -1, 1, 0, &v1);
    for (int64_t i = 0; i < 3 * N; i++) w3[i] = fmax(d.v[2][i % N], 0.0);
    sw_expect(c, loom_linear(x, w, d.in[2], LOOM_ACT_RELU), 2, s3, w3, 1, "linear with 0 input features");
    free(w3);
    free(v0);
    free(v1);
  }
  lin_free(&d);
  if (ok) sw_case_linear_backward(c);
}
