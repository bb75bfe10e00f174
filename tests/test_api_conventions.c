/* test_api_conventions.c — the public API's one way of doing each thing
 * (docs/design.md §11):
 *  - every struct that crosses the API by pointer starts with
 *    size_t struct_size, and every entry point taking one applies the same
 *    rule: 0 or more than the library's sizeof is LOOM_ERR_INVALID_ARG
 *    naming the struct and the size expected; a smaller size is an older
 *    caller, whose struct is copied over the defaults going in (the bytes
 *    past its size are never read) and filled only as far as it goes coming
 *    out. The tables below list every such entry point; the last test reads
 *    the public headers and fails when a struct starting with struct_size is
 *    missing from them, when an options struct has no loom_X_options_init,
 *    or when the old idioms (a `size` field, by-value defaults functions)
 *    come back;
 *  - loom_free gives back memory loom hands over;
 *  - LOOM_API under each build define (export.h). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "support/testkit.h"

#define POISON 0xA5

/* ---- what the entry points work on ------------------------------------------ */

static char g_dir[256];
static loom_module *g_model;      /* an MLP 4 -> 8 -> 2 */
static loom_optimizer *g_opt;     /* SGD over g_model */
static loom_comm *g_comm;         /* a world of one */
static loom_module *g_ddp_model;  /* another MLP, under g_ddp */
static loom_ddp *g_ddp;
static loom_dataset *g_ds;        /* 16 samples of 4 floats, labels */
static loom_loader *g_loader;
static loom_grad_scaler *g_scaler;
static char g_ckpt[300];          /* a checkpoint of g_model */

static loom_tensor *leaf(void) {
  int64_t s[1] = {4};
  loom_tensor *p = loom_ones(1, s, LOOM_F32, loom_cpu());
  cr_assert_not_null(p, "%s", loom_last_error());
  cr_assert_eq(loom_set_requires_grad(p, true), LOOM_OK);
  return p;
}

static loom_status ok_or_last(const void *made) { return made ? LOOM_OK : loom_last_status(); }

static void setup(void) {
  tk_tmpdir(g_dir, sizeof g_dir, "loom-api");
  int64_t hidden[1] = {8};
  g_model = loom_mlp_new(4, 1, hidden, 2, loom_cpu());
  cr_assert_not_null(g_model, "%s", loom_last_error());
  g_opt = loom_sgd_new_for_module(g_model, NULL);
  cr_assert_not_null(g_opt, "%s", loom_last_error());
  loom_comm_options co;
  loom_comm_options_init(&co);
  co.init = "single";
  co.set_threads = false;
  cr_assert_eq(loom_comm_init(&co, &g_comm), LOOM_OK, "%s", loom_last_error());
  g_ddp_model = loom_mlp_new(4, 1, hidden, 2, loom_cpu());
  cr_assert_not_null(g_ddp_model, "%s", loom_last_error());
  g_ddp = loom_ddp_new(g_ddp_model, g_comm, NULL);
  cr_assert_not_null(g_ddp, "%s", loom_last_error());
  float x[16 * 4];
  int64_t y[16], xs[1] = {4};
  for (int i = 0; i < 16 * 4; i++) x[i] = (float)i;
  for (int i = 0; i < 16; i++) y[i] = i % 2;
  g_ds = loom_dataset_memory(x, LOOM_F32, 1, xs, y, LOOM_I64, 16, true);
  cr_assert_not_null(g_ds, "%s", loom_last_error());
  g_loader = loom_loader_new(g_ds, NULL);
  cr_assert_not_null(g_loader, "%s", loom_last_error());
  g_scaler = loom_scaler_new(NULL);
  cr_assert_not_null(g_scaler, "%s", loom_last_error());
  snprintf(g_ckpt, sizeof g_ckpt, "%s/ckpt.safetensors", g_dir);
  loom_train_state st = {.struct_size = sizeof st, .model = g_model};
  cr_assert_eq(loom_checkpoint_save(g_ckpt, &st), LOOM_OK, "%s", loom_last_error());
}

static void teardown(void) {
  loom_scaler_free(g_scaler);
  loom_loader_free(g_loader);
  loom_dataset_release(g_ds);
  loom_ddp_free(g_ddp);
  loom_module_free(g_ddp_model);
  loom_comm_free(g_comm);
  loom_optimizer_free(g_opt);
  loom_module_free(g_model);
  tk_tmpdir_remove(g_dir);
}

TestSuite(api, .init = setup, .fini = teardown);

/* ---- structs going in ----------------------------------------------------------- */

typedef struct in_case {
  const char *entry;              /* the entry point, for messages */
  const char *type;               /* the struct */
  size_t size;                    /* its sizeof */
  void (*fill)(void *o);          /* a valid struct: init + what must be set */
  loom_status (*call)(const void *o);
  bool null_ok;                   /* NULL means the defaults */
  /* What an older caller's struct of struct_size = sizeof(size_t) (nothing
   * but the size) gets: NULL: LOOM_OK, all defaults; else a fragment of the
   * error about a required field the defaults cannot supply. */
  const char *oldest_error;
} in_case;

#define FILL(name, type, ...)                    \
  static void fill_##name(void *p) {             \
    type *o = p;                                 \
    __VA_ARGS__;                                 \
    (void)o;                                     \
  }

FILL(alloc, loom_alloc_options, loom_alloc_options_init(o))
FILL(batch_finder, loom_batch_finder_options, loom_batch_finder_options_init(o); o->max = 8)
FILL(metrics, loom_metrics_options, loom_metrics_options_init(o))
FILL(mlp, loom_mlp_options, loom_mlp_options_init(o))
FILL(profiler, loom_profiler_options, loom_profiler_options_init(o))
FILL(sgd, loom_sgd_options, loom_sgd_options_init(o))
FILL(adamw, loom_adamw_options, loom_adamw_options_init(o))
FILL(param_group, loom_param_group_options, loom_param_group_options_init(o))
FILL(conv2d, loom_conv2d_options, loom_conv2d_options_init(o))
FILL(batch_norm, loom_batch_norm_options, loom_batch_norm_options_init(o))
FILL(pool2d, loom_pool2d_options, loom_pool2d_options_init(o, 2, 2))
FILL(resnet, loom_resnet_options, loom_resnet_options_init(o, LOOM_RESNET20))
FILL(gpt, loom_gpt_config, loom_gpt_config_init(o); o->vocab_size = 5; o->block_size = 4; o->n_layer = 1; o->n_head = 2;
     o->n_embd = 4)
FILL(scaler, loom_scaler_options, loom_scaler_options_init(o))
FILL(comm, loom_comm_options, loom_comm_options_init(o); o->init = "single"; o->set_threads = false)
FILL(dist_run, loom_dist_run_options, loom_dist_run_options_init(o); o->comm.set_threads = false)
FILL(ddp, loom_ddp_options, loom_ddp_options_init(o))
FILL(loader, loom_loader_options, loom_loader_options_init(o); o->workers = 0)
FILL(lr_schedule, loom_lr_schedule, *o = loom_lr_constant(0.1))
FILL(scaler_state, loom_scaler_state, o->struct_size = sizeof *o;
     cr_assert_eq(loom_scaler_state_save(g_scaler, o), LOOM_OK, "%s", loom_last_error()))
FILL(train_state, loom_train_state, memset(o, 0, sizeof *o); o->struct_size = sizeof *o; o->model = g_model)
FILL(classifier_probe, loom_classifier_probe, memset(o, 0, sizeof *o); o->struct_size = sizeof *o; o->model = g_model;
     o->opt = g_opt; o->in_features = 4; o->num_classes = 2; o->device = loom_cpu())

static loom_status cb_read(void *user, int64_t i, void *x, void *y) {
  (void)user, (void)y;
  *(float *)x = (float)i;
  return LOOM_OK;
}
FILL(callbacks, loom_dataset_callbacks, memset(o, 0, sizeof *o); o->struct_size = sizeof *o; o->length = 3;
     o->x_dtype = LOOM_F32; o->read = cb_read)

static int fake_is_valid(void *c, const char *n) { (void)c, (void)n; return 0; }
static void *fake_get_pointer(void *c, const char *n) { (void)c, (void)n; return NULL; }
static void fake_err_fetch(void **a, void **b, void **c) { *a = *b = *c = NULL; }
static void fake_err_restore(void *a, void *b, void *c) { (void)a, (void)b, (void)c; }
FILL(pycapsule, loom_pycapsule_api, o->struct_size = sizeof *o; o->is_valid = fake_is_valid;
     o->get_pointer = fake_get_pointer; o->err_fetch = fake_err_fetch; o->err_restore = fake_err_restore)

static loom_status call_alloc_set_config(const void *o) { return loom_alloc_set_config(o); }
static loom_status call_alloc_set_device_config(const void *o) { return loom_alloc_set_device_config(loom_cpu(), o); }
static loom_status call_alloc_options_parse(const void *o) {
  /* In and out: the caller's struct is read and written only as far as it goes. */
  return loom_alloc_options_parse("history:0", (loom_alloc_options *)o);
}
static loom_status probe_fits(void *ctx, int64_t b) { (void)ctx, (void)b; return LOOM_OK; }
static loom_status call_find_batch_size(const void *o) {
  int64_t b;
  return loom_find_batch_size(probe_fits, NULL, o, &b, NULL);
}
static loom_status call_metrics_open(const void *o) {
  loom_metrics *m = loom_metrics_open(g_dir, o);
  loom_status st = ok_or_last(m);
  if (m) cr_assert_eq(loom_metrics_close(m), LOOM_OK);
  return st;
}
static loom_status call_mlp_new_ex(const void *o) {
  int64_t h[1] = {3};
  loom_module *m = loom_mlp_new_ex(2, 1, h, 2, loom_cpu(), o);
  loom_module_free(m);
  return ok_or_last(m);
}
static loom_status call_profiler_start(const void *o) {
  loom_status st = loom_profiler_start(o);
  if (st == LOOM_OK) cr_assert_eq(loom_profiler_stop(), LOOM_OK, "%s", loom_last_error());
  return st;
}
#define OPTIMIZER_CALL(name, expr)                          \
  static loom_status call_##name(const void *o) {          \
    loom_tensor *p = leaf();                                \
    loom_optimizer *opt = (expr);                           \
    loom_status st = ok_or_last(opt);                       \
    loom_optimizer_free(opt);                               \
    loom_tensor_release(p);                                 \
    return st;                                              \
  }
OPTIMIZER_CALL(sgd_new, loom_sgd_new(&p, 1, o))
OPTIMIZER_CALL(adamw_new, loom_adamw_new(&p, 1, o))
OPTIMIZER_CALL(adamw_offload_new, loom_adamw_offload_new(&p, 1, o))
OPTIMIZER_CALL(sgd_new_for_module, loom_sgd_new_for_module(g_model, o))
OPTIMIZER_CALL(adamw_new_for_module, loom_adamw_new_for_module(g_model, o))
static loom_status call_add_param_group(const void *o) {
  loom_tensor *p = leaf(), *q = leaf();
  loom_optimizer *opt = loom_sgd_new(&p, 1, NULL);
  cr_assert_not_null(opt, "%s", loom_last_error());
  loom_status st = loom_optimizer_add_param_group(opt, &q, 1, o);
  loom_optimizer_free(opt);
  loom_tensor_release(p);
  loom_tensor_release(q);
  return st;
}
static loom_status call_set_schedule(const void *o) {
  loom_status st = loom_optimizer_set_schedule(g_opt, o, 0);
  cr_assert_eq(loom_optimizer_set_schedule(g_opt, NULL, 0), LOOM_OK);
  return st;
}
static loom_tensor *image(void) {
  int64_t s[4] = {1, 2, 4, 4};
  return loom_ones(4, s, LOOM_F32, loom_cpu());
}
static loom_status tensor_call(loom_tensor *y) {
  loom_status st = ok_or_last(y);
  loom_tensor_release(y);
  return st;
}
static loom_status call_conv2d(const void *o) {
  int64_t ws[4] = {3, 2, 3, 3};
  loom_scope_begin();
  loom_tensor *y = loom_keep(loom_conv2d(image(), loom_ones(4, ws, LOOM_F32, loom_cpu()), NULL, o));
  loom_scope_end();
  return tensor_call(y);
}
static loom_status call_batch_norm(const void *o) {
  loom_scope_begin();
  loom_tensor *y = loom_keep(loom_batch_norm(image(), NULL, NULL, NULL, NULL, o));
  loom_scope_end();
  return tensor_call(y);
}
static loom_status call_max_pool2d(const void *o) {
  loom_scope_begin();
  loom_tensor *y = loom_keep(loom_max_pool2d(image(), o));
  loom_scope_end();
  return tensor_call(y);
}
static loom_status call_avg_pool2d(const void *o) {
  loom_scope_begin();
  loom_tensor *y = loom_keep(loom_avg_pool2d(image(), o));
  loom_scope_end();
  return tensor_call(y);
}
#define MODULE_CALL(name, expr)                     \
  static loom_status call_##name(const void *o) {  \
    loom_module *m = (expr);                        \
    loom_module_free(m);                            \
    return ok_or_last(m);                           \
  }
MODULE_CALL(conv2d_new, loom_conv2d_new(2, 3, 3, 3, o, true, LOOM_INIT_DEFAULT, loom_cpu()))
MODULE_CALL(batch_norm2d_new, loom_batch_norm2d_new(2, o, true, loom_cpu()))
MODULE_CALL(max_pool2d_new, loom_max_pool2d_new(o))
MODULE_CALL(avg_pool2d_new, loom_avg_pool2d_new(o))
MODULE_CALL(resnet_new, loom_resnet_new(LOOM_RESNET20, o, loom_cpu()))
MODULE_CALL(gpt_new, loom_gpt_new(o, loom_cpu()))
static loom_status call_scaler_new(const void *o) {
  loom_grad_scaler *s = loom_scaler_new(o);
  loom_scaler_free(s);
  return ok_or_last(s);
}
static loom_status call_comm_init(const void *o) {
  loom_comm *c = NULL;
  loom_status st = loom_comm_init(o, &c);
  loom_comm_free(c);
  return st;
}
static loom_status worker_ok(loom_comm *c, void *user) { (void)c, (void)user; return LOOM_OK; }
static loom_status call_dist_run(const void *o) { return loom_dist_run(o, worker_ok, NULL); }
static loom_status call_ddp_new(const void *o) {
  int64_t h[1] = {3};
  loom_module *m = loom_mlp_new(2, 1, h, 2, loom_cpu());
  loom_ddp *d = loom_ddp_new(m, g_comm, o);
  loom_status st = ok_or_last(d);
  loom_ddp_free(d);
  loom_module_free(m);
  return st;
}
static loom_status call_loader_new(const void *o) {
  loom_loader *l = loom_loader_new(g_ds, o);
  loom_loader_free(l);
  return ok_or_last(l);
}
FILL(image_folder, loom_image_folder_options, loom_image_folder_options_init(o))
/* A folder with one class of one file (opening lists files; nothing is decoded). */
static loom_status call_image_folder_open(const void *o) {
  char root[300], path[340];
  snprintf(root, sizeof root, "%s/images", g_dir);
  mkdir(root, 0755);
  snprintf(path, sizeof path, "%s/c", root);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/c/x.jpg", root);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  fclose(f);
  loom_dataset *ds = loom_dataset_image_folder_open(root, o);
  loom_dataset_release(ds);
  loom_status st = ok_or_last(ds);
  /* A build without libjpeg/libpng checks the struct, then says so. */
  if (st == LOOM_ERR_UNSUPPORTED && !loom_image_folder_supports("jpeg") && !loom_image_folder_supports("png"))
    return LOOM_OK;
  return st;
}
static loom_status call_dataset_callback(const void *o) {
  loom_dataset *ds = loom_dataset_callback(o);
  loom_dataset_release(ds);
  return ok_or_last(ds);
}
static loom_status call_scaler_state_restore(const void *o) { return loom_scaler_state_restore(g_scaler, o); }
static loom_status call_checkpoint_save(const void *o) {
  char path[320];
  snprintf(path, sizeof path, "%s/save.safetensors", g_dir);
  return loom_checkpoint_save(path, o);
}
static loom_status call_checkpoint_restore(const void *o) {
  return loom_checkpoint_restore(g_ckpt, (loom_train_state *)o);  /* in and out (step) */
}
static loom_status call_set_pycapsule_api(const void *o) { return loom_dlpack_set_pycapsule_api(o); }
static loom_status call_probe_classifier(const void *o) { return loom_batch_probe_classifier((void *)o, 2); }

#define IN(entry, name, type, null_ok, oldest) \
  {#entry, #type, sizeof(type), fill_##name, call_##entry, null_ok, oldest}

static const in_case IN_CASES[] = {
  IN(alloc_set_config, alloc, loom_alloc_options, false, NULL),
  IN(alloc_set_device_config, alloc, loom_alloc_options, false, NULL),
  IN(alloc_options_parse, alloc, loom_alloc_options, false, NULL),
  IN(find_batch_size, batch_finder, loom_batch_finder_options, true, NULL),
  IN(metrics_open, metrics, loom_metrics_options, true, NULL),
  IN(mlp_new_ex, mlp, loom_mlp_options, true, NULL),
  IN(profiler_start, profiler, loom_profiler_options, true, NULL),
  IN(sgd_new, sgd, loom_sgd_options, true, NULL),
  IN(sgd_new_for_module, sgd, loom_sgd_options, true, NULL),
  IN(adamw_new, adamw, loom_adamw_options, true, NULL),
  IN(adamw_new_for_module, adamw, loom_adamw_options, true, NULL),
  IN(adamw_offload_new, adamw, loom_adamw_options, true, NULL),
  IN(add_param_group, param_group, loom_param_group_options, true, NULL),
  IN(set_schedule, lr_schedule, loom_lr_schedule, true, NULL),
  IN(conv2d, conv2d, loom_conv2d_options, true, NULL),
  IN(conv2d_new, conv2d, loom_conv2d_options, true, NULL),
  IN(batch_norm, batch_norm, loom_batch_norm_options, true, NULL),
  IN(batch_norm2d_new, batch_norm, loom_batch_norm_options, true, NULL),
  /* The kernel size has no default: an options struct of nothing but its size has kernel 0. */
  IN(max_pool2d, pool2d, loom_pool2d_options, false, "kernel"),
  IN(avg_pool2d, pool2d, loom_pool2d_options, false, "kernel"),
  IN(max_pool2d_new, pool2d, loom_pool2d_options, false, "kernel"),
  IN(avg_pool2d_new, pool2d, loom_pool2d_options, false, "kernel"),
  IN(resnet_new, resnet, loom_resnet_options, true, NULL),
  /* vocab_size has no default (the tokenizer's); the rest is GPT-2 124M's shape. */
  IN(gpt_new, gpt, loom_gpt_config, false, "vocab_size"),
  IN(scaler_new, scaler, loom_scaler_options, true, NULL),
  IN(scaler_state_restore, scaler_state, loom_scaler_state, false, NULL),
  IN(comm_init, comm, loom_comm_options, true, NULL),
  IN(dist_run, dist_run, loom_dist_run_options, true, NULL),
  IN(ddp_new, ddp, loom_ddp_options, true, NULL),
  IN(loader_new, loader, loom_loader_options, true, NULL),
  IN(dataset_callback, callbacks, loom_dataset_callbacks, false, "read function is NULL"),
  IN(image_folder_open, image_folder, loom_image_folder_options, true, NULL),
  IN(checkpoint_save, train_state, loom_train_state, false, "model is NULL"),
  IN(checkpoint_restore, train_state, loom_train_state, false, "model is NULL"),
  IN(set_pycapsule_api, pycapsule, loom_pycapsule_api, false, "all four functions"),
  IN(probe_classifier, classifier_probe, loom_classifier_probe, false, "filled loom_classifier_probe"),
};
#define N_IN ((int)(sizeof IN_CASES / sizeof IN_CASES[0]))

/* A buffer past any struct's size, so a wrong read would see POISON. */
typedef union big { max_align_t align; unsigned char b[1024]; } big;

static void fill_poisoned(const in_case *c, big *buf) {
  memset(buf, POISON, sizeof *buf);
  c->fill(buf);
}
static void set_size(big *buf, size_t n) { memcpy(buf->b, &n, sizeof n); }

static void assert_names_struct(loom_status st, const in_case *c, size_t given) {
  char is[96], want[128];
  snprintf(is, sizeof is, "%s.struct_size is %zu", c->type, given);
  snprintf(want, sizeof want, "sizeof(%s) = %zu", c->type, c->size);
  cr_assert_eq(st, LOOM_ERR_INVALID_ARG, "%s with struct_size %zu: %s (%s)", c->entry, given, loom_status_name(st),
               loom_last_error());
  cr_assert(strstr(loom_last_error(), is) && strstr(loom_last_error(), want), "%s: the message names the struct and "
            "its size: %s", c->entry, loom_last_error());
}

Test(api, every_struct_going_in_follows_the_struct_size_rule) {
  for (int i = 0; i < N_IN; i++) {
    const in_case *c = &IN_CASES[i];
    cr_assert_leq(c->size, sizeof(big), "%s", c->type);
    big buf;
    /* The current struct. */
    fill_poisoned(c, &buf);
    loom_clear_error();
    cr_assert_eq(c->call(&buf), LOOM_OK, "%s: %s", c->entry, loom_last_error());
    /* NULL: the defaults, where the entry point takes NULL. */
    loom_clear_error();
    loom_status st = c->call(NULL);
    if (c->null_ok) cr_assert_eq(st, LOOM_OK, "%s(NULL): %s", c->entry, loom_last_error());
    else cr_assert_eq(st, LOOM_ERR_INVALID_ARG, "%s(NULL): %s", c->entry, loom_status_name(st));
    /* 0 (never initialized) and a struct newer than this library. */
    fill_poisoned(c, &buf);
    set_size(&buf, 0);
    assert_names_struct(c->call(&buf), c, 0);
    fill_poisoned(c, &buf);
    set_size(&buf, c->size + 8);
    assert_names_struct(c->call(&buf), c, c->size + 8);
    /* Too small to hold even struct_size. */
    fill_poisoned(c, &buf);
    set_size(&buf, sizeof(size_t) - 1);
    assert_names_struct(c->call(&buf), c, sizeof(size_t) - 1);
    /* The oldest caller possible: only struct_size; everything after it is
     * poison the library must not read. */
    memset(&buf, POISON, sizeof buf);
    set_size(&buf, sizeof(size_t));
    loom_clear_error();
    st = c->call(&buf);
    if (!c->oldest_error) {
      cr_assert_eq(st, LOOM_OK, "%s with struct_size %zu: %s", c->entry, sizeof(size_t), loom_last_error());
    } else {
      cr_assert_neq(st, LOOM_OK, "%s", c->entry);
      cr_assert(strstr(loom_last_error(), c->oldest_error) && !strstr(loom_last_error(), "struct_size"),
                "%s: an old struct is not a size error, but its required field is missing: %s", c->entry,
                loom_last_error());
    }
  }
  loom_clear_error();
}

/* The fields an older caller does not know take the defaults: here an SGD
 * struct that ends before `nesterov`, whose bytes hold true (which would be
 * refused with momentum 0). */
Test(api, an_older_struct_keeps_the_defaults_of_later_fields) {
  big buf;
  memset(&buf, POISON, sizeof buf);
  loom_sgd_options *o = (loom_sgd_options *)&buf;
  loom_sgd_options_init(o);
  o->nesterov = true;
  loom_tensor *p = leaf();
  loom_optimizer *opt = loom_sgd_new(&p, 1, o);
  cr_assert_null(opt, "nesterov without momentum is refused");
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "nesterov");
  o->struct_size = offsetof(loom_sgd_options, nesterov);
  opt = loom_sgd_new(&p, 1, o);
  cr_assert_not_null(opt, "%s", loom_last_error());
  loom_optimizer_free(opt);
  loom_tensor_release(p);
  /* In and out: loom_alloc_options_parse reads an older struct over the
   * defaults and writes it back only as far as it goes. */
  memset(&buf, POISON, sizeof buf);
  loom_alloc_options *a = (loom_alloc_options *)&buf;
  loom_alloc_options_init(a);
  memset(&a->gc_threshold, POISON, sizeof buf - offsetof(loom_alloc_options, gc_threshold));
  a->struct_size = offsetof(loom_alloc_options, gc_threshold);
  cr_assert_eq(loom_alloc_options_parse("history:5,garbage_collection_threshold:0.5", a), LOOM_OK, "%s",
               loom_last_error());
  cr_assert_eq(a->history, 5);
  cr_assert_eq(a->struct_size, offsetof(loom_alloc_options, gc_threshold));
  for (size_t j = offsetof(loom_alloc_options, gc_threshold); j < sizeof buf; j++)
    cr_assert_eq(buf.b[j], POISON, "byte %zu past the caller's struct was written", j);
}

/* ---- structs coming out --------------------------------------------------------- */

typedef struct out_case {
  const char *entry, *type;
  size_t size;
  loom_status (*get)(void *out);
} out_case;

static loom_status get_memory_stats(void *o) { return loom_memory_stats_get(loom_cpu(), o); }
static loom_status get_loader_stats(void *o) { return loom_loader_stats_get(g_loader, o); }
static loom_status get_scaler_state(void *o) { return loom_scaler_state_save(g_scaler, o); }
static loom_status get_dist_env(void *o) { return loom_dist_env_get(o); }
static loom_status get_ddp_bucket(void *o) { return loom_ddp_bucket_get(g_ddp, 0, o); }
static loom_status get_ddp_stats(void *o) { return loom_ddp_stats_get(g_ddp, o); }

#define OUT(entry, type) {#entry, #type, sizeof(type), get_##entry}

static const out_case OUT_CASES[] = {
  OUT(memory_stats, loom_memory_stats), OUT(loader_stats, loom_loader_stats), OUT(scaler_state, loom_scaler_state),
  OUT(dist_env, loom_dist_env),         OUT(ddp_bucket, loom_ddp_bucket_info), OUT(ddp_stats, loom_ddp_stats),
};
#define N_OUT ((int)(sizeof OUT_CASES / sizeof OUT_CASES[0]))

static size_t size_of(const big *b) {
  size_t n;
  memcpy(&n, b->b, sizeof n);
  return n;
}

Test(api, every_struct_coming_out_follows_the_struct_size_rule) {
  for (int i = 0; i < N_OUT; i++) {
    const out_case *c = &OUT_CASES[i];
    big buf;
    const size_t sizes[] = {c->size, c->size / 2, sizeof(size_t)};
    for (int k = 0; k < 3; k++) {
      memset(&buf, POISON, sizeof buf);
      set_size(&buf, sizes[k]);
      cr_assert_eq(c->get(&buf), LOOM_OK, "%s with struct_size %zu: %s", c->entry, sizes[k], loom_last_error());
      cr_assert_eq(size_of(&buf), sizes[k], "%s: struct_size keeps the caller's value", c->entry);
      for (size_t j = sizes[k]; j < sizeof buf; j++)
        cr_assert_eq(buf.b[j], POISON, "%s with struct_size %zu wrote byte %zu", c->entry, sizes[k], j);
    }
    const size_t bad[] = {0, sizeof(size_t) - 1, c->size + 8};
    for (int k = 0; k < 3; k++) {
      memset(&buf, POISON, sizeof buf);
      set_size(&buf, bad[k]);
      in_case as_in = {c->entry, c->type, c->size, NULL, NULL, false, NULL};
      assert_names_struct(c->get(&buf), &as_in, bad[k]);
      for (size_t j = sizeof(size_t); j < sizeof buf; j++)
        cr_assert_eq(buf.b[j], POISON, "%s refused struct_size %zu but wrote byte %zu", c->entry, bad[k], j);
    }
  }
  loom_clear_error();
}

/* ---- loom_free ------------------------------------------------------------------- */

Test(api, loom_free_gives_back_what_loom_hands_over) {
  loom_free(NULL);
  char *s = loom_memory_summary(loom_cpu());
  cr_assert_not_null(s, "%s", loom_last_error());
  cr_assert(strstr(s, "loom memory summary"), "%s", s);
  loom_free(s);
  s = loom_memory_snapshot_json(loom_cpu());
  cr_assert_not_null(s, "%s", loom_last_error());
  loom_free(s);
  cr_assert_eq(loom_profiler_start(NULL), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_profiler_stop(), LOOM_OK, "%s", loom_last_error());
  s = loom_profiler_summary(0);
  cr_assert_not_null(s, "%s", loom_last_error());
  loom_free(s);
  tk_leak_check();  /* under LeakSanitizer: each string was really given back */
}

/* ---- the headers list nothing the tables miss ------------------------------------------ */

static bool in_tables(const char *type) {
  for (int i = 0; i < N_IN; i++)
    if (!strcmp(IN_CASES[i].type, type)) return true;
  for (int i = 0; i < N_OUT; i++)
    if (!strcmp(OUT_CASES[i].type, type)) return true;
  return false;
}

/* Every header of include/loom, one after another. */
static char *all_headers(void) {
  const char *dir = LOOM_TEST_INCLUDE_DIR "/loom";
  DIR *d = opendir(dir);
  cr_assert_not_null(d, "%s", dir);
  size_t used = 0, cap = 1 << 20;
  char *all = malloc(cap);
  cr_assert_not_null(all);
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 3 || strcmp(e->d_name + len - 2, ".h")) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    used += fread(all + used, 1, cap - used - 1, f);
    cr_assert(!ferror(f) && feof(f), "%s: read failed or the headers outgrew the buffer", path);
    fclose(f);
  }
  closedir(d);
  all[used] = '\0';
  return all;
}

Test(api, every_public_struct_with_struct_size_is_covered_and_old_idioms_are_gone) {
  char *all = all_headers();
  cr_assert(!strstr(all, "_defaults(") && !strstr(all, "_options_default("),
            "a header declares a by-value defaults function: use loom_X_options_init");
  int structs = 0;
  for (const char *p = strstr(all, "typedef struct loom_"); p; p = strstr(p + 1, "typedef struct loom_")) {
    char name[96];
    const char *brace = strchr(p, '{');
    if (sscanf(p, "typedef struct %95[a-z0-9_] {", name) != 1 || !brace || brace > strchr(p, '\n')) continue;
    const char *body = brace + 1;
    while (*body == ' ' || *body == '\n') body++;
    cr_assert(strncmp(body, "uint32_t size;", 14) && strncmp(body, "size_t size;", 12),
              "%s starts with a `size` field: use size_t struct_size", name);
    if (strncmp(body, "size_t struct_size;", 19)) continue;
    structs++;
    cr_assert(in_tables(name), "%s starts with struct_size but no entry point taking it is in the tables of "
              "test_api_conventions.c", name);
    size_t nl = strlen(name);
    if (nl > 8 && !strcmp(name + nl - 8, "_options")) {
      char init[256];
      snprintf(init, sizeof init, "LOOM_API void %s_init(%s *o", name, name);
      cr_assert(strstr(all, init), "%s has no initializer declared as `%s...)`", name, init);
    }
  }
  cr_assert_geq(structs, 20, "found only %d structs starting with struct_size", structs);
  free(all);
}

/* ---- export.h ------------------------------------------------------------------------ */

#define STR_(...) #__VA_ARGS__
#define STR(...) STR_(__VA_ARGS__)

static const char *const API_HERE = STR(LOOM_API);
#ifdef LOOM_STATIC
static const bool STATIC_DEFINED = true;
#else
static const bool STATIC_DEFINED = false;
#endif

/* export.h again as each Windows compiler would see it (the macros only;
 * nothing below is compiled for Windows). */
#define _WIN32 1
#undef LOOM_STATIC
#undef LOOM_EXPORT_H
#undef LOOM_API
#include "loom/export.h"
static const char *const API_WIN_SHARED_USER = STR(LOOM_API);
#define LOOM_STATIC 1
#undef LOOM_EXPORT_H
#undef LOOM_API
#include "loom/export.h"
static const char *const API_WIN_STATIC_USER = STR(LOOM_API);
#define LOOM_BUILDING 1
#undef LOOM_EXPORT_H
#undef LOOM_API
#include "loom/export.h"
static const char *const API_WIN_BUILDING = STR(LOOM_API);
#undef LOOM_BUILDING
#undef _WIN32
#undef LOOM_EXPORT_H
#undef LOOM_API
#include "loom/export.h"

Test(api, export_macro_follows_the_build_defines) {
  cr_assert(STATIC_DEFINED, "the loom_static target gives its users LOOM_STATIC");
  cr_assert_str_eq(API_HERE, "__attribute__((visibility(\"default\")))");
  cr_assert_str_eq(STR(LOOM_API), "__attribute__((visibility(\"default\")))");
  cr_assert_str_eq(API_WIN_SHARED_USER, "__declspec(dllimport)");
  cr_assert_str_eq(API_WIN_STATIC_USER, "");
  cr_assert_str_eq(API_WIN_BUILDING, "__declspec(dllexport)");
}
