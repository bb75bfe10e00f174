/* test_gpt_conformance.c — loom's GPT (loom_gpt_new) against its PyTorch
 * twin on the same weights: tests/ref/gpt_conformance.py loads the
 * parameters loom writes (safetensors, under nanoGPT's names) into the
 * nanoGPT-style model of tests/ref/gpt_torch.py, computes in float64 and
 * float32, and writes back logits, loss and every parameter's gradient.
 * Held here: the parameter names and their order equal the twin's
 * named_parameters(); logits (loom_module_forward), loss (loom_gpt_forward
 * with targets, i.e. loom_linear_cross_entropy on the tied embedding) and
 * every gradient of that loss within max(TOL, F32_FACTOR x PyTorch float32's
 * own error of the same quantity), errors relative to the tensor's largest
 * element. The model is smooth (GELU, softmax, LayerNorm: no ReLU kinks, no
 * batch statistics), so float32 against float64 is a plain rounding
 * comparison, unlike the ResNet conformance test.
 *
 * Weights: GPT-2's initialization plus N(0, 0.1) on every parameter, so
 * that biases and LayerNorm parameters are not at 0 / 1 and a bug touching
 * them shows. Dropout is 0 (the twin cannot draw loom's masks).
 *
 * Runs under the Python in LOOM_TEST_PYTHON (python3 by default) with torch;
 * without it each case prints "gpt conformance skipped: ..." (ctest counts it
 * as skipped). LOOM_CONFORMANCE_KEEP=1 keeps the scratch directory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "support/testkit.h"

#ifndef LOOM_TEST_SRC_DIR
#error "LOOM_TEST_SRC_DIR (the tests/ directory) must be defined by the build"
#endif

#define TOL 2e-5         /* relative to the tensor's largest element, */
#define F32_FACTOR 8.0   /* or this times PyTorch's own float32 error */
#define PERTURB 0.1      /* added N(0, PERTURB) on every parameter */

typedef struct gpt_case {
  const char *name;
  int64_t vocab, block, layers, heads, embd, batch, seq;
  bool bias;
} gpt_case;

static const char *torch_python(void) {
  const char *py = getenv("LOOM_TEST_PYTHON");
  if (!py || !*py) py = "python3";
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' -c 'import torch' >/dev/null 2>&1", py);
  if (system(cmd) != 0) {
    fprintf(stderr, "gpt conformance skipped: %s cannot import torch (Debian: python3-torch; LOOM_TEST_PYTHON names "
                    "another interpreter)\n", py);
    return NULL;
  }
  return py;
}

static double rel_err(const double *got, const double *want, int64_t n) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    if (isnan(got[i]) != isnan(want[i])) return INFINITY;
    d = fmax(d, fabs(got[i] - want[i]));
    m = fmax(m, fabs(want[i]));
  }
  return m > 0 ? d / m : d;
}

static double *ref(loom_safetensors *f, const char *name, int64_t *n) {
  loom_tensor *t = loom_safetensors_get(f, name, loom_cpu());
  cr_assert_not_null(t, "the reference has no %s: %s", name, loom_last_error());
  *n = loom_tensor_numel(t);
  return tk_read(t);
}

/* got (n values) against the reference `name`; returns the share of the tolerance used. */
static double compare(loom_safetensors *f, const char *cname, const char *name, const double *got, int64_t n) {
  int64_t m;
  double *want = ref(f, name, &m);
  cr_assert_eq(m, n, "%s %s: loom has %lld values, torch %lld", cname, name, (long long)n, (long long)m);
  double e = rel_err(got, want, n);
  free(want);
  char ename[300];
  snprintf(ename, sizeof ename, "f32err.%s", name);
  double *e32 = ref(f, ename, &m), t32 = e32[0];
  free(e32);
  double tol = fmax(TOL, F32_FACTOR * t32);
  cr_assert(e <= tol, "%s %s: max|loom - torch| / max|torch| = %.3g > %.3g (PyTorch's own float32: %.3g)", cname, name,
            e, tol, t32);
  return e / tol;
}

static char dir[512];
static void remove_dir(void) {
  const char *k = getenv("LOOM_CONFORMANCE_KEEP");
  if (*dir && !(k && *k)) tk_tmpdir_remove(dir);
  *dir = '\0';
}
TestSuite(gpt_conformance, .fini = remove_dir);

static void run_case(const gpt_case *k) {
  const char *py = torch_python();
  if (!py) cr_skip_test("python3 with torch not found");
  tk_tmpdir(dir, sizeof dir, "loom-gpt-conformance");
  loom_scope_begin();
  loom_manual_seed(2028);
  loom_gpt_config c;
  loom_gpt_config_init(&c);
  c.vocab_size = k->vocab, c.block_size = k->block, c.n_layer = k->layers, c.n_head = k->heads, c.n_embd = k->embd;
  c.bias = k->bias, c.dropout = 0.0;
  loom_module *m = loom_gpt_new(&c, loom_cpu());
  cr_assert_not_null(m, "%s", loom_last_error());
  const int np = loom_module_num_params(m);
  char **names = calloc((size_t)np + 2, sizeof *names);
  loom_tensor **ts = calloc((size_t)np + 2, sizeof *ts);
  char buf[256];
  bool prev = loom_set_grad_enabled(false);
  for (int i = 0; i < np; i++) {
    loom_tensor *p = loom_module_param(m, i);
    loom_tensor *noise = loom_mul_scalar(loom_randn(loom_tensor_ndim(p), loom_tensor_shape(p), LOOM_F32, loom_cpu()),
                                         PERTURB);
    cr_assert_eq(loom_copy_(p, loom_add(p, noise)), LOOM_OK, "%s", loom_last_error());
    names[i] = strdup(loom_module_param_name(m, i, buf, sizeof buf));
    ts[i] = p;
  }
  loom_set_grad_enabled(prev);
  /* Tokens and next-token targets from a fixed pattern that uses the whole vocabulary. */
  int64_t n = k->batch * k->seq, sh[2] = {k->batch, k->seq};
  int64_t *tok = malloc((size_t)(n + 1) * sizeof *tok);
  for (int64_t i = 0; i <= n; i++) tok[i] = (i * 37 + (i * i) % 11) % k->vocab;
  loom_tensor *idx = loom_from_host(tok, 2, sh, LOOM_I64, loom_cpu());
  loom_tensor *tgt = loom_from_host(tok + 1, 2, sh, LOOM_I64, loom_cpu());
  free(tok);
  names[np] = strdup("idx"), ts[np] = idx;
  names[np + 1] = strdup("targets"), ts[np + 1] = tgt;
  char v[5][32];
  snprintf(v[0], 32, "%lld", (long long)k->vocab), snprintf(v[1], 32, "%lld", (long long)k->block);
  snprintf(v[2], 32, "%lld", (long long)k->layers), snprintf(v[3], 32, "%lld", (long long)k->heads);
  snprintf(v[4], 32, "%lld", (long long)k->embd);
  const char *keys[] = {"vocab_size", "block_size", "n_layer", "n_head", "n_embd", "bias"};
  const char *vals[] = {v[0], v[1], v[2], v[3], v[4], k->bias ? "1" : "0"};
  char path[700];
  snprintf(path, sizeof path, "%s/in.safetensors", dir);
  cr_assert_eq(loom_safetensors_save(path, np + 2, (const char *const *)names, ts, 6, keys, vals), LOOM_OK, "%s",
               loom_last_error());

  /* loom: logits, loss and gradients. */
  double *logits = tk_read(loom_module_forward(m, idx)), loss_v;
  loom_tensor *loss = loom_gpt_forward(m, idx, tgt);
  cr_assert_not_null(loss, "%s", loom_last_error());
  cr_assert_eq(loom_item(loss, &loss_v), LOOM_OK);
  cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());

  char cmd[2048], out[4096] = "";
  snprintf(cmd, sizeof cmd, "'%s' '%s/ref/gpt_conformance.py' '%s' 2>&1", py, LOOM_TEST_SRC_DIR, dir);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p, "cannot run %s", cmd);
  size_t got = fread(out, 1, sizeof out - 1, p);
  out[got] = '\0';
  int rc = pclose(p);
  cr_assert(rc == 0, "%s failed (status %d):\n%s", cmd, rc, out);
  snprintf(path, sizeof path, "%s/out.safetensors", dir);
  loom_safetensors *f = loom_safetensors_open(path);
  cr_assert_not_null(f, "%s", loom_last_error());

  /* The same names in the same order as the twin's named_parameters(). */
  const char *order = loom_safetensors_metadata(f, "params");
  cr_assert_not_null(order);
  size_t at = 0;
  for (int i = 0; i < np; i++) {
    size_t len = strlen(names[i]);
    cr_assert(!strncmp(order + at, names[i], len) && (order[at + len] == ',' || order[at + len] == '\0'),
              "%s: parameter %d is %s in loom; torch's order: %s", k->name, i, names[i], order);
    at += len + (order[at + len] == ',');
  }
  cr_assert_eq(order[at], '\0', "%s: torch has more parameters than loom's %d: %s", k->name, np, order);

  double worst = compare(f, k->name, "logits", logits, n * k->vocab);
  worst = fmax(worst, compare(f, k->name, "loss", &loss_v, 1));
  for (int i = 0; i < np; i++) {
    loom_tensor *g = loom_grad(ts[i]);
    cr_assert_not_null(g, "%s: %s has no gradient", k->name, names[i]);
    double *gv = tk_read(g);
    snprintf(buf, sizeof buf, "grad.%s", names[i]);
    worst = fmax(worst, compare(f, k->name, buf, gv, loom_tensor_numel(g)));
    free(gv);
  }
  fprintf(stderr, "gpt conformance %s: %d parameters, loss %.6f; the worst comparison used %.2f of its tolerance\n",
          k->name, np, loss_v, worst);
  loom_safetensors_close(f);
  free(logits);
  for (int i = 0; i < np + 2; i++) free(names[i]);
  free(names), free(ts);
  loom_module_free(m);
  loom_scope_end();
  tk_teardown();
}

/* The tiny config of issue 28 (vocab 65 as shakespeare_char's, block 16, 2
 * layers, 2 heads, 32 wide) at T = 13 < block (wpe's last rows get no
 * gradient; attention's tiles end mid-way). */
Test(gpt_conformance, tiny_with_bias) {
  gpt_case k = {"tiny", 65, 16, 2, 2, 32, 3, 13, true};
  run_case(&k);
}

/* nanoGPT's bias=False (no Linear or LayerNorm biases), 4 heads of 8, T = block. */
Test(gpt_conformance, tiny_without_bias) {
  gpt_case k = {"tiny-nobias", 65, 16, 1, 4, 32, 2, 16, false};
  run_case(&k);
}
