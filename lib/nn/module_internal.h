/* module_internal.h (internal) — the module object: a small vtable plus
 * owned parameters and children. */
#ifndef LOOM_NN_MODULE_INTERNAL_H
#define LOOM_NN_MODULE_INTERNAL_H

#include "loom/nn.h"
#include "tensor/tensor_internal.h"

enum {
  LOOM_MOD_LINEAR = 1,
  LOOM_MOD_RELU = 2,
  LOOM_MOD_SEQUENTIAL = 3,
  /* convolutional networks (lib/nn/conv2d.c, batch_norm.c, pool.c, dropout.c, flatten.c, resnet*.c) */
  LOOM_MOD_CONV2D = 4,
  LOOM_MOD_BATCHNORM2D = 5,
  LOOM_MOD_MAXPOOL2D = 6,
  LOOM_MOD_AVGPOOL2D = 7,
  LOOM_MOD_ADAPTIVE_AVGPOOL2D = 8,
  LOOM_MOD_DROPOUT = 9,
  LOOM_MOD_FLATTEN = 10,
  LOOM_MOD_BASIC_BLOCK = 11,
  LOOM_MOD_BOTTLENECK = 12,
  LOOM_MOD_RESNET = 13,
  LOOM_MOD_CUSTOM = 14,  /* forward supplied by the caller (lib/nn/custom.c) */
  LOOM_MOD_GPT = 15,     /* GPT-2 and its parts (lib/nn/gpt*.c; which part: gpt_internal.h) */
};

#define LOOM_MODULE_NAME_MAX 32  /* a parameter's, buffer's or child's own (local) name */

struct loom_module {
  int kind;
  char name[64];
  loom_tensor *(*forward)(loom_module *m, loom_tensor *x);
  /* Optional: called after the generic part of loom_module_free (own state). */
  void (*destroy)(loom_module *m);
  /* Optional: called by loom_module_train after the flag is set. */
  void (*on_mode)(loom_module *m);
  bool training;          /* true unless loom_module_train(m, false) */
  loom_tensor **params;   /* owned */
  char (*param_names)[LOOM_MODULE_NAME_MAX];  /* local names ("weight"); parallel to params */
  int n_params, cap_params;
  loom_tensor **buffers;  /* owned; not trained (BatchNorm's running statistics) */
  char (*buffer_names)[LOOM_MODULE_NAME_MAX];
  int n_buffers, cap_buffers;
  loom_module **children; /* owned */
  char (*child_names)[LOOM_MODULE_NAME_MAX];  /* "" = the child's index (Sequential) */
  int n_children, cap_children;
  void *impl;             /* owned by the module kind (freed by destroy) */
  /* Linear (features), Conv2d (channels) */
  int64_t in_features, out_features;
  loom_activation act;    /* fused activation: Linear, Conv2d, BatchNorm2d */
  /* Activation checkpointing (loom_module_set_checkpoint): forward runs
   * through loom_checkpoint. Sequential: checkpoint runs of this many
   * children (loom_sequential_set_checkpoint_every; 0 off). */
  bool checkpoint;
  int checkpoint_every;
  /* Precision policy (precision_policy.h): NULL = fp32. */
  void *policy;
};

loom_module *loom_module_alloc(int kind, const char *name);
/* Append an owned parameter / buffer with a local name ("weight",
 * "running_mean"). t NULL: the error of the call that made it. On failure t
 * is released and the module is left as it was. */
loom_status loom_module_add_param(loom_module *m, const char *name, loom_tensor *t);
loom_status loom_module_add_buffer(loom_module *m, const char *name, loom_tensor *t);
/* Append an owned child; name NULL or "" names it by its index. The module
 * takes ownership of child, also on failure. */
loom_status loom_module_add_child(loom_module *m, const char *name, loom_module *child);
/* Set m->name from a format (cut to fit, as display names may be). */
void loom_module_set_name(loom_module *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Child by local name (borrowed), or NULL. */
loom_module *loom_module_find_child(const loom_module *m, const char *name);

/* Conv2d's own state (impl): the convolution's geometry. */
typedef struct loom_conv2d_impl {
  loom_conv2d_options opt;  /* act is m->act */
} loom_conv2d_impl;
/* Refresh a Conv2d's / BatchNorm2d's name after its activation changed. */
void loom_conv2d_name(loom_module *m);
void loom_batch_norm2d_name(loom_module *m);

#endif
