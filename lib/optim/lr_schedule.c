/* lr_schedule.c — learning-rate schedules: constant, step, cosine, each with
 * an optional linear warm-up, and one-cycle (PyTorch's OneCycleLR, whose
 * warm-up is its own first phase). */
#include "loom/optim.h"
#include "optim/lr_eval.h"
#include "optim/optim_internal.h"

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

/* The formula lives in lr_eval.h, shared with the GPU optimizer kernel. */
loom_lr_params loom_lr_params_of(const loom_lr_schedule *s) {
  loom_lr_params p = {s->kind,       s->base_lr, s->warmup_steps, s->step_size,       s->gamma,
                      s->total_steps, s->min_lr,  s->div_factor,   s->final_div_factor};
  return p;
}

double loom_lr_at(const loom_lr_schedule *s, int64_t step) {
  if (!s) return 0.0;
  loom_lr_params p = loom_lr_params_of(s);
  return loom_lr_eval(&p, step);
}
