/* fuzz_cifar.c — libFuzzer target for the CIFAR-10 binary parser (raw and
 * gzip): errors with a message, never a crash or a leak; a parsed dataset
 * can be read back in full. */
#define _GNU_SOURCE  /* memfd_create */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_file.h"
#include "loom/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = fuzz_file(data, size, path, sizeof path);
  if (fd < 0) return 0;
  const char *files[1] = {path};
  loom_dataset *ds = loom_dataset_cifar10_open(files, 1);
  if (ds) {
    static unsigned char x[3 * 32 * 32], y[8];
    int64_t n = loom_dataset_length(ds);
    for (int64_t i = 0; i < n; i++)
      if (loom_dataset_read(ds, i, x, y) != LOOM_OK) abort();
    loom_dataset_release(ds);
  } else if (!loom_last_error()[0]) {
    abort();
  }
  fuzz_file_close(fd);
  return 0;
}
