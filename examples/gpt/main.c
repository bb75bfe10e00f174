/* loom-gpt — character-level language modelling with loom's GPT-2
 * (include/loom/gpt.h), in the manner of nanoGPT's shakespeare_char.
 *
 *   loom-gpt --data FILE [--layers 6 --heads 6 --embd 384 --block 256]
 *            [--steps 5000 --batch 64 --lr 1e-3 --min-lr LR/10 --warmup STEPS/50]
 *            [--dropout 0.2 --weight-decay 0.1 --grad-clip 1 --seed 1337]
 *            [--eval-every 250 --eval-batches 20 --quiet]
 *
 * The text is read as bytes; the vocabulary is the set of bytes it uses (for
 * ASCII text such as Shakespeare that is nanoGPT's character set; a UTF-8
 * character outside ASCII counts as its bytes). The first 90% is for
 * training, the last 10% for validation. Batches are random windows of
 * block+1 bytes (inputs and next-byte targets) from a seeded generator.
 * AdamW (betas 0.9, 0.99) with weight decay on 2-D weights only
 * (loom_gpt_split_decay), linear warm-up then cosine to min-lr
 * (loom_lr_cosine), gradients clipped to a global norm. The last line:
 *   result val_loss=X tokens_per_sec=Y
 * val_loss over --eval-batches validation batches in eval mode (no dropout),
 * tokens_per_sec = training tokens / training time (evaluations excluded).
 *
 * Not yet (issue 28 part 3): the default Shakespeare corpus, --csv,
 * --logdir, --profile, --save/--resume, --precision, data parallelism,
 * --sample. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loom/loom.h"
#include "../common/cli.h"

static const char *PROG = "loom-gpt";

typedef struct opts {
  const char *data;
  int64_t layers, heads, embd, block, steps, batch, warmup, eval_every, eval_batches, seed;
  double lr, min_lr, dropout, weight_decay, grad_clip;
  int quiet;
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
  fprintf(f, "usage: %s --data FILE [--layers N] [--heads N] [--embd N] [--block N] [--steps N] [--batch N]\n"
             "       [--lr X] [--min-lr X] [--warmup N] [--dropout P] [--weight-decay X] [--grad-clip X]\n"
             "       [--seed N] [--eval-every N] [--eval-batches N] [--quiet]\n", PROG);
}

static int parse(int argc, char **argv, opts *o) {
  *o = (opts){.layers = 6, .heads = 6, .embd = 384, .block = 256, .steps = 5000, .batch = 64, .warmup = -1,
              .eval_every = 250, .eval_batches = 20, .seed = 1337, .lr = 1e-3, .min_lr = -1, .dropout = 0.2,
              .weight_decay = 0.1, .grad_clip = 1.0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--quiet")) { o->quiet = 1; continue; }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); exit(0); }
    if (!v) { fprintf(stderr, "%s: %s needs a value\n", PROG, a); return 0; }
    i++;
    int ok = 1;
    if (!strcmp(a, "--data")) o->data = v;
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
    else if (!strcmp(a, "--lr")) ok = parse_f64(a, v, 0, &o->lr);
    else if (!strcmp(a, "--min-lr")) ok = parse_f64(a, v, 0, &o->min_lr);
    else if (!strcmp(a, "--dropout")) ok = parse_f64(a, v, 0, &o->dropout);
    else if (!strcmp(a, "--weight-decay")) ok = parse_f64(a, v, 0, &o->weight_decay);
    else if (!strcmp(a, "--grad-clip")) ok = parse_f64(a, v, 0, &o->grad_clip);
    else { fprintf(stderr, "%s: unknown flag %s\n", PROG, a); usage(stderr); return 0; }
    if (!ok) return 0;
  }
  if (!o->data) {
    fprintf(stderr, "%s: --data FILE is required (a text file; the Shakespeare default is not packaged yet)\n", PROG);
    return 0;
  }
  if (o->embd % o->heads) {
    fprintf(stderr, "%s: --heads %lld must divide --embd %lld\n", PROG, (long long)o->heads, (long long)o->embd);
    return 0;
  }
  if (o->dropout >= 1) {
    fprintf(stderr, "%s: --dropout must be below 1, got %g\n", PROG, o->dropout);
    return 0;
  }
  if (o->min_lr < 0) o->min_lr = o->lr / 10;
  if (o->warmup < 0) o->warmup = o->steps / 50;
  return 1;
}

/* ---- data ------------------------------------------------------------------ */

typedef struct corpus {
  uint8_t *ids;      /* the text as vocabulary indices */
  int64_t n, n_train;
  int vocab;
  uint8_t chars[256];  /* index -> byte */
} corpus;

static int load_corpus(const char *path, int64_t block, corpus *c) {
  FILE *f = fopen(path, "rb");
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
  if (c->n_train < block + 1 || c->n - c->n_train < block + 1) {
    fprintf(stderr, "%s: %s has %lld bytes: both the 90%% training and the 10%% validation part need more than "
                    "--block %lld\n", PROG, path, (long long)n, (long long)block);
    free(buf);
    return 0;
  }
  return 1;
}

/* xorshift64*: batch offsets from --seed, independent of loom's generator. */
static uint64_t rng_next(uint64_t *s) {
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}

/* B random windows of the split [lo, hi): inputs and next-byte targets [B, T] (u8). */
static void batch(const corpus *c, int64_t lo, int64_t hi, int64_t B, int64_t T, uint64_t *rng, loom_tensor **x,
                  loom_tensor **y) {
  uint8_t *xb = malloc((size_t)(B * T)), *yb = malloc((size_t)(B * T));
  for (int64_t b = 0; xb && yb && b < B; b++) {
    int64_t at = lo + (int64_t)(rng_next(rng) % (uint64_t)(hi - lo - T));
    memcpy(xb + b * T, c->ids + at, (size_t)T);
    memcpy(yb + b * T, c->ids + at + 1, (size_t)T);
  }
  int64_t sh[2] = {B, T};
  *x = xb ? loom_from_host(xb, 2, sh, LOOM_U8, loom_cpu()) : NULL;
  *y = yb ? loom_from_host(yb, 2, sh, LOOM_U8, loom_cpu()) : NULL;
  free(xb), free(yb);
}

/* Mean loss over n batches of the split, eval mode, no grad; NAN on failure. */
static double evaluate(loom_module *m, const corpus *c, int64_t lo, int64_t hi, const opts *o, uint64_t seed) {
  loom_module_train(m, false);
  bool prev = loom_set_grad_enabled(false);
  uint64_t rng = seed;
  double sum = 0;
  for (int64_t i = 0; i < o->eval_batches && !isnan(sum); i++) {
    loom_scope_begin();
    loom_tensor *x, *y;
    batch(c, lo, hi, o->batch, o->block, &rng, &x, &y);
    double v;
    if (loom_item(loom_gpt_forward(m, x, y), &v) != LOOM_OK) sum = NAN;
    else sum += v;
    loom_scope_end();
  }
  loom_set_grad_enabled(prev);
  loom_module_train(m, true);
  return sum / (double)o->eval_batches;
}

int main(int argc, char **argv) {
  opts o;
  if (!parse(argc, argv, &o)) return 2;
  corpus c;
  if (!load_corpus(o.data, o.block, &c)) return 1;
  loom_manual_seed((uint64_t)o.seed);
  loom_gpt_config cfg;
  loom_gpt_config_init(&cfg);
  cfg.vocab_size = c.vocab, cfg.block_size = o.block, cfg.n_layer = o.layers, cfg.n_head = o.heads;
  cfg.n_embd = o.embd, cfg.dropout = o.dropout;
  loom_module *m = loom_gpt_new(&cfg, loom_cpu());
  if (!m) return fail("model");
  int np = loom_module_num_params(m), nd, nn;
  loom_tensor **dec = calloc((size_t)np, sizeof *dec), **nodec = calloc((size_t)np, sizeof *nodec),
              **all = calloc((size_t)np, sizeof *all);
  if (!dec || !nodec || !all || loom_gpt_split_decay(m, dec, &nd, nodec, &nn) != LOOM_OK) return fail("parameters");
  for (int i = 0; i < np; i++) all[i] = loom_module_param(m, i);
  loom_adamw_options ao;
  loom_adamw_options_init(&ao);
  ao.lr = o.lr, ao.beta2 = 0.99, ao.weight_decay = o.weight_decay;
  loom_optimizer *opt = loom_adamw_new(dec, nd, &ao);
  loom_param_group_options go;
  loom_param_group_options_init(&go);
  go.weight_decay = 0.0;
  if (!opt || loom_optimizer_add_param_group(opt, nodec, nn, &go) != LOOM_OK) return fail("optimizer");
  loom_lr_schedule sched = loom_lr_cosine(o.lr, o.warmup, o.steps, o.min_lr);
  if (loom_optimizer_set_schedule(opt, &sched, 0) != LOOM_OK) return fail("schedule");
  if (!o.quiet)
    printf("%s: %lld bytes, vocabulary %d, %lld train / %lld val; %s, %lld parameters\n", PROG, (long long)c.n,
           c.vocab, (long long)c.n_train, (long long)(c.n - c.n_train), loom_module_name(m),
           (long long)loom_module_num_param_elements(m));

  uint64_t rng = (uint64_t)o.seed * 0x9E3779B97F4A7C15ULL + 1;
  double train_s = 0, loss_v = NAN;
  int tty = isatty(1);
  for (int64_t step = 0; step < o.steps; step++) {
    double t0 = cli_now_s();
    loom_scope_begin();
    loom_tensor *x, *y;
    batch(&c, 0, c.n_train, o.batch, o.block, &rng, &x, &y);
    loom_tensor *loss = loom_gpt_forward(m, x, y);
    if (!loss || loom_optimizer_zero_grad(opt) != LOOM_OK || loom_backward(loss) != LOOM_OK ||
        (o.grad_clip > 0 && loom_clip_grad_norm(all, np, o.grad_clip, NULL) != LOOM_OK) ||
        loom_optimizer_step(opt) != LOOM_OK || loom_item(loss, &loss_v) != LOOM_OK)
      return fail("training step");
    loom_scope_end();
    train_s += cli_now_s() - t0;
    /* The shared progress line counts samples: sequences of --block tokens. */
    cli_progress((cli_progress_style){50, 8, 1}, tty, o.quiet, 1, 1, step + 1, o.steps, loss_v,
                 (double)((step + 1) * o.batch) / train_s);
    if (o.eval_every > 0 && (step + 1) % o.eval_every == 0 && step + 1 < o.steps && !o.quiet) {
      double vl = evaluate(m, &c, c.n_train, c.n, &o, 7);
      if (isnan(vl)) return fail("evaluation");
      printf("%sstep %lld: train loss %.4f, val loss %.4f, lr %.3g\n", tty ? "\n" : "", (long long)(step + 1), loss_v, vl,
             loom_optimizer_get_lr(opt));
    }
  }
  double val = evaluate(m, &c, c.n_train, c.n, &o, 7);
  if (isnan(val)) return fail("evaluation");
  if (tty && !o.quiet) printf("\n");
  printf("result val_loss=%.4f tokens_per_sec=%.0f\n", val, (double)(o.steps * o.batch * o.block) / train_s);
  loom_optimizer_free(opt);
  loom_module_free(m);
  free(dec), free(nodec), free(all), free(c.ids);
  return loom_shutdown() == LOOM_OK ? 0 : fail("shutdown");
}
