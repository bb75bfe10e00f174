/* nn.h — layers and models.
 *
 * A loom_module is an opaque layer with parameters (leaf tensors that
 * require grad, owned by the module) and a forward function. Sequential
 * containers own their children. loom_sequential_add fuses a Linear followed
 * by a ReLU into one fused linear+ReLU op automatically.
 *
 * Initialization draws from the global generator (loom_manual_seed), so a
 * seed gives the same model on every device.
 *
 * Threads: a module may be used by one thread at a time. */
#ifndef LOOM_NN_H
#define LOOM_NN_H

#include "tensor.h"
#include "ops.h"

LOOM_EXTERN_C_BEGIN

typedef struct loom_module loom_module;

/* Append-only. */
typedef enum loom_init {
  LOOM_INIT_DEFAULT = 0,         /* PyTorch's Linear default: U(±1/sqrt(fan_in)) */
  LOOM_INIT_KAIMING_UNIFORM = 1, /* U(±sqrt(6/fan_in)), for ReLU layers */
  LOOM_INIT_KAIMING_NORMAL = 2,  /* N(0, 2/fan_in) */
  LOOM_INIT_XAVIER_UNIFORM = 3,  /* U(±sqrt(6/(fan_in+fan_out))) */
  LOOM_INIT_XAVIER_NORMAL = 4,   /* N(0, 2/(fan_in+fan_out)) */
} loom_init;

/* In-place initializers (no autograd is recorded). */
LOOM_API loom_status loom_init_(loom_tensor *t, loom_init kind, int64_t fan_in, int64_t fan_out);

/* Linear: y = x · wᵀ + b, w [out, in], b [out]. Weights use init. */
LOOM_API loom_module *loom_linear_new(int64_t in_features, int64_t out_features, bool bias,
                                      loom_init init, loom_device dev);
/* Switch a Linear's activation (what Sequential does when a ReLU follows). */
LOOM_API loom_status loom_linear_set_activation(loom_module *linear, loom_activation act);
LOOM_API loom_module *loom_relu_new(void);
LOOM_API loom_module *loom_sequential_new(void);
/* Append child (the container takes ownership, also on failure). A ReLU
 * appended right after a Linear is fused into it. */
LOOM_API loom_status loom_sequential_add(loom_module *seq, loom_module *child);
/* in -> hidden[0] -> ... -> hidden[n-1] -> out, ReLU between (fused). */
LOOM_API loom_module *loom_mlp_new(int64_t in_features, int n_hidden, const int64_t *hidden,
                                   int64_t out_features, loom_device dev);

/* Options of loom_mlp_new_ex (init with loom_mlp_options_init). */
typedef struct loom_mlp_options {
  size_t struct_size;
  /* Activation checkpointing: recompute every run of this many layers
   * (a hidden Linear+ReLU, or the output Linear) in backward instead of
   * keeping their activations (loom_sequential_set_checkpoint_every); 0 off. */
  int checkpoint_every;
} loom_mlp_options;
LOOM_API void loom_mlp_options_init(loom_mlp_options *o);
/* loom_mlp_new with options (o NULL: the defaults). */
LOOM_API loom_module *loom_mlp_new_ex(int64_t in_features, int n_hidden, const int64_t *hidden, int64_t out_features,
                                      loom_device dev, const loom_mlp_options *o);

/* Activation checkpointing (see loom_checkpoint in autograd.h), one line per
 * model: with on, m's forward (under grad) keeps only its input for backward
 * and recomputes the rest there; gradients are unchanged, memory drops,
 * backward pays one more forward of m. Parameter names do not change. */
LOOM_API loom_status loom_module_set_checkpoint(loom_module *m, bool on);
/* For a Sequential (a ResNet stage, an MLP): checkpoint each run of n
 * consecutive children as one segment (n = 1: every block); 0 off. */
LOOM_API loom_status loom_sequential_set_checkpoint_every(loom_module *seq, int n);

LOOM_API loom_tensor *loom_module_forward(loom_module *m, loom_tensor *x);
/* "Linear(784, 1024, relu)", "Sequential[3]", ... */
LOOM_API const char *loom_module_name(const loom_module *m);
LOOM_API int loom_module_num_children(const loom_module *m);
LOOM_API loom_module *loom_module_child(const loom_module *m, int i);  /* borrowed */
/* All parameters, depth first (borrowed, owned by the module). */
LOOM_API int loom_module_num_params(const loom_module *m);
LOOM_API loom_tensor *loom_module_param(const loom_module *m, int i);
LOOM_API int64_t loom_module_num_param_elements(const loom_module *m);
/* Dotted name of parameter i, as PyTorch's named_parameters() spells it:
 * a module's own parameters first ("weight", "bias"), then each child's,
 * prefixed by the child's name ("layer1.0.conv1.weight"; children of a
 * Sequential are named by their index: "0.weight", "2.bias"). Written into
 * buf (n bytes); returns buf, or NULL when i is out of range or buf is too
 * small (an error). The same order as loom_module_param(). */
LOOM_API const char *loom_module_param_name(const loom_module *m, int i, char *buf, size_t n);

/* Buffers: module state that is not trained but belongs to the model
 * (BatchNorm's running_mean / running_var / num_batches_tracked). Saved in
 * checkpoints and broadcast by data parallelism; never given to an
 * optimizer. Depth first and named like parameters. Borrowed. */
LOOM_API int loom_module_num_buffers(const loom_module *m);
LOOM_API loom_tensor *loom_module_buffer(const loom_module *m, int i);
LOOM_API const char *loom_module_buffer_name(const loom_module *m, int i, char *buf, size_t n);

/* Training mode (the default) or evaluation mode, for m and everything
 * under it: in eval mode dropout is the identity and batch norm normalizes
 * with its running statistics. A child added to a module takes the
 * module's mode. */
LOOM_API loom_status loom_module_train(loom_module *m, bool training);
LOOM_API bool loom_module_is_training(const loom_module *m);
LOOM_API void loom_module_free(loom_module *m);

LOOM_EXTERN_C_END
#endif
