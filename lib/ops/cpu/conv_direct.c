/* conv_direct.c — direct (implicit-GEMM) convolution on the CPU: no im2col
 * matrix; register-blocked AVX-512 (else AVX2+FMA) micro-kernels
 * (conv_direct_x86.c) read a zero-padded channels-last copy of one image at
 * a time, which stays in L2.
 *
 * Forward: for each output row, tiles of MR pixels x up to 64 output
 *   channels accumulate over the KH*KW taps and the input channels, with
 *   bias and ReLU applied before the tile's single store; any number of
 *   output channels is a loop over such blocks.
 * Backward-data: the same kernel on the padded output gradient, the weight
 *   transposed to [tap][o][c]. A stride s splits dX into s*s phases (the
 *   pixels whose row and column have one remainder mod s); each phase is a
 *   stride-1 correlation of dY with the taps that reach it, so no
 *   scatter-add and no zero-stuffing.
 * Backward-filter: for each tap, tiles of up to 16 input channels x up to
 *   64 output channels accumulate over all pixels of an image in registers;
 *   partial sums live per chunk of images (a fixed number of chunks, summed
 *   in order), so dW does not depend on the number of threads.
 * NCHW tensors are transposed to channels-last per image on the way in (and
 * the results back on the way out), inside the per-image working set, so
 * both formats share one set of kernels; NHWC needs no transposes at all.
 * f16/bf16 activations are widened and rounded the same way, per image
 * (loom_conv_buf): the widening path of mixed precision costs no full-size
 * f32 copies.
 *
 * Threads: images are split between threads (each with its own padded
 * buffers); results are identical for any thread count. */
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "loom/ops.h"
#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/conv_direct_kern.h"
#include "ops/cpu/cpu_isa.h"
#include "core/sys.h"

static inline int64_t ru16(int64_t v) { return (v + 15) / 16 * 16; }
static inline int64_t ru(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
/* The first n lanes (a prefix; every lane when n >= 16). */
static inline uint16_t lanes_mask(int64_t n) { return n >= 16 ? (uint16_t)0xFFFF : (uint16_t)((1u << n) - 1u); }

/* ---- instruction set --------------------------------------------------------- */
static bool isa_runs(const loom_conv_isa *is) {
  if (!is->npb) return false;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (is == &loom_conv_isa_avx512) return __builtin_cpu_supports("avx512f");
  if (is == &loom_conv_isa_avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return false;
}

static _Atomic(const loom_conv_isa *) g_isa = NULL;  /* NULL: the CPU kernels' instruction set */
static const loom_conv_isa g_no_isa;                  /* "none": no direct kernels */

static const loom_conv_isa *cur_isa(void) {
  const loom_conv_isa *is = atomic_load_explicit(&g_isa, memory_order_acquire);
  if (is == &g_no_isa) return NULL;
  if (is) return is;
  switch (loom_cpu_isa_level_now()) {
    case LOOM_CPU_ISA_AMXBF16:
    case LOOM_CPU_ISA_AVX512BF16:
    case LOOM_CPU_ISA_AVX512: is = &loom_conv_isa_avx512; break;
    case LOOM_CPU_ISA_AVX2: is = &loom_conv_isa_avx2; break;
    case LOOM_CPU_ISA_SCALAR: return NULL;
  }
  return isa_runs(is) ? is : NULL;  /* npb == 0 where the ISA was not compiled */
}

bool loom_conv_cpu_select_isa(const char *name) {
  const loom_conv_isa *is = NULL;
  if (name && !strcmp(name, "avx512")) is = &loom_conv_isa_avx512;
  else if (name && !strcmp(name, "avx2")) is = &loom_conv_isa_avx2;
  else if (name && !strcmp(name, "none")) is = &g_no_isa;
  else if (name) return false;
  if (is && is != &g_no_isa && !isa_runs(is)) return false;
  atomic_store_explicit(&g_isa, is, memory_order_release);
  return true;
}

const char *loom_conv_cpu_isa_name(void) {
  const loom_conv_isa *is = cur_isa();
  return is ? is->name : "none";
}

bool loom_conv_direct_applies(const loom_conv_geom *g) {
  if (!cur_isa() || loom_conv_cpu_gemm_forced()) return false;
  if (g->KH * g->KW > LOOM_CONV_MAX_TAPS) return false;
  /* Narrow groups would waste most of each 16-lane vector. */
  if (g->G > 1 && (g->Og < 8 || g->Cg < 8)) return false;
  return true;
}

static int threads_for(int64_t work) {
  int nt = loom_get_num_threads();
  if (nt < 1) nt = 1;
  if (nt > work) nt = (int)(work > 0 ? work : 1);
  return nt;
}

/* ---- kernel choice ------------------------------------------------------------ */
/* nvec output vectors in nb = ceil(nvec / maxb) blocks, as even as possible:
 * the first r blocks have q + 1 vectors, the rest q. Any channel count: the
 * blocks are computed, not stored, and have at most two sizes. */
typedef struct vec_blocks {
  int64_t nb, q, r;
} vec_blocks;

static vec_blocks split_vecs(int64_t nvec, int64_t maxb) {
  vec_blocks v = {(nvec + maxb - 1) / maxb, 0, 0};
  v.q = nvec / v.nb;
  v.r = nvec % v.nb;
  return v;
}
static int64_t vb_first(const vec_blocks *v, int64_t b) { return b * v->q + (b < v->r ? b : v->r); }
static int vb_size(const vec_blocks *v, int64_t b) { return (int)(v->q + (b < v->r ? 1 : 0)); }

/* The pixel-broadcast kernel for a block of ovb vectors over rows of width
 * pixels with pitch ps: the exact-pitch variant if there is one, else the
 * runtime-pitch one; the tile minimising (tiles x tile cost), where fewer
 * than 10 accumulators run latency-bound. steps: reduction steps per tile. */
static const loom_pb_kernel *pick_pb(const loom_conv_isa *is, int ovb, int64_t width, int64_t ps, int64_t steps) {
  const loom_pb_kernel *best = NULL;
  double best_cost = 1e300;
  bool exact = ps == 16 || ps == 32 || ps == 64 || ps == 128;
  for (int k = 0; k < is->npb; k++) {
    const loom_pb_kernel *kn = &is->pb[k];
    if (kn->ovb != ovb || kn->ps != (exact ? ps : 0)) continue;
    int64_t tiles = (width + kn->mr - 1) / kn->mr;
    double acc = (double)(kn->mr * ovb);
    double cost = (double)tiles * ((acc > 10 ? acc : 10) * (double)steps / 2.0 + 20.0 + acc);
    if (cost < best_cost) {
      best_cost = cost;
      best = kn;
    }
  }
  return best;
}

/* The kernels for both block sizes of v (q and q + 1 vectors): kern[0] for
 * size q, kern[1] for q + 1; false if a size has none (cannot happen for
 * sizes 1..maxb, which every instruction set has). */
static bool pick_pb_blocks(const loom_conv_isa *is, const vec_blocks *v, int64_t width, int64_t ps, int64_t steps,
                           const loom_pb_kernel *kern[2]) {
  kern[0] = v->q > 0 ? pick_pb(is, (int)v->q, width, ps, steps) : NULL;
  kern[1] = v->r > 0 ? pick_pb(is, (int)v->q + 1, width, ps, steps) : NULL;
  return (v->q == 0 || kern[0]) && (v->r == 0 || kern[1]);
}

/* Channel-broadcast kernel for Cg channels x nvec vectors (its vector count
 * divides nvec, so blocks never overlap), by cycles per pixel: FMAs on two
 * ports, loads (a broadcast per channel, a vector per block) on three. */
static const loom_cb_kernel *pick_cb(const loom_conv_isa *is, int64_t Cg, int64_t nvec) {
  const loom_cb_kernel *best = NULL;
  double best_cost = 1e300;
  for (int k = 0; k < is->ncb; k++) {
    const loom_cb_kernel *kn = &is->cb[k];
    if (nvec % kn->ovb) continue;
    int64_t units = ((Cg + kn->mrc - 1) / kn->mrc) * (nvec / kn->ovb);
    double fma = kn->mrc * kn->ovb / 2.0, ld = (kn->mrc + kn->ovb) / 3.0;
    double cost = (double)units * ((fma > ld ? fma : ld) + 1.0);
    if (cost < best_cost) {
      best_cost = cost;
      best = kn;
    }
  }
  return best;
}

/* ---- forward ----------------------------------------------------------------------- */
loom_status loom_conv_direct_forward(const loom_conv_geom *g, loom_conv_buf x, const float *w, const float *b,
                                     loom_conv_buf y) {
  const loom_conv_isa *is = cur_isa();
  const int64_t VL = is->vl, maxb = VL == 16 ? 4 : 2;
  const int64_t T = g->KH * g->KW, Cp = ru16(g->C), Og = g->Og, Cg = g->Cg, Ogp = ru(Og, VL);
  const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, P = g->OH * g->OW, ps = g->sw * Cp;
  const int64_t xfl = Hp * Wp * Cp + 32 * ps + 64;  /* slack: tail tiles read past the last row */
  const bool relu = g->act == LOOM_ACT_RELU;
  const vec_blocks vb = split_vecs(Ogp / VL, maxb);
  const loom_pb_kernel *kern[2];
  if (!pick_pb_blocks(is, &vb, g->OW, ps, T * Cg, kern))
    return loom_set_error(LOOM_ERR_INTERNAL, "conv2d: no direct kernel for blocks of %lld vectors", (long long)vb.q);
  int nt = threads_for(g->N);
  /* Per thread: the padded image, the output rows unless written in place,
     and for f16/bf16 the widened NCHW image and the rounded NCHW planes
     (every part a multiple of 16 floats: 64-byte aligned). */
  const int64_t CHW = g->C * g->H * g->W, PO = P * g->O;
  const bool in_place = g->nhwc && y.dt == LOOM_F32;
  const int64_t xw_n = x.dt != LOOM_F32 && !g->nhwc ? ru16(CHW) : 0;
  const int64_t y2_n = y.dt != LOOM_F32 && !g->nhwc ? ru16(PO) : 0;
  const int64_t per = ru16(xfl) + (in_place ? 0 : ru16(PO)) + xw_n + y2_n;
  float *wpk = loom_conv_alloc_f(g->G * T * Cg * Ogp), *bufs = loom_conv_alloc_f(nt * per);
  if (!wpk || !bufs) {
    loom_sys_free(wpk), loom_sys_free(bufs);
    return loom_set_error(LOOM_ERR_OOM, "conv2d: out of host memory for the direct convolution's buffers");
  }
  /* Weights [G][T][Cg][Ogp], zero beyond Og. */
  memset(wpk, 0, (size_t)(g->G * T * Cg * Ogp) * sizeof(float));
  for (int64_t gi = 0; gi < g->G; gi++)
    for (int64_t o = 0; o < Og; o++)
      for (int64_t c = 0; c < Cg; c++)
        for (int64_t t = 0; t < T; t++) wpk[((gi * T + t) * Cg + c) * Ogp + o] = w[((gi * Og + o) * Cg + c) * T + t];
  int64_t xoff[LOOM_CONV_MAX_TAPS];
  for (int64_t kh = 0; kh < g->KH; kh++)
    for (int64_t kw = 0; kw < g->KW; kw++) xoff[kh * g->KW + kw] = (kh * g->dh * Wp + kw * g->dw) * Cp;

#pragma omp parallel num_threads(nt)
  {
    float *xin = bufs + omp_get_thread_num() * per, *ytmp = xin + ru16(xfl);
    float *xw = ytmp + (in_place ? 0 : ru16(PO)), *y2 = xw + xw_n;
    memset(xin, 0, (size_t)xfl * sizeof(float));
    const float *wt[LOOM_CONV_MAX_TAPS];
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g->N; n++) {
      loom_conv_fill_padded_buf(x, n, g->nhwc, g->C, g->H, g->W, xin, Wp, Cp, g->ph, g->pw, xw);
      float *yimg = in_place ? (float *)y.p + n * PO : ytmp;
      for (int64_t gi = 0; gi < g->G; gi++)
        for (int64_t k = 0; k < vb.nb; k++) {
          const int size = vb_size(&vb, k);
          const loom_pb_kernel *kn = kern[size > vb.q];
          const int64_t o0 = vb_first(&vb, k) * VL;
          for (int64_t t = 0; t < T; t++) wt[t] = wpk + (gi * T + t) * Cg * Ogp + o0;
          loom_pb_args a = {.xoff = xoff, .w = wt, .ntaps = (int)T, .K = Cg, .ws = Ogp, .ps = ps, .yps = g->O,
                            .lastmask = lanes_mask(Og - (o0 + (size - 1) * VL)),
                            .bias = b ? b + gi * Og + o0 : NULL, .relu = relu};
          for (int64_t oh = 0; oh < g->OH; oh++)
            for (int64_t ow = 0; ow < g->OW; ow += kn->mr) {
              a.x = xin + (oh * g->sh * Wp + ow * g->sw) * Cp + gi * Cg;
              a.y = yimg + (oh * g->OW + ow) * g->O + gi * Og + o0;
              a.mr = (int)min64(kn->mr, g->OW - ow);
              kn->fn(&a);
            }
        }
      loom_conv_store_image(y, n, g->nhwc, P, g->O, yimg, y2);
    }
  }
  loom_sys_free(wpk);
  loom_sys_free(bufs);
  return LOOM_OK;
}

/* ---- backward-data ------------------------------------------------------------------ */
static inline int64_t pmod(int64_t a, int64_t m) { return ((a % m) + m) % m; }

/* Margins (lo, hi) around the dY rows (or columns) that the phases' taps
 * reach outside [0, OUT): dX index r + s*t takes dY index t + (r + p - k*d)/s
 * for the taps k with r + p - k*d divisible by s. */
static void phase_margins(int64_t IN, int64_t OUT, int64_t K, int64_t s, int64_t p, int64_t d, int64_t *lo,
                          int64_t *hi) {
  *lo = 0;
  *hi = 0;
  for (int64_t r = 0; r < s && r < IN; r++) {
    int64_t cnt = (IN - r + s - 1) / s;
    for (int64_t k = 0; k < K; k++) {
      int64_t v = r + p - k * d;
      if (pmod(v, s)) continue;
      int64_t off = v / s;  /* exact */
      *lo = max64(*lo, -off);
      *hi = max64(*hi, cnt - 1 + off - (OUT - 1));
    }
  }
}

loom_status loom_conv_direct_backward_data(const loom_conv_geom *g, loom_conv_buf dy, const float *w, loom_conv_buf dx) {
  const loom_conv_isa *is = cur_isa();
  const int64_t VL = is->vl, maxb = VL == 16 ? 4 : 2;
  const int64_t T = g->KH * g->KW, Op = ru16(g->O), Og = g->Og, Cg = g->Cg, Cgp = ru(Cg, VL);
  const int64_t sh = g->sh, sw = g->sw, P = g->OH * g->OW;
  int64_t lo_h, hi_h, lo_w, hi_w;
  phase_margins(g->H, g->OH, g->KH, sh, g->ph, g->dh, &lo_h, &hi_h);
  phase_margins(g->W, g->OW, g->KW, sw, g->pw, g->dw, &lo_w, &hi_w);
  const int64_t Hy = g->OH + lo_h + hi_h, Wy = g->OW + lo_w + hi_w;
  const int64_t yfl = Hy * Wy * Op + 32 * Op + 64;
  const vec_blocks vb = split_vecs(Cgp / VL, maxb);
  /* Phase widths are ceil((W - r) / sw): all within one pixel of the first. */
  const int64_t tw0 = (g->W + sw - 1) / sw, taps_per_phase = T / (sh * sw) > 0 ? T / (sh * sw) : 1;
  const loom_pb_kernel *kern[2];
  if (!pick_pb_blocks(is, &vb, tw0, Op, taps_per_phase * Og, kern))
    return loom_set_error(LOOM_ERR_INTERNAL, "conv2d backward: no direct kernel for blocks of %lld vectors",
                          (long long)vb.q);
  int nt = threads_for(g->N);
  /* Per thread (parts of 16 floats: 64-byte aligned): the padded dY, dX's
     rows unless written in place, and for f16/bf16 the widened NCHW dY and
     the rounded NCHW planes. */
  const int64_t HWC = g->H * g->W * g->C;
  const bool in_place = g->nhwc && dx.dt == LOOM_F32;
  const int64_t yw_n = dy.dt != LOOM_F32 && !g->nhwc ? ru16(P * g->O) : 0;
  const int64_t x2_n = dx.dt != LOOM_F32 && !g->nhwc ? ru16(HWC) : 0;
  const int64_t per = ru16(yfl) + (in_place ? 0 : ru16(HWC)) + yw_n + x2_n;
  float *wpk = loom_conv_alloc_f(g->G * T * Og * Cgp), *bufs = loom_conv_alloc_f(nt * per);
  if (!wpk || !bufs) {
    loom_sys_free(wpk), loom_sys_free(bufs);
    return loom_set_error(LOOM_ERR_OOM, "conv2d backward: out of host memory for the direct convolution's buffers");
  }
  /* Weights [G][T][Og][Cgp], zero beyond Cg. */
  memset(wpk, 0, (size_t)(g->G * T * Og * Cgp) * sizeof(float));
  for (int64_t gi = 0; gi < g->G; gi++)
    for (int64_t o = 0; o < Og; o++)
      for (int64_t c = 0; c < Cg; c++)
        for (int64_t t = 0; t < T; t++) wpk[((gi * T + t) * Og + o) * Cgp + c] = w[((gi * Og + o) * Cg + c) * T + t];

#pragma omp parallel num_threads(nt)
  {
    float *ybuf = bufs + omp_get_thread_num() * per, *dxtmp = ybuf + ru16(yfl);
    float *yw = dxtmp + (in_place ? 0 : ru16(HWC)), *x2 = yw + yw_n;
    memset(ybuf, 0, (size_t)yfl * sizeof(float));
    int64_t xoff[LOOM_CONV_MAX_TAPS];
    int64_t tap[LOOM_CONV_MAX_TAPS];
    const float *wt[LOOM_CONV_MAX_TAPS];
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g->N; n++) {
      loom_conv_fill_padded_buf(dy, n, g->nhwc, g->O, g->OH, g->OW, ybuf, Wy, Op, lo_h, lo_w, yw);
      float *dximg = in_place ? (float *)dx.p + n * HWC : dxtmp;
      for (int64_t rh = 0; rh < sh && rh < g->H; rh++)
        for (int64_t rw = 0; rw < sw && rw < g->W; rw++) {
          const int64_t th = (g->H - rh + sh - 1) / sh, tw = (g->W - rw + sw - 1) / sw;
          /* The taps that reach this phase, as offsets into the padded dY.
           * None (possible with large strides): the phase is zeros, which
           * the kernel writes with ntaps = 0. */
          int ntp = 0;
          for (int64_t kh = 0; kh < g->KH; kh++) {
            int64_t vh = rh + g->ph - kh * g->dh;
            if (pmod(vh, sh)) continue;
            for (int64_t kw = 0; kw < g->KW; kw++) {
              int64_t vw = rw + g->pw - kw * g->dw;
              if (pmod(vw, sw)) continue;
              xoff[ntp] = ((vh / sh) * Wy + vw / sw) * Op;
              tap[ntp++] = kh * g->KW + kw;
            }
          }
          for (int64_t gi = 0; gi < g->G; gi++)
            for (int64_t k = 0; k < vb.nb; k++) {
              const int size = vb_size(&vb, k);
              const loom_pb_kernel *kn = kern[size > vb.q];
              const int64_t c0 = vb_first(&vb, k) * VL;
              for (int j = 0; j < ntp; j++) wt[j] = wpk + (gi * T + tap[j]) * Og * Cgp + c0;
              loom_pb_args a = {.xoff = xoff, .w = wt, .ntaps = ntp, .K = Og, .ws = Cgp, .ps = Op,
                                .yps = sw * g->C, .lastmask = lanes_mask(Cg - (c0 + (size - 1) * VL)),
                                .bias = NULL, .relu = false};
              for (int64_t t = 0; t < th; t++)
                for (int64_t u = 0; u < tw; u += kn->mr) {
                  a.x = ybuf + ((lo_h + t) * Wy + lo_w + u) * Op + gi * Og;
                  a.y = dximg + ((rh + sh * t) * g->W + rw + sw * u) * g->C + gi * Cg + c0;
                  a.mr = (int)min64(kn->mr, tw - u);
                  kn->fn(&a);
                }
            }
        }
      loom_conv_store_image(dx, n, g->nhwc, g->H * g->W, g->C, dximg, x2);
    }
  }
  loom_sys_free(wpk);
  loom_sys_free(bufs);
  return LOOM_OK;
}

/* ---- backward-filter ------------------------------------------------------------------ */
#define DW_CHUNKS 8  /* partial sums per chunk of images: fixed, so dW does not depend on threads */

loom_status loom_conv_direct_backward_filter(const loom_conv_geom *g, loom_conv_buf x, loom_conv_buf dy, float *dw) {
  const loom_conv_isa *is = cur_isa();
  const int64_t VL = is->vl;
  const int64_t T = g->KH * g->KW, Cp = ru16(g->C), Og = g->Og, Cg = g->Cg, Ogp = ru(Og, VL);
  const int64_t Hp = g->H + 2 * g->ph, Wp = g->W + 2 * g->pw, P = g->OH * g->OW;
  /* Few input channels (a stem: C = 1 or 3): pixels at pitch C, and the KW
   * taps of a kernel row become KW*C consecutive "channels" of one tap, so
   * one register tile covers them all. The partial sums [tap][c][o] come
   * out in the same order either way. */
  const bool fold = g->G == 1 && g->dw == 1 && g->C < 16 && g->C * g->KW <= 16;
  const int64_t Cq = fold ? g->C : Cp, KWf = fold ? 1 : g->KW, Cf = fold ? g->C * g->KW : Cg;
  const int64_t xfl = Hp * Wp * Cq + 64;  /* slack: the last pixel's channel block may read past C */
  const int64_t WN = g->G * T * Cg * Ogp, nvec = Ogp / VL;
  const loom_cb_kernel *kn = pick_cb(is, Cf, nvec);
  if (!kn) return loom_set_error(LOOM_ERR_INTERNAL, "conv2d backward: no direct weight-gradient kernel");
  const int64_t nchunk = min64(g->N, DW_CHUNKS);
  /* Rows per block: about 32 KiB of input rows and dY rows. */
  const int64_t row_bytes = (g->sh * Wp * Cq + g->OW * g->O) * (int64_t)sizeof(float);
  const int64_t halo = (g->KH - 1) * g->dh * Wp * Cq * (int64_t)sizeof(float);
  int64_t rblk = row_bytes > 0 ? (32768 - halo) / row_bytes : g->OH;
  if (rblk < 1) rblk = 1;
  int nt = threads_for(nchunk);
  /* Per thread (parts of 16 floats: 64-byte aligned): the padded image,
     dY's pixel rows unless read in place, and for f16/bf16 the widened
     NCHW image and NCHW dY. */
  const int64_t CHW = g->C * g->H * g->W, PO = P * g->O;
  const bool dy_in_place = g->nhwc && dy.dt == LOOM_F32;
  const int64_t xw_n = x.dt != LOOM_F32 && !g->nhwc ? ru16(CHW) : 0;
  const int64_t dw_n = dy.dt != LOOM_F32 && !g->nhwc ? ru16(PO) : 0;
  const int64_t per = ru16(xfl) + (dy_in_place ? 0 : ru16(PO)) + xw_n + dw_n;
  float *parts = loom_conv_alloc_f(nchunk * WN), *bufs = loom_conv_alloc_f(nt * per);
  if (!parts || !bufs) {
    loom_sys_free(parts), loom_sys_free(bufs);
    return loom_set_error(LOOM_ERR_OOM, "conv2d backward: out of host memory for the weight-gradient buffers");
  }
  memset(parts, 0, (size_t)(nchunk * WN) * sizeof(float));

#pragma omp parallel num_threads(nt)
  {
    float *xin = bufs + omp_get_thread_num() * per, *dytmp = xin + ru16(xfl);
    float *xw = dytmp + (dy_in_place ? 0 : ru16(PO)), *dyw = xw + xw_n;
    memset(xin, 0, (size_t)xfl * sizeof(float));
#pragma omp for schedule(static)
    for (int64_t ch = 0; ch < nchunk; ch++) {
      float *part = parts + ch * WN;
      for (int64_t n = ch * g->N / nchunk; n < (ch + 1) * g->N / nchunk; n++) {
        loom_conv_fill_padded_buf(x, n, g->nhwc, g->C, g->H, g->W, xin, Wp, Cq, g->ph, g->pw, xw);
        const float *dyimg;
        if (g->nhwc) {
          dyimg = loom_conv_image_f32(dy, n, PO, dytmp);
        } else {
          loom_conv_load_planes(dytmp, loom_conv_image_f32(dy, n, PO, dyw), P, g->O);
          dyimg = dytmp;
        }
        loom_cb_args a = {.xrs = g->sh * Wp * Cq, .xps = g->sw * Cq, .dyrs = g->OW * g->O, .dyps = g->O,
                          .cols = g->OW, .dws = Ogp};
        /* Blocks of output rows whose input and dY rows fit in L1 together,
         * all taps per block: each row is read from L2 once per block
         * instead of once per tap. */
        for (int64_t r0 = 0; r0 < g->OH; r0 += rblk)
          for (int64_t gi = 0; gi < g->G; gi++)
          for (int64_t t = 0; t < g->KH * KWf; t++) {
            const int64_t kh = t / KWf, kw = t % KWf, tt = fold ? kh * g->KW : t;
            const float *xt = xin + ((r0 * g->sh + kh * g->dh) * Wp + kw * g->dw) * Cq + gi * Cg;
            a.rows = min64(rblk, g->OH - r0);
            for (int64_t c0 = 0; c0 < Cf; c0 += kn->mrc)
              for (int64_t v0 = 0; v0 < nvec; v0 += kn->ovb) {
                a.x = xt + c0;
                a.dy = dyimg + r0 * g->OW * g->O + gi * Og + v0 * VL;
                a.dw = part + ((gi * T + tt) * Cg + c0) * Ogp + v0 * VL;
                a.mrc = (int)min64(kn->mrc, Cf - c0);
                a.lastmask = lanes_mask(Og - (v0 + kn->ovb - 1) * VL);
                kn->fn(&a);
              }
          }
      }
    }
  }
  loom_sys_free(bufs);
  for (int64_t ch = 1; ch < nchunk; ch++)
    for (int64_t i = 0; i < WN; i++) parts[i] += parts[ch * WN + i];
  for (int64_t gi = 0; gi < g->G; gi++)
    for (int64_t o = 0; o < Og; o++)
      for (int64_t c = 0; c < Cg; c++)
        for (int64_t t = 0; t < T; t++)
          dw[((gi * Og + o) * Cg + c) * T + t] = nchunk > 0 ? parts[((gi * T + t) * Cg + c) * Ogp + o] : 0.0f;
  loom_sys_free(parts);
  return LOOM_OK;
}
