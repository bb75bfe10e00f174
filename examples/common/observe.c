/* observe.c — --logdir and --profile for loom's trainers (see observe.h). */
#include "observe.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct observe {
  observe_opts o;
  loom_device dev;
  loom_loader *train;
  const char *prog;
  loom_metrics *m;
  int profiling, profiled;
  /* the window since the last per-step log */
  double t_last, wait_last;
  int64_t samples_since;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void observe_opts_default(observe_opts *o) {
  memset(o, 0, sizeof *o);
  o->profile_warmup = 5;
  o->profile_steps = 5;
  o->log_every = 20;
}

static int int_arg(const char *prog, const char *flag, const char *v, int lo, int *out) {
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > 1000000000) {
    fprintf(stderr, "%s: %s expects an integer >= %d, got '%s'\n", prog, flag, lo, v);
    return -1;
  }
  *out = (int)x;
  return 1;
}

int observe_parse(observe_opts *o, int argc, char **argv, int *i, const char *prog) {
  const char *a = argv[*i];
  int known = !strcmp(a, "--logdir") || !strcmp(a, "--profile") || !strcmp(a, "--profile-warmup") ||
              !strcmp(a, "--profile-steps") || !strcmp(a, "--log-every");
  if (!known) return 0;
  if (*i + 1 >= argc) {
    fprintf(stderr, "%s: %s needs a value\n", prog, a);
    return -1;
  }
  const char *v = argv[++*i];
  if (!strcmp(a, "--logdir")) o->logdir = v;
  else if (!strcmp(a, "--profile")) o->profile = v;
  else if (!strcmp(a, "--profile-warmup")) return int_arg(prog, a, v, 0, &o->profile_warmup);
  else if (!strcmp(a, "--profile-steps")) return int_arg(prog, a, v, 1, &o->profile_steps);
  else return int_arg(prog, a, v, 1, &o->log_every);
  return 1;
}

void observe_usage(FILE *f) {
  fprintf(f,
          "  --logdir DIR          write metrics.csv and a TensorBoard event file to DIR (tensorboard --logdir DIR)\n"
          "  --log-every N         per-step scalars every N steps (20) and at each epoch's last step\n"
          "  --profile FILE        Chrome trace (open in https://ui.perfetto.dev) of steps after warm-up\n"
          "  --profile-warmup N    steps before the profiled ones (5)\n"
          "  --profile-steps N     steps profiled (5)\n");
}

observe *observe_open(const observe_opts *o, loom_device dev, loom_loader *train, const char *prog) {
  observe *ob = calloc(1, sizeof *ob);
  if (!ob) {
    fprintf(stderr, "%s: out of memory\n", prog);
    return NULL;
  }
  ob->o = *o;
  ob->dev = dev;
  ob->train = train;
  ob->prog = prog;
  if (o->logdir) {
    ob->m = loom_metrics_open(o->logdir, NULL);
    if (!ob->m) {
      fprintf(stderr, "%s: --logdir: %s\n", prog, loom_last_error());
      free(ob);
      return NULL;
    }
  }
  ob->t_last = now_s();
  return ob;
}

static int fail(observe *ob, const char *what) {
  fprintf(stderr, "%s: %s: %s\n", ob->prog, what, loom_last_error());
  return 1;
}

static int stop_profile(observe *ob) {
  if (!ob->profiling) return 0;
  ob->profiling = 0;
  ob->profiled = 1;
  if (loom_profiler_stop() != LOOM_OK) return fail(ob, "--profile");
  return 0;
}

int observe_step_begin(observe *ob, int64_t global_step) {
  if (!ob->o.profile || ob->profiling || ob->profiled || global_step < ob->o.profile_warmup) return 0;
  loom_profiler_options po;
  loom_profiler_options_init(&po);
  po.trace_path = ob->o.profile;
  po.print_summary = true;
  if (loom_profiler_start(&po) != LOOM_OK) return fail(ob, "--profile");
  ob->profiling = 1;
  return 0;
}

bool observe_log_step(const observe *ob, int64_t global_step, bool last_of_epoch) {
  return ob->m && (last_of_epoch || (global_step + 1) % ob->o.log_every == 0);
}

static double peak_mib(observe *ob) {
  loom_memory_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  if (loom_memory_stats_get(ob->dev, &st) != LOOM_OK) return 0;
  return (double)st.allocated_bytes[LOOM_MEM_ALL].peak / (1024.0 * 1024.0);
}

static int put(observe *ob, const char *tag, int64_t step, double v) {
  if (loom_metrics_scalar(ob->m, tag, step, v) != LOOM_OK) return fail(ob, "--logdir");
  return 0;
}

int observe_step_end(observe *ob, const observe_step *s) {
  if (ob->profiling) {
    loom_profiler_step();
    if (s->global_step + 1 >= (int64_t)ob->o.profile_warmup + ob->o.profile_steps && stop_profile(ob)) return 1;
  }
  ob->samples_since += s->samples;
  if (!ob->m || !s->logged) return 0;
  double t = now_s(), dt = t - ob->t_last;
  double wait = 0;
  if (ob->train) {
    loom_loader_stats ls;
    memset(&ls, 0, sizeof ls);
    ls.struct_size = sizeof ls;
    if (loom_loader_stats_get(ob->train, &ls) == LOOM_OK) wait = ls.wait_seconds;
  }
  double dwait = wait - ob->wait_last;
  if (dwait < 0) dwait = wait;  /* the trainer reset the loader's counters (new epoch) */
  int64_t step = s->global_step + 1;  /* steps done: TensorBoard's x axis */
  int err = put(ob, "train/loss", step, s->loss) || put(ob, "train/accuracy", step, s->accuracy) ||
            put(ob, "train/lr", step, s->lr) || put(ob, "train/loss_scale", step, s->loss_scale) ||
            put(ob, "train/samples_per_sec", step, dt > 0 ? (double)ob->samples_since / dt : 0) ||
            put(ob, "train/data_wait_share", step, dt > 0 ? dwait / dt : 0) ||
            put(ob, "train/peak_memory_mib", step, peak_mib(ob));
  ob->t_last = t;
  ob->wait_last = wait;
  ob->samples_since = 0;
  return err;
}

int observe_epoch_end(observe *ob, const observe_epoch *e) {
  /* The loader's counters restart each epoch: so does our window. */
  ob->wait_last = 0;
  ob->t_last = now_s();
  ob->samples_since = 0;
  if (!ob->m) return 0;
  int64_t s = e->global_step;
  int err = put(ob, "epoch/train_loss", s, e->train_loss) || put(ob, "epoch/test_accuracy", s, e->test_accuracy) ||
            put(ob, "epoch/samples_per_sec", s, e->samples_per_sec) ||
            put(ob, "epoch/data_wait_share", s, e->data_wait_share) ||
            put(ob, "epoch/peak_memory_mib", s, peak_mib(ob)) || put(ob, "epoch/lr", s, e->lr) ||
            put(ob, "epoch/loss_scale", s, e->loss_scale);
  if (!err && loom_metrics_flush(ob->m) != LOOM_OK) err = fail(ob, "--logdir");
  return err;
}

int observe_close(observe *ob) {
  if (!ob) return 0;
  int err = stop_profile(ob);
  if (ob->o.profile && !ob->profiled && !err)
    fprintf(stderr, "%s: --profile: training ended before step %d; nothing was profiled\n", ob->prog,
            ob->o.profile_warmup);
  if (ob->m && loom_metrics_close(ob->m) != LOOM_OK) err = fail(ob, "--logdir");
  free(ob);
  return err;
}
