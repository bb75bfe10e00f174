/* session.c — OpenMP wait policy and checkpoints for loom's trainers (see
 * session.h). */
#define _GNU_SOURCE
#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void session_passive_openmp(char **argv) {
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv); /* returns only if it failed: go on as we are */
}

/* "prog: what: loom's message", what said once when the message starts with it. */
static int say_failed(const char *prog, const char *what) {
  const char *msg = loom_last_error();
  size_t n = strlen(what);
  if (strncmp(msg, what, n) == 0 && msg[n] == ':') fprintf(stderr, "%s: %s\n", prog, msg);
  else fprintf(stderr, "%s: %s: %s\n", prog, what, msg);
  return 1;
}

int session_run(const char *prog, const char *device_arg, loom_device dev, int gpus, loom_dist_worker fn, void *user) {
  loom_dist_run_options ro;
  loom_dist_run_options_init(&ro);
  ro.gpus = gpus;
  ro.comm.device = dev;
  loom_dist_env env = {.struct_size = sizeof env};
  if (loom_dist_env_get(&env) == LOOM_OK && env.world_size > 1 && dev.kind == LOOM_CUDA && !strchr(device_arg, ':'))
    ro.comm.device.index = -1;
  loom_status st = loom_dist_run(&ro, fn, user);
  if (st != LOOM_OK && st != LOOM_ERR_STATE) return say_failed(prog, "data parallel");
  /* Give back every cache (allocator segments, CUDA/cuDNN handles, streams),
   * so a leak checker over a trainer run (LSan, compute-sanitizer
   * --leak-check full) sees only real leaks. After a good run nothing may
   * still be allocated: LOOM_ERR_STATE here means a tensor was not released. */
  if (loom_shutdown() != LOOM_OK && st == LOOM_OK) return say_failed(prog, "shutdown");
  if (loom_dist_finalize() != LOOM_OK && st == LOOM_OK) return say_failed(prog, "finalizing MPI");
  return st == LOOM_OK ? 0 : 1;
}

int session_ckpt_open(session_ckpt *c, const char *prog, const char *dir, int64_t every, int resume, int rank,
                      int quiet, loom_train_state *st) {
  *c = (session_ckpt){.prog = prog, .every = every, .writer = rank == 0};
  st->step = 0;
  if (!dir) return 0;
  int n = snprintf(c->path, sizeof c->path, "%s/checkpoint.safetensors", dir);
  if (n < 0 || (size_t)n >= sizeof c->path) {
    fprintf(stderr, "%s: --save %s: path too long\n", prog, dir);
    return 1;
  }
  /* Every rank may try: EEXIST is the common answer. */
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "%s: cannot create --save %s: %s\n", prog, dir, strerror(errno));
    return 1;
  }
  if (!resume) return 0;
  if (access(c->path, F_OK) != 0) {
    if (!quiet) printf("no checkpoint in %s yet: starting from step 0\n", dir);
    return 0;
  }
  if (loom_checkpoint_restore(c->path, st) != LOOM_OK) {
    fprintf(stderr, "%s: --resume: %s\n", prog, loom_last_error());
    return 1;
  }
  if (!quiet) printf("resumed from %s at step %lld\n", c->path, (long long)st->step);
  return 0;
}

int session_ckpt_step(const session_ckpt *c, loom_train_state *st, int64_t global_step, int final, int quiet) {
  if (!c->path[0] || !c->writer) return 0;
  if (!final && !(c->every > 0 && global_step % c->every == 0)) return 0;
  st->step = global_step;
  if (loom_checkpoint_save(c->path, st) != LOOM_OK) {
    fprintf(stderr, "%s: --save: %s\n", c->prog, loom_last_error());
    return 1;
  }
  if (final && !quiet) printf("saved %s at step %lld\n", c->path, (long long)global_step);
  return 0;
}
