/* datasets.c — IDX split lookup and dataset heads for loom's trainers (see
 * datasets.h). */
#include "datasets.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <loom/loom.h>

loom_dataset *datasets_idx_split(const char *dir, const char *prefix, int *found) {
  char img[4096], lab[4096];
  const char *ext[2] = {".gz", ""};
  for (int e = 0; e < 2; e++) {
    snprintf(img, sizeof img, "%s/%s-images-idx3-ubyte%s", dir, prefix, ext[e]);
    snprintf(lab, sizeof lab, "%s/%s-labels-idx1-ubyte%s", dir, prefix, ext[e]);
    if (access(img, R_OK) == 0 && access(lab, R_OK) == 0) {
      *found = 1;
      return loom_dataset_idx_open(img, lab);
    }
  }
  *found = 0;
  return NULL;
}

loom_dataset *datasets_head(loom_dataset *ds, int64_t limit) {
  int64_t n = loom_dataset_length(ds);
  if (limit <= 0 || limit >= n) return ds;
  loom_dtype xd, yd;
  int nd;
  bool has_y;
  int64_t shape[LOOM_MAX_DIMS];
  loom_dataset *out = NULL;
  if (loom_dataset_x_info(ds, &xd, &nd, shape) == LOOM_OK && loom_dataset_y_info(ds, &has_y, &yd) == LOOM_OK) {
    int64_t per = 1;
    for (int d = 0; d < nd; d++) per *= shape[d];
    size_t xb = (size_t)per * loom_dtype_size(xd), yb = loom_dtype_size(yd);
    unsigned char *x = malloc((size_t)limit * xb), *y = malloc((size_t)limit * yb);
    if (x && y) {
      int ok = 1;
      for (int64_t i = 0; i < limit && ok; i++) ok = loom_dataset_read(ds, i, x + i * xb, y + i * yb) == LOOM_OK;
      if (ok) out = loom_dataset_memory(x, xd, nd, shape, has_y ? y : NULL, yd, limit, true);
    }
    free(x);
    free(y);
  }
  loom_dataset_release(ds);
  return out;
}
