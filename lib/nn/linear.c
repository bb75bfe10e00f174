/* linear.c — the Linear layer, y = act(x · wᵀ + b), on the fused op. */
#include <stdio.h>
#include <stdlib.h>

#include "loom/autograd.h"
#include "nn/module_internal.h"
#include "nn/precision_policy.h"

static loom_tensor *linear_forward(loom_module *m, loom_tensor *x) {
  /* Under a mixed-precision policy the policy picks the weights and casts. */
  if (m->policy) return loom_module_policy_linear_forward(m, x);
  return loom_linear(x, m->params[0], m->n_params > 1 ? m->params[1] : NULL, m->act);
}

static void linear_name(loom_module *m) {
  snprintf(m->name, sizeof m->name, "Linear(%lld, %lld%s)", (long long)m->in_features, (long long)m->out_features,
           m->act == LOOM_ACT_RELU ? ", relu" : "");
}

loom_module *loom_linear_new(int64_t in_features, int64_t out_features, bool bias, loom_init init, loom_device dev) {
  if (in_features <= 0 || out_features <= 0) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "linear_new: features must be positive (got %lld -> %lld)",
                   (long long)in_features, (long long)out_features);
    return NULL;
  }
  if (loom_device_check(dev) != LOOM_OK) return NULL;
  loom_module *m = loom_module_alloc(LOOM_MOD_LINEAR, "Linear");
  if (!m) return NULL;
  m->forward = linear_forward;
  m->in_features = in_features;
  m->out_features = out_features;
  int64_t ws[2] = {out_features, in_features};
  if (loom_module_add_param(m, "weight", loom_tensor_alloc_raw(2, ws, LOOM_F32, dev)) != LOOM_OK ||
      (bias && loom_module_add_param(m, "bias", loom_tensor_alloc_raw(1, &out_features, LOOM_F32, dev)) != LOOM_OK)) {
    loom_module_free(m);
    return NULL;
  }
  /* Bias uses PyTorch's default U(±1/sqrt(fan_in)) whatever the weight init. */
  if (loom_init_(m->params[0], init, in_features, out_features) != LOOM_OK ||
      (bias && loom_init_(m->params[1], LOOM_INIT_DEFAULT, in_features, out_features) != LOOM_OK)) {
    loom_module_free(m);
    return NULL;
  }
  for (int i = 0; i < m->n_params; i++) loom_set_requires_grad(m->params[i], true);
  linear_name(m);
  return m;
}

loom_status loom_linear_set_activation(loom_module *m, loom_activation act) {
  if (!m || m->kind != LOOM_MOD_LINEAR) return loom_set_error(LOOM_ERR_INVALID_ARG, "linear_set_activation: not a Linear module");
  if (act != LOOM_ACT_NONE && act != LOOM_ACT_RELU)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "linear_set_activation: unknown activation %d", (int)act);
  m->act = act;
  linear_name(m);
  return LOOM_OK;
}

static loom_tensor *relu_forward(loom_module *m, loom_tensor *x) {
  (void)m;
  return loom_relu(x);
}

loom_module *loom_relu_new(void) {
  loom_module *m = loom_module_alloc(LOOM_MOD_RELU, "ReLU");
  if (m) m->forward = relu_forward;
  return m;
}
