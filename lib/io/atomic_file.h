/* atomic_file.h (internal) — replace a file atomically: write a temporary
 * file in the same directory, fsync it, rename it over the target, fsync the
 * directory. A crash at any point leaves the old file or the new one. */
#ifndef LOOM_IO_ATOMIC_FILE_H
#define LOOM_IO_ATOMIC_FILE_H

#include <stddef.h>
#include <stdint.h>
#include "loom/status.h"

typedef struct loom_atomic_file {
  int fd;
  int old;      /* the file being replaced, held open until the commit's end; or -1 */
  char *path;   /* the target */
  char *tmp;    /* the temporary file next to it */
  /* Writes go through an aligned staging buffer, written out whole; past
   * its first fill the file is written with O_DIRECT (atomic_file.c). */
  char *stage;
  size_t staged;
  int direct;     /* O_DIRECT is on */
  int flushed;    /* the stage has been written out at least once */
  uint64_t size;  /* bytes appended so far */
} loom_atomic_file;

/* Create the temporary file for path; when path exists, hold it open and
 * drop its pages from the page cache (atomic_file.c says why). */
loom_status loom_atomic_open(loom_atomic_file *af, const char *path);
/* Append n bytes (retries short writes and EINTR; written out in stages). */
loom_status loom_atomic_write(loom_atomic_file *af, const void *data, size_t n);
/* fsync, close, rename over the target, fsync the directory. On failure the
 * temporary file is removed and the target is untouched. Frees af either
 * way. */
loom_status loom_atomic_commit(loom_atomic_file *af);
/* Give up: close and remove the temporary file, free af. */
void loom_atomic_abort(loom_atomic_file *af);

#endif
