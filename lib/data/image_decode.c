/* image_decode.c — JPEG and PNG files in memory to 8-bit RGB regions.
 *
 * JPEG through libjpeg-turbo's libjpeg API: DCT-domain scaling (scale_denom
 * 2/4/8 decodes a smaller image for a fraction of the work), rows above the
 * needed region skipped (jpeg_skip_scanlines), rows below never decoded, and
 * columns outside it cropped at the iMCU boundary (jpeg_crop_scanline).
 * Greyscale and YCbCr/RGB come out as RGB through libjpeg's own conversion;
 * CMYK/YCCK (Adobe files store them inverted) are converted here as Pillow's
 * convert("RGB") does. EXIF orientation is not applied: pixels come out as
 * stored, as torchvision's ImageFolder (PIL's Image.open) delivers them.
 * A truncated stream, which libjpeg only warns about and pads with grey, is
 * an error, as Pillow's "image file is truncated".
 *
 * PNG through libpng: palette, greyscale, 16-bit and alpha are expanded,
 * stripped to 8 bits (high byte) and alpha dropped — Pillow's
 * convert("RGB"). Errors of both libraries leave through setjmp/longjmp. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/image_decode.h"
#include "core/error.h"
#include "core/sys.h"

#ifdef LOOM_HAVE_JPEG
#include <jpeglib.h>
#include <jerror.h>
#endif
#ifdef LOOM_HAVE_PNG
#include <png.h>
#endif

loom_img_format loom_img_sniff(const unsigned char *buf, size_t len) {
  if (len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF) return LOOM_IMG_JPEG;
  static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (len >= 8 && !memcmp(buf, png_sig, 8)) return LOOM_IMG_PNG;
  return LOOM_IMG_UNKNOWN;
}

bool loom_img_supported(loom_img_format f) {
#ifdef LOOM_HAVE_JPEG
  if (f == LOOM_IMG_JPEG) return true;
#endif
#ifdef LOOM_HAVE_PNG
  if (f == LOOM_IMG_PNG) return true;
#endif
  (void)f;
  return false;
}

#ifdef LOOM_HAVE_JPEG
/* The plan, checked and clamped to a scaled image of w x h. */
static void plan_clamp(loom_img_plan *p, int w, int h) {
  if (p->x0 < 0) p->x0 = 0;
  if (p->y0 < 0) p->y0 = 0;
  if (p->x1 > w || p->x1 <= p->x0) p->x1 = w;
  if (p->y1 > h || p->y1 <= p->y0) p->y1 = h;
  if (p->x0 >= p->x1) p->x0 = 0;
  if (p->y0 >= p->y1) p->y0 = 0;
}

/* ---- JPEG ------------------------------------------------------------------------ */
typedef struct jerr {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
  bool truncated;
} jerr;

static void j_error_exit(j_common_ptr c) {
  jerr *e = (jerr *)c->err;
  c->err->format_message(c, e->msg);
  longjmp(e->jb, 1);
}

/* Warnings (level -1) about corrupt data decode anyway, as Pillow does;
 * running out of data does not (Pillow: "image file is truncated"). */
static void j_emit(j_common_ptr c, int level) {
  jerr *e = (jerr *)c->err;
  if (level >= 0) return;
  if (c->err->msg_code == JWRN_JPEG_EOF && !e->truncated) {
    e->truncated = true;
    c->err->format_message(c, e->msg);
  }
  c->err->num_warnings++;
}

static inline unsigned char div255(unsigned v) { return (unsigned char)((v + 127) / 255); }

static loom_status jpeg_decode(const unsigned char *buf, size_t len, const char *path, loom_img_plan_fn plan, void *ctx,
                               loom_img *out) {
  struct jpeg_decompress_struct ci;
  jerr err;
  memset(&err, 0, sizeof err);
  ci.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = j_error_exit;
  err.pub.emit_message = j_emit;
  unsigned char *volatile px = NULL;
  unsigned char *volatile cmyk_row = NULL;
  if (setjmp(err.jb)) {
    jpeg_destroy_decompress(&ci);
    loom_sys_free(px);
    loom_sys_free(cmyk_row);
    return loom_set_error(LOOM_ERR_FORMAT, "'%s': corrupt JPEG (libjpeg: %s)", path, err.msg);
  }
  jpeg_create_decompress(&ci);
  jpeg_mem_src(&ci, buf, (unsigned long)len);
  jpeg_read_header(&ci, TRUE);
  if ((long long)ci.image_width * ci.image_height > LOOM_IMAGE_MAX_PIXELS) {
    snprintf(err.msg, sizeof err.msg, "%ux%u is over the %lld-pixel limit", ci.image_width, ci.image_height,
             LOOM_IMAGE_MAX_PIXELS);
    longjmp(err.jb, 1);
  }
  bool cmyk = false;
  switch (ci.jpeg_color_space) {
    case JCS_GRAYSCALE: case JCS_YCbCr: case JCS_RGB: ci.out_color_space = JCS_RGB; break;
    case JCS_CMYK: case JCS_YCCK: ci.out_color_space = JCS_CMYK; cmyk = true; break;
    default: {
      int cs = (int)ci.jpeg_color_space, nc = ci.num_components;
      jpeg_destroy_decompress(&ci);
      return loom_set_error(LOOM_ERR_UNSUPPORTED, "'%s': JPEG colour space %d with %d components is not supported "
                            "(greyscale, YCbCr, RGB, CMYK and YCCK are); convert the file to RGB", path, cs, nc);
    }
  }
  loom_img_plan p = {1, 0, 0, (int)ci.image_width, (int)ci.image_height};
  plan(ctx, (int)ci.image_width, (int)ci.image_height, &p);
  if (p.denom != 2 && p.denom != 4 && p.denom != 8) p.denom = 1;
  ci.scale_num = 1;
  ci.scale_denom = (unsigned)p.denom;
  ci.dct_method = JDCT_ISLOW;  /* Pillow's default: the accurate integer IDCT */
  jpeg_start_decompress(&ci);
  int fw = (int)ci.output_width, fh = (int)ci.output_height;
  plan_clamp(&p, fw, fh);
  /* Fancy (smooth) chroma upsampling reads a neighbour column: a cropped
   * edge would differ from a full decode, so crop one iMCU wider. */
#if JPEG_LIB_VERSION >= 70  /* libjpeg(-turbo) built with the jpeg 7/8 API */
  int margin = ci.max_h_samp_factor * (int)ci.min_DCT_h_scaled_size;
#else
  int margin = ci.max_h_samp_factor * (int)ci.min_DCT_scaled_size;
#endif
  int cx0 = p.x0 - margin < 0 ? 0 : p.x0 - margin, cx1 = p.x1 + margin > fw ? fw : p.x1 + margin;
  JDIMENSION xoff = (JDIMENSION)cx0, cw = (JDIMENSION)(cx1 - cx0);
  if (cw < ci.output_width) jpeg_crop_scanline(&ci, &xoff, &cw);  /* widens to the iMCU grid */
  int w = (int)ci.output_width, rows = p.y1 - p.y0, stride = 3 * w;
  px = loom_sys_malloc((size_t)stride * (size_t)rows);
  if (cmyk) cmyk_row = loom_sys_malloc((size_t)4 * (size_t)w);
  if (!px || (cmyk && !cmyk_row)) {
    snprintf(err.msg, sizeof err.msg, "out of host memory for %dx%d pixels", w, rows);
    longjmp(err.jb, 1);
  }
  if (p.y0 > 0) jpeg_skip_scanlines(&ci, (JDIMENSION)p.y0);
  const bool adobe_inverted = cmyk && ci.saw_Adobe_marker;
  while ((int)ci.output_scanline < p.y1 && !err.truncated) {
    unsigned char *dst = px + (size_t)((int)ci.output_scanline - p.y0) * (size_t)stride;
    if (!cmyk) {
      JSAMPROW r[8];
      int n = p.y1 - (int)ci.output_scanline;
      if (n > 8) n = 8;
      for (int k = 0; k < n; k++) r[k] = dst + (size_t)k * (size_t)stride;
      jpeg_read_scanlines(&ci, r, (JDIMENSION)n);
      continue;
    }
    JSAMPROW r = cmyk_row;
    jpeg_read_scanlines(&ci, &r, 1);
    for (int x = 0; x < w; x++) {
      unsigned c = cmyk_row[4 * x], m = cmyk_row[4 * x + 1], yy = cmyk_row[4 * x + 2], k = cmyk_row[4 * x + 3];
      if (!adobe_inverted) c = 255 - c, m = 255 - m, yy = 255 - yy, k = 255 - k;
      dst[3 * x] = div255(c * k);
      dst[3 * x + 1] = div255(m * k);
      dst[3 * x + 2] = div255(yy * k);
    }
  }
  if (err.truncated) longjmp(err.jb, 1);
  if ((int)ci.output_scanline == fh) jpeg_finish_decompress(&ci);
  else jpeg_abort_decompress(&ci);
  if (err.truncated) longjmp(err.jb, 1);
  jpeg_destroy_decompress(&ci);
  loom_sys_free(cmyk_row);
  *out = (loom_img){px, w, rows, (int)xoff, p.y0, fw, fh, stride};
  return LOOM_OK;
}
#endif

/* ---- PNG ------------------------------------------------------------------------- */
#ifdef LOOM_HAVE_PNG
typedef struct png_ctx {
  const unsigned char *buf;
  size_t len, pos;
  char msg[256];
} png_ctx;

static void png_read_cb(png_structp png, png_bytep out, size_t n) {
  png_ctx *s = png_get_io_ptr(png);
  if (n > s->len - s->pos) png_error(png, "the file ends early (truncated)");
  memcpy(out, s->buf + s->pos, n);
  s->pos += n;
}

static void png_err_cb(png_structp png, png_const_charp msg) {
  png_ctx *s = png_get_error_ptr(png);
  snprintf(s->msg, sizeof s->msg, "%s", msg ? msg : "error");
  png_longjmp(png, 1);
}

static void png_warn_cb(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static loom_status png_decode(const unsigned char *buf, size_t len, const char *path, loom_img_plan_fn plan, void *ctx,
                              loom_img *out) {
  png_ctx s = {buf, len, 0, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, png_err_cb, png_warn_cb);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info) {
    png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
    return loom_set_error(LOOM_ERR_OOM, "'%s': out of host memory starting libpng", path);
  }
  unsigned char *volatile px = NULL;
  png_bytep *volatile rows = NULL;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    loom_sys_free(px);
    loom_sys_free(rows);
    return loom_set_error(LOOM_ERR_FORMAT, "'%s': corrupt PNG (libpng: %s)", path, s.msg);
  }
  png_set_read_fn(png, &s, png_read_cb);
  png_set_user_limits(png, 1u << 20, 1u << 20);
  png_read_info(png, info);
  png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if ((long long)w * h > LOOM_IMAGE_MAX_PIXELS) png_error(png, "the image is over the pixel limit");
  int ct = png_get_color_type(png, info), bd = png_get_bit_depth(png, info);
  png_set_expand(png);
  if (bd == 16) png_set_strip_16(png);
  if (ct == PNG_COLOR_TYPE_GRAY || ct == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != (size_t)w * 3) png_error(png, "unexpected row layout after conversion to RGB");
  loom_img_plan p = {1, 0, 0, (int)w, (int)h};
  plan(ctx, (int)w, (int)h, &p);
  size_t stride = (size_t)w * 3;
  px = loom_sys_malloc(stride * h);
  rows = loom_sys_malloc(sizeof(png_bytep) * h);
  if (!px || !rows) png_error(png, "out of host memory");
  for (png_uint_32 y = 0; y < h; y++) rows[y] = px + (size_t)y * stride;
  png_read_image(png, rows);
  png_destroy_read_struct(&png, &info, NULL);
  loom_sys_free(rows);
  *out = (loom_img){px, (int)w, (int)h, 0, 0, (int)w, (int)h, (int)stride};
  return LOOM_OK;
}
#endif

loom_status loom_img_decode(const unsigned char *buf, size_t len, const char *path, loom_img_plan_fn plan, void *ctx,
                            loom_img *out) {
  memset(out, 0, sizeof *out);
  loom_img_format f = loom_img_sniff(buf, len);
  switch (f) {
    case LOOM_IMG_JPEG:
#ifdef LOOM_HAVE_JPEG
      return jpeg_decode(buf, len, path, plan, ctx, out);
#else
      return loom_set_error(LOOM_ERR_UNSUPPORTED, "'%s' is a JPEG, but this loom was built without JPEG support "
                            "(install libjpeg62-turbo-dev and reconfigure)", path);
#endif
    case LOOM_IMG_PNG:
#ifdef LOOM_HAVE_PNG
      return png_decode(buf, len, path, plan, ctx, out);
#else
      return loom_set_error(LOOM_ERR_UNSUPPORTED, "'%s' is a PNG, but this loom was built without PNG support "
                            "(install libpng-dev and reconfigure)", path);
#endif
    default:
      return loom_set_error(LOOM_ERR_FORMAT, "'%s' (%zu bytes) is neither a JPEG nor a PNG (its first bytes are wrong); "
                            "the file is corrupt or not an image", path, len);
  }
  (void)plan, (void)ctx;
}
