/* conv_depthwise.c — depthwise convolution (groups == C == O: one filter per
 * channel) on the CPU. There is no reduction over channels, so a GEMM would
 * multiply 1 x KH*KW by KH*KW x pixels per channel; instead every loop here
 * runs over 16 channels at a time in AVX-512 registers, on the same padded
 * channels-last per-image copies as the direct kernels (conv_layout.c):
 *   forward:         y[p][c]  = act(b[c] + sum_t x[p + t][c] * w[c][t]),
 *                    8 pixels per register tile;
 *   backward-data:   dx[p + t][c] += dy[p][c] * w[c][t], scattered into a
 *                    padded image, then cropped (any stride, no phases);
 *   backward-filter: dw[c][t] = sum_p dy[p][c] * x[p + t][c], per chunk of
 *                    images (fixed chunks: no dependence on threads).
 * Threads: images are split between threads. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "loom/ops.h"
#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/conv_direct_kern.h"
#include "core/sys.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define VL 16
#define PX 8        /* pixels per forward tile */
#define DW_CHUNKS 8

static inline int64_t ru16(int64_t v) { return (v + VL - 1) / VL * VL; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline __mmask16 lanes(int64_t n) { return n >= VL ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u); }

static int cpu_ok(void) {
  static int cached = -1;
  if (cached < 0) {
    __builtin_cpu_init();
    cached = __builtin_cpu_supports("avx512f");
  }
  return cached;
}

bool loom_conv_depthwise_applies(const loom_conv_geom *g) {
  return cpu_ok() && !strcmp(loom_conv_cpu_isa_name(), "avx512") && !loom_conv_cpu_gemm_forced() && g->G > 1 && g->Cg == 1 && g->Og == 1 &&
         g->KH * g->KW <= LOOM_CONV_MAX_TAPS;
}

static int threads_for(int64_t work) {
  int nt = loom_get_num_threads();
  if (nt < 1) nt = 1;
  if (nt > work) nt = (int)(work > 0 ? work : 1);
  return nt;
}

/* w [C][1][KH][KW] -> [T][Cp] (zero past C). */
static float *pack_taps(const float *w, int64_t C, int64_t T, int64_t Cp) {
  float *p = loom_conv_alloc_f(T * Cp);
  if (!p) return NULL;
  memset(p, 0, (size_t)(T * Cp) * sizeof(float));
  for (int64_t c = 0; c < C; c++)
    for (int64_t t = 0; t < T; t++) p[t * Cp + c] = w[c * T + t];
  return p;
}

/* One output row segment of up to PX pixels x one 16-channel vector. */
__attribute__((target("avx512f"))) static void dw_fwd_tile(const float *x, int64_t xps, const int64_t *xoff,
                                                          const float *wt, int64_t wts, int64_t T, int n, float *y,
                                                          int64_t yps, __mmask16 m, const float *b, bool relu) {
  __m512 acc[PX];
  const __m512 bias = b ? _mm512_maskz_loadu_ps(m, b) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int i = 0; i < PX; i++) acc[i] = bias;
  for (int64_t t = 0; t < T; t++) {
    const __m512 wv = _mm512_load_ps(wt + t * wts);
    const float *xp = x + xoff[t];
#pragma GCC unroll 8
    for (int i = 0; i < PX; i++)
      if (i < n) acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(xp + i * xps), wv, acc[i]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < PX; i++) {
    if (i >= n) break;
    __m512 v = relu ? _mm512_max_ps(acc[i], _mm512_setzero_ps()) : acc[i];
    _mm512_mask_storeu_ps(y + i * yps, m, v);
  }
}

loom_status loom_conv_depthwise_forward(const loom_conv_geom *g, const float *x, const float *w, const float *b,
                                        float *y) {
  const int64_t C = g->C, T = g->KH * g->KW, Cp = ru16(C), Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;
  const int64_t P = g->OH * g->OW, xfl = Hp * Wp * Cp + 64;
  int nt = threads_for(g->N);
  const int64_t per = ru16(xfl + (g->nhwc ? 0 : P * C));  /* keeps every thread's buffer 64-byte aligned */
  float *wt = pack_taps(w, C, T, Cp), *bufs = loom_conv_alloc_f(nt * per);
  if (!wt || !bufs) {
    loom_sys_free(wt), loom_sys_free(bufs);
    return loom_set_error(LOOM_ERR_OOM, "conv2d: out of host memory for the depthwise buffers");
  }
  int64_t xoff[LOOM_CONV_MAX_TAPS];
  for (int64_t t = 0; t < T; t++) xoff[t] = ((t / g->KW) * g->dh * Wp + (t % g->KW) * g->dw) * Cp;
  const bool relu = g->act == LOOM_ACT_RELU;
#pragma omp parallel num_threads(nt)
  {
    float *xin = bufs + omp_get_thread_num() * per, *ytmp = xin + xfl;
    memset(xin, 0, (size_t)xfl * sizeof(float));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g->N; n++) {
      loom_conv_fill_padded(x + n * C * g->H * g->W, g->nhwc, C, g->H, g->W, xin, Wp, Cp, g->ph, g->pw);
      float *yimg = g->nhwc ? y + n * P * C : ytmp;
      for (int64_t oh = 0; oh < g->OH; oh++)
        for (int64_t ow = 0; ow < g->OW; ow += PX)
          for (int64_t c0 = 0; c0 < C; c0 += VL)
            dw_fwd_tile(xin + (oh * g->sh * Wp + ow * g->sw) * Cp + c0, g->sw * Cp, xoff, wt + c0, Cp, T,
                        (int)min64(PX, g->OW - ow), yimg + (oh * g->OW + ow) * C + c0, C, lanes(C - c0),
                        b ? b + c0 : NULL, relu);
      if (!g->nhwc) loom_conv_store_planes(y + n * C * P, ytmp, P, C, C);
    }
  }
  loom_sys_free(wt);
  loom_sys_free(bufs);
  return LOOM_OK;
}

__attribute__((target("avx512f"))) static void dw_bwd_data_image(const loom_conv_geom *g, const float *dyimg,
                                                                const float *wt, int64_t Cp, int64_t Wp,
                                                                const int64_t *xoff, float *dxpad) {
  const int64_t C = g->C, T = g->KH * g->KW;
  for (int64_t oh = 0; oh < g->OH; oh++)
    for (int64_t ow = 0; ow < g->OW; ow++) {
      const float *dp = dyimg + (oh * g->OW + ow) * C;
      float *base = dxpad + (oh * g->sh * Wp + ow * g->sw) * Cp;
      for (int64_t c0 = 0; c0 < C; c0 += VL) {
        const __m512 dv = _mm512_maskz_loadu_ps(lanes(C - c0), dp + c0);
        for (int64_t t = 0; t < T; t++) {
          float *q = base + xoff[t] + c0;
          _mm512_store_ps(q, _mm512_fmadd_ps(dv, _mm512_load_ps(wt + t * Cp + c0), _mm512_load_ps(q)));
        }
      }
    }
}

loom_status loom_conv_depthwise_backward_data(const loom_conv_geom *g, const float *dy, const float *w, float *dx) {
  const int64_t C = g->C, T = g->KH * g->KW, Cp = ru16(C), Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;
  const int64_t P = g->OH * g->OW, HW = g->H * g->W, xfl = Hp * Wp * Cp;
  int nt = threads_for(g->N);
  const int64_t per = ru16(xfl + (g->nhwc ? 0 : P * C + HW * C));  /* keeps every thread's buffer 64-byte aligned */
  float *wt = pack_taps(w, C, T, Cp), *bufs = loom_conv_alloc_f(nt * per);
  if (!wt || !bufs) {
    loom_sys_free(wt), loom_sys_free(bufs);
    return loom_set_error(LOOM_ERR_OOM, "conv2d backward: out of host memory for the depthwise buffers");
  }
  int64_t xoff[LOOM_CONV_MAX_TAPS];
  for (int64_t t = 0; t < T; t++) xoff[t] = ((t / g->KW) * g->dh * Wp + (t % g->KW) * g->dw) * Cp;
#pragma omp parallel num_threads(nt)
  {
    float *dxpad = bufs + omp_get_thread_num() * per, *dytmp = dxpad + xfl, *dxtmp = dytmp + P * C;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g->N; n++) {
      memset(dxpad, 0, (size_t)xfl * sizeof(float));
      const float *dyimg = dy + n * P * C;
      if (!g->nhwc) {
        loom_conv_load_planes(dytmp, dyimg, P, C);
        dyimg = dytmp;
      }
      dw_bwd_data_image(g, dyimg, wt, Cp, Wp, xoff, dxpad);
      /* Crop the padding away. */
      float *dximg = g->nhwc ? dx + n * HW * C : dxtmp;
      for (int64_t ih = 0; ih < g->H; ih++)
        for (int64_t iw = 0; iw < g->W; iw++)
          memcpy(dximg + (ih * g->W + iw) * C, dxpad + ((ih + g->ph) * Wp + iw + g->pw) * Cp, (size_t)C * sizeof(float));
      if (!g->nhwc) loom_conv_store_planes(dx + n * C * HW, dxtmp, HW, C, C);
    }
  }
  loom_sys_free(wt);
  loom_sys_free(bufs);
  return LOOM_OK;
}

/* dw[t][c] += sum over the image's pixels of dy[p][c] * x[p + t][c]. */
__attribute__((target("avx512f"))) static void dw_bwd_filter_image(const loom_conv_geom *g, const float *xin,
                                                                  const float *dyimg, int64_t Cp, int64_t Wp,
                                                                  const int64_t *xoff, float *part) {
  const int64_t C = g->C, T = g->KH * g->KW;
  for (int64_t c0 = 0; c0 < C; c0 += VL) {
    const __mmask16 m = lanes(C - c0);
    for (int64_t t = 0; t < T; t++) {
      __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
      for (int64_t oh = 0; oh < g->OH; oh++) {
        const float *xr = xin + oh * g->sh * Wp * Cp + xoff[t] + c0;
        const float *dr = dyimg + oh * g->OW * C + c0;
        int64_t ow = 0;
        for (; ow + 1 < g->OW; ow += 2) {
          a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, dr + ow * C), _mm512_loadu_ps(xr + ow * g->sw * Cp), a0);
          a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, dr + (ow + 1) * C), _mm512_loadu_ps(xr + (ow + 1) * g->sw * Cp), a1);
        }
        if (ow < g->OW) a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, dr + ow * C), _mm512_loadu_ps(xr + ow * g->sw * Cp), a0);
      }
      float *q = part + t * Cp + c0;
      _mm512_store_ps(q, _mm512_add_ps(_mm512_load_ps(q), _mm512_add_ps(a0, a1)));
    }
  }
}

loom_status loom_conv_depthwise_backward_filter(const loom_conv_geom *g, const float *x, const float *dy, float *dw) {
  const int64_t C = g->C, T = g->KH * g->KW, Cp = ru16(C), Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw;
  const int64_t P = g->OH * g->OW, xfl = Hp * Wp * Cp + 64, WN = T * Cp;
  const int64_t nchunk = min64(g->N, DW_CHUNKS);
  int nt = threads_for(nchunk);
  const int64_t per = ru16(xfl + (g->nhwc ? 0 : P * C));  /* keeps every thread's buffer 64-byte aligned */
  float *parts = loom_conv_alloc_f(nchunk * WN), *bufs = loom_conv_alloc_f(nt * per);
  if (!parts || !bufs) {
    loom_sys_free(parts), loom_sys_free(bufs);
    return loom_set_error(LOOM_ERR_OOM, "conv2d backward: out of host memory for the depthwise buffers");
  }
  memset(parts, 0, (size_t)(nchunk * WN) * sizeof(float));
  int64_t xoff[LOOM_CONV_MAX_TAPS];
  for (int64_t t = 0; t < T; t++) xoff[t] = ((t / g->KW) * g->dh * Wp + (t % g->KW) * g->dw) * Cp;
#pragma omp parallel num_threads(nt)
  {
    float *xin = bufs + omp_get_thread_num() * per, *dytmp = xin + xfl;
    memset(xin, 0, (size_t)xfl * sizeof(float));
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < nchunk; ch++)
      for (int64_t n = ch * g->N / nchunk; n < (ch + 1) * g->N / nchunk; n++) {
        loom_conv_fill_padded(x + n * C * g->H * g->W, g->nhwc, C, g->H, g->W, xin, Wp, Cp, g->ph, g->pw);
        const float *dyimg = dy + n * P * C;
        if (!g->nhwc) {
          loom_conv_load_planes(dytmp, dyimg, P, C);
          dyimg = dytmp;
        }
        dw_bwd_filter_image(g, xin, dyimg, Cp, Wp, xoff, parts + ch * WN);
      }
  }
  loom_sys_free(bufs);
  for (int64_t ch = 1; ch < nchunk; ch++)
    for (int64_t i = 0; i < WN; i++) parts[i] += parts[ch * WN + i];
  for (int64_t c = 0; c < C; c++)
    for (int64_t t = 0; t < T; t++) dw[c * T + t] = nchunk > 0 ? parts[t * Cp + c] : 0.0f;
  loom_sys_free(parts);
  return LOOM_OK;
}

#else
bool loom_conv_depthwise_applies(const loom_conv_geom *g) {
  (void)g;
  return false;
}
loom_status loom_conv_depthwise_forward(const loom_conv_geom *g, const float *x, const float *w, const float *b, float *y) {
  (void)g, (void)x, (void)w, (void)b, (void)y;
  return loom_set_error(LOOM_ERR_INTERNAL, "conv2d: no depthwise kernel on this CPU");
}
loom_status loom_conv_depthwise_backward_data(const loom_conv_geom *g, const float *dy, const float *w, float *dx) {
  (void)g, (void)dy, (void)w, (void)dx;
  return loom_set_error(LOOM_ERR_INTERNAL, "conv2d: no depthwise kernel on this CPU");
}
loom_status loom_conv_depthwise_backward_filter(const loom_conv_geom *g, const float *x, const float *dy, float *dw) {
  (void)g, (void)x, (void)dy, (void)dw;
  return loom_set_error(LOOM_ERR_INTERNAL, "conv2d: no depthwise kernel on this CPU");
}
#endif
