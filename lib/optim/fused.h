/* fused.h (internal) — the optimizers whose state lives beside the
 * parameters and whose step is one fused multi-tensor update per group
 * (optim_kernels.h), on the CPU or in one launch on the GPU: SGD (sgd.c)
 * and AdamW (adamw.c). fused.c holds what they share (the gather of the
 * parameters that have gradients, per-parameter update counts, mixed
 * precision copies, the CUDA step state); each kind adds its update and its
 * hyper-parameters. */
#ifndef LOOM_OPTIM_FUSED_H
#define LOOM_OPTIM_FUSED_H

#include "optim/optim_internal.h"

typedef struct loom_fused_optimizer loom_fused_optimizer;

/* What a kind does in a step. */
typedef struct loom_fused_update {
  const char *prof_name;  /* the profiler / NVTX range of a step ("sgd step") */
  /* CPU: one fused update of g (entries of group grp, every one of which has
   * had prior_steps updates). */
  loom_status (*cpu)(loom_fused_optimizer *f, loom_param_group *g, int64_t prior_steps, const loom_optim_group *grp);
#ifdef LOOM_HAVE_CUDA
  /* CUDA: one launch over the entries of every group (a: the device step
   * state and the groups; lr0 / wd0: group 0's). */
  loom_status (*cuda)(loom_fused_optimizer *f, loom_param_group *g, float lr0, float wd0, loom_opt_cuda_args *a);
#endif
} loom_fused_update;

struct loom_fused_optimizer {
  loom_optimizer base;            /* first: the generic code sees this */
  const loom_fused_update *update;
  int nbufs;                      /* state tensors per parameter (buf1, buf2) */
  /* Per-step gather arrays, allocated once (an optimizer is driven by one
   * thread at a time, so a step can reuse them). */
  struct {
    float **pp, **b1, **b2;
    const float **gp;
    int64_t *numel;
    uint16_t **lowp;
    const uint16_t **g16, **g16all; /* CPU: deferred 16-bit gradients, gathered / by parameter */
    int *idx;
    int *grp;  /* CUDA: the group of each gathered entry */
  } scratch;
  int scratch_cap;
  /* CUDA: where the gather of the copies' gradients keeps its work list. */
  struct loom_dev_table *gather_table;
};

/* A new optimizer of `size` bytes (a struct that starts with
 * loom_fused_optimizer) over params, zeroed but for the header: the
 * parameters are checked, no group is added yet. NULL + error. */
loom_fused_optimizer *loom_fused_new(size_t size, const loom_optimizer_vtable *vt, const loom_fused_update *update,
                                     loom_tensor *const *params, int n, double lr);
/* Add the creation group (with f->nbufs set): f, or NULL after freeing it. */
loom_optimizer *loom_fused_first_group(loom_fused_optimizer *f, loom_tensor *const *params, int n, double lr,
                                       double wd);

/* Interface entries the kinds share. */
loom_status loom_fused_step(loom_optimizer *o, const int32_t *skip);
loom_status loom_fused_zero_grad(loom_optimizer *o);
loom_status loom_fused_add_group(loom_optimizer *o, loom_tensor *const *params, int n, double lr, double wd);
void loom_fused_free(loom_optimizer *o);

#endif
