/* precision_policy.c — the precision policy of a model: which Linear and
 * Conv2d layers compute in f16/bf16 (with low-precision copies of their f32
 * master weights, which lib/amp makes and keeps for each module's parameter
 * list), and the Linear / Conv2d forwards under a policy, which insert the
 * casts. Everything else (batch norm's parameters and statistics, losses)
 * stays f32. */
#include <stdlib.h>

#include "amp/amp_internal.h"
#include "loom/autograd.h"
#include "nn/precision_policy.h"
#include "core/sys.h"

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
    loom_sys_free(m->policy);
    m->policy = NULL;
    loom_amp_drop_copies(m->params, m->n_params);
  } else {
    loom_module_policy *pol = m->policy ? m->policy : loom_sys_malloc(sizeof *pol);
    if (!pol) return loom_set_error(LOOM_ERR_OOM, "set_precision: out of host memory");
    m->policy = pol;
    *pol = (loom_module_policy){p, keep_last, fp32_layer};
    /* Only Linear and Conv2d layers compute with low-precision copies of
     * their parameters (BatchNorm keeps f32 ones); a kept-f32 layer uses its
     * masters directly. */
    bool lowp = (m->kind == LOOM_MOD_LINEAR || m->kind == LOOM_MOD_CONV2D) && !fp32_layer;
    if (!lowp) loom_amp_drop_copies(m->params, m->n_params);
    else LOOM_TRY(loom_amp_make_copies(m->params, m->n_params, loom_precision_compute_dtype(p)));
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
  const loom_module_policy *pol = m ? m->policy : NULL;
  return pol ? pol->precision : LOOM_PRECISION_FP32;
}

loom_status loom_module_refresh_lowp(loom_module *m) {
  if (!m) return loom_set_error(LOOM_ERR_INVALID_ARG, "refresh_lowp: module is NULL");
  LOOM_TRY(loom_amp_refresh_copies(m->params, m->n_params));
  for (int i = 0; i < m->n_children; i++) LOOM_TRY(loom_module_refresh_lowp(m->children[i]));
  return LOOM_OK;
}

/* ---- the Linear and Conv2d forwards under a policy ----------------------------- */

/* The weight and bias a Linear / Conv2d computes with under its policy, the
 * compute dtype, and x cast to it. NULL x on failure. */
static loom_tensor *policy_operands(loom_module *m, loom_tensor *x, loom_tensor **w, loom_tensor **b) {
  const loom_module_policy *pol = m->policy;
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

loom_tensor *loom_module_policy_linear_forward(loom_module *m, loom_tensor *x) {
  loom_tensor *w, *b;
  loom_tensor *xc = policy_operands(m, x, &w, &b);
  return xc ? loom_linear(xc, w, b, m->act) : NULL;
}

loom_tensor *loom_module_policy_conv2d_forward(loom_module *m, loom_tensor *x) {
  loom_tensor *w, *b;
  loom_tensor *xc = policy_operands(m, x, &w, &b);
  if (!xc) return NULL;
  loom_conv2d_options o = ((loom_conv2d_impl *)m->impl)->opt;
  o.act = m->act;
  return loom_conv2d(xc, w, b, &o);
}
