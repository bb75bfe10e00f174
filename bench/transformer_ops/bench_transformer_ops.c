/* bench_transformer_ops.c — forward + backward time of the transformer ops
 * (issue 28) on the CPU at nanoGPT's and GPT-2's shapes: fused causal
 * attention, layer norm, GELU and the fused final projection +
 * cross-entropy. Each step runs the op through the public API with autograd
 * (as a model calls it) and backward from sum(y * g); the median of REPS
 * steps is printed:
 *   bench=transformer_ops op=... shape=... threads=T ms=...
 * bench/transformer_ops/pytorch_transformer_ops.py does the same work in
 * PyTorch; run_transformer_ops_vs_pytorch.sh alternates the two.
 *
 * Usage: bench_transformer_ops [threads=2] [reps=5] [filter]
 *        bench_transformer_ops mem   (attention's peak allocated bytes over T) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/loom.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define CPU loom_cpu()
#define CHECK(c)                                                             \
  do {                                                                       \
    if (!(c)) {                                                              \
      fprintf(stderr, "bench_transformer_ops: %s: %s\n", #c, loom_last_error()); \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

static loom_tensor *leaf(int nd, const int64_t *sh) {
  loom_tensor *t = loom_randn(nd, sh, LOOM_F32, CPU);
  CHECK(t);
  loom_keep(t);
  loom_set_requires_grad(t, true);
  return t;
}

/* One step of case k: forward, loss, backward. */
typedef struct bcase {
  const char *op;
  int nd;
  int64_t sh[4];
  int64_t vocab; /* lce: classes */
} bcase;

static const bcase CASES[] = {
    {"attention_causal", 4, {4, 6, 256, 64}, 0},   {"attention_causal", 4, {1, 2, 1024, 64}, 0},
    {"layer_norm", 2, {1024, 384}, 0},             {"gelu", 2, {1024, 1536}, 0},
    {"linear_cross_entropy", 2, {1024, 384}, 65},  {"linear_cross_entropy", 2, {64, 768}, 50257},
};

static void step(const bcase *c, loom_tensor **in, loom_tensor *labels) {
  loom_scope_begin();
  loom_tensor *y;
  if (!strcmp(c->op, "attention_causal")) y = loom_scaled_dot_product_attention(in[0], in[1], in[2], true);
  else if (!strcmp(c->op, "layer_norm")) y = loom_layer_norm(in[0], in[1], in[2], 1e-5);
  else if (!strcmp(c->op, "gelu")) y = loom_gelu(in[0]);
  else y = loom_linear_cross_entropy(in[0], in[1], labels);
  CHECK(y);
  loom_tensor *loss = loom_tensor_ndim(y) == 0 ? y : loom_sum_all(loom_mul(y, in[3]));
  CHECK(loom_backward(loss) == LOOM_OK);
  for (int k = 0; k < 3; k++)
    if (in[k]) loom_zero_grad(in[k]);
  loom_scope_end();
}

static void shape_str(const bcase *c, char *buf, size_t n) {
  int at = 0;
  for (int d = 0; d < c->nd; d++) at += snprintf(buf + at, n - (size_t)at, d ? "x%lld" : "%lld", (long long)c->sh[d]);
  if (c->vocab) snprintf(buf + at, n - (size_t)at, "_v%lld", (long long)c->vocab);
}

static void memory_curve(void) {
  for (int64_t T = 256; T <= 4096; T *= 2) {
    loom_scope_begin();
    int64_t s[4] = {1, 1, T, 64};
    loom_tensor *q = leaf(4, s), *k = leaf(4, s), *v = leaf(4, s);
    loom_memory_stats st = {.struct_size = sizeof st};
    CHECK(loom_memory_stats_get(CPU, &st) == LOOM_OK);
    int64_t base = st.allocated_bytes[LOOM_MEM_ALL].current;
    CHECK(loom_memory_reset_peaks(CPU) == LOOM_OK);
    CHECK(loom_backward(loom_sum_all(loom_scaled_dot_product_attention(q, k, v, true))) == LOOM_OK);
    CHECK(loom_memory_stats_get(CPU, &st) == LOOM_OK);
    int64_t extra = st.allocated_bytes[LOOM_MEM_ALL].peak - base;
    printf("bench=attention_memory T=%lld head_dim=64 peak_extra_bytes=%lld qkv_bytes=%lld scores_f32_bytes=%lld\n",
           (long long)T, (long long)extra, (long long)(3 * T * 64 * 4), (long long)(T * T * 4));
    loom_tensor_release(q), loom_tensor_release(k), loom_tensor_release(v);
    loom_scope_end();
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "mem")) {
    memory_curve();
    return 0;
  }
  int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 5;
  const char *filter = argc > 3 ? argv[3] : NULL;
  loom_set_num_threads(threads);
  loom_manual_seed(1);
  for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
    const bcase *c = &CASES[ci];
    if (filter && !strstr(c->op, filter)) continue;
    loom_scope_begin();
    loom_tensor *in[4] = {NULL, NULL, NULL, NULL}, *labels = NULL;
    int64_t D = c->sh[c->nd - 1];
    if (!strcmp(c->op, "attention_causal")) {
      for (int k = 0; k < 3; k++) in[k] = leaf(c->nd, c->sh);
      in[3] = loom_randn(c->nd, c->sh, LOOM_F32, CPU);
    } else if (!strcmp(c->op, "layer_norm")) {
      in[0] = leaf(c->nd, c->sh), in[1] = leaf(1, &D), in[2] = leaf(1, &D);
      in[3] = loom_randn(c->nd, c->sh, LOOM_F32, CPU);
    } else if (!strcmp(c->op, "gelu")) {
      in[0] = leaf(c->nd, c->sh);
      in[3] = loom_randn(c->nd, c->sh, LOOM_F32, CPU);
    } else {
      int64_t sw[2] = {c->vocab, D}, N = c->sh[0];
      in[0] = leaf(2, c->sh), in[1] = leaf(2, sw);
      int64_t *lab = malloc((size_t)N * sizeof *lab);
      for (int64_t i = 0; i < N; i++) lab[i] = (i * 7919) % c->vocab;
      labels = loom_from_host(lab, 1, &N, LOOM_I64, CPU);
      free(lab);
    }
    step(c, in, labels); /* warm-up */
    double *t = malloc((size_t)reps * sizeof *t);
    for (int r = 0; r < reps; r++) {
      double t0 = now_s();
      step(c, in, labels);
      t[r] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    char sh[96];
    shape_str(c, sh, sizeof sh);
    printf("bench=transformer_ops op=%s shape=%s threads=%d impl=loom ms=%.3f\n", c->op, sh, threads, 1e3 * t[reps / 2]);
    fflush(stdout);
    free(t);
    for (int k = 0; k < 3; k++) loom_tensor_release(in[k]);
    loom_scope_end();
  }
  return 0;
}
