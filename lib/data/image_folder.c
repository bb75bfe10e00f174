/* image_folder.c — the ImageFolder dataset (data.h): options, opening (the
 * list of files comes from image_list.c), and the per-sample read that runs
 * in the loader's workers: read the file, decode it (image_decode.c) planning the DCT scale
 * and region from the crop, and resample the crop (image_resize.c).
 *
 * Bad files: without skip_bad the read fails with the decoder's message.
 * With it, the file is marked bad (once: the count is of distinct files),
 * and the sample becomes the next index that reads well, so a batch stays
 * whole and the stream stays a function of (seed, epoch, index). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/struct_size.h"
#include "data/image_decode.h"
#include "data/image_folder_internal.h"
#include "loom/log.h"
#include "core/sys.h"

#define IMGF_MAX_FILE_BYTES ((int64_t)1 << 28)  /* 256 MiB: no photo is near it */
#define IMGF_MAX_SUBSTITUTES 64                 /* skip_bad: good samples looked for after a bad one */

void loom_image_folder_options_init(loom_image_folder_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->mode = LOOM_IMAGE_TRAIN;
  o->image_size = 224;
  o->resize_size = 256;
  o->scale_min = 0.08f;
  o->scale_max = 1.0f;
  o->ratio_min = 3.0f / 4.0f;
  o->ratio_max = 4.0f / 3.0f;
  o->hflip = true;
  o->dct_scaling = true;
}

bool loom_image_folder_supports(const char *format) {
  if (!format) return false;
  if (!strcasecmp(format, "jpeg") || !strcasecmp(format, "jpg")) return loom_img_supported(LOOM_IMG_JPEG);
  if (!strcasecmp(format, "png")) return loom_img_supported(LOOM_IMG_PNG);
  return false;
}

/* ---- reading a sample ------------------------------------------------------------ */
static loom_status read_whole(const char *path, unsigned char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  FILE *fp = loom_sys_fopen(path, "rb");
  if (!fp) return loom_set_error(LOOM_ERR_IO, "image folder: cannot open '%s': %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > IMGF_MAX_FILE_BYTES) {
    loom_sys_fclose(fp);
    return loom_set_error(LOOM_ERR_IO, "image folder: '%s' is not a regular file of at most %lld bytes", path,
                          (long long)IMGF_MAX_FILE_BYTES);
  }
  size_t n = (size_t)sb.st_size;
  unsigned char *buf = loom_sys_malloc(n ? n : 1);
  if (!buf) {
    loom_sys_fclose(fp);
    return loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory reading '%s'", path);
  }
  size_t got = loom_sys_fread(buf, 1, n, fp);
  bool err = ferror(fp);
  loom_sys_fclose(fp);
  if (err || got != n) {
    loom_sys_free(buf);
    return loom_set_error(LOOM_ERR_IO, "image folder: read error on '%s' (%zu of %zu bytes)", path, got, n);
  }
  *out = buf;
  *len = n;
  return LOOM_OK;
}

/* The plan callback's state: the crop decided from the full size. */
typedef struct plan_ctx {
  const imgf *f;
  uint64_t key;
  bool jpeg;
  bool flip;
  int denom;
  loom_img_axis ax, ay;
  loom_status st;
} plan_ctx;

static void plan_cb(void *c, int W, int H, loom_img_plan *p) {
  plan_ctx *x = c;
  const loom_image_folder_options *o = &x->f->o;
  const int S = o->image_size;
  double box[4];
  double clip[4] = {0, 0, W, H};
  if (o->mode == LOOM_IMAGE_TRAIN) {
    int top, left, h, w;
    loom_img_rrc_crop(W, H, &x->f->rrc, x->key, &top, &left, &h, &w);
    box[0] = clip[0] = left;
    box[1] = clip[1] = top;
    box[2] = clip[2] = left + w;
    box[3] = clip[3] = top + h;
    x->flip = o->hflip && loom_img_flip(x->key);
  } else {
    loom_img_center_box(W, H, o->resize_size, S, box);
    x->flip = false;
  }
  int d = 1;
  if (x->jpeg && o->dct_scaling)
    for (d = 8; d > 1; d /= 2)
      if ((box[2] - box[0]) / d >= S && (box[3] - box[1]) / d >= S) break;
  const int sw = (W + d - 1) / d, sh = (H + d - 1) / d;
  int cx0 = (int)(clip[0] / d), cy0 = (int)(clip[1] / d);
  int cx1 = (int)((clip[2] + d - 1) / d), cy1 = (int)((clip[3] + d - 1) / d);
  if (cx1 > sw) cx1 = sw;
  if (cy1 > sh) cy1 = sh;
  x->denom = d;
  x->st = loom_img_axis_init(&x->ax, box[0] / d, box[2] / d, cx0, cx1, S);
  if (x->st == LOOM_OK) x->st = loom_img_axis_init(&x->ay, box[1] / d, box[3] / d, cy0, cy1, S);
  p->denom = d;
  if (x->st == LOOM_OK) {
    p->x0 = x->ax.lo, p->x1 = x->ax.hi;
    p->y0 = x->ay.lo, p->y1 = x->ay.hi;
  }
}

/* Decode file i into x (u8 [3, S, S]) with the crop of key. */
static loom_status read_image(imgf *f, int64_t i, uint64_t key, unsigned char *x) {
  const char *path = f->paths[i];
  unsigned char *buf = NULL;
  size_t len = 0;
  LOOM_TRY(read_whole(path, &buf, &len));
  plan_ctx pc = {.f = f, .key = key, .jpeg = loom_img_sniff(buf, len) == LOOM_IMG_JPEG};
  loom_img img;
  loom_status st = loom_img_decode(buf, len, path, plan_cb, &pc, &img);
  loom_sys_free(buf);
  if (st == LOOM_OK && pc.st != LOOM_OK) st = pc.st;
  if (st == LOOM_OK) {
    /* The decoder must have produced every pixel the resampler reads. */
    if (img.ox > pc.ax.lo || img.ox + img.w < pc.ax.hi || img.oy > pc.ay.lo || img.oy + img.h < pc.ay.hi)
      st = loom_set_error(LOOM_ERR_INTERNAL, "image folder: '%s': decoded region [%d,%d)x[%d,%d) misses the crop's "
                          "[%d,%d)x[%d,%d)", path, img.ox, img.ox + img.w, img.oy, img.oy + img.h, pc.ax.lo, pc.ax.hi,
                          pc.ay.lo, pc.ay.hi);
  }
  if (st == LOOM_OK) {
    unsigned char *tmp = loom_sys_aligned_alloc(64, (loom_img_resample_tmp_bytes(&pc.ax, &pc.ay) + 63) & ~(size_t)63);
    if (!tmp) st = loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
    else loom_img_resample(img.px, img.stride, img.ox, img.oy, &pc.ax, &pc.ay, pc.flip, tmp, x);
    loom_sys_free(tmp);
  }
  loom_sys_free(img.px);
  loom_img_axis_free(&pc.ax);
  loom_img_axis_free(&pc.ay);
  return st;
}

static void note_bad(imgf *f, int64_t i) {
  unsigned char was = atomic_exchange(&f->bad[i], 1);
  if (was) return;
  atomic_fetch_add(&f->nbad, 1);
  pthread_mutex_lock(&f->msg_mu);
  if (!f->first_bad) f->first_bad = loom_sys_strdup(loom_last_error());
  pthread_mutex_unlock(&f->msg_mu);
}

static loom_status imgf_read(loom_dataset *ds, int64_t i, uint64_t key, void *x, void *y) {
  imgf *f = ds->impl;
  int64_t j = i;
  for (int attempt = 0;; attempt++) {
    loom_status st = x ? read_image(f, j, attempt ? loom_data_mix(key, (uint64_t)attempt) : key, x) : LOOM_OK;
    if (st == LOOM_OK) {
      if (y) memcpy(y, &f->labels[j], sizeof(int32_t));
      return LOOM_OK;
    }
    if (!f->o.skip_bad || st == LOOM_ERR_OOM || st == LOOM_ERR_INTERNAL) return st;
    note_bad(f, j);
    if (attempt + 1 >= IMGF_MAX_SUBSTITUTES || attempt + 1 >= ds->length)
      return loom_set_error(LOOM_ERR_FORMAT, "image folder '%s': sample %lld and the %d samples after it are all bad "
                            "files; last: %s", f->root, (long long)i, attempt, loom_last_error());
    j = (j + 1) % ds->length;
  }
}

static loom_status imgf_read_plain(loom_dataset *ds, int64_t i, void *x, void *y) {
  return imgf_read(ds, i, loom_data_sample_key(0, 0, i), x, y);
}

static void imgf_epoch_end(loom_dataset *ds, int64_t epoch) {
  imgf *f = ds->impl;
  long long n = atomic_load(&f->nbad);
  if (n == f->nbad_reported) return;
  pthread_mutex_lock(&f->msg_mu);
  loom_log_msg(LOOM_LOG_WARN, "image folder '%s': epoch %lld: %lld bad files skipped so far (%lld new); first: %s",
               f->root, (long long)epoch, n, n - f->nbad_reported, f->first_bad ? f->first_bad : "?");
  pthread_mutex_unlock(&f->msg_mu);
  f->nbad_reported = n;
}

static void imgf_free(imgf *f) {
  if (!f) return;
  for (int64_t i = 0; i < f->n; i++) loom_sys_free(f->paths[i]);
  loom_sys_free(f->paths);
  loom_sys_free(f->labels);
  if (f->classes)
    for (int64_t c = 0; c < f->nclasses; c++) loom_sys_free(f->classes[c]);
  loom_sys_free(f->classes);
  loom_sys_free(f->bad);
  loom_sys_free(f->first_bad);
  loom_sys_free(f->root);
  pthread_mutex_destroy(&f->msg_mu);
  loom_sys_free(f);
}

static void imgf_destroy(loom_dataset *ds) { imgf_free(ds->impl); }

/* ---- opening -------------------------------------------------------------------- */
static loom_status check_options(const loom_image_folder_options *o) {
  const char *fn = "loom_dataset_image_folder_open";
  if (o->mode != LOOM_IMAGE_TRAIN && o->mode != LOOM_IMAGE_EVAL)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: mode is %d; use LOOM_IMAGE_TRAIN or LOOM_IMAGE_EVAL", fn,
                          (int)o->mode);
  if (o->image_size < 1 || o->image_size > 8192)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: image_size is %d; use 1..8192", fn, o->image_size);
  if (o->mode == LOOM_IMAGE_EVAL && (o->resize_size < o->image_size || o->resize_size > 16384))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: resize_size is %d; use image_size (%d)..16384", fn,
                          o->resize_size, o->image_size);
  if (!(o->scale_min > 0.0f && o->scale_min <= o->scale_max && o->scale_max <= 1.0f))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: scale is (%g, %g); need 0 < scale_min <= scale_max <= 1", fn,
                          (double)o->scale_min, (double)o->scale_max);
  if (!(o->ratio_min > 0.0f && o->ratio_min <= o->ratio_max && o->ratio_max < 1e6f))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: ratio is (%g, %g); need 0 < ratio_min <= ratio_max", fn,
                          (double)o->ratio_min, (double)o->ratio_max);
  if (o->num_classes < 0)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: num_classes is %d; use 0 (from the labels) or more", fn,
                          o->num_classes);
  return LOOM_OK;
}

loom_dataset *loom_dataset_image_folder_open(const char *root, const loom_image_folder_options *opts) {
  loom_image_folder_options o;
  loom_image_folder_options_init(&o);
  if (LOOM_STRUCT_IN("loom_dataset_image_folder_open", loom_image_folder_options, &o, opts) != LOOM_OK) return NULL;
  if (!root) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_dataset_image_folder_open: root is NULL");
    return NULL;
  }
  if (check_options(&o) != LOOM_OK) return NULL;
  if (!loom_img_supported(LOOM_IMG_JPEG) && !loom_img_supported(LOOM_IMG_PNG)) {
    loom_set_error(LOOM_ERR_UNSUPPORTED, "loom_dataset_image_folder_open: this loom was built without JPEG and PNG "
                   "support (install libjpeg62-turbo-dev and libpng-dev, then reconfigure with -DLOOM_IMAGE=AUTO)");
    return NULL;
  }
  imgf *f = loom_sys_calloc(1, sizeof *f);
  if (!f) {
    loom_set_error(LOOM_ERR_OOM, "loom_dataset_image_folder_open: out of host memory");
    return NULL;
  }
  pthread_mutex_init(&f->msg_mu, NULL);
  f->o = o;
  f->o.file_list = NULL;  /* the caller's string is not kept */
  f->rrc = (loom_rrc_params){o.scale_min, o.scale_max, o.ratio_min, o.ratio_max};
  size_t rl = strlen(root);
  while (rl > 1 && root[rl - 1] == '/') rl--;
  f->root = loom_sys_strndup(root, rl);
  strvec paths = {0};
  loom_status st = f->root ? LOOM_OK : loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
  if (st == LOOM_OK) {
    f->o.file_list = o.file_list;
    st = o.file_list ? loom_imgf_read_list(f, &paths) : loom_imgf_scan_root(f, &paths);
    f->o.file_list = NULL;
  }
  f->paths = paths.v;
  f->n = (int64_t)paths.n;
  if (st == LOOM_OK) {
    f->bad = loom_sys_calloc((size_t)f->n, sizeof *f->bad);
    if (!f->bad) st = loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
  }
  if (st != LOOM_OK) {
    imgf_free(f);
    return NULL;
  }
  const int64_t shape[3] = {3, o.image_size, o.image_size};
  loom_dataset *ds = loom_dataset_internal_new("image folder", LOOM_U8, 3, shape, true, LOOM_I32, f->n);
  if (!ds) {
    imgf_free(f);
    return NULL;
  }
  snprintf(ds->name, sizeof ds->name, "image folder '%s'", f->root);
  ds->impl = f;
  ds->read = imgf_read_plain;
  ds->read_keyed = imgf_read;
  ds->epoch_end = imgf_epoch_end;
  ds->destroy = imgf_destroy;
  return ds;
}

/* ---- accessors -------------------------------------------------------------------- */
static imgf *as_imgf(const loom_dataset *ds) {
  return ds && ds->destroy == imgf_destroy ? ds->impl : NULL;
}

int64_t loom_image_folder_num_classes(const loom_dataset *ds) {
  imgf *f = as_imgf(ds);
  return f ? f->nclasses : 0;
}

const char *loom_image_folder_class_name(const loom_dataset *ds, int64_t k) {
  imgf *f = as_imgf(ds);
  return f && f->classes && k >= 0 && k < f->nclasses ? f->classes[k] : NULL;
}

const char *loom_image_folder_path(const loom_dataset *ds, int64_t i) {
  imgf *f = as_imgf(ds);
  return f && i >= 0 && i < f->n ? f->paths[i] : NULL;
}

loom_status loom_image_folder_bad_files(loom_dataset *ds, int64_t *count, const char **first) {
  imgf *f = as_imgf(ds);
  if (!f) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_image_folder_bad_files: not an image folder dataset");
  if (count) *count = atomic_load(&f->nbad);
  if (first) {
    pthread_mutex_lock(&f->msg_mu);
    *first = f->first_bad;
    pthread_mutex_unlock(&f->msg_mu);
  }
  return LOOM_OK;
}
