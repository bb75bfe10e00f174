/* sgd.c — SGD with momentum, dampening, Nesterov and L2 weight decay
 * (PyTorch's torch.optim.SGD), on fused.c: its options, its fused update
 * (optim_cpu.c, cuda/optim.cu) and its hyper-parameters in checkpoints. */
#include <math.h>
#include <string.h>

#include "core/struct_size.h"
#include "optim/fused.h"

typedef struct sgd_optimizer {
  loom_fused_optimizer f;  /* first */
  loom_sgd_options opt;
} sgd_optimizer;

static const loom_sgd_options *opts(const void *o) { return &((const sgd_optimizer *)o)->opt; }

static loom_status sgd_cpu(loom_fused_optimizer *f, loom_param_group *g, int64_t prior_steps,
                           const loom_optim_group *grp) {
  const loom_sgd_options *o = opts(f);
  loom_sgd_hparams h = {(float)grp->lr, (float)o->momentum, (float)o->dampening, (float)grp->weight_decay,
                        o->nesterov, prior_steps == 0};
  if (o->momentum <= 0) g->buf1 = NULL;
  return loom_cpu_sgd_step(g, &h);
}

#ifdef LOOM_HAVE_CUDA
static loom_status sgd_cuda(loom_fused_optimizer *f, loom_param_group *g, float lr0, float wd0, loom_opt_cuda_args *a) {
  const loom_sgd_options *o = opts(f);
  loom_sgd_hparams h = {lr0, (float)o->momentum, (float)o->dampening, wd0, o->nesterov, 0};
  if (o->momentum <= 0) g->buf1 = NULL;
  return loom_cuda_sgd_step(f->base.device, g, &h, a);
}
#endif

static const loom_fused_update sgd_update = {
  "sgd step", sgd_cpu,
#ifdef LOOM_HAVE_CUDA
  sgd_cuda,
#endif
};

static double sgd_default_wd(const loom_optimizer *o) { return opts(o)->weight_decay; }

static int sgd_param_state(const loom_optimizer *o, int i, const char **names, loom_tensor **tensors) {
  if (!o->buf1[i]) return 0;
  names[0] = "momentum_buffer", tensors[0] = o->buf1[i];
  return 1;
}

static void sgd_put_hparams(const loom_optimizer *o, loom_optim_hparam_writer *w) {
  const loom_sgd_options *s = opts(o);
  loom_optim_put(w, "momentum", "%.17g", s->momentum);
  loom_optim_put(w, "dampening", "%.17g", s->dampening);
  loom_optim_put(w, "weight_decay", "%.17g", s->weight_decay);
  loom_optim_put(w, "nesterov", "%d", s->nesterov ? 1 : 0);
}

static loom_status sgd_check_hparams(const loom_optimizer *o, loom_optim_lookup lookup, void *ctx) {
  double m, v;
  LOOM_TRY(loom_optim_need_double(lookup, ctx, "momentum", 0, INFINITY, &m));
  LOOM_TRY(loom_optim_need_double(lookup, ctx, "dampening", 0, INFINITY, &v));
  const char *nv = lookup(ctx, "nesterov");
  if (!nv || (strcmp(nv, "0") && strcmp(nv, "1")))
    return loom_set_error(LOOM_ERR_FORMAT, "optimizer state: optim.nesterov = '%s' is not 0 or 1", nv ? nv : "(missing)");
  double damp = v;
  if (!strcmp(nv, "1") && (m <= 0 || damp != 0))
    return loom_set_error(LOOM_ERR_FORMAT, "optimizer state: nesterov with momentum %g and dampening %g is not valid", m,
                          damp);
  /* The momentum buffers exist only when momentum > 0 (from creation). */
  if ((m > 0) != (opts(o)->momentum > 0))
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "optimizer state: the checkpoint's SGD has momentum %g but this optimizer was created with "
                          "momentum %g; create it with %s momentum",
                          m, opts(o)->momentum, m > 0 ? "a non-zero" : "zero");
  return LOOM_OK;
}

static void sgd_apply_hparams(loom_optimizer *o, loom_optim_lookup lookup, void *ctx) {
  loom_sgd_options *s = &((sgd_optimizer *)o)->opt;
  loom_optim_parse_double(lookup(ctx, "momentum"), &s->momentum);
  loom_optim_parse_double(lookup(ctx, "dampening"), &s->dampening);
  loom_optim_parse_double(lookup(ctx, "weight_decay"), &s->weight_decay);
  s->nesterov = !strcmp(lookup(ctx, "nesterov"), "1");
}

static const loom_optimizer_vtable sgd_vtable = {
  .type = "sgd",
  .step = loom_fused_step,
  .zero_grad = loom_fused_zero_grad,
  .set_lr = loom_optim_base_set_lr,
  .set_weight_decay = loom_optim_base_set_weight_decay,
  .add_group = loom_fused_add_group,
  .default_weight_decay = sgd_default_wd,
  .param_state = sgd_param_state,
  .put_hparams = sgd_put_hparams,
  .check_hparams = sgd_check_hparams,
  .apply_hparams = sgd_apply_hparams,
  .restored = NULL,
  .free = loom_fused_free,
};

void loom_sgd_options_init(loom_sgd_options *o) {
  if (!o) return;
  *o = (loom_sgd_options){sizeof *o, 0.01, 0.0, 0.0, 0.0, false};
}

loom_optimizer *loom_sgd_new(loom_tensor *const *params, int n, const loom_sgd_options *opt) {
  loom_sgd_options o;
  loom_sgd_options_init(&o);
  if (LOOM_STRUCT_IN("sgd", loom_sgd_options, &o, opt) != LOOM_OK) return NULL;
  /* Written as !(x >= 0) so that NaN is rejected too; infinities as well. */
  if (!(o.lr >= 0 && o.lr < INFINITY) || !(o.momentum >= 0 && o.momentum < INFINITY) ||
      !(o.weight_decay >= 0 && o.weight_decay < INFINITY) || !(o.dampening >= 0 && o.dampening < INFINITY)) {
    loom_set_error(LOOM_ERR_INVALID_ARG,
                   "sgd: lr, momentum, dampening and weight_decay must be finite and >= 0 (got lr %g, momentum %g, "
                   "dampening %g, weight_decay %g)",
                   o.lr, o.momentum, o.dampening, o.weight_decay);
    return NULL;
  }
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "sgd: nesterov needs momentum > 0 and dampening == 0");
    return NULL;
  }
  sgd_optimizer *s = (sgd_optimizer *)loom_fused_new(sizeof *s, &sgd_vtable, &sgd_update, params, n, o.lr);
  if (!s) return NULL;
  s->opt = o;
  s->f.nbufs = o.momentum > 0 ? 1 : 0;  /* momentum buffers only with momentum */
  return loom_fused_first_group(&s->f, params, n, o.lr, o.weight_decay);
}
