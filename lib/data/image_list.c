/* image_list.c — the image folder's list of files and labels: ROOT/<class>/
 * scanned in torchvision's order (classes sorted; each class's directories
 * walked as sorted(os.walk()), links followed; files sorted; .jpg, .jpeg,
 * .png in any case), or a "path label" file list. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data/image_folder_internal.h"
#include "core/sys.h"
static loom_status sv_push(strvec *s, char *str) {
  if (!str) return loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    char **v = loom_sys_realloc(s->v, cap * sizeof *v);
    if (!v) {
      loom_sys_free(str);
      return loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
    }
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = str;
  return LOOM_OK;
}

void loom_imgf_strvec_free(strvec *s) {
  for (size_t i = 0; i < s->n; i++) loom_sys_free(s->v[i]);
  loom_sys_free(s->v);
  memset(s, 0, sizeof *s);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static char *join(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *s = loom_sys_malloc(la + lb + 2);
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
      loom_sys_free(full);
      continue;
    }
    if (S_ISDIR(sb.st_mode) && dirs) st = sv_push(dirs, full);
    else if (S_ISREG(sb.st_mode) && files && is_image_name(e->d_name)) {
      loom_sys_free(full);
      st = sv_push(files, loom_sys_strdup(e->d_name));
    } else loom_sys_free(full);
  }
  closedir(d);
  return st;
}

/* Every image under class folder cdir, in torchvision's order:
 * sorted(os.walk(cdir)) — directories by full path — then sorted names. */
static loom_status scan_class(const char *cdir, int32_t label, strvec *paths, int32_t **labels, size_t *lcap) {
  strvec dirs = {0};
  loom_status st = sv_push(&dirs, loom_sys_strdup(cdir));
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
        int32_t *nl = loom_sys_realloc(*labels, cap * sizeof *nl);
        if (!nl) st = loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
        else *labels = nl, *lcap = cap;
      }
      if (st == LOOM_OK) (*labels)[paths->n - 1] = label;
    }
    loom_imgf_strvec_free(&files);
  }
  loom_imgf_strvec_free(&dirs);
  return st;
}

loom_status loom_imgf_scan_root(imgf *f, strvec *paths) {
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
    loom_sys_free(full);
    if (!full) st = loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
    else if (is_dir) st = sv_push(&classes, loom_sys_strdup(e->d_name));
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
    loom_sys_free(cdir);
    if (st == LOOM_OK && paths->n == before)
      st = loom_set_error(LOOM_ERR_FORMAT,
                          "image folder: class folder '%s/%s' holds no image (.jpg, .jpeg or .png); remove it or add "
                          "images",
                          f->root, classes.v[c]);
  }
  if (st != LOOM_OK) {
    loom_imgf_strvec_free(&classes);
    return st;
  }
  f->classes = classes.v;
  f->nclasses = (int64_t)classes.n;
  return LOOM_OK;
}

loom_status loom_imgf_read_list(imgf *f, strvec *paths) {
  const char *list = f->o.file_list;
  FILE *fp = loom_sys_fopen(list, "r");
  if (!fp) return loom_set_error(LOOM_ERR_IO, "image folder: cannot open file list '%s': %s", list, strerror(errno));
  loom_status st = LOOM_OK;
  size_t lcap = 0;
  int32_t maxl = -1;
  char *line = NULL;
  size_t cap = 0;
  long long lineno = 0;
  ssize_t len;
  while (st == LOOM_OK && (errno = 0, len = loom_sys_getline(&line, &cap, fp)) >= 0) {
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
    char *path = s[0] == '/' ? loom_sys_strdup(s) : join(f->root, s);
    st = sv_push(paths, path);
    if (st == LOOM_OK && paths->n > lcap) {
      int32_t *nl = loom_sys_realloc(f->labels, paths->cap * sizeof *nl);
      if (!nl) st = loom_set_error(LOOM_ERR_OOM, "image folder: out of host memory");
      else f->labels = nl, lcap = paths->cap;
    }
    if (st == LOOM_OK) {
      f->labels[paths->n - 1] = (int32_t)lab;
      if (lab > maxl) maxl = (int32_t)lab;
    }
  }
  if (st == LOOM_OK && (ferror(fp) || errno == ENOMEM))
    st = loom_set_error(errno == ENOMEM ? LOOM_ERR_OOM : LOOM_ERR_IO, "image folder: error reading file list '%s': %s",
                        list, strerror(errno ? errno : EIO));
  loom_sys_free(line);
  loom_sys_fclose(fp);
  if (st != LOOM_OK) return st;
  if (paths->n == 0) return loom_set_error(LOOM_ERR_FORMAT, "image folder: file list '%s' names no image", list);
  if (f->o.num_classes > 0 && maxl >= f->o.num_classes)
    return loom_set_error(LOOM_ERR_FORMAT, "image folder: file list '%s' has label %d but num_classes is %d", list,
                          maxl, f->o.num_classes);
  f->nclasses = f->o.num_classes > 0 ? f->o.num_classes : (int64_t)maxl + 1;
  return LOOM_OK;
}
