/* conv_gemm_cuda.h (internal) — conv2d's passes on the GPU without cuDNN:
 * im2col + cuBLAS(Lt) GEMM (conv_gemm_cuda.c). conv_cudnn.c takes this path
 * for a pass cuDNN has no engine for (typically f32 without TF32, where
 * every tensor-core and down-converting engine is refused, or an operand
 * aligned to less than the engines need), in builds without cuDNN, and
 * when a test forces it (loom_cuda_conv_force_gemm). Computed in f32 (f16
 * and bf16 operands are widened, results rounded once) with no atomics:
 * deterministic, and as exact as cuBLAS's f32 GEMM (TF32 only when
 * loom_set_allow_tf32 allows it). Slow next to cuDNN: a fallback, not a
 * tuned path. Column buffers are taken per chunk of images (at most 64 MiB)
 * from the caching allocator. Operands as conv.h says (x, y, dy, dx in x's
 * layout; w any strides; dw contiguous). */
#ifndef LOOM_OPS_CUDA_CONV_GEMM_H
#define LOOM_OPS_CUDA_CONV_GEMM_H

#include "ops/conv.h"

loom_status loom_cuda_conv_gemm_forward(const loom_conv_geom *g, loom_tensor *x, loom_tensor *w, loom_tensor *y);
loom_status loom_cuda_conv_gemm_backward_data(const loom_conv_geom *g, loom_tensor *dy, loom_tensor *w,
                                              loom_tensor *dx);
loom_status loom_cuda_conv_gemm_backward_filter(const loom_conv_geom *g, loom_tensor *dy, loom_tensor *x,
                                                loom_tensor *dw);

#endif
