/* fuzz_idx.c — libFuzzer target for the IDX parser (raw and gzip): any byte
 * string must give LOOM_OK with a consistent result or an error with a
 * message — never a crash, a leak or a huge allocation. Built as a real
 * fuzzer with -DLOOM_FUZZ=ON (clang); otherwise replayed over the corpus in
 * ctest (see replay_main.c). */
#define _GNU_SOURCE  /* memfd_create */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"
#include "loom/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = fuzz_file(data, size, path, sizeof path);
  if (fd < 0) return 0;
  void *out = NULL;
  loom_dtype dt;
  int ndim = 0;
  int64_t shape[LOOM_MAX_DIMS];
  loom_status st = loom_idx_load(path, &out, &dt, &ndim, shape);
  if (st == LOOM_OK) {
    /* A success must describe memory that is really there. */
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    volatile uint8_t sink = 0;
    size_t bytes = (size_t)n * loom_dtype_size(dt);
    if (bytes) sink ^= ((uint8_t *)out)[bytes - 1];
    (void)sink;
    loom_free(out);
  } else if (!loom_last_error()[0]) {
    abort();  /* every failure must say why */
  }
  /* The dataset path validates the pair (here: the same file twice). */
  loom_dataset *ds = loom_dataset_idx_open(path, NULL);
  loom_dataset_release(ds);
  fuzz_file_close(fd);
  return 0;
}
