/* conv_cpu.h (internal) — the CPU convolution paths behind conv_cpu.c. All
 * work in f32 on dense buffers in the tensor's own memory format
 * (g->nhwc): x [N][C][H][W] or [N][H][W][C], likewise y / dy / dx; the
 * weight in the canonical [O][C/G][KH][KW] order; bias [O] or NULL.
 * conv_cpu.c converts f16/bf16 to f32 and back around them — except the
 * bf16 path (conv_bf16.c), which takes bf16 tensors as they are.
 *
 * Threads: every function here may run several at once on different data;
 * each parallelises itself with OpenMP. */
#ifndef LOOM_OPS_CPU_CONV_CPU_H
#define LOOM_OPS_CPU_CONV_CPU_H

#include "ops/conv.h"

/* The paths below, and the one conv_cpu.c runs for g (the same for all three
 * passes): the first that applies of depthwise, direct, 1x1 and im2col +
 * GEMM, which takes every valid geometry. */
typedef enum loom_conv_path {
  LOOM_CONV_PATH_DEPTHWISE,
  LOOM_CONV_PATH_DIRECT,
  LOOM_CONV_PATH_POINTWISE,
  LOOM_CONV_PATH_GEMM,
} loom_conv_path;
loom_conv_path loom_conv_cpu_choose(const loom_conv_geom *g);
const char *loom_conv_path_name(loom_conv_path p);

/* im2col / col2im on loom's built-in GEMM (any geometry; the general path).
 * y = act(conv(x, w) + b); dx = conv_transpose(dy, w) (dx overwritten);
 * dw = correlation of x and dy (dw overwritten). */
loom_status loom_conv_gemm_forward(const loom_conv_geom *g, const float *x, const float *w, const float *b, float *y);
loom_status loom_conv_gemm_backward_data(const loom_conv_geom *g, const float *dy, const float *w, float *dx);
loom_status loom_conv_gemm_backward_filter(const loom_conv_geom *g, const float *x, const float *dy, float *dw);

/* Direct AVX-512 / AVX2 kernels (conv_direct.c): same contracts as the GEMM
 * path, any channel count. loom_conv_direct_applies says whether they run
 * here (CPU support, group widths, kernel size, and not forced off). */
bool loom_conv_direct_applies(const loom_conv_geom *g);
loom_status loom_conv_direct_forward(const loom_conv_geom *g, const float *x, const float *w, const float *b, float *y);
loom_status loom_conv_direct_backward_data(const loom_conv_geom *g, const float *dy, const float *w, float *dx);
loom_status loom_conv_direct_backward_filter(const loom_conv_geom *g, const float *x, const float *dy, float *dw);

/* Which instruction set the direct kernels use: "avx512", "avx2", "none"
 * (no direct or depthwise kernels: the dispatch of a CPU without AVX2, i.e.
 * the 1x1 and im2col + GEMM paths), or NULL to follow the CPU kernels'
 * instruction set (cpu_isa.h; "scalar" there is "none" here); tests cover
 * each the machine has. Returns false, changing nothing, when
 * the CPU cannot run it. Global; flip between calls. loom_conv_cpu_isa_name:
 * "avx512", "avx2" or "none". */
bool loom_conv_cpu_select_isa(const char *name);
const char *loom_conv_cpu_isa_name(void);

/* 1x1 kernels as GEMMs over the (strided) output pixels (conv_pointwise.c):
 * kernel 1x1, groups 1, padding 0, any stride; same contracts as the GEMM
 * path. conv_cpu.c runs them where no direct kernel does: they beat im2col +
 * GEMM on most 1x1 shapes measured, but not the AVX-512 direct kernels
 * (bench/results/conv-pointwise-cpu-2026-11-23.md).
 * loom_conv_pointwise_applies: the geometry fits and the GEMM path is not
 * forced. */
bool loom_conv_pointwise_applies(const loom_conv_geom *g);
loom_status loom_conv_pointwise_forward(const loom_conv_geom *g, const float *x, const float *w, const float *b,
                                        float *y);
loom_status loom_conv_pointwise_backward_data(const loom_conv_geom *g, const float *dy, const float *w, float *dx);
loom_status loom_conv_pointwise_backward_filter(const loom_conv_geom *g, const float *x, const float *dy, float *dw);

/* Depthwise kernels (conv_depthwise.c): groups == C == O; AVX-512 only. */
bool loom_conv_depthwise_applies(const loom_conv_geom *g);
loom_status loom_conv_depthwise_forward(const loom_conv_geom *g, const float *x, const float *w, const float *b,
                                        float *y);
loom_status loom_conv_depthwise_backward_data(const loom_conv_geom *g, const float *dy, const float *w, float *dx);
loom_status loom_conv_depthwise_backward_filter(const loom_conv_geom *g, const float *x, const float *dy, float *dw);

/* bf16 operands on the AVX512_BF16 GEMM (conv_bf16.c): NHWC, groups 1,
 * x / w (and dy, and y under a fused ReLU) bf16, outputs bf16 or f32, the
 * instruction set avx512bf16 (cpu_isa.h). They take the op's tensors
 * directly (no f32 copies); conv_cpu.c calls them before the f32 paths. */
bool loom_conv_bf16_applies(const loom_conv_geom *g, const loom_op_args *a, bool backward);
loom_status loom_conv_bf16_forward(const loom_conv_geom *g, const loom_op_args *a);
loom_status loom_conv_bf16_backward(const loom_conv_geom *g, loom_op_args *a);

/* conv_layout.c. Copy one image (NCHW [C][H][W] or NHWC [H][W][C]) into the
 * interior of a zeroed padded channels-last buffer [.][Wp][Cp] at (ph, pw);
 * padding and channels past C are left as they are (zero). */
void loom_conv_fill_padded(const float *x, bool nhwc, int64_t C, int64_t H, int64_t W, float *buf, int64_t Wp,
                           int64_t Cp, int64_t ph, int64_t pw);
/* dst [C][P] (one image's NCHW planes) = the first C channels of src [P][ld]. */
void loom_conv_store_planes(float *dst, const float *src, int64_t P, int64_t C, int64_t ld);
/* dst [P][C] = src [C][P]. */
void loom_conv_load_planes(float *dst, const float *src, int64_t P, int64_t C);
/* 64-byte aligned floats (n rounded up to a multiple of 16); free() it. */
float *loom_conv_alloc_f(int64_t n);

/* Apply bias and ReLU (g->act) to n pixels of y in place: NHWC rows of O
 * channels, or for NCHW one channel plane at a time (see the callers). */
void loom_conv_bias_act_rows(float *y, int64_t rows, int64_t O, const float *b, bool relu);
void loom_conv_bias_act_plane(float *y, int64_t n, float b, bool relu);

/* Force the im2col + GEMM path even where a direct, depthwise or 1x1 kernel
 * exists (tests and benchmarks compare the two). Global; flip between calls. */
void loom_conv_cpu_force_gemm(bool on);
bool loom_conv_cpu_gemm_forced(void);

#endif
