/* policy.c — the precision policy of a model: which Linear and Conv2d layers
 * compute in f16/bf16, their low-precision weight copies (linked to the f32
 * masters), and the Linear / Conv2d forwards under a policy, which insert the
 * casts. Everything else (batch norm's parameters and statistics, losses)
 * stays f32.
 *
 * The copy of a master is an f16/bf16 leaf tensor that requires grad, so the
 * tape sends the GEMM's low-precision gradient there; it is owned by the
 * master (tensor.user_tag, released with the master), so it lives exactly as
 * long as the parameter and needs no bookkeeping in the module. */
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"
#include "loom/autograd.h"
#include "nn/module_internal.h"

loom_status loom_precision_parse(const char *text, loom_precision *out) {
  if (!text || !out) return loom_set_error(LOOM_ERR_INVALID_ARG, "precision_parse: text and out must not be NULL");
  static const struct { const char *name; loom_precision p; } names[] = {
    {"fp32", LOOM_PRECISION_FP32}, {"f32", LOOM_PRECISION_FP32}, {"float32", LOOM_PRECISION_FP32},
    {"fp16", LOOM_PRECISION_MIXED_FP16}, {"f16", LOOM_PRECISION_MIXED_FP16}, {"mixed-fp16", LOOM_PRECISION_MIXED_FP16},
    {"float16", LOOM_PRECISION_MIXED_FP16},
    {"bf16", LOOM_PRECISION_MIXED_BF16}, {"mixed-bf16", LOOM_PRECISION_MIXED_BF16}, {"bfloat16", LOOM_PRECISION_MIXED_BF16},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!strcmp(text, names[i].name)) {
      *out = names[i].p;
      return LOOM_OK;
    }
  }
  return loom_set_error(LOOM_ERR_INVALID_ARG, "precision: unknown precision '%s'; use fp32, fp16 (mixed-fp16) or bf16 (mixed-bf16)",
                        text);
}

const char *loom_precision_name(loom_precision p) {
  switch (p) {
    case LOOM_PRECISION_FP32: return "fp32";
    case LOOM_PRECISION_MIXED_FP16: return "mixed-fp16";
    case LOOM_PRECISION_MIXED_BF16: return "mixed-bf16";
    default: return "?";
  }
}

loom_dtype loom_precision_compute_dtype(loom_precision p) {
  return p == LOOM_PRECISION_MIXED_FP16 ? LOOM_F16 : p == LOOM_PRECISION_MIXED_BF16 ? LOOM_BF16 : LOOM_F32;
}

/* ---- master -> copy link ------------------------------------------------------ */

static void release_copy(void *copy) { loom_tensor_release(copy); }

loom_tensor *loom_amp_copy_of(const loom_tensor *master) {
  /* user_tag is only ours when our destructor is attached. */
  if (!master || master->user_tag_free != release_copy) return NULL;
  return master->user_tag;
}

loom_tensor *loom_amp_lowp_copy(const loom_tensor *master) { return loom_amp_copy_of(master); }

static void drop_copy(loom_tensor *master) {
  loom_tensor *c = loom_amp_copy_of(master);
  if (!c) return;
  master->user_tag = NULL;
  master->user_tag_free = NULL;
  loom_tensor_release(c);
}

/* Cast master into c (no autograd). */
static loom_status refresh(loom_tensor *c, loom_tensor *master) {
  bool prev = loom_set_grad_enabled(false);
  loom_status st = loom_copy_(c, master);
  loom_set_grad_enabled(prev);
  return st;
}

/* Give master a copy of dtype dt (reusing one that exists), up to date. */
static loom_status ensure_copy(loom_tensor *master, loom_dtype dt) {
  if (master->dtype != LOOM_F32 || !loom_tensor_is_contiguous(master))
    return loom_set_error(LOOM_ERR_DTYPE, "set_precision: parameters must be contiguous f32 masters, got %s",
                          loom_dtype_name(master->dtype));
  if (master->user_tag && !loom_amp_copy_of(master))
    return loom_set_error(LOOM_ERR_STATE, "set_precision: the parameter's user_tag is in use by another subsystem");
  loom_tensor *c = loom_amp_copy_of(master);
  if (c && c->dtype != dt) {
    drop_copy(master);
    c = NULL;
  }
  if (!c) {
    c = loom_tensor_alloc_raw(master->ndim, master->shape, dt, master->storage->device);
    if (!c) return loom_last_status();
    c->requires_grad = true;
    master->user_tag = c;
    master->user_tag_free = release_copy;
  }
  return refresh(c, master);
}

/* ---- applying a policy --------------------------------------------------------- */

static loom_module *last_linear(loom_module *m) {
  for (int i = m->n_children - 1; i >= 0; i--) {
    loom_module *l = last_linear(m->children[i]);
    if (l) return l;
  }
  return m->kind == LOOM_MOD_LINEAR ? m : NULL;
}

static loom_status apply(loom_module *m, loom_precision p, bool keep_last, const loom_module *last) {
  bool fp32_layer = keep_last && m == last;
  if (p == LOOM_PRECISION_FP32) {
    free(m->policy);
    m->policy = NULL;
    for (int i = 0; i < m->n_params; i++) drop_copy(m->params[i]);
  } else {
    loom_amp_policy *pol = m->policy ? m->policy : malloc(sizeof *pol);
    if (!pol) return loom_set_error(LOOM_ERR_OOM, "set_precision: out of host memory");
    m->policy = pol;
    *pol = (loom_amp_policy){p, keep_last, fp32_layer};
    /* Only Linear and Conv2d layers compute with low-precision copies of
     * their parameters (BatchNorm keeps f32 ones); a kept-f32 layer uses its
     * masters directly. */
    bool lowp = (m->kind == LOOM_MOD_LINEAR || m->kind == LOOM_MOD_CONV2D) && !fp32_layer;
    for (int i = 0; i < m->n_params; i++) {
      if (!lowp) drop_copy(m->params[i]);
      else LOOM_TRY(ensure_copy(m->params[i], loom_precision_compute_dtype(p)));
    }
  }
  for (int i = 0; i < m->n_children; i++) LOOM_TRY(apply(m->children[i], p, keep_last, last));
  return LOOM_OK;
}

loom_status loom_module_set_precision(loom_module *m, loom_precision p, bool keep_last_fp32) {
  if (!m) return loom_set_error(LOOM_ERR_INVALID_ARG, "set_precision: module is NULL");
  if (p != LOOM_PRECISION_FP32 && p != LOOM_PRECISION_MIXED_FP16 && p != LOOM_PRECISION_MIXED_BF16)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "set_precision: unknown precision %d; use a loom_precision value", (int)p);
  loom_status st = apply(m, p, keep_last_fp32, last_linear(m));
  /* Leave nothing half-applied: on failure fall back to fp32 everywhere. */
  if (st != LOOM_OK) {
    loom_status keep = st;
    apply(m, LOOM_PRECISION_FP32, false, NULL);
    loom_error_prefix("%s", "set_precision (model left in fp32)");
    return keep;
  }
  return LOOM_OK;
}

loom_precision loom_module_get_precision(const loom_module *m) {
  const loom_amp_policy *pol = m ? m->policy : NULL;
  return pol ? pol->precision : LOOM_PRECISION_FP32;
}

loom_status loom_module_refresh_lowp(loom_module *m) {
  if (!m) return loom_set_error(LOOM_ERR_INVALID_ARG, "refresh_lowp: module is NULL");
  for (int i = 0; i < m->n_params; i++) {
    loom_tensor *c = loom_amp_copy_of(m->params[i]);
    if (c) LOOM_TRY(refresh(c, m->params[i]));
  }
  for (int i = 0; i < m->n_children; i++) LOOM_TRY(loom_module_refresh_lowp(m->children[i]));
  return LOOM_OK;
}

/* ---- the Linear forward under a policy ---------------------------------------- */

/* The weight and bias a Linear / Conv2d computes with under its policy, the
 * compute dtype, and x cast to it. NULL x on failure. */
static loom_tensor *policy_operands(loom_module *m, loom_tensor *x, loom_tensor **w, loom_tensor **b) {
  const loom_amp_policy *pol = m->policy;
  loom_dtype cdt = pol->fp32_layer ? LOOM_F32 : loom_precision_compute_dtype(pol->precision);
  *w = m->params[0];
  *b = m->n_params > 1 ? m->params[1] : NULL;
  if (cdt != LOOM_F32) {
    *w = loom_amp_copy_of(m->params[0]);
    *b = *b ? loom_amp_copy_of(*b) : NULL;
    if (!*w || (m->n_params > 1 && !*b)) {
      loom_set_error(LOOM_ERR_STATE, "%s: the %s weight copies are missing; call loom_module_set_precision again",
                     m->name, loom_dtype_name(cdt));
      return NULL;
    }
  }
  /* The cast is an op, so its backward casts the gradient back. Inside a
   * model whose input was cast once, x already has the compute dtype. */
  return x->dtype == cdt ? x : loom_cast(x, cdt);
}

loom_tensor *loom_amp_linear_forward(loom_module *m, loom_tensor *x) {
  loom_tensor *w, *b;
  loom_tensor *xc = policy_operands(m, x, &w, &b);
  return xc ? loom_linear(xc, w, b, m->act) : NULL;
}

loom_tensor *loom_amp_conv2d_forward(loom_module *m, loom_tensor *x) {
  loom_tensor *w, *b;
  loom_tensor *xc = policy_operands(m, x, &w, &b);
  if (!xc) return NULL;
  loom_conv2d_options o = ((loom_conv2d_impl *)m->impl)->opt;
  o.act = m->act;
  return loom_conv2d(xc, w, b, &o);
}
