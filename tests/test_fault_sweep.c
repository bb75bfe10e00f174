/* test_fault_sweep.c — SQLite-style fault sweeps (issue 24 part 2): each
 * operation runs with the Nth host allocation, device-allocator reservation
 * or file call failing (core/fault.h), for N = 1, 2, ... until it completes
 * without reaching N. Every fault must end in a status with a message (or a
 * correct result, where loom recovers by itself: the pool frees its cache
 * and retries), never a crash or hang; nothing leaks (LSan, at the end of
 * each test); after the fault is cleared the same objects work, and a
 * refused training step leaves the parameters, optimizer and scaler exactly
 * as an unfaulted run has them (bit for bit). A checkpoint or safetensors
 * file being replaced is the old one or the new one, never a mix.
 *
 * CI tests at most ~SHORT_POINTS points per sweep, evenly spread (the
 * first 16 always); LOOM_FAULT_SWEEP=full tests every point. Each sweep
 * prints its number of injection points. Needs -DLOOM_FAULT_INJECTION=ON
 * (CI's sanitizer build); otherwise every test skips visibly. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/fault.h"
#include "support/testkit.h"

#define SHORT_POINTS 120

static void require_faults(void) {
  if (!loom_fault_compiled()) cr_skip_test("fault injection not compiled in (configure with -DLOOM_FAULT_INJECTION=ON)");
}

/* ---- the driver ---------------------------------------------------------------- */

typedef struct sweep {
  const char *name;
  void *(*setup)(void);                    /* unfaulted; the objects the operation works on */
  loom_status (*run)(void *ctx);           /* the operation, faulted */
  void (*after)(void *ctx, loom_status st, bool hit); /* fault cleared: check state, retry */
  void (*teardown)(void *ctx);
} sweep;

typedef struct sweep_report {
  long points;    /* calls the whole operation makes (injection points) */
  long tested;    /* points faulted */
  long refused;   /* ... that ended in an error status */
  long recovered; /* ... that loom absorbed and completed correctly */
} sweep_report;

static long g_n;  /* the call being failed (0: none), for messages */

static sweep_report run_sweep(const sweep *s) {
  sweep_report r = {0};
  /* Count the points: armed with an unreachable N. */
  g_n = 0;
  void *ctx = s->setup();
  loom_fault_arm(LOOM_FAULT_ALL, LONG_MAX, false);
  loom_status st = s->run(ctx);
  r.points = loom_fault_calls();
  loom_fault_clear();
  cr_assert_eq(st, LOOM_OK, "%s: unfaulted run failed: %s", s->name, loom_last_error());
  s->after(ctx, st, false);
  s->teardown(ctx);

  const char *mode = getenv("LOOM_FAULT_SWEEP");
  bool full = mode && !strcmp(mode, "full");
  long stride = full || r.points <= SHORT_POINTS ? 1 : (r.points + SHORT_POINTS - 1) / SHORT_POINTS;
  for (long n = 1;; n = n < 16 ? n + 1 : n + stride) {
    ctx = s->setup();
    g_n = n;
    loom_clear_error();
    loom_fault_arm(LOOM_FAULT_ALL, n, false);
    st = s->run(ctx);
    bool hit = loom_fault_hits() > 0;
    loom_fault_clear();
    if (hit) {
      r.tested++;
      if (st != LOOM_OK) {
        r.refused++;
        cr_assert(loom_last_error()[0], "%s: fault at call %ld: %s with no message", s->name, n, loom_status_name(st));
      } else {
        r.recovered++;
      }
    } else {
      cr_assert_eq(st, LOOM_OK, "%s: no fault reached at call %ld but: %s", s->name, n, loom_last_error());
    }
    s->after(ctx, st, hit);
    s->teardown(ctx);
    if (!hit && n > r.points) break;
    cr_assert(n < 4 * r.points + 64, "%s: the operation keeps reaching new calls (%ld)", s->name, n);
  }
  fprintf(stderr, "fault sweep %-22s %6ld injection points, %4ld tested: %4ld refused with a status, %3ld absorbed%s\n",
          s->name, r.points, r.tested, r.refused, r.recovered, full ? " (full)" : "");
  return r;
}

/* Parameters as host doubles, for bit-exact comparison. */
typedef struct snap {
  int n;
  double *v[128];
  int64_t len[128];
} snap;

static void snap_take(snap *s, loom_module *m) {
  s->n = loom_module_num_params(m);
  cr_assert(s->n <= 128);
  for (int i = 0; i < s->n; i++) {
    loom_tensor *p = loom_module_param(m, i);
    s->v[i] = tk_read(p);
    s->len[i] = loom_tensor_numel(p);
  }
}

static bool snap_equal(const snap *a, const snap *b) {
  if (a->n != b->n) return false;
  for (int i = 0; i < a->n; i++)
    if (a->len[i] != b->len[i] || memcmp(a->v[i], b->v[i], (size_t)a->len[i] * sizeof(double))) return false;
  return true;
}

/* Within float rounding: a fault loom absorbs may take another path with
 * another summation order (the GEMM without its packing buffer). */
static bool snap_close(const snap *a, const snap *b) {
  if (a->n != b->n) return false;
  for (int i = 0; i < a->n; i++)
    for (int64_t k = 0; k < a->len[i]; k++)
      if (fabs(a->v[i][k] - b->v[i][k]) > 1e-4 * (1 + fabs(b->v[i][k]))) return false;
  return true;
}

static void snap_free(snap *s) {
  for (int i = 0; i < s->n; i++) free(s->v[i]);
  s->n = 0;
}

/* ---- training steps: MLP (AdamW) and a small ResNet (fp16 AMP, SGD) -------------- */

#define MLP_N 32
#define MLP_IN 12
#define MLP_CLS 4

typedef struct trainer {
  loom_module *model;
  loom_optimizer *opt;
  loom_grad_scaler *scaler;
  loom_tensor *x, *y;
  bool resnet;
} trainer;

static snap g_ref1, g_ref2;  /* parameters after one and two unfaulted steps */
static double g_scale1, g_scale2;

static trainer *trainer_new(bool resnet) {
  trainer *t = calloc(1, sizeof *t);
  loom_set_num_threads(1);
  loom_manual_seed(31);
  loom_empty_cache(loom_cpu());  /* so the step reserves memory from the provider again */
  tk_seed(5);
  if (resnet) {
    loom_resnet_options o;
    loom_resnet_options_init(&o, LOOM_RESNET20);
    t->model = loom_resnet_new(LOOM_RESNET20, &o, loom_cpu());
    int64_t xs[4] = {2, 3, 8, 8};
    t->x = loom_keep(tk_rand_tensor(4, xs, -1, 1, 0, LOOM_F32, loom_cpu(), NULL));
  } else {
    int64_t hidden[2] = {24, 24};
    t->model = loom_mlp_new(MLP_IN, 2, hidden, MLP_CLS, loom_cpu());
    int64_t xs[2] = {MLP_N, MLP_IN};
    t->x = loom_keep(tk_rand_tensor(2, xs, -1, 1, 0, LOOM_F32, loom_cpu(), NULL));
  }
  int64_t n = resnet ? 2 : MLP_N;
  int64_t ys[MLP_N];
  for (int64_t i = 0; i < n; i++) ys[i] = i % MLP_CLS;
  t->y = loom_keep(loom_from_host(ys, 1, &n, LOOM_I64, loom_cpu()));
  cr_assert(t->model && t->x && t->y, "%s", loom_last_error());
  int np = loom_module_num_params(t->model);
  loom_tensor *params[128];
  cr_assert(np <= 128);
  for (int i = 0; i < np; i++) params[i] = loom_module_param(t->model, i);
  loom_scaler_options so;
  loom_scaler_options_init(&so);
  so.enabled = resnet;
  if (resnet) {
    cr_assert_eq(loom_module_set_precision(t->model, LOOM_PRECISION_MIXED_FP16, true), LOOM_OK, "%s", loom_last_error());
    loom_sgd_options o;
    loom_sgd_options_init(&o);
    o.lr = 0.05;
    o.momentum = 0.9;
    t->opt = loom_sgd_new(params, np, &o);
  } else {
    t->opt = loom_adamw_new(params, np, NULL);
  }
  t->scaler = loom_scaler_new(&so);
  t->resnet = resnet;
  cr_assert(t->opt && t->scaler, "%s", loom_last_error());
  return t;
}

static loom_status train_step(trainer *t) {
  loom_scope_begin();
  loom_status st = loom_optimizer_zero_grad(t->opt);
  loom_tensor *loss = loom_cross_entropy(loom_module_forward(t->model, t->x), t->y);
  if (st == LOOM_OK) st = loom_backward(loom_scaler_scale(t->scaler, loss));
  if (st == LOOM_OK) st = loom_scaler_step(t->scaler, t->opt, NULL);
  loom_scope_end();
  return st;
}

static void trainer_free(void *ctx) {
  trainer *t = ctx;
  loom_tensor_release(t->x);
  loom_tensor_release(t->y);
  loom_scaler_free(t->scaler);
  loom_optimizer_free(t->opt);
  loom_module_free(t->model);
  free(t);
}

static void *mlp_setup(void) { return trainer_new(false); }
static void *resnet_setup(void) { return trainer_new(true); }
static loom_status step_run(void *ctx) { return train_step(ctx); }

/* After a refused step, the next one succeeds and the parameters and the
 * loss scale are those of one unfaulted step; after an absorbed fault (or
 * none), of two. */
static void step_after(void *ctx, loom_status st, bool hit) {
  trainer *t = ctx;
  cr_assert_eq(train_step(t), LOOM_OK, "the step after a fault failed: %s", loom_last_error());
  snap s;
  snap_take(&s, t->model);
  bool refused = hit && st != LOOM_OK, absorbed = hit && st == LOOM_OK;
  cr_assert(absorbed ? snap_close(&s, &g_ref2) : snap_equal(&s, refused ? &g_ref1 : &g_ref2), "fault at call %ld (%s): parameters after %s differ from an unfaulted run",
            g_n, hit ? loom_status_name(st) : "not reached", refused ? "a refused step and a good one" : "two steps");
  cr_assert_eq(loom_scaler_get_scale(t->scaler), refused ? g_scale1 : g_scale2);
  snap_free(&s);
}

static void make_refs(bool resnet) {
  trainer *t = trainer_new(resnet);
  cr_assert_eq(train_step(t), LOOM_OK, "%s", loom_last_error());
  snap_take(&g_ref1, t->model);
  g_scale1 = loom_scaler_get_scale(t->scaler);
  cr_assert_eq(train_step(t), LOOM_OK, "%s", loom_last_error());
  snap_take(&g_ref2, t->model);
  g_scale2 = loom_scaler_get_scale(t->scaler);
  trainer_free(t);
}

Test(fault_sweep, mlp_training_step, .timeout = 600) {
  require_faults();
  make_refs(false);
  run_sweep(&(sweep){"mlp_step", mlp_setup, step_run, step_after, trainer_free});
  snap_free(&g_ref1);
  snap_free(&g_ref2);
  tk_leak_check();
}

Test(fault_sweep, resnet_amp_training_step, .timeout = 900) {
  require_faults();
  make_refs(true);
  run_sweep(&(sweep){"resnet20_amp_step", resnet_setup, step_run, step_after, trainer_free});
  snap_free(&g_ref1);
  snap_free(&g_ref2);
  tk_leak_check();
}

/* ---- model + optimizer + scaler creation ------------------------------------------ */

static void *nothing_setup(void) { return calloc(1, sizeof(trainer)); }

static loom_status create_run(void *ctx) {
  trainer *t = ctx;
  int64_t hidden[2] = {24, 24};
  t->model = loom_mlp_new(MLP_IN, 2, hidden, MLP_CLS, loom_cpu());
  if (!t->model) return loom_last_status();
  loom_tensor *params[8];
  int np = loom_module_num_params(t->model);
  for (int i = 0; i < np; i++) params[i] = loom_module_param(t->model, i);
  t->opt = loom_adamw_new(params, np, NULL);
  if (!t->opt) return loom_last_status();
  t->scaler = loom_scaler_new(NULL);
  if (!t->scaler) return loom_last_status();
  return loom_module_set_precision(t->model, LOOM_PRECISION_MIXED_BF16, true);
}

static void create_after(void *ctx, loom_status st, bool hit) {
  trainer *t = ctx;
  if (st != LOOM_OK) {  /* what was made works; make the rest */
    loom_scaler_free(t->scaler);
    loom_optimizer_free(t->opt);
    loom_module_free(t->model);
    memset(t, 0, sizeof *t);
    cr_assert_eq(create_run(t), LOOM_OK, "creation after a fault: %s", loom_last_error());
  }
  cr_assert_eq(loom_module_num_params(t->model), 6);
}

Test(fault_sweep, model_and_optimizer_creation) {
  require_faults();
  run_sweep(&(sweep){"model_optimizer_create", nothing_setup, create_run, create_after, trainer_free});
  tk_leak_check();
}

/* ---- files: safetensors, checkpoints, profiler trace, metrics --------------------- */

static char g_dir[256];
static char g_path[512];

typedef struct files {
  loom_tensor *t[3];
  double *vals[3];
  trainer *tr;
} files;

static const char *const g_names[3] = {"w", "b", "idx"};

static void *st_setup(void) {
  files *f = calloc(1, sizeof *f);
  int64_t s0[2] = {7, 5}, s1 = 9, s2[3] = {2, 3, 4};
  f->t[0] = tk_rand_tensor(2, s0, -1, 1, 0, LOOM_F32, loom_cpu(), &f->vals[0]);
  f->t[1] = tk_rand_tensor(1, &s1, -1, 1, 0, LOOM_F16, loom_cpu(), &f->vals[1]);
  f->t[2] = tk_rand_tensor(3, s2, -50, 50, 0, LOOM_I64, loom_cpu(), &f->vals[2]);
  /* The file being replaced: one tensor "old". */
  int64_t one = 1;
  loom_tensor *old = loom_full(1, &one, 42.0, LOOM_F32, loom_cpu());
  const char *on = "old";
  cr_assert_eq(loom_safetensors_save(g_path, 1, &on, &old, 0, NULL, NULL), LOOM_OK, "%s", loom_last_error());
  loom_tensor_release(old);
  return f;
}

static void st_teardown(void *ctx) {
  files *f = ctx;
  for (int i = 0; i < 3; i++) {
    loom_tensor_release(f->t[i]);
    free(f->vals[i]);
  }
  free(f);
}

/* The file at g_path holds the new tensors (1), the old one (0), or neither
 * (-1: torn or unreadable). Unfaulted. */
static int st_which(files *f) {
  loom_safetensors *sf = loom_safetensors_open(g_path);
  if (!sf) return -1;
  int r = -1;
  if (loom_safetensors_num_tensors(sf) == 1 && loom_safetensors_find(sf, "old") == 0) {
    loom_tensor *t = loom_safetensors_get(sf, "old", loom_cpu());
    double v = 0;
    r = t && loom_item(t, &v) == LOOM_OK && v == 42.0 ? 0 : -1;
    loom_tensor_release(t);
  } else if (loom_safetensors_num_tensors(sf) == 3) {
    r = 1;
    for (int i = 0; i < 3; i++) {
      loom_tensor *t = loom_safetensors_get(sf, g_names[i], loom_cpu());
      if (!t || loom_tensor_numel(t) != loom_tensor_numel(f->t[i])) r = -1;
      if (t && r == 1) {
        double *v = tk_read(t);
        if (memcmp(v, f->vals[i], (size_t)loom_tensor_numel(t) * sizeof(double))) r = -1;
        free(v);
      }
      loom_tensor_release(t);
    }
    if (!loom_safetensors_metadata(sf, "k") || strcmp(loom_safetensors_metadata(sf, "k"), "v")) r = -1;
  }
  loom_safetensors_close(sf);
  return r;
}

/* save, open, get every tensor and check it, close. */
static loom_status st_run(void *ctx) {
  files *f = ctx;
  const char *k = "k", *v = "v";
  loom_status st = loom_safetensors_save(g_path, 3, g_names, f->t, 1, &k, &v);
  if (st != LOOM_OK) return st;
  loom_safetensors *sf = loom_safetensors_open(g_path);
  if (!sf) return loom_last_status();
  for (int i = 0; i < 3 && st == LOOM_OK; i++) {
    loom_tensor *t = loom_safetensors_get(sf, g_names[i], loom_cpu());
    if (!t) st = loom_last_status();
    loom_tensor_release(t);
  }
  loom_safetensors_close(sf);
  return st;
}

static void st_after(void *ctx, loom_status st, bool hit) {
  files *f = ctx;
  int which = st_which(f);
  cr_assert(which >= 0, "fault at call %ld: the file is torn or unreadable: %s", g_n, loom_last_error());
  if (st == LOOM_OK) cr_assert_eq(which, 1, "fault at call %ld: saved but the file holds the old tensors", g_n);
  cr_assert_eq(st_run(f), LOOM_OK, "after the fault: %s", loom_last_error());
  cr_assert_eq(st_which(f), 1);
}

Test(fault_sweep, safetensors_save_open_get) {
  require_faults();
  tk_tmpdir(g_dir, sizeof g_dir, "loom-fault");
  snprintf(g_path, sizeof g_path, "%s/t.safetensors", g_dir);
  run_sweep(&(sweep){"safetensors_save_open_get", st_setup, st_run, st_after, st_teardown});
  tk_tmpdir_remove(g_dir);
  tk_leak_check();
}

/* Checkpoints: the file holds step 1; a second step is saved over it. */
static trainer *ckpt_trainer(void) {
  trainer *t = trainer_new(false);
  cr_assert_eq(train_step(t), LOOM_OK, "%s", loom_last_error());
  return t;
}

static loom_train_state ckpt_state(trainer *t, int64_t step) {
  return (loom_train_state){.struct_size = sizeof(loom_train_state), .model = t->model, .optimizer = t->opt,
                            .scaler = t->scaler, .step = step};
}

static void *ckpt_save_setup(void) {
  files *f = calloc(1, sizeof *f);
  f->tr = ckpt_trainer();
  loom_train_state s = ckpt_state(f->tr, 1);
  cr_assert_eq(loom_checkpoint_save(g_path, &s), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(train_step(f->tr), LOOM_OK);
  return f;
}

static loom_status ckpt_save_run(void *ctx) {
  files *f = ctx;
  loom_train_state s = ckpt_state(f->tr, 2);
  return loom_checkpoint_save(g_path, &s);
}

static void ckpt_teardown(void *ctx) {
  files *f = ctx;
  if (f->tr) trainer_free(f->tr);
  free(f);
}

/* The step restored from g_path into a fresh trainer, whose parameters must
 * be those of that many unfaulted steps. */
static int64_t ckpt_restored_step(void) {
  trainer *t = trainer_new(false);
  loom_train_state s = ckpt_state(t, -1);
  cr_assert_eq(loom_checkpoint_restore(g_path, &s), LOOM_OK, "fault at call %ld: checkpoint unreadable: %s", g_n,
               loom_last_error());
  cr_assert(s.step == 1 || s.step == 2, "step %lld", (long long)s.step);
  snap p;
  snap_take(&p, t->model);
  cr_assert(snap_equal(&p, s.step == 1 ? &g_ref1 : &g_ref2), "fault at call %ld: checkpoint of step %lld is torn", g_n,
            (long long)s.step);
  snap_free(&p);
  trainer_free(t);
  return s.step;
}

static void ckpt_save_after(void *ctx, loom_status st, bool hit) {
  int64_t step = ckpt_restored_step();
  if (st == LOOM_OK) cr_assert_eq(step, 2, "fault at call %ld: saved, yet the old checkpoint is there", g_n);
  cr_assert_eq(ckpt_save_run(ctx), LOOM_OK, "after the fault: %s", loom_last_error());
  cr_assert_eq(ckpt_restored_step(), 2);
}

Test(fault_sweep, checkpoint_save_is_old_or_new) {
  require_faults();
  make_refs(false);
  tk_tmpdir(g_dir, sizeof g_dir, "loom-fault");
  snprintf(g_path, sizeof g_path, "%s/ckpt.safetensors", g_dir);
  run_sweep(&(sweep){"checkpoint_save", ckpt_save_setup, ckpt_save_run, ckpt_save_after, ckpt_teardown});
  tk_tmpdir_remove(g_dir);
  snap_free(&g_ref1);
  snap_free(&g_ref2);
  tk_leak_check();
}

/* Restore step 2 into a trainer at step 1: refused restores change nothing
 * that a retry does not set right. */
static void *ckpt_restore_setup(void) {
  files *f = calloc(1, sizeof *f);
  f->tr = ckpt_trainer();
  return f;
}

static loom_status ckpt_restore_run(void *ctx) {
  files *f = ctx;
  loom_train_state s = ckpt_state(f->tr, -1);
  loom_status st = loom_checkpoint_restore(g_path, &s);
  if (st == LOOM_OK && s.step != 2) return loom_set_error(LOOM_ERR_INTERNAL, "step %lld", (long long)s.step);
  return st;
}

/* A refused restore changed nothing: the parameters are still those of
 * step 1, and a step from there (optimizer state and scaler untouched too)
 * gives those of step 2. */
static void ckpt_restore_after(void *ctx, loom_status st, bool hit) {
  files *f = ctx;
  if (st != LOOM_OK) {
    snap p;
    snap_take(&p, f->tr->model);
    cr_assert(snap_equal(&p, &g_ref1), "fault at call %ld: a refused restore changed the parameters", g_n);
    snap_free(&p);
    cr_assert_eq(train_step(f->tr), LOOM_OK);
    snap_take(&p, f->tr->model);
    cr_assert(snap_equal(&p, &g_ref2), "fault at call %ld: a refused restore changed the optimizer's state", g_n);
    snap_free(&p);
  }
  cr_assert_eq(ckpt_restore_run(f), LOOM_OK, "restore after the fault: %s", loom_last_error());
  snap p;
  snap_take(&p, f->tr->model);
  cr_assert(snap_equal(&p, &g_ref2), "fault at call %ld: restored parameters differ", g_n);
  snap_free(&p);
  /* and training goes on from there exactly as from the saved run */
  cr_assert_eq(train_step(f->tr), LOOM_OK);
}

Test(fault_sweep, checkpoint_restore) {
  require_faults();
  make_refs(false);
  tk_tmpdir(g_dir, sizeof g_dir, "loom-fault");
  snprintf(g_path, sizeof g_path, "%s/ckpt.safetensors", g_dir);
  trainer *t = ckpt_trainer();
  cr_assert_eq(train_step(t), LOOM_OK);
  loom_train_state s = ckpt_state(t, 2);
  cr_assert_eq(loom_checkpoint_save(g_path, &s), LOOM_OK, "%s", loom_last_error());
  trainer_free(t);
  run_sweep(&(sweep){"checkpoint_restore", ckpt_restore_setup, ckpt_restore_run, ckpt_restore_after, ckpt_teardown});
  tk_tmpdir_remove(g_dir);
  snap_free(&g_ref1);
  snap_free(&g_ref2);
  tk_leak_check();
}

/* ---- the loader: start and first batches, worker threads included ----------------- */

#define LD_N 96
#define LD_F 6

typedef struct loader_ctx {
  loom_dataset *ds;
  loom_loader *l;
  double sum;  /* of the first three batches' x */
  bool next_failed;  /* the error came from loom_loader_next (not our ops on the batch) */
} loader_ctx;

static double g_loader_sum;

static void *loader_setup(void) {
  static float x[LD_N * LD_F];
  static int64_t y[LD_N];
  for (int i = 0; i < LD_N * LD_F; i++) x[i] = (float)(i % 17) * 0.25f;
  for (int i = 0; i < LD_N; i++) y[i] = i % 3;
  loader_ctx *c = calloc(1, sizeof *c);
  int64_t fs = LD_F;
  c->ds = loom_dataset_memory(x, LOOM_F32, 1, &fs, y, LOOM_I64, LD_N, true);
  cr_assert_not_null(c->ds, "%s", loom_last_error());
  return c;
}

static loom_status loader_batches(loader_ctx *c) {
  c->sum = 0;
  c->next_failed = false;
  loom_status st = LOOM_OK;
  for (int b = 0; b < 3 && st == LOOM_OK; b++) {
    loom_scope_begin();
    loom_tensor *x, *y;
    st = loom_loader_next(c->l, &x, &y);
    c->next_failed = st != LOOM_OK;
    double s = 0;
    if (st == LOOM_OK && x && loom_item(loom_sum_all(loom_mul(x, loom_add_scalar(x, (double)b))), &s) != LOOM_OK)
      st = loom_last_status();
    c->sum += s;
    loom_scope_end();
  }
  return st;
}

static loom_status loader_run(void *ctx) {
  loader_ctx *c = ctx;
  loom_loader_options o;
  loom_loader_options_init(&o);
  o.batch_size = 16;
  o.shuffle = true;
  o.seed = 3;
  o.workers = 2;
  o.prefetch = 2;
  c->l = loom_loader_new(c->ds, &o);
  if (!c->l) return loom_last_status();
  return loader_batches(c);
}

/* A loader whose batch failed keeps returning the error until
 * loom_loader_start_epoch, after which it delivers the same batches. */
static void loader_after(void *ctx, loom_status st, bool hit) {
  loader_ctx *c = ctx;
  if (st == LOOM_OK) cr_assert_eq(c->sum, g_loader_sum, "fault at call %ld: wrong batches", g_n);
  if (c->l) {
    if (c->next_failed) {
      loom_tensor *x, *y;
      loom_status again = loom_loader_next(c->l, &x, &y);
      cr_assert_eq(again, st, "fault at call %ld: the loader forgot its error (%s, then %s: %s)", g_n, loom_status_name(st),
                   loom_status_name(again), loom_last_error());
    }
    cr_assert_eq(loom_loader_start_epoch(c->l, 0), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loader_batches(c), LOOM_OK, "fault at call %ld: after restarting the epoch: %s", g_n, loom_last_error());
    cr_assert_eq(c->sum, g_loader_sum, "fault at call %ld: other batches after restarting the epoch", g_n);
  } else {
    cr_assert_eq(loader_run(c), LOOM_OK, "after the fault: %s", loom_last_error());
    cr_assert_eq(c->sum, g_loader_sum);
  }
}

static void loader_teardown(void *ctx) {
  loader_ctx *c = ctx;
  loom_loader_free(c->l);
  loom_dataset_release(c->ds);
  free(c);
}

Test(fault_sweep, loader_start_and_first_batches, .timeout = 300) {
  require_faults();
  loader_ctx *c = loader_setup();
  cr_assert_eq(loader_run(c), LOOM_OK, "%s", loom_last_error());
  g_loader_sum = c->sum;
  loader_teardown(c);
  run_sweep(&(sweep){"loader_start_3_batches", loader_setup, loader_run, loader_after, loader_teardown});
  tk_leak_check();
}

/* ---- profiler trace, metrics / TensorBoard writer ---------------------------------- */

static void *dir_setup(void) { return calloc(1, sizeof(files)); }
static void dir_teardown(void *ctx) { free(ctx); }

static loom_status prof_run(void *ctx) {
  (void)ctx;
  loom_profiler_options o;
  loom_profiler_options_init(&o);
  o.trace_path = g_path;
  o.device_timing = LOOM_PROFILER_DEVICE_TIME_ALL;
  loom_status st = loom_profiler_start(&o);
  if (st != LOOM_OK) return st;
  loom_scope_begin();
  int64_t sh[2] = {16, 16};
  loom_tensor *a = loom_full(2, sh, 0.5, LOOM_F32, loom_cpu());
  loom_tensor *r = loom_relu(loom_matmul(a, a));
  if (!r) st = loom_last_status();
  loom_profiler_step();
  loom_scope_end();
  loom_status s2 = loom_profiler_stop();
  return st != LOOM_OK ? st : s2;
}

static void prof_after(void *ctx, loom_status st, bool hit) {
  cr_assert(!loom_profiler_is_running(), "fault at call %ld: the profiler is still running", g_n);
  cr_assert_eq(prof_run(ctx), LOOM_OK, "after the fault: %s", loom_last_error());
  struct stat sb;
  cr_assert(stat(g_path, &sb) == 0 && sb.st_size > 100, "no trace after the fault");
  char *sum = loom_profiler_summary(5);
  cr_assert_not_null(sum, "%s", loom_last_error());
  loom_free(sum);
}

Test(fault_sweep, profiler_trace) {
  require_faults();
  tk_tmpdir(g_dir, sizeof g_dir, "loom-fault");
  snprintf(g_path, sizeof g_path, "%s/trace.json", g_dir);
  run_sweep(&(sweep){"profiler_trace", dir_setup, prof_run, prof_after, dir_teardown});
  tk_tmpdir_remove(g_dir);
  tk_leak_check();
}

/* A log directory per sweep point: event files are named by second, pid and
 * a counter that stops at 100 per second (lib/io/metrics.c). */
static void *metrics_setup(void) {
  snprintf(g_path, sizeof g_path, "%s/logs%ld", g_dir, g_n);
  return dir_setup();
}

static loom_status metrics_run(void *ctx) {
  (void)ctx;
  loom_metrics *m = loom_metrics_open(g_path, NULL);
  if (!m) return loom_last_status();
  loom_status st = LOOM_OK;
  for (int i = 0; i < 3 && st == LOOM_OK; i++) st = loom_metrics_scalar(m, "train/loss", i, 1.0 / (i + 1));
  if (st == LOOM_OK) st = loom_metrics_flush(m);
  loom_status s2 = loom_metrics_close(m);
  return st != LOOM_OK ? st : s2;
}

static void metrics_after(void *ctx, loom_status st, bool hit) {
  cr_assert_eq(metrics_run(ctx), LOOM_OK, "after the fault: %s", loom_last_error());
  char csv[600];
  snprintf(csv, sizeof csv, "%s/metrics.csv", g_path);
  struct stat sb;
  cr_assert(stat(csv, &sb) == 0 && sb.st_size > 20, "no metrics.csv after the fault");
}

Test(fault_sweep, metrics_tensorboard_writer) {
  require_faults();
  tk_tmpdir(g_dir, sizeof g_dir, "loom-fault");
  run_sweep(&(sweep){"metrics_tensorboard", metrics_setup, metrics_run, metrics_after, dir_teardown});
  /* the logs directories hold event files and metrics.csv */
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  cr_assert_eq(system(cmd), 0);
  tk_leak_check();
}
