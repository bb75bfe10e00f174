/* transform.c — per-sample transforms: random crop with zero padding,
 * random horizontal flip, scale and per-channel normalize, and dtype
 * conversion, fused into one pass over the output.
 *
 * Randomness comes from a key derived from (seed, epoch, sample index), never
 * from a shared generator, so a sample gets the same crop and flip whichever
 * worker handles it and in whatever order. */
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"
#include "core/sys.h"

void loom_transform_destroy(loom_transform *t) {
  loom_sys_free(t->a);
  loom_sys_free(t->b);
  t->a = t->b = NULL;
}

loom_status loom_transform_init(loom_transform *t, const loom_dataset *ds, const loom_loader_options *o) {
  memset(t, 0, sizeof *t);
  t->src = ds->x_dtype;
  t->out = o->x_dtype;
  t->numel = (int64_t)(ds->x_bytes / loom_dtype_size(ds->x_dtype));
  int nd = ds->x_ndim;
  const int64_t *sh = ds->x_shape;
  if (nd == 2) { t->C = 1; t->H = sh[0]; t->W = sh[1]; }
  else if (nd == 3) { t->C = sh[0]; t->H = sh[1]; t->W = sh[2]; }
  else if (nd >= 4) { t->C = sh[0]; t->H = 1; t->W = t->numel / sh[0]; }
  else { t->C = 1; t->H = 1; t->W = t->numel; }
  bool spatial = o->crop_padding > 0 || o->hflip;
  if (spatial && (nd < 2 || nd > 3))
    return loom_set_error(LOOM_ERR_SHAPE,
                          "loader: random crop / flip need image samples of shape [H,W] or [C,H,W]; this dataset's "
                          "samples have %d dims",
                          nd);
  if (o->crop_padding < 0 || o->crop_padding > 4096)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loader: crop_padding is %d; use 0 (off) to 4096", o->crop_padding);
  t->pad = o->crop_padding;
  t->flip = o->hflip;
  bool normalize = o->norm_channels != 0;
  if (normalize) {
    if (o->norm_channels != 1 && o->norm_channels != t->C)
      return loom_set_error(LOOM_ERR_INVALID_ARG,
                            "loader: norm_channels is %d but samples have %lld channels; give 1 value or one per channel",
                            o->norm_channels, (long long)t->C);
    if (!o->mean || !o->std)
      return loom_set_error(LOOM_ERR_INVALID_ARG, "loader: norm_channels is %d but mean or std is NULL", o->norm_channels);
    for (int c = 0; c < o->norm_channels; c++)
      if (!(o->std[c] > 0.0f))
        return loom_set_error(LOOM_ERR_INVALID_ARG, "loader: std[%d] is %g; every std must be > 0", c, (double)o->std[c]);
  }
  if (!(o->scale == o->scale) || o->scale == 0.0f)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loader: scale is %g; use a finite non-zero factor (1 for none)",
                          (double)o->scale);
  bool arith = normalize || o->scale != 1.0f;
  if (t->out == LOOM_F32) {
    if (t->src != LOOM_U8 && t->src != LOOM_F32 && t->src != LOOM_I32 && t->src != LOOM_I64)
      return loom_set_error(LOOM_ERR_DTYPE, "loader: cannot convert %s samples to f32 (supported: u8, f32, i32, i64)",
                            loom_dtype_name(t->src));
  } else if (t->out == LOOM_U8) {
    if (t->src != LOOM_U8)
      return loom_set_error(LOOM_ERR_DTYPE, "loader: x_dtype u8 ships u8 data as is, but the samples are %s; use f32",
                            loom_dtype_name(t->src));
    if (arith)
      return loom_set_error(LOOM_ERR_INVALID_ARG,
                            "loader: x_dtype u8 ships raw bytes, so scale/normalize cannot apply; convert on the device "
                            "or use x_dtype f32");
  } else if (t->out != t->src || arith || spatial) {
    return loom_set_error(LOOM_ERR_DTYPE, "loader: x_dtype %s is only available unchanged from %s samples; use f32 or u8",
                          loom_dtype_name(t->out), loom_dtype_name(t->src));
  }
  if (o->channels_last && nd != 3)
    return loom_set_error(LOOM_ERR_SHAPE,
                          "loader: channels_last needs [C,H,W] samples; this dataset's samples have %d dims (turn "
                          "channels_last off: 1-channel [H,W] images are channels-last as [N,1,H,W] anyway)",
                          nd);
  t->hwc = o->channels_last && t->C > 1;
  t->identity = t->out == t->src && !arith && !spatial && !t->hwc;
  t->out_bytes = (size_t)t->numel * loom_dtype_size(t->out);
  t->a = loom_sys_malloc(sizeof(float) * (size_t)t->C);
  t->b = loom_sys_malloc(sizeof(float) * (size_t)t->C);
  if (!t->a || !t->b) {
    loom_transform_destroy(t);
    return loom_set_error(LOOM_ERR_OOM, "loader: out of host memory");
  }
  for (int64_t c = 0; c < t->C; c++) {
    float m = 0.0f, inv = 1.0f;
    if (normalize) {
      int k = o->norm_channels == 1 ? 0 : (int)c;
      m = o->mean[k];
      inv = 1.0f / o->std[k];
    }
    /* (v*scale - m) / s == v*(scale/s) - m/s: one multiply-add per element. */
    t->a[c] = o->scale * inv;
    t->b[c] = -m * inv;
  }
  return LOOM_OK;
}

static inline float load_f(loom_dtype dt, const void *p, int64_t i) {
  switch (dt) {
    case LOOM_U8: return (float)((const uint8_t *)p)[i];
    case LOOM_F32: return ((const float *)p)[i];
    case LOOM_I32: return (float)((const int32_t *)p)[i];
    case LOOM_I64: return (float)((const int64_t *)p)[i];
    default: return 0.0f;
  }
}

void loom_transform_apply(const loom_transform *t, const void *src, void *dst, uint64_t key) {
  if (t->identity) {
    memcpy(dst, src, t->out_bytes);
    return;
  }
  int64_t dy = 0, dx = 0;
  bool flip = false;
  if (t->pad > 0 || t->flip) {
    uint64_t r = loom_data_mix(key, 0x43524F50ull /* "CROP" */);
    int64_t span = 2 * (int64_t)t->pad + 1;
    dy = (int64_t)((r & 0xFFFFFFull) % (uint64_t)span);
    dx = (int64_t)(((r >> 24) & 0xFFFFFFull) % (uint64_t)span);
    flip = t->flip && ((r >> 63) & 1u);
  }
  const int64_t H = t->H, W = t->W, pad = t->pad, off = dx - pad;
  /* Output strides of a channel plane, a row and a pixel: CHW, or HWC for
   * channels-last batches (the layout change rides on this one pass). */
  const int64_t cs = t->hwc ? 1 : H * W, rs = t->hwc ? W * t->C : W, xs = t->hwc ? t->C : 1;
  /* Output columns [lo, hi) come from the image; the rest are padding. */
  const int64_t lo = flip ? (off > 0 ? off : 0) : (-off > 0 ? -off : 0);
  const int64_t hi_raw = flip ? W + off : W - off;
  const int64_t hi = hi_raw < W ? (hi_raw > lo ? hi_raw : lo) : W;
  for (int64_t c = 0; c < t->C; c++) {
    const float a = t->a[c], b = t->b[c];
    const int64_t plane = c * H * W;
    for (int64_t y = 0; y < H; y++) {
      const int64_t sy = y + dy - pad;
      const bool row_ok = sy >= 0 && sy < H;
      const int64_t orow = c * cs + y * rs, srow = plane + sy * W;
      if (t->out == LOOM_U8) {
        uint8_t *o = (uint8_t *)dst + orow;
        const uint8_t *sr = (const uint8_t *)src + (row_ok ? srow : 0);
        for (int64_t x = 0; x < W; x++) {
          int64_t sx = (flip ? W - 1 - x : x) + off;
          o[x * xs] = (row_ok && x >= lo && x < hi) ? sr[sx] : 0;
        }
        continue;
      }
      /* Padding is a zero pixel before scale/normalize (as torchvision pads the raw image). */
      float *o = (float *)dst + orow;
      if (!row_ok) {
        for (int64_t x = 0; x < W; x++) o[x * xs] = b;
        continue;
      }
      for (int64_t x = 0; x < lo; x++) o[x * xs] = b;
      for (int64_t x = hi; x < W; x++) o[x * xs] = b;
      if (t->src == LOOM_U8) {
        const uint8_t *sr = (const uint8_t *)src + srow;
        if (!flip)
          for (int64_t x = lo; x < hi; x++) o[x * xs] = (float)sr[x + off] * a + b;
        else
          for (int64_t x = lo; x < hi; x++) o[x * xs] = (float)sr[W - 1 - x + off] * a + b;
      } else {
        for (int64_t x = lo; x < hi; x++) o[x * xs] = load_f(t->src, src, srow + (flip ? W - 1 - x : x) + off) * a + b;
      }
    }
  }
}

loom_status loom_label_check(loom_dtype src, loom_dtype out) {
  bool s_ok = src == LOOM_U8 || src == LOOM_I32 || src == LOOM_I64 || src == LOOM_F32;
  bool o_ok = out == LOOM_U8 || out == LOOM_I32 || out == LOOM_I64 || out == LOOM_F32;
  if (!s_ok || !o_ok)
    return loom_set_error(LOOM_ERR_DTYPE, "loader: labels of %s cannot be delivered as %s (supported: u8, i32, i64, f32)",
                          loom_dtype_name(src), loom_dtype_name(out));
  return LOOM_OK;
}

void loom_label_convert(loom_dtype src, const void *s, loom_dtype out, void *d) {
  if (src == out) {
    memcpy(d, s, loom_dtype_size(src));
    return;
  }
  double v = 0.0;
  switch (src) {
    case LOOM_U8: v = *(const uint8_t *)s; break;
    case LOOM_I32: { int32_t q; memcpy(&q, s, 4); v = q; break; }
    case LOOM_I64: { int64_t q; memcpy(&q, s, 8); v = (double)q; break; }
    case LOOM_F32: { float q; memcpy(&q, s, 4); v = q; break; }
    default: break;
  }
  switch (out) {
    case LOOM_U8: *(uint8_t *)d = (uint8_t)v; break;
    case LOOM_I32: { int32_t q = (int32_t)v; memcpy(d, &q, 4); break; }
    case LOOM_I64: { int64_t q = (int64_t)v; memcpy(d, &q, 8); break; }
    case LOOM_F32: { float q = (float)v; memcpy(d, &q, 4); break; }
    default: break;
  }
}
