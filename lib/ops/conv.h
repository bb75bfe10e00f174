/* conv.h (internal) — the conv2d op shared by its shape rule, kernels and
 * backward rule (autograd's): the integer attributes it carries in
 * loom_op_args.i, and the geometry every kernel derives from them.
 *
 * CONV2D:          in x [N,C,H,W], w [O,C/G,KH,KW], b [O] or NULL; out y.
 * CONV2D_BACKWARD: in gy, x, w, y (y only with ReLU: the mask is y > 0);
 *                  out dx (x's shape and format), dw (w's shape, contiguous),
 *                  db [O]; an output is skipped (NULL) when not asked for.
 * x, gy and y are NCHW-contiguous or channels-last (NHWC); both kernels
 * produce results in x's format. w may have any strides. */
#ifndef LOOM_OPS_CONV_H
#define LOOM_OPS_CONV_H

#include "ops/op.h"

/* Indices into loom_op_args.i (both ops). */
enum {
  LOOM_CONV_I_STRIDE_H = 0,
  LOOM_CONV_I_STRIDE_W = 1,
  LOOM_CONV_I_PAD_H = 2,
  LOOM_CONV_I_PAD_W = 3,
  LOOM_CONV_I_DIL_H = 4,
  LOOM_CONV_I_DIL_W = 5,
  LOOM_CONV_I_GROUPS = 6,
  LOOM_CONV_I_ACT = 7,
  /* backward only */
  LOOM_CONV_I_NEED_DX = 8,
  LOOM_CONV_I_NEED_DW = 9,
  LOOM_CONV_I_NEED_DB = 10,
  LOOM_CONV_I_GY_OWNED = 11, /* the kernel may overwrite gy (the engine owns it) */
};

typedef struct loom_conv_geom {
  int64_t N, C, H, W;      /* input */
  int64_t O, KH, KW;       /* weight: [O, C/G, KH, KW] */
  int64_t OH, OW;          /* output */
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t G, Cg, Og;       /* groups, channels per group in and out */
  bool nhwc;               /* x (and so y, gy, dx) is channels-last */
  int act;                 /* loom_activation */
} loom_conv_geom;

/* Validate x, w (and b) against the attributes in i[0..7] and fill g. On
 * failure: LOOM_ERR_SHAPE / LOOM_ERR_INVALID_ARG with a message naming op,
 * the shapes and what to change. */
loom_status loom_conv_geom_make(const char *op, const loom_tensor *x, const loom_tensor *w, const loom_tensor *b,
                                const int64_t *i, loom_conv_geom *g);

/* Multiply-adds of one forward pass (N*O*OH*OW*Cg*KH*KW). */
static inline double loom_conv_macs(const loom_conv_geom *g) {
  return (double)g->N * (double)g->O * (double)g->OH * (double)g->OW * (double)g->Cg * (double)g->KH * (double)g->KW;
}

loom_status loom_infer_conv2d(const char *opname, const loom_op_args *a, loom_out_spec *o);
loom_status loom_infer_conv2d_backward(const char *opname, const loom_op_args *a, loom_out_spec *o);

/* t's memory is laid out like x's (NCHW-contiguous or channels-last). Size-1
 * dims make both true at once: the memory is then the same either way. */
static inline bool loom_conv_same_layout(const loom_tensor *t, const loom_tensor *x) {
  return loom_tensor_memory_format(x) == LOOM_FORMAT_NHWC ? loom_tensor_is_channels_last(t) : loom_tensor_is_contiguous(t);
}

#ifdef LOOM_HAVE_CUDA
/* lib/ops/cuda/conv_cudnn.c: cuDNN 9; without cuDNN in the build they fail
 * with LOOM_ERR_UNSUPPORTED and say how to get it. */
loom_status loom_cuda_conv2d(loom_op_args *a);
loom_status loom_cuda_conv2d_backward(loom_op_args *a);

/* Tests and benchmarks. Force the fused forward (conv+bias+ReLU in one
 * cuDNN graph) onto its fallback: the plain convolution, then loom's bias
 * and ReLU kernels. Flip between calls. */
void loom_cuda_conv_force_unfused(bool on);
/* Tests: every plain pass (forward, backward-data, backward-filter) on
 * loom's im2col + GEMM path (conv_gemm_cuda.c), as if cuDNN had no engine
 * for it. Flip between calls. */
void loom_cuda_conv_force_gemm(bool on);
typedef struct loom_cuda_conv_stats {
  int64_t plans_built;    /* cuDNN plans built (cache misses) */
  int64_t plan_hits;      /* plans found in the cache */
  int64_t unsupported;    /* graphs no engine supports (remembered) */
  int64_t fused_runs;     /* forwards with bias/ReLU done inside the cuDNN graph */
  int64_t fallback_runs;  /* forwards with bias/ReLU done by loom's kernels */
  int64_t gemm_runs;      /* passes cuDNN had no engine for, run on the im2col + GEMM path */
} loom_cuda_conv_stats;
void loom_cuda_conv_stats_get(loom_cuda_conv_stats *out);
/* cudaMemGetInfo's free bytes on dev (to see allocations outside loom's allocator). */
loom_status loom_cuda_conv_mem_free(loom_device dev, size_t *free_bytes);
#endif

#endif
