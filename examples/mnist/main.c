/* loom-mnist — trains a multi-layer perceptron on (Fashion-)MNIST IDX files
 * with loom: the prefetching loader, fused Linear→ReLU layers, AdamW or SGD,
 * per-epoch test accuracy, and a last machine-readable `result` line.
 *
 *   loom-mnist [--data DIR] [--epochs N] [--batch B] [--lr X] [--hidden 1024,1024]
 *              [--optimizer adamw|sgd] [--device auto|cpu|cuda[:N]] [--seed S]
 *              [--threads T] [--workers W] [--csv FILE] [--schedule constant|cosine]
 *              [--train-limit N] [--test-limit N] [--memory-stats] [--precision fp32|fp16|bf16]
 *              [--keep-last-fp32] [--quiet] [--save DIR [--save-every N] [--resume]]
 *              [--gpus all|N] [--scale-lr]
 *              [--logdir DIR] [--profile FILE] [--batch auto] [--on-oom fail|shrink] [--offload-optimizer]
 *              [--cuda-graph]
 *
 * --cuda-graph captures the whole training step (forward, backward, unscale,
 * optimizer) after 3 warm-up steps and replays it every step, the loader
 * writing each batch into the graph's static inputs
 * (examples/common/graph_step.h). On the CPU, which has no graphs, the
 * step is checked capture-safe and runs eagerly.
 *
 * --save DIR writes DIR/checkpoint.safetensors (the whole training state,
 * atomically) at the end and every N steps with --save-every; --resume
 * continues from it when it exists (bit-identical to an uninterrupted run on
 * the CPU with the same flags and thread count). Under data parallelism
 * every rank restores the file and rank 0 writes it (examples/common/session.h).
 *
 * Data parallel (lib/dist): under `mpirun -np N loom-mnist ...` each process
 * is one rank (CPU: MPI; GPU: NCCL, one GPU per rank); --gpus all|N drives N
 * local GPUs from one process. --batch is per rank; each rank trains on its
 * shard of every epoch; --scale-lr multiplies the LR by the world size (with
 * at least an epoch of warm-up). Rank 0 prints; the result line reports the
 * world size and the global samples/s.
 *
 * --logdir and --profile (examples/common/observe.h): metrics as CSV and a
 * TensorBoard event file; a Chrome trace of a few steps after warm-up.
 *
 * LOOM_ALLOC_TRACE=path records the allocator trace (epoch markers at each
 * epoch's end) for bench_alloc_replay.
 *
 * --precision fp16 / bf16 trains with mixed precision (lib/amp): f16/bf16
 * GEMMs with f32 accumulation, f32 master weights; fp16 uses the dynamic loss
 * scaler, bf16 (f32's range) runs with it disabled. The summary reports the
 * final loss scale and the number of skipped (overflowed) steps.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <loom/data.h>
#include <loom/loom.h>

#include "../common/cli.h"
#include "../common/datasets.h"
#include "../common/graph_step.h"
#include "../common/observe.h"
#include "../common/session.h"

#define MAX_HIDDEN 16

/* Progress lines: every 100 steps off a terminal. */
static const cli_progress_style PROGRESS = {100, 8, 0};

typedef struct options {
  const char *data;
  int epochs;
  int64_t batch;
  double lr;
  int n_hidden;
  int64_t hidden[MAX_HIDDEN];
  const char *optimizer;
  const char *device;
  uint64_t seed;
  int threads;
  int workers;
  const char *csv;
  const char *schedule;
  int64_t train_limit, test_limit;
  int quiet;
  int memory_stats;
  loom_precision precision;
  int keep_last_fp32;
  const char *save_dir;
  int64_t save_every;
  int resume;
  int gpus;       /* --gpus: 0 none, -1 all, N */
  int scale_lr;   /* --scale-lr */
  int on_oom_shrink;
  int offload_optimizer;
  int cuda_graph;
  observe_opts obs;
} options;

static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t *out) {
  return cli_parse_i64("loom-mnist", flag, s, lo, out);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: loom-mnist [--data DIR] [--epochs N] [--batch B] [--lr X] [--hidden 1024,1024]\n"
          "                  [--optimizer adamw|sgd] [--device auto|cpu|cuda[:N]] [--seed S]\n"
          "                  [--threads T] [--workers W] [--csv FILE] [--schedule constant|cosine]\n"
          "                  [--train-limit N] [--test-limit N] [--memory-stats] [--precision fp32|fp16|bf16]\n"
          "                  [--keep-last-fp32] [--quiet] [--save DIR [--save-every N] [--resume]]\n"
          "                  [--gpus all|N] [--scale-lr] [--batch auto] [--on-oom fail|shrink]\n"
          "                  [--offload-optimizer] [--cuda-graph]\n"
          "Data parallel: run under mpirun -np N (one rank per process), or --gpus for N local GPUs\n"
          "in one process; --batch is per rank, --scale-lr scales the LR by the world size.\n"
          "--cuda-graph: capture the training step once (after 3 warm-up steps) and replay it.\n"
          "Trains an MLP on the IDX files in DIR (default /usr/share/datasets/fashion-mnist).\n"
          "Defaults: 784->1024->1024->10, AdamW lr 1e-3, batch 128, 10 epochs, cosine schedule with\n"
          "half an epoch of linear warm-up, seed 42, 2 loader workers, fp32.\n");
  observe_usage(f);
}

static int parse_args(int argc, char **argv, options *o) {
  *o = (options){.data = "/usr/share/datasets/fashion-mnist", .epochs = 10, .batch = 128, .lr = 1e-3,
                 .n_hidden = 2, .hidden = {1024, 1024}, .optimizer = "adamw", .device = "auto", .seed = 42,
                 .threads = 0, .workers = 2, .csv = NULL, .schedule = "cosine"};
  observe_opts_default(&o->obs);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      exit(0);
    }
    if (!strcmp(a, "--quiet")) { o->quiet = 1; continue; }
    if (!strcmp(a, "--memory-stats")) { o->memory_stats = 1; continue; }
    if (!strcmp(a, "--keep-last-fp32")) { o->keep_last_fp32 = 1; continue; }
    if (!strcmp(a, "--resume")) { o->resume = 1; continue; }
    if (!strcmp(a, "--scale-lr")) { o->scale_lr = 1; continue; }
    if (!strcmp(a, "--offload-optimizer")) { o->offload_optimizer = 1; continue; }  /* AdamW state on the host */
    if (!strcmp(a, "--cuda-graph")) { o->cuda_graph = 1; continue; }
    int ob = observe_parse(&o->obs, argc, argv, &i, "loom-mnist");
    if (ob < 0) return 0;
    if (ob) continue;
    if (i + 1 >= argc) {
      fprintf(stderr, "loom-mnist: %s needs a value\n", a);
      return 0;
    }
    const char *v = argv[++i];
    int64_t n;
    if (!strcmp(a, "--data")) o->data = v;
    else if (!strcmp(a, "--epochs")) { if (!parse_i64(a, v, 1, &n)) return 0; o->epochs = (int)n; }
    else if (!strcmp(a, "--batch") && !strcmp(v, "auto")) o->batch = 0;  /* found by probing (find_batch) */
    else if (!strcmp(a, "--batch")) { if (!parse_i64(a, v, 1, &n)) return 0; o->batch = n; }
    else if (!strcmp(a, "--on-oom")) {
      if (strcmp(v, "shrink") && strcmp(v, "fail")) {
        fprintf(stderr, "loom-mnist: --on-oom is fail or shrink, got '%s'\n", v);
        return 0;
      }
      o->on_oom_shrink = !strcmp(v, "shrink");
    }
    else if (!strcmp(a, "--seed")) { if (!parse_i64(a, v, 0, &n)) return 0; o->seed = (uint64_t)n; }
    else if (!strcmp(a, "--threads")) { if (!parse_i64(a, v, 0, &n)) return 0; o->threads = (int)n; }
    else if (!strcmp(a, "--workers")) { if (!parse_i64(a, v, 0, &n)) return 0; o->workers = (int)n; }
    else if (!strcmp(a, "--train-limit")) { if (!parse_i64(a, v, 1, &n)) return 0; o->train_limit = n; }
    else if (!strcmp(a, "--test-limit")) { if (!parse_i64(a, v, 1, &n)) return 0; o->test_limit = n; }
    else if (!strcmp(a, "--save-every")) { if (!parse_i64(a, v, 1, &n)) return 0; o->save_every = n; }
    else if (!strcmp(a, "--save")) o->save_dir = v;
    else if (!strcmp(a, "--gpus")) {
      if (!strcmp(v, "all")) o->gpus = -1;
      else if (!parse_i64(a, v, 1, &n)) return 0;
      else o->gpus = (int)n;
    }
    else if (!strcmp(a, "--lr")) {
      char *end = NULL;
      o->lr = strtod(v, &end);
      if (end == v || *end || !(o->lr > 0)) {
        fprintf(stderr, "loom-mnist: --lr expects a positive number, got '%s'\n", v);
        return 0;
      }
    } else if (!strcmp(a, "--hidden")) {
      o->n_hidden = 0;
      const char *p = v;
      while (*p) {
        char *end = NULL;
        long long h = strtoll(p, &end, 10);
        if (end == p || h <= 0 || o->n_hidden == MAX_HIDDEN || (*end && *end != ',')) {
          fprintf(stderr, "loom-mnist: --hidden expects positive sizes separated by commas (at most %d), got '%s'\n",
                  MAX_HIDDEN, v);
          return 0;
        }
        o->hidden[o->n_hidden++] = h;
        p = *end ? end + 1 : end;
      }
    } else if (!strcmp(a, "--optimizer")) {
      if (strcmp(v, "adamw") && strcmp(v, "sgd")) {
        fprintf(stderr, "loom-mnist: --optimizer is adamw or sgd, got '%s'\n", v);
        return 0;
      }
      o->optimizer = v;
    } else if (!strcmp(a, "--schedule")) {
      if (strcmp(v, "constant") && strcmp(v, "cosine")) {
        fprintf(stderr, "loom-mnist: --schedule is constant or cosine, got '%s'\n", v);
        return 0;
      }
      o->schedule = v;
    } else if (!strcmp(a, "--precision")) {
      if (strcmp(v, "fp32") && strcmp(v, "fp16") && strcmp(v, "bf16")) {
        fprintf(stderr, "loom-mnist: --precision is fp32, fp16 or bf16, got '%s'\n", v);
        return 0;
      }
      loom_precision_parse(v, &o->precision);
    } else if (!strcmp(a, "--device")) o->device = v;
    else if (!strcmp(a, "--csv")) o->csv = v;
    else {
      fprintf(stderr, "loom-mnist: unknown option '%s'\n", a);
      usage(stderr);
      return 0;
    }
  }
  if ((o->resume || o->save_every) && !o->save_dir) {
    fprintf(stderr, "loom-mnist: --resume and --save-every need --save DIR\n");
    return 0;
  }
  return 1;
}

/* A dataset from DIR/{prefix}-images-idx3-ubyte(.gz) + labels. */
static loom_dataset *open_split(const char *dir, const char *prefix) {
  int found;
  loom_dataset *ds = datasets_idx_split(dir, prefix, &found);
  if (!found)
    fprintf(stderr,
            "loom-mnist: no %s-images-idx3-ubyte[.gz] and %s-labels-idx1-ubyte[.gz] in %s\n"
            "  (install Debian's dataset-fashion-mnist, or pass --data DIR)\n",
            prefix, prefix, dir);
  return ds;
}

static int fail(const char *what) {
  /* loom's messages start with their own subsystem ("loader: ..."): say it once. */
  const char *msg = loom_last_error();
  size_t n = strlen(what);
  if (strncmp(msg, what, n) == 0 && msg[n] == ':') fprintf(stderr, "loom-mnist: %s\n", msg);
  else fprintf(stderr, "loom-mnist: %s: %s\n", what, msg);
  return 1;
}

/* The training step plus the loaders' batch buffers (prefetch + 1 of them
 * each, f32 images and i64 labels, on the device): the training loader's
 * scale with the batch, the test loader's (fixed_rows) do not. */
typedef struct probe_ctx {
  loom_classifier_probe cp;
  int buffers;
  int64_t fixed_rows;
} probe_ctx;

static loom_status probe_step(void *ctx, int64_t b) {
  probe_ctx *p = ctx;
  loom_scope_begin();
  int64_t xs[2] = {b, p->cp.in_features + 2};  /* + 2: an i64 label takes two f32s' room */
  loom_status st = LOOM_OK;
  for (int i = 0; i < p->buffers && st == LOOM_OK; i++)
    if (!loom_empty(2, xs, LOOM_F32, p->cp.device)) st = loom_last_status();
  xs[0] = p->fixed_rows;
  if (st == LOOM_OK && p->fixed_rows && !loom_empty(2, xs, LOOM_F32, p->cp.device)) st = loom_last_status();
  if (st == LOOM_OK) st = loom_batch_probe_classifier(&p->cp, b);
  loom_scope_end();
  return st;
}

/* --batch auto: the largest batch whose training step fits (less 10%),
 * probed on a throwaway model and optimizer of the same shape. */
static int find_batch(options *o, int64_t in_features, int64_t max, int buffers, loom_device dev) {
  loom_module *m = loom_mlp_new(in_features, o->n_hidden, o->hidden, 10, dev);
  if (!m) return fail("--batch auto: model");
  int np = loom_module_num_params(m);
  loom_tensor *params[2 * MAX_HIDDEN + 2];
  for (int i = 0; i < np; i++) params[i] = loom_module_param(m, i);
  loom_adamw_options ao;
  loom_adamw_options_init(&ao);
  loom_optimizer *opt = loom_adamw_new(params, np, &ao);  /* AdamW: the larger optimizer state */
  probe_ctx pc = {{sizeof pc.cp, m, opt, in_features, 10, dev}, buffers, (int64_t)buffers * 1000};
  loom_batch_finder_options bo;
  loom_batch_finder_options_init(&bo);
  bo.device = dev;
  bo.max = max;
  int64_t largest = 0;
  loom_status st = opt ? loom_find_batch_size(probe_step, &pc, &bo, &o->batch, &largest) : loom_last_status();
  loom_optimizer_free(opt);
  loom_module_free(m);
  loom_empty_cache(dev);
  if (st != LOOM_OK) return fail("--batch auto");
  if (!o->quiet) printf("batch auto: %lld (largest that fit: %lld)\n", (long long)o->batch, (long long)largest);
  loom_manual_seed(o->seed);  /* the real model starts as with --batch N */
  return 0;
}

/* --on-oom shrink: one step's loss over micro-batches of the batch. */
typedef struct step_ctx {
  loom_module *model;
  loom_tensor *x, *y, *loss;  /* loss: the batch's mean, for the progress line */
  loom_grad_scaler *scaler;
  int64_t batch;
} step_ctx;

static loom_tensor *micro_loss(void *ctx, int64_t start, int64_t n) {
  step_ctx *c = ctx;
  loom_tensor *l = loom_cross_entropy(loom_module_forward(c->model, loom_slice(c->x, 0, start, start + n, 1)),
                                      loom_slice(c->y, 0, start, start + n, 1));
  loom_tensor *part = loom_mul_scalar(loom_detach(l), (double)n / (double)c->batch);
  c->loss = loom_keep(start == 0 ? part : loom_add(c->loss, part));
  return loom_scaler_scale(c->scaler, l);
}

/* One training step on the batch in x/y (eager, or captured: the same
 * code), its outputs in the innermost scope. */
typedef struct mlp_step {
  loom_module *model;
  loom_tensor *x, *y;
  int64_t in_features;
  loom_optimizer *opt;
  loom_grad_scaler *scaler;
  loom_ddp *ddp;
} mlp_step;

static loom_status mlp_train_step(void *ctx, loom_tensor **loss, loom_tensor **logits) {
  mlp_step *c = ctx;
  int64_t flat[2] = {loom_tensor_dim(c->x, 0), c->in_features};
  *logits = loom_module_forward(c->model, loom_reshape(c->x, 2, flat));
  *loss = loom_cross_entropy(*logits, c->y);
  loom_optimizer_zero_grad(c->opt);
  loom_status st = loom_backward(loom_scaler_scale(c->scaler, *loss));
  if (st == LOOM_OK && c->ddp) st = loom_ddp_sync(c->ddp);
  return st == LOOM_OK ? loom_scaler_step(c->scaler, c->opt, NULL) : st;
}

static int evaluate(loom_module *model, loom_loader *test, int64_t in_features, double *accuracy) {
  int64_t correct = 0, total = 0;
  bool prev = loom_set_grad_enabled(false);
  if (loom_loader_start_epoch(test, 0) != LOOM_OK) return fail("test loader");
  for (;;) {
    loom_scope_begin();
    loom_tensor *x, *y;
    if (loom_loader_next(test, &x, &y) != LOOM_OK) {
      loom_scope_end();
      loom_set_grad_enabled(prev);
      return fail("test loader");
    }
    if (!x) {
      loom_scope_end();
      break;
    }
    int64_t flat[2] = {loom_tensor_dim(x, 0), in_features};
    loom_tensor *logits = loom_module_forward(model, loom_reshape(x, 2, flat));
    int64_t c;
    if (loom_count_correct(logits, y, &c) != LOOM_OK) {
      loom_scope_end();
      loom_set_grad_enabled(prev);
      return fail("evaluation");
    }
    correct += c;
    total += loom_tensor_dim(x, 0);
    loom_scope_end();
  }
  loom_set_grad_enabled(prev);
  *accuracy = total ? (double)correct / (double)total : 0.0;
  return 0;
}

/* One replica's training (lib/dist runs it once per rank of this process). */
static int train(options o, loom_comm *comm) {
  loom_device dev = loom_comm_device(comm);
  int rank = loom_comm_rank(comm), world = loom_comm_size(comm);
  if (rank != 0) o.quiet = 1;  /* rank 0 prints */
  char devname[32];
  loom_device_str(dev, devname, sizeof devname);
  if (!strcmp(o.device, "auto") && dev.kind == LOOM_CPU && !o.quiet)
    printf("device: cpu (CUDA unavailable: %s)\n", loom_cuda_unavailable_reason());
  loom_manual_seed(o.seed);

  loom_dataset *train_ds = open_split(o.data, "train");
  if (!train_ds) return loom_last_status() ? fail("training data") : 1;
  loom_dataset *test_ds = open_split(o.data, "t10k");
  if (!test_ds) return loom_last_status() ? fail("test data") : 1;
  train_ds = datasets_head(train_ds, o.train_limit);
  test_ds = datasets_head(test_ds, o.test_limit);
  if (!train_ds || !test_ds) return fail("limiting the dataset");

  loom_dtype xd;
  int nd;
  int64_t xs[LOOM_MAX_DIMS];
  if (loom_dataset_x_info(train_ds, &xd, &nd, xs) != LOOM_OK) return fail("dataset");
  int64_t in_features = 1;
  for (int d = 0; d < nd; d++) in_features *= xs[d];

  /* Fashion-MNIST pixel statistics after scaling to [0, 1]. */
  static const float mean[1] = {0.2860f}, stdv[1] = {0.3530f};
  loom_loader_options lo;
  loom_loader_options_init(&lo);
  if (o.batch == 0 && find_batch(&o, in_features, loom_dataset_length(train_ds), 4 + 1, dev)) return 1;
  lo.batch_size = o.batch;
  lo.shuffle = true;
  lo.seed = o.seed;
  lo.drop_last = true;
  lo.workers = o.workers;
  lo.prefetch = 4;
  lo.device = dev;
  lo.x_dtype = LOOM_F32;
  lo.y_dtype = LOOM_I64;
  lo.scale = 1.0f / 255.0f;
  lo.mean = mean;
  lo.std = stdv;
  lo.norm_channels = 1;
  lo.rank = rank;  /* each rank its shard of the epoch */
  lo.world_size = world;
  loom_loader *train = loom_loader_new(train_ds, &lo);
  lo.shuffle = false;
  lo.drop_last = false;
  lo.batch_size = 1000;
  lo.rank = 0;  /* every rank evaluates the whole test set (the models are identical) */
  lo.world_size = 1;
  loom_loader *test = loom_loader_new(test_ds, &lo);
  loom_dataset_release(train_ds);
  loom_dataset_release(test_ds);
  if (!train || !test) {
    /* Stop the loader that did start (its workers) before the session shuts loom down. */
    int rc = fail("loader");
    loom_loader_free(train);
    loom_loader_free(test);
    return rc;
  }

  loom_module *model = loom_mlp_new(in_features, o.n_hidden, o.hidden, 10, dev);
  if (!model) return fail("model");
  if (o.precision != LOOM_PRECISION_FP32 && loom_module_set_precision(model, o.precision, o.keep_last_fp32) != LOOM_OK)
    return fail("--precision");
  /* fp16 needs loss scaling; bf16 has f32's exponent range and does not. */
  loom_scaler_options sco;
  loom_scaler_options_init(&sco);
  sco.enabled = o.precision == LOOM_PRECISION_MIXED_FP16;
  loom_grad_scaler *scaler = loom_scaler_new(&sco);
  if (!scaler) return fail("loss scaler");
  /* Data parallel: rank 0's weights everywhere, gradients averaged during backward. */
  /* One rank: no DDP (its buckets would only add copies). */
  loom_ddp *ddp = world > 1 ? loom_ddp_new(model, comm, NULL) : NULL;
  if (world > 1 && (!ddp || loom_ddp_attach_scaler(ddp, scaler) != LOOM_OK)) return fail("data parallel");
  int np = loom_module_num_params(model);
  loom_tensor **params = malloc((size_t)np * sizeof *params);
  if (!params) return 1;
  for (int i = 0; i < np; i++) params[i] = loom_module_param(model, i);
  loom_optimizer *opt;
  if (!strcmp(o.optimizer, "sgd")) {
    loom_sgd_options so;
    loom_sgd_options_init(&so);
    so.lr = o.lr;
    so.momentum = 0.9;
    opt = loom_sgd_new(params, np, &so);
  } else {
    loom_adamw_options ao;
    loom_adamw_options_init(&ao);
    ao.lr = o.lr;
    opt = o.offload_optimizer ? loom_adamw_offload_new(params, np, &ao) : loom_adamw_new(params, np, &ao);
  }
  if (!opt) return fail("optimizer");

  int64_t steps_per_epoch = loom_loader_num_batches(train);
  loom_lr_schedule sched = !strcmp(o.schedule, "cosine")
                               ? loom_lr_cosine(o.lr, steps_per_epoch / 2, steps_per_epoch * o.epochs, 0.0)
                               : loom_lr_constant(o.lr);
  if (o.scale_lr) sched = loom_lr_scale_for_world(sched, world, steps_per_epoch);
  if (o.on_oom_shrink && world > 1) {
    fprintf(stderr, "loom-mnist: --on-oom shrink is not supported with data parallelism yet (world size %d)\n", world);
    return 1;
  }
  if (o.cuda_graph && (world > 1 || o.on_oom_shrink || o.offload_optimizer)) {
    fprintf(stderr, "loom-mnist: --cuda-graph captures one device's whole step; it does not combine with %s\n",
            world > 1 ? "data parallelism" : o.on_oom_shrink ? "--on-oom shrink" : "--offload-optimizer (a host update)");
    return 1;
  }
  /* Checkpoints: one call saves and one restores everything that evolves. */
  loom_train_state ckpt = {.struct_size = sizeof ckpt, .model = model, .optimizer = opt, .scaler = scaler, .loader = train,
                           .schedule = &sched};
  /* Every rank restores the same file; rank 0 writes it (session.h). */
  session_ckpt saver;
  if (session_ckpt_open(&saver, "loom-mnist", o.save_dir, o.save_every, o.resume, rank, o.quiet, &ckpt)) return 1;
  /* The optimizer follows the schedule itself (on a GPU, on the device: a
   * replayed graph steps through it too). */
  if (loom_optimizer_set_schedule(opt, &sched, ckpt.step) != LOOM_OK) return fail("lr schedule");
  /* --cuda-graph: the step reads static input buffers the loader fills. */
  mlp_step ms = {model, NULL, NULL, in_features, opt, scaler, ddp};
  graph_step gs = {.dev = dev, .warmup = 3, .fn = mlp_train_step, .ctx = &ms, .opt = opt};
  if (!o.quiet) {
    printf("model: %s", loom_module_name(model));
    for (int i = 0; i < loom_module_num_children(model); i++) printf(" %s", loom_module_name(loom_module_child(model, i)));
    printf(" (%lld parameters)\ndevice: %s, optimizer: %s lr %g, batch %lld, %lld steps/epoch, %d threads, cpu gemm %s\n",
           (long long)loom_module_num_param_elements(model), devname, o.optimizer, sched.base_lr, (long long)o.batch,
           (long long)steps_per_epoch, loom_get_num_threads(), loom_cpu_gemm_name());
    printf("data parallel: %d rank%s (%s), global batch %lld\n", world, world == 1 ? "" : "s",
           loom_comm_backend_name(loom_comm_get_backend(comm)), (long long)(o.batch * world));
    printf("precision: %s%s%s\n", loom_precision_name(o.precision),
           o.precision != LOOM_PRECISION_FP32 && o.keep_last_fp32 ? ", last layer fp32" : "",
           sco.enabled ? ", dynamic loss scaling" : "");
  }
  FILE *csv = NULL;
  if (o.csv && rank == 0) {
    csv = fopen(o.csv, "w");
    if (!csv) {
      fprintf(stderr, "loom-mnist: cannot write --csv %s: %s\n", o.csv, strerror(errno));
      return 1;
    }
    fprintf(csv, "epoch,train_loss,test_accuracy,samples_per_sec,epoch_seconds,data_wait_share\n");
  }

  observe *obs = observe_open(&o.obs, dev, train, "loom-mnist");
  if (!obs) return 1;
  int tty = isatty(STDOUT_FILENO);
  double train_seconds = 0, accuracy = 0, wait_share = 0;
  int64_t train_samples = 0, global_step = ckpt.step, micro = o.batch;
  for (int epoch = (int)loom_loader_epoch(train) + 1; epoch <= o.epochs; epoch++) {
    loom_loader_stats_reset(train);
    double t0 = cli_now_s(), loss_sum = 0, last_loss = 0;
    int64_t step = 0, epoch_samples = 0;
    for (;;) {
      if (observe_step_begin(obs, global_step)) return 1;
      loom_scope_begin();
      loom_tensor *x, *y;
      if (o.cuda_graph ? graph_step_next_batch(&gs, train, "loom-mnist", &x, &y)
                       : loom_loader_next(train, &x, &y) != LOOM_OK && fail("training loader"))
        return 1;
      if (!x) {
        loom_scope_end();
        break;
      }
      int64_t b = loom_tensor_dim(x, 0);
      double lr = loom_lr_at(&sched, global_step);  /* what the optimizer takes this step */
      /* Reading the loss, accuracy or scale waits for the device: only on logged steps. */
      bool logged = observe_log_step(obs, global_step, step + 1 == steps_per_epoch);
      double scale = logged ? loom_scaler_get_scale(scaler) : 0.0;  /* the scale this step uses */
      loom_tensor *loss = NULL, *logits = NULL;
      if (o.cuda_graph) {
        ms.x = x, ms.y = y;
        if (graph_step_run(&gs, "loom-mnist", &loss, &logits)) return 1;
      } else if (o.on_oom_shrink) {  /* micro-batches, halved on OOM (library: loom_backward_micro_batches) */
        int64_t flat[2] = {b, in_features};
        step_ctx sc = {model, loom_reshape(x, 2, flat), y, NULL, scaler, b};
        if (loom_backward_micro_batches(opt, micro_loss, &sc, b, &micro, true, dev) != LOOM_OK)
          return fail("training step");
        if (loom_scaler_step(scaler, opt, NULL) != LOOM_OK) return fail("optimizer step");
        loss = sc.loss;
      } else {
        ms.x = x, ms.y = y;
        if (mlp_train_step(&ms, &loss, &logits) != LOOM_OK) return fail("training step");
      }
      step++;
      global_step++;
      epoch_samples += b * world;  /* every rank steps on an equal shard */
      if (session_ckpt_step(&saver, &ckpt, global_step, 0, o.quiet)) return 1;
      /* Reading the loss synchronizes with the device: do it sparingly. */
      observe_step os = {.global_step = global_step - 1, .samples = b, .lr = lr, .loss_scale = scale, .logged = logged};
      if (os.logged) {
        int64_t c = 0;  /* micro-batched steps (--on-oom shrink) keep no logits: accuracy NaN */
        if (loom_item(loss, &os.loss) != LOOM_OK || (logits && loom_count_correct(logits, y, &c) != LOOM_OK))
          return fail("reading the step's metrics");
        os.accuracy = logits ? (double)c / (double)b : NAN;
      }
      if (step % 20 == 0 || step == steps_per_epoch) {
        if (loom_item(loss, &last_loss) != LOOM_OK) return fail("reading the loss");
        loss_sum += last_loss;
        cli_progress(PROGRESS, tty, o.quiet, epoch, o.epochs, step, steps_per_epoch, last_loss,
                     (double)epoch_samples / (cli_now_s() - t0));
      }
      if (observe_step_end(obs, &os)) return 1;
      loom_scope_end();
    }
    loom_device_synchronize(dev);
    double dt = cli_now_s() - t0;
    loom_loader_stats st = {.struct_size = sizeof st};
    loom_loader_stats_get(train, &st);
    wait_share = st.wait_fraction;
    train_seconds += dt;
    train_samples += epoch_samples;
    if (evaluate(model, test, in_features, &accuracy)) return 1;
    int64_t reads = steps_per_epoch / 20 + (steps_per_epoch % 20 != 0);
    double mean_loss = reads ? loss_sum / (double)reads : last_loss;
    if (tty && !o.quiet) printf("\n");
    if (!o.quiet)
      printf("epoch %d/%d: train loss %.4f, test accuracy %.2f%%, %.0f samples/s, %.1f s, data wait %.2f%% of step time\n",
             epoch, o.epochs, mean_loss, 100.0 * accuracy, (double)epoch_samples / dt, dt, 100.0 * wait_share);
    fflush(stdout);
    loom_alloc_trace_epoch(epoch);
    if (csv)
      fprintf(csv, "%d,%.6f,%.6f,%.1f,%.3f,%.6f\n", epoch, mean_loss, accuracy, (double)epoch_samples / dt, dt,
              wait_share);
    observe_epoch oe = {global_step, mean_loss, accuracy, (double)epoch_samples / dt, wait_share,
                        loom_lr_at(&sched, global_step - 1), loom_scaler_get_scale(scaler)};
    if (observe_epoch_end(obs, &oe)) return 1;
  }
  if (observe_close(obs)) return 1;
  if (csv) fclose(csv);
  if (o.cuda_graph && !o.quiet) graph_step_report(&gs, "loom-mnist");
  graph_step_close(&gs);
  if (loom_loader_epoch(train) + 1 > o.epochs && train_seconds == 0 && evaluate(model, test, in_features, &accuracy))
    return 1;  /* resumed from a finished run: nothing trained, still report */
  if (session_ckpt_step(&saver, &ckpt, global_step, 1, o.quiet)) return 1;
  if (o.memory_stats) {
    char *summary = loom_memory_summary(dev);
    if (summary) printf("%s", summary);
    else fprintf(stderr, "loom-mnist: memory summary: %s\n", loom_last_error());
    loom_free(summary);
  }
  if (!o.quiet && o.precision != LOOM_PRECISION_FP32)
    printf("mixed precision: loss scale %g, %lld of %lld steps skipped (last overflow at step %lld)\n",
           loom_scaler_get_scale(scaler), (long long)loom_scaler_steps_skipped(scaler), (long long)global_step,
           (long long)loom_scaler_last_overflow_step(scaler));
  if (rank == 0)
    printf("result test_accuracy=%.4f samples_per_sec=%.1f epochs=%d device=%s train_seconds=%.1f data_wait_share=%.4f"
         " precision=%s loss_scale=%g skipped_steps=%lld world_size=%d\n",
         accuracy, train_seconds > 0 ? (double)train_samples / train_seconds : 0.0, o.epochs, devname, train_seconds,
         wait_share, loom_precision_name(o.precision), loom_scaler_get_scale(scaler),
         (long long)loom_scaler_steps_skipped(scaler), world);
  loom_ddp_free(ddp);
  loom_scaler_free(scaler);
  loom_optimizer_free(opt);
  graph_step_free(&gs);
  free(params);
  loom_module_free(model);
  loom_loader_free(train);
  loom_loader_free(test);
  return 0;
}

static loom_status train_replica(loom_comm *comm, void *user) {
  return train(*(const options *)user, comm) ? LOOM_ERR_STATE : LOOM_OK;
}

int main(int argc, char **argv) {
  session_passive_openmp(argv);
  options o;
  if (!parse_args(argc, argv, &o)) return 2;
  if (o.threads > 0) loom_set_num_threads(o.threads);
  loom_device dev;
  if (loom_device_parse(o.device, &dev) != LOOM_OK) return fail("--device");
  return session_run("loom-mnist", o.device, dev, o.gpus, train_replica, &o);
}
