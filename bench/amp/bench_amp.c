/* bench_amp.c — time of one mixed-precision training step (forward, scaled
 * backward, unscale + inf check, fused AdamW step that refreshes the f16/bf16
 * weight copies) against the fp32 step, for the MNIST MLP (784-1024-1024-10,
 * batch 128) and a wide MLP (4096-4096-4096-4096-10).
 *
 * Usage: bench_amp [device=auto|cpu|cuda[:N]] [iters=0 (auto)] [wide_batch=0 (auto)]
 * Prints one line per (model, precision):
 *   bench=amp model=mnist_mlp device=cpu precision=mixed-fp16 batch=128 step_ms=... speedup_vs_fp32=...
 *       loss_scale=... skipped=...
 * speedup_vs_fp32 = fp32 step time / this step time, measured in the same
 * run, precisions interleaved per round (the machine may be shared; the
 * best round counts).
 *
 * On the CPU the f16 GEMMs (and bf16 ones without AVX512_BF16) are an exact
 * emulation (operands widened to f32, result rounded once): the numbers there
 * show the emulation's cost, not a speed-up; bf16 on AVX512_BF16 runs real
 * bf16 dot products (bench/mlp/run_mlp_bf16.sh measures that). The speed-up the policy exists for is on a GPU's tensor cores;
 * compare with bench/amp/pytorch_amp.py (autocast + GradScaler) on the same GPU. */
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

typedef struct model_spec {
  const char *name;
  int64_t in;
  int n_hidden;
  int64_t hidden[4];
  int64_t out;
  int64_t batch;
} model_spec;

typedef struct runner {
  loom_precision prec;
  loom_module *m;
  loom_optimizer *o;
  loom_grad_scaler *s;
  loom_tensor **params;
  double best_ms;
} runner;

static int setup(runner *r, const model_spec *ms, loom_precision prec, loom_device dev) {
  memset(r, 0, sizeof *r);
  r->prec = prec;
  r->best_ms = 1e30;
  loom_manual_seed(1);
  r->m = loom_mlp_new(ms->in, ms->n_hidden, ms->hidden, ms->out, dev);
  if (!r->m || loom_module_set_precision(r->m, prec, false) != LOOM_OK) return 0;
  int np = loom_module_num_params(r->m);
  r->params = malloc((size_t)np * sizeof *r->params);
  if (!r->params) return 0;
  for (int i = 0; i < np; i++) r->params[i] = loom_module_param(r->m, i);
  r->o = loom_adamw_new(r->params, np, NULL);
  loom_scaler_options so;
  loom_scaler_options_init(&so);
  so.enabled = prec == LOOM_PRECISION_MIXED_FP16;
  r->s = loom_scaler_new(&so);
  return r->o && r->s;
}

static void teardown(runner *r) {
  loom_scaler_free(r->s);
  loom_optimizer_free(r->o);
  free(r->params);
  loom_module_free(r->m);
}

static int step(runner *r, loom_tensor *x, loom_tensor *y) {
  loom_scope_begin();
  loom_optimizer_zero_grad(r->o);
  loom_tensor *loss = loom_cross_entropy(loom_module_forward(r->m, x), y);
  int ok = loom_backward(loom_scaler_scale(r->s, loss)) == LOOM_OK && loom_scaler_step(r->s, r->o, NULL) == LOOM_OK;
  loom_scope_end();
  return ok;
}

static int bench_model(const model_spec *ms, loom_device dev, int iters, int rounds) {
  static const loom_precision precs[3] = {LOOM_PRECISION_FP32, LOOM_PRECISION_MIXED_FP16, LOOM_PRECISION_MIXED_BF16};
  runner rs[3];
  for (int p = 0; p < 3; p++) {
    if (!setup(&rs[p], ms, precs[p], dev)) {
      fprintf(stderr, "bench_amp: setting up %s %s: %s\n", ms->name, loom_precision_name(precs[p]), loom_last_error());
      return 0;
    }
  }
  loom_manual_seed(2);
  loom_tensor *x = loom_randn(2, (int64_t[]){ms->batch, ms->in}, LOOM_F32, dev);
  int64_t *labs = malloc((size_t)ms->batch * sizeof *labs);
  for (int64_t i = 0; i < ms->batch; i++) labs[i] = (i * 7) % ms->out;
  loom_tensor *y = loom_from_host(labs, 1, &ms->batch, LOOM_I64, dev);
  free(labs);
  if (!x || !y) return 0;
  for (int p = 0; p < 3; p++)  /* warm-up: first-use allocations, descriptor caches */
    if (!step(&rs[p], x, y)) {
      fprintf(stderr, "bench_amp: %s %s step: %s\n", ms->name, loom_precision_name(precs[p]), loom_last_error());
      return 0;
    }
  for (int round = 0; round < rounds; round++) {
    for (int p = 0; p < 3; p++) {
      loom_device_synchronize(dev);
      double t0 = now_s();
      for (int i = 0; i < iters; i++)
        if (!step(&rs[p], x, y)) return 0;
      loom_device_synchronize(dev);
      double ms_step = (now_s() - t0) * 1e3 / iters;
      if (ms_step < rs[p].best_ms) rs[p].best_ms = ms_step;
    }
  }
  char dn[32];
  loom_device_str(dev, dn, sizeof dn);
  for (int p = 0; p < 3; p++) {
    printf("bench=amp model=%s device=%s precision=%s batch=%lld step_ms=%.3f speedup_vs_fp32=%.2f loss_scale=%g "
           "skipped=%lld%s\n",
           ms->name, dn, loom_precision_name(precs[p]), (long long)ms->batch, rs[p].best_ms, rs[0].best_ms / rs[p].best_ms,
           loom_scaler_get_scale(rs[p].s), (long long)loom_scaler_steps_skipped(rs[p].s),
           dev.kind == LOOM_CPU && p ? " note=cpu-emulation" : "");
    fflush(stdout);
  }
  loom_tensor_release(x);
  loom_tensor_release(y);
  for (int p = 0; p < 3; p++) teardown(&rs[p]);
  return 1;
}

int main(int argc, char **argv) {
  const char *devs = argc > 1 ? argv[1] : "auto";
  int iters = argc > 2 ? atoi(argv[2]) : 0;
  int64_t wide_batch = argc > 3 ? atoll(argv[3]) : 0;
  loom_device dev;
  if (loom_device_parse(devs, &dev) != LOOM_OK) {
    fprintf(stderr, "bench_amp: %s\n", loom_last_error());
    return 2;
  }
  bool gpu = dev.kind == LOOM_CUDA;
  if (!gpu) printf("# bench_amp on the CPU: f16/bf16 GEMMs are emulated (widened to f32); no tensor cores (%s)\n",
                   loom_cuda_unavailable_reason() ? loom_cuda_unavailable_reason() : "cpu requested");
  model_spec mnist = {"mnist_mlp", 784, 2, {1024, 1024}, 10, 128};
  model_spec wide = {"wide_mlp", 4096, 3, {4096, 4096, 4096}, 10, wide_batch > 0 ? wide_batch : (gpu ? 1024 : 64)};
  int ok = bench_model(&mnist, dev, iters > 0 ? iters : (gpu ? 50 : 5), 3) &&
           bench_model(&wide, dev, iters > 0 ? iters : (gpu ? 20 : 1), gpu ? 3 : 2);
  return ok ? 0 : 1;
}
