/* image_decode.h (internal) — JPEG (libjpeg-turbo) and PNG (libpng) files
 * in memory decoded to 8-bit RGB, for the ImageFolder dataset's workers.
 *
 * The caller learns the full size first (a `plan` callback, after the
 * header) and answers with the DCT scale to decode JPEGs at (1/1, 1/2, 1/4,
 * 1/8) and the region of the scaled image it needs: rows above and below it
 * are skipped and, for JPEGs, columns outside it are not decoded. Every
 * failure — a corrupt or truncated stream included, which libjpeg would
 * otherwise only warn about — is LOOM_ERR_FORMAT naming the file; a build
 * without the library is LOOM_ERR_UNSUPPORTED saying what to install. */
#ifndef LOOM_DATA_IMAGE_DECODE_H
#define LOOM_DATA_IMAGE_DECODE_H

#include <stdbool.h>
#include <stddef.h>

#include "loom/status.h"

/* Images above this many pixels are refused (Pillow's decompression-bomb limit). */
#define LOOM_IMAGE_MAX_PIXELS ((long long)178956970)

typedef enum { LOOM_IMG_UNKNOWN = 0, LOOM_IMG_JPEG, LOOM_IMG_PNG } loom_img_format;

/* What the plan callback decides, in scaled-image pixels. */
typedef struct loom_img_plan {
  int denom;         /* JPEG DCT scaling 1, 2, 4 or 8 (PNG: always 1) */
  int x0, y0, x1, y1;/* needed region [x0,x1) x [y0,y1) of the scaled image */
} loom_img_plan;

/* Called once with the full size; fills *plan (its defaults: denom 1, the
 * whole image). Sizes of a scaled image: ceil(w / denom), ceil(h / denom). */
typedef void (*loom_img_plan_fn)(void *ctx, int w, int h, loom_img_plan *plan);

/* A decoded region: RGB rows of `stride` bytes; pixel (x, y) of the scaled
 * image is at px[(y - oy) * stride + 3 * (x - ox)]. */
typedef struct loom_img {
  unsigned char *px;  /* malloc'd; free with free() */
  int w, h;           /* size of the decoded region */
  int ox, oy;         /* its position in the scaled image */
  int full_w, full_h; /* the scaled image's size */
  int stride;
} loom_img;

loom_img_format loom_img_sniff(const unsigned char *buf, size_t len);
/* Whether this build decodes the format. */
bool loom_img_supported(loom_img_format f);
/* Decode buf (len bytes of `path`, for messages) into *out. */
loom_status loom_img_decode(const unsigned char *buf, size_t len, const char *path, loom_img_plan_fn plan, void *ctx,
                            loom_img *out);

#endif
