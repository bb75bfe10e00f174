/* conv_bf16.c — conv2d on bf16 operands with AVX512_BF16 dot products
 * (vdpbf16ps, f32 accumulation) instead of widening x, w and dy to f32 and
 * running the f32 paths: channels-last (NHWC), groups 1, any kernel size,
 * stride, padding and dilation. conv_cpu.c hands a call over when
 * loom_conv_bf16_applies.
 *
 * Per chunk of images (rows = images x P output pixels, Kg = KH*KW*C, the
 * weight reordered to wr [O][KH][KW][C] and packed once like the GEMM's B):
 *   forward:  y [rows][O] = x ⊛ wr. The chunk is copied into a
 *             zero-padded buffer and the micro-kernels read each tap's
 *             channel pairs from it (implicit im2col, conv_bf16_x86.c);
 *             an odd C gets a zero channel there and in the weight.
 *             Bias, ReLU and the rounding to bf16 in the GEMM's epilogue,
 *             per finished tile.
 *   backward-data: at stride 1, the forward convolution of dz with the
 *             flipped, channel-swapped weight (padding dh*(KH-1) - ph);
 *             else dcol [rows][Kg] (f32) = dz · wr on the bf16 GEMM,
 *             scatter-added (col2im) into an f32 dx, rounded once.
 *   backward-filter: dW [O][Kg] = Σ dzᵀ · col, the reduction over pixel
 *             pairs. Even C: dz interleaved into pairs once per chunk, the
 *             input pairs interleaved in registers from the padded chunk;
 *             odd C: im2col + the bf16 GEMM. f32 partial sums per fixed
 *             group of images, added in order (the same result for any
 *             number of threads), reordered to [O][C][KH][KW].
 * dz = dy masked by the fused ReLU stays bf16 (masking does not change a
 * value); the bias gradient sums it in double as the f32 path does.
 *
 * Numerics: as gemm_bf16.h — the f32 sum of exact bf16 products, within
 * K * 2^-24 * sum|products| of the exact sum (K terms; col2im adds up to
 * KH*KW partial sums more), plus one rounding to the output dtype. Not
 * bit-identical to the widening path; LOOM_CPU_ISA=avx512 keeps that one.
 * vdpbf16ps treats bf16 subnormal inputs as zero.
 *
 * Threads: chunks of images (forward, backward-data) or image groups
 * (weight gradient) are split between threads, each with its own buffers.
 * With fewer images than threads they run on one thread (except the GEMM
 * parts, which thread themselves): batches for training have enough. */
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "core/sys.h"
#include "loom/ops.h"
#include "ops/cpu/conv_bf16_internal.h"
#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/gemm_bf16.h"
#include "ops/cpu/linear_bf16.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* GEMM rows per chunk to aim for: the bf16 col block (rows x Kg) stays in
 * L2 for the 16..64-channel layers of ResNet-20 and the weight is packed
 * once per 512 rows rather than once per small image. */
enum { ROWS_TARGET = 512, FILTER_GROUPS = 8 };

static bool is_bf16(const loom_tensor *t) { return t && t->dtype == LOOM_BF16; }
static bool out_ok(const loom_tensor *t) { return !t || t->dtype == LOOM_BF16 || t->dtype == LOOM_F32; }

/* Only under avx512bf16 itself: under amxbf16 (Intel) the convolutions widen
 * to the f32 kernels (Winograd for 3x3 stride 1). On the one AMX CPU
 * measured (an Emerald Rapids Xeon, bench/results/gpu-h200-2026-11-28.md)
 * vdpbf16ps ran the GEMM at 0.69x the f32 FMA kernel, where a Zen 4 runs it
 * at 2x; these kernels are built on the same instruction. */
bool loom_conv_bf16_applies(const loom_conv_geom *g, const loom_op_args *a, bool backward) {
  if (loom_cpu_isa_level_now() != LOOM_CPU_ISA_AVX512BF16 || !g->nhwc || g->G != 1) return false;
  if (g->N <= 0 || g->C <= 0 || g->O <= 0 || g->OH <= 0 || g->OW <= 0) return false;
  if (backward) {
    const loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2], *y = a->n_in > 3 ? a->in[3] : NULL;
    if (!is_bf16(gy) || !is_bf16(x) || !is_bf16(w)) return false;
    if (g->act == LOOM_ACT_RELU && !is_bf16(y)) return false;
    return out_ok(a->out[0]) && out_ok(a->out[1]) && out_ok(a->out[2]);
  }
  return is_bf16(a->in[0]) && is_bf16(a->in[1]) && out_ok(a->out[0]);
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int threads(void) {
  int nt = loom_get_num_threads();
  return nt < 1 ? 1 : nt;
}

/* Images per chunk: about ROWS_TARGET GEMM rows, at least one image, and
 * few enough that every thread gets a chunk when there are enough images. */
static int64_t images_per_chunk(const loom_conv_geom *g) {
  const int64_t P = g->OH * g->OW, nt = threads();
  int64_t k = ROWS_TARGET / P;
  if (k > (g->N + nt - 1) / nt) k = (g->N + nt - 1) / nt;
  if (k < 1) k = 1;
  return min64(k, g->N);
}

static int thread_id(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/* A channel count rounded up to whole pairs: the implicit kernels' stride. */
static inline int64_t pairs_of(int64_t c) { return c + (c & 1); }

/* w [O][C][KH][KW] (any strides, bf16) -> wr [O][KH][KW][cs] (bit copies;
 * channels C..cs-1 zero). */
static void reorder_w(const loom_conv_geom *g, const loom_tensor *w, uint16_t *wr, int64_t cs) {
  const uint16_t *base = loom_tensor_ptr(w);
  for (int64_t o = 0; o < g->O; o++)
    for (int64_t kh = 0; kh < g->KH; kh++)
      for (int64_t kw = 0; kw < g->KW; kw++) {
        uint16_t *d = wr + ((o * g->KH + kh) * g->KW + kw) * cs;
        for (int64_t c = 0; c < g->C; c++)
          d[c] = base[o * w->strides[0] + c * w->strides[1] + kh * w->strides[2] + kw * w->strides[3]];
        for (int64_t c = g->C; c < cs; c++) d[c] = 0;
      }
}

/* The output pixel after (n, oh, ow), in row-major order: walked instead
 * of divided out of a row index (four divisions per row cost as much as a
 * fifth of the 16-channel kernels' time). */
static inline void next_pixel(const loom_conv_geom *g, int64_t *n, int64_t *oh, int64_t *ow) {
  if (++*ow == g->OW) {
    *ow = 0;
    if (++*oh == g->OH) *oh = 0, ++*n;
  }
}

/* The input column of tap kw for output column ow, and whether all KW taps
 * of ow lie inside [0, W) with unit dilation (one contiguous KW*C run). */
static inline int64_t in_col(const loom_conv_geom *g, int64_t ow, int64_t kw) { return ow * g->sw - g->pw + kw * g->dw; }
static inline bool run_inside(const loom_conv_geom *g, int64_t ow) {
  return g->dw == 1 && in_col(g, ow, 0) >= 0 && in_col(g, ow, g->KW - 1) < g->W;
}

/* col [P][ld] of one image x [H][W][C] (bf16): Kg values per row, zeros
 * past them up to ld. */
static void im2col(const loom_conv_geom *g, const uint16_t *x, uint16_t *col, int64_t ld) {
  const int64_t C = g->C, KWC = g->KW * C, Kg = g->KH * KWC;
  for (int64_t oh = 0; oh < g->OH; oh++)
    for (int64_t ow = 0; ow < g->OW; ow++) {
      uint16_t *row = col + (oh * g->OW + ow) * ld;
      if (ld > Kg) memset(row + Kg, 0, (size_t)(ld - Kg) * sizeof(uint16_t));
      const bool inside = run_inside(g, ow);
      for (int64_t kh = 0; kh < g->KH; kh++) {
        const int64_t ih = oh * g->sh - g->ph + kh * g->dh;
        uint16_t *d = row + kh * KWC;
        if (ih < 0 || ih >= g->H) {
          memset(d, 0, (size_t)KWC * sizeof(uint16_t));
          continue;
        }
        const uint16_t *xr = x + ih * g->W * C;
        if (inside) {
          memcpy(d, xr + in_col(g, ow, 0) * C, (size_t)KWC * sizeof(uint16_t));
          continue;
        }
        for (int64_t kw = 0; kw < g->KW; kw++) {
          const int64_t iw = in_col(g, ow, kw);
          if (iw >= 0 && iw < g->W) memcpy(d + kw * C, xr + iw * C, (size_t)C * sizeof(uint16_t));
          else memset(d + kw * C, 0, (size_t)C * sizeof(uint16_t));
        }
      }
    }
}

/* dx [H][W][C] (f32) += dcol [P][Kg] scattered back (col2im). */
static void col2im_add(const loom_conv_geom *g, const float *dcol, float *dx) {
  const int64_t C = g->C, KWC = g->KW * C, Kg = g->KH * KWC;
  for (int64_t oh = 0; oh < g->OH; oh++)
    for (int64_t ow = 0; ow < g->OW; ow++) {
      const float *row = dcol + (oh * g->OW + ow) * Kg;
      const bool inside = run_inside(g, ow);
      for (int64_t kh = 0; kh < g->KH; kh++) {
        const int64_t ih = oh * g->sh - g->ph + kh * g->dh;
        if (ih < 0 || ih >= g->H) continue;
        const float *s = row + kh * KWC;
        float *xr = dx + ih * g->W * C;
        if (inside) {
          float *d = xr + in_col(g, ow, 0) * C;
          for (int64_t i = 0; i < KWC; i++) d[i] += s[i];
          continue;
        }
        for (int64_t kw = 0; kw < g->KW; kw++) {
          const int64_t iw = in_col(g, ow, kw);
          if (iw < 0 || iw >= g->W) continue;
          float *d = xr + iw * C;
          for (int64_t c = 0; c < C; c++) d[c] += s[kw * C + c];
        }
      }
    }
}

/* ---- forward --------------------------------------------------------------- */
/* y [N][OH][OW][O] = act(conv(x, wr) + bias) for bf16 x [N][H][W][C] and wr
 * [O][KH][KW][Cs] (Cs: C rounded up to even, the extra channel zero); y
 * bf16, or f32 when yf32. The weight is packed once; each chunk of images
 * is copied into a zero-padded NHWC buffer and the micro-kernels read every
 * tap's channel pairs from there (loom_conv_bf16_ukr_taps_*): no column
 * matrix KH*KW times the input's size is written and read back. Each
 * finished tile goes through the GEMM's epilogue (bias, ReLU, rounding)
 * while in L1. */
static loom_status forward_implicit(const loom_conv_geom *g, const uint16_t *xp, const uint16_t *wr,
                                    const float *bias, bool relu, void *yp, bool yf32) {
#if !defined(__x86_64__)
  (void)g, (void)xp, (void)wr, (void)bias, (void)relu, (void)yp, (void)yf32;
  return loom_set_error(LOOM_ERR_UNSUPPORTED, "conv2d (bf16): no AVX512_BF16 kernel on this architecture");
#else
  /* Cs: the padded buffer's (and wr's) channels, C rounded up to a pair */
  const int64_t P = g->OH * g->OW, C = g->C, Cs = pairs_of(C), Kg = g->KH * g->KW * Cs, O = g->O, HWC = g->H * g->W * C;
  const int64_t cp = Cs / 2, kp = Kg / 2, NR = LOOM_BF16_NR, nsl = (O + NR - 1) / NR, ntaps = g->KH * g->KW;
  const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, img = Hp * Wp * Cs;
  const bool narrow = O <= 16;
  const int64_t mr = narrow ? 24 : 12;
  const int64_t per = images_per_chunk(g), nchunk = (g->N + per - 1) / per;
  int nt = threads();
  const bool split = nt > 1 && nchunk >= nt;
  if (!split) nt = 1;
  uint32_t *bp = loom_sys_aligned_alloc(64, (size_t)(nsl * kp * NR) * sizeof(uint32_t));
  uint16_t *pads = loom_sys_aligned_alloc(64, ((size_t)nt * (size_t)(per * img) * sizeof(uint16_t) + 63) / 64 * 64);
  int64_t *tapoff = loom_sys_malloc((size_t)ntaps * sizeof(int64_t));
  if (!bp || !pads || !tapoff) {
    loom_sys_free(bp), loom_sys_free(pads), loom_sys_free(tapoff);
    return loom_set_error(LOOM_ERR_OOM, "conv2d (bf16): out of host memory for the padded input (%lld bf16 values)",
                          (long long)(nt * per * img));
  }
  memset(pads, 0, (size_t)nt * (size_t)(per * img) * sizeof(uint16_t)); /* the borders stay zero */
  for (int64_t s = 0; s < nsl; s++) loom_gemm_bf16_pack_b(true, wr, Kg, Kg, 0, Kg, s * NR, min64(NR, O - s * NR), bp + s * kp * NR);
  for (int64_t kh = 0; kh < g->KH; kh++)
    for (int64_t kw = 0; kw < g->KW; kw++) tapoff[kh * g->KW + kw] = (kh * g->dh * Wp + kw * g->dw) * cp;
#pragma omp parallel for schedule(static) num_threads(nt) if (split)
  for (int64_t ch = 0; ch < nchunk; ch++) {
    const int64_t n0 = ch * per, imgs = min64(per, g->N - n0), rows = imgs * P;
    uint16_t *pad = pads + (size_t)thread_id() * (size_t)(per * img);
    for (int64_t i = 0; i < imgs; i++)
      for (int64_t h = 0; h < g->H; h++) {
        uint16_t *d = pad + i * img + ((h + g->ph) * Wp + g->pw) * Cs;
        const uint16_t *src = xp + (n0 + i) * HWC + h * g->W * C;
        if (Cs == C) {
          memcpy(d, src, (size_t)(g->W * C) * sizeof(uint16_t));
          continue;
        }
        for (int64_t w = 0; w < g->W; w++) /* channel C stays zero */
          for (int64_t c = 0; c < C; c++) d[w * Cs + c] = src[w * C + c];
      }
    loom_gemm_bf16_out o = {0};
    if (yf32) o.c = (float *)yp + n0 * P * O, o.ldc = O;
    else o.y = (uint16_t *)yp + n0 * P * O, o.ldy = O;
    o.bias = bias;
    o.relu = relu;
    float tile[24 * 32] __attribute__((aligned(64)));
    int64_t off[24];
    int64_t wn = 0, woh = 0, wow = 0; /* the pixel of the next row */
    for (int64_t r0 = 0; r0 < rows; r0 += mr) {
      const int64_t nr = min64(mr, rows - r0);
      for (int64_t i = 0; i < mr; i++) {
        /* rows past the end: any pixel (row r0's), never stored */
        off[i] = i < nr ? wn * (img / 2) + (woh * g->sh * Wp + wow * g->sw) * cp : off[0];
        next_pixel(g, &wn, &woh, &wow);
      }
      const uint32_t *xw = (const uint32_t *)pad;
      if (narrow) {
        loom_conv_bf16_ukr_taps_24x16(xw, off, tapoff, ntaps, cp, bp, tile, 16);
        loom_gemm_bf16_epilogue(tile, 16, nr, O, r0, 0, &o);
        continue;
      }
      for (int64_t s = 0; s < nsl; s++) {
        loom_conv_bf16_ukr_taps_12x32(xw, off, tapoff, ntaps, cp, bp + s * kp * NR, tile, NR);
        loom_gemm_bf16_epilogue(tile, NR, nr, min64(NR, O - s * NR), r0, s * NR, &o);
      }
    }
  }
  loom_sys_free(bp), loom_sys_free(pads), loom_sys_free(tapoff);
  return LOOM_OK;
#endif
}

loom_status loom_conv_bf16_forward(const loom_conv_geom *g, const loom_op_args *a) {
  const loom_tensor *x = a->in[0], *w = a->in[1], *b = a->n_in > 2 ? a->in[2] : NULL;
  loom_tensor *y = a->out[0];
  const int64_t Cs = pairs_of(g->C), O = g->O;
  uint16_t *wr = loom_sys_malloc((size_t)(O * g->KH * g->KW * Cs) * sizeof(uint16_t));
  float *bias = b ? loom_sys_malloc((size_t)O * sizeof(float)) : NULL;
  if (!wr || (b && !bias)) {
    loom_sys_free(wr), loom_sys_free(bias);
    return loom_set_error(LOOM_ERR_OOM, "conv2d (bf16): out of host memory for the weight");
  }
  reorder_w(g, w, wr, Cs);
  if (b) loom_cpu_load_f32(loom_tensor_ptr(b), b->dtype, b->strides[0], O, bias);
  loom_status st = forward_implicit(g, loom_tensor_ptr(x), wr, bias, g->act == LOOM_ACT_RELU, loom_tensor_ptr(y),
                                    y->dtype == LOOM_F32);
  loom_sys_free(wr), loom_sys_free(bias);
  return st;
}

/* ---- backward ----------------------------------------------------------- */
/* Stride 1 with the padding inside the kernel's extent: dx is the forward
 * convolution of dz with the weight flipped in space and its channels
 * swapped (wt [C][KH][KW][O]), padding dh*(KH-1) - ph: no f32 scatter, the
 * rounding to bf16 in the GEMM's epilogue. */
static bool data_as_forward(const loom_conv_geom *g) {
  return g->sh == 1 && g->sw == 1 && g->ph <= g->dh * (g->KH - 1) && g->pw <= g->dw * (g->KW - 1);
}

static loom_status backward_data_forward(const loom_conv_geom *g, const uint16_t *dz, const loom_tensor *w,
                                         loom_tensor *dx) {
  loom_conv_geom t = *g;
  t.C = g->O, t.H = g->OH, t.W = g->OW, t.O = g->C, t.OH = g->H, t.OW = g->W;
  t.ph = g->dh * (g->KH - 1) - g->ph, t.pw = g->dw * (g->KW - 1) - g->pw;
  t.Cg = t.C, t.Og = t.O, t.act = LOOM_ACT_NONE;
  const int64_t Os = pairs_of(g->O); /* wt's channels, the last zero for an odd O */
  uint16_t *wt = loom_sys_malloc((size_t)(Os * g->C * g->KH * g->KW) * sizeof(uint16_t));
  if (!wt) return loom_set_error(LOOM_ERR_OOM, "conv2d backward (bf16): out of host memory for the weight");
  const uint16_t *base = loom_tensor_ptr(w);
  for (int64_t c = 0; c < g->C; c++)
    for (int64_t kh = 0; kh < g->KH; kh++)
      for (int64_t kw = 0; kw < g->KW; kw++) {
        uint16_t *d = wt + ((c * g->KH + kh) * g->KW + kw) * Os;
        for (int64_t o = 0; o < g->O; o++)
          d[o] = base[o * w->strides[0] + c * w->strides[1] + (g->KH - 1 - kh) * w->strides[2] +
                      (g->KW - 1 - kw) * w->strides[3]];
        for (int64_t o = g->O; o < Os; o++) d[o] = 0;
      }
  loom_status st = forward_implicit(&t, dz, wt, NULL, false, loom_tensor_ptr(dx), dx->dtype == LOOM_F32);
  loom_sys_free(wt);
  return st;
}

/* dx = col2im(dz · wr), rounded to dx's dtype. */
static loom_status backward_data(const loom_conv_geom *g, const uint16_t *dz, const uint16_t *wr, loom_tensor *dx) {
  const int64_t P = g->OH * g->OW, Kg = g->KH * g->KW * g->C, O = g->O, HWC = g->H * g->W * g->C;
  const int64_t per = images_per_chunk(g), nchunk = (g->N + per - 1) / per;
  int nt = threads();
  const bool split = nt > 1 && nchunk >= nt;
  if (!split) nt = 1;
  const bool f32 = dx->dtype == LOOM_F32;
  const int64_t each = per * P * Kg + (f32 ? 0 : per * HWC);
  float *buf = loom_sys_malloc((size_t)nt * (size_t)each * sizeof(float));
  if (!buf) return loom_set_error(LOOM_ERR_OOM, "conv2d backward (bf16): out of host memory for the col2im buffer");
  char *dxp = loom_tensor_ptr(dx);
  int failed = 0;
#pragma omp parallel for schedule(static) num_threads(nt) if (split)
  for (int64_t ch = 0; ch < nchunk; ch++) {
    const int64_t n0 = ch * per, imgs = min64(per, g->N - n0), rows = imgs * P;
    float *dcol = buf + (size_t)thread_id() * (size_t)each;
    float *acc = f32 ? (float *)dxp + n0 * HWC : dcol + per * P * Kg;
    loom_gemm_bf16_out o = {.c = dcol, .ldc = Kg};
    if (loom_cpu_gemm_bf16(false, false, rows, Kg, O, dz + n0 * P * O, O, wr, Kg, &o) != LOOM_OK) {
#pragma omp atomic write
      failed = 1;
      continue;
    }
    memset(acc, 0, (size_t)(imgs * HWC) * sizeof(float));
    for (int64_t i = 0; i < imgs; i++) col2im_add(g, dcol + i * P * Kg, acc + i * HWC);
    if (!f32) loom_cpu_store_f32(dxp + (size_t)(n0 * HWC) * loom_dtype_size(dx->dtype), dx->dtype, 1, imgs * HWC, acc);
  }
  loom_sys_free(buf);
  return failed ? loom_set_error(LOOM_ERR_OOM, "conv2d backward (bf16): out of host memory in the GEMM") : LOOM_OK;
}

/* dW for an even channel count without an im2col matrix: the reduction
 * runs over pixel pairs, so per chunk dZ is interleaved once into pairs
 * (dzp [rows/2][ldo] words) and each tap's input pairs are interleaved in
 * registers from the zero-padded chunk (loom_conv_bf16_ukr_dw_*). A
 * chunk's odd last pixel pairs with a zero dZ and a zero input region. */
static loom_status backward_filter_implicit(const loom_conv_geom *g, const uint16_t *dz, const uint16_t *xp,
                                            float *parts, int64_t ngroups, int nt) {
#if !defined(__x86_64__)
  (void)g, (void)dz, (void)xp, (void)parts, (void)ngroups, (void)nt;
  return loom_set_error(LOOM_ERR_UNSUPPORTED, "conv2d backward (bf16): no AVX512_BF16 kernel on this architecture");
#else
  const int64_t P = g->OH * g->OW, C = g->C, Kg = g->KH * g->KW * C, O = g->O, HWC = g->H * g->W * C, WN = O * Kg;
  const int64_t ntaps = g->KH * g->KW, Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, img = Hp * Wp * C;
  /* The tile shape that multiplies fewer padding lanes: 16x16 (16 dZ rows x
     16 channels) or 12x32. At O = 32 or 64, 12-row tiles computed 11 % of
     zeros; both kernels run at the same rate. */
  const int64_t cost12 = (O + 11) / 12 * 12 * ((C + 31) / 32 * 32), cost16 = (O + 15) / 16 * 16 * ((C + 15) / 16 * 16);
  const bool small = cost16 < cost12;
  const int64_t mo = small ? 16 : 12, cb = small ? 16 : 32, ldo = (O + mo - 1) / mo * mo;
  const int64_t per = images_per_chunk(g), nqmax = (per * P + 1) / 2;
  /* Per thread: the padded chunk plus a zero tail (one image and a vector
     more: where the odd pixel's partner points, under any tap), the dZ
     pairs and the pixel offsets. */
  const int64_t pad_vals = ((per + 1) * img + 64 + 31) / 32 * 32;
  const int64_t each = pad_vals / 2 + nqmax * ldo + 2 * nqmax * 2;
  uint32_t *buf = loom_sys_aligned_alloc(64, ((size_t)nt * (size_t)each * sizeof(uint32_t) + 63) / 64 * 64);
  int64_t *tapoff = loom_sys_malloc((size_t)ntaps * sizeof(int64_t));
  if (!buf || !tapoff) {
    loom_sys_free(buf), loom_sys_free(tapoff);
    return loom_set_error(LOOM_ERR_OOM, "conv2d backward (bf16): out of host memory for the padded input");
  }
  memset(buf, 0, (size_t)nt * (size_t)each * sizeof(uint32_t));
  for (int64_t kh = 0; kh < g->KH; kh++)
    for (int64_t kw = 0; kw < g->KW; kw++) tapoff[kh * g->KW + kw] = (kh * g->dh * Wp + kw * g->dw) * C;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t gi = 0; gi < ngroups; gi++) {
    uint32_t *mine = buf + (size_t)thread_id() * (size_t)each;
    uint16_t *pad = (uint16_t *)mine;
    uint32_t *dzp = mine + pad_vals / 2;
    int64_t *off = (int64_t *)(dzp + nqmax * ldo);
    float *part = parts + gi * WN;
    float tile[16 * 32] __attribute__((aligned(64)));
    const int64_t lo = gi * g->N / ngroups, hi = (gi + 1) * g->N / ngroups;
    for (int64_t n0 = lo; n0 < hi; n0 += per) {
      const int64_t imgs = min64(per, hi - n0), rows = imgs * P, nq = (rows + 1) / 2;
      for (int64_t i = 0; i < imgs; i++)
        for (int64_t h = 0; h < g->H; h++)
          memcpy(pad + i * img + ((h + g->ph) * Wp + g->pw) * C, xp + (n0 + i) * HWC + h * g->W * C,
                 (size_t)(g->W * C) * sizeof(uint16_t));
      const uint16_t *dzc = dz + n0 * P * O;
      for (int64_t q = 0; q < nq; q++) {
        const uint16_t *r0 = dzc + 2 * q * O, *r1 = 2 * q + 1 < rows ? r0 + O : NULL;
        uint32_t *d = dzp + q * ldo;
        if (r1)
          for (int64_t o = 0; o < O; o++) d[o] = (uint32_t)r0[o] | (uint32_t)r1[o] << 16;
        else
          for (int64_t o = 0; o < O; o++) d[o] = r0[o];
        for (int64_t o = O; o < ldo; o++) d[o] = 0;
      }
      for (int64_t r = 0, n = 0, oh = 0, ow = 0; r < 2 * nq; r++) {
        if (r >= rows) {
          off[r] = per * img; /* the zero tail */
          continue;
        }
        off[r] = n * img + (oh * g->sh * Wp + ow * g->sw) * C;
        next_pixel(g, &n, &oh, &ow);
      }
      for (int64_t t = 0; t < ntaps; t++)
        for (int64_t c0 = 0; c0 < C; c0 += cb) {
          const int64_t nc = min64(cb, C - c0);
          for (int64_t ob = 0; ob < O; ob += mo) {
            if (small) loom_conv_bf16_ukr_dw_16x16(dzp + ob, ldo, pad + tapoff[t] + c0, off, nq, nc, tile);
            else loom_conv_bf16_ukr_dw_12x32(dzp + ob, ldo, pad + tapoff[t] + c0, off, nq, nc, tile);
            const int64_t mrows = min64(mo, O - ob);
            for (int64_t i = 0; i < mrows; i++) {
              float *d = part + (ob + i) * Kg + t * C + c0;
              for (int64_t j = 0; j < nc; j++) d[j] += tile[i * 32 + j];
            }
          }
        }
    }
  }
  loom_sys_free(buf), loom_sys_free(tapoff);
  return LOOM_OK;
#endif
}

/* dw = sum over images of dzᵀ · col, stored as [O][C][KH][KW] in dw's dtype. */
static loom_status backward_filter(const loom_conv_geom *g, const uint16_t *dz, const uint16_t *x, loom_tensor *dw) {
  const int64_t P = g->OH * g->OW, Kg = g->KH * g->KW * g->C, O = g->O, HWC = g->H * g->W * g->C, WN = O * Kg;
  const int64_t per = images_per_chunk(g);
  /* A fixed number of image groups, each summed in image order: dW does
     not depend on the thread count. */
  const int64_t ngroups = g->N < FILTER_GROUPS ? g->N : FILTER_GROUPS;
  int nt = threads();
  if (nt > ngroups) nt = (int)ngroups;
  const bool implicit = g->C % 2 == 0;
  const int64_t each = implicit ? 0 : per * P * Kg * (int64_t)sizeof(uint16_t) / (int64_t)sizeof(float) + 1 + WN;
  float *buf = loom_sys_malloc((size_t)(nt * each + (ngroups + 1) * WN) * sizeof(float));
  if (!buf) return loom_set_error(LOOM_ERR_OOM, "conv2d backward (bf16): out of host memory for the im2col buffer");
  float *parts = buf + nt * each, *canon = parts + ngroups * WN;
  int failed = 0;
  if (implicit) {
    memset(parts, 0, (size_t)(ngroups * WN) * sizeof(float));
    if (backward_filter_implicit(g, dz, x, parts, ngroups, nt) != LOOM_OK) {
      loom_sys_free(buf);
      return loom_last_status();
    }
  } else {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t gi = 0; gi < ngroups; gi++) {
      float *tmp = buf + (size_t)thread_id() * (size_t)each;
      uint16_t *col = (uint16_t *)(tmp + WN);
      float *part = parts + gi * WN;
      const int64_t lo = gi * g->N / ngroups, hi = (gi + 1) * g->N / ngroups;
      for (int64_t n0 = lo; n0 < hi; n0 += per) {
        const int64_t imgs = min64(per, hi - n0), rows = imgs * P;
        for (int64_t i = 0; i < imgs; i++) im2col(g, x + (n0 + i) * HWC, col + i * P * Kg, Kg);
        loom_gemm_bf16_out o = {.c = n0 == lo ? part : tmp, .ldc = Kg};
        if (loom_cpu_gemm_bf16(true, false, O, Kg, rows, dz + n0 * P * O, O, col, Kg, &o) != LOOM_OK) {
#pragma omp atomic write
          failed = 1;
          break;
        }
        if (n0 != lo)
          for (int64_t i = 0; i < WN; i++) part[i] += tmp[i];
      }
    }
  }
  if (!failed) {
    for (int64_t gi = 1; gi < ngroups; gi++)
      for (int64_t i = 0; i < WN; i++) parts[i] += parts[gi * WN + i];
    const int64_t KK = g->KH * g->KW;
    for (int64_t o = 0; o < O; o++)
      for (int64_t c = 0; c < g->C; c++)
        for (int64_t k = 0; k < KK; k++) canon[(o * g->C + c) * KK + k] = parts[(o * KK + k) * g->C + c];
    loom_cpu_store_f32(loom_tensor_ptr(dw), dw->dtype, 1, WN, canon);
  }
  loom_sys_free(buf);
  return failed ? loom_set_error(LOOM_ERR_OOM, "conv2d backward (bf16): out of host memory in the GEMM") : LOOM_OK;
}

loom_status loom_conv_bf16_backward(const loom_conv_geom *g, loom_op_args *a) {
  loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2], *y = a->n_in > 3 ? a->in[3] : NULL;
  loom_tensor *dx = a->out[0], *dw = a->out[1], *db = a->out[2];
  const bool relu = g->act == LOOM_ACT_RELU;
  const int64_t rows = g->N * g->OH * g->OW, O = g->O, Kg = g->KH * g->KW * g->C;

  /* dz: over gy when the engine owns it, else a copy (only when the mask
     changes it). */
  uint16_t *dz = loom_tensor_ptr(gy), *dz_own = NULL;
  if (relu && !a->i[LOOM_CONV_I_GY_OWNED]) {
    dz_own = loom_sys_malloc((size_t)(rows * O) * sizeof(uint16_t));
    if (!dz_own) return loom_set_error(LOOM_ERR_OOM, "conv2d backward (bf16): out of host memory for dZ");
    memcpy(dz_own, dz, (size_t)(rows * O) * sizeof(uint16_t));
    dz = dz_own;
  } else if (relu) {
    loom_tensor_bump_version(gy);
  }
  loom_status st = LOOM_OK;
  float *dbp = NULL;
  if (db) {
    dbp = loom_sys_malloc((size_t)O * sizeof(float));
    if (!dbp) st = loom_set_error(LOOM_ERR_OOM, "conv2d backward (bf16): out of host memory");
  }
  if (st == LOOM_OK && (relu || db)) {
    loom_cpu_bf16_mask_bias_grad(dz, relu ? loom_tensor_ptr(y) : NULL, rows, O, dbp);
    if (db) loom_cpu_store_f32(loom_tensor_ptr(db), db->dtype, db->strides[0], O, dbp);
  }
  uint16_t *wr = NULL;
  if (st == LOOM_OK && dx && loom_shape_numel(4, dx->shape) > 0 && data_as_forward(g)) {
    st = backward_data_forward(g, dz, w, dx);
  } else if (st == LOOM_OK && dx && loom_shape_numel(4, dx->shape) > 0) {
    wr = loom_sys_malloc((size_t)(O * Kg) * sizeof(uint16_t));
    if (!wr) st = loom_set_error(LOOM_ERR_OOM, "conv2d backward (bf16): out of host memory for the weight");
    else {
      reorder_w(g, w, wr, g->C);
      st = backward_data(g, dz, wr, dx);
    }
  }
  if (st == LOOM_OK && dw) st = backward_filter(g, dz, loom_tensor_ptr(x), dw);
  loom_sys_free(wr);
  loom_sys_free(dbp);
  loom_sys_free(dz_own);
  return st;
}
