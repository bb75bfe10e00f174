/* conv_gemm.c — convolution as im2col / col2im on loom's built-in GEMM: the
 * general CPU path, correct for every geometry (stride, padding, dilation,
 * groups) in both memory formats.
 *
 * Per image and group, with P = OH*OW output pixels and Kg = Cg*KH*KW:
 *   NCHW: col [Kg][P] (row k = (c, kh, kw)); y_g [Og][P] = w_g [Og][Kg] · col
 *   NHWC: col [P][Kg] (row p holds, for each (kh, kw), Cg contiguous input
 *         channels: a memcpy per tap); y_g [P][Og] (ld O) = col · wr_gᵀ with
 *         the weight reordered to [O][KH][KW][Cg]
 * Backward-data multiplies the other way and scatter-adds (col2im);
 * backward-filter accumulates dy_g · colᵀ (NCHW) or dy_gᵀ · col (NHWC).
 *
 * Threads: with at least as many images as threads, images are split
 * between threads (each with its own col buffer) and each GEMM runs on one
 * thread; otherwise images run one after another on the multithreaded GEMM.
 * The weight gradient sums a fixed number of per-chunk partials in order,
 * so every result is the same for any number of threads. Bias and ReLU are applied
 * to each image's output right after its GEMM, while it is in cache. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "loom/ops.h"
#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/gemm.h"
#include "core/sys.h"

static inline int64_t cdiv_floor(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* Output columns ow whose input column ow*s - p + k*d lies in [0, W). */
static void valid_range(int64_t OW, int64_t W, int64_t s, int64_t p, int64_t kd, int64_t *lo, int64_t *hi) {
  int64_t a = p - kd;                       /* need ow*s >= a */
  int64_t l = a <= 0 ? 0 : (a + s - 1) / s;
  int64_t h = cdiv_floor(W - 1 + p - kd, s) + 1; /* ow*s <= W-1+p-kd */
  if (h > OW) h = OW;
  if (h < 0) h = 0;  /* the tap lies left of the input for every column (padding wider than W) */
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

/* ---- NCHW ---------------------------------------------------------------- */
/* col [Cg*KH*KW][P] from the Cg channels of image x starting at c0. add:
 * col2im instead (x += col scattered back). */
static void im2col_nchw(const loom_conv_geom *g, float *x, int64_t c0, float *col, bool add) {
  const int64_t P = g->OH * g->OW, HW = g->H * g->W;
  for (int64_t c = 0; c < g->Cg; c++) {
    float *xc = x + (c0 + c) * HW;
    for (int64_t kh = 0; kh < g->KH; kh++)
      for (int64_t kw = 0; kw < g->KW; kw++) {
        float *row = col + ((c * g->KH + kh) * g->KW + kw) * P;
        int64_t lo, hi;
        valid_range(g->OW, g->W, g->sw, g->pw, kw * g->dw, &lo, &hi);
        for (int64_t oh = 0; oh < g->OH; oh++) {
          int64_t ih = oh * g->sh - g->ph + kh * g->dh;
          float *r = row + oh * g->OW;
          if (ih < 0 || ih >= g->H) {
            if (!add) memset(r, 0, (size_t)g->OW * sizeof(float));
            continue;
          }
          float *src = xc + ih * g->W - g->pw + kw * g->dw;
          if (add) {
            for (int64_t ow = lo; ow < hi; ow++) src[ow * g->sw] += r[ow];
          } else {
            memset(r, 0, (size_t)lo * sizeof(float));
            if (g->sw == 1) memcpy(r + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
            else for (int64_t ow = lo; ow < hi; ow++) r[ow] = src[ow * g->sw];
            memset(r + hi, 0, (size_t)(g->OW - hi) * sizeof(float));
          }
        }
      }
  }
}

/* ---- NHWC ---------------------------------------------------------------- */
/* col [P][KH*KW*Cg] from channels [c0, c0+Cg) of image x ([H][W][C]); add:
 * col2im. */
static void im2col_nhwc(const loom_conv_geom *g, float *x, int64_t c0, float *col, bool add) {
  const int64_t Kg = g->KH * g->KW * g->Cg, Cg = g->Cg;
  for (int64_t oh = 0; oh < g->OH; oh++)
    for (int64_t ow = 0; ow < g->OW; ow++) {
      float *row = col + (oh * g->OW + ow) * Kg;
      for (int64_t kh = 0; kh < g->KH; kh++) {
        int64_t ih = oh * g->sh - g->ph + kh * g->dh;
        for (int64_t kw = 0; kw < g->KW; kw++) {
          int64_t iw = ow * g->sw - g->pw + kw * g->dw;
          float *d = row + (kh * g->KW + kw) * Cg;
          bool in = ih >= 0 && ih < g->H && iw >= 0 && iw < g->W;
          if (add) {
            if (in) {
              float *s = x + (ih * g->W + iw) * g->C + c0;
              for (int64_t c = 0; c < Cg; c++) s[c] += d[c];
            }
          } else if (in) {
            memcpy(d, x + (ih * g->W + iw) * g->C + c0, (size_t)Cg * sizeof(float));
          } else {
            memset(d, 0, (size_t)Cg * sizeof(float));
          }
        }
      }
    }
}

/* w [O][Cg][KH][KW] -> wr [O][KH][KW][Cg] (and back with inverse). */
static void reorder_w(const loom_conv_geom *g, const float *src, float *dst, bool inverse) {
  const int64_t KK = g->KH * g->KW;
  for (int64_t o = 0; o < g->O; o++)
    for (int64_t c = 0; c < g->Cg; c++)
      for (int64_t k = 0; k < KK; k++) {
        int64_t canon = (o * g->Cg + c) * KK + k, nhwc = (o * KK + k) * g->Cg + c;
        if (inverse) dst[canon] = src[nhwc];
        else dst[nhwc] = src[canon];
      }
}

void loom_conv_bias_act_rows(float *y, int64_t rows, int64_t O, const float *b, bool relu) {
  for (int64_t r = 0; r < rows; r++) {
    float *p = y + r * O;
    if (b && relu) for (int64_t o = 0; o < O; o++) { float v = p[o] + b[o]; p[o] = v > 0.0f ? v : 0.0f; }
    else if (b) for (int64_t o = 0; o < O; o++) p[o] += b[o];
    else if (relu) for (int64_t o = 0; o < O; o++) p[o] = p[o] > 0.0f ? p[o] : 0.0f;
  }
}

void loom_conv_bias_act_plane(float *y, int64_t n, float b, bool relu) {
  if (relu) for (int64_t i = 0; i < n; i++) { float v = y[i] + b; y[i] = v > 0.0f ? v : 0.0f; }
  else if (b != 0.0f) for (int64_t i = 0; i < n; i++) y[i] += b;
}

/* How images are spread over threads: true = one image per thread at a time. */
static bool split_images(const loom_conv_geom *g, int *nt) {
  *nt = loom_get_num_threads();
  if (*nt < 1) *nt = 1;
  return *nt > 1 && g->N >= *nt;
}

static int64_t col_floats(const loom_conv_geom *g) {
  int64_t n = g->Cg * g->KH * g->KW * g->OH * g->OW;
  return n > 0 ? n : 1;
}

/* ---- forward --------------------------------------------------------------- */
static void fwd_image(const loom_conv_geom *g, const float *x, const float *w, const float *b, float *y, float *col,
                      int64_t n) {
  const int64_t P = g->OH * g->OW, Kg = g->Cg * g->KH * g->KW;
  float *xn = (float *)x + n * g->C * g->H * g->W;
  float *yn = y + n * g->O * P;
  bool relu = g->act == LOOM_ACT_RELU;
  for (int64_t gi = 0; gi < g->G; gi++) {
    if (g->nhwc) {
      im2col_nhwc(g, xn, gi * g->Cg, col, false);
      loom_cpu_sgemm(false, true, P, g->Og, Kg, 1.0f, col, Kg, w + gi * g->Og * Kg, Kg, 0.0f, yn + gi * g->Og, g->O);
    } else {
      im2col_nchw(g, xn, gi * g->Cg, col, false);
      loom_cpu_sgemm(false, false, g->Og, P, Kg, 1.0f, w + gi * g->Og * Kg, Kg, col, P, 0.0f, yn + gi * g->Og * P, P);
    }
  }
  if (g->nhwc) {
    if (b || relu) loom_conv_bias_act_rows(yn, P, g->O, b, relu);
  } else if (b || relu) {
    for (int64_t o = 0; o < g->O; o++) loom_conv_bias_act_plane(yn + o * P, P, b ? b[o] : 0.0f, relu);
  }
}

/* ---- backward-data --------------------------------------------------------- */
static void bwd_data_image(const loom_conv_geom *g, const float *dy, const float *w, float *dx, float *col,
                           int64_t n) {
  const int64_t P = g->OH * g->OW, Kg = g->Cg * g->KH * g->KW;
  float *dxn = dx + n * g->C * g->H * g->W;
  const float *dyn = dy + n * g->O * P;
  memset(dxn, 0, (size_t)(g->C * g->H * g->W) * sizeof(float));
  for (int64_t gi = 0; gi < g->G; gi++) {
    if (g->nhwc) {
      loom_cpu_sgemm(false, false, P, Kg, g->Og, 1.0f, dyn + gi * g->Og, g->O, w + gi * g->Og * Kg, Kg, 0.0f, col, Kg);
      im2col_nhwc(g, dxn, gi * g->Cg, col, true);
    } else {
      loom_cpu_sgemm(true, false, Kg, P, g->Og, 1.0f, w + gi * g->Og * Kg, Kg, dyn + gi * g->Og * P, P, 0.0f, col, P);
      im2col_nchw(g, dxn, gi * g->Cg, col, true);
    }
  }
}

/* Forward (dy == NULL) or backward-data (x == NULL), image by image, on
 * several threads when there are enough images, each with its own column
 * buffer; NHWC first reorders the weight to the path's order. */
static loom_status run_images(const loom_conv_geom *g, const float *x, const float *dy, const float *w,
                              const float *b, float *out) {
  const char *op = dy ? "conv2d backward" : "conv2d";
  const int64_t Kg = g->Cg * g->KH * g->KW;
  float *wr = NULL;
  if (g->nhwc) {
    wr = loom_sys_malloc((size_t)(g->O * Kg > 0 ? g->O * Kg : 1) * sizeof(float));
    if (!wr) return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory for the reordered weight", op);
    reorder_w(g, w, wr, false);
    w = wr;
  }
  int nt;
  bool split = split_images(g, &nt);
  float *cols = loom_sys_malloc((size_t)((split ? nt : 1) * col_floats(g)) * sizeof(float));
  if (!cols) {
    loom_sys_free(wr);
    if (dy) return loom_set_error(LOOM_ERR_OOM, "conv2d backward: out of host memory for the col2im buffer");
    return loom_set_error(LOOM_ERR_OOM, "conv2d: out of host memory for the im2col buffer (%lld floats)",
                          (long long)((split ? nt : 1) * col_floats(g)));
  }
#pragma omp parallel for schedule(static) num_threads(nt) if (split)
  for (int64_t n = 0; n < g->N; n++) {
    float *col = cols + omp_get_thread_num() * col_floats(g);
    if (dy) bwd_data_image(g, dy, w, out, col, n);
    else fwd_image(g, x, w, b, out, col, n);
  }
  loom_sys_free(cols);
  loom_sys_free(wr);
  return LOOM_OK;
}

loom_status loom_conv_gemm_forward(const loom_conv_geom *g, const float *x, const float *w, const float *b, float *y) {
  return run_images(g, x, NULL, w, b, y);
}

loom_status loom_conv_gemm_backward_data(const loom_conv_geom *g, const float *dy, const float *w, float *dx) {
  return run_images(g, NULL, dy, w, NULL, dx);
}

/* ---- backward-filter ------------------------------------------------------- */
/* dw (in the path's weight order) += this image's contribution. */
static void bwd_filter_image(const loom_conv_geom *g, const float *x, const float *dy, float *dw, float *col,
                             int64_t n) {
  const int64_t P = g->OH * g->OW, Kg = g->Cg * g->KH * g->KW;
  float *xn = (float *)x + n * g->C * g->H * g->W;
  const float *dyn = dy + n * g->O * P;
  for (int64_t gi = 0; gi < g->G; gi++) {
    if (g->nhwc) {
      im2col_nhwc(g, xn, gi * g->Cg, col, false);
      loom_cpu_sgemm(true, false, g->Og, Kg, P, 1.0f, dyn + gi * g->Og, g->O, col, Kg, 1.0f, dw + gi * g->Og * Kg, Kg);
    } else {
      im2col_nchw(g, xn, gi * g->Cg, col, false);
      loom_cpu_sgemm(false, true, g->Og, Kg, P, 1.0f, dyn + gi * g->Og * P, P, col, P, 1.0f, dw + gi * g->Og * Kg, Kg);
    }
  }
}

loom_status loom_conv_gemm_backward_filter(const loom_conv_geom *g, const float *x, const float *dy, float *dw) {
  const int64_t Kg = g->Cg * g->KH * g->KW, WN = g->O * Kg > 0 ? g->O * Kg : 1;
  /* Partial sums per chunk of images, a number that does not depend on the
   * threads (summed in order at the end): dW is the same for any thread
   * count. One chunk per image beyond that would only cost memory. */
  const int64_t nchunk = g->N < 8 ? (g->N > 0 ? g->N : 1) : 8;
  int nt = loom_get_num_threads();
  if (nt < 1) nt = 1;
  if (nt > nchunk) nt = (int)nchunk;
  float *cols = loom_sys_malloc((size_t)(nt * col_floats(g) + nchunk * WN) * sizeof(float));
  if (!cols) return loom_set_error(LOOM_ERR_OOM, "conv2d backward: out of host memory for the im2col buffer");
  float *parts = cols + nt * col_floats(g);
  memset(parts, 0, (size_t)(nchunk * WN) * sizeof(float));
  if (nt > 1) {
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t ch = 0; ch < nchunk; ch++)
      for (int64_t n = ch * g->N / nchunk; n < (ch + 1) * g->N / nchunk; n++)
        bwd_filter_image(g, x, dy, parts + ch * WN, cols + omp_get_thread_num() * col_floats(g), n);
  } else {
    for (int64_t ch = 0; ch < nchunk; ch++)
      for (int64_t n = ch * g->N / nchunk; n < (ch + 1) * g->N / nchunk; n++)
        bwd_filter_image(g, x, dy, parts + ch * WN, cols, n);
  }
  for (int64_t ch = 1; ch < nchunk; ch++)
    for (int64_t i = 0; i < WN; i++) parts[i] += parts[ch * WN + i];
  if (g->nhwc) reorder_w(g, parts, dw, true);
  else memcpy(dw, parts, (size_t)(g->O * Kg) * sizeof(float));
  loom_sys_free(cols);
  return LOOM_OK;
}

/* ---- switch ------------------------------------------------------------------ */
static bool g_force_gemm = false;
void loom_conv_cpu_force_gemm(bool on) { __atomic_store_n(&g_force_gemm, on, __ATOMIC_RELAXED); }
bool loom_conv_cpu_gemm_forced(void) { return __atomic_load_n(&g_force_gemm, __ATOMIC_RELAXED); }
