/* bench_soak.c — the long run of issue 24 part 3: trains for many steps with
 * everything a real run does around the step (the prefetching loader and its
 * worker threads across epochs, evaluation, a checkpoint every N steps, the
 * profiler switched on and off, a Chrome trace written at each stop) and
 * records, every --sample-every steps, what would show a leak: the process's
 * RSS, the caching allocator's reserved and allocated bytes, open file
 * descriptors and threads. bench/soak/check_soak.py says whether each series
 * stays flat after warm-up; plot_soak.py draws them.
 *
 * --model mlp: Fashion-MNIST (IDX files from --data), an MLP 784->256->256->10
 *   (--hidden 256,256; loom-mnist's default is 1024,1024) with AdamW and a
 *   cosine schedule, batch 64 (--batch), the test set of 10,000 evaluated in
 *   batches of 1,000. Narrower than the trainer's default so that 20,000
 *   steps fit an hour on a shared 2-core machine: a leak is per step, per
 *   evaluation, per checkpoint or per epoch, not per FLOP.
 * --model resnet20: ResNet-20 (CIFAR-style, channels-last) on a synthetic
 *   CIFAR-shaped u8 data set held in memory (5,000 training and 1,000 test
 *   images whose mean brightness per channel depends on the label, so the
 *   loss falls), random crop (pad 4) + flip, SGD Nesterov 0.9 with weight
 *   decay off BN/bias, cosine schedule, batch 32 (--batch).
 *
 * Usage: bench_soak --model mlp|resnet20 --csv FILE --dir DIR [--steps N] [--batch B]
 *                   [--data DIR] [--hidden 256,256] [--sample-every 100] [--eval-every 500]
 *                   [--ckpt-every 500] [--profile-every 200] [--profile-steps 50] [--threads 2] [--workers 2]
 * The profiler runs for --profile-steps steps out of every --profile-every
 * (starting half-way through each period) and writes DIR/trace.json at each
 * stop; checkpoints go to DIR/checkpoint.safetensors (replaced atomically).
 * --profile-every must be a multiple of --sample-every so that no sample is
 * taken while the profiler records (its trace file is open then: one more
 * descriptor, which is not a leak); each sample still sees the recording
 * the profiler keeps after a stop.
 * CSV columns: model, step (steps done), seconds, rss_bytes, reserved_bytes,
 * allocated_bytes, open_fds, threads, profiler (1: recording at the sample),
 * loss (of the step just done), test_accuracy (of the last evaluation).
 * Last line on stdout: bench=soak model=... steps=... seconds=... ... */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "loom/loom.h"

typedef struct opts {
  const char *model, *csv, *dir, *data;
  int64_t steps, batch, sample_every, eval_every, ckpt_every, profile_every, profile_steps;
  int threads, workers;
  int n_hidden;
  int64_t hidden[8];
} opts;

typedef struct sample {
  int64_t rss, reserved, allocated, fds, threads;
} sample;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
  fprintf(stderr, "bench_soak: %s: %s\n", what, loom_last_error());
  return 1;
}

/* ---- what is measured -------------------------------------------------------------- */

static int64_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long long size = 0, resident = -1;
  if (f) {
    if (fscanf(f, "%lld %lld", &size, &resident) != 2) resident = -1;
    fclose(f);
  }
  return resident < 0 ? -1 : resident * (int64_t)sysconf(_SC_PAGESIZE);
}

static int64_t thread_count(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long long n = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "Threads: %lld", &n) == 1) break;
  if (f) fclose(f);
  return n;
}

/* Open descriptors, not counting the one opendir itself holds. */
static int64_t fd_count(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int64_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1;
}

static int take_sample(loom_device dev, sample *s) {
  loom_memory_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  if (loom_memory_stats_get(dev, &st) != LOOM_OK) return fail("memory stats");
  s->reserved = st.reserved_bytes[LOOM_MEM_ALL].current;
  s->allocated = st.allocated_bytes[LOOM_MEM_ALL].current;
  s->rss = rss_bytes();
  s->fds = fd_count();
  s->threads = thread_count();
  return 0;
}

/* ---- data and models --------------------------------------------------------------- */

static loom_dataset *idx_split(const char *dir, const char *prefix) {
  char img[4096], lab[4096];
  const char *ext[2] = {".gz", ""};
  for (int e = 0; e < 2; e++) {
    snprintf(img, sizeof img, "%s/%s-images-idx3-ubyte%s", dir, prefix, ext[e]);
    snprintf(lab, sizeof lab, "%s/%s-labels-idx1-ubyte%s", dir, prefix, ext[e]);
    if (access(img, R_OK) == 0 && access(lab, R_OK) == 0) return loom_dataset_idx_open(img, lab);
  }
  fprintf(stderr, "bench_soak: no %s IDX files in %s (install dataset-fashion-mnist or pass --data)\n", prefix, dir);
  return NULL;
}

/* n CIFAR-shaped u8 images: noise around a per-class colour. */
static loom_dataset *synthetic_cifar(int64_t n, uint64_t seed) {
  int64_t shape[3] = {3, 32, 32}, per = 3 * 32 * 32;
  unsigned char *x = malloc((size_t)(n * per)), *y = malloc((size_t)n);
  loom_dataset *ds = NULL;
  if (x && y) {
    uint64_t r = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (int64_t i = 0; i < n; i++) {
      y[i] = (unsigned char)(i % 10);
      for (int64_t c = 0; c < 3; c++) {
        int base = 40 + 18 * ((y[i] + 3 * (int)c) % 10);
        for (int64_t p = 0; p < 32 * 32; p++) {
          r = r * 6364136223846793005ull + 1442695040888963407ull;
          int v = base + (int)((r >> 33) % 61) - 30;
          x[i * per + c * 32 * 32 + p] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
      }
    }
    ds = loom_dataset_memory(x, LOOM_U8, 3, shape, y, LOOM_U8, n, true);
  }
  free(x);
  free(y);
  if (!x || !y) fprintf(stderr, "bench_soak: out of memory for the synthetic data\n");
  return ds;
}

typedef struct run {
  loom_device dev;
  bool resnet;
  loom_loader *train, *test;
  loom_module *model;
  loom_optimizer *opt;
  loom_lr_schedule sched;
} run;

static int make_loaders(const opts *o, run *r) {
  loom_dataset *tr, *te;
  static const float mnist_mean[1] = {0.2860f}, mnist_std[1] = {0.3530f};
  static const float cifar_mean[1] = {0.5f}, cifar_std[1] = {0.25f};
  if (r->resnet) {
    tr = synthetic_cifar(5000, 1);
    te = synthetic_cifar(1000, 2);
  } else {
    tr = idx_split(o->data, "train");
    te = idx_split(o->data, "t10k");
  }
  if (!tr || !te) {
    loom_dataset_release(tr);
    loom_dataset_release(te);
    return loom_last_status() ? fail("data") : 1;
  }
  loom_loader_options lo;
  loom_loader_options_init(&lo);
  lo.batch_size = o->batch;
  lo.shuffle = true;
  lo.seed = 7;
  lo.drop_last = true;
  lo.workers = o->workers;
  lo.prefetch = 4;
  lo.device = r->dev;
  lo.scale = 1.0f / 255.0f;
  lo.mean = r->resnet ? cifar_mean : mnist_mean;
  lo.std = r->resnet ? cifar_std : mnist_std;
  lo.norm_channels = 1;
  if (r->resnet) {
    lo.crop_padding = 4;
    lo.hflip = true;
    lo.channels_last = true;
  }
  r->train = loom_loader_new(tr, &lo);
  lo.shuffle = false;
  lo.drop_last = false;
  lo.crop_padding = 0;
  lo.hflip = false;
  lo.batch_size = r->resnet ? 250 : 1000;
  r->test = loom_loader_new(te, &lo);
  loom_dataset_release(tr);
  loom_dataset_release(te);
  return r->train && r->test ? 0 : fail("loader");
}

static int make_model(const opts *o, run *r) {
  int64_t total = o->steps;
  if (r->resnet) {
    loom_resnet_options ro;
    loom_resnet_options_init(&ro, LOOM_RESNET20);
    ro.memory_format = LOOM_FORMAT_NHWC;
    r->model = loom_resnet_new(LOOM_RESNET20, &ro, r->dev);
    if (!r->model) return fail("model");
    loom_sgd_options so;
    loom_sgd_options_init(&so);
    so.lr = 0.05, so.momentum = 0.9, so.nesterov = true, so.weight_decay = 5e-4;
    r->opt = loom_sgd_new_for_module(r->model, &so);
    r->sched = loom_lr_cosine(so.lr, total / 20, total, 0.0);
  } else {
    r->model = loom_mlp_new(784, o->n_hidden, o->hidden, 10, r->dev);
    if (!r->model) return fail("model");
    int np = loom_module_num_params(r->model);
    loom_tensor **p = malloc((size_t)np * sizeof *p);
    if (!p) return 1;
    for (int i = 0; i < np; i++) p[i] = loom_module_param(r->model, i);
    loom_adamw_options ao;
    loom_adamw_options_init(&ao);
    ao.lr = 1e-3;
    r->opt = loom_adamw_new(p, np, &ao);
    free(p);
    r->sched = loom_lr_cosine(ao.lr, total / 20, total, 0.0);
  }
  if (!r->opt) return fail("optimizer");
  if (loom_optimizer_set_schedule(r->opt, &r->sched, 0) != LOOM_OK) return fail("schedule");
  return 0;
}

static loom_tensor *as_input(const run *r, loom_tensor *x) {
  if (r->resnet) return x;
  int64_t flat[2] = {loom_tensor_dim(x, 0), 784};
  return loom_reshape(x, 2, flat);
}

/* ---- the loop ---------------------------------------------------------------------- */

static int evaluate(run *r, double *accuracy) {
  int64_t correct = 0, total = 0;
  bool prev = loom_set_grad_enabled(false);
  loom_module_train(r->model, false);
  int rc = loom_loader_start_epoch(r->test, 0) != LOOM_OK ? fail("test loader") : 0;
  while (!rc) {
    loom_scope_begin();
    loom_tensor *x, *y;
    if (loom_loader_next(r->test, &x, &y) != LOOM_OK) rc = fail("test loader");
    if (rc || !x) {
      loom_scope_end();
      break;
    }
    int64_t c;
    if (loom_count_correct(loom_module_forward(r->model, as_input(r, x)), y, &c) != LOOM_OK) rc = fail("evaluation");
    correct += c;
    total += loom_tensor_dim(x, 0);
    loom_scope_end();
  }
  loom_module_train(r->model, true);
  loom_set_grad_enabled(prev);
  *accuracy = total ? (double)correct / (double)total : 0.0;
  return rc;
}

/* One training step on the next batch (a new epoch starts when one ends);
 * *loss read when asked. */
static int train_step(run *r, double *loss) {
  loom_scope_begin();
  loom_tensor *x, *y;
  int rc = 0;
  if (loom_loader_next(r->train, &x, &y) != LOOM_OK) rc = fail("training loader");
  if (!rc && !x && loom_loader_next(r->train, &x, &y) != LOOM_OK) rc = fail("training loader");  /* next epoch */
  if (!rc && !x) rc = fail("training loader: empty epoch");
  if (!rc) {
    loom_tensor *l = loom_cross_entropy(loom_module_forward(r->model, as_input(r, x)), y);
    if (loom_optimizer_zero_grad(r->opt) != LOOM_OK || loom_backward(l) != LOOM_OK ||
        loom_optimizer_step(r->opt) != LOOM_OK)
      rc = fail("training step");
    else if (loss && loom_item(l, loss) != LOOM_OK)
      rc = fail("reading the loss");
  }
  loom_scope_end();
  return rc;
}

static int soak(const opts *o, run *r) {
  char ckpt_path[4096], trace_path[4096];
  snprintf(ckpt_path, sizeof ckpt_path, "%s/checkpoint.safetensors", o->dir);
  snprintf(trace_path, sizeof trace_path, "%s/trace.json", o->dir);
  FILE *csv = fopen(o->csv, "w");
  if (!csv) {
    perror(o->csv);
    return 1;
  }
  fprintf(csv, "model,step,seconds,rss_bytes,reserved_bytes,allocated_bytes,open_fds,threads,profiler,loss,test_accuracy\n");
  loom_train_state ts = {.struct_size = sizeof ts, .model = r->model, .optimizer = r->opt, .loader = r->train,
                         .schedule = &r->sched};
  double t0 = now_s(), acc = -1, loss = 0;
  int64_t evals = 0, ckpts = 0, profiles = 0;
  int rc = 0;
  for (int64_t s = 0; s < o->steps && !rc; s++) {
    int64_t phase = o->profile_every ? s % o->profile_every : -1;
    if (phase == o->profile_every / 2) {
      loom_profiler_options po;
      loom_profiler_options_init(&po);
      po.trace_path = trace_path;
      if (loom_profiler_start(&po) != LOOM_OK) rc = fail("profiler start");
      profiles++;
    }
    bool sample_now = (s + 1) % o->sample_every == 0 || s == 0;
    if (!rc) rc = train_step(r, sample_now ? &loss : NULL);
    if (!rc && loom_profiler_is_running()) {
      loom_profiler_step();
      if (phase + 1 == o->profile_every / 2 + o->profile_steps && loom_profiler_stop() != LOOM_OK)
        rc = fail("profiler stop");
    }
    if (!rc && (s + 1) % o->eval_every == 0) {
      rc = evaluate(r, &acc);
      evals++;
    }
    if (!rc && (s + 1) % o->ckpt_every == 0) {
      ts.step = s + 1;
      if (loom_checkpoint_save(ckpt_path, &ts) != LOOM_OK) rc = fail("checkpoint");
      ckpts++;
    }
    if (!rc && sample_now) {
      sample m;
      rc = take_sample(r->dev, &m);
      if (!rc) {
        fprintf(csv, "%s,%lld,%.1f,%lld,%lld,%lld,%lld,%lld,%d,%.5f,%.4f\n", o->model, (long long)(s + 1),
                now_s() - t0, (long long)m.rss, (long long)m.reserved, (long long)m.allocated, (long long)m.fds,
                (long long)m.threads, loom_profiler_is_running() ? 1 : 0, loss, acc);
        fflush(csv);
      }
    }
  }
  if (loom_profiler_is_running() && loom_profiler_stop() != LOOM_OK && !rc) rc = fail("profiler stop");
  if (fclose(csv) != 0 && !rc) {
    perror(o->csv);
    rc = 1;
  }
  if (!rc)
    printf("bench=soak model=%s steps=%lld batch=%lld seconds=%.1f evaluations=%lld checkpoints=%lld "
           "profiles=%lld test_accuracy=%.4f loss=%.5f threads=%d workers=%d\n",
           o->model, (long long)o->steps, (long long)o->batch, now_s() - t0, (long long)evals, (long long)ckpts,
           (long long)profiles, acc, loss, loom_get_num_threads(), o->workers);
  return rc;
}

static int parse_i64(const char *flag, const char *v, int64_t lo, int64_t *out) {
  char *end;
  long long n = strtoll(v, &end, 10);
  if (end == v || *end || n < lo) {
    fprintf(stderr, "bench_soak: %s expects an integer >= %lld, got '%s'\n", flag, (long long)lo, v);
    return 0;
  }
  *out = n;
  return 1;
}

static int parse(int argc, char **argv, opts *o) {
  *o = (opts){.model = "mlp", .data = "/usr/share/datasets/fashion-mnist", .steps = 0, .batch = 0,
              .sample_every = 100, .eval_every = 500, .ckpt_every = 500, .profile_every = 200,
              .profile_steps = 50, .threads = 2, .workers = 2,
              .n_hidden = 2, .hidden = {256, 256}};
  for (int i = 1; i < argc; i += 2) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int64_t n = 0;
    if (!v) {
      fprintf(stderr, "bench_soak: %s needs a value\n", a);
      return 0;
    }
    if (!strcmp(a, "--model")) o->model = v;
    else if (!strcmp(a, "--csv")) o->csv = v;
    else if (!strcmp(a, "--dir")) o->dir = v;
    else if (!strcmp(a, "--data")) o->data = v;
    else if (!strcmp(a, "--hidden")) {
      o->n_hidden = 0;
      for (const char *p = v; *p;) {
        char *end;
        long long h = strtoll(p, &end, 10);
        if (end == p || h <= 0 || o->n_hidden == 8 || (*end && *end != ',')) {
          fprintf(stderr, "bench_soak: --hidden expects up to 8 positive sizes separated by commas, got '%s'\n", v);
          return 0;
        }
        o->hidden[o->n_hidden++] = h;
        p = *end ? end + 1 : end;
      }
    }
    else if (!strcmp(a, "--steps")) { if (!parse_i64(a, v, 1, &o->steps)) return 0; }
    else if (!strcmp(a, "--batch")) { if (!parse_i64(a, v, 1, &o->batch)) return 0; }
    else if (!strcmp(a, "--sample-every")) { if (!parse_i64(a, v, 1, &o->sample_every)) return 0; }
    else if (!strcmp(a, "--eval-every")) { if (!parse_i64(a, v, 1, &o->eval_every)) return 0; }
    else if (!strcmp(a, "--ckpt-every")) { if (!parse_i64(a, v, 1, &o->ckpt_every)) return 0; }
    else if (!strcmp(a, "--profile-every")) { if (!parse_i64(a, v, 0, &o->profile_every)) return 0; }
    else if (!strcmp(a, "--profile-steps")) { if (!parse_i64(a, v, 1, &o->profile_steps)) return 0; }
    else if (!strcmp(a, "--threads")) { if (!parse_i64(a, v, 1, &n)) return 0; o->threads = (int)n; }
    else if (!strcmp(a, "--workers")) { if (!parse_i64(a, v, 0, &n)) return 0; o->workers = (int)n; }
    else {
      fprintf(stderr, "bench_soak: unknown option %s\n", a);
      return 0;
    }
  }
  if (strcmp(o->model, "mlp") && strcmp(o->model, "resnet20")) {
    fprintf(stderr, "bench_soak: --model is mlp or resnet20, got '%s'\n", o->model);
    return 0;
  }
  if (!o->csv || !o->dir) {
    fprintf(stderr, "usage: bench_soak --model mlp|resnet20 --csv FILE --dir DIR [--steps N] [--batch B] ...\n");
    return 0;
  }
  if (o->profile_every && (o->profile_steps > o->profile_every / 2 || o->profile_every % o->sample_every)) {
    fprintf(stderr, "bench_soak: --profile-every must be a multiple of --sample-every and at least twice "
                    "--profile-steps\n");
    return 0;
  }
  bool resnet = !strcmp(o->model, "resnet20");
  if (!o->steps) o->steps = resnet ? 2000 : 20000;
  if (!o->batch) o->batch = resnet ? 32 : 64;
  return 1;
}

int main(int argc, char **argv) {
  opts o;
  if (!parse(argc, argv, &o)) return 2;
  if (mkdir(o.dir, 0777) != 0 && access(o.dir, W_OK) != 0) {
    perror(o.dir);
    return 1;
  }
  loom_set_num_threads(o.threads);
  loom_manual_seed(1);
  run r = {.dev = loom_cpu(), .resnet = !strcmp(o.model, "resnet20")};
  int rc = make_loaders(&o, &r);
  if (!rc) rc = make_model(&o, &r);
  if (!rc) rc = soak(&o, &r);
  loom_optimizer_free(r.opt);
  loom_module_free(r.model);
  loom_loader_free(r.train);
  loom_loader_free(r.test);
  if (loom_shutdown() != LOOM_OK && !rc) rc = fail("shutdown");
  return rc;
}
