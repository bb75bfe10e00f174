/* optim_launch.h (internal) — the boundary between the C side of the fused
 * optimizer steps on the GPU (optim_cuda.c) and their device code
 * (optim.cu): plain C types only, as ops/cuda/cuda_launch.h is for the op
 * kernels, so the .cu file includes no loom internal header that C++ cannot
 * parse. The launcher returns the launch's cudaError_t. */
#ifndef LOOM_OPTIM_CUDA_OPTIM_LAUNCH_H
#define LOOM_OPTIM_CUDA_OPTIM_LAUNCH_H

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "optim/lr_eval.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fused multi-tensor optimizer updates: one launch for every tensor listed
 * in the device array `tensors` (n entries). The table holds only what
 * stays the same from step to step (parameters, state buffers, copies,
 * chunk map), so it stays in device memory and is re-uploaded only when
 * that changes. The gradients — new tensors every step (zero_grad lets go
 * of them) — travel by value as kernel arguments, at most
 * LOOM_CU_OPT_GRADS_PER_LAUNCH per launch (more: several launches): a
 * captured graph bakes the gradients of the step it captured into its own
 * launches, and no eager step ever needs a new table for new gradients. */
typedef struct loom_cu_opt_tensor {
  float *param;
  float *buf1;
  float *buf2;
  uint16_t *lowp;
  int64_t numel;
  int64_t first_chunk;  /* index of this tensor's first chunk in the step's grid */
  int64_t pidx;         /* the parameter's index in the optimizer (its update count) */
  int64_t group;        /* its parameter group: lr and weight decay from h.group_lr/group_wd */
} loom_cu_opt_tensor;

/* 256 pointers: 2 KiB of the 4 KiB of kernel arguments every GPU takes. */
#define LOOM_CU_OPT_GRADS_PER_LAUNCH 256

/* Device-resident step state, so that no step needs the host to know
 * whether the previous one was taken (the loss scaler decides on the GPU):
 * per-parameter update counts (first SGD step, AdamW bias corrections),
 * AdamW's bias corrections 1 - beta^t tabulated by the host with the CPU's
 * exact expression for t = 1..bc_len (beyond: computed on the device), and
 * an optional skip flag: when *skip != 0 the update and the count commit
 * do nothing (parameters, copies, moments and counts stay bit-identical). */
typedef struct loom_cu_opt_dev {
  int64_t *counts;      /* [n_params + 1]: per parameter, then the optimizer's step count */
  int64_t n_params;
  const float *bc1, *bc2;
  int64_t bc_len;
  double beta1, beta2;
  const int32_t *skip;  /* NULL: never skip */
  /* An attached LR schedule: every group's lr is sched's value at
   * counts[n_params + 1], which the commit advances every step (skipped or
   * not, like a host-side scheduler). has_sched 0: h.group_lr. */
  int has_sched;
  loom_lr_params sched;
} loom_cu_opt_dev;

#define LOOM_CU_OPT_MAX_GROUPS 8
typedef struct loom_cu_opt_hparams {
  int kind;             /* 0: SGD, 1: AdamW */
  int lowp_bf16;        /* lowp copies are bf16 (else f16) */
  float lr, momentum, dampening, weight_decay;
  int nesterov, first_step;
  float beta1, beta2, eps, bias_correction1, bias_correction2;
  /* Per parameter group (the table's entries name theirs); lr and
   * weight_decay above are unused by the kernel. By value: a schedule's new
   * lr every step changes no device memory. */
  float group_lr[LOOM_CU_OPT_MAX_GROUPS], group_wd[LOOM_CU_OPT_MAX_GROUPS];
} loom_cu_opt_hparams;

#define LOOM_CU_OPT_CHUNK 4096  /* elements per block */
/* The update, then (stream-ordered) the count commit: counts[pidx] += 1 for
 * every listed tensor and counts[n_params] += 1, unless *skip; and
 * counts[n_params + 1] += 1 with a schedule, always. host_tensors: the
 * host image of `tensors` (its chunk map splits the launches); grads[i]:
 * entry i's gradient (host array of device pointers, read before return). */
cudaError_t loom_cu_optim_step(const loom_cu_opt_tensor *tensors, const loom_cu_opt_tensor *host_tensors,
                               const float *const *grads, int n, int64_t total_chunks, loom_cu_opt_hparams h,
                               loom_cu_opt_dev d, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
