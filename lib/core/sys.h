/* sys.h (internal) — the one entry point through which lib/ allocates host
 * memory and touches files. Each wrapper asks core/fault.h whether this
 * call should fail and, if so, fails the way the C library would (same
 * return value, errno set); otherwise it is the plain call. Without
 * LOOM_FAULT_INJECTION the check folds to nothing and these are the libc
 * calls themselves.
 *
 * scripts/check-raw-calls.py (ctest raw_calls) fails when code under lib/
 * calls the raw functions instead; scripts/route-raw-calls.py does the
 * rename. Buffered stdio writes (fprintf, fputc, fputs) stay raw: their
 * failures surface at the fflush/fclose below, which are injected. Calls
 * that free or remove (free, munmap, unlink) are routed but never fail. */
#ifndef LOOM_CORE_SYS_H
#define LOOM_CORE_SYS_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/fault.h"

/* Host memory: NULL with ENOMEM. */
static inline void *loom_sys_malloc(size_t n) {
  if (loom_fault_fail(LOOM_FAULT_HOST)) return errno = ENOMEM, (void *)NULL;
  return malloc(n);
}
static inline void *loom_sys_calloc(size_t n, size_t size) {
  if (loom_fault_fail(LOOM_FAULT_HOST)) return errno = ENOMEM, (void *)NULL;
  return calloc(n, size);
}
/* On failure p is untouched, as with realloc. */
static inline void *loom_sys_realloc(void *p, size_t n) {
  if (loom_fault_fail(LOOM_FAULT_HOST)) return errno = ENOMEM, (void *)NULL;
  return realloc(p, n);
}
static inline void *loom_sys_aligned_alloc(size_t align, size_t n) {
  if (loom_fault_fail(LOOM_FAULT_HOST)) return errno = ENOMEM, (void *)NULL;
  return aligned_alloc(align, n);
}
static inline int loom_sys_posix_memalign(void **out, size_t align, size_t n) {
  if (loom_fault_fail(LOOM_FAULT_HOST)) return ENOMEM;
  return posix_memalign(out, align, n);
}
static inline char *loom_sys_strdup(const char *s) {
  if (loom_fault_fail(LOOM_FAULT_HOST)) return errno = ENOMEM, (char *)NULL;
  return strdup(s);
}
static inline char *loom_sys_strndup(const char *s, size_t n) {
  if (loom_fault_fail(LOOM_FAULT_HOST)) return errno = ENOMEM, (char *)NULL;
  return strndup(s, n);
}
static inline void loom_sys_free(void *p) { free(p); }

/* Descriptors: -1 with errno; open fails as when the process is out of
 * descriptors, reads and syncs with EIO, writes with ENOSPC (disk full). */
/* mode is read only with O_CREAT, as open(2) does. */
static inline int loom_sys_open(const char *path, int flags, ...) {
  mode_t mode = 0;
  if (flags & O_CREAT) {
    va_list ap;
    va_start(ap, flags);
    mode = (mode_t)va_arg(ap, int);
    va_end(ap);
  }
  if (loom_fault_fail(LOOM_FAULT_FILE)) return errno = EMFILE, -1;
  return open(path, flags, mode);
}
static inline ssize_t loom_sys_read(int fd, void *buf, size_t n) {
  if (loom_fault_fail(LOOM_FAULT_FILE)) return errno = EIO, -1;
  return read(fd, buf, n);
}
static inline ssize_t loom_sys_pread(int fd, void *buf, size_t n, off_t off) {
  if (loom_fault_fail(LOOM_FAULT_FILE)) return errno = EIO, -1;
  return pread(fd, buf, n, off);
}
static inline ssize_t loom_sys_write(int fd, const void *buf, size_t n) {
  if (loom_fault_fail(LOOM_FAULT_FILE)) return errno = ENOSPC, -1;
  return write(fd, buf, n);
}
static inline int loom_sys_fsync(int fd) {
  if (loom_fault_fail(LOOM_FAULT_FILE)) return errno = EIO, -1;
  return fsync(fd);
}
/* The descriptor is released either way, as close(2) does on EIO. */
static inline int loom_sys_close(int fd) {
  int r = close(fd);
  if (r == 0 && loom_fault_fail(LOOM_FAULT_FILE)) return errno = EIO, -1;
  return r;
}
static inline int loom_sys_rename(const char *from, const char *to) {
  if (loom_fault_fail(LOOM_FAULT_FILE)) return errno = EIO, -1;
  return rename(from, to);
}
static inline int loom_sys_unlink(const char *path) { return unlink(path); }
static inline void *loom_sys_mmap(void *addr, size_t n, int prot, int flags, int fd, off_t off) {
  if (loom_fault_fail(LOOM_FAULT_FILE)) return errno = ENOMEM, MAP_FAILED;
  return mmap(addr, n, prot, flags, fd, off);
}
static inline int loom_sys_munmap(void *addr, size_t n) { return munmap(addr, n); }

/* stdio. */
static inline FILE *loom_sys_fopen(const char *path, const char *mode) {
  if (loom_fault_fail(LOOM_FAULT_FILE)) return errno = EMFILE, (FILE *)NULL;
  return fopen(path, mode);
}
static inline size_t loom_sys_fread(void *buf, size_t size, size_t n, FILE *f) {
  if (loom_fault_fail(LOOM_FAULT_FILE)) return errno = EIO, (size_t)0;
  return fread(buf, size, n, f);
}
static inline size_t loom_sys_fwrite(const void *buf, size_t size, size_t n, FILE *f) {
  if (loom_fault_fail(LOOM_FAULT_FILE)) return errno = ENOSPC, (size_t)0;
  return fwrite(buf, size, n, f);
}
static inline int loom_sys_fflush(FILE *f) {
  if (loom_fault_fail(LOOM_FAULT_FILE)) return errno = ENOSPC, EOF;
  return fflush(f);
}
/* getline allocates the line buffer: an injected fault is ENOMEM with -1,
 * which callers tell from end-of-file by errno (they clear it first). */
static inline ssize_t loom_sys_getline(char **line, size_t *cap, FILE *f) {
  if (loom_fault_fail(LOOM_FAULT_HOST)) return errno = ENOMEM, (ssize_t)-1;
  return getline(line, cap, f);
}
/* The stream is closed either way, as fclose(3) does on error. */
static inline int loom_sys_fclose(FILE *f) {
  int r = fclose(f);
  if (r == 0 && loom_fault_fail(LOOM_FAULT_FILE)) return errno = EIO, EOF;
  return r;
}

#endif
