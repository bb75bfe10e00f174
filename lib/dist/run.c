/* run.c — loom_dist_run: what a trainer calls to be data parallel in every
 * launch mode with the same body: unlaunched (a world of one), one process
 * per device under mpirun/srun (or the file rendezvous), or one process
 * driving N local GPUs (--gpus: ncclCommInitAll, one thread per GPU, each
 * with its own replica and communicator). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/struct_size.h"
#include "dist/dist_internal.h"
#include "core/sys.h"

void loom_dist_run_options_init(loom_dist_run_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->gpus = 0;
  loom_comm_options_init(&o->comm);
}

typedef struct worker {
  loom_dist_worker fn;
  void *user;
  loom_comm *comm;
  loom_comm **all;
  int n;
  loom_status st;
  char msg[1024];
  pthread_t thread;
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  w->st = w->fn(w->comm, w->user);
  if (w->st != LOOM_OK) {
    snprintf(w->msg, sizeof w->msg, "%s", loom_last_error());
    /* The other replicas would wait for this one's collectives until the
     * timeout: abort their communicators so they fail now. */
    for (int i = 0; i < w->n; i++) loom_comm_abort(w->all[i]);
  }
  return NULL;
}

loom_status loom_dist_run(const loom_dist_run_options *opt, loom_dist_worker fn, void *user) {
  if (!fn) return loom_set_error(LOOM_ERR_INVALID_ARG, "dist_run: fn is NULL");
  loom_dist_run_options o;
  loom_dist_run_options_init(&o);
  LOOM_TRY(LOOM_STRUCT_IN("dist_run", loom_dist_run_options, &o, opt));
  if (o.gpus == 0) {
    loom_comm *c = NULL;
    LOOM_TRY(loom_comm_init(&o.comm, &c));
    loom_status st = fn(c, user);
    if (st != LOOM_OK) {
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", loom_last_error());
      loom_comm_abort(c);
      loom_comm_free(c);
      return loom_set_error(st, "%s", msg);
    }
    loom_comm_free(c);
    return LOOM_OK;
  }
  loom_dist_env e = {.struct_size = sizeof e};
  LOOM_TRY(loom_dist_env_get(&e));
  if (e.launched && e.world_size > 1)
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "dist_run: --gpus drives several GPUs from one process, but this process is rank %d of %d "
                          "under %s: launch one process per GPU instead (no --gpus), or run one process with --gpus",
                          e.rank, e.world_size, e.launcher);
  int have = loom_device_count(LOOM_CUDA);
  int n = o.gpus < 0 ? have : o.gpus;
  if (have == 0) {
    const char *why = loom_cuda_unavailable_reason();
    return loom_set_error(LOOM_ERR_DEVICE, "dist_run: --gpus needs CUDA devices, but CUDA is unavailable: %s",
                          why ? why : "no device");
  }
  if (n > have)
    return loom_set_error(LOOM_ERR_DEVICE, "dist_run: %d GPUs asked for, %d present", n, have);
  loom_comm **comms = loom_sys_calloc((size_t)n, sizeof *comms);
  worker *w = loom_sys_calloc((size_t)n, sizeof *w);
  if (!comms || !w) {
    loom_sys_free(comms);
    loom_sys_free(w);
    return loom_set_error(LOOM_ERR_OOM, "dist_run: out of host memory");
  }
  loom_status st = loom_comm_init_all(n, NULL, &o.comm, comms);
  int started = 0;
  for (int i = 0; i < n && st == LOOM_OK; i++) {
    w[i] = (worker){fn, user, comms[i], comms, n, LOOM_OK, "", 0};
    if (pthread_create(&w[i].thread, NULL, worker_main, &w[i]) != 0) {
      st = loom_set_error(LOOM_ERR_OOM, "dist_run: could not start the thread of GPU %d", i);
      for (int k = 0; k < n; k++) loom_comm_abort(comms[k]);
    } else {
      started++;
    }
  }
  for (int i = 0; i < started; i++) pthread_join(w[i].thread, NULL);
  int first_bad = -1;
  for (int i = 0; i < started && first_bad < 0; i++)
    if (w[i].st != LOOM_OK && !strstr(w[i].msg, "aborted by loom_comm_abort")) first_bad = i;
  for (int i = 0; i < started && first_bad < 0; i++)
    if (w[i].st != LOOM_OK) first_bad = i;
  for (int i = 0; i < n; i++) loom_comm_free(comms[i]);
  if (st == LOOM_OK && first_bad >= 0) st = loom_set_error(w[first_bad].st, "replica %d: %s", first_bad, w[first_bad].msg);
  loom_sys_free(comms);
  loom_sys_free(w);
  return st;
}
