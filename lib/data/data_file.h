/* data_file.h (internal) — a dataset file opened through zlib (raw or gzip;
 * raw only in builds without zlib, see gz_fallback.h) with reads that turn truncation and corrupt streams into messages. */
#ifndef LOOM_DATA_FILE_H
#define LOOM_DATA_FILE_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#ifdef LOOM_HAVE_ZLIB
#include <zlib.h>
#else
#include "data/gz_fallback.h"
#endif

#include "core/fault.h"
#include "data/data_internal.h"

/* zlib's file calls, through fault injection (core/fault.h) like core/sys.h's:
 * an open fails as when out of descriptors, a read with EIO. */
static inline gzFile loom_gz_open(const char *path, const char *mode) {
  if (loom_fault_fail(LOOM_FAULT_FILE)) return errno = EMFILE, (gzFile)NULL;
  return gzopen(path, mode);
}
static inline int loom_gz_read(gzFile g, void *buf, unsigned n) {
  if (loom_fault_fail(LOOM_FAULT_FILE)) return errno = EIO, -1;
  return gzread(g, buf, n);
}

typedef struct loom_data_file {
  gzFile gz;
  const char *path;
  int64_t raw_size;  /* bytes on disk */
} loom_data_file;

/* LOOM_ERR_IO if it cannot be opened. */
loom_status loom_data_file_open(loom_data_file *f, const char *path);
void loom_data_file_close(loom_data_file *f);
/* True once a read found gzip data (false for raw files). */
bool loom_data_file_is_gzip(loom_data_file *f);
/* Read exactly n bytes (small headers); `what` names them in messages. */
loom_status loom_data_file_read(loom_data_file *f, void *buf, int64_t n, const char *what);
/* Read exactly n bytes into a new malloc'd buffer whose growth follows the
 * data really present (raw files: checked against the size on disk first). */
loom_status loom_data_file_read_grow(loom_data_file *f, int64_t n, const char *what, unsigned char **out);
/* LOOM_ERR_FORMAT if any byte follows. */
loom_status loom_data_file_expect_end(loom_data_file *f, const char *what);

#endif
