/* lr_schedule.c — learning-rate schedules: constant, step, cosine, each with
 * an optional linear warm-up, and one-cycle (PyTorch's OneCycleLR, whose
 * warm-up is its own first phase). */
#include <math.h>

#include "loom/optim.h"

static loom_lr_schedule base(int kind, double lr) {
  loom_lr_schedule s = {sizeof(loom_lr_schedule), kind, lr, 0, 1, 1.0, 1, 0.0, 25.0, 1e4};
  return s;
}

loom_lr_schedule loom_lr_constant(double lr) { return base(LOOM_LR_CONSTANT, lr); }

loom_lr_schedule loom_lr_step(double lr, int64_t step_size, double gamma) {
  loom_lr_schedule s = base(LOOM_LR_STEP, lr);
  s.step_size = step_size > 0 ? step_size : 1;
  s.gamma = gamma;
  return s;
}

loom_lr_schedule loom_lr_cosine(double lr, int64_t warmup_steps, int64_t total_steps, double min_lr) {
  loom_lr_schedule s = base(LOOM_LR_COSINE, lr);
  s.warmup_steps = warmup_steps > 0 ? warmup_steps : 0;
  s.total_steps = total_steps > 0 ? total_steps : 1;
  s.min_lr = min_lr;
  return s;
}

loom_lr_schedule loom_lr_one_cycle(double max_lr, int64_t warmup_steps, int64_t total_steps, double div_factor,
                                   double final_div_factor) {
  loom_lr_schedule s = base(LOOM_LR_ONE_CYCLE, max_lr);
  s.total_steps = total_steps > 1 ? total_steps : 2;
  s.warmup_steps = warmup_steps < 1 ? 1 : warmup_steps >= s.total_steps ? s.total_steps - 1 : warmup_steps;
  s.div_factor = div_factor > 0 ? div_factor : 25.0;
  s.final_div_factor = final_div_factor > 0 ? final_div_factor : 1e4;
  return s;
}

/* Cosine from a (pct 0) to b (pct 1), as OneCycleLR's _annealing_cos. */
static double anneal_cos(double a, double b, double pct) { return b + (a - b) / 2.0 * (cos(M_PI * pct) + 1.0); }

/* OneCycleLR's two phases: they end at steps warmup - 1 and total - 1, and
 * the second starts where the first ended (its pct counts from warmup - 1). */
static double one_cycle_at(const loom_lr_schedule *s, int64_t step) {
  double initial = s->base_lr / s->div_factor, final = initial / s->final_div_factor;
  double end1 = (double)s->warmup_steps - 1.0, end2 = (double)s->total_steps - 1.0, t = (double)step;
  if (t <= end1) return end1 > 0 ? anneal_cos(initial, s->base_lr, t / end1) : s->base_lr;
  if (end2 <= end1) return final;
  double pct = (t - end1) / (end2 - end1);
  return anneal_cos(s->base_lr, final, pct > 1 ? 1 : pct);
}

double loom_lr_at(const loom_lr_schedule *s, int64_t step) {
  if (!s) return 0.0;
  if (step < 0) step = 0;
  if (s->kind == LOOM_LR_ONE_CYCLE) return one_cycle_at(s, step);
  if (s->warmup_steps > 0 && step < s->warmup_steps) return s->base_lr * (double)(step + 1) / (double)s->warmup_steps;
  switch (s->kind) {
    case LOOM_LR_STEP:
      return s->base_lr * pow(s->gamma, (double)(step / (s->step_size > 0 ? s->step_size : 1)));
    case LOOM_LR_COSINE: {
      int64_t span = s->total_steps - s->warmup_steps;
      if (span <= 0) return s->min_lr;
      double t = (double)(step - s->warmup_steps) / (double)span;
      if (t > 1) t = 1;
      return s->min_lr + 0.5 * (s->base_lr - s->min_lr) * (1.0 + cos(M_PI * t));
    }
    default:
      return s->base_lr;
  }
}
