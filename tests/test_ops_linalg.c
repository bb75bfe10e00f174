/* test_ops_linalg.c — matmul (transpose flags, batching, broadcast batch
 * dims, transposed / strided views as inputs, f16/bf16 with f32
 * accumulation) and the fused linear op (with/without bias, with/without
 * ReLU, N-d inputs) against a float64 reference; their backward by finite
 * differences, including linear's dX / dW / db and the case where x needs no
 * gradient (dX skipped). */
#include <math.h>
#include <stdlib.h>

#include "support/testkit.h"

/* C[b] = op(A[b]) op(B[b]) with broadcast batch dims; all row-major doubles. */
static void ref_matmul(const double *A, int na, const int64_t *sa, bool ta, const double *B, int nb, const int64_t *sb,
                       bool tb, int *no, int64_t *so, double **out) {
  int64_t M = ta ? sa[na - 1] : sa[na - 2], K = ta ? sa[na - 2] : sa[na - 1];
  int64_t N = tb ? sb[nb - 2] : sb[nb - 1];
  int nbatch;
  cr_assert(tk_bcast_shape(na - 2, sa, nb - 2, sb, &nbatch, so));
  so[nbatch] = M;
  so[nbatch + 1] = N;
  *no = nbatch + 2;
  int64_t batches = tk_numel(nbatch, so);
  double *C = calloc((size_t)(batches * M * N > 0 ? batches * M * N : 1), sizeof *C);
  int64_t ar = sa[na - 2], ac = sa[na - 1], br = sb[nb - 2], bc = sb[nb - 1];
  for (int64_t b = 0; b < batches; b++) {
    int64_t ia = tk_bcast_index(b, nbatch, so, na - 2, sa), ib = tk_bcast_index(b, nbatch, so, nb - 2, sb);
    const double *pa = A + ia * ar * ac, *pb = B + ib * br * bc;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double acc = 0;
        for (int64_t k = 0; k < K; k++) acc += (ta ? pa[k * ac + i] : pa[i * ac + k]) * (tb ? pb[j * bc + k] : pb[k * bc + j]);
        C[b * M * N + i * N + j] = acc;
      }
  }
  *out = C;
}

typedef struct {
  int na;
  int64_t sa[4];
  int nb;
  int64_t sb[4];
  bool ta, tb;
} mm_case;

static const mm_case MM[] = {
    {2, {5, 7}, 2, {7, 3}, false, false},
    {2, {7, 5}, 2, {7, 3}, true, false},
    {2, {5, 7}, 2, {3, 7}, false, true},
    {2, {7, 5}, 2, {3, 7}, true, true},
    {3, {4, 6, 5}, 3, {4, 5, 2}, false, false},       /* batched */
    {3, {4, 6, 5}, 2, {5, 2}, false, false},          /* broadcast b */
    {4, {2, 1, 3, 4}, 3, {5, 3, 4}, false, true},     /* broadcast both, trans b */
    {2, {1, 9}, 2, {9, 1}, false, false},             /* vector-ish */
    {2, {65, 33}, 2, {33, 67}, false, false},         /* odd sizes past kernel tiles */
    {2, {3, 0}, 2, {0, 4}, false, false},             /* K = 0: zeros */
};

static void check_matmul(loom_device dev, loom_dtype dt) {
  tk_seed(41 + dt);
  for (size_t c = 0; c < sizeof MM / sizeof MM[0]; c++) {
    const mm_case *m = &MM[c];
    double *va, *vb, *want;
    loom_tensor *a = tk_rand_tensor(m->na, m->sa, -1, 1, 0, dt, dev, &va);
    loom_tensor *b = tk_rand_tensor(m->nb, m->sb, -1, 1, 0, dt, dev, &vb);
    int no;
    int64_t so[8];
    ref_matmul(va, m->na, m->sa, m->ta, vb, m->nb, m->sb, m->tb, &no, so, &want);
    int64_t K = m->ta ? m->sa[m->na - 2] : m->sa[m->na - 1];
    for (int64_t i = 0; i < tk_numel(no, so); i++) want[i] = tk_round(want[i], dt);
    char what[64];
    snprintf(what, sizeof what, "matmul %s case %zu", loom_dtype_name(dt), c);
    double atol = (dt == LOOM_F32 ? 1e-6 : 1e-3) * sqrt((double)K + 1);
    tk_assert_tensor(loom_matmul_ex(a, b, m->ta, m->tb), no, so, dt, want, atol, tk_rtol(dt) * 2, what);
    free(va);
    free(vb);
    free(want);
  }
}

DEVICE_TEST(matmul, f32) { check_matmul(dev, LOOM_F32); }
DEVICE_TEST(matmul, f16) { check_matmul(dev, LOOM_F16); }
DEVICE_TEST(matmul, bf16) { check_matmul(dev, LOOM_BF16); }

DEVICE_TEST(matmul, transposed_and_strided_views_as_inputs) {
  tk_seed(42);
  int64_t sa[2] = {7, 5}, sb[2] = {3, 7};
  double *va, *vb;
  loom_tensor *a = tk_rand_tensor(2, sa, -1, 1, 0, LOOM_F32, dev, &va);
  loom_tensor *b = tk_rand_tensor(2, sb, -1, 1, 0, LOOM_F32, dev, &vb);
  /* aᵀ [5,7] @ bᵀ [7,3] through views, and the same via flags: must agree with the reference */
  loom_tensor *y1 = loom_matmul(loom_transpose(a, 0, 1), loom_transpose(b, 0, 1));
  loom_tensor *y2 = loom_matmul_ex(a, b, true, true);
  double want[15];
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 3; j++) {
      double acc = 0;
      for (int k = 0; k < 7; k++) acc += va[k * 5 + i] * vb[j * 7 + k];
      want[i * 3 + j] = acc;
    }
  int64_t so[2] = {5, 3};
  tk_assert_tensor(y1, 2, so, LOOM_F32, want, 1e-5, 1e-5, "matmul of transposed views");
  tk_assert_tensor(y2, 2, so, LOOM_F32, want, 1e-5, 1e-5, "matmul with flags");
  /* A column-strided slice (neither row- nor column-contiguous): a[:, ::2] is [7,3] */
  loom_tensor *as = loom_slice(a, 1, 0, 5, 2);
  loom_tensor *bs = loom_slice(b, 1, 0, 7, 1); /* [3,7] contiguous-ish */
  loom_tensor *y4 = loom_matmul(loom_transpose(as, 0, 1), loom_transpose(bs, 0, 1)); /* [3,7]@[7,3] */
  double w4[9];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      double acc = 0;
      for (int k = 0; k < 7; k++) acc += va[k * 5 + 2 * i] * vb[j * 7 + k];
      w4[i * 3 + j] = acc;
    }
  int64_t s4[2] = {3, 3};
  tk_assert_tensor(y4, 2, s4, LOOM_F32, w4, 1e-5, 1e-5, "matmul of strided slice");
  /* batched input that is a permuted view: [2,3,4] -> permute(1,0,2) = [3,2,4] */
  int64_t sc[3] = {2, 3, 4}, sd[2] = {4, 2};
  double *vc, *vd;
  loom_tensor *c3 = tk_rand_tensor(3, sc, -1, 1, 0, LOOM_F32, dev, &vc);
  loom_tensor *d2 = tk_rand_tensor(2, sd, -1, 1, 0, LOOM_F32, dev, &vd);
  int perm[3] = {1, 0, 2};
  loom_tensor *y5 = loom_matmul(loom_permute(c3, perm), d2); /* [3,2,2] */
  double w5[12];
  for (int p = 0; p < 3; p++)
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++) {
        double acc = 0;
        for (int k = 0; k < 4; k++) acc += vc[i * 12 + p * 4 + k] * vd[k * 2 + j];
        w5[p * 4 + i * 2 + j] = acc;
      }
  int64_t s5[3] = {3, 2, 2};
  tk_assert_tensor(y5, 3, s5, LOOM_F32, w5, 1e-5, 1e-5, "matmul of permuted batch");
  free(va);
  free(vb);
  free(vc);
  free(vd);
}

typedef struct {
  bool ta, tb;
} mm_ctx;
static loom_tensor *mm_fn(loom_tensor **in, void *c) {
  mm_ctx *m = c;
  return loom_matmul_ex(in[0], in[1], m->ta, m->tb);
}

DEVICE_TEST(matmul, gradients) {
  tk_seed(43);
  const mm_case G[] = {
      {2, {3, 4}, 2, {4, 2}, false, false}, {2, {4, 3}, 2, {4, 2}, true, false},
      {2, {3, 4}, 2, {2, 4}, false, true},  {2, {4, 3}, 2, {2, 4}, true, true},
      {3, {2, 3, 4}, 2, {4, 2}, false, false},                /* broadcast b: db sums over batch */
      {3, {1, 3, 4}, 3, {2, 2, 4}, false, true},              /* broadcast a */
  };
  for (size_t c = 0; c < sizeof G / sizeof G[0]; c++) {
    loom_tensor *in[2] = {tk_rand_tensor(G[c].na, G[c].sa, -1, 1, 0, LOOM_F32, dev, NULL),
                          tk_rand_tensor(G[c].nb, G[c].sb, -1, 1, 0, LOOM_F32, dev, NULL)};
    loom_set_requires_grad(in[0], true);
    loom_set_requires_grad(in[1], true);
    mm_ctx ctx = {G[c].ta, G[c].tb};
    char what[48];
    snprintf(what, sizeof what, "matmul grad case %zu", c);
    tk_gradcheck(mm_fn, &ctx, in, 2, 1e-2, 2e-3, 1e-2, what);
  }
}

static loom_tensor *mm_view_fn(loom_tensor **in, void *c) {
  (void)c;
  return loom_matmul(loom_transpose(in[0], 0, 1), in[1]);
}

DEVICE_TEST(matmul, gradient_through_transposed_view) {
  int64_t sa[2] = {4, 3}, sb[2] = {4, 2};
  loom_tensor *in[2] = {tk_rand_tensor(2, sa, -1, 1, 0, LOOM_F32, dev, NULL), tk_rand_tensor(2, sb, -1, 1, 0, LOOM_F32, dev, NULL)};
  loom_set_requires_grad(in[0], true);
  loom_set_requires_grad(in[1], true);
  tk_gradcheck(mm_view_fn, NULL, in, 2, 1e-2, 2e-3, 1e-2, "matmul(transpose(a), b)");
}

/* ---- fused linear ---- */
static double *ref_linear(const double *x, int64_t M, int64_t K, const double *w, int64_t N, const double *b, bool relu) {
  double *y = malloc((size_t)(M * N > 0 ? M * N : 1) * sizeof *y);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double acc = b ? b[j] : 0;
      for (int64_t k = 0; k < K; k++) acc += x[i * K + k] * w[j * K + k];
      y[i * N + j] = relu && acc < 0 ? 0 : acc;
    }
  return y;
}

static void check_linear(loom_device dev, loom_dtype dt) {
  tk_seed(51 + dt);
  const int64_t dims[][3] = {{5, 7, 3}, {1, 4, 1}, {130, 33, 17}};
  for (int c = 0; c < 3; c++)
    for (int bias = 0; bias < 2; bias++)
      for (int relu = 0; relu < 2; relu++) {
        int64_t M = dims[c][0], K = dims[c][1], N = dims[c][2];
        int64_t sx[2] = {M, K}, sw[2] = {N, K};
        double *vx, *vw, *vb = NULL;
        loom_tensor *x = tk_rand_tensor(2, sx, -1, 1, 0, dt, dev, &vx);
        loom_tensor *w = tk_rand_tensor(2, sw, -1, 1, 0, dt, dev, &vw);
        loom_tensor *b = bias ? tk_rand_tensor(1, &N, -1, 1, 0, dt, dev, &vb) : NULL;
        double *want = ref_linear(vx, M, K, vw, N, vb, relu);
        for (int64_t i = 0; i < M * N; i++) want[i] = tk_round(want[i], dt);
        int64_t sy[2] = {M, N};
        char what[64];
        snprintf(what, sizeof what, "linear %s %lldx%lldx%lld bias=%d relu=%d", loom_dtype_name(dt), (long long)M,
                 (long long)K, (long long)N, bias, relu);
        tk_assert_tensor(loom_linear(x, w, b, relu ? LOOM_ACT_RELU : LOOM_ACT_NONE), 2, sy, dt, want,
                         (dt == LOOM_F32 ? 1e-6 : 2e-3) * sqrt((double)K), tk_rtol(dt) * 2, what);
        free(vx);
        free(vw);
        free(vb);
        free(want);
      }
}

DEVICE_TEST(linear, forward_f32) { check_linear(dev, LOOM_F32); }
DEVICE_TEST(linear, forward_f16) { check_linear(dev, LOOM_F16); }
DEVICE_TEST(linear, forward_bf16) { check_linear(dev, LOOM_BF16); }

DEVICE_TEST(linear, nd_input_and_noncontiguous_weight) {
  tk_seed(52);
  int64_t sx[3] = {2, 3, 4}, sw[2] = {4, 5}; /* w given as [in, out], used transposed: [5, 4] */
  double *vx, *vw;
  loom_tensor *x = tk_rand_tensor(3, sx, -1, 1, 0, LOOM_F32, dev, &vx);
  loom_tensor *wt = tk_rand_tensor(2, sw, -1, 1, 0, LOOM_F32, dev, &vw);
  loom_tensor *w = loom_transpose(wt, 0, 1);
  double wr[20];
  for (int o = 0; o < 5; o++)
    for (int i = 0; i < 4; i++) wr[o * 4 + i] = vw[i * 5 + o];
  double *want = ref_linear(vx, 6, 4, wr, 5, NULL, false);
  int64_t sy[3] = {2, 3, 5};
  tk_assert_tensor(loom_linear(x, w, NULL, LOOM_ACT_NONE), 3, sy, LOOM_F32, want, 1e-6, 1e-5, "linear 3-d x, transposed w");
  free(vx);
  free(vw);
  free(want);
}

typedef struct {
  bool bias;
  loom_activation act;
} lin_ctx;
static loom_tensor *lin_fn(loom_tensor **in, void *c) {
  lin_ctx *l = c;
  return loom_linear(in[0], in[1], l->bias ? in[2] : NULL, l->act);
}

DEVICE_TEST(linear, gradients) {
  tk_seed(53);
  int64_t sx[2] = {6, 5}, sw[2] = {4, 5}, n = 4;
  for (int bias = 0; bias < 2; bias++)
    for (int relu = 0; relu < 2; relu++)
      for (int xgrad = 0; xgrad < 2; xgrad++) {
        /* relu: keep pre-activations away from 0 so FD does not straddle the kink */
        loom_tensor *in[3];
        for (int tries = 0;; tries++) {
          in[0] = tk_rand_tensor(2, sx, -1, 1, 0, LOOM_F32, dev, NULL);
          in[1] = tk_rand_tensor(2, sw, -1, 1, 0, LOOM_F32, dev, NULL);
          in[2] = tk_rand_tensor(1, &n, -1, 1, 0, LOOM_F32, dev, NULL);
          double *pre = tk_read(loom_linear(in[0], in[1], bias ? in[2] : NULL, LOOM_ACT_NONE));
          bool ok = true;
          for (int i = 0; i < 24; i++) ok = ok && fabs(pre[i]) > 0.1;
          free(pre);
          if (ok || !relu || tries > 200) break;
        }
        if (xgrad) loom_set_requires_grad(in[0], true);
        loom_set_requires_grad(in[1], true);
        loom_set_requires_grad(in[2], true);
        lin_ctx ctx = {bias, relu ? LOOM_ACT_RELU : LOOM_ACT_NONE};
        char what[64];
        snprintf(what, sizeof what, "linear grad bias=%d relu=%d xgrad=%d", bias, relu, xgrad);
        tk_gradcheck(lin_fn, &ctx, in, bias ? 3 : 2, 1e-2, 2e-3, 1e-2, what);
        if (!xgrad) cr_assert_null(loom_grad(in[0]), "%s: x needs no grad but got one", what);
        if (!bias) cr_assert_null(loom_grad(in[2]), "%s: unused bias got a grad", what);
      }
}

DEVICE_TEST(linear, backward_matches_unfused_ops) {
  /* relu(x·wᵀ + b) built from matmul/add/relu must give the same grads */
  tk_seed(54);
  int64_t sx[2] = {9, 7}, sw[2] = {6, 7}, n = 6;
  double *vx, *vw, *vb;
  loom_tensor *x = tk_rand_tensor(2, sx, -1, 1, 0, LOOM_F32, dev, &vx);
  loom_tensor *w = tk_rand_tensor(2, sw, -1, 1, 0, LOOM_F32, dev, &vw);
  loom_tensor *b = tk_rand_tensor(1, &n, -1, 1, 0, LOOM_F32, dev, &vb);
  loom_tensor *x2 = tk_tensor(vx, 2, sx, LOOM_F32, dev), *w2 = tk_tensor(vw, 2, sw, LOOM_F32, dev), *b2 = tk_tensor(vb, 1, &n, LOOM_F32, dev);
  loom_tensor *all[6] = {x, w, b, x2, w2, b2};
  for (int i = 0; i < 6; i++) loom_set_requires_grad(all[i], true);
  loom_tensor *y1 = loom_linear(x, w, b, LOOM_ACT_RELU);
  loom_tensor *y2 = loom_relu(loom_add(loom_matmul_ex(x2, w2, false, true), b2));
  loom_tensor *l1 = loom_sum_all(loom_mul(y1, y1)), *l2 = loom_sum_all(loom_mul(y2, y2));
  cr_assert_eq(loom_backward(l1), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_backward(l2), LOOM_OK, "%s", loom_last_error());
  for (int i = 0; i < 3; i++) {
    double *g1 = tk_read(loom_grad(all[i])), *g2 = tk_read(loom_grad(all[i + 3]));
    tk_assert_close(g1, g2, loom_tensor_numel(all[i]), 1e-5, 1e-5, "fused vs unfused grad");
    free(g1);
    free(g2);
  }
  free(vx);
  free(vw);
  free(vb);
}
