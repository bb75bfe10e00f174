/* adamw.c — AdamW with decoupled weight decay (PyTorch's
 * torch.optim.AdamW), on fused.c: its options, its fused update with
 * per-parameter bias corrections (optim_cpu.c, cuda/optim.cu) and its
 * hyper-parameters in checkpoints. */
#include <math.h>
#include <string.h>

#include "core/struct_size.h"
#include "optim/fused.h"

typedef struct adamw_optimizer {
  loom_fused_optimizer f;  /* first */
  loom_adamw_options opt;
} adamw_optimizer;

static const loom_adamw_options *opts(const void *o) { return &((const adamw_optimizer *)o)->opt; }

static loom_status adamw_cpu(loom_fused_optimizer *f, loom_param_group *g, int64_t prior_steps,
                             const loom_optim_group *grp) {
  const loom_adamw_options *o = opts(f);
  double t = (double)(prior_steps + 1);
  loom_adamw_hparams h = {(float)grp->lr, (float)o->beta1, (float)o->beta2, (float)o->eps, (float)grp->weight_decay,
                          (float)(1.0 - pow(o->beta1, t)), (float)(1.0 - pow(o->beta2, t))};
  return loom_cpu_adamw_step(g, &h);
}

#ifdef LOOM_HAVE_CUDA
static loom_status adamw_cuda(loom_fused_optimizer *f, loom_param_group *g, float lr0, float wd0,
                              loom_opt_cuda_args *a) {
  const loom_adamw_options *o = opts(f);
  a->beta1 = o->beta1, a->beta2 = o->beta2;  /* the bias-correction tables */
  loom_adamw_hparams h = {lr0, (float)o->beta1, (float)o->beta2, (float)o->eps, wd0, 1.0f, 1.0f};
  return loom_cuda_adamw_step(f->base.device, g, &h, a);
}
#endif

static const loom_fused_update adamw_update = {
  "adamw step", adamw_cpu,
#ifdef LOOM_HAVE_CUDA
  adamw_cuda,
#endif
};

static double adamw_default_wd(const loom_optimizer *o) { return opts(o)->weight_decay; }

static int adamw_param_state(const loom_optimizer *o, int i, const char **names, loom_tensor **tensors) {
  names[0] = "exp_avg", tensors[0] = o->buf1[i];
  names[1] = "exp_avg_sq", tensors[1] = o->buf2[i];
  return 2;
}

static void adamw_put_hparams(const loom_optimizer *o, loom_optim_hparam_writer *w) {
  const loom_adamw_options *a = opts(o);
  loom_optim_put(w, "beta1", "%.17g", a->beta1);
  loom_optim_put(w, "beta2", "%.17g", a->beta2);
  loom_optim_put(w, "eps", "%.17g", a->eps);
  loom_optim_put(w, "weight_decay", "%.17g", a->weight_decay);
}

static loom_status adamw_check_hparams(const loom_optimizer *o, loom_optim_lookup lookup, void *ctx) {
  (void)o;
  double v;
  LOOM_TRY(loom_optim_need_double(lookup, ctx, "beta1", 0, nextafter(1.0, 0.0), &v));
  LOOM_TRY(loom_optim_need_double(lookup, ctx, "beta2", 0, nextafter(1.0, 0.0), &v));
  LOOM_TRY(loom_optim_need_double(lookup, ctx, "eps", 1e-300, INFINITY, &v));
  return LOOM_OK;
}

static void adamw_apply_hparams(loom_optimizer *o, loom_optim_lookup lookup, void *ctx) {
  loom_adamw_options *a = &((adamw_optimizer *)o)->opt;
  loom_optim_parse_double(lookup(ctx, "beta1"), &a->beta1);
  loom_optim_parse_double(lookup(ctx, "beta2"), &a->beta2);
  loom_optim_parse_double(lookup(ctx, "eps"), &a->eps);
  loom_optim_parse_double(lookup(ctx, "weight_decay"), &a->weight_decay);
}

static const loom_optimizer_vtable adamw_vtable = {
  .type = "adamw",
  .step = loom_fused_step,
  .zero_grad = loom_fused_zero_grad,
  .set_lr = loom_optim_base_set_lr,
  .set_weight_decay = loom_optim_base_set_weight_decay,
  .add_group = loom_fused_add_group,
  .default_weight_decay = adamw_default_wd,
  .param_state = adamw_param_state,
  .put_hparams = adamw_put_hparams,
  .check_hparams = adamw_check_hparams,
  .apply_hparams = adamw_apply_hparams,
  .restored = NULL,
  .free = loom_fused_free,
};

void loom_adamw_options_init(loom_adamw_options *o) {
  if (!o) return;
  *o = (loom_adamw_options){sizeof *o, 1e-3, 0.9, 0.999, 1e-8, 0.01};
}

loom_optimizer *loom_adamw_new(loom_tensor *const *params, int n, const loom_adamw_options *opt) {
  loom_adamw_options o;
  loom_adamw_options_init(&o);
  if (LOOM_STRUCT_IN("adamw", loom_adamw_options, &o, opt) != LOOM_OK) return NULL;
  if (!(o.lr >= 0 && o.lr < INFINITY) || !(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1) ||
      !(o.eps > 0 && o.eps < INFINITY) || !(o.weight_decay >= 0 && o.weight_decay < INFINITY)) {
    loom_set_error(LOOM_ERR_INVALID_ARG,
                   "adamw: need finite lr >= 0, betas in [0, 1), eps > 0, weight_decay >= 0 (got lr %g, betas %g, %g, "
                   "eps %g, weight_decay %g)",
                   o.lr, o.beta1, o.beta2, o.eps, o.weight_decay);
    return NULL;
  }
  adamw_optimizer *a = (adamw_optimizer *)loom_fused_new(sizeof *a, &adamw_vtable, &adamw_update, params, n, o.lr);
  if (!a) return NULL;
  a->opt = o;
  a->f.nbufs = 2;  /* exp_avg, exp_avg_sq */
  return loom_fused_first_group(&a->f, params, n, o.lr, o.weight_decay);
}
