/* custom.c — modules whose forward is the caller's function (user code and
 * language bindings: the Python package's loom.nn.Module subclasses), with
 * parameters, buffers and sub-modules registered under local names so that
 * everything walking modules (names, optimizers, checkpoints, precision
 * policies, data parallelism) treats them as loom's own. */
#include <stdlib.h>
#include <string.h>

#include "nn/module_internal.h"
#include "core/sys.h"

typedef struct custom_impl {
  loom_module_forward_fn forward;
  void *user;
  void (*destroy)(void *user);
} custom_impl;

/* The caller's forward in a scope of its own: its intermediates die here,
 * its result leaves by the ownership rule (loom_keep retains a result the
 * scope does not own, such as x itself or a parameter). */
static loom_tensor *custom_forward(loom_module *m, loom_tensor *x) {
  const custom_impl *c = m->impl;
  loom_clear_error();  /* so that a NULL without an error can be told apart */
  loom_scope_begin();
  loom_tensor *y = c->forward(c->user, m, x);
  if (y) loom_keep(y);
  else if (loom_last_status() == LOOM_OK)
    loom_set_error(LOOM_ERR_STATE, "%s: forward returned NULL without setting an error", m->name);
  loom_scope_end();
  return y;
}

static void custom_destroy(loom_module *m) {
  custom_impl *c = m->impl;
  if (c && c->destroy) c->destroy(c->user);
  loom_sys_free(c);
  m->impl = NULL;
}

loom_module *loom_module_new(const char *name, loom_module_forward_fn forward, void *user, void (*destroy)(void *user)) {
  if (!forward) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "module_new: forward is NULL");
    return NULL;
  }
  loom_module *m = loom_module_alloc(LOOM_MOD_CUSTOM, name && *name ? name : "Module");
  custom_impl *c = m ? loom_sys_calloc(1, sizeof *c) : NULL;
  if (!c) {
    if (m) loom_set_error(LOOM_ERR_OOM, "module_new: out of host memory");
    loom_module_free(m);
    return NULL;
  }
  *c = (custom_impl){forward, user, destroy};
  m->impl = c;
  m->destroy = custom_destroy;
  m->forward = custom_forward;
  return m;
}

/* Registration is for custom modules only (loom's layers read their own
 * parameters by position), and a name is used once across a module's
 * parameters, buffers and children, as in PyTorch. */
static loom_status check_register(const loom_module *m, const char *what, const char *name) {
  if (!m) return loom_set_error(LOOM_ERR_INVALID_ARG, "module_register_%s: module is NULL", what);
  if (m->kind != LOOM_MOD_CUSTOM)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "module_register_%s: %s is not a custom module (loom_module_new)", what,
                          m->name);
  if (!name || !*name)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "module_register_%s: %s: the name is empty", what, m->name);
  bool taken = loom_module_find_child(m, name) != NULL;
  for (int i = 0; !taken && i < m->n_params; i++) taken = !strcmp(m->param_names[i], name);
  for (int i = 0; !taken && i < m->n_buffers; i++) taken = !strcmp(m->buffer_names[i], name);
  if (taken)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "module_register_%s: %s already has a member named '%s'", what,
                          m->name, name);
  return LOOM_OK;
}

loom_status loom_module_register_parameter(loom_module *m, const char *name, loom_tensor *t) {
  if (!t) return loom_set_error(LOOM_ERR_NULL_INPUT, "module_register_parameter: tensor '%s' is NULL", name ? name : "");
  LOOM_TRY(check_register(m, "parameter", name));
  return loom_module_add_param(m, name, loom_tensor_retain(t));
}

loom_status loom_module_register_buffer(loom_module *m, const char *name, loom_tensor *t) {
  if (!t) return loom_set_error(LOOM_ERR_NULL_INPUT, "module_register_buffer: tensor '%s' is NULL", name ? name : "");
  LOOM_TRY(check_register(m, "buffer", name));
  return loom_module_add_buffer(m, name, loom_tensor_retain(t));
}

static bool contains(const loom_module *tree, const loom_module *m) {
  if (tree == m) return true;
  for (int i = 0; i < tree->n_children; i++)
    if (contains(tree->children[i], m)) return true;
  return false;
}

loom_status loom_module_register_module(loom_module *m, const char *name, loom_module *child) {
  if (!child) return loom_set_error(LOOM_ERR_INVALID_ARG, "module_register_module: child '%s' is NULL", name ? name : "");
  /* A module inside its own tree would be walked (and freed) forever: refused, and not freed. */
  if (m && contains(child, m))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "module_register_module: %s would contain itself", m->name);
  loom_status st = check_register(m, "module", name);
  if (st != LOOM_OK) {
    loom_module_free(child);  /* ownership passed, also on failure */
    return st;
  }
  return loom_module_add_child(m, name, child);
}

loom_tensor *loom_module_fail(loom_status code, const char *message) {
  loom_set_error(code == LOOM_OK ? LOOM_ERR_STATE : code, "%s", message ? message : "module forward failed");
  return NULL;
}
