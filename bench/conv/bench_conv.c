/* bench_conv.c — per-layer convolution throughput on every conv shape of
 * ResNet-20 (CIFAR-10 32x32x3 and Fashion-MNIST 28x28x1 inputs, batch 128):
 * forward, backward-data and backward-filter, NCHW and NHWC, against the
 * built-in GEMM's peak measured in the same run. On the CPU it times both
 * loom paths side by side — the default (direct kernels where they apply;
 * --isa none: the dispatch of a CPU without them, i.e. the 1x1 GEMM path for
 * 1x1 layers) and the im2col + GEMM path (forced) — alternating round by
 * round so both see the same background load. bench/conv/pytorch_conv.py times PyTorch's
 * F.conv2d on the same shapes; bench/conv/run_conv_vs_pytorch.sh runs both.
 *
 * Usage: bench_conv [--device cpu|cuda] [--batch 128] [--threads 2] [--reps 5]
 *                   [--dataset cifar|fmnist|both] [--dtype f32|f16|bf16]
 *                   [--format nchw|nhwc|both] [--paths default|gemm|both]
 *                   [--min-time 0.05] [--layer SUBSTRING] [--fused] [--isa avx512|avx2|none]
 * Prints, per result:
 *   bench=conv device=cpu dataset=cifar layer=s1.conv3x3 shape=NxCxHxW->O,k3,s1 fmt=nhwc pass=fwd
 *     path=default dtype=f32 ms=... gflops=... of_gemm_peak=...
 * then one line per (dataset, format, path) summing a whole ResNet-20
 * training step's convolutions (each layer times its count in the network;
 * the stem needs no backward-data):
 *   bench=conv_resnet20 ... step_conv_ms=... gflops=...
 * --fused: forwards add a bias and apply ReLU (CPU: in the kernels' epilogue;
 * CUDA: the fused cuDNN graph, timed against its fallback as path=unfused).
 * --device cuda: timed with a device synchronisation after each call; the
 * GEMM-peak anchor and of_gemm_peak are CPU-only.
 * and first the anchor: bench=gemm_peak gflops=... (best of 1024^3 and
 * 4096x256x1152 SGEMMs, the latter shaped like an im2col conv). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/loom.h"
#include "ops/conv.h"
#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/gemm.h"

typedef struct layer {
  const char *name;
  int64_t C, O, H, K, s;
  int count;        /* how many times ResNet-20 has this shape */
  bool stem;        /* first layer: no backward-data in training */
} layer;

/* ResNet-20 (He et al. 2016, CIFAR variant: 3 stages of 3 basic blocks, 16/32/64
 * channels) with 1x1 projection shortcuts where the shape changes. */
static const layer CIFAR[] = {
    {"stem.conv3x3", 3, 16, 32, 3, 1, 1, true},
    {"s1.conv3x3", 16, 16, 32, 3, 1, 6, false},
    {"s2.down3x3", 16, 32, 32, 3, 2, 1, false},
    {"s2.short1x1", 16, 32, 32, 1, 2, 1, false},
    {"s2.conv3x3", 32, 32, 16, 3, 1, 5, false},
    {"s3.down3x3", 32, 64, 16, 3, 2, 1, false},
    {"s3.short1x1", 32, 64, 16, 1, 2, 1, false},
    {"s3.conv3x3", 64, 64, 8, 3, 1, 5, false},
};
static const layer FMNIST[] = {
    {"stem.conv3x3", 1, 16, 28, 3, 1, 1, true},
    {"s1.conv3x3", 16, 16, 28, 3, 1, 6, false},
    {"s2.down3x3", 16, 32, 28, 3, 2, 1, false},
    {"s2.short1x1", 16, 32, 28, 1, 2, 1, false},
    {"s2.conv3x3", 32, 32, 14, 3, 1, 5, false},
    {"s3.down3x3", 32, 64, 14, 3, 2, 1, false},
    {"s3.short1x1", 32, 64, 14, 1, 2, 1, false},
    {"s3.conv3x3", 64, 64, 7, 3, 1, 5, false},
};
#define NL 8

enum { FWD = 0, BWD_DATA = 1, BWD_FILTER = 2 };
static const char *PASS[3] = {"fwd", "bwd_data", "bwd_filter"};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct ctx {
  loom_device dev;
  loom_tensor *x, *w, *gy, *b;  /* b: the bias of --fused forwards, else NULL */
  int64_t i[LOOM_OP_MAX_INTS];
} ctx;

static loom_status run_pass(ctx *c, int pass) {
  loom_scope_begin();
  loom_status st = LOOM_OK;
  loom_op_args a = {.in = {c->x, c->w, c->b}, .n_in = c->b ? 3 : 2};
  memcpy(a.i, c->i, sizeof a.i);
  if (pass == FWD) {
    if (!loom_op_run(LOOM_OP_CONV2D, &a)) st = loom_last_status();
  } else {
    a.in[0] = c->gy;
    a.in[1] = c->x;
    a.in[2] = c->w;
    a.n_in = 3;
    a.i[LOOM_CONV_I_ACT] = LOOM_ACT_NONE;
    a.i[LOOM_CONV_I_NEED_DX] = pass == BWD_DATA;
    a.i[LOOM_CONV_I_NEED_DW] = pass == BWD_FILTER;
    loom_op_run(LOOM_OP_CONV2D_BACKWARD, &a);
    if (!a.out[pass == BWD_DATA ? 0 : 1]) st = loom_last_status();
  }
  if (st == LOOM_OK && c->dev.kind == LOOM_CUDA) st = loom_device_synchronize(c->dev);
  loom_scope_end();
  return st;
}

/* Seconds per call: calls batched to >= min_time. */
static double time_pass(ctx *c, int pass, double min_time, int *iters) {
  if (*iters <= 0) {
    double t0 = now_s();
    if (run_pass(c, pass) != LOOM_OK) return -1;
    double one = now_s() - t0;
    *iters = one > 0 ? (int)(min_time / one) + 1 : 1000;
  }
  double t0 = now_s();
  for (int k = 0; k < *iters; k++)
    if (run_pass(c, pass) != LOOM_OK) return -1;
  return (now_s() - t0) / *iters;
}

static double gemm_peak(int reps) {
  const int64_t shapes[2][3] = {{1024, 1024, 1024}, {4096, 256, 1152}};
  double best = 0;
  for (int s = 0; s < 2; s++) {
    int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    float *A = malloc(sizeof(float) * (size_t)(M * K)), *B = malloc(sizeof(float) * (size_t)(K * N)),
          *C = malloc(sizeof(float) * (size_t)(M * N));
    if (!A || !B || !C) {
      free(A), free(B), free(C);
      continue;
    }
    for (int64_t i = 0; i < M * K; i++) A[i] = (float)(i % 17) * 0.01f;
    for (int64_t i = 0; i < K * N; i++) B[i] = (float)(i % 13) * 0.01f;
    loom_cpu_sgemm(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
    for (int r = 0; r < reps; r++) {
      double t0 = now_s();
      int it = 0;
      do {
        loom_cpu_sgemm(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
        it++;
      } while (now_s() - t0 < 0.1);
      double g = 2.0 * (double)M * (double)N * (double)K * it / (now_s() - t0) / 1e9;
      if (g > best) best = g;
    }
    free(A), free(B), free(C);
  }
  return best;
}

int main(int argc, char **argv) {
  const char *device = "cpu", *dataset = "both", *dtype_s = "f32", *format = "both", *paths = "both", *only = NULL;
  bool fused = false;
  int64_t batch = 128;
  int threads = 2, reps = 5;
  double min_time = 0.05;
  for (int k = 1; k < argc; k++) {
    const char *a = argv[k], *v = k + 1 < argc ? argv[k + 1] : NULL;
    if (!strcmp(a, "--fused")) {
      fused = true;
      continue;
    }
    if (!v) goto usage;
    if (!strcmp(a, "--device")) device = v;
    else if (!strcmp(a, "--batch")) batch = atoll(v);
    else if (!strcmp(a, "--threads")) threads = atoi(v);
    else if (!strcmp(a, "--reps")) reps = atoi(v);
    else if (!strcmp(a, "--dataset")) dataset = v;
    else if (!strcmp(a, "--dtype")) dtype_s = v;
    else if (!strcmp(a, "--format")) format = v;
    else if (!strcmp(a, "--paths")) paths = v;
    else if (!strcmp(a, "--min-time")) min_time = atof(v);
    else if (!strcmp(a, "--layer")) only = v;
    else if (!strcmp(a, "--isa")) {
      if (!loom_conv_cpu_select_isa(v)) {
        printf("bench=conv skipped reason=\"this CPU cannot run the %s kernels\"\n", v);
        return 0;
      }
    }
    else goto usage;
    k++;
  }
  if (batch < 1 || reps < 1) goto usage;
  loom_device dev;
  if (loom_device_parse(device, &dev) != LOOM_OK || loom_device_check(dev) != LOOM_OK) {
    /* No such device (e.g. no GPU here): say so and succeed, like the other benchmarks. */
    printf("bench=conv skipped reason=\"%s\"\n", loom_last_error());
    return 0;
  }
  loom_dtype dt = !strcmp(dtype_s, "f16") ? LOOM_F16 : !strcmp(dtype_s, "bf16") ? LOOM_BF16 : LOOM_F32;
  bool cpu = dev.kind == LOOM_CPU;
  loom_set_num_threads(threads);
  loom_set_grad_enabled(false);
  int npaths = 0, path_ids[2];
  /* Path 1: the CPU's im2col + GEMM path, or CUDA's unfused fallback (only
   * differs from the default with --fused). */
  if (strcmp(paths, "gemm")) path_ids[npaths++] = 0;
  if (strcmp(paths, "default") && (cpu || fused)) path_ids[npaths++] = 1;
  int nfmt = 0, fmts[2];
  if (strcmp(format, "nhwc")) fmts[nfmt++] = 0;
  if (strcmp(format, "nchw")) fmts[nfmt++] = 1;

  double peak = cpu ? gemm_peak(reps) : 0;
  if (cpu)
    printf("bench=gemm_peak device=cpu threads=%d impl=%s conv_isa=%s gflops=%.1f\n", threads, loom_cpu_gemm_impl(),
           loom_conv_cpu_isa_name(), peak);
  fflush(stdout);

  for (int ds = 0; ds < 2; ds++) {
    const char *dsname = ds == 0 ? "cifar" : "fmnist";
    if (strcmp(dataset, "both") && strcmp(dataset, dsname)) continue;
    const layer *L = ds == 0 ? CIFAR : FMNIST;
    /* ms[fmt][path][layer][pass] */
    double ms[2][2][NL][3] = {{{{0}}}};
    for (int l = 0; l < NL; l++) {
      const layer *ly = &L[l];
      if (only && !strstr(ly->name, only)) continue;
      int64_t pad = ly->K / 2, OH = (ly->H + 2 * pad - ly->K) / ly->s + 1;
      double flops = 2.0 * (double)batch * (double)ly->O * (double)(OH * OH) * (double)ly->C * (double)(ly->K * ly->K);
      for (int f = 0; f < nfmt; f++) {
        loom_scope_begin();
        int64_t sx[4] = {batch, ly->C, ly->H, ly->H}, sw[4] = {ly->O, ly->C, ly->K, ly->K}, sy[4] = {batch, ly->O, OH, OH};
        ctx c = {.dev = dev};
        c.x = loom_randn(4, sx, dt, dev);
        c.w = loom_randn(4, sw, dt, dev);
        c.gy = loom_randn(4, sy, dt, dev);
        if (fmts[f]) {
          /* With one input channel a channels-last x is also contiguous and
           * counts as NCHW (so does the output): gy then stays NCHW, as
           * conv2d's backward rule would make it. */
          c.x = loom_to_memory_format(c.x, LOOM_FORMAT_NHWC);
          if (loom_tensor_memory_format(c.x) == LOOM_FORMAT_NHWC) c.gy = loom_to_memory_format(c.gy, LOOM_FORMAT_NHWC);
        }
        if (!c.x || !c.w || !c.gy) {
          fprintf(stderr, "bench_conv: %s\n", loom_last_error());
          return 1;
        }
        c.i[LOOM_CONV_I_STRIDE_H] = c.i[LOOM_CONV_I_STRIDE_W] = ly->s;
        c.i[LOOM_CONV_I_PAD_H] = c.i[LOOM_CONV_I_PAD_W] = pad;
        c.i[LOOM_CONV_I_DIL_H] = c.i[LOOM_CONV_I_DIL_W] = 1;
        c.i[LOOM_CONV_I_GROUPS] = 1;
        if (fused) {
          /* Forward with bias + ReLU: on the CPU in the kernels' epilogue;
           * on CUDA one cuDNN graph, against its fallback (path=unfused). */
          c.b = loom_randn(1, &ly->O, dt, dev);
          c.i[LOOM_CONV_I_ACT] = LOOM_ACT_RELU;
        }
        for (int pass = 0; pass < 3; pass++) {
          if (pass == BWD_DATA && ly->stem) continue;
          double best[2] = {1e30, 1e30};
          int iters[2] = {0, 0};
          for (int r = 0; r < reps; r++)
            for (int p = 0; p < npaths; p++) {
              if (cpu) loom_conv_cpu_force_gemm(path_ids[p] == 1);
#ifdef LOOM_HAVE_CUDA
              else loom_cuda_conv_force_unfused(path_ids[p] == 1);
#endif
              double t = time_pass(&c, pass, min_time, &iters[p]);
              if (t < 0) {
                fprintf(stderr, "bench_conv: %s %s: %s\n", ly->name, PASS[pass], loom_last_error());
                return 1;
              }
              if (t < best[p]) best[p] = t;
            }
          for (int p = 0; p < npaths; p++) {
            double g = flops / best[p] / 1e9;
            ms[fmts[f]][path_ids[p]][l][pass] = best[p] * 1e3;
            printf("bench=conv device=%s dataset=%s layer=%s shape=%lldx%lldx%lldx%lld->%lld,k%lld,s%lld fmt=%s "
                   "pass=%s path=%s dtype=%s threads=%d ms=%.3f gflops=%.1f",
                   device, dsname, ly->name, (long long)batch, (long long)ly->C, (long long)ly->H, (long long)ly->H,
                   (long long)ly->O, (long long)ly->K, (long long)ly->s, fmts[f] ? "nhwc" : "nchw", PASS[pass],
                   path_ids[p] ? (cpu ? "gemm" : "unfused") : "default", dtype_s, threads, best[p] * 1e3, g);
            if (cpu) printf(" of_gemm_peak=%.2f", g / peak);
            if (fused && pass == FWD) printf(" act=bias_relu");
            printf("\n");
          }
          fflush(stdout);
        }
        if (cpu) loom_conv_cpu_force_gemm(false);
#ifdef LOOM_HAVE_CUDA
        else loom_cuda_conv_force_unfused(false);
#endif
        loom_scope_end();
      }
    }
    if (only) continue;
    for (int f = 0; f < nfmt; f++)
      for (int p = 0; p < npaths; p++) {
        double tot = 0, flops = 0;
        for (int l = 0; l < NL; l++) {
          const layer *ly = &L[l];
          int64_t pad = ly->K / 2, OH = (ly->H + 2 * pad - ly->K) / ly->s + 1;
          double fl = 2.0 * (double)batch * (double)ly->O * (double)(OH * OH) * (double)ly->C * (double)(ly->K * ly->K);
          for (int pass = 0; pass < 3; pass++) {
            if (pass == BWD_DATA && ly->stem) continue;
            tot += ly->count * ms[fmts[f]][path_ids[p]][l][pass];
            flops += ly->count * fl;
          }
        }
        printf("bench=conv_resnet20 device=%s dataset=%s fmt=%s path=%s dtype=%s threads=%d batch=%lld "
               "step_conv_ms=%.2f gflops=%.1f\n",
               device, dsname, fmts[f] ? "nhwc" : "nchw", path_ids[p] ? (cpu ? "gemm" : "unfused") : "default", dtype_s, threads,
               (long long)batch, tot, flops / (tot * 1e-3) / 1e9);
      }
  }
  return 0;
usage:
  fprintf(stderr,
          "usage: %s [--device cpu|cuda] [--batch N] [--threads N] [--reps N] [--dataset cifar|fmnist|both]\n"
          "          [--dtype f32|f16|bf16] [--format nchw|nhwc|both] [--paths default|gemm|both] [--min-time S]\n"
          "          [--layer SUBSTRING] [--fused] [--isa avx512|avx2|none]\n",
          argv[0]);
  return 2;
}
