/* bench_cnn_ops.c — memory throughput of the CPU kernels of batch norm,
 * add_relu, pooling and dropout (ResNet shapes, NCHW and NHWC, f32) against
 * memcpy moving the same number of bytes.
 *
 * Usage: bench_cnn_ops [threads=2] [rounds=5] [filter|all] [dtype=f32|bf16|f16]
 * dtype: the activations' and gradients' type (batch norm's weights and
 * statistics stay f32, as under loom's mixed precision policy).
 * Prints one line per (op, shape, format):
 *   bench=cnn_ops op=... shape=NxCxHxW format=nchw|nhwc dtype=... threads=T ms=... gbps=... memcpy_gbps=...
 *       vs_memcpy=...
 * bytes = the compulsory traffic of the op (each input read once, each
 * output written once: batch norm's training forward reads x twice, which
 * is not counted, so 1.0 would mean "as fast as one copy pass"). memcpy_gbps
 * copies bytes/2 from one buffer to another (bytes/2 read + bytes/2
 * written); vs_memcpy = gbps / memcpy_gbps, measured in the same run, the two
 * alternating per round; each side keeps its best round (the machine may be
 * shared). Forward ops run through the public API (as a model calls them,
 * output allocation included); backward ops run the op-table entry the
 * autograd engine calls; grad_accumulate is the engine's in-place gradient
 * sum (x += x2), which must walk an NHWC tensor in memory order too. bench/cnn_ops/pytorch_cnn_ops.py measures PyTorch's
 * equivalents; bench/cnn_ops/run_cnn_ops_vs_pytorch.sh runs both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/loom.h"
#include "ops/op.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum {
  BN_TRAIN_FWD, BN_TRAIN_BWD, BN_EVAL_FWD, ADD_RELU_FWD, ADD_RELU_BWD, MAXPOOL_FWD, MAXPOOL_BWD, AVGPOOL_FWD,
  AVGPOOL_BWD, GAP_FWD, GAP_BWD, DROPOUT_FWD, DROPOUT_BWD, GRAD_ACCUMULATE,
};
static const char *NAMES[] = {
  "batch_norm_relu_train_fwd", "batch_norm_relu_train_bwd", "batch_norm_eval_fwd", "add_relu_fwd", "add_relu_bwd",
  "max_pool3x3s2_fwd", "max_pool3x3s2_bwd", "avg_pool2x2_fwd", "avg_pool2x2_bwd", "global_avg_pool_fwd",
  "global_avg_pool_bwd", "dropout_fwd", "dropout_bwd", "grad_accumulate",
};

typedef struct bcase {
  int op;
  int64_t shape[4];
} bcase;

static const bcase CASES[] = {
  {BN_TRAIN_FWD, {128, 16, 32, 32}}, {BN_TRAIN_FWD, {128, 64, 8, 8}},  {BN_TRAIN_BWD, {128, 16, 32, 32}},
  {BN_TRAIN_BWD, {128, 64, 8, 8}},   {BN_EVAL_FWD, {128, 16, 32, 32}},  {ADD_RELU_FWD, {128, 16, 32, 32}},
  {ADD_RELU_BWD, {128, 16, 32, 32}}, {MAXPOOL_FWD, {32, 64, 56, 56}},   {MAXPOOL_BWD, {32, 64, 56, 56}},
  {AVGPOOL_FWD, {128, 32, 16, 16}},  {AVGPOOL_BWD, {128, 32, 16, 16}},  {GAP_FWD, {128, 64, 8, 8}},
  {GAP_BWD, {128, 64, 8, 8}},        {DROPOUT_FWD, {128, 16, 32, 32}},  {DROPOUT_BWD, {128, 16, 32, 32}},
  {GRAD_ACCUMULATE, {128, 16, 32, 32}},
};

typedef struct state {
  const bcase *c;
  loom_tensor *x, *x2, *gy, *rm, *rv, *w, *b, *stats, *y, *idx, *mask, *gpool;
  double bytes;
} state;

static loom_dtype g_dt = LOOM_F32; /* the data's dtype (main's dtype argument) */

/* A data tensor: cast to g_dt, in the case's layout. */
static loom_tensor *fmt(loom_tensor *t, bool nhwc) {
  if (t && g_dt != LOOM_F32) t = loom_cast(t, g_dt);
  return nhwc ? loom_to_memory_format(t, LOOM_FORMAT_NHWC) : t;
}

static loom_pool2d_options pool_opts(int op) {
  loom_pool2d_options o;
  loom_pool2d_options_init(&o, 2, 2);
  if (op == MAXPOOL_FWD || op == MAXPOOL_BWD) {
    loom_pool2d_options_init(&o, 3, 3);
    o.stride[0] = o.stride[1] = 2;
    o.padding[0] = o.padding[1] = 1;
  }
  return o;
}

/* Inputs (and saved forward outputs for the backward ops), outside timing. */
static int setup(state *s, const bcase *c, bool nhwc) {
  memset(s, 0, sizeof *s);
  s->c = c;
  const int64_t *sh = c->shape, C = sh[1];
  double n = (double)(sh[0] * sh[1] * sh[2] * sh[3]), e = (double)loom_dtype_size(g_dt);
  loom_device cpu = loom_cpu();
  s->x = fmt(loom_randn(4, sh, LOOM_F32, cpu), nhwc);
  s->x2 = fmt(loom_randn(4, sh, LOOM_F32, cpu), nhwc);
  s->rm = loom_zeros(1, &C, LOOM_F32, cpu);
  s->rv = loom_ones(1, &C, LOOM_F32, cpu);
  s->w = loom_ones(1, &C, LOOM_F32, cpu);
  s->b = loom_zeros(1, &C, LOOM_F32, cpu);
  loom_pool2d_options po = pool_opts(c->op);
  switch (c->op) {
    case BN_TRAIN_FWD: case BN_EVAL_FWD: s->bytes = 2 * n * e; break;
    case BN_TRAIN_BWD: {
      loom_op_args a = {.in = {s->x, s->w, s->b, s->rm, s->rv}, .n_in = 5};
      a.i[0] = 1;
      a.i[1] = LOOM_ACT_RELU;
      a.f[0] = 0.1;
      a.f[1] = 1e-5;
      s->y = loom_op_run(LOOM_OP_BATCH_NORM, &a);
      s->stats = a.out[1];
      s->gy = s->x2;
      s->bytes = 3 * n * e;
      break;
    }
    case ADD_RELU_FWD: s->bytes = 3 * n * e; break;
    case GRAD_ACCUMULATE: s->bytes = 3 * n * e; break;
    case ADD_RELU_BWD: s->y = loom_add_relu(s->x, s->x2); s->gy = s->x2; s->bytes = 4 * n * e; break;
    case MAXPOOL_FWD: case MAXPOOL_BWD: case AVGPOOL_FWD: case AVGPOOL_BWD: case GAP_FWD: case GAP_BWD: {
      loom_op_args a = {.in = {s->x}, .n_in = 1};
      bool gap = c->op == GAP_FWD || c->op == GAP_BWD, mx = c->op == MAXPOOL_FWD || c->op == MAXPOOL_BWD;
      for (int d = 0; d < 2; d++) {
        a.i[d] = gap ? 1 : po.kernel[d];
        a.i[2 + d] = po.stride[d] ? po.stride[d] : po.kernel[d];
        a.i[4 + d] = po.padding[d];
      }
      a.i[7] = 1;
      a.i[8] = gap;
      a.i[11] = nhwc ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW;
      s->y = loom_op_run(mx ? LOOM_OP_MAX_POOL2D : gap ? LOOM_OP_ADAPTIVE_AVG_POOL2D : LOOM_OP_AVG_POOL2D, &a);
      if (!s->y) return 0;
      s->idx = mx ? a.out[1] : NULL;
      s->gpool = fmt(loom_randn(4, loom_tensor_shape(s->y), LOOM_F32, cpu), nhwc);
      double no = (double)loom_tensor_numel(s->y);
      s->bytes = n * e + no * e + (mx ? no * 4 : 0);
      break;
    }
    case DROPOUT_FWD: case DROPOUT_BWD: {
      loom_op_args a = {.in = {s->x}, .n_in = 1};
      a.f[0] = 0.5;
      a.i[2] = nhwc ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW;
      s->y = loom_op_run(LOOM_OP_DROPOUT, &a);
      s->mask = a.out[1];
      s->gy = s->x2;
      s->bytes = 2 * n * e + n / 8;
      break;
    }
  }
  return s->x && s->x2 &&
         (s->y || c->op == BN_TRAIN_FWD || c->op == BN_EVAL_FWD || c->op == ADD_RELU_FWD || c->op == GRAD_ACCUMULATE);
}

static int run_once(state *s, bool nhwc) {
  const bcase *c = s->c;
  loom_scope_begin();
  loom_tensor *r = NULL;
  loom_batch_norm_options bo;
  loom_batch_norm_options_init(&bo);
  loom_pool2d_options po = pool_opts(c->op);
  switch (c->op) {
    case BN_TRAIN_FWD:
      bo.act = LOOM_ACT_RELU;
      r = loom_batch_norm(s->x, s->rm, s->rv, s->w, s->b, &bo);
      break;
    case BN_EVAL_FWD:
      bo.training = false;
      r = loom_batch_norm(s->x, s->rm, s->rv, s->w, s->b, &bo);
      break;
    case BN_TRAIN_BWD: {
      loom_op_args a = {.in = {s->gy, s->x, s->w, s->b, s->stats}, .n_in = 5};
      a.i[0] = 1;
      a.i[1] = LOOM_ACT_RELU;
      a.i[2] = a.i[3] = a.i[4] = 1;
      r = loom_op_run(LOOM_OP_BATCH_NORM_BACKWARD, &a);
      break;
    }
    case ADD_RELU_FWD: r = loom_add_relu(s->x, s->x2); break;
    case GRAD_ACCUMULATE:  /* the autograd engine's in-place sum of a second gradient */
      r = loom_add_inplace(s->x, s->x2) == LOOM_OK ? s->x : NULL;
      break;
    case ADD_RELU_BWD: {
      loom_op_args a = {.in = {s->gy, s->y}, .n_in = 2};
      a.i[0] = a.i[1] = 1;
      r = loom_op_run(LOOM_OP_ADD_RELU_BACKWARD, &a);
      break;
    }
    case MAXPOOL_FWD: r = loom_max_pool2d(s->x, &po); break;
    case AVGPOOL_FWD: r = loom_avg_pool2d(s->x, &po); break;
    case GAP_FWD: r = loom_adaptive_avg_pool2d(s->x, 1, 1); break;
    case MAXPOOL_BWD: case AVGPOOL_BWD: case GAP_BWD: {
      bool gap = c->op == GAP_BWD, mx = c->op == MAXPOOL_BWD;
      loom_op_args a = {.in = {s->gpool, s->idx}, .n_in = mx ? 2 : 1};
      for (int d = 0; d < 2; d++) {
        a.i[d] = gap ? 1 : po.kernel[d];
        a.i[2 + d] = po.stride[d] ? po.stride[d] : po.kernel[d];
        a.i[4 + d] = po.padding[d];
      }
      a.i[7] = 1;
      a.i[8] = gap;
      a.i[9] = c->shape[2];
      a.i[10] = c->shape[3];
      a.i[11] = nhwc ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW;
      r = loom_op_run(mx ? LOOM_OP_MAX_POOL2D_BACKWARD : LOOM_OP_AVG_POOL2D_BACKWARD, &a);
      break;
    }
    case DROPOUT_FWD: r = loom_dropout(s->x, 0.5, true); break;
    case DROPOUT_BWD: {
      loom_op_args a = {.in = {s->gy, s->mask}, .n_in = 2};
      a.f[0] = 0.5;
      r = loom_op_run(LOOM_OP_DROPOUT_BACKWARD, &a);
      break;
    }
  }
  loom_scope_end();
  return r != NULL;
}

/* Best time of one call over batches of >= 30 ms. */
static double time_op(state *s, bool nhwc) {
  int iters = 1;
  double t;
  for (;;) {
    double t0 = now_s();
    for (int i = 0; i < iters; i++)
      if (!run_once(s, nhwc)) return -1;
    t = now_s() - t0;
    if (t >= 0.03) break;
    iters *= 2;
  }
  return t / iters;
}

static double time_memcpy(char *dst, const char *src, size_t n) {
  int iters = 1;
  double t;
  for (;;) {
    double t0 = now_s();
    for (int i = 0; i < iters; i++) {
      memcpy(dst, src, n);
      __asm__ __volatile__("" ::"r"(dst) : "memory");
    }
    t = now_s() - t0;
    if (t >= 0.03) break;
    iters *= 2;
  }
  return t / iters;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2, rounds = argc > 2 ? atoi(argv[2]) : 5;
  const char *filter = argc > 3 && strcmp(argv[3], "all") ? argv[3] : NULL;
  const char *dtn = argc > 4 ? argv[4] : "f32";
  g_dt = !strcmp(dtn, "bf16") ? LOOM_BF16 : !strcmp(dtn, "f16") ? LOOM_F16 : LOOM_F32;
  if (threads < 1 || rounds < 1 || (g_dt == LOOM_F32 && strcmp(dtn, "f32"))) {
    fprintf(stderr, "usage: bench_cnn_ops [threads=2] [rounds=5] [filter|all] [dtype=f32|bf16|f16]\n");
    return 2;
  }
  loom_set_num_threads(threads);
  loom_manual_seed(1);
  size_t maxb = 0;
  for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
    const int64_t *sh = CASES[k].shape;
    size_t b = (size_t)(sh[0] * sh[1] * sh[2] * sh[3]) * 4 * 4;
    if (b > maxb) maxb = b;
  }
  char *src = malloc(maxb), *dst = malloc(maxb);
  if (!src || !dst) return 1;
  memset(src, 1, maxb);
  memset(dst, 0, maxb);
  for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
    const bcase *c = &CASES[k];
    if (filter && !strstr(NAMES[c->op], filter)) continue;
    for (int f = 0; f < 2; f++) {
      loom_scope_begin();
      state s;
      if (!setup(&s, c, f)) {
        fprintf(stderr, "bench_cnn_ops: %s setup failed: %s\n", NAMES[c->op], loom_last_error());
        return 1;
      }
      double best = 1e30, best_mc = 1e30;
      size_t half = (size_t)(s.bytes / 2);
      for (int r = 0; r < rounds; r++) {
        double t = time_op(&s, f);
        if (t < 0) {
          fprintf(stderr, "bench_cnn_ops: %s failed: %s\n", NAMES[c->op], loom_last_error());
          return 1;
        }
        if (t < best) best = t;
        double m = time_memcpy(dst, src, half);
        if (m < best_mc) best_mc = m;
      }
      double gbps = s.bytes / best / 1e9, mgbps = 2.0 * (double)half / best_mc / 1e9;
      printf("bench=cnn_ops op=%s shape=%lldx%lldx%lldx%lld format=%s dtype=%s threads=%d ms=%.4f gbps=%.2f "
             "memcpy_gbps=%.2f vs_memcpy=%.3f\n",
             NAMES[c->op], (long long)c->shape[0], (long long)c->shape[1], (long long)c->shape[2],
             (long long)c->shape[3], f ? "nhwc" : "nchw", loom_dtype_name(g_dt), threads, best * 1e3, gbps, mgbps,
             gbps / mgbps);
      fflush(stdout);
      loom_scope_end();
    }
  }
  free(src);
  free(dst);
  return 0;
}
