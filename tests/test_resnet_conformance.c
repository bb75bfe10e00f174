/* test_resnet_conformance.c — loom's ResNets against torchvision's (and,
 * for the CIFAR-style ResNet-20/56, the PyTorch twin in
 * tests/ref/resnet_torch.py), computed live by tests/ref/resnet_conformance.py
 * under the Python in LOOM_TEST_PYTHON (python3 by default) with torch and
 * torchvision; without them each case is skipped and says so (ctest shows
 * "Skipped").
 *
 * What a case compares. loom builds the model and trains it STEPS SGD steps
 * (lr, momentum, weight decay) from its own initialisation, so nothing sits
 * at its initial value; it writes that state under torchvision's names, the
 * batches, its momentum buffers and its gradients of one more training
 * forward + backward. The reference loads the state into torchvision's model
 * and recomputes in float64. Held: train-mode logits and loss, every
 * parameter's gradient, every BatchNorm's running statistics after the
 * forward and num_batches_tracked, eval-mode logits, a third SGD step
 * against torch.optim.SGD (new momentum buffer and update), and the other
 * direction (torchvision's initialisation loaded into loom: eval logits).
 *
 * Why it is built this way (numbers measured on this 2-core AMD EPYC):
 * the first version held each gradient to max|loom - float64| / max|float64|
 * within a "float32 error scale" (PyTorch's own float32 run, and float64 from
 * inputs perturbed at 2^-24). Whether it passed depended on the seed, under
 * every instruction set: seed 1 (avx512) ResNet-50 NCHW
 * grad.layer1.2.conv2.weight 0.0123 > 0.011, seed 3 (avx512) ResNet-50
 * grad.conv1.weight 0.00296 > 0.00143, seed 2 (scalar) ResNet-50 0.00197 >
 * 0.000425 and ResNet-56 0.00338 > 0.0002, while per op loom's scalar and
 * AVX-512 convolutions agree with float64 to ~1e-7. The cause is discrete: a
 * ReLU input, or the two largest inputs of a max-pool window, within
 * float32's rounding error of the kink go one way in float64 and may go the
 * other in any float32 run (PyTorch's own included), and train-mode
 * BatchNorm at batch 2 (layer4 of a 64x64 ResNet-50 normalizes over 2*2*2 =
 * 8 values per channel) spreads one such flip over whole layers' gradients,
 * by more than the 1e-3 bugs below move them. No smooth tolerance tells that
 * from a bug; a metric that averages (a relative Frobenius norm) only
 * shrinks the flip and the bug alike.
 *
 * So the reference settles the kinks, then compares smoothly:
 *  - it lists the kinks float32 can tip (ReLU inputs within 8 standard
 *    deviations of float32's forward error of 0, per channel; near-tied
 *    max-pool pairs), computes each one's first-order effect on every
 *    gradient in float64, finds by least squares which of them explain
 *    loom's deviation, and reruns float64 with exactly those on loom's side
 *    (the same fit recovers the kinks PyTorch's float32 run is known to
 *    flip: the method's self-check, printed per case). Only kinks within
 *    float32's reach can be forced, so a bug is not explained away: each
 *    mutation below still fails;
 *  - gradients: within max(TOL_GRAD, F32_FACTOR x PyTorch float32's own
 *    smooth error of that tensor), the worst of 3 PyTorch float32 runs on
 *    float64's side of every kink (from the state and batch as given, and
 *    from 2 copies with every element moved by up to one float32 ulp, which
 *    round differently everywhere);
 *  - the well-conditioned quantities (logits, loss, BatchNorm statistics,
 *    eval logits, torchvision's weights in loom) within TOL_FWD = 1e-5 of
 *    float64 (they agree to ~1e-6); the SGD step within TOL_SGD.
 * With that, seeds 1, 2, 3, 8, 9, 10 x {avx512, avx2, scalar} (and seed 4
 * under avx512) x all six cases passed (tests/resnet_conformance_sweep.py;
 * 10 seeds did not fit the time on the shared machine), the worst shares of
 * the tolerances 0.54 (forward), 0.44 (gradients), 0.48 (SGD step); the
 * table is in bench/results/resnet-conformance-sweep-2026-11-25.md.
 *
 * The gradient and optimizer checks still catch small bugs (each seen
 * failing once, seed 2023, avx512): BatchNorm's running variance updated
 * biased (ResNet-20 bn1.running_var 1.5e-5 > 1e-5, ResNet-50 3.9e-4);
 * conv backward-filter with one output channel's dW off by 1e-3 relative,
 * in every conv (ResNet-20 grad.conv1.weight 6.5e-4 > 1.5e-5) or in a single
 * one (ResNet-20 layer3.2.conv2 5.5e-4 > 1.8e-5, layer2.1.conv1 4.9e-4 >
 * 1.3e-5; ResNet-50 layer1.2.conv2 5.7e-4 > 4.4e-4: ResNet-50's layer1 is
 * where the smooth float32 error is largest, 5.5e-5, so a 1e-3 single-channel
 * bug there is caught by a small margin only); weight decay doubled on one
 * parameter (conv1.weight's momentum buffer off by 3.8e-4 in ResNet-20,
 * 5.9e-5 in ResNet-50, > 1e-5); momentum x0.99 on one parameter (ResNet-20
 * fc.bias's buffer off by 6.4e-3).
 * Known gap: the metric is relative to a tensor's largest element, so a bug
 * confined to a channel whose gradients are small is diluted. ResNet-50
 * layer4.2.conv3 (2048 channels), channel 0 (its largest |dW| 6.6% of the
 * tensor's) off by 1e-3 is 6.6e-5 of the tensor's scale, under its
 * tolerance: that mutant PASSES. A per-output-channel comparison (each
 * channel against its own scale and float32 error) would catch it; not done.
 *
 * Environment: LOOM_CONFORMANCE_SEED (a decimal integer; default
 * DEFAULT_SEED) seeds loom's initialisation and batches;
 * LOOM_CONFORMANCE_KEEP=1 keeps each case's scratch directory (printed) to
 * rerun the reference on it; LOOM_CPU_ISA picks loom's kernels (the ctest
 * variants _avx2 and _scalar set it); LOOM_TEST_PYTHON names the Python. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "support/testkit.h"

#ifndef LOOM_TEST_SRC_DIR
#error "LOOM_TEST_SRC_DIR (the tests/ directory) must be defined by the build"
#endif

enum { STEPS = 2 };
#define DEFAULT_SEED 2023
#define LR 0.05
#define MOMENTUM 0.9
#define WEIGHT_DECAY 5e-4
#define TOL_FWD 1e-5    /* logits, loss, BatchNorm statistics, eval logits */
#define TOL_GRAD 1e-5   /* gradients: at least this, */
#define F32_FACTOR 8.0  /* or this times PyTorch's own float32 error (kinks on float64's side) */
#define TOL_SGD 1e-5    /* the optimizer step: momentum buffers, and updates beyond the rounding of the parameter */

typedef struct conf_case {
  const char *arch_name;
  loom_resnet_arch arch;
  loom_resnet_shortcut shortcut;
  int64_t image, batch;
  loom_memory_format format;
} conf_case;

/* The Python to run, or NULL after a visible skip message. */
static const char *torch_python(void) {
  const char *py = getenv("LOOM_TEST_PYTHON");
  if (!py || !*py) py = "python3";
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' -c 'import torch, torchvision' >/dev/null 2>&1", py);
  if (system(cmd) != 0) {
    fprintf(stderr, "resnet conformance skipped: %s cannot import torch and torchvision (Debian: python3-torch "
                    "python3-torchvision; LOOM_TEST_PYTHON names another interpreter)\n", py);
    return NULL;
  }
  return py;
}

/* LOOM_CONFORMANCE_SEED (a decimal integer) or DEFAULT_SEED. */
static unsigned long long conformance_seed(void) {
  const char *s = getenv("LOOM_CONFORMANCE_SEED");
  if (!s || !*s) return DEFAULT_SEED;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  cr_assert(errno == 0 && *end == '\0' && s[0] != '-', "LOOM_CONFORMANCE_SEED='%s' is not a decimal seed", s);
  return v;
}

/* max|got - want| / max|want| over n values (0 when both are all zero). */
static double rel_err(const double *got, const double *want, int64_t n) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    d = fmax(d, fabs(got[i] - want[i]));
    m = fmax(m, fabs(want[i]));
    if (isnan(got[i]) != isnan(want[i])) return INFINITY;
  }
  return m > 0 ? d / m : d;
}

/* The tensor `name` from f as doubles; its element count in *n. */
static double *ref(loom_safetensors *f, const char *name, int64_t *n) {
  loom_tensor *t = loom_safetensors_get(f, name, loom_cpu());
  cr_assert_not_null(t, "%s has no %s: %s", "the reference", name, loom_last_error());
  *n = loom_tensor_numel(t);
  return tk_read(t);
}

/* The worst of one kind of quantity: the largest error, its share of its
 * tolerance, and its ratio to PyTorch's float32 error. */
typedef struct worst {
  double err, of_tol, x_f32;
  char what[300];
} worst;

static void note(worst *w, const char *name, double e, double tol, double t32) {
  if (e >= w->err) {
    w->err = e;
    snprintf(w->what, sizeof w->what, "%s", name);
  }
  w->of_tol = fmax(w->of_tol, e / tol);
  if (t32 > 0) w->x_f32 = fmax(w->x_f32, e / t32);
}

/* got against the reference `name`: max|got - ref| / max|ref| within
 * max(floor, factor x f32err.NAME, PyTorch's own float32 error). */
static void compare(worst *w, loom_safetensors *f, const char *name, const double *got, int64_t n, double floor,
                    double factor, const char *arch) {
  int64_t m;
  double *want = ref(f, name, &m);
  cr_assert_eq(m, n, "%s %s: %lld values, torch has %lld", arch, name, (long long)n, (long long)m);
  double e = rel_err(got, want, n);
  free(want);
  char ename[200];
  snprintf(ename, sizeof ename, "f32err.%s", name);
  double *e32 = ref(f, ename, &m), t32 = e32[0];
  free(e32);
  double tol = fmax(floor, factor * t32);
  cr_assert(e <= tol, "%s %s: max|loom - torch| / max|torch| = %.3g > %.3g (PyTorch's own float32: %.3g)", arch, name,
            e, tol, t32);
  note(w, name, e, tol, t32);
}

/* loom's SGD step on parameter `pname` (before: theta2, after: theta3, n
 * values; its new momentum buffer from the checkpoint ck3) against
 * torch.optim.SGD's from the same state: the buffer within TOL_SGD, the
 * update within TOL_SGD plus the rounding of the stored parameter. */
static void compare_sgd(worst *w, loom_safetensors *f, loom_safetensors *ck3, const char *pname, const double *theta2,
                        const double *theta3, int64_t n, const char *arch) {
  char name[256];
  int64_t m;
  snprintf(name, sizeof name, "optim.%s.momentum_buffer", pname);
  loom_tensor *bt = loom_safetensors_get(ck3, name, loom_cpu());
  cr_assert_not_null(bt, "loom's checkpoint has no %s: %s", name, loom_last_error());
  double *buf = tk_read(bt);
  snprintf(name, sizeof name, "sgd.momentum_buffer.%s", pname);
  double *want = ref(f, name, &m);
  cr_assert_eq(m, n, "%s %s", arch, name);
  double e = rel_err(buf, want, n);
  cr_assert(e <= TOL_SGD, "%s %s: loom's momentum buffer after step %d is off by %.3g (max|torch| relative) > %.3g",
            arch, pname, STEPS + 1, e, TOL_SGD);
  note(w, name, e, TOL_SGD, 0);
  free(buf), free(want);

  snprintf(name, sizeof name, "sgd.update.%s", pname);
  want = ref(f, name, &m);
  double scale = 0, worst_share = 0, worst_e = 0;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
  for (int64_t i = 0; i < n; i++) {
    float t3 = (float)theta3[i];
    double ulp = (double)nextafterf(fabsf(t3), INFINITY) - fabsf(t3);
    double d = fabs((theta3[i] - theta2[i]) - want[i]), tol = TOL_SGD * scale + ulp;
    if (d / tol > worst_share) worst_share = d / tol, worst_e = d;
  }
  free(want);
  cr_assert(worst_share <= 1, "%s %s: loom's update at step %d is off by %.3g (%.3g of the tolerance)", arch, pname,
            STEPS + 1, worst_e, worst_share);
  w->of_tol = fmax(w->of_tol, worst_share);
}

static loom_module *build(const conf_case *k) {
  loom_resnet_options o;
  loom_resnet_options_init(&o, k->arch);
  o.num_classes = 10, o.shortcut = k->shortcut, o.memory_format = k->format;
  loom_module *m = loom_resnet_new(k->arch, &o, loom_cpu());
  cr_assert_not_null(m, "%s", loom_last_error());
  return m;
}

/* One forward + cross-entropy; the logits (host) and the loss. */
static double *forward_loss(loom_module *m, loom_tensor *x, loom_tensor *y, loom_tensor **loss) {
  loom_tensor *logits = loom_module_forward(m, x);
  cr_assert_not_null(logits, "%s", loom_last_error());
  *loss = loom_cross_entropy(logits, y);
  cr_assert_not_null(*loss, "%s", loom_last_error());
  return tk_read(logits);
}

/* Parameter (i < np) or buffer i's name, prefixed. */
static const char *state_name(loom_module *m, int np, int i, const char *prefix, char *out, size_t n) {
  char name[160];
  snprintf(out, n, "%s%s", prefix,
           i < np ? loom_module_param_name(m, i, name, sizeof name) : loom_module_buffer_name(m, i - np, name, sizeof name));
  return out;
}

/* Save n tensors; frees names (each and the array) and ts. */
static void save(const char *path, int n, char **names, loom_tensor **ts, int nmeta, const char **keys,
                 const char **vals) {
  cr_assert_eq(loom_safetensors_save(path, n, (const char *const *)names, ts, nmeta, keys, vals), LOOM_OK, "%s: %s",
               path, loom_last_error());
  for (int i = 0; i < n; i++) free(names[i]);
  free(names), free(ts);
}

/* The case's scratch directory (the batches, loom's state and results, the
 * reference: about 1 GB for ResNet-50), removed after the case whether it
 * passed or not, unless LOOM_CONFORMANCE_KEEP is set (then its name is
 * printed, to rerun tests/ref/resnet_conformance.py on it). */
static char dir[512];

static bool keep(void) {
  const char *k = getenv("LOOM_CONFORMANCE_KEEP");
  return k && *k;
}

static void remove_dir(void) {
  if (*dir && !keep()) tk_tmpdir_remove(dir);
  *dir = '\0';
}

TestSuite(resnet_conformance, .fini = remove_dir);

static void run_case(const conf_case *k) {
  const char *py = torch_python();
  if (!py) cr_skip_test("python3 with torch and torchvision not found");
  const unsigned long long seed = conformance_seed();
  char path[700], full[200];
  tk_tmpdir(dir, sizeof dir, "loom-conformance");
  if (keep()) fprintf(stderr, "resnet conformance: %s keeps %s\n", k->arch_name, dir);

  loom_scope_begin();  /* owns the batches and what is read from the reference */
  loom_manual_seed(seed);
  loom_module *m = build(k);
  const int np = loom_module_num_params(m), nb = loom_module_num_buffers(m);
  loom_tensor *xs[STEPS + 1], *ys[STEPS + 1];
  int64_t sx[4] = {k->batch, 3, k->image, k->image}, labels[16];
  for (int s = 0; s <= STEPS; s++) {
    xs[s] = loom_randn(4, sx, LOOM_F32, loom_cpu());
    for (int64_t i = 0; i < k->batch; i++) labels[i] = (i * 7 + s * 3) % 10;
    ys[s] = loom_from_host(labels, 1, &k->batch, LOOM_I64, loom_cpu());
  }

  /* loom: STEPS SGD steps from its own initialisation. */
  loom_tensor **params = calloc((size_t)np, sizeof *params);
  for (int i = 0; i < np; i++) params[i] = loom_module_param(m, i);
  loom_sgd_options so;
  loom_sgd_options_init(&so);
  so.lr = LR, so.momentum = MOMENTUM, so.weight_decay = WEIGHT_DECAY;
  loom_optimizer *opt = loom_sgd_new(params, np, &so);
  cr_assert_not_null(opt, "%s", loom_last_error());
  for (int s = 0; s < STEPS; s++) {
    loom_scope_begin();
    loom_tensor *loss;
    free(forward_loss(m, xs[s], ys[s], &loss));
    cr_assert_eq(loom_optimizer_zero_grad(opt), LOOM_OK);
    cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
    loom_scope_end();
  }
  /* The state they reached and the batches, under torchvision's names; the
   * optimizer's momentum buffers in a checkpoint. */
  int n = np + nb + 2 * (STEPS + 1);
  char **names = calloc((size_t)n, sizeof *names);
  loom_tensor **ts = calloc((size_t)n, sizeof *ts);
  for (int i = 0; i < np + nb; i++) {
    names[i] = strdup(state_name(m, np, i, "start.", full, sizeof full));
    ts[i] = i < np ? loom_module_param(m, i) : loom_module_buffer(m, i - np);
  }
  for (int s = 0; s <= STEPS; s++) {
    snprintf(full, sizeof full, "x%d", s);
    names[np + nb + 2 * s] = strdup(full);
    ts[np + nb + 2 * s] = xs[s];
    snprintf(full, sizeof full, "y%d", s);
    names[np + nb + 2 * s + 1] = strdup(full);
    ts[np + nb + 2 * s + 1] = ys[s];
  }
  char seed_s[32], lr_s[32], mom_s[32], wd_s[32];
  snprintf(seed_s, sizeof seed_s, "%llu", seed);
  snprintf(lr_s, sizeof lr_s, "%.17g", LR);
  snprintf(mom_s, sizeof mom_s, "%.17g", MOMENTUM);
  snprintf(wd_s, sizeof wd_s, "%.17g", WEIGHT_DECAY);
  const char *keys[] = {"arch", "shortcut", "num_classes", "seed", "lr", "momentum", "weight_decay"};
  const char *vals[] = {k->arch_name, k->shortcut == LOOM_SHORTCUT_ZERO_PAD ? "A" : "B", "10", seed_s, lr_s, mom_s,
                        wd_s};
  snprintf(path, sizeof path, "%s/in.safetensors", dir);
  save(path, n, names, ts, 7, keys, vals);
  loom_train_state st = {.struct_size = sizeof st, .model = m, .optimizer = opt};
  snprintf(path, sizeof path, "%s/optim.safetensors", dir);
  cr_assert_eq(loom_checkpoint_save(path, &st), LOOM_OK, "%s", loom_last_error());

  /* The compared forward + backward (loom's gradients go to the reference,
   * which needs them to tell which kinks loom took), and eval. */
  loom_scope_begin();
  cr_assert_eq(loom_optimizer_zero_grad(opt), LOOM_OK);
  loom_tensor *loss;
  double *logits = forward_loss(m, xs[STEPS], ys[STEPS], &loss), loss_v;
  cr_assert_eq(loom_item(loss, &loss_v), LOOM_OK);
  cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
  double **grads = calloc((size_t)np, sizeof *grads), **bufs = calloc((size_t)nb, sizeof *bufs);
  names = calloc((size_t)np, sizeof *names);
  ts = calloc((size_t)np, sizeof *ts);
  for (int i = 0; i < np; i++) {
    ts[i] = loom_grad(params[i]);
    cr_assert_not_null(ts[i], "%s has no gradient", state_name(m, np, i, "", full, sizeof full));
    grads[i] = tk_read(ts[i]);
    names[i] = strdup(state_name(m, np, i, "grad.", full, sizeof full));
  }
  snprintf(path, sizeof path, "%s/loom.safetensors", dir);
  save(path, np, names, ts, 0, NULL, NULL);
  for (int i = 0; i < nb; i++) bufs[i] = tk_read(loom_module_buffer(m, i));
  loom_scope_end();
  cr_assert_eq(loom_module_train(m, false), LOOM_OK);
  loom_scope_begin();
  double *logits_eval = tk_read(loom_module_forward(m, xs[STEPS]));
  loom_scope_end();

  /* One more SGD step with those gradients; its new momentum buffers in a
   * second checkpoint. */
  double **theta2 = calloc((size_t)np, sizeof *theta2);
  for (int i = 0; i < np; i++) theta2[i] = tk_read(params[i]);
  cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
  snprintf(path, sizeof path, "%s/optim3.safetensors", dir);
  cr_assert_eq(loom_checkpoint_save(path, &st), LOOM_OK, "%s", loom_last_error());

  /* PyTorch. */
  char cmd[2048], outbuf[4096] = "";
  snprintf(cmd, sizeof cmd, "'%s' '%s/ref/resnet_conformance.py' '%s' 2>&1", py, LOOM_TEST_SRC_DIR, dir);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p, "cannot run %s", cmd);
  size_t got = fread(outbuf, 1, sizeof outbuf - 1, p);
  outbuf[got] = '\0';
  int rc = pclose(p);
  cr_assert(rc == 0, "%s failed (status %d):\n%s", cmd, rc, outbuf);
  snprintf(path, sizeof path, "%s/out.safetensors", dir);
  loom_safetensors *f = loom_safetensors_open(path);
  cr_assert_not_null(f, "%s", loom_last_error());
  snprintf(path, sizeof path, "%s/optim3.safetensors", dir);
  loom_safetensors *ck3 = loom_safetensors_open(path);
  cr_assert_not_null(ck3, "%s", loom_last_error());
  const char *kinks = loom_safetensors_metadata(f, "kinks"), *flips = loom_safetensors_metadata(f, "loom_flips"),
             *f32_flips = loom_safetensors_metadata(f, "torch_f32_flips"),
             *recovered = loom_safetensors_metadata(f, "torch_f32_recovered"),
             *sigma = loom_safetensors_metadata(f, "loom_flips_max_sigma"),
             *outside = loom_safetensors_metadata(f, "torch_f32_flips_outside");
  cr_assert(kinks && flips && f32_flips && recovered && sigma && outside, "the reference's metadata lacks its kinks");

  const char *an = k->arch_name, *fmt = k->format == LOOM_FORMAT_NHWC ? "nhwc" : "nchw";
  const int64_t nl = k->batch * 10;
  worst wl = {0}, wg = {0}, wb = {0}, we = {0}, ws = {0};
  compare(&wl, f, "logits_train", logits, nl, TOL_FWD, 0, an);
  compare(&wl, f, "loss", &loss_v, 1, TOL_FWD, 0, an);
  for (int i = 0; i < np; i++)
    compare(&wg, f, state_name(m, np, i, "grad.", full, sizeof full), grads[i], loom_tensor_numel(params[i]), TOL_GRAD,
            F32_FACTOR, an);
  int tracked = 0;
  for (int i = 0; i < nb; i++) {
    state_name(m, np, np + i, "state.", full, sizeof full);
    int64_t nv = loom_tensor_numel(loom_module_buffer(m, i));
    if (strstr(full, "num_batches_tracked")) {
      int64_t one;
      double *want = ref(f, full, &one);
      cr_assert_eq(bufs[i][0], want[0], "%s %s: %g, torch %g", an, full, bufs[i][0], want[0]);
      cr_assert_eq(bufs[i][0], STEPS + 1.0, "%s %s", an, full);
      free(want);
      tracked++;
    } else {
      compare(&wb, f, full, bufs[i], nv, TOL_FWD, 0, an);
    }
  }
  cr_assert_eq(tracked * 3, nb, "%s: one num_batches_tracked per BatchNorm", an);
  compare(&we, f, "logits_eval", logits_eval, nl, TOL_FWD, 0, an);
  for (int i = 0; i < np; i++) {
    double *theta3 = tk_read(params[i]);
    compare_sgd(&ws, f, ck3, state_name(m, np, i, "", full, sizeof full), theta2[i], theta3,
                loom_tensor_numel(params[i]), an);
    free(theta3);
  }

  /* torchvision's initialisation into loom. */
  loom_module *m2 = build(k);
  for (int i = 0; i < np + nb; i++) {
    loom_tensor *dst = i < np ? loom_module_param(m2, i) : loom_module_buffer(m2, i - np);
    state_name(m2, np, i, "tv.", full, sizeof full);
    loom_scope_begin();
    loom_tensor *src = loom_safetensors_get(f, full, loom_cpu());
    cr_assert_not_null(src, "%s: %s", full, loom_last_error());
    cr_assert_eq(loom_copy_(dst, src), LOOM_OK, "%s: %s", full, loom_last_error());
    loom_scope_end();
  }
  cr_assert_eq(loom_module_train(m2, false), LOOM_OK);
  loom_scope_begin();
  double *tv_logits = tk_read(loom_module_forward(m2, xs[STEPS]));
  loom_scope_end();
  int64_t one;
  double *want = ref(f, "tv_logits_eval", &one), et = rel_err(tv_logits, want, nl);
  free(want);
  cr_assert(et <= TOL_FWD, "%s: torchvision's weights in loom: eval logits off by %.3g > %.g", an, et, TOL_FWD);
  note(&we, "tv_logits_eval", et, TOL_FWD, 0);

  double fwd_tol = fmax(fmax(wl.of_tol, wb.of_tol), we.of_tol);
  cr_log_info("%s (%s, cpu isa %s, seed %llu) vs torch float64: logits/loss %.2g (%s), gradients %.2g (%s; at most "
              "%.2gx PyTorch's own float32), BN statistics %.2g (%s), eval logits %.2g, SGD step %.2g of its "
              "tolerance. %s",
              an, fmt, loom_cpu_isa(), seed, wl.err, wl.what, wg.err, wg.what, wg.x_f32, wb.err, wb.what, we.err,
              ws.of_tol, outbuf);
  /* One line per case for the CI log and the seed sweep (tests/resnet_conformance_sweep.py). */
  printf("conformance %s %s isa=%s seed=%llu: logits %.2g grads %.2g (%s) bn %.2g eval %.2g | of tolerance: fwd %.3f "
         "grads %.3f sgd %.3f | kinks %s, loom flipped %s (at most %s sigma from the kink), torch f32 flipped %s (%s "
         "outside the window; fit recovered them: %s)\n",
         an, fmt, loom_cpu_isa(), seed, wl.err, wg.err, wg.what, wb.err, we.err, fwd_tol, wg.of_tol, ws.of_tol, kinks,
         flips, sigma, f32_flips, outside, recovered);

  loom_safetensors_close(ck3);
  loom_safetensors_close(f);
  for (int i = 0; i < np; i++) free(grads[i]), free(theta2[i]);
  for (int i = 0; i < nb; i++) free(bufs[i]);
  free(grads), free(bufs), free(theta2), free(logits), free(logits_eval), free(tv_logits), free(params);
  loom_optimizer_free(opt);
  loom_module_free(m);
  loom_module_free(m2);
  loom_scope_end();
  tk_leak_check();
}

/* ImageNet-style: batch 2 at 64x64 (layer4 at 2x2: BatchNorm over 8 values). */
Test(resnet_conformance, resnet18, .timeout = 900) {
  run_case(&(conf_case){"resnet18", LOOM_RESNET18, LOOM_SHORTCUT_PROJECTION, 64, 2, LOOM_FORMAT_NHWC});
}
Test(resnet_conformance, resnet34, .timeout = 900) {
  run_case(&(conf_case){"resnet34", LOOM_RESNET34, LOOM_SHORTCUT_PROJECTION, 64, 2, LOOM_FORMAT_NCHW});
}
Test(resnet_conformance, resnet50, .timeout = 900) {
  run_case(&(conf_case){"resnet50", LOOM_RESNET50, LOOM_SHORTCUT_PROJECTION, 64, 2, LOOM_FORMAT_NHWC});
}
Test(resnet_conformance, resnet50_nchw, .timeout = 900) {
  run_case(&(conf_case){"resnet50", LOOM_RESNET50, LOOM_SHORTCUT_PROJECTION, 64, 2, LOOM_FORMAT_NCHW});
}
/* CIFAR-style against the PyTorch twin: option A (zero-padding shortcut) and B (projection). */
Test(resnet_conformance, resnet20_option_a, .timeout = 900) {
  run_case(&(conf_case){"resnet20", LOOM_RESNET20, LOOM_SHORTCUT_ZERO_PAD, 32, 4, LOOM_FORMAT_NCHW});
}
Test(resnet_conformance, resnet56_option_b, .timeout = 900) {
  run_case(&(conf_case){"resnet56", LOOM_RESNET56, LOOM_SHORTCUT_PROJECTION, 32, 4, LOOM_FORMAT_NHWC});
}
