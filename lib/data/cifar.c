/* cifar.c — CIFAR-10 binary batches: records of 1 label byte (0..9) and
 * 3072 pixel bytes (3x32x32, CHW), 10000 per file in the official release.
 * Files are read whole (raw or gzip), checked for a whole number of records
 * and valid labels, and concatenated into one in-memory dataset. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_file.h"
#include "core/sys.h"

#define CIFAR_PIXELS 3072
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
/* 6 files of 10000 records is 184 MB; allow far more, but not unbounded. */
#define CIFAR_MAX_FILE_BYTES ((int64_t)1 << 32)

loom_dataset *loom_dataset_cifar10_open(const char *const *files, int n) {
  if (!files || n <= 0) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_dataset_cifar10_open: need at least one file (got %d)", n);
    return NULL;
  }
  unsigned char *x = NULL, *y = NULL;
  int64_t count = 0;
  for (int k = 0; k < n; k++) {
    if (!files[k]) {
      loom_set_error(LOOM_ERR_INVALID_ARG, "loom_dataset_cifar10_open: files[%d] is NULL", k);
      goto fail;
    }
    unsigned char *raw = NULL;
    int64_t len = 0;
    if (loom_data_read_file(files[k], CIFAR_MAX_FILE_BYTES, &raw, &len) != LOOM_OK) goto fail;
    if (len == 0 || len % CIFAR_RECORD != 0) {
      loom_set_error(LOOM_ERR_FORMAT,
                     "'%s': %lld bytes is not a whole number of CIFAR-10 records (%d bytes each: 1 label + 3x32x32 "
                     "pixels); the file is truncated or not a CIFAR-10 binary batch",
                     files[k], (long long)len, CIFAR_RECORD);
      loom_sys_free(raw);
      goto fail;
    }
    int64_t m = len / CIFAR_RECORD;
    for (int64_t r = 0; r < m; r++) {
      unsigned lab = raw[r * CIFAR_RECORD];
      if (lab > 9) {
        loom_set_error(LOOM_ERR_FORMAT,
                       "'%s': record %lld has label %u; CIFAR-10 labels are 0..9 (is this a CIFAR-100 file?)", files[k],
                       (long long)r, lab);
        loom_sys_free(raw);
        goto fail;
      }
    }
    unsigned char *nx = loom_sys_realloc(x, (size_t)((count + m) * CIFAR_PIXELS));
    if (!nx) { loom_sys_free(raw); loom_set_error(LOOM_ERR_OOM, "CIFAR-10: out of host memory"); goto fail; }
    x = nx;
    unsigned char *ny = loom_sys_realloc(y, (size_t)(count + m));
    if (!ny) { loom_sys_free(raw); loom_set_error(LOOM_ERR_OOM, "CIFAR-10: out of host memory"); goto fail; }
    y = ny;
    for (int64_t r = 0; r < m; r++) {
      y[count + r] = raw[r * CIFAR_RECORD];
      memcpy(x + (count + r) * CIFAR_PIXELS, raw + r * CIFAR_RECORD + 1, CIFAR_PIXELS);
    }
    count += m;
    loom_sys_free(raw);
  }
  char name[160];
  snprintf(name, sizeof name, "cifar10 '%s'%s", files[0], n > 1 ? " + more" : "");
  const int64_t shape[3] = {3, 32, 32};
  loom_dataset *ds = loom_dataset_memory_owned(x, LOOM_U8, 3, shape, y, LOOM_U8, count, name);
  if (ds) return ds;
fail:
  loom_sys_free(x);
  loom_sys_free(y);
  return NULL;
}
