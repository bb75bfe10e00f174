/* test_optim_interface.c — the optimizer interface table (optim_internal.h)
 * seen from its generic calls: SGD, AdamW and the offload wrapper go
 * through the same sequence (groups, lr, weight decay, zero_grad, steps,
 * checkpoint state) and each answers as its kind should, the wrapper
 * bit-identically to the AdamW it wraps; and the wrapper and its inner
 * optimizer agree after every call that changes either, a checkpoint
 * round-trip included. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "optim/optim_internal.h"
#include "optim/optim_state.h"
#include "support/testkit.h"

typedef struct kind {
  const char *name;
  loom_optimizer *(*make)(loom_tensor *const *params, int n);
  const char *type;                 /* checkpoints' optim.type */
  int nstate;                       /* state tensors per parameter */
  const char *state[2];
  double default_wd;                /* what a group without weight_decay gets */
} kind;

static loom_optimizer *make_sgd(loom_tensor *const *p, int n) {
  loom_sgd_options o;
  loom_sgd_options_init(&o);
  o.lr = 0.1, o.momentum = 0.9, o.weight_decay = 0.01;
  return loom_sgd_new(p, n, &o);
}
static loom_adamw_options adamw_opts(void) {
  loom_adamw_options o;
  loom_adamw_options_init(&o);
  o.lr = 0.01, o.weight_decay = 0.02;
  return o;
}
static loom_optimizer *make_adamw(loom_tensor *const *p, int n) {
  loom_adamw_options o = adamw_opts();
  return loom_adamw_new(p, n, &o);
}
static loom_optimizer *make_offload(loom_tensor *const *p, int n) {
  loom_adamw_options o = adamw_opts();
  return loom_adamw_offload_new(p, n, &o);
}

static const kind kinds[] = {
    {"sgd", make_sgd, "sgd", 1, {"momentum_buffer", NULL}, 0.01},
    {"adamw", make_adamw, "adamw", 2, {"exp_avg", "exp_avg_sq"}, 0.02},
    {"adamw offload", make_offload, "adamw", 2, {"exp_avg", "exp_avg_sq"}, 0.02},
};

static bool same_bits(loom_tensor *a, loom_tensor *b) {
  if (!a || !b) return a == b;
  int64_t n = loom_tensor_numel(a);
  return n == loom_tensor_numel(b) && !memcmp(loom_tensor_data(a), loom_tensor_data(b), (size_t)n * sizeof(float));
}

/* Three parameters of different shapes with fixed values. */
static void make_params(loom_tensor **p) {
  static const int64_t shapes[3][2] = {{4, 3}, {3, 1}, {5, 1}};
  static const int nd[3] = {2, 1, 1};
  for (int i = 0; i < 3; i++) {
    int64_t n = shapes[i][0] * shapes[i][1];
    float v[12];
    for (int64_t j = 0; j < n; j++) v[j] = (float)(0.25 * (double)(i + 1) - 0.1 * (double)j);
    p[i] = loom_from_host(v, nd[i], shapes[i], LOOM_F32, loom_cpu());
    cr_assert_not_null(p[i]);
    loom_set_requires_grad(p[i], true);
  }
}

/* Gradients d(sum(p * (k + j)))/dp for every parameter. */
static void backward_all(loom_tensor **p, int n, int k) {
  loom_scope_begin();
  for (int i = 0; i < n; i++) {
    int64_t m = loom_tensor_numel(p[i]);
    float c[12];
    for (int64_t j = 0; j < m; j++) c[j] = (float)(0.5 * (double)(k + i) + 0.125 * (double)j - 0.3);
    loom_tensor *ct = loom_from_host(c, loom_tensor_ndim(p[i]), loom_tensor_shape(p[i]), LOOM_F32, loom_cpu());
    cr_assert_eq(loom_backward(loom_sum_all(loom_mul(p[i], ct))), LOOM_OK, "%s", loom_last_error());
  }
  loom_scope_end();
}

/* The same sequence of generic calls on every kind. */
static void drive(const kind *k, loom_tensor **p, loom_optimizer **out) {
  loom_optimizer *o = k->make(p, 2);
  cr_assert_not_null(o, "%s: %s", k->name, loom_last_error());
  cr_assert_eq(loom_optimizer_num_groups(o), 1);
  loom_param_group_options go;
  loom_param_group_options_init(&go);
  go.lr = 0.02;
  cr_assert_eq(loom_optimizer_add_param_group(o, &p[2], 1, &go), LOOM_OK, "%s: %s", k->name, loom_last_error());
  cr_assert_eq(loom_optimizer_num_groups(o), 2);
  cr_assert_eq(loom_optimizer_group_num_params(o, 1), 1);
  cr_assert_eq(loom_optimizer_get_group_weight_decay(o, 1), k->default_wd, "%s", k->name);
  cr_assert_eq(loom_optimizer_get_group_weight_decay(o, 0), k->default_wd, "%s", k->name);
  tk_assert_error(loom_optimizer_add_param_group(o, &p[0], 1, NULL), LOOM_ERR_INVALID_ARG, "already in the optimizer");
  loom_optimizer_set_lr(o, 0.05);
  cr_assert_eq(loom_optimizer_get_lr(o), 0.05);
  cr_assert_eq(loom_optimizer_get_group_lr(o, 1), 0.05);
  cr_assert_eq(loom_optimizer_set_group_lr(o, 1, 0.03), LOOM_OK);
  cr_assert_eq(loom_optimizer_set_group_weight_decay(o, 1, 0.2), LOOM_OK);
  tk_assert_error(loom_optimizer_set_group_lr(o, 2, 0.1), LOOM_ERR_INVALID_ARG, "group 2 does not exist");

  backward_all(p, 3, 0);
  cr_assert_eq(loom_optimizer_zero_grad(o), LOOM_OK);
  for (int i = 0; i < 3; i++) cr_assert_null(loom_grad(p[i]), "%s: zero_grad left parameter %d's gradient", k->name, i);
  for (int s = 0; s < 3; s++) {
    cr_assert_eq(loom_optimizer_zero_grad(o), LOOM_OK);
    backward_all(p, s == 0 ? 2 : 3, s);  /* parameter 2 joins at the second step */
    cr_assert_eq(loom_optimizer_step(o), LOOM_OK, "%s: %s", k->name, loom_last_error());
  }
  cr_assert_eq(loom_optimizer_steps(o), 3);

  /* What checkpoints read goes through the table too. */
  cr_assert_eq(loom_optim_num_params(o), 3);
  cr_assert_eq(loom_optim_param_steps(o, 0), 3);
  cr_assert_eq(loom_optim_param_steps(o, 2), 2);
  for (int i = 0; i < 3; i++) {
    const char *names[LOOM_OPTIM_MAX_SLOTS];
    loom_tensor *ts[LOOM_OPTIM_MAX_SLOTS];
    cr_assert_eq(loom_optim_param_state(o, i, names, ts), k->nstate, "%s", k->name);
    for (int j = 0; j < k->nstate; j++) {
      cr_assert_str_eq(names[j], k->state[j]);
      cr_assert_not_null(ts[j]);
      cr_assert_eq(loom_tensor_numel(ts[j]), loom_tensor_numel(p[i]));
    }
  }
  loom_optim_hparam hp[32];
  int nh = loom_optim_hparams(o, hp, 32);
  cr_assert(nh > 3 && nh <= 32);
  cr_assert_str_eq(hp[0].key, "type");
  cr_assert_str_eq(hp[0].value, k->type);
  *out = o;
}

Test(optim_interface, every_kind_answers_the_generic_calls) {
  loom_tensor *ref[3], *refstate[3][2];
  loom_optimizer *adamw = NULL;
  for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++) {
    const kind *k = &kinds[ki];
    loom_tensor *p[3];
    make_params(p);
    loom_optimizer *o;
    drive(k, p, &o);
    if (!strcmp(k->name, "adamw")) {
      adamw = o;
      for (int i = 0; i < 3; i++) {
        ref[i] = p[i];
        const char *names[2];
        loom_optim_param_state(o, i, names, refstate[i]);
      }
      continue;
    }
    if (!strcmp(k->name, "adamw offload")) {
      /* The wrapper is interchangeable with the AdamW it wraps, bit for bit. */
      for (int i = 0; i < 3; i++) {
        cr_assert(same_bits(p[i], ref[i]), "offload: parameter %d differs from AdamW's", i);
        const char *names[2];
        loom_tensor *st[2];
        loom_optim_param_state(o, i, names, st);
        for (int j = 0; j < 2; j++) cr_assert(same_bits(st[j], refstate[i][j]), "offload: %s of %d", names[j], i);
        cr_assert_null(o->buf1[i], "offload: no state beside the device parameters");
      }
    }
    loom_optimizer_free(o);
    for (int i = 0; i < 3; i++) loom_tensor_release(p[i]);
  }
  loom_optimizer_free(adamw);
  for (int i = 0; i < 3; i++) loom_tensor_release(ref[i]);
  tk_leak_check();
}

/* ---- the offload wrapper and its inner optimizer ---------------------------------- */

/* Everything the wrapper's header says, the inner optimizer says too; the
 * inner's parameters are host copies holding the device parameters' values. */
static void assert_agree(loom_optimizer *w, const char *when) {
  loom_optimizer *in = loom_optim_offload_inner(w);
  cr_assert_not_null(in, "%s: no inner optimizer", when);
  cr_assert_eq(in->n, w->n, "%s: parameters", when);
  cr_assert_eq(loom_optimizer_num_groups(in), loom_optimizer_num_groups(w), "%s: groups", when);
  for (int g = 0; g < w->n_groups; g++) {
    cr_assert_eq(loom_optimizer_group_num_params(in, g), loom_optimizer_group_num_params(w, g), "%s: group %d", when, g);
    cr_assert_eq(loom_optimizer_get_group_lr(in, g), loom_optimizer_get_group_lr(w, g), "%s: group %d lr", when, g);
    cr_assert_eq(loom_optimizer_get_group_weight_decay(in, g), loom_optimizer_get_group_weight_decay(w, g),
                 "%s: group %d weight decay", when, g);
  }
  cr_assert_eq(loom_optimizer_get_lr(in), loom_optimizer_get_lr(w), "%s: lr", when);
  cr_assert_eq(loom_optimizer_steps(in), loom_optimizer_steps(w), "%s: steps", when);
  for (int i = 0; i < w->n; i++) {
    cr_assert_eq(loom_optim_param_steps(in, i), loom_optim_param_steps(w, i), "%s: count of parameter %d", when, i);
    cr_assert_neq(in->params[i], w->params[i], "%s: the inner steps host copies", when);
    cr_assert(same_bits(in->params[i], w->params[i]), "%s: host copy %d differs from the parameter", when, i);
  }
  loom_optim_hparam a[32], b[32];
  int na = loom_optim_hparams(w, a, 32), nb = loom_optim_hparams(in, b, 32);
  cr_assert_eq(na, nb, "%s: hyper-parameters", when);
  for (int j = 0; j < na; j++) {
    cr_assert_str_eq(a[j].key, b[j].key, "%s", when);
    cr_assert_str_eq(a[j].value, b[j].value, "%s: %s", when, a[j].key);
  }
}

static loom_tensor *mlp_loss(loom_module *m, int k) {
  int64_t xs[2] = {5, 6};
  float xv[30];
  for (int j = 0; j < 30; j++) xv[j] = (float)(0.1 * (double)((j * 7 + k) % 11) - 0.5);
  loom_tensor *x = loom_from_host(xv, 2, xs, LOOM_F32, loom_cpu());
  return loom_sum_all(loom_mul(loom_module_forward(m, x), loom_module_forward(m, x)));
}

/* A model and its wrapper: group 0 the first np - 1 parameters, group 1 the
 * last one (added later). */
static loom_optimizer *offload_for(loom_module *m) {
  int np = loom_module_num_params(m);
  loom_tensor *ps[8];
  for (int i = 0; i < np; i++) ps[i] = loom_module_param(m, i);
  loom_adamw_options ao = adamw_opts();
  loom_optimizer *w = loom_adamw_offload_new(ps, np - 1, &ao);
  cr_assert_not_null(w, "%s", loom_last_error());
  loom_param_group_options go;
  loom_param_group_options_init(&go);
  go.weight_decay = 0.0;
  cr_assert_eq(loom_optimizer_add_param_group(w, &ps[np - 1], 1, &go), LOOM_OK, "%s", loom_last_error());
  return w;
}

static void train_step(loom_module *m, loom_optimizer *w, int k) {
  loom_scope_begin();
  cr_assert_eq(loom_optimizer_zero_grad(w), LOOM_OK);
  cr_assert_eq(loom_backward(mlp_loss(m, k)), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_optimizer_step(w), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
}

Test(optim_interface, offload_wrapper_and_inner_agree) {
  int64_t hidden[1] = {8};
  loom_manual_seed(3);
  loom_module *m = loom_mlp_new(6, 1, hidden, 3, loom_cpu());
  cr_assert_not_null(m);
  int np = loom_module_num_params(m);
  loom_optimizer *w = offload_for(m);
  assert_agree(w, "after creation");

  loom_optimizer_set_lr(w, 3e-3);
  assert_agree(w, "after set_lr");
  cr_assert_eq(loom_optimizer_set_group_lr(w, 1, 1e-3), LOOM_OK);
  cr_assert_eq(loom_optimizer_set_group_weight_decay(w, 1, 0.07), LOOM_OK);
  cr_assert_eq(loom_optimizer_set_group_weight_decay(w, 0, 0.03), LOOM_OK);
  assert_agree(w, "after the group setters");

  for (int k = 0; k < 2; k++) train_step(m, w, k);
  assert_agree(w, "after two steps");
  cr_assert_eq(loom_optimizer_steps(w), 2);
  loom_optimizer *in = loom_optim_offload_inner(w);
  cr_assert_eq(loom_optimizer_zero_grad(w), LOOM_OK);
  for (int i = 0; i < np; i++) {
    cr_assert_null(loom_grad(loom_module_param(m, i)), "zero_grad: device gradient %d", i);
    cr_assert_null(loom_grad(in->params[i]), "zero_grad: host gradient %d", i);
  }

  /* State round trip: a fresh model and wrapper restored from a checkpoint
   * agree with their inner and with the original, and step on identically. */
  char dir[256], path[300];
  tk_tmpdir(dir, sizeof dir, "loom-optif");
  snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
  loom_train_state st = {.struct_size = sizeof st, .model = m, .optimizer = w};
  cr_assert_eq(loom_checkpoint_save(path, &st), LOOM_OK, "%s", loom_last_error());
  loom_manual_seed(99);
  loom_module *m2 = loom_mlp_new(6, 1, hidden, 3, loom_cpu());
  loom_optimizer *w2 = offload_for(m2);
  loom_train_state st2 = {.struct_size = sizeof st2, .model = m2, .optimizer = w2};
  cr_assert_eq(loom_checkpoint_restore(path, &st2), LOOM_OK, "%s", loom_last_error());
  assert_agree(w2, "after restore");
  cr_assert_eq(loom_optimizer_steps(w2), 2);
  cr_assert_eq(loom_optimizer_get_group_lr(w2, 1), 1e-3);
  cr_assert_eq(loom_optimizer_get_group_weight_decay(w2, 1), 0.07);
  for (int i = 0; i < np; i++) {
    const char *na[2], *nb[2];
    loom_tensor *sa[2], *sb[2];
    cr_assert_eq(loom_optim_param_state(w, i, na, sa), 2);
    cr_assert_eq(loom_optim_param_state(w2, i, nb, sb), 2);
    for (int j = 0; j < 2; j++) cr_assert(same_bits(sa[j], sb[j]), "restored %s of parameter %d", na[j], i);
  }
  for (int k = 2; k < 4; k++) {
    train_step(m, w, k);
    train_step(m2, w2, k);
  }
  assert_agree(w2, "after stepping on from the restore");
  for (int i = 0; i < np; i++)
    cr_assert(same_bits(loom_module_param(m, i), loom_module_param(m2, i)), "parameter %d after the resumed steps", i);

  cr_assert_null(loom_optim_offload_inner(in), "an AdamW has no inner optimizer");
  tk_tmpdir_remove(dir);
  loom_optimizer_free(w2);
  loom_module_free(m2);
  loom_optimizer_free(w);
  loom_module_free(m);
  tk_leak_check();
}
