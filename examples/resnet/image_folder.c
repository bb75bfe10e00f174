/* image_folder.c — loom-resnet's ImageFolder input (see image_folder.h). */
#include "image_folder.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <loom/loom.h>

static int is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int imgf_is_root(const char *dir) {
  char p[4096];
  snprintf(p, sizeof p, "%s/train", dir);
  if (!is_dir(p)) return 0;
  snprintf(p, sizeof p, "%s/val", dir);
  return is_dir(p);
}

static loom_dataset *open_split(const char *root, int train, int size, int augment, const char *list,
                                int num_classes) {
  loom_image_folder_options o;
  loom_image_folder_options_init(&o);
  o.mode = train && augment ? LOOM_IMAGE_TRAIN : LOOM_IMAGE_EVAL;
  o.image_size = size;
  o.resize_size = (size * 256 + 112) / 224; /* 256 for 224, as the ImageNet recipe */
  o.file_list = list;
  o.num_classes = num_classes;
  loom_dataset *ds = loom_dataset_image_folder_open(root, &o);
  if (!ds) fprintf(stderr, "loom-resnet: %s: %s\n", root, loom_last_error());
  return ds;
}

loom_dataset *imgf_open(const char *dir, int train, int size, int augment, int64_t limit) {
  char root[4096];
  snprintf(root, sizeof root, "%s/%s", dir, train ? "train" : "val");
  loom_dataset *ds = open_split(root, train, size, augment, NULL, 0);
  int64_t n = ds ? loom_dataset_length(ds) : 0;
  if (!ds || limit <= 0 || limit >= n) return ds;
  /* Every (n / limit)-th file: files are sorted by class, so this keeps them all. */
  char list[] = "/tmp/loom-resnet-list-XXXXXX";
  int fd = mkstemp(list);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    fprintf(stderr, "loom-resnet: cannot write a temporary file list for --%s-limit\n", train ? "train" : "test");
    if (fd >= 0) close(fd), unlink(list);
    loom_dataset_release(ds);
    return NULL;
  }
  for (int64_t k = 0; k < limit; k++) {
    int64_t i = k * n / limit;
    int32_t y = 0;
    if (loom_dataset_read(ds, i, NULL, &y) != LOOM_OK) break;
    fprintf(f, "%s %d\n", loom_image_folder_path(ds, i), (int)y);
  }
  fclose(f);
  int classes = (int)loom_image_folder_num_classes(ds);
  loom_dataset_release(ds);
  ds = open_split(root, train, size, augment, list, classes);
  unlink(list);
  return ds;
}
