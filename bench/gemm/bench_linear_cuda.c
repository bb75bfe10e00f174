/* bench_linear_cuda.c — the fused linear layer on the GPU against the
 * unfused path and against plain cuBLASLt GEMM throughput, at MLP sizes.
 *
 * The unit measured is a block of two Linear→ReLU layers (features F→F→F,
 * batch B), forward and backward, the input needing no gradient (as a first
 * layer): 2 forward GEMMs + 3 backward GEMMs (dW2, dX2, dW1). Fused: the
 * forwards use RELU_AUX_BIAS, dW uses BGRADB, and layer 2's dX GEMM applies
 * layer 1's dReLU and bias gradient with DRELU_BGRAD. Unfused: the same GEMMs
 * plus separate bias, ReLU, dReLU and bias-gradient kernels
 * (loom_cuda_linear_force_unfused). GEMM: the five GEMMs alone through
 * loom_matmul_ex (cuBLASLt, no epilogue) — the floor the fused layer aims at.
 *
 * Usage: bench_linear_cuda [reps=50] [dtype=f32|f16|bf16]
 * One line per size:
 *   bench=linear_cuda dtype=.. batch=B features=F fused_ms=.. unfused_ms=.. gemm_ms=..
 *     fused_tflops=.. gemm_tflops=.. speedup_vs_unfused=.. fused_vs_gemm=..
 * Without a GPU: "bench=linear_cuda skipped reason=..." and exit 0.
 * Targets (issue 4): speedup_vs_unfused >= 1.3 at batch 256 x 1024 features. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/loom.h"
#ifdef LOOM_HAVE_CUDA
#include "ops/cuda/cuda_kernels.h"
#endif

#ifndef LOOM_HAVE_CUDA
int main(void) {
  printf("bench=linear_cuda skipped reason=\"loom was built without CUDA\"\n");
  return 0;
}
#else

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct block {
  loom_tensor *x, *gy, *w1, *b1, *w2, *b2;
} block;

static loom_status fwd_bwd(block *k) {
  loom_status st = LOOM_OK;
  loom_scope_begin();
  loom_tensor *h = loom_linear(k->x, k->w1, k->b1, LOOM_ACT_RELU);
  loom_tensor *y = loom_linear(h, k->w2, k->b2, LOOM_ACT_RELU);
  st = y ? loom_backward_with(y, k->gy) : loom_last_status();
  loom_tensor *ps[4] = {k->w1, k->b1, k->w2, k->b2};
  for (int i = 0; i < 4; i++) loom_zero_grad(ps[i]);
  loom_scope_end();
  return st;
}

/* The five GEMMs of fwd_bwd, without epilogues or autograd. */
static loom_status gemms(block *k) {
  bool prev = loom_set_grad_enabled(false);
  loom_scope_begin();
  loom_tensor *h = loom_matmul_ex(k->x, k->w1, false, true);          /* fwd 1 */
  loom_tensor *y = loom_matmul_ex(h, k->w2, false, true);             /* fwd 2 */
  loom_tensor *dw2 = loom_matmul_ex(k->gy, h, true, false);           /* dW2 */
  loom_tensor *dh = loom_matmul_ex(k->gy, k->w2, false, false);       /* dX2 */
  loom_tensor *dw1 = loom_matmul_ex(dh, k->x, true, false);           /* dW1 */
  loom_status st = (y && dw2 && dw1) ? LOOM_OK : loom_last_status();
  loom_scope_end();
  loom_set_grad_enabled(prev);
  return st;
}

static double time_ms(loom_status (*fn)(block *), block *k, int reps, loom_device dev) {
  for (int i = 0; i < 3; i++)
    if (fn(k) != LOOM_OK) return -1;
  if (loom_device_synchronize(dev) != LOOM_OK) return -1;
  double best = 1e30;
  for (int r = 0; r < 5; r++) {
    double t0 = now_s();
    for (int i = 0; i < reps; i++)
      if (fn(k) != LOOM_OK) return -1;
    if (loom_device_synchronize(dev) != LOOM_OK) return -1;
    double ms = 1e3 * (now_s() - t0) / reps;
    if (ms < best) best = ms;
  }
  return best;
}

static loom_status fused(block *k) { loom_cuda_linear_force_unfused(false); return fwd_bwd(k); }
static loom_status unfused(block *k) { loom_cuda_linear_force_unfused(true); return fwd_bwd(k); }

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 50;
  const char *dts = argc > 2 ? argv[2] : "f32";
  loom_dtype dt = !strcmp(dts, "f16") ? LOOM_F16 : !strcmp(dts, "bf16") ? LOOM_BF16 : LOOM_F32;
  if (loom_device_count(LOOM_CUDA) == 0) {
    printf("bench=linear_cuda skipped reason=\"no CUDA device: %s\"\n", loom_cuda_unavailable_reason());
    return 0;
  }
  loom_device dev = loom_cuda(0);
  const int64_t batches[] = {128, 256, 1024, 4096};
  const int64_t feats[] = {784, 1024, 4096, 8192};
  for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
    for (size_t fi = 0; fi < sizeof feats / sizeof feats[0]; fi++) {
      int64_t B = batches[bi], F = feats[fi];
      loom_manual_seed(7);
      int64_t sx[2] = {B, F}, sw[2] = {F, F};
      block k;
      loom_scope_begin();  /* intermediates die here; loom_keep hands the results to us */
      k.x = loom_keep(loom_cast(loom_rand(2, sx, LOOM_F32, dev), dt));
      k.gy = loom_keep(loom_cast(loom_rand(2, sx, LOOM_F32, dev), dt));
      k.w1 = loom_keep(loom_cast(loom_mul_scalar(loom_rand(2, sw, LOOM_F32, dev), 0.01), dt));
      k.w2 = loom_keep(loom_cast(loom_mul_scalar(loom_rand(2, sw, LOOM_F32, dev), 0.01), dt));
      k.b1 = loom_keep(loom_cast(loom_rand(1, &F, LOOM_F32, dev), dt));
      k.b2 = loom_keep(loom_cast(loom_rand(1, &F, LOOM_F32, dev), dt));
      loom_scope_end();
      loom_tensor *ps[4] = {k.w1, k.b1, k.w2, k.b2};
      bool ok = k.x && k.gy;
      for (int i = 0; i < 4; i++) ok = ok && ps[i] && loom_set_requires_grad(ps[i], true) == LOOM_OK;
      if (!ok) {
        fprintf(stderr, "bench_linear_cuda: setup B=%lld F=%lld: %s\n", (long long)B, (long long)F, loom_last_error());
        return 1;
      }
      double tf = time_ms(fused, &k, reps, dev);
      double tu = time_ms(unfused, &k, reps, dev);
      double tg = time_ms(gemms, &k, reps, dev);
      loom_cuda_linear_force_unfused(false);
      if (tf < 0 || tu < 0 || tg < 0) {
        fprintf(stderr, "bench_linear_cuda: B=%lld F=%lld: %s\n", (long long)B, (long long)F, loom_last_error());
        return 1;
      }
      double flop = 5.0 * 2.0 * (double)B * (double)F * (double)F;
      printf("bench=linear_cuda dtype=%s batch=%lld features=%lld fused_ms=%.4f unfused_ms=%.4f gemm_ms=%.4f "
             "fused_tflops=%.2f gemm_tflops=%.2f speedup_vs_unfused=%.3f fused_vs_gemm=%.3f\n",
             dts, (long long)B, (long long)F, tf, tu, tg, flop / (tf * 1e9), flop / (tg * 1e9), tu / tf, tg / tf);
      fflush(stdout);
      loom_tensor *all[6] = {k.x, k.gy, k.w1, k.b1, k.w2, k.b2};
      for (int i = 0; i < 6; i++) loom_tensor_release(all[i]);
    }
  }
  return 0;
}
#endif
