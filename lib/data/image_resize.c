/* image_resize.c — crop geometry of torchvision's ImageNet transforms and
 * Pillow's antialiased bilinear resampling (see image_resize.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/image_resize.h"
#include "data/data_internal.h"
#include "core/sys.h"

/* Uniform double in [0, 1) from draw n of key. */
static double draw(uint64_t key, uint64_t n) { return (double)(loom_data_mix(key, n) >> 11) * 0x1.0p-53; }

void loom_img_rrc_crop(int W, int H, const loom_rrc_params *p, uint64_t key, int *top, int *left, int *h, int *w) {
  const double area = (double)W * (double)H;
  const double lr0 = log(p->ratio_min), lr1 = log(p->ratio_max);
  uint64_t n = 0x52524300u; /* "RRC" */
  for (int attempt = 0; attempt < 10; attempt++) {
    double target = area * (p->scale_min + (p->scale_max - p->scale_min) * draw(key, n++));
    double aspect = exp(lr0 + (lr1 - lr0) * draw(key, n++));
    /* Python's round(): half to even, which nearbyint does in the default mode. */
    int cw = (int)nearbyint(sqrt(target * aspect)), ch = (int)nearbyint(sqrt(target / aspect));
    if (cw > 0 && cw <= W && ch > 0 && ch <= H) {
      *top = (int)(draw(key, n++) * (double)(H - ch + 1));
      *left = (int)(draw(key, n++) * (double)(W - cw + 1));
      *h = ch;
      *w = cw;
      return;
    }
  }
  /* Fallback: the central crop of the nearest allowed aspect ratio. */
  double in_ratio = (double)W / (double)H;
  int cw = W, ch = H;
  if (in_ratio < p->ratio_min) ch = (int)nearbyint((double)W / p->ratio_min);
  else if (in_ratio > p->ratio_max) cw = (int)nearbyint((double)H * p->ratio_max);
  if (ch > H) ch = H;
  if (cw > W) cw = W;
  *top = (H - ch) / 2;
  *left = (W - cw) / 2;
  *h = ch;
  *w = cw;
}

void loom_img_center_box(int W, int H, int resize, int size, double box[4]) {
  /* torchvision's Resize(int): the shorter side becomes `resize`, the longer
   * int(resize * long / short); an image whose shorter side is already
   * `resize` is left alone. */
  int nw = W, nh = H;
  if ((W <= H ? W : H) != resize) {
    if (W <= H) nw = resize, nh = (int)((double)resize * H / W);
    else nh = resize, nw = (int)((double)resize * W / H);
  }
  /* CenterCrop: int(round((n - size) / 2.0)). */
  int top = (int)nearbyint((double)(nh - size) / 2.0), left = (int)nearbyint((double)(nw - size) / 2.0);
  double sx = (double)W / nw, sy = (double)H / nh;
  box[0] = left * sx;
  box[1] = top * sy;
  box[2] = (left + size) * sx;
  box[3] = (top + size) * sy;
}

bool loom_img_flip(uint64_t key) { return (loom_data_mix(key, 0x464C4950u /* "FLIP" */) >> 63) & 1u; }

/* ---- resampling -------------------------------------------------------------------- */
#define PRECISION_BITS (32 - 8 - 2)

void loom_img_axis_free(loom_img_axis *a) {
  loom_sys_free(a->start);
  loom_sys_free(a->len);
  loom_sys_free(a->k);
  memset(a, 0, sizeof *a);
}

static double triangle(double x) {
  if (x < 0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc for the bilinear filter,
 * with the source clipped to [clip0, clip1) (Pillow: the whole image, or the
 * crop when the crop is taken first). */
loom_status loom_img_axis_init(loom_img_axis *a, double in0, double in1, int clip0, int clip1, int out) {
  memset(a, 0, sizeof *a);
  double scale = (in1 - in0) / out;
  double fscale = scale < 1.0 ? 1.0 : scale;
  double support = fscale; /* bilinear: 1, widened by the downscale */
  int ksize = (int)ceil(support) * 2 + 1;
  a->out = out;
  a->ksize = ksize;
  a->start = loom_sys_malloc(sizeof(int) * (size_t)out);
  a->len = loom_sys_malloc(sizeof(int) * (size_t)out);
  a->k = loom_sys_malloc(sizeof(int32_t) * (size_t)out * (size_t)ksize);
  double *kd = loom_sys_malloc(sizeof(double) * (size_t)ksize);
  if (!a->start || !a->len || !a->k || !kd) {
    loom_sys_free(kd);
    loom_img_axis_free(a);
    return loom_set_error(LOOM_ERR_OOM, "image resize: out of host memory");
  }
  a->lo = clip1;
  a->hi = clip0;
  for (int xx = 0; xx < out; xx++) {
    double center = in0 + (xx + 0.5) * scale, ss = 1.0 / fscale, ww = 0.0;
    int xmin = (int)(center - support + 0.5);
    if (xmin < clip0) xmin = clip0;
    int xmax = (int)(center + support + 0.5);
    if (xmax > clip1) xmax = clip1;
    xmax -= xmin;
    if (xmax > ksize) xmax = ksize;
    if (xmax < 1) { /* a degenerate span: take the nearest pixel */
      xmin = (int)center < clip0 ? clip0 : ((int)center >= clip1 ? clip1 - 1 : (int)center);
      xmax = 1;
      kd[0] = 1.0;
      ww = 1.0;
    } else {
      for (int x = 0; x < xmax; x++) {
        double w = triangle((x + xmin - center + 0.5) * ss);
        kd[x] = w;
        ww += w;
      }
    }
    int32_t *k = a->k + (size_t)xx * (size_t)ksize;
    for (int x = 0; x < ksize; x++) {
      double v = x < xmax && ww != 0.0 ? kd[x] / ww : 0.0;
      k[x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS) : 0.5 + v * (1 << PRECISION_BITS));
    }
    /* Every window ksize taps wide where the clip allows (zero weights pad
     * it; sums are unchanged), so the passes run one fixed-length loop. */
    if (ksize <= clip1 - clip0) {
      int shift = xmin + ksize > clip1 ? xmin + ksize - clip1 : 0;
      if (shift) {
        memmove(k + shift, k, sizeof(int32_t) * (size_t)(ksize - shift));
        memset(k, 0, sizeof(int32_t) * (size_t)shift);
        xmin -= shift;
      }
      xmax = ksize;
    }
    a->start[xx] = xmin;
    a->len[xx] = xmax;
    if (xmin < a->lo) a->lo = xmin;
    if (xmin + xmax > a->hi) a->hi = xmin + xmax;
  }
  loom_sys_free(kd);
  return LOOM_OK;
}

/* Sums stay in int32 as Pillow's: 2^21 + 255 * (2^22 + taps / 2) < 2^31. */
static inline unsigned char clip8(int32_t in) {
  if (in >= (255 << PRECISION_BITS)) return 255;
  if (in <= 0) return 0;
  return (unsigned char)(in >> PRECISION_BITS);
}

/* One row of the horizontal pass; K > 0: every window is K taps. */
static inline __attribute__((always_inline)) void hrow(const unsigned char *restrict s, unsigned char *restrict t,
                                                       const loom_img_axis *ax, int ox, const int K) {
  for (int xx = 0; xx < ax->out; xx++) {
    const int32_t *k = ax->k + (size_t)xx * (size_t)ax->ksize;
    const unsigned char *p = s + 3 * (ax->start[xx] - ox);
    const int n = K ? K : ax->len[xx];
    int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
    for (int x = 0; x < n; x++) {
      s0 += p[3 * x] * k[x];
      s1 += p[3 * x + 1] * k[x];
      s2 += p[3 * x + 2] * k[x];
    }
    t[3 * xx] = clip8(s0);
    t[3 * xx + 1] = clip8(s1);
    t[3 * xx + 2] = clip8(s2);
  }
}

size_t loom_img_resample_tmp_bytes(const loom_img_axis *ax, const loom_img_axis *ay) {
  /* The horizontal pass's rows, then (64-byte aligned) one row of int32 sums. */
  size_t t = (size_t)(ay->hi - ay->lo) * (size_t)ax->out * 3;
  return t + (-t & 63) + (size_t)ax->out * 3 * sizeof(int32_t) + 64;
}

void loom_img_resample(const unsigned char *src, int stride, int ox, int oy, const loom_img_axis *ax,
                       const loom_img_axis *ay, bool flip, unsigned char *restrict tmp, unsigned char *restrict dst) {
  const int ow = ax->out, oh = ay->out, rows = ay->hi - ay->lo;
  /* Horizontal pass over the rows the vertical pass reads: tmp is HWC.
   * The usual widths (3: upscaling, 5: up to 2x down, 7: 3x) get loops of a
   * constant length the compiler unrolls. */
  const bool uniform = ax->ksize <= 7 && ax->len[0] == ax->ksize && ax->len[ow - 1] == ax->ksize;
  for (int r = 0; r < rows; r++) {
    const unsigned char *s = src + (size_t)(ay->lo + r - oy) * (size_t)stride;
    unsigned char *t = tmp + (size_t)r * (size_t)ow * 3;
    if (uniform && ax->ksize == 3) hrow(s, t, ax, ox, 3);
    else if (uniform && ax->ksize == 5) hrow(s, t, ax, ox, 5);
    else if (uniform && ax->ksize == 7) hrow(s, t, ax, ox, 7);
    else hrow(s, t, ax, ox, 0);
  }
  /* Vertical pass into CHW, mirrored when flip: per output row, whole tmp
   * rows are accumulated (contiguous, so it vectorizes), then split into
   * the three planes. */
  const size_t plane = (size_t)ow * (size_t)oh, rowlen = (size_t)ow * 3;
  int32_t *restrict acc = (int32_t *)(tmp + (size_t)rows * rowlen + (-(size_t)rows * rowlen & 63));
  for (int yy = 0; yy < oh; yy++) {
    const int32_t *k = ay->k + (size_t)yy * (size_t)ay->ksize;
    const unsigned char *t0 = tmp + (size_t)(ay->start[yy] - ay->lo) * rowlen;
    for (size_t i = 0; i < rowlen; i++) acc[i] = 1 << (PRECISION_BITS - 1);
    for (int y = 0; y < ay->len[yy]; y++) {
      const unsigned char *restrict q = t0 + (size_t)y * rowlen;
      const int32_t ky = k[y];
      for (size_t i = 0; i < rowlen; i++) acc[i] += q[i] * ky;
    }
    unsigned char *d = dst + (size_t)yy * (size_t)ow;
    if (!flip)
      for (int xx = 0; xx < ow; xx++) {
        d[xx] = clip8(acc[3 * xx]);
        d[plane + xx] = clip8(acc[3 * xx + 1]);
        d[2 * plane + xx] = clip8(acc[3 * xx + 2]);
      }
    else
      for (int xx = 0; xx < ow; xx++) {
        d[ow - 1 - xx] = clip8(acc[3 * xx]);
        d[plane + ow - 1 - xx] = clip8(acc[3 * xx + 1]);
        d[2 * plane + ow - 1 - xx] = clip8(acc[3 * xx + 2]);
      }
  }
}
