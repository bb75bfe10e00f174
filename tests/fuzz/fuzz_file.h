/* fuzz_file.h — hand the fuzzer's bytes to loom's file parsers through an
 * in-memory file (memfd) and its /proc path, so nothing touches the disk. */
#ifndef LOOM_FUZZ_FILE_H
#define LOOM_FUZZ_FILE_H
/* needs _GNU_SOURCE defined before the first include (memfd_create) */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

static inline int fuzz_file(const unsigned char *data, size_t size, char *path, size_t n) {
  int fd = memfd_create("loom-fuzz", 0);
  if (fd < 0) return -1;
  size_t off = 0;
  while (off < size) {
    ssize_t w = write(fd, data + off, size - off);
    if (w <= 0) { close(fd); return -1; }
    off += (size_t)w;
  }
  snprintf(path, n, "/proc/self/fd/%d", fd);
  return fd;
}

static inline void fuzz_file_close(int fd) { close(fd); }
#endif
