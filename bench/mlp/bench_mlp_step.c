/* bench_mlp_step.c — training-step throughput of the MNIST MLP in loom:
 * 784→1024→1024→10 (ReLU fused into the first two Linear layers), mean
 * cross-entropy, AdamW (lr 1e-3, PyTorch's defaults otherwise), batch 128 —
 * the same model, batch and optimizer as loom-mnist and as
 * bench/mlp/pytorch_mlp_step.py, which measures PyTorch eager on the same GPU.
 * Inputs are a fixed random batch already on the device, so the number is
 * the step itself (forward, backward, optimizer), not data loading.
 *
 * Usage: bench_mlp_step [--device cpu|cuda|cuda:N|auto] [--batch 128]
 *                       [--steps 200] [--warmup 20] [--unfused] [--precision fp32|bf16|fp16]
 * --precision bf16 / fp16: the mixed precision policy (loom_module_set_precision,
 * no loss scaling: the inputs are benign), as loom-mnist --precision.
 * Prints one line:
 *   bench=mlp_step device=... batch=... steps=... steps_per_s=... ms_per_step=... cpu_ms_per_step=... optim_ms_per_step=... loss_first=... loss_last=...
 * cpu_ms_per_step: the process's CPU time (every thread, user + system) per
 * timed step — on a shared, oversubscribed machine the 1-thread number that
 * waiting for the core does not inflate.
 * optim_ms_per_step: wall time inside loom_optimizer_step per timed step
 * (on a GPU, the time to enqueue it).
 * or, when the device does not exist (e.g. no GPU):
 *   bench=mlp_step skipped reason=...   (exit 0) */
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

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
  fprintf(stderr, "bench_mlp_step: %s: %s\n", what, loom_last_error());
  return 1;
}

/* One step; returns the loss (or NAN on failure, with the error set). */
static loom_status step(loom_module *model, loom_optimizer *opt, loom_tensor *x, loom_tensor *y, double *loss_out,
                        bool read_loss, double *optim_s) {
  loom_status st = LOOM_OK;
  loom_scope_begin();
  loom_tensor *loss = loom_cross_entropy(loom_module_forward(model, x), y);
  if (!loss) st = loom_last_status();
  if (st == LOOM_OK) st = loom_backward(loss);
  const double t0 = now_s();
  if (st == LOOM_OK) st = loom_optimizer_step(opt);
  if (optim_s) *optim_s += now_s() - t0;
  if (st == LOOM_OK) st = loom_optimizer_zero_grad(opt);
  if (st == LOOM_OK && read_loss) st = loom_item(loss, loss_out);
  loom_scope_end();
  return st;
}

int main(int argc, char **argv) {
  const char *device = "auto";
  int64_t batch = 128;
  int steps = 200, warmup = 20;
  bool unfused = false;
  loom_precision prec = LOOM_PRECISION_FP32;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--unfused")) unfused = true;
    else if (!strcmp(argv[i], "--precision") && i + 1 < argc && loom_precision_parse(argv[i + 1], &prec) == LOOM_OK) i++;
    else {
      fprintf(stderr,
              "usage: %s [--device cpu|cuda|cuda:N|auto] [--batch N] [--steps N] [--warmup N] [--unfused] "
              "[--precision fp32|bf16|fp16]\n",
              argv[0]);
      return 2;
    }
  }
  if (batch < 1 || steps < 1 || warmup < 0) {
    fprintf(stderr, "bench_mlp_step: batch and steps must be positive\n");
    return 2;
  }
  loom_device dev;
  if (loom_device_parse(device, &dev) != LOOM_OK) {
    printf("bench=mlp_step skipped reason=\"%s\"\n", loom_last_error());
    return 0;
  }
#ifdef LOOM_HAVE_CUDA
  loom_cuda_linear_force_unfused(unfused);
#else
  (void)unfused;
#endif
  char dname[32];
  loom_device_str(dev, dname, sizeof dname);

  loom_manual_seed(1234);
  const int64_t hidden[2] = {1024, 1024};
  loom_module *model = loom_mlp_new(784, 2, hidden, 10, dev);
  if (!model) return fail("mlp");
  if (prec != LOOM_PRECISION_FP32 && loom_module_set_precision(model, prec, false) != LOOM_OK) return fail("precision");
  int np = loom_module_num_params(model);
  loom_tensor **params = malloc((size_t)np * sizeof *params);
  if (!params) return 1;
  for (int i = 0; i < np; i++) params[i] = loom_module_param(model, i);
  loom_adamw_options ao;
  loom_adamw_options_init(&ao);
  ao.lr = 1e-3;
  loom_optimizer *opt = loom_adamw_new(params, np, &ao);
  if (!opt) return fail("adamw");

  int64_t xs[2] = {batch, 784};
  loom_tensor *x = loom_rand(2, xs, LOOM_F32, dev);
  int64_t *labels = malloc((size_t)batch * sizeof *labels);
  if (!labels) return 1;
  for (int64_t i = 0; i < batch; i++) labels[i] = (i * 7 + 3) % 10;
  loom_tensor *y = loom_from_host(labels, 1, &batch, LOOM_I64, dev);
  if (!x || !y) return fail("inputs");

  double loss_first = 0, loss_last = 0;
  if (step(model, opt, x, y, &loss_first, true, NULL) != LOOM_OK) return fail("first step");
  for (int i = 0; i < warmup; i++)
    if (step(model, opt, x, y, NULL, false, NULL) != LOOM_OK) return fail("warmup");
  if (loom_device_synchronize(dev) != LOOM_OK) return fail("synchronize");
  double t0 = now_s(), c0 = cpu_s(), optim_s = 0;
  for (int i = 0; i < steps; i++)
    if (step(model, opt, x, y, NULL, false, &optim_s) != LOOM_OK) return fail("step");
  if (loom_device_synchronize(dev) != LOOM_OK) return fail("synchronize");
  double dt = now_s() - t0, dc = cpu_s() - c0;
  if (step(model, opt, x, y, &loss_last, true, NULL) != LOOM_OK) return fail("last step");

  printf("bench=mlp_step device=%s batch=%lld steps=%d unfused=%d precision=%s steps_per_s=%.2f ms_per_step=%.4f "
         "cpu_ms_per_step=%.4f optim_ms_per_step=%.4f loss_first=%.6f loss_last=%.6f\n",
         dname, (long long)batch, steps, unfused ? 1 : 0, loom_precision_name(prec), steps / dt, 1e3 * dt / steps,
         1e3 * dc / steps, 1e3 * optim_s / steps, loss_first, loss_last);
  loom_tensor_release(x);
  loom_tensor_release(y);
  free(labels);
  loom_optimizer_free(opt);
  free(params);
  loom_module_free(model);
  return 0;
}
