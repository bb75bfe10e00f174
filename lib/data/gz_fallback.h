/* gz_fallback.h (internal) — the few zlib calls data_file.c makes, over
 * stdio, for builds without zlib (a plain configure on a machine with no
 * zlib headers). Raw files read exactly as through zlib's transparent mode;
 * a gzip file (1f 8b magic) opens, but its first read fails with
 * LOOM_GZ_NO_ZLIB, which data_file.c turns into "rebuild with zlib". */
#ifndef LOOM_DATA_GZ_FALLBACK_H
#define LOOM_DATA_GZ_FALLBACK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include "core/sys.h"

#define Z_OK 0
#define Z_ERRNO (-1)
#define Z_BUF_ERROR (-5)
#define LOOM_GZ_NO_ZLIB (-100)

typedef struct loom_gz {
  FILE *f;
  int gzip;   /* the file starts with the gzip magic */
  int err;    /* Z_OK, Z_ERRNO or LOOM_GZ_NO_ZLIB */
} *gzFile;

static inline gzFile gzopen(const char *path, const char *mode) {
  (void)mode;
  gzFile g = loom_sys_calloc(1, sizeof *g);
  if (!g) return NULL;
  g->f = loom_sys_fopen(path, "rb");
  if (!g->f) {
    int e = errno;
    loom_sys_free(g);
    errno = e;
    return NULL;
  }
  unsigned char m[2];
  size_t n = loom_sys_fread(m, 1, 2, g->f);
  g->gzip = n == 2 && m[0] == 0x1f && m[1] == 0x8b;
  rewind(g->f);
  return g;
}

static inline int gzbuffer(gzFile g, unsigned size) {
  (void)g;
  (void)size;
  return 0;
}

static inline int gzclose(gzFile g) {
  if (!g) return Z_ERRNO;
  loom_sys_fclose(g->f);
  loom_sys_free(g);
  return Z_OK;
}

/* Like zlib before the first read: a gzip file is not direct. */
static inline int gzdirect(gzFile g) { return !g->gzip; }

static inline int gzread(gzFile g, void *buf, unsigned len) {
  if (g->gzip) {
    g->err = LOOM_GZ_NO_ZLIB;
    return -1;
  }
  size_t n = loom_sys_fread(buf, 1, len, g->f);
  if (n < len && ferror(g->f)) {
    g->err = Z_ERRNO;
    return -1;
  }
  return (int)n;
}

static inline long gztell(gzFile g) { return ftell(g->f); }

static inline const char *gzerror(gzFile g, int *errnum) {
  *errnum = g->err;
  return g->err == LOOM_GZ_NO_ZLIB ? "loom was built without zlib" : g->err ? "read error" : "";
}

#endif
