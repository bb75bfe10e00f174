/* test_checkpoint.c — training checkpoints (lib/io/checkpoint.c):
 *  - what a checkpoint holds, under which names;
 *  - restore checks everything first: a mismatching checkpoint changes
 *    nothing and says what differs;
 *  - resume is exact across a real process restart: N steps straight equals
 *    K steps, exit, a new process that restores and trains N-K more — the
 *    two final checkpoints are byte-identical (parameters, optimizer state,
 *    scaler, loader position, RNG, step);
 *  - kill -9: a child saving in a loop is killed at random moments, 50+
 *    times; the checkpoint on disk always restores and is self-consistent.
 * The child processes are this test binary re-executed with
 * LOOM_TEST_CKPT_CHILD set: a constructor runs them before Criterion starts. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nn/module_internal.h"
#include "support/testkit.h"

/* ---- a small, complete training setup ------------------------------------------- */

#define NSAMP 200
#define NFEAT 12
#define NCLS 4

typedef struct trainer {
  loom_dataset *ds;
  loom_loader *loader;
  loom_module *model;
  loom_optimizer *opt;
  loom_grad_scaler *scaler;
  loom_lr_schedule sched;
  loom_train_state st;
  int hidden;
} trainer;

typedef struct config {
  int sgd;       /* SGD with momentum instead of AdamW */
  int mixed;     /* mixed fp16 with the dynamic loss scaler */
  int hidden;
} config;

static void make_data(float *x, int64_t *y) {
  uint64_t s = 12345;
  for (int i = 0; i < NSAMP; i++) {
    y[i] = i % NCLS;
    for (int j = 0; j < NFEAT; j++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      x[i * NFEAT + j] = (float)((double)(s >> 40) / (double)(1 << 24) - 0.5) + (j % NCLS == y[i] ? 1.0f : 0.0f);
    }
  }
}

static int trainer_init(trainer *t, config c) {
  static float x[NSAMP * NFEAT];
  static int64_t y[NSAMP];
  memset(t, 0, sizeof *t);
  make_data(x, y);
  loom_set_num_threads(2);
  loom_manual_seed(99);
  int64_t fs[1] = {NFEAT};
  t->ds = loom_dataset_memory(x, LOOM_F32, 1, fs, y, LOOM_I64, NSAMP, true);
  loom_loader_options lo;
  loom_loader_options_init(&lo);
  lo.batch_size = 32;  /* 200 = 6 full batches + 8: a short last batch */
  lo.shuffle = true;
  lo.seed = 5;
  lo.workers = 2;
  t->loader = loom_loader_new(t->ds, &lo);
  int64_t hidden[1] = {c.hidden};
  t->hidden = c.hidden;
  t->model = loom_mlp_new(NFEAT, 1, hidden, NCLS, loom_cpu());
  if (!t->ds || !t->loader || !t->model) return 0;
  if (c.mixed && loom_module_set_precision(t->model, LOOM_PRECISION_MIXED_FP16, true) != LOOM_OK) return 0;
  int np = loom_module_num_params(t->model);
  loom_tensor *params[8];
  for (int i = 0; i < np; i++) params[i] = loom_module_param(t->model, i);
  if (c.sgd) {
    loom_sgd_options so;
    loom_sgd_options_init(&so);
    so.lr = 0.05;
    so.momentum = 0.9;
    so.weight_decay = 1e-4;
    t->opt = loom_sgd_new(params, np, &so);
  } else {
    t->opt = loom_adamw_new(params, np, NULL);
  }
  loom_scaler_options sco;
  loom_scaler_options_init(&sco);
  sco.enabled = c.mixed;
  sco.growth_interval = 4;  /* let the scale move within a short run */
  sco.init_scale = 1 << 20;
  t->scaler = loom_scaler_new(&sco);
  t->sched = loom_lr_cosine(c.sgd ? 0.05 : 3e-3, 5, 40, 1e-4);
  t->st = (loom_train_state){.struct_size = sizeof t->st, .model = t->model, .optimizer = t->opt, .scaler = t->scaler,
                             .loader = t->loader, .schedule = &t->sched, .step = 0};
  return t->opt && t->scaler;
}

/* Train until st.step == until. Each step draws input noise from loom's
 * generator, so the RNG state is part of what must resume. */
static int train_until(trainer *t, int64_t until) {
  while (t->st.step < until) {
    loom_scope_begin();
    loom_tensor *x, *y;
    if (loom_loader_next(t->loader, &x, &y) != LOOM_OK) return 0;
    if (!x) {
      loom_scope_end();
      continue;  /* end of an epoch: the next call starts the following one */
    }
    x = loom_add(x, loom_mul_scalar(loom_randn(2, loom_tensor_shape(x), LOOM_F32, loom_cpu()), 0.05));
    loom_optimizer_set_lr(t->opt, loom_lr_at(&t->sched, t->st.step));
    loom_tensor *loss = loom_cross_entropy(loom_module_forward(t->model, x), y);
    loom_optimizer_zero_grad(t->opt);
    if (loom_backward(loom_scaler_scale(t->scaler, loss)) != LOOM_OK) return 0;
    if (loom_scaler_step(t->scaler, t->opt, NULL) != LOOM_OK) return 0;
    t->st.step++;
    loom_scope_end();
  }
  return 1;
}

static void trainer_free(trainer *t) {
  loom_scaler_free(t->scaler);
  loom_optimizer_free(t->opt);
  loom_module_free(t->model);
  loom_loader_free(t->loader);
  loom_dataset_release(t->ds);
}

/* ---- child processes ---------------------------------------------------------------- */

/* LOOM_TEST_CKPT_CHILD="train MODE SGD MIXED STEPS PATH" or "saver FD PATH". */
static int child_train(const char *spec) {
  char mode[16], path[512];
  int sgd, mixed;
  long long steps;
  if (sscanf(spec, "train %15s %d %d %lld %511s", mode, &sgd, &mixed, &steps, path) != 5) return 2;
  trainer t;
  if (!trainer_init(&t, (config){sgd, mixed, 24})) return 3;
  if (!strcmp(mode, "resume") && loom_checkpoint_restore(path, &t.st) != LOOM_OK) {
    fprintf(stderr, "child: restore: %s\n", loom_last_error());
    return 4;
  }
  if (!train_until(&t, steps)) {
    fprintf(stderr, "child: training: %s\n", loom_last_error());
    return 5;
  }
  if (loom_checkpoint_save(path, &t.st) != LOOM_OK) {
    fprintf(stderr, "child: save: %s\n", loom_last_error());
    return 6;
  }
  trainer_free(&t);
  return 0;
}

/* Saves forever: every parameter and optimizer moment holds the step number,
 * so a checkpoint mixing two saves would show. Resumes from the file if any.
 * Writes one byte to fd after its first save. */
static int child_saver(const char *spec) {
  int fd;
  char path[512];
  if (sscanf(spec, "saver %d %511s", &fd, path) != 2) return 2;
  trainer t;
  if (!trainer_init(&t, (config){0, 0, 256})) return 3;
  if (access(path, F_OK) == 0 && loom_checkpoint_restore(path, &t.st) != LOOM_OK) return 4;
  for (int64_t k = 0;; k++) {
    t.st.step++;
    for (int i = 0; i < loom_module_num_params(t.model); i++) loom_fill_(loom_module_param(t.model, i), (double)t.st.step);
    if (loom_checkpoint_save(path, &t.st) != LOOM_OK) return 5;
    if (k == 0 && write(fd, "s", 1) != 1) return 6;
  }
}

__attribute__((constructor)) static void ckpt_child_main(void) {
  const char *spec = getenv("LOOM_TEST_CKPT_CHILD");
  if (!spec) return;
  int rc = !strncmp(spec, "train", 5) ? child_train(spec) : !strncmp(spec, "saver", 5) ? child_saver(spec) : 2;
  fflush(stderr);
  _exit(rc);
}

/* Start this binary as a child with spec; returns its pid. posix_spawn,
 * not fork + setenv: the loader's threads run in this process, and only
 * async-signal-safe calls are allowed between fork and exec. */
extern char **environ;
static pid_t spawn(const char *spec) {
  int n = 0;
  while (environ[n]) n++;
  char **envp = calloc((size_t)n + 2, sizeof *envp);
  char *var = malloc(strlen(spec) + 32);
  sprintf(var, "LOOM_TEST_CKPT_CHILD=%s", spec);
  int k = 0;
  for (int i = 0; i < n; i++)
    if (strncmp(environ[i], "LOOM_TEST_CKPT_CHILD=", 21)) envp[k++] = environ[i];
  envp[k++] = var;
  envp[k] = NULL;
  char *argv[] = {"test_checkpoint", NULL};
  pid_t pid;
  int rc = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, envp);
  free(var);
  free(envp);
  cr_assert_eq(rc, 0, "posix_spawn: %s", strerror(rc));
  return pid;
}

static int run_child(const char *spec) {
  int status = 0;
  pid_t pid = spawn(spec);
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- files ---------------------------------------------------------------------------- */

static char g_dir[256];

static void make_dir(void) { tk_tmpdir(g_dir, sizeof g_dir, "loom-ckpt"); }

static void remove_dir(void) { tk_tmpdir_remove(g_dir); }

static const char *path_in(const char *name) {
  static char p[2][512];
  static int k;
  k ^= 1;
  snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
  return p[k];
}

static unsigned char *slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  cr_assert_not_null(f, "cannot read %s", p);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  cr_assert_eq(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

/* ---- what a checkpoint holds ------------------------------------------------------------- */

Test(checkpoint, names_and_metadata_are_readable) {
  make_dir();
  trainer t;
  cr_assert(trainer_init(&t, (config){0, 0, 16}), "%s", loom_last_error());
  cr_assert(train_until(&t, 9), "%s", loom_last_error());
  const char *p = path_in("c.safetensors");
  cr_assert_eq(loom_checkpoint_save(p, &t.st), LOOM_OK, "%s", loom_last_error());
  loom_safetensors *f = loom_safetensors_open(p);
  cr_assert_not_null(f, "%s", loom_last_error());
  const char *want[] = {"model.0.weight", "model.0.bias", "model.1.weight", "model.1.bias",
                        "optim.0.weight.exp_avg", "optim.0.weight.exp_avg_sq", "optim.0.weight.step",
                        "optim.1.bias.exp_avg_sq", "optim.1.bias.step"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    cr_assert_geq(loom_safetensors_find(f, want[i]), 0, "no '%s' in the checkpoint", want[i]);
  cr_assert_eq(loom_safetensors_num_tensors(f), 4 + 4 * 3);
  cr_assert_str_eq(loom_safetensors_metadata(f, "loom.checkpoint"), "1");
  cr_assert_str_eq(loom_safetensors_metadata(f, "step"), "9");
  cr_assert_str_eq(loom_safetensors_metadata(f, "optim.type"), "adamw");
  cr_assert_str_eq(loom_safetensors_metadata(f, "optim.steps"), "9");
  cr_assert_str_eq(loom_safetensors_metadata(f, "optim.beta2"), "0.999");
  cr_assert_str_eq(loom_safetensors_metadata(f, "loader.epoch"), "1");
  cr_assert_str_eq(loom_safetensors_metadata(f, "loader.batch"), "2");  /* 7 batches in epoch 0, then 2 */
  cr_assert_str_eq(loom_safetensors_metadata(f, "loader.batch_size"), "32");
  cr_assert_str_eq(loom_safetensors_metadata(f, "schedule.kind"), "cosine");
  cr_assert_str_eq(loom_safetensors_metadata(f, "scaler.steps"), "9");
  cr_assert_not_null(loom_safetensors_metadata(f, "rng.offset"));
  /* The parameter itself, bit for bit, and its update count. */
  loom_scope_begin();
  loom_tensor *w = loom_safetensors_get(f, "model.0.weight", loom_cpu());
  loom_tensor *live = loom_module_param(t.model, 0);
  cr_assert_eq(memcmp(loom_tensor_data(w), loom_tensor_data(live), (size_t)loom_tensor_numel(live) * 4), 0);
  double steps;
  cr_assert_eq(loom_item(loom_safetensors_get(f, "optim.0.weight.step", loom_cpu()), &steps), LOOM_OK);
  cr_assert_eq(steps, 9.0);
  loom_scope_end();
  loom_safetensors_close(f);
  trainer_free(&t);
  remove_dir();
  tk_leak_check();
}

/* The schedule is recorded, not restored: resuming under another one (a
 * changed --epochs) restores fine and logs a warning naming what changed;
 * the same schedule logs nothing. */
static char g_warned[1024];
static void warn_sink(loom_log_level level, const char *msg, void *user) {
  (void)user;
  if (level == LOOM_LOG_WARN) snprintf(g_warned, sizeof g_warned, "%s", msg);
}

Test(checkpoint, another_schedule_at_restore_is_a_warning) {
  make_dir();
  trainer a, b;
  cr_assert(trainer_init(&a, (config){0, 0, 16}));
  cr_assert(train_until(&a, 5), "%s", loom_last_error());
  const char *p = path_in("s.safetensors");
  cr_assert_eq(loom_checkpoint_save(p, &a.st), LOOM_OK, "%s", loom_last_error());
  cr_assert(trainer_init(&b, (config){0, 0, 16}));
  loom_log_set_sink(warn_sink, NULL);
  g_warned[0] = 0;
  cr_assert_eq(loom_checkpoint_restore(p, &b.st), LOOM_OK, "%s", loom_last_error());
  cr_assert_str_eq(g_warned, "", "same schedule, yet: %s", g_warned);
  b.sched.total_steps *= 2;
  cr_assert_eq(loom_checkpoint_restore(p, &b.st), LOOM_OK, "%s", loom_last_error());
  loom_log_set_sink(NULL, NULL);
  cr_assert(strstr(g_warned, "another LR schedule") && strstr(g_warned, "total_steps 40 -> 80") &&
                strstr(g_warned, "step 5"),
            "%s", g_warned);
  cr_assert_eq(b.st.step, 5);
  trainer_free(&a);
  trainer_free(&b);
  remove_dir();
  tk_leak_check();
}

/* Fill every parameter and moment of a fresh trainer from another's checkpoint;
 * the two must then agree bit for bit. */
Test(checkpoint, restore_brings_back_every_piece_of_state) {
  make_dir();
  trainer a, b;
  cr_assert(trainer_init(&a, (config){1, 1, 16}));
  cr_assert(train_until(&a, 11), "%s", loom_last_error());
  const char *p = path_in("c.safetensors");
  uint64_t seed_a, off_a;
  loom_rng_get_state(&seed_a, &off_a);
  cr_assert_eq(loom_checkpoint_save(p, &a.st), LOOM_OK, "%s", loom_last_error());
  cr_assert(trainer_init(&b, (config){1, 1, 16}));  /* resets the RNG */
  loom_manual_seed(1);
  cr_assert_eq(loom_checkpoint_restore(p, &b.st), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(b.st.step, 11);
  uint64_t seed_b, off_b;
  loom_rng_get_state(&seed_b, &off_b);
  cr_assert(seed_a == seed_b && off_a == off_b, "RNG state");
  for (int i = 0; i < loom_module_num_params(a.model); i++) {
    loom_tensor *pa = loom_module_param(a.model, i), *pb = loom_module_param(b.model, i);
    cr_assert_eq(memcmp(loom_tensor_data(pa), loom_tensor_data(pb), (size_t)loom_tensor_numel(pa) * 4), 0, "param %d", i);
  }
  cr_assert_eq(loom_optimizer_steps(b.opt), loom_optimizer_steps(a.opt));
  cr_assert_eq(loom_optimizer_get_lr(b.opt), loom_optimizer_get_lr(a.opt));
  cr_assert_eq(loom_scaler_get_scale(b.scaler), loom_scaler_get_scale(a.scaler));
  cr_assert_eq(loom_scaler_steps_skipped(b.scaler), loom_scaler_steps_skipped(a.scaler));
  cr_assert_eq(loom_scaler_good_steps(b.scaler), loom_scaler_good_steps(a.scaler));
  int64_t ea, ba, eb, bb;
  loom_loader_position(a.loader, &ea, &ba);
  loom_loader_position(b.loader, &eb, &bb);
  cr_assert(ea == eb && ba == bb, "loader at (%lld, %lld) vs (%lld, %lld)", (long long)ea, (long long)ba, (long long)eb,
            (long long)bb);
  /* The low-precision copies were refreshed from the restored masters. */
  loom_tensor *la = loom_amp_lowp_copy(loom_module_param(a.model, 0));
  loom_tensor *lb = loom_amp_lowp_copy(loom_module_param(b.model, 0));
  cr_assert(la && lb);
  cr_assert_eq(memcmp(loom_tensor_data(la), loom_tensor_data(lb), (size_t)loom_tensor_numel(la) * 2), 0);
  trainer_free(&a);
  trainer_free(&b);
  remove_dir();
  tk_leak_check();
}

Test(checkpoint, mismatches_change_nothing_and_say_what_differs) {
  make_dir();
  trainer a, b;
  cr_assert(trainer_init(&a, (config){0, 0, 16}));
  cr_assert(train_until(&a, 3));
  const char *p = path_in("c.safetensors");
  cr_assert_eq(loom_checkpoint_save(p, &a.st), LOOM_OK, "%s", loom_last_error());

  /* Another hidden size. */
  cr_assert(trainer_init(&b, (config){0, 0, 20}));
  loom_scope_begin();
  loom_tensor *before = loom_clone(loom_module_param(b.model, 0));
  tk_assert_error(loom_checkpoint_restore(p, &b.st), LOOM_ERR_SHAPE, "model.0.weight", "[16, 12]", "[20, 12]");
  double diff;
  cr_assert_eq(loom_item(loom_sum_all(loom_sub(before, loom_module_param(b.model, 0))), &diff), LOOM_OK);
  cr_assert_eq(diff, 0.0, "a refused restore changed the model");
  cr_assert_eq(b.st.step, 0);
  loom_scope_end();
  trainer_free(&b);

  /* Another optimizer type. */
  cr_assert(trainer_init(&b, (config){1, 0, 16}));
  tk_assert_error(loom_checkpoint_restore(p, &b.st), LOOM_ERR_INVALID_ARG, "adamw", "sgd");
  trainer_free(&b);

  /* Another loader configuration. */
  cr_assert(trainer_init(&b, (config){0, 0, 16}));
  loom_loader_options lo;
  loom_loader_options_init(&lo);
  lo.batch_size = 16;
  loom_loader *other = loom_loader_new(b.ds, &lo);
  b.st.loader = other;
  tk_assert_error(loom_checkpoint_restore(p, &b.st), LOOM_ERR_INVALID_ARG, "batch_size 32", "16");
  loom_loader_free(other);
  b.st.loader = b.loader;

  /* A plain safetensors file is not a training checkpoint. */
  loom_scope_begin();
  const char *name = "x";
  loom_tensor *x = loom_zeros(1, (int64_t[]){2}, LOOM_F32, loom_cpu());
  cr_assert_eq(loom_safetensors_save(path_in("plain.safetensors"), 1, &name, &x, 0, NULL, NULL), LOOM_OK);
  loom_scope_end();
  tk_assert_error(loom_checkpoint_restore(path_in("plain.safetensors"), &b.st), LOOM_ERR_FORMAT,
                  "not a loom training checkpoint");
  tk_assert_error(loom_checkpoint_restore(path_in("absent.safetensors"), &b.st), LOOM_ERR_IO, "cannot open");

  /* A model-only checkpoint cannot restore an optimizer, but restores a model. */
  loom_train_state only = {.struct_size = sizeof only, .model = a.model};
  cr_assert_eq(loom_checkpoint_save(path_in("model.safetensors"), &only), LOOM_OK, "%s", loom_last_error());
  tk_assert_error(loom_checkpoint_restore(path_in("model.safetensors"), &b.st), LOOM_ERR_FORMAT, "optim.type");
  loom_train_state just_model = {.struct_size = sizeof just_model, .model = b.model};
  cr_assert_eq(loom_checkpoint_restore(path_in("model.safetensors"), &just_model), LOOM_OK, "%s", loom_last_error());

  /* Bad arguments. */
  tk_assert_error(loom_checkpoint_restore(p, NULL), LOOM_ERR_INVALID_ARG, "state is NULL");
  loom_train_state no_model = {.struct_size = sizeof no_model};
  tk_assert_error(loom_checkpoint_save(p, &no_model), LOOM_ERR_INVALID_ARG, "model");
  /* An optimizer over a tensor that is not the model's. */
  loom_scope_begin();
  loom_tensor *stray = loom_zeros(1, (int64_t[]){3}, LOOM_F32, loom_cpu());
  loom_optimizer *so = loom_adamw_new(&stray, 1, NULL);
  loom_train_state bad = {.struct_size = sizeof bad, .model = a.model, .optimizer = so};
  tk_assert_error(loom_checkpoint_save(path_in("bad.safetensors"), &bad), LOOM_ERR_INVALID_ARG,
                  "not a parameter of the model");
  loom_optimizer_free(so);
  loom_scope_end();
  trainer_free(&a);
  trainer_free(&b);
  remove_dir();
  tk_leak_check();
}

/* ---- exact resume across a process restart ------------------------------------------- */

static void resume_case(int sgd, int mixed, int k, int n) {
  make_dir();
  char spec[700];
  snprintf(spec, sizeof spec, "train straight %d %d %d %s", sgd, mixed, n, path_in("straight.safetensors"));
  cr_assert_eq(run_child(spec), 0, "straight run failed");
  snprintf(spec, sizeof spec, "train first %d %d %d %s", sgd, mixed, k, path_in("resumed.safetensors"));
  cr_assert_eq(run_child(spec), 0, "first part failed");
  snprintf(spec, sizeof spec, "train resume %d %d %d %s", sgd, mixed, n, path_in("resumed.safetensors"));
  cr_assert_eq(run_child(spec), 0, "resumed part failed");
  size_t na, nb;
  unsigned char *a = slurp(path_in("straight.safetensors"), &na), *b = slurp(path_in("resumed.safetensors"), &nb);
  cr_assert_eq(na, nb, "checkpoint sizes differ");
  size_t first = 0;
  while (first < na && a[first] == b[first]) first++;
  cr_assert_eq(first, na, "the resumed run differs from the straight one at byte %zu of %zu", first, na);
  /* The run really moved: the step and a real position are in it. */
  loom_safetensors *f = loom_safetensors_open(path_in("resumed.safetensors"));
  cr_assert_not_null(f);
  char want[32];
  snprintf(want, sizeof want, "%d", n);
  cr_assert_str_eq(loom_safetensors_metadata(f, "step"), want);
  loom_safetensors_close(f);
  free(a);
  free(b);
  remove_dir();
  tk_leak_check();
}

Test(checkpoint_resume, adamw_fp32_mid_epoch_restart_is_bit_identical) { resume_case(0, 0, 10, 25); }

Test(checkpoint_resume, sgd_fp16_scaler_at_epoch_end_restart_is_bit_identical) {
  resume_case(1, 1, 7, 23);
}

/* ---- kill -9 at random moments ---------------------------------------------------------- */

Test(checkpoint_kill, last_good_checkpoint_always_loads) {
  make_dir();
  const char *p = path_in("ckpt.safetensors");
  trainer t;
  cr_assert(trainer_init(&t, (config){0, 0, 256}));
  srand((unsigned)time(NULL));
  int64_t last = 0;
  int kills = 0;
  for (int round = 0; round < 60; round++) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    char spec[700];
    snprintf(spec, sizeof spec, "saver %d %s", fds[1], p);
    pid_t pid = spawn(spec);
    close(fds[1]);
    char c;
    ssize_t r = read(fds[0], &c, 1);  /* the child has saved once */
    close(fds[0]);
    cr_assert_eq(r, 1, "round %d: the saver died before saving", round);
    struct timespec ts = {0, (long)(rand() % 15000) * 1000};  /* 0..15 ms into its next saves */
    nanosleep(&ts, NULL);
    cr_assert_eq(kill(pid, SIGKILL), 0);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "round %d: the child exited (status %d)", round, status);
    kills++;
    /* The file on disk restores, and every parameter holds its step number:
     * no save was torn and no two saves were mixed. */
    t.st.step = -1;
    cr_assert_eq(loom_checkpoint_restore(p, &t.st), LOOM_OK, "round %d: %s", round, loom_last_error());
    cr_assert_gt(t.st.step, last, "round %d: step went from %lld to %lld", round, (long long)last, (long long)t.st.step);
    loom_scope_begin();
    for (int i = 0; i < loom_module_num_params(t.model); i++) {
      loom_tensor *w = loom_module_param(t.model, i);
      double lo, hi;
      cr_assert_eq(loom_item(loom_neg(loom_max(loom_neg(w), 0, NULL, false)), &lo), LOOM_OK);
      cr_assert_eq(loom_item(loom_max(w, 0, NULL, false), &hi), LOOM_OK);
      cr_assert(lo == (double)t.st.step && hi == lo, "round %d: param %d spans [%g, %g], step %lld", round, i, lo, hi,
                (long long)t.st.step);
    }
    loom_scope_end();
    last = t.st.step;
  }
  cr_assert_geq(kills, 50);
  /* Kills that landed mid-save left their temporary files behind (the
   * window this test is about); the checkpoint itself was never touched. */
  int temps = 0;
  DIR *d = opendir(g_dir);
  struct dirent *e;
  while ((e = readdir(d))) temps += strstr(e->d_name, ".tmp-") != NULL;
  closedir(d);
  cr_log_info("%d kills, %d left a temporary file", kills, temps);
  cr_assert_geq(temps, 1, "no kill landed inside a save: the test did not exercise the write window");
  trainer_free(&t);
  remove_dir();
  tk_leak_check();
}

/* ---- on a device ------------------------------------------------------------------------- */

/* A model and its optimizer living on dev: the checkpoint holds their bytes
 * (copied out through pinned staging on a GPU) and restores them there. */
DEVICE_TEST(checkpoint_device, save_and_restore_a_model_on_the_device) {
  make_dir();
  int64_t hidden[1] = {8};
  loom_manual_seed(11);
  loom_module *a = loom_mlp_new(5, 1, hidden, 3, dev);
  loom_manual_seed(12);
  loom_module *b = loom_mlp_new(5, 1, hidden, 3, dev);
  cr_assert(a && b, "%s", loom_last_error());
  loom_tensor *pa[4], *pb[4];
  for (int i = 0; i < 4; i++) pa[i] = loom_module_param(a, i), pb[i] = loom_module_param(b, i);
  loom_optimizer *oa = loom_adamw_new(pa, 4, NULL), *ob = loom_adamw_new(pb, 4, NULL);
  int64_t xs[2] = {6, 5}, ys[1] = {6};
  int64_t labels[6] = {0, 1, 2, 0, 1, 2};
  for (int s = 0; s < 3; s++) {
    loom_scope_begin();
    loom_tensor *loss = loom_cross_entropy(loom_module_forward(a, loom_randn(2, xs, LOOM_F32, dev)),
                                           loom_from_host(labels, 1, ys, LOOM_I64, dev));
    loom_optimizer_zero_grad(oa);
    cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_optimizer_step(oa), LOOM_OK, "%s", loom_last_error());
    loom_scope_end();
  }
  loom_train_state sa = {.struct_size = sizeof sa, .model = a, .optimizer = oa, .step = 3};
  loom_train_state sb = {.struct_size = sizeof sb, .model = b, .optimizer = ob};
  const char *p = path_in("dev.safetensors");
  cr_assert_eq(loom_checkpoint_save(p, &sa), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_checkpoint_restore(p, &sb), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(sb.step, 3);
  for (int i = 0; i < 4; i++) {
    double *va = tk_read(pa[i]), *vb = tk_read(pb[i]);
    for (int64_t k = 0; k < loom_tensor_numel(pa[i]); k++) cr_assert_eq(va[k], vb[k], "param %d [%lld]", i, (long long)k);
    free(va), free(vb);
    cr_assert(loom_device_eq(loom_tensor_device(pb[i]), dev));
  }
  /* A GPU load of the same file goes through pinned staging. */
  loom_safetensors *f = loom_safetensors_open(p);
  loom_tensor *w = loom_safetensors_get(f, "optim.0.weight.exp_avg", dev);
  cr_assert_not_null(w, "%s", loom_last_error());
  cr_assert(loom_device_eq(loom_tensor_device(w), dev));
  loom_safetensors_close(f);
  cr_assert_eq(loom_optimizer_steps(ob), 3);
  loom_optimizer_free(oa);
  loom_optimizer_free(ob);
  loom_module_free(a);
  loom_module_free(b);
  remove_dir();
}

/* ---- module buffers ------------------------------------------------------------------- */

/* An MLP with BatchNorm-like buffers: an f32 vector on layer 0 and an i64
 * scalar counter on the root. */
static loom_module *mlp_with_buffers(uint64_t seed, int64_t nmean, float base, int64_t count) {
  int64_t hidden[1] = {6};
  loom_manual_seed(seed);
  loom_module *m = loom_mlp_new(4, 1, hidden, 3, loom_cpu());
  float mean[8];
  for (int i = 0; i < 8; i++) mean[i] = base + 0.25f * (float)i;
  cr_assert(m && nmean <= 8, "%s", loom_last_error());
  cr_assert_eq(loom_module_add_buffer(loom_module_child(m, 0), "running_mean",
                                      loom_from_host(mean, 1, &nmean, LOOM_F32, loom_cpu())), LOOM_OK,
               "%s", loom_last_error());
  cr_assert_eq(loom_module_add_buffer(m, "num_batches_tracked", loom_from_host(&count, 0, NULL, LOOM_I64, loom_cpu())),
               LOOM_OK, "%s", loom_last_error());
  return m;
}

Test(checkpoint, buffers_of_every_dtype_are_saved_and_restored) {
  make_dir();
  loom_module *a = mlp_with_buffers(1, 6, 1.5f, 37), *b = mlp_with_buffers(2, 6, -9.0f, 0);
  const char *p = path_in("buffers.safetensors");
  loom_train_state sa = {.struct_size = sizeof sa, .model = a, .step = 4};
  cr_assert_eq(loom_checkpoint_save(p, &sa), LOOM_OK, "%s", loom_last_error());
  loom_safetensors *f = loom_safetensors_open(p);
  cr_assert_not_null(f, "%s", loom_last_error());
  cr_assert_geq(loom_safetensors_find(f, "model.0.running_mean"), 0);
  int i = loom_safetensors_find(f, "model.num_batches_tracked");
  cr_assert_geq(i, 0);
  cr_assert_str_eq(loom_safetensors_dtype_name(f, i), "I64");
  loom_safetensors_close(f);

  loom_train_state sb = {.struct_size = sizeof sb, .model = b};
  cr_assert_eq(loom_checkpoint_restore(p, &sb), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_module_num_buffers(b), 2);
  for (int k = 0; k < loom_module_num_buffers(a); k++) {
    loom_tensor *ta = loom_module_buffer(a, k), *tb = loom_module_buffer(b, k);
    cr_assert_eq(loom_tensor_dtype(ta), loom_tensor_dtype(tb));
    cr_assert_eq(memcmp(loom_tensor_data(ta), loom_tensor_data(tb),
                        (size_t)loom_tensor_numel(ta) * loom_dtype_size(loom_tensor_dtype(ta))), 0, "buffer %d", k);
  }

  /* A buffer of another shape: refused, named, nothing changed. */
  loom_module *c = mlp_with_buffers(3, 8, 0.0f, 5);
  /* Buffers are depth first: the root's counter, then layer 0's vector. */
  loom_tensor *cmean = loom_module_buffer(c, 1);
  cr_assert_eq(loom_tensor_numel(cmean), 8);
  float before[8];
  memcpy(before, loom_tensor_data(cmean), sizeof before);
  loom_train_state sc = {.struct_size = sizeof sc, .model = c};
  cr_assert_neq(loom_checkpoint_restore(p, &sc), LOOM_OK);
  cr_assert(strstr(loom_last_error(), "model.0.running_mean"), "%s", loom_last_error());
  cr_assert_eq(memcmp(before, loom_tensor_data(cmean), sizeof before), 0);
  loom_module_free(a), loom_module_free(b), loom_module_free(c);
  remove_dir();
  tk_leak_check();
}

/* ---- parameter groups and BatchNorm buffers ---------------------------------------------- */

/* A ResNet-20 (BatchNorm buffers, i64 num_batches_tracked) trained two steps
 * with SGD in two parameter groups of their own lr and weight decay. */
static loom_module *grouped_resnet(uint64_t seed, loom_optimizer **opt, double lr1, double wd1) {
  loom_manual_seed(seed);
  loom_module *m = loom_resnet_new(LOOM_RESNET20, NULL, loom_cpu());
  loom_sgd_options so;
  loom_sgd_options_init(&so);
  so.lr = 0.1, so.momentum = 0.9, so.weight_decay = 5e-4;
  *opt = m ? loom_sgd_new_for_module(m, &so) : NULL;
  if (*opt) {
    loom_optimizer_set_group_lr(*opt, 1, lr1);
    loom_optimizer_set_group_weight_decay(*opt, 1, wd1);
  }
  return m;
}

static void train_resnet_steps(loom_module *m, loom_optimizer *o, int n) {
  int64_t xs[4] = {2, 3, 8, 8}, ys[1] = {2}, labels[2] = {3, 7};
  for (int s = 0; s < n; s++) {
    loom_scope_begin();
    loom_tensor *loss = loom_cross_entropy(loom_module_forward(m, loom_randn(4, xs, LOOM_F32, loom_cpu())),
                                           loom_from_host(labels, 1, ys, LOOM_I64, loom_cpu()));
    loom_optimizer_zero_grad(o);
    cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_optimizer_step(o), LOOM_OK, "%s", loom_last_error());
    loom_scope_end();
  }
}

Test(checkpoint, parameter_groups_and_batchnorm_buffers_round_trip) {
  make_dir();
  loom_optimizer *oa, *ob;
  loom_module *a = grouped_resnet(1, &oa, 0.03, 0.0);
  cr_assert(a && oa, "%s", loom_last_error());
  cr_assert_eq(loom_optimizer_num_groups(oa), 2);
  train_resnet_steps(a, oa, 2);
  loom_optimizer_set_group_lr(oa, 0, 0.07);  /* as a schedule would */
  loom_train_state sa = {.struct_size = sizeof sa, .model = a, .optimizer = oa, .step = 2};
  const char *p = path_in("groups.safetensors");
  cr_assert_eq(loom_checkpoint_save(p, &sa), LOOM_OK, "%s", loom_last_error());

  /* Per-group hyper-parameters are in the metadata, readable by other tools. */
  loom_safetensors *f = loom_safetensors_open(p);
  cr_assert_not_null(f, "%s", loom_last_error());
  cr_assert_str_eq(loom_safetensors_metadata(f, "optim.param_groups"), "2");
  cr_assert_str_eq(loom_safetensors_metadata(f, "optim.param_groups.1.lr"), "0.029999999999999999");
  cr_assert_str_eq(loom_safetensors_metadata(f, "optim.param_groups.1.weight_decay"), "0");
  cr_assert_str_eq(loom_safetensors_metadata(f, "optim.param_groups.0.lr"), "0.070000000000000007");
  cr_assert_geq(loom_safetensors_find(f, "model.bn1.running_mean"), 0);
  cr_assert_geq(loom_safetensors_find(f, "model.bn1.num_batches_tracked"), 0);
  loom_safetensors_close(f);

  /* Restored into a fresh model whose groups have other values. */
  loom_module *b = grouped_resnet(2, &ob, 0.5, 0.25);
  cr_assert(b && ob, "%s", loom_last_error());
  loom_train_state sb = {.struct_size = sizeof sb, .model = b, .optimizer = ob};
  cr_assert_eq(loom_checkpoint_restore(p, &sb), LOOM_OK, "%s", loom_last_error());
  for (int g = 0; g < 2; g++) {
    cr_assert_eq(loom_optimizer_get_group_lr(ob, g), loom_optimizer_get_group_lr(oa, g), "group %d lr", g);
    cr_assert_eq(loom_optimizer_get_group_weight_decay(ob, g), loom_optimizer_get_group_weight_decay(oa, g),
                 "group %d weight decay", g);
  }
  cr_assert_eq(loom_optimizer_get_lr(ob), 0.07);
  cr_assert_gt(loom_module_num_buffers(a), 0);
  for (int i = 0; i < loom_module_num_buffers(a); i++) {
    double *va = tk_read(loom_module_buffer(a, i)), *vb = tk_read(loom_module_buffer(b, i));
    for (int64_t k = 0; k < loom_tensor_numel(loom_module_buffer(a, i)); k++)
      cr_assert_eq(va[k], vb[k], "buffer %d [%lld]", i, (long long)k);
    free(va), free(vb);
  }
  /* Both continue identically. */
  uint64_t seed, off;
  loom_rng_get_state(&seed, &off);
  train_resnet_steps(a, oa, 1);
  loom_rng_set_state(seed, off);
  train_resnet_steps(b, ob, 1);
  for (int i = 0; i < loom_module_num_params(a); i++) {
    double *va = tk_read(loom_module_param(a, i)), *vb = tk_read(loom_module_param(b, i));
    for (int64_t k = 0; k < loom_tensor_numel(loom_module_param(a, i)); k++)
      cr_assert_eq(va[k], vb[k], "param %d [%lld]", i, (long long)k);
    free(va), free(vb);
  }

  /* Other groups: refused with a message, nothing changed. */
  loom_manual_seed(3);
  loom_module *c = loom_resnet_new(LOOM_RESNET20, NULL, loom_cpu());
  int np = loom_module_num_params(c);
  loom_tensor **pc = malloc((size_t)np * sizeof *pc);
  for (int i = 0; i < np; i++) pc[i] = loom_module_param(c, i);
  loom_optimizer *oc = loom_sgd_new(pc, np, NULL);
  double before = loom_optimizer_get_lr(oc);
  double *w0 = tk_read(pc[0]);
  loom_train_state sc = {.struct_size = sizeof sc, .model = c, .optimizer = oc};
  cr_assert_eq(loom_checkpoint_restore(p, &sc), LOOM_ERR_INVALID_ARG);
  cr_assert(strstr(loom_last_error(), "2 parameter group(s) but this one has 1"), "%s", loom_last_error());
  cr_assert_eq(loom_optimizer_get_lr(oc), before);
  double *w1 = tk_read(pc[0]);
  cr_assert_eq(memcmp(w0, w1, sizeof(double) * (size_t)loom_tensor_numel(pc[0])), 0);
  free(w0), free(w1), free(pc);

  loom_optimizer_free(oa), loom_optimizer_free(ob), loom_optimizer_free(oc);
  loom_module_free(a), loom_module_free(b), loom_module_free(c);
  remove_dir();
  tk_leak_check();
}
