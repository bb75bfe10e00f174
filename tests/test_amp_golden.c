/* test_amp_golden.c — a mixed precision step on the parameter list of a
 * module, pinned bit for bit: an MLP under fp16 (last layer kept f32, with
 * AdamW) and under bf16 (with SGD momentum), six loss-scaled steps whose
 * gradients are injected on the low-precision copies (and on the kept f32
 * masters), one unscaled first by loom_scaler_unscale and one with an inf
 * that the scaler skips. After every step a hash of every master, copy,
 * optimizer state tensor and the scaler's scale and counts must equal the
 * value the code produced before lib/amp worked on parameter lists
 * (commit 21406d3, where scaler.c stepped the optimizer itself). Only
 * elementwise CPU arithmetic is involved (no GEMM, no parallel sums), so
 * the bits do not depend on the BLAS or the thread count. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim_state.h"
#include "support/testkit.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
static uint64_t fnv_t(uint64_t h, loom_tensor *t) {
  if (!t) return fnv(h, "-", 1);
  return fnv(h, loom_tensor_data(t), (size_t)loom_tensor_numel(t) * loom_dtype_size(loom_tensor_dtype(t)));
}
/* A deterministic value in [-1, 1) for (a, b, c). */
static float val(uint32_t a, uint32_t b, uint32_t c) {
  uint64_t x = ((uint64_t)a * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)b << 32) ^ (uint64_t)c * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31, x *= 0x94D049BB133111EBull, x ^= x >> 29;
  return (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* fp16 + keep-last-fp32 with AdamW, or bf16 with SGD momentum: 6 scaled
 * steps with gradients injected on the copies (and on the kept f32 layer's
 * masters); step 2 unscales first, step 3 has an inf. Writes one hash per
 * step. */
static int amp_golden_run(loom_precision prec, uint64_t *out) {
  loom_manual_seed(7);
  int64_t hidden[1] = {16};
  loom_module *m = loom_mlp_new(10, 1, hidden, 4, loom_cpu());
  bool f16 = prec == LOOM_PRECISION_MIXED_FP16;
  if (!m || loom_module_set_precision(m, prec, f16) != LOOM_OK) return 1;
  int np = loom_module_num_params(m);
  loom_tensor *ps[8];
  for (int i = 0; i < np; i++) ps[i] = loom_module_param(m, i);
  loom_optimizer *o;
  if (f16) {
    loom_adamw_options ao;
    loom_adamw_options_init(&ao);
    ao.lr = 1e-2, ao.weight_decay = 0.05;
    o = loom_adamw_new(ps, np, &ao);
  } else {
    loom_sgd_options so;
    loom_sgd_options_init(&so);
    so.lr = 0.05, so.momentum = 0.9, so.weight_decay = 1e-3;
    o = loom_sgd_new(ps, np, &so);
  }
  loom_scaler_options sco;
  loom_scaler_options_init(&sco);
  sco.init_scale = 1024.0, sco.growth_interval = 2;
  loom_grad_scaler *s = loom_scaler_new(&sco);
  if (!o || !s) return 2;
  for (int step = 0; step < 6; step++) {
    loom_scope_begin();
    if (loom_optimizer_zero_grad(o) != LOOM_OK) return 3;
    double scale = loom_scaler_get_scale(s);
    for (int i = 0; i < np; i++) {
      loom_tensor *c = loom_amp_lowp_copy(ps[i]);
      loom_tensor *leaf = c ? c : ps[i];
      int64_t n = loom_tensor_numel(ps[i]);
      float *g = malloc((size_t)n * sizeof *g);
      for (int64_t j = 0; j < n; j++) g[j] = (float)(val((uint32_t)step, (uint32_t)i, (uint32_t)j) * 0.01 * scale);
      if (step == 3 && i == 1) g[0] = INFINITY;
      loom_tensor *gt = loom_from_host(g, loom_tensor_ndim(ps[i]), loom_tensor_shape(ps[i]), LOOM_F32, loom_cpu());
      free(g);
      if (c) gt = loom_cast(gt, loom_tensor_dtype(c));
      if (!gt || loom_backward_with(leaf, gt) != LOOM_OK) return 4;
    }
    bool found = false, skipped = false;
    if (step == 2 && loom_scaler_unscale(s, o, &found) != LOOM_OK) return 5;
    if (loom_scaler_step(s, o, &skipped) != LOOM_OK) return 6;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < np; i++) {
      h = fnv_t(h, ps[i]);
      h = fnv_t(h, loom_amp_lowp_copy(ps[i]));
      const char *names[LOOM_OPTIM_MAX_SLOTS];
      loom_tensor *st[LOOM_OPTIM_MAX_SLOTS];
      int k = loom_optim_param_state(o, i, names, st);
      for (int j = 0; j < k; j++) h = fnv_t(fnv(h, names[j], strlen(names[j])), st[j]);
    }
    double sc = loom_scaler_get_scale(s);
    int64_t meta[3] = {loom_scaler_steps(s), loom_scaler_steps_skipped(s), loom_optimizer_steps(o)};
    h = fnv(fnv(fnv(h, &sc, sizeof sc), meta, sizeof meta), &skipped, sizeof skipped);
    out[step] = h;
    loom_scope_end();
  }
  loom_scaler_free(s);
  loom_optimizer_free(o);
  loom_module_free(m);
  return 0;
}

/* Recorded from commit 21406d3 (this run, built against that commit). */
static const uint64_t golden_fp16[6] = {0xe675968a9e010487ull, 0xa3b39edf156373a8ull, 0x7a274eeb6428d7e1ull,
                                        0x8f46f28e393c0144ull, 0x8b7502010cea432dull, 0xfc94fb1a7667c4faull};
static const uint64_t golden_bf16[6] = {0x2100588db6b4726cull, 0x9bf697e301c73269ull, 0xf1416a18cd7b00ebull,
                                        0x57729b002d13e15aull, 0x7f558bf5d6bc6b64ull, 0xa0f24794d7f89ac7ull};

static void check(loom_precision p, const uint64_t *want) {
  uint64_t got[6];
  int rc = amp_golden_run(p, got);
  cr_assert_eq(rc, 0, "%s: the run failed at stage %d: %s", loom_precision_name(p), rc, loom_last_error());
  for (int s = 0; s < 6; s++)
    cr_assert_eq(got[s], want[s], "%s: step %d hashes to 0x%016llx, before it was 0x%016llx", loom_precision_name(p), s,
                 (unsigned long long)got[s], (unsigned long long)want[s]);
  tk_leak_check();
}

Test(amp_golden, fp16_adamw_scaled_steps_match_before) { check(LOOM_PRECISION_MIXED_FP16, golden_fp16); }
Test(amp_golden, bf16_sgd_scaled_steps_match_before) { check(LOOM_PRECISION_MIXED_BF16, golden_bf16); }
