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
 * passes): the first that applies of Winograd, depthwise, direct, 1x1 and
 * im2col + GEMM, which takes every valid geometry. */
typedef enum loom_conv_path {
  LOOM_CONV_PATH_DEPTHWISE,
  LOOM_CONV_PATH_DIRECT,
  LOOM_CONV_PATH_POINTWISE,
  LOOM_CONV_PATH_GEMM,
  LOOM_CONV_PATH_WINOGRAD,
} loom_conv_path;
#define LOOM_CONV_NPATHS (LOOM_CONV_PATH_WINOGRAD + 1)
loom_conv_path loom_conv_cpu_choose(const loom_conv_geom *g);
const char *loom_conv_path_name(loom_conv_path p);

/* im2col / col2im on loom's built-in GEMM (any geometry; the general path).
 * y = act(conv(x, w) + b); dx = conv_transpose(dy, w) (dx overwritten);
 * dw = correlation of x and dy (dw overwritten). */
loom_status loom_conv_gemm_forward(const loom_conv_geom *g, const float *x, const float *w, const float *b, float *y);
loom_status loom_conv_gemm_backward_data(const loom_conv_geom *g, const float *dy, const float *w, float *dx);
loom_status loom_conv_gemm_backward_filter(const loom_conv_geom *g, const float *x, const float *dy, float *dw);

/* An activation-sized operand of the direct kernels (x, y, dy, dx): dense,
 * in its tensor's memory order, f32, f16 or bf16. The kernels widen f16/bf16
 * one image at a time while copying it into their per-thread buffers and
 * round results one image at a time while they are in cache: the values of
 * widening the whole tensor to f32 first and rounding the whole result once
 * (f32 holds every f16/bf16 value exactly; rounding is per element), without
 * full-size f32 copies and the passes over memory they cost. */
typedef struct loom_conv_buf {
  void *p;
  loom_dtype dt;
} loom_conv_buf;
static inline loom_conv_buf loom_conv_buf_f32(const float *p) { return (loom_conv_buf){(void *)p, LOOM_F32}; }

/* Direct AVX-512 / AVX2 kernels (conv_direct.c): same contracts as the GEMM
 * path, any channel count, x / y / dy / dx of any float dtype (above).
 * loom_conv_direct_applies says whether they run here (CPU support, group
 * widths, kernel size, and not forced off). */
bool loom_conv_direct_applies(const loom_conv_geom *g);
loom_status loom_conv_direct_forward(const loom_conv_geom *g, loom_conv_buf x, const float *w, const float *b,
                                     loom_conv_buf y);
loom_status loom_conv_direct_backward_data(const loom_conv_geom *g, loom_conv_buf dy, const float *w, loom_conv_buf dx);
loom_status loom_conv_direct_backward_filter(const loom_conv_geom *g, loom_conv_buf x, loom_conv_buf dy, float *dw);

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

/* Winograd F(4x4, 3x3) or F(2x2, 3x3) (conv_winograd.c): NHWC, groups 1, 3x3, stride 1,
 * padding 1, dilation 1, channel counts multiples of 16 up to 128, AVX-512
 * or AVX2 (the direct kernels' instruction set); same contracts as the
 * direct kernels (activations of any float dtype, widened and rounded as
 * they are read and written). On by default where it applies, with 4x4
 * output tiles; LOOM_CONV_WINOGRAD=0 / 2 / 4 in the environment (read
 * once) or loom_conv_cpu_set_winograd(0 / 2 / 4) (public:
 * loom_set_cpu_winograd) turns it off or picks the tile (tests and benchmarks compare them with the direct kernels).
 * Global; flip between calls. */
bool loom_conv_winograd_applies(const loom_conv_geom *g);
bool loom_conv_cpu_set_winograd(int tile); /* 0 off; 2: F(2x2, 3x3); 4 (default): F(4x4, 3x3); else false */
int loom_conv_cpu_winograd_tile(void);
bool loom_conv_cpu_winograd_enabled(void);
/* Tests: "emu16" runs the AVX-512 kernels' code on 16-lane generic vectors
 * in place of the instruction set's kernels (any AVX2 CPU; false, changing
 * nothing, without AVX2), NULL the real ones again. */
bool loom_conv_winograd_test_kernels(const char *name);
loom_status loom_conv_winograd_forward(const loom_conv_geom *g, loom_conv_buf x, const float *w, const float *b,
                                       loom_conv_buf y);
loom_status loom_conv_winograd_backward_data(const loom_conv_geom *g, loom_conv_buf dy, const float *w,
                                             loom_conv_buf dx);
loom_status loom_conv_winograd_backward_filter(const loom_conv_geom *g, loom_conv_buf x, loom_conv_buf dy, float *dw);

/* Depthwise kernels (conv_depthwise.c): groups == C == O; AVX-512 only. */
bool loom_conv_depthwise_applies(const loom_conv_geom *g);
loom_status loom_conv_depthwise_forward(const loom_conv_geom *g, const float *x, const float *w, const float *b,
                                        float *y);
loom_status loom_conv_depthwise_backward_data(const loom_conv_geom *g, const float *dy, const float *w, float *dx);
loom_status loom_conv_depthwise_backward_filter(const loom_conv_geom *g, const float *x, const float *dy, float *dw);

/* bf16 operands on the AVX512_BF16 GEMM (conv_bf16.c): NHWC, groups 1,
 * x / w (and dy, and y under a fused ReLU) bf16, outputs bf16 or f32, the
 * instruction set avx512bf16 exactly (cpu_isa.h; under amxbf16 they widen).
 * They take the op's tensors directly (no f32 copies); conv_cpu.c calls
 * them before the f32 paths. */
bool loom_conv_bf16_applies(const loom_conv_geom *g, const loom_op_args *a, bool backward);
loom_status loom_conv_bf16_forward(const loom_conv_geom *g, const loom_op_args *a);
loom_status loom_conv_bf16_backward(const loom_conv_geom *g, loom_op_args *a);

/* conv_layout.c. Copy one image (NCHW [C][H][W] or NHWC [H][W][C]) into the
 * interior of a zeroed padded channels-last buffer [.][Wp][Cp] at (ph, pw);
 * padding and channels past C are left as they are (zero). */
void loom_conv_fill_padded(const float *x, bool nhwc, int64_t C, int64_t H, int64_t W, float *buf, int64_t Wp,
                           int64_t Cp, int64_t ph, int64_t pw);
/* The same from image `img` (C*H*W elements each) of a dense tensor of any
 * float dtype: f16/bf16 widened on the way (NCHW through tmp, C*H*W floats;
 * NHWC straight into buf). */
void loom_conv_fill_padded_buf(loom_conv_buf x, int64_t img, bool nhwc, int64_t C, int64_t H, int64_t W, float *buf,
                               int64_t Wp, int64_t Cp, int64_t ph, int64_t pw, float *tmp);
/* Image `img` (n elements each) of x as f32: x's own memory when f32, else
 * widened into tmp (n floats). */
const float *loom_conv_image_f32(loom_conv_buf x, int64_t img, int64_t n, float *tmp);
/* Image `img` of y (P pixels x C channels) from its f32 pixel rows rows
 * [P][C]: NCHW transposed (through tmp, P*C floats, when y is not f32),
 * rounded to y's dtype. Nothing to do for an f32 NHWC y the kernels wrote
 * in place (rows is y's own memory). */
void loom_conv_store_image(loom_conv_buf y, int64_t img, bool nhwc, int64_t P, int64_t C, const float *rows,
                           float *tmp);
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
