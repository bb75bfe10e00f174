/* bench_checkpoint.c — loom's side of the checkpoint benchmark, with the
 * limits it runs against, measured in the same run on the same directory:
 *   disk_write      write() + fsync of the same bytes to a plain file;
 *   disk_read_cold  read() of that file after evicting it from the page cache
 *                   (posix_fadvise DONTNEED: no root needed);
 *   pagecache_read  read() of it again, now cached;
 *   loom save       loom_safetensors_save (temp file, write, fsync, rename,
 *                   directory fsync) to a new name;
 *   loom save_replace  the same over the file just saved;
 *   loom load_after_save  open + validate + get every tensor (CPU: zero-copy
 *                   views of the map) + touch one byte per 4 KiB page, right
 *                   after the save (loom writes large files with O_DIRECT,
 *                   so they are not in the page cache then; torch's are);
 *   loom load_warm  the same with the file in the page cache (read once,
 *                   untimed, first);
 *   loom load_cold  the same after evicting the file.
 * Tensors: T f32 tensors totalling MIB MiB (default 16 x 64 MiB = 1 GiB).
 * One line per result:
 *   bench=checkpoint impl=<loom|raw> op=<...> mib=M round=R seconds=S gib_per_s=G
 * bench/checkpoint/checkpoint_vs_torch.py runs this and safetensors.torch alternately and
 * prints the ratios.
 *
 * Usage: bench_checkpoint [--mib 1024] [--tensors 16] [--dir DIR] [--rounds 3] */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loom/loom.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void line(const char *impl, const char *op, int mib, int round, double s) {
  printf("bench=checkpoint impl=%s op=%s mib=%d round=%d seconds=%.4f gib_per_s=%.3f\n", impl, op, mib, round, s,
         (double)mib / 1024.0 / s);
  fflush(stdout);
}

static int evict(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  fdatasync(fd);
  int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  return rc;
}

static double read_all(const char *path, char *buf, size_t n) {
  double t0 = now_s();
  int fd = open(path, O_RDONLY);
  size_t got = 0;
  while (fd >= 0 && got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (fd >= 0) close(fd);
  return got == n ? now_s() - t0 : -1;
}

static int die(const char *what) {
  fprintf(stderr, "bench_checkpoint: %s: %s\n", what, loom_last_error());
  return 1;
}

int main(int argc, char **argv) {
  int mib = 1024, nt = 16, rounds = 3;
  const char *dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--mib")) mib = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--tensors")) nt = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
    else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
  }
  if (mib < 1 || nt < 1 || rounds < 1 || ((int64_t)mib << 20) % ((int64_t)nt * 4)) {
    fprintf(stderr, "usage: bench_checkpoint [--mib M] [--tensors T] [--dir DIR] [--rounds R] (M MiB split evenly)\n");
    return 2;
  }
  size_t total = (size_t)mib << 20;
  int64_t per = (int64_t)(total / (size_t)nt / 4);
  loom_manual_seed(1);
  loom_tensor **ts = calloc((size_t)nt, sizeof *ts);
  char **names = calloc((size_t)nt, sizeof *names);
  for (int i = 0; i < nt; i++) {
    ts[i] = loom_rand(1, &per, LOOM_F32, loom_cpu());
    names[i] = malloc(64);
    snprintf(names[i], 64, "model.layers.%d.weight", i);
    if (!ts[i]) return die("making tensors");
  }
  char raw[1024], path[1024];
  snprintf(raw, sizeof raw, "%s/bench_checkpoint_raw.bin", dir);
  snprintf(path, sizeof path, "%s/bench_checkpoint_loom.safetensors", dir);
  char *buf = malloc(total);
  if (!buf) return 1;
  for (int r = 0; r < rounds; r++) {
    /* The limits: the same bytes through plain write/fsync and read. */
    double t0 = now_s();
    int fd = open(raw, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int ok = fd >= 0;
    for (int i = 0; i < nt && ok; i++) {
      const char *p = loom_tensor_data(ts[i]);
      size_t n = (size_t)per * 4, off = 0;
      while (off < n && ok) {
        ssize_t w = write(fd, p + off, n - off);
        ok = w > 0;
        off += w > 0 ? (size_t)w : 0;
      }
    }
    ok = ok && fsync(fd) == 0;
    if (fd >= 0) close(fd);
    if (!ok) {
      perror("bench_checkpoint: raw write");
      return 1;
    }
    line("raw", "disk_write", mib, r, now_s() - t0);
    if (evict(raw) == 0) {
      double s = read_all(raw, buf, total);
      if (s > 0) line("raw", "disk_read_cold", mib, r, s);
    }
    double s = read_all(raw, buf, total);
    if (s > 0) line("raw", "pagecache_read", mib, r, s);
    unlink(raw);
    /* Commit the unlink now: freeing a durable file's blocks (TRIM with
     * online discard) must not land in the next timed fsync. */
    sync();

    /* loom: save to a new name, save over it (the periodic-checkpoint case),
     * then load warm and cold. */
    t0 = now_s();
    if (loom_safetensors_save(path, nt, (const char *const *)names, ts, 0, NULL, NULL) != LOOM_OK) return die("save");
    line("loom", "save", mib, r, now_s() - t0);
    t0 = now_s();
    if (loom_safetensors_save(path, nt, (const char *const *)names, ts, 0, NULL, NULL) != LOOM_OK) return die("save");
    line("loom", "save_replace", mib, r, now_s() - t0);
    /* The replaced file's blocks are freed after the call returns (its last
     * close; TRIMs with online discard): settle that before timing loads.
     * torch's in-place truncate pays it inside its own save's fsync. */
    sync();
    static const char *const load_ops[3] = {"load_after_save", "load_warm", "load_cold"};
    for (int mode = 0; mode < 3; mode++) {
      if (mode == 1 && read_all(path, buf, total) <= 0) break;  /* now in the page cache */
      if (mode == 2 && evict(path) != 0) break;
      volatile unsigned char sink = 0;
      t0 = now_s();
      loom_safetensors *f = loom_safetensors_open(path);
      if (!f) return die("open");
      loom_scope_begin();
      for (int i = 0; i < loom_safetensors_num_tensors(f); i++) {
        loom_tensor *t = loom_safetensors_get(f, loom_safetensors_name(f, i), loom_cpu());
        if (!t) return die("get");
        const unsigned char *p = loom_tensor_data(t);
        size_t n = (size_t)loom_tensor_numel(t) * 4;
        for (size_t k = 0; k < n; k += 4096) sink ^= p[k];  /* every page resident */
      }
      double dt = now_s() - t0;
      loom_scope_end();
      loom_safetensors_close(f);
      (void)sink;
      line("loom", load_ops[mode], mib, r, dt);
    }
    unlink(path);
    sync();
  }
  for (int i = 0; i < nt; i++) {
    loom_tensor_release(ts[i]);
    free(names[i]);
  }
  free(ts);
  free(names);
  free(buf);
  return 0;
}
