/* test_resnet.c — the convolutional nn layers and the ResNet builders:
 * parameter counts, parameter / buffer names and counts equal torchvision's
 * (tests/ref/resnet_torch.py), Kaiming fan-out init, BatchNorm2d train/eval
 * (running statistics, num_batches_tracked), Dropout train/eval, ReLU fusion
 * in Sequential, the option-A shortcut, NHWC and NCHW networks giving the
 * same outputs and gradients, a short training run whose loss falls, and
 * fp16/bf16 smoke runs. Kept small (tiny images, few steps) for CI. */
#include <math.h>
#include <stdlib.h>

#include "support/testkit.h"

/* ---- structure and names ----------------------------------------------------- */

typedef struct arch_case {
  loom_resnet_arch arch;
  int64_t in_channels, num_classes;
  loom_resnet_shortcut shortcut;
  int64_t params;
  int tensors, buffers;
  const char *buf_last;
} arch_case;

/* From tests/ref/resnet_torch.py (torchvision's ResNet rebuilt in torch). */
static const arch_case CASES[] = {
    {LOOM_RESNET18, 3, 1000, LOOM_SHORTCUT_PROJECTION, 11689512, 62, 60, "layer4.1.bn2.num_batches_tracked"},
    {LOOM_RESNET50, 3, 1000, LOOM_SHORTCUT_PROJECTION, 25557032, 161, 159, "layer4.2.bn3.num_batches_tracked"},
    {LOOM_RESNET18, 1, 10, LOOM_SHORTCUT_PROJECTION, 11175370, 62, 60, "layer4.1.bn2.num_batches_tracked"},
    {LOOM_RESNET20, 3, 10, LOOM_SHORTCUT_PROJECTION, 272474, 65, 63, "layer3.2.bn2.num_batches_tracked"},
    {LOOM_RESNET20, 3, 10, LOOM_SHORTCUT_ZERO_PAD, 269722, 59, 57, "layer3.2.bn2.num_batches_tracked"},
    {LOOM_RESNET56, 3, 10, LOOM_SHORTCUT_PROJECTION, 855770, 173, 171, "layer3.8.bn2.num_batches_tracked"},
    {LOOM_RESNET20, 1, 10, LOOM_SHORTCUT_PROJECTION, 272186, 65, 63, "layer3.2.bn2.num_batches_tracked"},
};

static loom_module *make(loom_resnet_arch arch, int64_t in, int64_t classes, loom_resnet_shortcut sc,
                         loom_memory_format f) {
  loom_resnet_options o;
  loom_resnet_options_init(&o, arch);
  o.in_channels = in, o.num_classes = classes, o.shortcut = sc, o.memory_format = f;
  loom_module *m = loom_resnet_new(arch, &o, loom_cpu());
  cr_assert_not_null(m, "%s", loom_last_error());
  return m;
}

Test(resnet, counts_and_names_match_torchvision) {
  char buf[128];
  for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
    const arch_case *k = &CASES[c];
    loom_module *m = make(k->arch, k->in_channels, k->num_classes, k->shortcut, LOOM_FORMAT_NCHW);
    const char *an = loom_resnet_arch_name(k->arch);
    cr_assert_eq(loom_module_num_param_elements(m), k->params, "%s case %zu: %lld parameters", an, c,
                 (long long)loom_module_num_param_elements(m));
    cr_assert_eq(loom_module_num_params(m), k->tensors, "%s case %zu", an, c);
    cr_assert_eq(loom_module_num_buffers(m), k->buffers, "%s case %zu", an, c);
    cr_assert_str_eq(loom_module_param_name(m, 0, buf, sizeof buf), "conv1.weight");
    cr_assert_str_eq(loom_module_param_name(m, k->tensors - 1, buf, sizeof buf), "fc.bias");
    cr_assert_str_eq(loom_module_buffer_name(m, 0, buf, sizeof buf), "bn1.running_mean");
    cr_assert_str_eq(loom_module_buffer_name(m, k->buffers - 1, buf, sizeof buf), k->buf_last);
    if (k->arch == LOOM_RESNET50) {
      static const char *want[] = {"layer1.0.conv1.weight", "layer1.0.bn1.weight", "layer1.0.bn1.bias",
                                   "layer1.0.conv2.weight", "layer1.0.bn2.weight", "layer1.0.bn2.bias"};
      for (int i = 0; i < 6; i++) cr_assert_str_eq(loom_module_param_name(m, 3 + i, buf, sizeof buf), want[i]);
      /* torchvision: layer1.0.downsample.{0.weight, 1.weight, 1.bias} follow bn3 */
      cr_assert_str_eq(loom_module_param_name(m, 12, buf, sizeof buf), "layer1.0.downsample.0.weight");
      cr_assert_str_eq(loom_module_param_name(m, 13, buf, sizeof buf), "layer1.0.downsample.1.weight");
      cr_assert_str_eq(loom_module_param_name(m, 14, buf, sizeof buf), "layer1.0.downsample.1.bias");
    }
    loom_module_free(m);
  }
  loom_resnet_arch a;
  cr_assert_eq(loom_resnet_parse("resnet56", &a), LOOM_OK);
  cr_assert_eq(a, LOOM_RESNET56);
  tk_assert_error(loom_resnet_parse("resnet21", &a), LOOM_ERR_INVALID_ARG, "unknown model 'resnet21'", "resnet20");
  loom_resnet_options o;
  loom_resnet_options_init(&o, LOOM_RESNET20);
  o.num_classes = 0;
  cr_assert_null(loom_resnet_new(LOOM_RESNET20, &o, loom_cpu()));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "num_classes");
  cr_assert_null(loom_basic_block_new(16, 7, 1, LOOM_SHORTCUT_ZERO_PAD, loom_cpu()));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "zero-padding shortcut");
  tk_leak_check();
}

/* torchvision's init: conv weights N(0, 2/fan_out), BN weight 1 bias 0, fc
 * U(±1/sqrt(fan_in)). */
Test(resnet, kaiming_fan_out_init) {
  loom_manual_seed(11);
  loom_module *m = make(LOOM_RESNET20, 3, 10, LOOM_SHORTCUT_PROJECTION, LOOM_FORMAT_NCHW);
  char buf[128];
  int checked = 0;
  for (int i = 0; i < loom_module_num_params(m); i++) {
    loom_tensor *p = loom_module_param(m, i);
    const char *name = loom_module_param_name(m, i, buf, sizeof buf);
    double *v = tk_read(p);
    int64_t n = loom_tensor_numel(p);
    if (loom_tensor_ndim(p) == 4 && n >= 9216) { /* the 3x3 convs with 32 or 64 outputs */
      const int64_t *s = loom_tensor_shape(p);
      double want = sqrt(2.0 / (double)(s[0] * s[2] * s[3])), ss = 0, mean = 0;
      for (int64_t j = 0; j < n; j++) mean += v[j], ss += v[j] * v[j];
      mean /= (double)n;
      double sd = sqrt(ss / (double)n - mean * mean);
      cr_assert(fabs(sd / want - 1) < 0.05, "%s: std %g, want %g (fan_out)", name, sd, want);
      cr_assert(fabs(mean) < 4 * want / sqrt((double)n), "%s: mean %g", name, mean);
      checked++;
    } else if (strstr(name, "bn") || strstr(name, "downsample.1")) {
      double want = strstr(name, ".weight") ? 1.0 : 0.0;
      for (int64_t j = 0; j < n; j++) cr_assert_eq(v[j], want, "%s[%lld]", name, (long long)j);
    } else if (!strcmp(name, "fc.weight")) {
      for (int64_t j = 0; j < n; j++) cr_assert(fabs(v[j]) <= 1 / sqrt(64.0), "%s", name);
    }
    free(v);
  }
  cr_assert_geq(checked, 10);
  loom_module_free(m);
  tk_leak_check();
}

/* ---- layers ------------------------------------------------------------------ */

/* BatchNorm2d: training normalizes with the batch statistics, updates the
 * running ones (momentum 0.1, unbiased variance) and counts batches; eval
 * uses the running statistics and changes nothing. */
Test(nn_layers, batch_norm2d_train_eval) {
  loom_scope_begin();
  const int64_t C = 2, shape[4] = {2, C, 2, 3};
  double *xv = tk_rand_vals(24, -2, 2, 0, LOOM_F32);
  loom_tensor *x = tk_tensor(xv, 4, shape, LOOM_F32, loom_cpu());
  loom_module *bn = loom_batch_norm2d_new(C, NULL, true, loom_cpu());
  cr_assert_not_null(bn, "%s", loom_last_error());
  cr_assert(loom_module_is_training(bn));
  char buf[64];
  cr_assert_str_eq(loom_module_buffer_name(bn, 2, buf, sizeof buf), "num_batches_tracked");
  double mean[2] = {0}, var[2] = {0};
  for (int64_t c = 0; c < C; c++) {
    for (int64_t n = 0; n < 2; n++)
      for (int64_t j = 0; j < 6; j++) mean[c] += xv[(n * C + c) * 6 + j] / 12;
    for (int64_t n = 0; n < 2; n++)
      for (int64_t j = 0; j < 6; j++) var[c] += pow(xv[(n * C + c) * 6 + j] - mean[c], 2) / 12;
  }
  double want[24];
  for (int64_t i = 0; i < 24; i++) {
    int64_t c = (i / 6) % C;
    want[i] = (xv[i] - mean[c]) / sqrt(var[c] + 1e-5);
  }
  tk_assert_tensor(loom_module_forward(bn, x), 4, shape, LOOM_F32, want, 1e-5, 1e-4, "train");
  double *rm = tk_read(loom_module_buffer(bn, 0)), *rv = tk_read(loom_module_buffer(bn, 1)), tracked;
  cr_assert_eq(loom_item(loom_module_buffer(bn, 2), &tracked), LOOM_OK);
  cr_assert_eq(tracked, 1.0);
  for (int c = 0; c < C; c++) {
    cr_assert(fabs(rm[c] - 0.1 * mean[c]) < 1e-6, "running_mean[%d] %g", c, rm[c]);
    cr_assert(fabs(rv[c] - (0.9 + 0.1 * var[c] * 12 / 11)) < 1e-5, "running_var[%d] %g", c, rv[c]);
  }
  cr_assert_eq(loom_module_train(bn, false), LOOM_OK);
  for (int64_t i = 0; i < 24; i++) {
    int64_t c = (i / 6) % C;
    want[i] = (xv[i] - rm[c]) / sqrt(rv[c] + 1e-5);
  }
  tk_assert_tensor(loom_module_forward(bn, x), 4, shape, LOOM_F32, want, 1e-5, 1e-4, "eval");
  cr_assert_eq(loom_item(loom_module_buffer(bn, 2), &tracked), LOOM_OK);
  cr_assert_eq(tracked, 1.0, "eval must not count batches");
  double *rm2 = tk_read(loom_module_buffer(bn, 0));
  cr_assert_eq(rm2[0], rm[0]);
  cr_assert_eq(rm2[1], rm[1]);
  free(rm);
  free(rv);
  free(rm2);
  free(xv);
  loom_module_free(bn);
  loom_scope_end();
  tk_leak_check();
}

Test(nn_layers, dropout_pool_flatten_modules) {
  loom_scope_begin();
  int64_t shape[4] = {2, 3, 4, 4};
  loom_tensor *x = loom_ones(4, shape, LOOM_F32, loom_cpu());
  loom_module *d = loom_dropout_new(0.5);
  cr_assert_not_null(d);
  double *v = tk_read(loom_module_forward(d, x));
  int zeros = 0;
  for (int i = 0; i < 96; i++) {
    cr_assert(v[i] == 0.0 || v[i] == 2.0, "train dropout value %g", v[i]);
    zeros += v[i] == 0.0;
  }
  cr_assert(zeros > 20 && zeros < 76, "%d of 96 dropped at p=0.5", zeros);
  free(v);
  cr_assert_eq(loom_module_train(d, false), LOOM_OK);
  double ones[96];
  for (int i = 0; i < 96; i++) ones[i] = 1.0;
  tk_assert_tensor(loom_module_forward(d, x), 4, shape, LOOM_F32, ones, 0, 0, "eval dropout is the identity");
  cr_assert_null(loom_dropout_new(1.5));

  loom_pool2d_options po;
  loom_pool2d_options_init(&po, 2, 2);
  po.stride[0] = po.stride[1] = 2;
  loom_module *mp = loom_max_pool2d_new(&po), *ap = loom_avg_pool2d_new(&po);
  loom_module *gap = loom_adaptive_avg_pool2d_new(1, 1), *fl = loom_flatten_new(1, -1);
  int64_t half[4] = {2, 3, 2, 2}, g[4] = {2, 3, 1, 1}, f[2] = {2, 3};
  tk_assert_shape(loom_module_forward(mp, x), 4, half, "max pool");
  tk_assert_shape(loom_module_forward(ap, x), 4, half, "avg pool");
  loom_tensor *y = loom_module_forward(fl, loom_module_forward(gap, x));
  tk_assert_shape(loom_module_forward(gap, x), 4, g, "global pool");
  tk_assert_tensor(y, 2, f, LOOM_F32, ones, 0, 0, "flatten(gap(ones))");
  loom_module *ms[] = {d, mp, ap, gap, fl};
  for (int i = 0; i < 5; i++) loom_module_free(ms[i]);
  loom_scope_end();
  tk_leak_check();
}

/* Sequential fuses ReLU into a Conv2d or a BatchNorm2d before it, and the
 * fused network computes what the unfused ops do. */
Test(nn_layers, sequential_fuses_relu_into_conv_and_bn) {
  loom_scope_begin();
  loom_manual_seed(5);
  loom_conv2d_options co;
  loom_conv2d_options_init(&co);
  co.padding[0] = co.padding[1] = 1;
  loom_module *seq = loom_sequential_new();
  loom_module *conv = loom_conv2d_new(3, 4, 3, 3, &co, true, LOOM_INIT_DEFAULT, loom_cpu());
  loom_module *conv2 = loom_conv2d_new(4, 4, 3, 3, &co, false, LOOM_INIT_KAIMING_NORMAL_FAN_OUT, loom_cpu());
  loom_module *bn = loom_batch_norm2d_new(4, NULL, true, loom_cpu());
  cr_assert_eq(loom_sequential_add(seq, conv), LOOM_OK);
  cr_assert_eq(loom_sequential_add(seq, loom_relu_new()), LOOM_OK);
  cr_assert_eq(loom_sequential_add(seq, conv2), LOOM_OK);
  cr_assert_eq(loom_sequential_add(seq, bn), LOOM_OK);
  cr_assert_eq(loom_sequential_add(seq, loom_relu_new()), LOOM_OK);
  cr_assert_eq(loom_module_num_children(seq), 3, "both ReLUs fused");
  cr_assert(strstr(loom_module_name(conv), "relu"), "%s", loom_module_name(conv));
  cr_assert(strstr(loom_module_name(bn), "relu"), "%s", loom_module_name(bn));
  char buf[64];
  cr_assert_str_eq(loom_module_param_name(seq, 3, buf, sizeof buf), "2.weight");
  int64_t xs[4] = {2, 3, 5, 5};
  loom_tensor *x = loom_randn(4, xs, LOOM_F32, loom_cpu());
  loom_tensor *y = loom_module_forward(seq, x);
  cr_assert_not_null(y, "%s", loom_last_error());
  /* The same with the unfused ops (BN in eval mode: deterministic, no stat update). */
  cr_assert_eq(loom_module_train(seq, false), LOOM_OK);
  y = loom_module_forward(seq, x);
  loom_batch_norm_options bo;
  loom_batch_norm_options_init(&bo);
  bo.training = false;
  loom_tensor *h = loom_relu(loom_conv2d(x, loom_module_param(conv, 0), loom_module_param(conv, 1), &co));
  h = loom_relu(loom_batch_norm(loom_conv2d(h, loom_module_param(conv2, 0), NULL, &co), loom_module_buffer(bn, 0),
                                loom_module_buffer(bn, 1), loom_module_param(bn, 0), loom_module_param(bn, 1), &bo));
  double *want = tk_read(h);
  tk_assert_tensor(y, 4, loom_tensor_shape(h), LOOM_F32, want, 1e-5, 1e-4, "fused vs unfused");
  free(want);
  loom_module_free(seq);
  loom_scope_end();
  tk_leak_check();
}

/* Option A: with the residual branch zeroed (bn2's weight 0), a block
 * outputs relu(shortcut(x)) = relu of x subsampled by 2 and zero-padded
 * with (out - in) / 2 channels on each side. */
Test(nn_layers, zero_pad_shortcut) {
  loom_scope_begin();
  loom_module *b = loom_basic_block_new(2, 4, 2, LOOM_SHORTCUT_ZERO_PAD, loom_cpu());
  cr_assert_not_null(b, "%s", loom_last_error());
  cr_assert_eq(loom_module_num_params(b), 6, "no downsample parameters");
  cr_assert_eq(loom_fill_(loom_module_param(loom_module_child(b, 3), 0), 0.0), LOOM_OK);
  int64_t xs[4] = {1, 2, 4, 4}, ys[4] = {1, 4, 2, 2};
  double *xv = tk_rand_vals(32, -1, 1, 0, LOOM_F32);
  loom_tensor *x = tk_tensor(xv, 4, xs, LOOM_F32, loom_cpu());
  loom_set_requires_grad(x, true);
  double want[16] = {0};
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < 2; i++)
      for (int j = 0; j < 2; j++) want[((c + 1) * 2 + i) * 2 + j] = fmax(0, xv[(c * 4 + 2 * i) * 4 + 2 * j]);
  loom_tensor *y = loom_module_forward(b, x);
  tk_assert_tensor(y, 4, ys, LOOM_F32, want, 1e-6, 1e-6, "option A");
  cr_assert_eq(loom_backward(loom_sum(y, 0, NULL, false)), LOOM_OK, "%s", loom_last_error());
  double *gx = tk_read(loom_grad(x));
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) {
        double v = xv[(c * 4 + i) * 4 + j];
        double w = (i % 2 == 0 && j % 2 == 0 && v > 0) ? 1.0 : 0.0;
        cr_assert_eq(gx[(c * 4 + i) * 4 + j], w, "dx[%d,%d,%d]", c, i, j);
      }
  free(gx);
  free(xv);
  loom_module_free(b);
  loom_scope_end();
  tk_leak_check();
}

/* ---- whole networks ------------------------------------------------------------ */

/* Forward + backward of m on x with labels; returns the logits (host) and
 * fills grads with every parameter's gradient (host, concatenated). */
static double *run_step(loom_module *m, loom_tensor *x, loom_tensor *labels, double **grads) {
  for (int i = 0; i < loom_module_num_params(m); i++) loom_zero_grad(loom_module_param(m, i));
  loom_tensor *logits = loom_module_forward(m, x);
  cr_assert_not_null(logits, "%s", loom_last_error());
  cr_assert_eq(loom_backward(loom_cross_entropy(logits, labels)), LOOM_OK, "%s", loom_last_error());
  int64_t total = loom_module_num_param_elements(m), at = 0;
  *grads = malloc((size_t)total * sizeof(double));
  for (int i = 0; i < loom_module_num_params(m); i++) {
    double *g = tk_read(loom_grad(loom_module_param(m, i)));
    int64_t n = loom_tensor_numel(loom_module_param(m, i));
    memcpy(*grads + at, g, (size_t)n * sizeof(double));
    at += n;
    free(g);
  }
  return tk_read(logits);
}

/* The same network (same seed) converting its input to NHWC or keeping
 * NCHW gives the same logits and parameter gradients, for both shortcuts. */
Test(resnet, nhwc_equals_nchw) {
  /* projection / zero-pad shortcuts with 3 channels, and a 1-channel input
   * (ambiguous layout: the NHWC network converts its stem's output) */
  for (int k = 0; k < 3; k++) {
    loom_scope_begin();
    int sc = k == 0 ? LOOM_SHORTCUT_PROJECTION : LOOM_SHORTCUT_ZERO_PAD;
    int64_t C = k == 2 ? 1 : 3;
    int64_t xs[4] = {4, C, 8, 8}, n4 = 4, labels[4] = {0, 3, 7, 9};
    loom_manual_seed(21);
    loom_tensor *x = loom_randn(4, xs, LOOM_F32, loom_cpu());
    loom_tensor *y = loom_from_host(labels, 1, &n4, LOOM_I64, loom_cpu());
    loom_manual_seed(7);
    loom_module *a = make(LOOM_RESNET20, C, 10, (loom_resnet_shortcut)sc, LOOM_FORMAT_NCHW);
    loom_manual_seed(7);
    loom_module *b = make(LOOM_RESNET20, C, 10, (loom_resnet_shortcut)sc, LOOM_FORMAT_NHWC);
    double *ga, *gb;
    double *la = run_step(a, x, y, &ga), *lb = run_step(b, x, y, &gb);
    tk_assert_close(lb, la, 40, 1e-5, 1e-4, "logits NHWC vs NCHW");
    int64_t n = loom_module_num_param_elements(a);
    double gmax = 0;
    for (int64_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(ga[i]));
    tk_assert_close(gb, ga, n, 1e-4 * gmax, 1e-3, "gradients NHWC vs NCHW");
    /* A channels-last input goes into the NHWC network as it is. */
    loom_tensor *xl = loom_to_memory_format(x, LOOM_FORMAT_NHWC);
    double *gc, *lc = run_step(b, xl, y, &gc);
    tk_assert_close(lc, lb, 40, 1e-5, 1e-4, "channels-last input");
    free(ga), free(gb), free(gc), free(la), free(lb), free(lc);
    loom_module_free(a);
    loom_module_free(b);
    loom_scope_end();
  }
  tk_leak_check();
}

/* `steps` SGD steps (Nesterov, weight decay on conv/fc weights only) on a small
 * learnable problem: the class is which quadrant of a 1x8x8 image is bright.
 * The loss (first step vs the mean of the last three) must halve from ln 4. Then eval mode is
 * deterministic and classifies most training images. */
static void train_quadrants(loom_precision prec, loom_memory_format fmt, int steps, double *first, double *last,
                            double *eval_acc) {
  loom_manual_seed(1234);
  loom_module *m = make(LOOM_RESNET20, 1, 4, LOOM_SHORTCUT_ZERO_PAD, fmt);
  if (prec != LOOM_PRECISION_FP32) cr_assert_eq(loom_module_set_precision(m, prec, true), LOOM_OK, "%s", loom_last_error());
  loom_sgd_options so;
  loom_sgd_options_init(&so);
  so.lr = 0.05, so.momentum = 0.9, so.nesterov = true, so.weight_decay = 5e-4;
  loom_optimizer *opt = loom_sgd_new_for_module(m, &so);
  cr_assert_not_null(opt, "%s", loom_last_error());
  cr_assert_eq(loom_optimizer_num_groups(opt), 2);
  enum { B = 16 };
  float img[B * 64];
  int64_t lab[B], xs[4] = {B, 1, 8, 8}, nb = B;
  uint64_t s = 99;
  for (int step = 0; step < steps; step++) {
    for (int i = 0; i < B; i++) {
      lab[i] = (i + step) % 4;
      for (int p = 0; p < 64; p++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float noise = (float)((double)(s >> 11) / 9007199254740992.0) * 0.6f - 0.3f;
        int q = (p / 8 >= 4) * 2 + (p % 8 >= 4);
        img[i * 64 + p] = (q == lab[i] ? 1.0f : 0.0f) + noise;
      }
    }
    loom_scope_begin();
    loom_tensor *x = loom_from_host(img, 4, xs, LOOM_F32, loom_cpu());
    loom_tensor *y = loom_from_host(lab, 1, &nb, LOOM_I64, loom_cpu());
    loom_tensor *loss = loom_cross_entropy(loom_module_forward(m, x), y);
    cr_assert_not_null(loss, "%s", loom_last_error());
    double l;
    cr_assert_eq(loom_item(loss, &l), LOOM_OK);
    cr_assert(isfinite(l), "step %d loss %g", step, l);
    if (step == 0) *first = l;
    if (step >= steps - 3) *last += l / 3;
    cr_assert_eq(loom_optimizer_zero_grad(opt), LOOM_OK);
    cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
    loom_scope_end();
  }
  cr_assert_eq(loom_module_train(m, false), LOOM_OK);
  loom_scope_begin();
  loom_tensor *x = loom_from_host(img, 4, xs, LOOM_F32, loom_cpu());
  double *l1 = tk_read(loom_module_forward(m, x)), *l2 = tk_read(loom_module_forward(m, x));
  int correct = 0;
  for (int i = 0; i < B; i++) {
    int best = 0;
    for (int k = 0; k < 4; k++) {
      cr_assert_eq(l1[i * 4 + k], l2[i * 4 + k], "eval forward is deterministic");
      if (l1[i * 4 + k] > l1[i * 4 + best]) best = k;
    }
    correct += best == lab[i];
  }
  *eval_acc = correct / (double)B;
  free(l1), free(l2);
  loom_scope_end();
  loom_optimizer_free(opt);
  loom_module_free(m);
}

Test(resnet, training_loss_falls) {
  double first = 0, last = 0, acc = 0;
  train_quadrants(LOOM_PRECISION_FP32, LOOM_FORMAT_NHWC, 15, &first, &last, &acc);
  cr_assert(last < 0.5 * first, "loss %g -> %g", first, last);
  cr_assert_geq(acc, 0.75, "eval accuracy %g", acc);
  cr_log_info("fp32: loss %g -> %g, eval accuracy %g", first, last, acc);
  tk_leak_check();
}

/* Mixed precision: the convolutions run in f16/bf16 (their low-precision
 * weight copies exist), BN parameters and statistics stay f32, fc stays f32
 * (keep_last_fp32), and training still makes progress. */
Test(resnet, mixed_precision_smoke) {
  loom_precision ps[2] = {LOOM_PRECISION_MIXED_FP16, LOOM_PRECISION_MIXED_BF16};
  for (int k = 0; k < 2; k++) {
    loom_manual_seed(3);
    loom_module *m = make(LOOM_RESNET20, 3, 10, LOOM_SHORTCUT_PROJECTION, LOOM_FORMAT_NHWC);
    cr_assert_eq(loom_module_set_precision(m, ps[k], true), LOOM_OK, "%s", loom_last_error());
    char buf[128];
    loom_dtype cdt = loom_precision_compute_dtype(ps[k]);
    for (int i = 0; i < loom_module_num_params(m); i++) {
      loom_tensor *p = loom_module_param(m, i);
      const char *name = loom_module_param_name(m, i, buf, sizeof buf);
      loom_tensor *c = loom_amp_lowp_copy(p);
      cr_assert_eq(loom_tensor_dtype(p), LOOM_F32, "%s master", name);
      if (loom_tensor_ndim(p) == 4) {
        cr_assert_not_null(c, "%s has a low-precision copy", name);
        cr_assert_eq(loom_tensor_dtype(c), cdt);
      } else {
        cr_assert_null(c, "%s (BN / fc) has no low-precision copy", name);
      }
    }
    for (int i = 0; i < loom_module_num_buffers(m) - 1; i++)
      if (strstr(loom_module_buffer_name(m, i, buf, sizeof buf), "running"))
        cr_assert_eq(loom_tensor_dtype(loom_module_buffer(m, i)), LOOM_F32, "%s", buf);
    loom_scope_begin();
    int64_t xs[4] = {2, 3, 8, 8};
    loom_tensor *out = loom_module_forward(m, loom_randn(4, xs, LOOM_F32, loom_cpu()));
    cr_assert_not_null(out, "%s", loom_last_error());
    cr_assert_eq(loom_tensor_dtype(out), LOOM_F32, "fc kept in f32");
    loom_scope_end();
    loom_module_free(m);

    double first = 0, last = 0, acc = 0;
    train_quadrants(ps[k], LOOM_FORMAT_NHWC, 10, &first, &last, &acc);
    cr_assert(last < 0.5 * first, "%s: loss %g -> %g", loom_precision_name(ps[k]), first, last);
    cr_assert_geq(acc, 0.5, "%s: eval accuracy %g", loom_precision_name(ps[k]), acc);
    cr_log_info("%s: loss %g -> %g, eval accuracy %g", loom_precision_name(ps[k]), first, last, acc);
  }
  tk_leak_check();
}
