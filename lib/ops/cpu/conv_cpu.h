/* conv_cpu.h (internal) — the CPU convolution paths behind conv_cpu.c. All
 * work in f32 on dense buffers in the tensor's own memory format
 * (g->nhwc): x [N][C][H][W] or [N][H][W][C], likewise y / dy / dx; the
 * weight in the canonical [O][C/G][KH][KW] order; bias [O] or NULL.
 * conv_cpu.c converts f16/bf16 to f32 and back around them.
 *
 * Threads: every function here may run several at once on different data;
 * each parallelises itself with OpenMP. */
#ifndef LOOM_OPS_CPU_CONV_CPU_H
#define LOOM_OPS_CPU_CONV_CPU_H

#include "ops/conv.h"

/* im2col / col2im on loom's built-in GEMM (any geometry; the general path).
 * y = act(conv(x, w) + b); dx = conv_transpose(dy, w) (dx overwritten);
 * dw = correlation of x and dy (dw overwritten). */
loom_status loom_conv_gemm_forward(const loom_conv_geom *g, const float *x, const float *w, const float *b, float *y);
loom_status loom_conv_gemm_backward_data(const loom_conv_geom *g, const float *dy, const float *w, float *dx);
loom_status loom_conv_gemm_backward_filter(const loom_conv_geom *g, const float *x, const float *dy, float *dw);

/* Apply bias and ReLU (g->act) to n pixels of y in place: NHWC rows of O
 * channels, or for NCHW one channel plane at a time (see the callers). */
void loom_conv_bias_act_rows(float *y, int64_t rows, int64_t O, const float *b, bool relu);
void loom_conv_bias_act_plane(float *y, int64_t n, float b, bool relu);

/* Force the im2col + GEMM path even where a direct kernel exists (tests and
 * benchmarks compare the two). Global; flip between calls. */
void loom_conv_cpu_force_gemm(bool on);
bool loom_conv_cpu_gemm_forced(void);

#endif
