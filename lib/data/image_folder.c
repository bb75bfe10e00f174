/* image_folder.c — the ImageFolder dataset (data.h): the list of files and
 * labels, made by scanning ROOT/<class>/ as torchvision does or read from a
 * "path label" list, and the per-sample read that runs in the loader's
 * workers: read the file, decode it (image_decode.c) planning the DCT scale
 * and region from the crop, and resample the crop (image_resize.c).
 *
 * Bad files: without skip_bad the read fails with the decoder's message.
 * With it, the file is marked bad (once: the count is of distinct files),
 * and the sample becomes the next index that reads well, so a batch stays
 * whole and the stream stays a function of (seed, epoch, index). */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/struct_size.h"
#include "data/data_internal.h"
#include "data/image_decode.h"
#include "data/image_resize.h"
#include "loom/log.h"

#define IMGF_MAX_FILE_BYTES ((int64_t)1 << 28)  /* 256 MiB: no photo is near it */
#define IMGF_MAX_SUBSTITUTES 64                 /* skip_bad: good samples looked for after a bad one */

typedef struct imgf {
  loom_image_folder_options o;
  char *root;
  char **paths;          /* n full paths */
  int32_t *labels;
  int64_t n;
  char **classes;        /* folder names, or NULL (file list) */
  int64_t nclasses;
  loom_rrc_params rrc;
  /* skip_bad bookkeeping */
  atomic_uchar *bad;     /* per sample: 1 once found bad */
  atomic_llong nbad;
  long long nbad_reported;
  pthread_mutex_t msg_mu;
  char *first_bad;       /* message of the first bad file */
} imgf;

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

/* ---- listing ------------------------------------------------------------------ */
typedef struct strvec {
  char **v;
  size_t n, cap;
} strvec;

static loom_status sv_push(strvec *s, char *str) {
  if (!str) return loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    char **v = realloc(s->v, cap * sizeof *v);
    if (!v) {
      free(str);
      return loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
    }
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = str;
  return LOOM_OK;
}

static void sv_free(strvec *s) {
  for (size_t i = 0; i < s->n; i++) free(s->v[i]);
  free(s->v);
  memset(s, 0, sizeof *s);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static char *join(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *s = malloc(la + lb + 2);
  if (!s) return NULL;
  memcpy(s, a, la);
  s[la] = '/';
  memcpy(s + la + 1, b, lb + 1);
  return s;
}

/* torchvision's IMG_EXTENSIONS narrowed to what loom decodes. */
static bool is_image_name(const char *name) {
  size_t n = strlen(name);
  return (n >= 4 && (!strcasecmp(name + n - 4, ".jpg") || !strcasecmp(name + n - 4, ".png"))) ||
         (n >= 5 && !strcasecmp(name + n - 5, ".jpeg"));
}

/* Entries of dir (links followed): sub-directories as full paths into dirs
 * (if non-NULL), image files as names into files (if non-NULL). */
static loom_status list_dir(const char *dir, strvec *dirs, strvec *files) {
  DIR *d = opendir(dir);
  if (!d) return loom_set_error(LOOM_ERR_IO, "image folder: cannot read directory '%s': %s", dir, strerror(errno));
  loom_status st = LOOM_OK;
  struct dirent *e;
  while (st == LOOM_OK && (e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *full = join(dir, e->d_name);
    if (!full) { st = loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory"); break; }
    struct stat sb;
    if (stat(full, &sb) != 0 || strlen(full) >= PATH_MAX) {  /* a dangling link, or a link loop's ever longer path */
      free(full);
      continue;
    }
    if (S_ISDIR(sb.st_mode) && dirs) st = sv_push(dirs, full);
    else if (S_ISREG(sb.st_mode) && files && is_image_name(e->d_name)) {
      free(full);
      st = sv_push(files, strdup(e->d_name));
    } else free(full);
  }
  closedir(d);
  return st;
}

/* Every image under class folder cdir, in torchvision's order:
 * sorted(os.walk(cdir)) — directories by full path — then sorted names. */
static loom_status scan_class(const char *cdir, int32_t label, strvec *paths, int32_t **labels, size_t *lcap) {
  strvec dirs = {0};
  loom_status st = sv_push(&dirs, strdup(cdir));
  for (size_t i = 0; st == LOOM_OK && i < dirs.n; i++) st = list_dir(dirs.v[i], &dirs, NULL);
  if (st == LOOM_OK) qsort(dirs.v, dirs.n, sizeof *dirs.v, cmp_str);
  for (size_t i = 0; st == LOOM_OK && i < dirs.n; i++) {
    strvec files = {0};
    st = list_dir(dirs.v[i], NULL, &files);
    if (st == LOOM_OK && files.n > 1) qsort(files.v, files.n, sizeof *files.v, cmp_str);
    for (size_t k = 0; st == LOOM_OK && k < files.n; k++) {
      st = sv_push(paths, join(dirs.v[i], files.v[k]));
      if (st == LOOM_OK && paths->n > *lcap) {
        size_t cap = paths->cap;
        int32_t *nl = realloc(*labels, cap * sizeof *nl);
        if (!nl) st = loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
        else *labels = nl, *lcap = cap;
      }
      if (st == LOOM_OK) (*labels)[paths->n - 1] = label;
    }
    sv_free(&files);
  }
  sv_free(&dirs);
  return st;
}

static loom_status scan_root(imgf *f, strvec *paths) {
  strvec classes = {0};
  DIR *d = opendir(f->root);
  if (!d)
    return loom_set_error(LOOM_ERR_IO, "image folder: cannot read '%s': %s (expected ROOT/<class>/<image>.jpg)",
                          f->root, strerror(errno));
  loom_status st = LOOM_OK;
  struct dirent *e;
  while (st == LOOM_OK && (e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char *full = join(f->root, e->d_name);
    struct stat sb;
    bool is_dir = full && stat(full, &sb) == 0 && S_ISDIR(sb.st_mode);
    free(full);
    if (!full) st = loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
    else if (is_dir) st = sv_push(&classes, strdup(e->d_name));
  }
  closedir(d);
  if (st == LOOM_OK && classes.n == 0)
    st = loom_set_error(LOOM_ERR_FORMAT, "image folder: '%s' has no class folders (expected ROOT/<class>/<image>.jpg)",
                        f->root);
  if (st == LOOM_OK && classes.n > INT32_MAX)
    st = loom_set_error(LOOM_ERR_FORMAT, "image folder: '%s' has too many class folders", f->root);
  if (st == LOOM_OK && classes.n > 1) qsort(classes.v, classes.n, sizeof *classes.v, cmp_str);
  size_t lcap = 0;
  for (size_t c = 0; st == LOOM_OK && c < classes.n; c++) {
    size_t before = paths->n;
    char *cdir = join(f->root, classes.v[c]);
    st = cdir ? scan_class(cdir, (int32_t)c, paths, &f->labels, &lcap)
              : loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
    free(cdir);
    if (st == LOOM_OK && paths->n == before)
      st = loom_set_error(LOOM_ERR_FORMAT,
                          "image folder: class folder '%s/%s' holds no image (.jpg, .jpeg or .png); remove it or add "
                          "images",
                          f->root, classes.v[c]);
  }
  if (st != LOOM_OK) {
    sv_free(&classes);
    return st;
  }
  f->classes = classes.v;
  f->nclasses = (int64_t)classes.n;
  return LOOM_OK;
}

static loom_status read_list(imgf *f, strvec *paths) {
  const char *list = f->o.file_list;
  FILE *fp = fopen(list, "r");
  if (!fp) return loom_set_error(LOOM_ERR_IO, "image folder: cannot open file list '%s': %s", list, strerror(errno));
  loom_status st = LOOM_OK;
  size_t lcap = 0;
  int32_t maxl = -1;
  char *line = NULL;
  size_t cap = 0;
  long long lineno = 0;
  ssize_t len;
  while (st == LOOM_OK && (len = getline(&line, &cap, fp)) >= 0) {
    lineno++;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
      line[--len] = 0;
    char *s = line;
    while (*s == ' ' || *s == '\t') s++;
    if (!*s || *s == '#') continue;
    /* The label is the last field, so paths may hold spaces. */
    char *sp = strrchr(s, ' '), *tab = strrchr(s, '\t');
    if (!sp || (tab && tab > sp)) sp = tab;
    char *end = NULL;
    long long lab = sp ? strtoll(sp + 1, &end, 10) : -1;
    if (!sp || !end || *end || end == sp + 1 || lab < 0 || lab > INT32_MAX - 1) {
      st = loom_set_error(LOOM_ERR_FORMAT, "image folder: '%s' line %lld: expected \"path label\" with a label >= 0, "
                          "got \"%.200s\"", list, lineno, s);
      break;
    }
    while (sp > s && (sp[-1] == ' ' || sp[-1] == '\t')) sp--;
    *sp = 0;
    char *path = s[0] == '/' ? strdup(s) : join(f->root, s);
    st = sv_push(paths, path);
    if (st == LOOM_OK && paths->n > lcap) {
      int32_t *nl = realloc(f->labels, paths->cap * sizeof *nl);
      if (!nl) st = loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
      else f->labels = nl, lcap = paths->cap;
    }
    if (st == LOOM_OK) {
      f->labels[paths->n - 1] = (int32_t)lab;
      if (lab > maxl) maxl = (int32_t)lab;
    }
  }
  if (st == LOOM_OK && ferror(fp))
    st = loom_set_error(LOOM_ERR_IO, "image folder: error reading file list '%s'", list);
  free(line);
  fclose(fp);
  if (st != LOOM_OK) return st;
  if (paths->n == 0) return loom_set_error(LOOM_ERR_FORMAT, "image folder: file list '%s' names no image", list);
  if (f->o.num_classes > 0 && maxl >= f->o.num_classes)
    return loom_set_error(LOOM_ERR_FORMAT, "image folder: file list '%s' has label %d but num_classes is %d", list,
                          maxl, f->o.num_classes);
  f->nclasses = f->o.num_classes > 0 ? f->o.num_classes : (int64_t)maxl + 1;
  return LOOM_OK;
}

/* ---- reading a sample ------------------------------------------------------------ */
static loom_status read_whole(const char *path, unsigned char **out, size_t *len) {
  *out = NULL;
  *len = 0;
  FILE *fp = fopen(path, "rb");
  if (!fp) return loom_set_error(LOOM_ERR_IO, "image folder: cannot open '%s': %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > IMGF_MAX_FILE_BYTES) {
    fclose(fp);
    return loom_set_error(LOOM_ERR_IO, "image folder: '%s' is not a regular file of at most %lld bytes", path,
                          (long long)IMGF_MAX_FILE_BYTES);
  }
  size_t n = (size_t)sb.st_size;
  unsigned char *buf = malloc(n ? n : 1);
  if (!buf) {
    fclose(fp);
    return loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory reading '%s'", path);
  }
  size_t got = fread(buf, 1, n, fp);
  bool err = ferror(fp);
  fclose(fp);
  if (err || got != n) {
    free(buf);
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
  free(buf);
  if (st == LOOM_OK && pc.st != LOOM_OK) st = pc.st;
  if (st == LOOM_OK) {
    /* The decoder must have produced every pixel the resampler reads. */
    if (img.ox > pc.ax.lo || img.ox + img.w < pc.ax.hi || img.oy > pc.ay.lo || img.oy + img.h < pc.ay.hi)
      st = loom_set_error(LOOM_ERR_INTERNAL, "image folder: '%s': decoded region [%d,%d)x[%d,%d) misses the crop's "
                          "[%d,%d)x[%d,%d)", path, img.ox, img.ox + img.w, img.oy, img.oy + img.h, pc.ax.lo, pc.ax.hi,
                          pc.ay.lo, pc.ay.hi);
  }
  if (st == LOOM_OK) {
    unsigned char *tmp = aligned_alloc(64, (loom_img_resample_tmp_bytes(&pc.ax, &pc.ay) + 63) & ~(size_t)63);
    if (!tmp) st = loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
    else loom_img_resample(img.px, img.stride, img.ox, img.oy, &pc.ax, &pc.ay, pc.flip, tmp, x);
    free(tmp);
  }
  free(img.px);
  loom_img_axis_free(&pc.ax);
  loom_img_axis_free(&pc.ay);
  return st;
}

static void note_bad(imgf *f, int64_t i) {
  unsigned char was = atomic_exchange(&f->bad[i], 1);
  if (was) return;
  atomic_fetch_add(&f->nbad, 1);
  pthread_mutex_lock(&f->msg_mu);
  if (!f->first_bad) f->first_bad = strdup(loom_last_error());
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
  for (int64_t i = 0; i < f->n; i++) free(f->paths[i]);
  free(f->paths);
  free(f->labels);
  if (f->classes)
    for (int64_t c = 0; c < f->nclasses; c++) free(f->classes[c]);
  free(f->classes);
  free(f->bad);
  free(f->first_bad);
  free(f->root);
  pthread_mutex_destroy(&f->msg_mu);
  free(f);
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
  imgf *f = calloc(1, sizeof *f);
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
  f->root = strndup(root, rl);
  strvec paths = {0};
  loom_status st = f->root ? LOOM_OK : loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
  if (st == LOOM_OK) {
    f->o.file_list = o.file_list;
    st = o.file_list ? read_list(f, &paths) : scan_root(f, &paths);
    f->o.file_list = NULL;
  }
  f->paths = paths.v;
  f->n = (int64_t)paths.n;
  if (st == LOOM_OK) {
    f->bad = calloc((size_t)f->n, sizeof *f->bad);
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
