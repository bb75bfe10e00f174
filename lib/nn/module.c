/* module.c — the generic module: forward dispatch, owned parameters, buffers
 * and children with PyTorch-style dotted names, train/eval mode, free. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/autograd.h"
#include "nn/module_internal.h"
#include "core/sys.h"

loom_module *loom_module_alloc(int kind, const char *name) {
  loom_module *m = loom_sys_calloc(1, sizeof *m);
  if (!m) {
    loom_set_error(LOOM_ERR_OOM, "%s: out of host memory", name);
    return NULL;
  }
  m->kind = kind;
  m->training = true;
  snprintf(m->name, sizeof m->name, "%s", name);
  return m;
}

/* Grow a tensor array and its parallel name array to hold one more. */
static int grow(void **items, size_t item_size, void **names, int n, int *cap) {
  if (n < *cap) return 1;
  int nc = *cap ? *cap * 2 : 4;
  void *ni = loom_sys_realloc(*items, (size_t)nc * item_size);
  if (!ni) return 0;
  *items = ni;
  void *nn = loom_sys_realloc(*names, (size_t)nc * LOOM_MODULE_NAME_MAX);
  if (!nn) return 0;
  *names = nn;
  *cap = nc;
  return 1;
}

static loom_status check_local_name(const loom_module *m, const char *what, const char *name) {
  if (!name || strlen(name) >= LOOM_MODULE_NAME_MAX || strchr(name, '.'))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: %s name '%s' must be shorter than %d characters, without '.'",
                          m->name, what, name ? name : "(null)", LOOM_MODULE_NAME_MAX);
  return LOOM_OK;
}

static loom_status add_tensor(loom_module *m, const char *what, loom_tensor ***items, char (**names)[LOOM_MODULE_NAME_MAX],
                              int *n, int *cap, const char *name, loom_tensor *t) {
  if (!m) {
    loom_tensor_release(t);
    return loom_set_error(LOOM_ERR_INVALID_ARG, "module_add_%s: module is NULL", what);
  }
  if (!t) {
    if (loom_last_status() != LOOM_OK) return loom_last_status();
    return loom_set_error(LOOM_ERR_NULL_INPUT, "%s: %s '%s' is NULL", m->name, what, name ? name : "");
  }
  loom_status st = check_local_name(m, what, name);
  if (st == LOOM_OK && !grow((void **)items, sizeof **items, (void **)names, *n, cap))
    st = loom_set_error(LOOM_ERR_OOM, "%s: out of host memory adding %s '%s'", m->name, what, name);
  if (st != LOOM_OK) {
    loom_tensor_release(t);
    return st;
  }
  (*items)[*n] = t;
  snprintf((*names)[*n], LOOM_MODULE_NAME_MAX, "%s", name);
  (*n)++;
  return LOOM_OK;
}

loom_status loom_module_add_param(loom_module *m, const char *name, loom_tensor *t) {
  return add_tensor(m, "parameter", &m->params, &m->param_names, &m->n_params, &m->cap_params, name, t);
}

loom_status loom_module_add_buffer(loom_module *m, const char *name, loom_tensor *t) {
  return add_tensor(m, "buffer", &m->buffers, &m->buffer_names, &m->n_buffers, &m->cap_buffers, name, t);
}

loom_status loom_module_add_child(loom_module *m, const char *name, loom_module *child) {
  if (!m) {
    loom_module_free(child);
    return loom_set_error(LOOM_ERR_INVALID_ARG, "module_add_child: module is NULL");
  }
  if (!child) {
    if (loom_last_status() != LOOM_OK) return loom_last_status();
    return loom_set_error(LOOM_ERR_NULL_INPUT, "%s: child '%s' is NULL", m->name, name ? name : "");
  }
  if (!name) name = "";
  loom_status st = check_local_name(m, "child", name);
  if (st == LOOM_OK && !grow((void **)&m->children, sizeof *m->children, (void **)&m->child_names, m->n_children,
                             &m->cap_children))
    st = loom_set_error(LOOM_ERR_OOM, "%s: out of host memory adding a child", m->name);
  if (st != LOOM_OK) {
    loom_module_free(child);
    return st;
  }
  m->children[m->n_children] = child;
  snprintf(m->child_names[m->n_children], LOOM_MODULE_NAME_MAX, "%s", name);
  m->n_children++;
  /* A child joins in its parent's mode. */
  if (child->training != m->training) loom_module_train(child, m->training);
  return LOOM_OK;
}

void loom_module_set_name(loom_module *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->name, sizeof m->name, fmt, ap);
  va_end(ap);
}

loom_module *loom_module_find_child(const loom_module *m, const char *name) {
  for (int i = 0; m && name && i < m->n_children; i++)
    if (!strcmp(m->child_names[i], name)) return m->children[i];
  return NULL;
}

/* The module's own forward, as a loom_checkpoint segment. */
static loom_tensor *checkpointed_forward(void *ctx, int n, loom_tensor *const *in) {
  (void)n;
  loom_module *m = ctx;
  return m->forward(m, in[0]);
}

loom_tensor *loom_module_forward(loom_module *m, loom_tensor *x) {
  if (!m) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "module_forward: module is NULL");
    return NULL;
  }
  if (!x) {
    if (loom_last_status() == LOOM_OK) loom_set_error(LOOM_ERR_NULL_INPUT, "%s: input is NULL", m->name);
    return NULL;
  }
  if (m->checkpoint && loom_is_grad_enabled()) return loom_checkpoint(checkpointed_forward, m, 1, &x);
  return m->forward(m, x);
}

loom_status loom_module_set_checkpoint(loom_module *m, bool on) {
  if (!m) return loom_set_error(LOOM_ERR_INVALID_ARG, "module_set_checkpoint: module is NULL");
  m->checkpoint = on;
  return LOOM_OK;
}

const char *loom_module_name(const loom_module *m) { return m ? m->name : ""; }
int loom_module_num_children(const loom_module *m) { return m ? m->n_children : 0; }
loom_module *loom_module_child(const loom_module *m, int i) {
  return (m && i >= 0 && i < m->n_children) ? m->children[i] : NULL;
}

/* ---- depth-first walks over parameters and buffers ----------------------- */

typedef enum { WALK_PARAMS, WALK_BUFFERS } walk_kind;

static int own_count(const loom_module *m, walk_kind k) { return k == WALK_PARAMS ? m->n_params : m->n_buffers; }

static int count(const loom_module *m, walk_kind k) {
  if (!m) return 0;
  int n = own_count(m, k);
  for (int i = 0; i < m->n_children; i++) n += count(m->children[i], k);
  return n;
}

/* Find entry *i below m; on the way, append each module's name to path. */
static loom_tensor *find(const loom_module *m, walk_kind k, int *i, char *path, size_t cap, size_t len) {
  int own = own_count(m, k);
  if (*i < own) {
    if (path) {
      const char *local = k == WALK_PARAMS ? m->param_names[*i] : m->buffer_names[*i];
      snprintf(path + len, cap > len ? cap - len : 0, "%s", local);
    }
    return k == WALK_PARAMS ? m->params[*i] : m->buffers[*i];
  }
  *i -= own;
  for (int c = 0; c < m->n_children; c++) {
    size_t l = len;
    if (path && len < cap) {
      int w = m->child_names[c][0] ? snprintf(path + len, cap - len, "%s.", m->child_names[c])
                                   : snprintf(path + len, cap - len, "%d.", c);
      l = len + (size_t)(w > 0 ? w : 0);
    }
    loom_tensor *t = find(m->children[c], k, i, path, cap, l);
    if (t) return t;
  }
  return NULL;
}

static const char *name_of(const loom_module *m, walk_kind k, int i, char *buf, size_t n) {
  if (!m || i < 0 || !buf || n == 0) return NULL;
  buf[0] = 0;
  loom_tensor *t = find(m, k, &i, buf, n, 0);
  if (!t) return NULL;
  if (strlen(buf) + 1 >= n) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "module name: buffer of %zu bytes is too small for '%s…'", n, buf);
    return NULL;
  }
  return buf;
}

int loom_module_num_params(const loom_module *m) { return count(m, WALK_PARAMS); }

loom_tensor *loom_module_param(const loom_module *m, int i) {
  if (!m || i < 0) return NULL;
  return find(m, WALK_PARAMS, &i, NULL, 0, 0);
}

const char *loom_module_param_name(const loom_module *m, int i, char *buf, size_t n) {
  return name_of(m, WALK_PARAMS, i, buf, n);
}

int loom_module_num_buffers(const loom_module *m) { return count(m, WALK_BUFFERS); }

loom_tensor *loom_module_buffer(const loom_module *m, int i) {
  if (!m || i < 0) return NULL;
  return find(m, WALK_BUFFERS, &i, NULL, 0, 0);
}

const char *loom_module_buffer_name(const loom_module *m, int i, char *buf, size_t n) {
  return name_of(m, WALK_BUFFERS, i, buf, n);
}

/* ---- weight-decay split ------------------------------------------------------ */

static void split(const loom_module *m, loom_tensor **d, int *nd, loom_tensor **nod, int *nnod) {
  for (int i = 0; i < m->n_params; i++) {
    /* Norm layers' scale/shift and every bias: decaying them only hurts. */
    bool no_decay = m->kind == LOOM_MOD_BATCHNORM2D || !strcmp(m->param_names[i], "bias");
    if (no_decay) nod[(*nnod)++] = m->params[i];
    else d[(*nd)++] = m->params[i];
  }
  for (int c = 0; c < m->n_children; c++) split(m->children[c], d, nd, nod, nnod);
}

loom_status loom_module_split_decay(const loom_module *m, loom_tensor **decay, int *n_decay, loom_tensor **no_decay,
                                    int *n_no_decay) {
  if (!m || !decay || !n_decay || !no_decay || !n_no_decay)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "module_split_decay: NULL argument");
  *n_decay = *n_no_decay = 0;
  split(m, decay, n_decay, no_decay, n_no_decay);
  return LOOM_OK;
}

int64_t loom_module_num_param_elements(const loom_module *m) {
  int64_t n = 0;
  for (int i = 0; i < loom_module_num_params(m); i++) n += loom_tensor_numel(loom_module_param(m, i));
  return n;
}

/* ---- mode ------------------------------------------------------------------ */

loom_status loom_module_train(loom_module *m, bool training) {
  if (!m) return loom_set_error(LOOM_ERR_INVALID_ARG, "module_train: module is NULL");
  m->training = training;
  if (m->on_mode) m->on_mode(m);
  for (int i = 0; i < m->n_children; i++) loom_module_train(m->children[i], training);
  return LOOM_OK;
}

bool loom_module_is_training(const loom_module *m) { return m ? m->training : false; }

void loom_module_free(loom_module *m) {
  if (!m) return;
  for (int i = 0; i < m->n_params; i++) loom_tensor_release(m->params[i]);
  for (int i = 0; i < m->n_buffers; i++) loom_tensor_release(m->buffers[i]);
  for (int i = 0; i < m->n_children; i++) loom_module_free(m->children[i]);
  if (m->destroy) m->destroy(m);
  loom_sys_free(m->params);
  loom_sys_free(m->param_names);
  loom_sys_free(m->buffers);
  loom_sys_free(m->buffer_names);
  loom_sys_free(m->children);
  loom_sys_free(m->child_names);
  loom_sys_free(m->policy);  /* the precision policy record is plain malloc memory */
  loom_sys_free(m);
}
