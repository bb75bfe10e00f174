/* lr_eval.h (internal) — the learning-rate schedules' formula, shared by the
 * host (lr_schedule.c: loom_lr_at) and the GPU optimizer kernel (optim.cu),
 * which evaluates an attached schedule from a step counter in device memory
 * so that a captured CUDA graph replays with each step's own lr. One
 * expression for both; plain C types only, because the .cu side includes no
 * loom header. The device's cos/pow may differ from the host libm's in the
 * last bit of a double, which rounds to the same float lr all but rarely. */
#ifndef LOOM_OPTIM_LR_EVAL_H
#define LOOM_OPTIM_LR_EVAL_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define LOOM_LR_HD __host__ __device__
#else
#define LOOM_LR_HD
#endif

/* loom_lr_schedule's fields (kind: loom_lr_kind's values). */
typedef struct loom_lr_params {
  int32_t kind;
  double base_lr;
  int64_t warmup_steps, step_size;
  double gamma;
  int64_t total_steps;
  double min_lr, div_factor, final_div_factor;
} loom_lr_params;

#define LOOM_LR_PI 3.14159265358979323846

/* Cosine from a (pct 0) to b (pct 1), as OneCycleLR's _annealing_cos. */
static inline LOOM_LR_HD double loom_lr_anneal_cos(double a, double b, double pct) {
  return b + (a - b) / 2.0 * (cos(LOOM_LR_PI * pct) + 1.0);
}

/* The lr of step (0-based). OneCycleLR's two phases end at steps warmup - 1
 * and total - 1; the second starts where the first ended. */
static inline LOOM_LR_HD double loom_lr_eval(const loom_lr_params *s, int64_t step) {
  if (step < 0) step = 0;
  if (s->kind == 3) {
    double initial = s->base_lr / s->div_factor, final = initial / s->final_div_factor;
    double end1 = (double)s->warmup_steps - 1.0, end2 = (double)s->total_steps - 1.0, t = (double)step;
    if (t <= end1) return end1 > 0 ? loom_lr_anneal_cos(initial, s->base_lr, t / end1) : s->base_lr;
    if (end2 <= end1) return final;
    double pct = (t - end1) / (end2 - end1);
    return loom_lr_anneal_cos(s->base_lr, final, pct > 1 ? 1 : pct);
  }
  if (s->warmup_steps > 0 && step < s->warmup_steps) return s->base_lr * (double)(step + 1) / (double)s->warmup_steps;
  if (s->kind == 1) return s->base_lr * pow(s->gamma, (double)(step / (s->step_size > 0 ? s->step_size : 1)));
  if (s->kind == 2) {
    int64_t span = s->total_steps - s->warmup_steps;
    if (span <= 0) return s->min_lr;
    double t = (double)(step - s->warmup_steps) / (double)span;
    if (t > 1) t = 1;
    return s->min_lr + 0.5 * (s->base_lr - s->min_lr) * (1.0 + cos(LOOM_LR_PI * t));
  }
  return s->base_lr;
}

#endif
