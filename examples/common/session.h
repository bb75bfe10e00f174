/* session.h — what loom's trainers share about a run's life: OpenMP's
 * passive wait policy (set before anything spins), and the --save DIR
 * [--save-every N] [--resume] checkpoint of the whole training state
 * (loom/io.h) under data parallelism, where every rank restores the same
 * file and only rank 0 writes it (the replicas are identical after each
 * step: same averaged gradients, same optimizer state). */
#ifndef LOOM_EXAMPLES_SESSION_H
#define LOOM_EXAMPLES_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include <loom/loom.h>

/* OpenMP workers that spin-wait between parallel regions take the cores
 * other processes need (other ranks, other jobs): measured 772 vs 10.9k
 * samples/s (spinning vs passive) at a load of 10 on 2 cores. libgomp reads
 * its wait policy once, before main, so this sets it and re-executes the
 * program once, unless the user chose a policy (OMP_WAIT_POLICY=ACTIVE
 * restores spinning). Call first thing in main. */
void session_passive_openmp(char **argv);

/* Run fn once per replica and return the process's exit status (0, or 1
 * after printing why). Unlaunched: a world of one. Under mpirun/srun: one
 * rank per process (a GPU each, by local rank, unless device_arg names one,
 * "cuda:N"). gpus (--gpus: -1 all, N): one process, one replica per local
 * GPU. fn's own failures are LOOM_ERR_STATE: it has printed them. */
int session_run(const char *prog, const char *device_arg, loom_device dev, int gpus, loom_dist_worker fn, void *user);

typedef struct session_ckpt {
  const char *prog;          /* for messages: "loom-resnet" */
  char path[4096];           /* DIR/checkpoint.safetensors, or "" without --save */
  int64_t every;             /* --save-every (0: only at the end) */
  int writer;                /* this rank writes (rank 0) */
} session_ckpt;

/* Prepare --save DIR (created if missing) and, with resume, restore st from
 * DIR/checkpoint.safetensors when it exists (st->step is then the step to
 * continue from; 0 otherwise). dir NULL: checkpoints off. Returns 0, or 1
 * after printing why. */
int session_ckpt_open(session_ckpt *c, const char *prog, const char *dir, int64_t every, int resume, int rank,
                      int quiet, loom_train_state *st);
/* Save st at global_step if this rank writes and (final, or every N steps).
 * Returns 0, or 1 after printing why. */
int session_ckpt_step(const session_ckpt *c, loom_train_state *st, int64_t global_step, int final, int quiet);

#endif
