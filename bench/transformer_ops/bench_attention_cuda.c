/* bench_attention_cuda.c — causal attention on CUDA: loom's fused kernels
 * (lib/ops/cuda/attention.cu, through loom_scaled_dot_product_attention)
 * against the unfused path through loom's own ops (scores = q·kᵀ · scale +
 * causal mask, softmax, · v: cuBLASLt GEMMs, a [T, T] score matrix per head).
 * Forward alone and forward + backward (from sum(y * g)); the two sides
 * alternate round by round (ABAB) and the median of the rounds is printed:
 *   bench=attention_cuda path=fused|unfused pass=fwd|fwd_bwd shape=BxHxTxD dtype=.. ms=.. tflops=..
 *   bench=attention_cuda ratio pass=.. shape=.. dtype=.. unfused_over_fused=..
 * tflops counts the causal half of 4 T^2 D (forward) or 10 T^2 D (forward +
 * backward: 2.5x forward's products, as FlashAttention counts) per head.
 * The op's path is the library's choice (f16/bf16: the chunked path,
 * lib/ops/cuda/attention_chunked.cu, batched GEMMs over chunks of query
 * rows; f32: the fused kernels) unless LOOM_CUDA_ATTENTION=fused|chunked
 * forces one; the lines name it (path=chunked or path=fused).
 * Without a GPU it prints why and exits 0 (a skip). The unfused side needs
 * softmax on CUDA; where that is missing it is reported as unavailable and
 * the fused side still runs.
 *
 * Usage: bench_attention_cuda [rounds=5] [iters=10] [dtype=f32|f16|bf16] [B H T D ...] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/loom.h"

#define CHECK(c)                                                                  \
  do {                                                                            \
    if (!(c)) {                                                                   \
      fprintf(stderr, "bench_attention_cuda: %s: %s\n", #c, loom_last_error());   \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct inputs {
  loom_tensor *q, *k, *v, *g, *mask; /* mask: [T, T], 0 on and below the diagonal, -inf above */
  int64_t sh[4];
} inputs;

static loom_tensor *unfused(const inputs *in) {
  double scale = 1.0 / sqrt((double)in->sh[3]);
  loom_tensor *s = loom_add(loom_mul_scalar(loom_matmul_ex(in->q, in->k, false, true), scale), in->mask);
  return loom_matmul(loom_softmax(s, -1), in->v);
}

/* One pass; returns false (error kept) when the path cannot run here. */
static bool pass(const inputs *in, bool fused, bool bwd) {
  loom_scope_begin();
  loom_tensor *y = fused ? loom_scaled_dot_product_attention(in->q, in->k, in->v, true) : unfused(in);
  bool ok = y != NULL;
  if (ok && bwd) ok = loom_backward(loom_sum_all(loom_mul(y, in->g))) == LOOM_OK;
  if (ok && bwd) {
    loom_zero_grad(in->q);
    loom_zero_grad(in->k);
    loom_zero_grad(in->v);
  }
  loom_scope_end();
  return ok;
}

/* Milliseconds per pass over iters passes (after the device is idle). */
static double time_passes(const inputs *in, bool fused, bool bwd, int iters, loom_device dev) {
  CHECK(loom_device_synchronize(dev) == LOOM_OK);
  double t0 = now_s();
  for (int i = 0; i < iters; i++)
    if (!pass(in, fused, bwd)) return -1;
  CHECK(loom_device_synchronize(dev) == LOOM_OK);
  return (now_s() - t0) * 1e3 / iters;
}

static void run_shape(const int64_t *sh, loom_dtype dt, int rounds, int iters, loom_device dev) {
  loom_scope_begin();
  inputs in;
  memcpy(in.sh, sh, sizeof in.sh);
  loom_tensor **t[4] = {&in.q, &in.k, &in.v, &in.g};
  for (int k = 0; k < 4; k++) {
    *t[k] = loom_cast(loom_randn(4, sh, LOOM_F32, dev), dt);
    CHECK(*t[k]);
    if (k < 3) loom_set_requires_grad(*t[k], true);
  }
  int64_t T = sh[2], ms[2] = {T, T};
  float *m = malloc((size_t)(T * T) * sizeof *m);
  CHECK(m);
  for (int64_t i = 0; i < T; i++)
    for (int64_t j = 0; j < T; j++) m[i * T + j] = j <= i ? 0.0f : -INFINITY;
  in.mask = loom_to_device(loom_cast(loom_from_host(m, 2, ms, LOOM_F32, loom_cpu()), dt), dev);
  free(m);
  CHECK(in.mask);
  char shape[64];
  snprintf(shape, sizeof shape, "%lldx%lldx%lldx%lld", (long long)sh[0], (long long)sh[1], (long long)sh[2],
           (long long)sh[3]);
  const char *env = getenv("LOOM_CUDA_ATTENTION");
  const bool chunked = env ? !strcmp(env, "chunked") : dt != LOOM_F32; /* as attention_cuda.c */
  const char *fname = chunked ? "chunked" : "fused";
  double flops_fwd = 4.0 * (double)(sh[0] * sh[1]) * (double)T * (double)T * (double)sh[3] / 2.0;
  for (int bwd = 0; bwd < 2; bwd++) {
    const char *pname = bwd ? "fwd_bwd" : "fwd";
    double flops = bwd ? 2.5 * flops_fwd : flops_fwd;
    /* Warm up both (plans, allocator), then alternate fused / unfused. */
    bool have_unfused = pass(&in, false, bwd);
    const char *why = have_unfused ? NULL : loom_last_error();
    char whybuf[200] = "";
    if (why) snprintf(whybuf, sizeof whybuf, "%s", why);
    CHECK(pass(&in, true, bwd));
    double *tf = calloc((size_t)rounds, sizeof *tf), *tu = calloc((size_t)rounds, sizeof *tu);
    CHECK(tf && tu);
    for (int r = 0; r < rounds; r++) {
      tf[r] = time_passes(&in, true, bwd, iters, dev);
      CHECK(tf[r] >= 0);
      if (have_unfused) tu[r] = time_passes(&in, false, bwd, iters, dev);
    }
    qsort(tf, (size_t)rounds, sizeof *tf, cmp);
    qsort(tu, (size_t)rounds, sizeof *tu, cmp);
    double mf = tf[rounds / 2], mu = tu[rounds / 2];
    printf("bench=attention_cuda path=%s pass=%s shape=%s dtype=%s ms=%.4f tflops=%.2f\n", fname, pname, shape,
           loom_dtype_name(dt), mf, flops / (mf * 1e-3) / 1e12);
    if (have_unfused) {
      printf("bench=attention_cuda path=unfused pass=%s shape=%s dtype=%s ms=%.4f tflops=%.2f\n", pname, shape,
             loom_dtype_name(dt), mu, flops / (mu * 1e-3) / 1e12);
      printf("bench=attention_cuda ratio pass=%s shape=%s dtype=%s unfused_over_%s=%.3f\n", pname, shape,
             loom_dtype_name(dt), fname, mu / mf);
    } else {
      printf("bench=attention_cuda path=unfused pass=%s shape=%s dtype=%s unavailable: %s\n", pname, shape,
             loom_dtype_name(dt), whybuf);
      loom_clear_error();
    }
    free(tf), free(tu);
  }
  loom_scope_end();
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5, iters = argc > 2 ? atoi(argv[2]) : 10;
  const char *dts = argc > 3 ? argv[3] : "f32";
  loom_dtype dt = !strcmp(dts, "f16") ? LOOM_F16 : !strcmp(dts, "bf16") ? LOOM_BF16 : LOOM_F32;
  if (rounds < 1 || iters < 1 || (strcmp(dts, "f32") && dt == LOOM_F32)) {
    fprintf(stderr, "usage: bench_attention_cuda [rounds>=1] [iters>=1] [f32|f16|bf16] [B H T D ...]\n");
    return 2;
  }
  if (loom_device_count(LOOM_CUDA) < 1) {
    printf("bench=attention_cuda skipped: no CUDA device (%s)\n", loom_cuda_unavailable_reason());
    return 0;
  }
  loom_device dev = loom_cuda(0);
  if (argc > 4) {
    for (int a = 4; a + 3 < argc; a += 4) {
      int64_t sh[4] = {atoll(argv[a]), atoll(argv[a + 1]), atoll(argv[a + 2]), atoll(argv[a + 3])};
      run_shape(sh, dt, rounds, iters, dev);
    }
  } else {
    static const int64_t shapes[][4] = {{4, 12, 1024, 64}, {8, 12, 512, 64}, {4, 16, 1024, 128}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) run_shape(shapes[s], dt, rounds, iters, dev);
  }
  CHECK(loom_shutdown() == LOOM_OK);
  return 0;
}
