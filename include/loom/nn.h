/* nn.h — layers and models.
 *
 * A loom_module is an opaque layer with parameters (leaf tensors that
 * require grad, owned by the module) and a forward function. Sequential
 * containers own their children. loom_sequential_add fuses a ReLU into the
 * layer before it automatically: Linear→ReLU becomes one fused linear+ReLU
 * op, BatchNorm2d→ReLU applies the ReLU in batch norm's normalize pass, and
 * Conv2d→ReLU (no batch norm between) uses the conv's fused bias+ReLU.
 *
 * Convolutional layers take [N, C, H, W] tensors in either memory format
 * (NCHW or channels-last, see ops.h) and keep it. The ResNet builders
 * follow torchvision's structure and parameter names (conv1.weight,
 * bn1.running_mean, layer1.0.downsample.0.weight, fc.bias, ...), so
 * checkpoints line up with PyTorch's state_dict keys.
 *
 * Initialization draws from the global generator (loom_manual_seed), so a
 * seed gives the same model on every device.
 *
 * Threads: a module may be used by one thread at a time. */
#ifndef LOOM_NN_H
#define LOOM_NN_H

#include "tensor.h"
#include "ops.h"
#include "amp.h"

LOOM_EXTERN_C_BEGIN

typedef struct loom_module loom_module;

/* Append-only. */
typedef enum loom_init {
  LOOM_INIT_DEFAULT = 0,         /* PyTorch's Linear default: U(±1/sqrt(fan_in)) */
  LOOM_INIT_KAIMING_UNIFORM = 1, /* U(±sqrt(6/fan_in)), for ReLU layers */
  LOOM_INIT_KAIMING_NORMAL = 2,  /* N(0, 2/fan_in) */
  LOOM_INIT_XAVIER_UNIFORM = 3,  /* U(±sqrt(6/(fan_in+fan_out))) */
  LOOM_INIT_XAVIER_NORMAL = 4,   /* N(0, 2/(fan_in+fan_out)) */
  LOOM_INIT_KAIMING_NORMAL_FAN_OUT = 5, /* N(0, 2/fan_out): torchvision's conv init
                                           (kaiming_normal_, mode='fan_out', relu) */
  LOOM_INIT_ZEROS = 6,
  LOOM_INIT_ONES = 7,
} loom_init;

/* In-place initializers (no autograd is recorded). For a convolution weight
 * [O, C/groups, KH, KW], PyTorch's fans are fan_in = C/groups*KH*KW and
 * fan_out = O*KH*KW. */
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

/* ---- convolutional layers ---------------------------------------------------- */
/* Conv2d: weight [out, in/groups, kh, kw], bias [out] when bias is true.
 * opt: stride, padding, dilation, groups (NULL: the defaults of
 * loom_conv2d_options_init); its act is ignored here (Sequential sets it
 * when a ReLU follows). The weight uses init (PyTorch's Conv2d default is LOOM_INIT_DEFAULT; ResNets
 * use LOOM_INIT_KAIMING_NORMAL_FAN_OUT); the bias U(±1/sqrt(fan_in)). */
LOOM_API loom_module *loom_conv2d_new(int64_t in_channels, int64_t out_channels, int64_t kernel_h, int64_t kernel_w,
                                      const loom_conv2d_options *opt, bool bias, loom_init init, loom_device dev);
/* BatchNorm2d over num_features channels: parameters weight (1) and bias
 * (0) when affine; buffers running_mean (0), running_var (1) and
 * num_batches_tracked (i64, 0-d) as in PyTorch. opt: momentum and eps
 * (NULL: the defaults of loom_batch_norm_options_init); training/eval
 * follows the module's mode. Statistics and parameters stay f32 under every
 * precision policy. */
LOOM_API loom_module *loom_batch_norm2d_new(int64_t num_features, const loom_batch_norm_options *opt, bool affine,
                                            loom_device dev);
LOOM_API loom_module *loom_max_pool2d_new(const loom_pool2d_options *opt);
LOOM_API loom_module *loom_avg_pool2d_new(const loom_pool2d_options *opt);
LOOM_API loom_module *loom_adaptive_avg_pool2d_new(int64_t out_h, int64_t out_w);
/* Identity in eval mode. */
LOOM_API loom_module *loom_dropout_new(double p);
LOOM_API loom_module *loom_flatten_new(int start_dim, int end_dim);
/* Switch the activation fused into a Linear, Conv2d or BatchNorm2d. */
LOOM_API loom_status loom_module_set_activation(loom_module *m, loom_activation act);

/* ---- residual networks ------------------------------------------------------- */
/* Append-only. */
typedef enum loom_resnet_shortcut {
  /* 1x1 convolution + BatchNorm where the shape changes (downsample.0/.1),
   * identity elsewhere: torchvision's, and the default. */
  LOOM_SHORTCUT_PROJECTION = 0,
  /* He et al.'s option A for CIFAR: the input subsampled by the stride and
   * zero-padded with channels, no parameters (done as a fixed 0/1 1x1
   * convolution that is not trained). */
  LOOM_SHORTCUT_ZERO_PAD = 1,
} loom_resnet_shortcut;

/* BasicBlock (two 3x3 convolutions) and Bottleneck (1x1, 3x3 with the
 * stride, 1x1 to 4*planes), each ending in relu(bn(conv(...)) + shortcut)
 * through loom_add_relu. A BasicBlock outputs planes channels. */
LOOM_API loom_module *loom_basic_block_new(int64_t in_channels, int64_t planes, int64_t stride,
                                           loom_resnet_shortcut shortcut, loom_device dev);
LOOM_API loom_module *loom_bottleneck_new(int64_t in_channels, int64_t planes, int64_t stride, loom_device dev);

/* Append-only. */
typedef enum loom_resnet_arch {
  /* CIFAR-style (He et al. 2016, section 4.2): 3x3 stem with 16 channels,
   * three stages of n BasicBlocks (16, 32, 64 channels), depth 6n+2. */
  LOOM_RESNET20 = 0,
  LOOM_RESNET32 = 1,
  LOOM_RESNET44 = 2,
  LOOM_RESNET56 = 3,
  LOOM_RESNET110 = 4,
  /* ImageNet-style (torchvision): 7x7/2 stem, 3x3/2 max pool, four stages. */
  LOOM_RESNET18 = 5,
  LOOM_RESNET34 = 6,
  LOOM_RESNET50 = 7,
  LOOM_RESNET101 = 8,
  LOOM_RESNET152 = 9,
} loom_resnet_arch;

typedef struct loom_resnet_options {
  size_t struct_size;         /* sizeof(loom_resnet_options) */
  int64_t in_channels;        /* 3 */
  int64_t num_classes;        /* 10 for CIFAR-style, 1000 for ImageNet-style */
  int32_t shortcut;           /* loom_resnet_shortcut: PROJECTION (CIFAR-style only; ImageNet-style
                                 networks always project) */
  int32_t memory_format;      /* loom_memory_format the forward converts its input to once: NCHW or
                                 NHWC (channels-last). NCHW by default. */
  bool zero_init_residual;    /* false: true zeroes each block's last BN weight (torchvision's option) */
  /* Appended (struct_size 48; a caller built before it passes 40 and gets 0).
   * int64_t rather than int32_t so that it lies past the old struct's tail
   * padding instead of inside it. Activation checkpointing: within each
   * stage (layer1, layer2, ...) every run of this many residual blocks is one
   * segment whose activations are recomputed in backward instead of kept
   * (loom_sequential_set_checkpoint_every on the stage; the last run of a
   * stage may be shorter). Gradients and batch norm running statistics are
   * those of the plain run; 0 (the default): off. Must be >= 0. */
  int64_t checkpoint_every;
} loom_resnet_options;

/* Sets struct_size and the defaults for arch (num_classes 10 or 1000 as
 * above). */
LOOM_API void loom_resnet_options_init(loom_resnet_options *o, loom_resnet_arch arch);
/* "resnet20", ..., "resnet152" -> arch; an error naming the choices otherwise. */
LOOM_API loom_status loom_resnet_parse(const char *name, loom_resnet_arch *out);
LOOM_API const char *loom_resnet_arch_name(loom_resnet_arch arch);
/* The network: forward takes [N, in_channels, H, W] (any H, W the stem
 * can reduce) and returns logits [N, num_classes]. Under a mixed precision
 * policy the input is cast to the compute dtype once, together with the
 * memory-format conversion. opt NULL: defaults. */
LOOM_API loom_module *loom_resnet_new(loom_resnet_arch arch, const loom_resnet_options *opt, loom_device dev);
/* Change the memory format the network converts its input to. */
LOOM_API loom_status loom_resnet_set_memory_format(loom_module *resnet, loom_memory_format f);

/* Split m's parameters for weight decay, depth first: decay gets the
 * weights of convolutions and linear layers, no_decay the parameters of
 * batch norms and every bias. Each array needs room for
 * loom_module_num_params(m) tensors (borrowed). */
LOOM_API loom_status loom_module_split_decay(const loom_module *m, loom_tensor **decay, int *n_decay,
                                             loom_tensor **no_decay, int *n_no_decay);

/* Options of loom_mlp_new_ex. */
typedef struct loom_mlp_options {
  size_t struct_size;  /* sizeof(loom_mlp_options) */
  /* Activation checkpointing: recompute every run of this many layers
   * (a hidden Linear+ReLU, or the output Linear) in backward instead of
   * keeping their activations (loom_sequential_set_checkpoint_every); 0 off. */
  int checkpoint_every;
} loom_mlp_options;
/* Sets struct_size and the defaults (0 below). */
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

/* ---- modules defined outside loom (user code, language bindings) ------------
 * A custom module is a named container whose forward is the caller's
 * function: register its parameters, buffers and sub-modules under local
 * names, and everything that walks modules works on it as on loom's own —
 * dotted names ("conv.weight"), optimizers, checkpoints, precision policies
 * (applied to the Linear / Conv2d modules inside), train/eval, activation
 * checkpointing, data parallelism.
 *
 * forward(user, m, x) runs inside a scope of its own: the tensors it makes
 * die when it returns, except its result (a new tensor, x itself, or a
 * tensor it borrows, such as a parameter), which loom_module_forward hands
 * to its caller by the ownership rule. On failure it returns NULL after
 * setting the error (loom_module_fail, or the failed loom call's). It may be
 * called again by backward when the module is checkpointed. destroy(user),
 * if not NULL, is called once when the module is freed. */
typedef loom_tensor *(*loom_module_forward_fn)(void *user, loom_module *m, loom_tensor *x);
LOOM_API loom_module *loom_module_new(const char *name, loom_module_forward_fn forward, void *user,
                                      void (*destroy)(void *user));
/* Register t as parameter / buffer `name` (no '.', shorter than 32 bytes,
 * unique within m) of custom module m; m takes its own reference. A
 * parameter should be an f32 leaf that requires grad (loom_set_requires_grad). */
LOOM_API loom_status loom_module_register_parameter(loom_module *m, const char *name, loom_tensor *t);
LOOM_API loom_status loom_module_register_buffer(loom_module *m, const char *name, loom_tensor *t);
/* Register child as sub-module `name` of custom module m, which owns it
 * from then on, also on failure (it takes m's train/eval mode); a child
 * whose tree holds m is refused and left to the caller. */
LOOM_API loom_status loom_module_register_module(loom_module *m, const char *name, loom_module *child);
/* For a forward function: set the error (code, message) and return NULL. */
LOOM_API loom_tensor *loom_module_fail(loom_status code, const char *message);

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

/* ---- precision policy (mixed precision, amp.h) ------------------------------- */

/* Apply a policy to m and everything under it. keep_last_fp32: the last
 * Linear (depth first; a ResNet's fc) runs in f32 with its f32 parameters, its input cast up
 * — the usual choice for the classifier layer. Setting FP32 drops the
 * low-precision copies. May be called again (e.g. to switch policy); do it
 * between steps, after the optimizer has stepped. */
LOOM_API loom_status loom_module_set_precision(loom_module *m, loom_precision p, bool keep_last_fp32);
LOOM_API loom_precision loom_module_get_precision(const loom_module *m);
/* Re-cast every master of m into its low-precision copy (after changing the
 * masters outside the optimizer). No-op under FP32. */
LOOM_API loom_status loom_module_refresh_lowp(loom_module *m);

LOOM_EXTERN_C_END
#endif
