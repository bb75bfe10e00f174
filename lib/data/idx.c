/* idx.c — the IDX format (MNIST, Fashion-MNIST): a loader for whole files
 * and the images+labels dataset built on it.
 *
 * Layout: 00 00 <type> <ndim>, then ndim big-endian u32 dims, then the
 * elements big-endian, row-major. Every field is checked before it is
 * trusted: the magic, the type, 1 <= ndim <= 4, dims >= 1 with a capped
 * product, the payload size against the real data, and nothing after it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/data_file.h"
#include "core/sys.h"

static int64_t be32(const unsigned char *p) {
  return ((int64_t)p[0] << 24) | ((int64_t)p[1] << 16) | ((int64_t)p[2] << 8) | (int64_t)p[3];
}

loom_status loom_idx_load(const char *path, void **data, loom_dtype *dtype, int *ndim, int64_t shape[LOOM_MAX_DIMS]) {
  if (!data || !dtype || !ndim || !shape)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_idx_load: NULL output argument");
  *data = NULL;
  loom_data_file f;
  LOOM_TRY(loom_data_file_open(&f, path));
  loom_status st;
  unsigned char hdr[4];
  if ((st = loom_data_file_read(&f, hdr, 4, "the IDX magic number")) != LOOM_OK) goto fail;
  if (hdr[0] != 0 || hdr[1] != 0) {
    st = loom_set_error(LOOM_ERR_FORMAT,
                        "'%s': not an IDX file (magic %02x %02x %02x %02x; IDX files start with 00 00 <type> <ndim>)",
                        path, hdr[0], hdr[1], hdr[2], hdr[3]);
    goto fail;
  }
  size_t esize = 0;
  switch (hdr[2]) {
    case 0x08: *dtype = LOOM_U8; esize = 1; break;
    case 0x0C: *dtype = LOOM_I32; esize = 4; break;
    case 0x0D: *dtype = LOOM_F32; esize = 4; break;
    case 0x09: case 0x0B: case 0x0E:
      st = loom_set_error(LOOM_ERR_UNSUPPORTED,
                          "'%s': IDX element type 0x%02x (i8/i16/f64) is not supported; use u8 (0x08), i32 (0x0C) or f32 (0x0D)",
                          path, hdr[2]);
      goto fail;
    default:
      st = loom_set_error(LOOM_ERR_FORMAT, "'%s': unknown IDX element type 0x%02x in the magic number", path, hdr[2]);
      goto fail;
  }
  int nd = hdr[3];
  if (nd < 1 || nd > 4) {
    st = loom_set_error(LOOM_ERR_FORMAT, "'%s': IDX header declares %d dimensions; loom accepts 1 to 4", path, nd);
    goto fail;
  }
  unsigned char dbuf[16];
  if ((st = loom_data_file_read(&f, dbuf, 4 * nd, "the IDX dimensions")) != LOOM_OK) goto fail;
  int64_t total = 1, sample = 1;
  for (int i = 0; i < nd; i++) {
    shape[i] = be32(dbuf + 4 * i);
    if (shape[i] < 1) {
      st = loom_set_error(LOOM_ERR_FORMAT, "'%s': IDX dimension %d is 0; every dimension must be at least 1", path, i);
      goto fail;
    }
    if (i > 0) sample *= shape[i];
    /* Dims are < 2^32 and at most 4, but their product can overflow: cap it. */
    if (sample > LOOM_DATA_MAX_SAMPLE_ELEMS) {
      st = loom_set_error(LOOM_ERR_FORMAT, "'%s': IDX sample dimensions multiply to more than %lld elements; the header is corrupt",
                          path, (long long)LOOM_DATA_MAX_SAMPLE_ELEMS);
      goto fail;
    }
  }
  total = shape[0] * sample;  /* < 2^32 * 2^26: no overflow */
  int64_t nbytes = total * (int64_t)esize;
  if (nbytes > LOOM_DATA_MAX_FILE_BYTES) {
    st = loom_set_error(LOOM_ERR_FORMAT, "'%s': IDX header declares %lld bytes of data, more than the %lld loom accepts; the header is corrupt",
                        path, (long long)nbytes, (long long)LOOM_DATA_MAX_FILE_BYTES);
    goto fail;
  }
  unsigned char *buf = NULL;
  if ((st = loom_data_file_read_grow(&f, nbytes, "the IDX data", &buf)) != LOOM_OK) goto fail;
  if ((st = loom_data_file_expect_end(&f, "IDX data")) != LOOM_OK) { loom_sys_free(buf); goto fail; }
  loom_data_file_close(&f);
  if (esize == 4) {  /* big-endian to host order */
    for (int64_t i = 0; i < total; i++) {
      unsigned char *p = buf + 4 * i;
      uint32_t v = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
      memcpy(p, &v, 4);
    }
  }
  *ndim = nd;
  *data = buf;
  return LOOM_OK;
fail:
  loom_data_file_close(&f);
  return st;
}

loom_dataset *loom_dataset_idx_open(const char *images_path, const char *labels_path) {
  void *x = NULL, *y = NULL;
  loom_dtype xdt, ydt = LOOM_U8;
  int xnd = 0, ynd = 0;
  int64_t xs[LOOM_MAX_DIMS], ys[LOOM_MAX_DIMS];
  if (!images_path) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_dataset_idx_open: images_path is NULL");
    return NULL;
  }
  if (loom_idx_load(images_path, &x, &xdt, &xnd, xs) != LOOM_OK) return NULL;
  if (labels_path) {
    if (loom_idx_load(labels_path, &y, &ydt, &ynd, ys) != LOOM_OK) { loom_sys_free(x); return NULL; }
    if (ynd != 1) {
      loom_set_error(LOOM_ERR_FORMAT, "'%s': a labels file must have 1 dimension (idx1), this one has %d", labels_path, ynd);
      goto fail;
    }
    if (ys[0] != xs[0]) {
      loom_set_error(LOOM_ERR_FORMAT, "'%s' has %lld images but '%s' has %lld labels; pair the matching files",
                     images_path, (long long)xs[0], labels_path, (long long)ys[0]);
      goto fail;
    }
  }
  char name[160];
  snprintf(name, sizeof name, "idx '%s'", images_path);
  loom_dataset *ds = loom_dataset_memory_owned(x, xdt, xnd - 1, xs + 1, y, ydt, xs[0], name);
  if (!ds) goto fail;
  return ds;
fail:
  loom_sys_free(x);
  loom_sys_free(y);
  return NULL;
}
