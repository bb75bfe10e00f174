/* amp.h — mixed precision: the precision policy of a model and the dynamic
 * loss scaler (docs/design.md §6).
 *
 * Policy. loom_module_set_precision(model, LOOM_PRECISION_MIXED_FP16, ...)
 * makes every Linear and Conv2d of the model run its GEMM / convolution with
 * f16 (or bf16) operands and f32 accumulation; activations between layers
 * stay in the compute dtype; batch norm keeps f32 parameters and running
 * statistics and computes its statistics in f32; losses (cross-entropy),
 * softmax and reductions compute in f32; the optimizer works on f32. The
 * casts are inserted by the policy: the user feeds f32 inputs (a ResNet casts
 * its input once, at the top) and gets logits in the compute dtype (or f32
 * when the last layer is kept in f32).
 *
 * Master weights. loom_module_param() keeps returning the f32 parameters
 * ("masters"); hand those to the optimizer as usual. Under a mixed policy
 * each master owns a low-precision copy that the forward pass uses. Backward
 * produces the copy's (low-precision, possibly loss-scaled) gradient; the
 * optimizer step (or loom_scaler_step) turns it into the master's f32
 * gradient, updates the master, and refreshes the copy inside the same fused
 * update. Nothing re-casts the weights on every use. If you change masters
 * yourself (loading a checkpoint, re-initializing), call
 * loom_module_refresh_lowp().
 *
 * Loss scaling (needed for f16, whose gradients underflow; bf16 has f32's
 * range and usually runs with the scaler disabled):
 *
 *     loss = loom_cross_entropy(loom_module_forward(model, x), y);
 *     loom_optimizer_zero_grad(opt);
 *     loom_backward(loom_scaler_scale(scaler, loss));
 *     loom_scaler_step(scaler, opt, &skipped);  // unscale + inf check + step + update
 *
 * loom_scaler_step makes one pass over all gradients that multiplies them by
 * 1/scale into the f32 master gradients and checks that every value is
 * finite (one multi-tensor kernel on the GPU, the found-inf flag read once).
 * On inf/NaN the optimizer step is skipped: parameters, low-precision copies
 * and optimizer state stay bit-identical, and the scale is multiplied by
 * backoff_factor. After growth_interval consecutive good steps it is
 * multiplied by growth_factor. The scale stays within [min_scale, max_scale].
 *
 * The entries that take a model or an optimizer are declared with them:
 * loom_module_set_precision, loom_module_get_precision and
 * loom_module_refresh_lowp in nn.h; loom_scaler_unscale and loom_scaler_step
 * in optim.h (<loom/loom.h> has them all).
 *
 * Ownership: the scaler is owned by the caller (loom_scaler_free). Tensors
 * follow tensor.h's rule.
 *
 * Threads: a scaler and a model are used by one thread at a time. */
#ifndef LOOM_AMP_H
#define LOOM_AMP_H

#include "tensor.h"

LOOM_EXTERN_C_BEGIN

/* ---- precision policy ------------------------------------------------------ */

/* Append-only. */
typedef enum loom_precision {
  LOOM_PRECISION_FP32 = 0,
  LOOM_PRECISION_MIXED_FP16 = 1,
  LOOM_PRECISION_MIXED_BF16 = 2,
} loom_precision;

/* "fp32" / "f32", "fp16" / "mixed-fp16" / "f16", "bf16" / "mixed-bf16". */
LOOM_API loom_status loom_precision_parse(const char *text, loom_precision *out);
/* "fp32", "mixed-fp16", "mixed-bf16" ("?" if invalid). */
LOOM_API const char *loom_precision_name(loom_precision p);
/* The dtype matmuls run in under p (f32, f16 or bf16). */
LOOM_API loom_dtype loom_precision_compute_dtype(loom_precision p);

/* The low-precision copy of an f32 master parameter under a mixed policy
 * (borrowed), or NULL when it has none (FP32 policy, or a kept-f32 layer). */
LOOM_API loom_tensor *loom_amp_lowp_copy(const loom_tensor *master);

/* ---- dynamic loss scaler ---------------------------------------------------- */

typedef struct loom_grad_scaler loom_grad_scaler;

typedef struct loom_scaler_options {
  size_t struct_size;       /* sizeof(loom_scaler_options) */
  double init_scale;        /* 65536 (2^16) */
  double growth_factor;     /* 2.0 (> 1) */
  double backoff_factor;    /* 0.5 (in (0, 1)) */
  int64_t growth_interval;  /* 2000 consecutive good steps (>= 1) */
  double min_scale;         /* 1.0: backoff never goes below (> 0) */
  double max_scale;         /* 2^24: growth never goes above (>= min_scale) */
  bool enabled;             /* true; false: scale() multiplies by 1 and step() just steps */
} loom_scaler_options;

/* Sets struct_size and every default (noted beside each field). */
LOOM_API void loom_scaler_options_init(loom_scaler_options *o);
/* opt NULL: defaults. NULL and an error on bad options. */
LOOM_API loom_grad_scaler *loom_scaler_new(const loom_scaler_options *opt);
LOOM_API void loom_scaler_free(loom_grad_scaler *s);

/* loss * scale, as an op (autograd carries it back). */
LOOM_API loom_tensor *loom_scaler_scale(loom_grad_scaler *s, loom_tensor *loss);
LOOM_API double loom_scaler_get_scale(const loom_grad_scaler *s);
LOOM_API int64_t loom_scaler_steps(const loom_grad_scaler *s);          /* step() calls */
LOOM_API int64_t loom_scaler_steps_skipped(const loom_grad_scaler *s);
/* 0-based index (among step() calls) of the last overflow, -1 if none. */
LOOM_API int64_t loom_scaler_last_overflow_step(const loom_grad_scaler *s);
/* Consecutive good steps since the last overflow or growth. */
LOOM_API int64_t loom_scaler_good_steps(const loom_grad_scaler *s);

/* Everything that evolves, to put in a checkpoint. Options are not part of
 * it (they are the program's configuration). */
typedef struct loom_scaler_state {
  size_t struct_size;       /* sizeof(loom_scaler_state) */
  double scale;
  int64_t good_steps;
  int64_t steps;
  int64_t steps_skipped;
  int64_t last_overflow_step;
} loom_scaler_state;

/* out->struct_size must be set by the caller. A smaller (older) state given
 * to restore leaves the fields it lacks unchanged. */
LOOM_API loom_status loom_scaler_state_save(const loom_grad_scaler *s, loom_scaler_state *out);
LOOM_API loom_status loom_scaler_state_restore(loom_grad_scaler *s, const loom_scaler_state *st);

LOOM_EXTERN_C_END
#endif
