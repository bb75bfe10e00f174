/* conv_rules.c — the conv2d op's shape rules: every check made before a
 * kernel runs, with messages that name the shapes and what to change. Its
 * backward rule is autograd's (lib/autograd/grad_rules_cnn.c). */
#include <stdio.h>

#include "ops/conv.h"

static const char *sh(const loom_tensor *t, char *buf) { return loom_shape_str(t->ndim, t->shape, buf, 96); }

loom_status loom_conv_geom_make(const char *op, const loom_tensor *x, const loom_tensor *w, const loom_tensor *b,
                                const int64_t *i, loom_conv_geom *g) {
  char b1[96], b2[96];
  if (!loom_dtype_is_float(x->dtype) || !loom_dtype_is_float(w->dtype))
    return loom_set_error(LOOM_ERR_DTYPE, "%s: x is %s and the weight %s; convolution needs f32, f16 or bf16", op,
                          loom_dtype_name(x->dtype), loom_dtype_name(w->dtype));
  if (x->ndim != 4)
    return loom_set_error(LOOM_ERR_SHAPE, "%s: x must be 4-D [N, C, H, W], got %s", op, sh(x, b1));
  if (w->ndim != 4)
    return loom_set_error(LOOM_ERR_SHAPE, "%s: the weight must be 4-D [O, C/groups, KH, KW], got %s", op, sh(w, b1));
  g->N = x->shape[0];
  g->C = x->shape[1];
  g->H = x->shape[2];
  g->W = x->shape[3];
  g->O = w->shape[0];
  g->KH = w->shape[2];
  g->KW = w->shape[3];
  g->sh = i[LOOM_CONV_I_STRIDE_H];
  g->sw = i[LOOM_CONV_I_STRIDE_W];
  g->ph = i[LOOM_CONV_I_PAD_H];
  g->pw = i[LOOM_CONV_I_PAD_W];
  g->dh = i[LOOM_CONV_I_DIL_H];
  g->dw = i[LOOM_CONV_I_DIL_W];
  g->G = i[LOOM_CONV_I_GROUPS];
  g->act = (int)i[LOOM_CONV_I_ACT];
  if (g->sh < 1 || g->sw < 1)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: stride %lldx%lld; strides must be >= 1", op, (long long)g->sh,
                          (long long)g->sw);
  if (g->dh < 1 || g->dw < 1)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: dilation %lldx%lld; dilations must be >= 1", op,
                          (long long)g->dh, (long long)g->dw);
  if (g->ph < 0 || g->pw < 0)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: padding %lldx%lld; padding must be >= 0", op, (long long)g->ph,
                          (long long)g->pw);
  if (g->G < 1) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: groups is %lld; it must be >= 1", op, (long long)g->G);
  if (g->act != LOOM_ACT_NONE && g->act != LOOM_ACT_RELU)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: unknown activation %d (LOOM_ACT_NONE or LOOM_ACT_RELU)", op,
                          g->act);
  if (g->C % g->G != 0)
    return loom_set_error(LOOM_ERR_SHAPE, "%s: x %s has %lld channels, not divisible by groups = %lld", op, sh(x, b1),
                          (long long)g->C, (long long)g->G);
  if (g->O % g->G != 0)
    return loom_set_error(LOOM_ERR_SHAPE, "%s: the weight %s has %lld output channels, not divisible by groups = %lld",
                          op, sh(w, b1), (long long)g->O, (long long)g->G);
  g->Cg = g->C / g->G;
  g->Og = g->O / g->G;
  if (w->shape[1] != g->Cg)
    return loom_set_error(LOOM_ERR_SHAPE,
                          "%s: the weight %s expects %lld input channels per group, but x %s with groups = %lld has %lld",
                          op, sh(w, b1), (long long)w->shape[1], sh(x, b2), (long long)g->G, (long long)g->Cg);
  if (g->KH < 1 || g->KW < 1)
    return loom_set_error(LOOM_ERR_SHAPE, "%s: the weight %s has an empty kernel", op, sh(w, b1));
  int64_t ekh = g->dh * (g->KH - 1) + 1, ekw = g->dw * (g->KW - 1) + 1;
  int64_t hp = g->H + 2 * g->ph, wp = g->W + 2 * g->pw;
  if (ekh > hp || ekw > wp)
    return loom_set_error(LOOM_ERR_SHAPE,
                          "%s: the kernel %lldx%lld (dilation %lldx%lld: %lldx%lld effective) is larger than the padded "
                          "input %lldx%lld (x %s, padding %lldx%lld); pad more or use a smaller kernel",
                          op, (long long)g->KH, (long long)g->KW, (long long)g->dh, (long long)g->dw, (long long)ekh,
                          (long long)ekw, (long long)hp, (long long)wp, sh(x, b1), (long long)g->ph, (long long)g->pw);
  g->OH = (hp - ekh) / g->sh + 1;
  g->OW = (wp - ekw) / g->sw + 1;
  if (b && (b->ndim != 1 || b->shape[0] != g->O))
    return loom_set_error(LOOM_ERR_SHAPE, "%s: the bias %s does not match the %lld output channels of the weight %s", op,
                          sh(b, b1), (long long)g->O, sh(w, b2));
  g->nhwc = loom_tensor_memory_format(x) == LOOM_FORMAT_NHWC;
  return LOOM_OK;
}

loom_status loom_infer_conv2d(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  loom_conv_geom g;
  LOOM_TRY(loom_conv_geom_make(opname, a->in[0], a->in[1], a->n_in > 2 ? a->in[2] : NULL, a->i, &g));
  if (loom_tensor_memory_format(a->in[0]) == LOOM_FORMAT_STRIDED)
    return loom_set_error(LOOM_ERR_INTERNAL, "%s: x must be NCHW-contiguous or channels-last here", opname);
  o[0].ndim = 4;
  o[0].shape[0] = g.N;
  o[0].shape[1] = g.O;
  o[0].shape[2] = g.OH;
  o[0].shape[3] = g.OW;
  o[0].dtype = a->in[0]->dtype;
  o[0].format = g.nhwc ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW;
  return LOOM_OK;
}

loom_status loom_infer_conv2d_backward(const char *opname, const loom_op_args *a, loom_out_spec *o) {
  const loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2];
  loom_conv_geom g;
  LOOM_TRY(loom_conv_geom_make(opname, x, w, NULL, a->i, &g));
  bool same = gy->ndim == 4 && gy->shape[0] == g.N && gy->shape[1] == g.O && gy->shape[2] == g.OH &&
              gy->shape[3] == g.OW;
  const loom_tensor *y = a->n_in > 3 ? a->in[3] : NULL;
  if (!same || !loom_conv_same_layout(gy, x) || (y && !loom_conv_same_layout(y, x)) || loom_tensor_memory_format(x) == LOOM_FORMAT_STRIDED)
    return loom_set_error(LOOM_ERR_INTERNAL, "%s: the output gradient's shape or format does not match x's", opname);
  if (g.act == LOOM_ACT_RELU && (a->n_in < 4 || !a->in[3]))
    return loom_set_error(LOOM_ERR_INTERNAL, "%s: the fused ReLU needs the forward output", opname);
  for (int k = 0; k < 3; k++) o[k].ndim = -1;
  if (a->i[LOOM_CONV_I_NEED_DX]) {
    o[0].ndim = 4;
    for (int d = 0; d < 4; d++) o[0].shape[d] = x->shape[d];
    o[0].dtype = x->dtype;
    o[0].format = g.nhwc ? LOOM_FORMAT_NHWC : LOOM_FORMAT_NCHW;
  }
  if (a->i[LOOM_CONV_I_NEED_DW]) {
    o[1].ndim = 4;
    for (int d = 0; d < 4; d++) o[1].shape[d] = w->shape[d];
    o[1].dtype = w->dtype;
  }
  if (a->i[LOOM_CONV_I_NEED_DB]) {
    o[2].ndim = 1;
    o[2].shape[0] = g.O;
    o[2].dtype = w->dtype;
  }
  return LOOM_OK;
}
