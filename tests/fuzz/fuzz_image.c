/* fuzz_image.c — libFuzzer target for the image folder's decoders (JPEG
 * through libjpeg-turbo, PNG through libpng) and crops: the bytes are one
 * image of a one-line file list, read with the train transform (two keys)
 * and the eval one. Every input decodes or fails with a message naming the
 * file; never a crash, a leak or an out-of-bounds read. */
#define _GNU_SOURCE  /* memfd_create */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"
#include "loom/data.h"

static void read_as(const char *list, loom_image_mode mode, const char *img) {
  loom_image_folder_options o;
  loom_image_folder_options_init(&o);
  o.file_list = list;
  o.mode = mode;
  o.image_size = 24;
  o.resize_size = 28;
  loom_dataset *ds = loom_dataset_image_folder_open("/", &o);
  if (!ds) {
    if (loom_last_status() == LOOM_ERR_UNSUPPORTED) return; /* built without libjpeg and libpng */
    abort(); /* the list is well formed: opening must work */
  }
  static unsigned char x[3 * 24 * 24];
  int32_t y;
  for (int64_t i = 0; i < (mode == LOOM_IMAGE_TRAIN ? 2 : 1); i++) {
    loom_status st = loom_dataset_read(ds, 0, x, &y);
    if (st != LOOM_OK && !strstr(loom_last_error(), img)) abort(); /* errors name the file */
  }
  loom_dataset_release(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char img[64], list[64], line[96];
  int fd = fuzz_file(data, size, img, sizeof img);
  if (fd < 0) return 0;
  int n = snprintf(line, sizeof line, "%s 0\n", img);
  int lfd = fuzz_file((const unsigned char *)line, (size_t)n, list, sizeof list);
  if (lfd >= 0) {
    read_as(list, LOOM_IMAGE_TRAIN, img);
    read_as(list, LOOM_IMAGE_EVAL, img);
    fuzz_file_close(lfd);
  }
  fuzz_file_close(fd);
  return 0;
}
