/* rendezvous.c — the file rendezvous for launchers without MPI
 * (LOOM_DIST_INIT=file:/shared/dir/file): rank 0 publishes the NCCL unique
 * id in a file on a shared file system, the other ranks wait for it (bounded
 * by the timeout) and read it. The file is written to a temporary name,
 * fsynced and renamed, so a reader never sees half of it; it records the
 * world size, so ranks of different jobs that share a path are refused. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dist/dist_internal.h"
#include "loom/log.h"
#include "core/sys.h"

#define RV_MAGIC "LOOMRV1\n"

typedef struct rv_header {
  char magic[8];
  int32_t world_size;
  uint32_t blob_bytes;
} rv_header;

loom_status loom_rendezvous_file_publish(const char *path, const void *blob, size_t n, int world_size) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "rendezvous: the path '%s' is too long", path);
  struct stat sb;
  if (stat(path, &sb) == 0)
    loom_log_msg(LOOM_LOG_WARN, "rendezvous: replacing an existing %s (left by an earlier run?); use a fresh path per job",
                 path);
  int fd = loom_sys_open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return loom_set_error(LOOM_ERR_IO, "rendezvous: cannot create %s: %s (is the directory shared and writable?)", tmp,
                          strerror(errno));
  rv_header h;
  memcpy(h.magic, RV_MAGIC, 8);
  h.world_size = world_size;
  h.blob_bytes = (uint32_t)n;
  bool ok = loom_sys_write(fd, &h, sizeof h) == (ssize_t)sizeof h && loom_sys_write(fd, blob, n) == (ssize_t)n && loom_sys_fsync(fd) == 0;
  int err = errno;
  loom_sys_close(fd);
  if (!ok || loom_sys_rename(tmp, path) != 0) {
    if (ok) err = errno;
    loom_sys_unlink(tmp);
    return loom_set_error(LOOM_ERR_IO, "rendezvous: cannot write %s: %s", path, strerror(err));
  }
  return LOOM_OK;
}

loom_status loom_rendezvous_file_read(const char *path, void *blob, size_t n, int world_size, double timeout_s) {
  double deadline = loom_dist_now() + timeout_s;
  for (int it = 0;; it++) {
    int fd = loom_sys_open(path, O_RDONLY);
    if (fd >= 0) {
      rv_header h;
      bool ok = loom_sys_read(fd, &h, sizeof h) == (ssize_t)sizeof h;
      ok = ok && memcmp(h.magic, RV_MAGIC, 8) == 0 && h.blob_bytes == n;
      if (ok && h.world_size != world_size) {
        loom_sys_close(fd);
        return loom_set_error(LOOM_ERR_STATE,
                              "rendezvous: %s was written for a world of %d ranks but this rank expects %d (a file from "
                              "another job? use a fresh path per job)", path, h.world_size, world_size);
      }
      ok = ok && loom_sys_read(fd, blob, n) == (ssize_t)n;
      loom_sys_close(fd);
      if (!ok)
        return loom_set_error(LOOM_ERR_FORMAT, "rendezvous: %s is not a loom rendezvous file of %zu bytes", path, n);
      return LOOM_OK;
    }
    if (errno != ENOENT)
      return loom_set_error(LOOM_ERR_IO, "rendezvous: cannot read %s: %s", path, strerror(errno));
    if (loom_dist_now() > deadline)
      return loom_set_error(LOOM_ERR_COMM,
                            "rendezvous: %s did not appear within %g s: rank 0 has not started or cannot write there (the "
                            "directory must be shared by every rank)", path, timeout_s);
    usleep(it < 20 ? 5000 : 50000);
  }
}

void loom_rendezvous_file_remove(const char *path) { loom_sys_unlink(path); }
