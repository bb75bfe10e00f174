/* observe.h — what loom's trainers share to be seen: --logdir DIR writes
 * per-step and per-epoch scalars (loss, accuracy, learning rate, loss scale,
 * samples/s, data-wait share, peak memory) to DIR/metrics.csv and a
 * TensorBoard event file (loom/metrics.h); --profile FILE records a Chrome
 * trace of a few steps after warm-up (loom/prof.h) and prints the summary
 * table. A trainer adds four calls: observe_parse in its argument loop,
 * observe_open after setup, observe_step_begin/observe_step_end around each
 * step (observe_epoch at each epoch end), observe_close at exit.
 *
 * Per-step scalars are logged every --log-every steps (20 by default) and
 * at the last step of each epoch, because reading the loss synchronizes
 * with the device; samples/s and the data-wait share cover the steps since
 * the previous log. Tags: train/{loss,accuracy,lr,loss_scale,samples_per_sec,
 * data_wait_share,peak_memory_mib} per step; epoch/{train_loss,
 * test_accuracy,samples_per_sec,data_wait_share,peak_memory_mib,lr,
 * loss_scale} per epoch; all against the global step. */
#ifndef LOOM_EXAMPLES_OBSERVE_H
#define LOOM_EXAMPLES_OBSERVE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <loom/loom.h>

typedef struct observe_opts {
  const char *logdir;   /* --logdir DIR */
  const char *profile;  /* --profile FILE */
  int profile_warmup;   /* --profile-warmup N: steps before recording (5) */
  int profile_steps;    /* --profile-steps N: steps recorded (5) */
  int log_every;        /* --log-every N (20) */
} observe_opts;

void observe_opts_default(observe_opts *o);
/* If argv[*i] is one of the flags above, consume it and its value and
 * return 1; 0 if it is not ours; -1 after printing why its value is bad. */
int observe_parse(observe_opts *o, int argc, char **argv, int *i, const char *prog);
/* The flags' usage lines. */
void observe_usage(FILE *f);

typedef struct observe observe;
/* Open the log directory (if asked). NULL after printing the error. */
observe *observe_open(const observe_opts *o, loom_device dev, loom_loader *train, const char *prog);
/* Before a step's work: starts the profiler once the warm-up is over. */
int observe_step_begin(observe *ob, int64_t global_step);
/* Whether this step's scalars will be logged (read loss/accuracy then). */
bool observe_log_step(const observe *ob, int64_t global_step, bool last_of_epoch);

typedef struct observe_step {
  int64_t global_step;  /* 0-based index of the step just done */
  int64_t samples;      /* in this step */
  bool logged;          /* loss/accuracy hold values (observe_log_step said so) */
  double loss, accuracy, lr, loss_scale;
} observe_step;
/* After a step's work. Returns nonzero after printing an error. */
int observe_step_end(observe *ob, const observe_step *s);

typedef struct observe_epoch {
  int64_t global_step;  /* steps done so far */
  double train_loss, test_accuracy, samples_per_sec, data_wait_share, lr, loss_scale;
} observe_epoch;
int observe_epoch_end(observe *ob, const observe_epoch *e);
/* Stops a profile still recording, flushes and closes. Nonzero on error. */
int observe_close(observe *ob);

#endif
