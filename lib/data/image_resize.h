/* image_resize.h (internal) — the geometry of torchvision's ImageNet
 * transforms and the resampling that carries them out, for the ImageFolder
 * dataset (pure functions; the tests call them directly).
 *
 * Train: RandomResizedCrop — torchvision's get_params, draw for draw (area
 * fraction uniform in [scale_min, scale_max], log aspect ratio uniform, 10
 * tries, then the central fallback; round() is Python's, half to even) —
 * with its randomness from a key instead of torch's generator. Eval:
 * Resize(resize) of the shorter side then CenterCrop(size), as one source
 * box. Resampling is Pillow's antialiased bilinear ("triangle" filter whose
 * support widens with the downscale factor, 22-bit fixed-point weights,
 * horizontal pass rounded to 8 bits, then the vertical pass), so results
 * match torchvision's PIL path to within rounding. */
#ifndef LOOM_DATA_IMAGE_RESIZE_H
#define LOOM_DATA_IMAGE_RESIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "loom/status.h"

typedef struct loom_rrc_params {
  double scale_min, scale_max;  /* area fraction (0.08, 1) */
  double ratio_min, ratio_max;  /* aspect ratio w/h (3/4, 4/3) */
} loom_rrc_params;

/* RandomResizedCrop.get_params for a W x H image: the crop's top, left,
 * height and width (whole pixels), from key. */
void loom_img_rrc_crop(int W, int H, const loom_rrc_params *p, uint64_t key, int *top, int *left, int *h, int *w);

/* Resize(resize) + CenterCrop(size) of a W x H image as a box of the source
 * (fractional pixels): x0, y0, x1, y1. resize >= size. */
void loom_img_center_box(int W, int H, int resize, int size, double box[4]);

/* Flip decision of a sample (p = 0.5), independent of the crop's draws. */
bool loom_img_flip(uint64_t key);

/* One axis of a resample: out outputs from the source span [in0, in1),
 * reading only source pixels in [clip0, clip1). */
typedef struct loom_img_axis {
  int out, ksize;
  int *start, *len;  /* per output: first source pixel and tap count */
  int32_t *k;        /* out * ksize fixed-point weights */
  int lo, hi;        /* source pixels any output reads: [lo, hi) */
} loom_img_axis;

loom_status loom_img_axis_init(loom_img_axis *a, double in0, double in1, int clip0, int clip1, int out);
void loom_img_axis_free(loom_img_axis *a);

/* dst (C=3 planes of ax->out x ay->out... i.e. CHW, u8) from RGB pixels:
 * source pixel (x, y) at src[(y - oy) * stride + 3 * (x - ox)], every pixel
 * the axes read present. flip mirrors the output horizontally. tmp holds
 * loom_img_resample_tmp_bytes(ax, ay) bytes. */
size_t loom_img_resample_tmp_bytes(const loom_img_axis *ax, const loom_img_axis *ay);
void loom_img_resample(const unsigned char *src, int stride, int ox, int oy, const loom_img_axis *ax,
                       const loom_img_axis *ay, bool flip, unsigned char *restrict tmp, unsigned char *restrict dst);

#endif
