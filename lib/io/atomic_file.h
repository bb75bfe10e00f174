/* atomic_file.h (internal) — replace a file atomically: write a temporary
 * file in the same directory, fsync it, rename it over the target, fsync the
 * directory. A crash at any point leaves the old file or the new one. */
#ifndef LOOM_IO_ATOMIC_FILE_H
#define LOOM_IO_ATOMIC_FILE_H

#include <stddef.h>
#include "loom/status.h"

typedef struct loom_atomic_file {
  int fd;
  char *path;   /* the target */
  char *tmp;    /* the temporary file next to it */
} loom_atomic_file;

/* Create the temporary file for path. */
loom_status loom_atomic_open(loom_atomic_file *af, const char *path);
/* Append n bytes (retries short writes and EINTR). */
loom_status loom_atomic_write(loom_atomic_file *af, const void *data, size_t n);
/* fsync, close, rename over the target, fsync the directory. On failure the
 * temporary file is removed and the target is untouched. Frees af either
 * way. */
loom_status loom_atomic_commit(loom_atomic_file *af);
/* Give up: close and remove the temporary file, free af. */
void loom_atomic_abort(loom_atomic_file *af);

#endif
