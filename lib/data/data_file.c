/* data_file.c — reading dataset files, raw or gzip (detected by the 1f 8b
 * magic through zlib's transparent mode), without trusting sizes the file
 * claims: buffers grow with the bytes actually read, and the helpers report
 * bad gzip streams and truncation as LOOM_ERR_FORMAT naming the file. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data_file.h"
#include "core/sys.h"

loom_status loom_data_file_open(loom_data_file *f, const char *path) {
  memset(f, 0, sizeof *f);
  f->path = path;
  f->raw_size = -1;
  if (!path) return loom_set_error(LOOM_ERR_INVALID_ARG, "data: file path is NULL");
  struct stat sb;
  if (stat(path, &sb) != 0)
    return loom_set_error(LOOM_ERR_IO, "cannot open '%s': %s; check the path (gzip or raw files are accepted)",
                          path, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return loom_set_error(LOOM_ERR_IO, "cannot read '%s': not a regular file", path);
  f->raw_size = (int64_t)sb.st_size;
  errno = 0;
  f->gz = loom_gz_open(path, "rb");
  if (!f->gz)
    return loom_set_error(LOOM_ERR_IO, "cannot open '%s': %s", path, errno ? strerror(errno) : "out of memory");
  gzbuffer(f->gz, 1 << 17);
  return LOOM_OK;
}

void loom_data_file_close(loom_data_file *f) {
  if (f->gz) gzclose(f->gz);
  f->gz = NULL;
}

bool loom_data_file_is_gzip(loom_data_file *f) { return f->gz && !gzdirect(f->gz); }

/* Turn zlib's state after a short read into a message. */
static loom_status short_read_error(loom_data_file *f, const char *what, int64_t want, int64_t got) {
  int zerr = Z_OK;
  const char *msg = gzerror(f->gz, &zerr);
  if (zerr == Z_ERRNO)
    return loom_set_error(LOOM_ERR_IO, "'%s': read error in %s: %s", f->path, what, strerror(errno));
#ifndef LOOM_HAVE_ZLIB
  if (zerr == LOOM_GZ_NO_ZLIB)
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "'%s' is gzip-compressed but this loom was built without zlib; install "
                          "zlib1g-dev (or pass -DZLIB_ROOT=DIR) and rebuild, or gunzip the file", f->path);
#endif
  if (zerr != Z_OK && zerr != Z_BUF_ERROR)
    return loom_set_error(LOOM_ERR_FORMAT, "'%s': bad gzip stream in %s (zlib: %s); the file is corrupt, download it again",
                          f->path, what, msg ? msg : "?");
  return loom_set_error(LOOM_ERR_FORMAT,
                        "'%s': truncated: %s needs %lld bytes but only %lld %s; the file is incomplete, download it again",
                        f->path, what, (long long)want, (long long)got,
                        loom_data_file_is_gzip(f) ? "could be decompressed" : "are present");
}

loom_status loom_data_file_read(loom_data_file *f, void *buf, int64_t n, const char *what) {
  int64_t got = 0;
  while (got < n) {
    int64_t chunk = n - got;
    if (chunk > (1 << 30)) chunk = 1 << 30;
    int r = loom_gz_read(f->gz, (char *)buf + got, (unsigned)chunk);
    if (r < 0) return short_read_error(f, what, n, got);
    if (r == 0) return short_read_error(f, what, n, got);
    got += r;
  }
  return LOOM_OK;
}

loom_status loom_data_file_read_grow(loom_data_file *f, int64_t n, const char *what, unsigned char **out) {
  *out = NULL;
  /* A raw file's size is known: check it before allocating anything. */
  if (!loom_data_file_is_gzip(f)) {
    int64_t pos = (int64_t)gztell(f->gz);
    if (pos >= 0 && f->raw_size - pos < n)
      return loom_set_error(LOOM_ERR_FORMAT,
                            "'%s': truncated: %s needs %lld bytes but the file has only %lld after its header; "
                            "the file is incomplete or its header is wrong",
                            f->path, what, (long long)n, (long long)(f->raw_size - pos));
  }
  /* For gzip the decompressed size is unknown until read: grow with the data
   * (start at 1 MiB, double), so a tiny file claiming terabytes costs 1 MiB. */
  int64_t cap = n < (1 << 20) ? n : (1 << 20);
  if (!loom_data_file_is_gzip(f)) cap = n;
  unsigned char *buf = loom_sys_malloc((size_t)(cap ? cap : 1));
  if (!buf) return loom_set_error(LOOM_ERR_OOM, "'%s': out of host memory reading %lld bytes", f->path, (long long)cap);
  int64_t got = 0;
  while (got < n) {
    if (got == cap) {
      int64_t ncap = cap * 2 < n ? cap * 2 : n;
      unsigned char *nb = loom_sys_realloc(buf, (size_t)ncap);
      if (!nb) {
        loom_sys_free(buf);
        return loom_set_error(LOOM_ERR_OOM, "'%s': out of host memory reading %lld bytes", f->path, (long long)ncap);
      }
      buf = nb;
      cap = ncap;
    }
    int64_t chunk = cap - got;
    if (chunk > (1 << 30)) chunk = 1 << 30;
    int r = loom_gz_read(f->gz, buf + got, (unsigned)chunk);
    if (r <= 0) {
      loom_sys_free(buf);
      return short_read_error(f, what, n, got);
    }
    got += r;
  }
  *out = buf;
  return LOOM_OK;
}

loom_status loom_data_file_expect_end(loom_data_file *f, const char *what) {
  unsigned char extra[64];
  int r = loom_gz_read(f->gz, extra, sizeof extra);
  if (r < 0) return short_read_error(f, what, 0, 0);
  if (r > 0)
    return loom_set_error(LOOM_ERR_FORMAT,
                          "'%s': unexpected data after the %s; the header's sizes do not match the file", f->path, what);
  return LOOM_OK;
}

loom_status loom_data_read_file(const char *path, int64_t max_bytes, unsigned char **out, int64_t *len) {
  *out = NULL;
  *len = 0;
  loom_data_file f;
  LOOM_TRY(loom_data_file_open(&f, path));
  int64_t cap = 1 << 20, got = 0;
  unsigned char *buf = loom_sys_malloc((size_t)cap);
  if (!buf) {
    loom_data_file_close(&f);
    return loom_set_error(LOOM_ERR_OOM, "'%s': out of host memory", path);
  }
  for (;;) {
    if (got == cap) {
      if (cap >= max_bytes) {
        loom_sys_free(buf);
        loom_data_file_close(&f);
        return loom_set_error(LOOM_ERR_FORMAT, "'%s': larger than the %lld bytes allowed for this kind of file", path,
                              (long long)max_bytes);
      }
      int64_t ncap = cap * 2 > max_bytes ? max_bytes : cap * 2;
      unsigned char *nb = loom_sys_realloc(buf, (size_t)ncap);
      if (!nb) {
        loom_sys_free(buf);
        loom_data_file_close(&f);
        return loom_set_error(LOOM_ERR_OOM, "'%s': out of host memory reading %lld bytes", path, (long long)ncap);
      }
      buf = nb;
      cap = ncap;
    }
    int64_t chunk = cap - got;
    if (chunk > (1 << 30)) chunk = 1 << 30;
    int r = loom_gz_read(f.gz, buf + got, (unsigned)chunk);
    if (r < 0) {
      loom_status s = short_read_error(&f, "the file", got + 1, got);
      loom_sys_free(buf);
      loom_data_file_close(&f);
      return s;
    }
    if (r == 0) {
      /* End of data; a gzip stream cut short also ends here with an error set. */
      int zerr = Z_OK;
      gzerror(f.gz, &zerr);
      if (zerr != Z_OK) {
        loom_status s = short_read_error(&f, "the gzip stream", got + 1, got);
        loom_sys_free(buf);
        loom_data_file_close(&f);
        return s;
      }
      break;
    }
    got += r;
  }
  loom_data_file_close(&f);
  *out = buf;
  *len = got;
  return LOOM_OK;
}
