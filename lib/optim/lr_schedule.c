/* lr_schedule.c — learning-rate schedules: constant, step, cosine, each with
 * an optional linear warm-up. */
#include <math.h>

#include "loom/optim.h"

static loom_lr_schedule base(int kind, double lr) {
  loom_lr_schedule s = {sizeof(loom_lr_schedule), kind, lr, 0, 1, 1.0, 1, 0.0};
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

double loom_lr_at(const loom_lr_schedule *s, int64_t step) {
  if (!s) return 0.0;
  if (step < 0) step = 0;
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
