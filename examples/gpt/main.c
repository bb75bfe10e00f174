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
 * --save FILE writes a training checkpoint (loom_checkpoint_save: model,
 * AdamW state, loom's RNG, the step) at the end and every --save-every
 * steps; --max-steps stops early (the schedule still spans --steps);
 * --resume continues from --save FILE when it exists (batches are drawn per
 * step from (seed, step), so a resumed run equals the straight one).
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
 * Not yet (issue 28 part 3): the default Shakespeare corpus, data parallelism, CUDA (the attention, embedding
 * and LayerNorm ops are CPU-only so far). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loom/loom.h"
#include "../common/cli.h"
#include "../common/observe.h"

static const char *PROG = "loom-gpt";

typedef struct opts {
  const char *data, *save, *csv, *prompt;
  int64_t layers, heads, embd, block, steps, batch, warmup, eval_every, eval_batches, seed, save_every, max_steps;
  int64_t sample, top_k, threads;
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
  fprintf(f, "usage: %s --data FILE [--layers N] [--heads N] [--embd N] [--block N] [--steps N] [--batch N]\n"
             "       [--lr X] [--min-lr X] [--warmup N] [--dropout P] [--weight-decay X] [--grad-clip X]\n"
             "       [--precision fp32|fp16|bf16] [--seed N] [--threads N] [--eval-every N] [--eval-batches N] [--csv FILE] [--quiet]\n"
             "       [--save FILE [--save-every N] [--max-steps N]] [--resume]\n"
             "       [--sample N [--temperature T] [--top-k K] [--prompt TEXT]]\n", PROG);
  observe_usage(f);
}

static int parse(int argc, char **argv, opts *o) {
  *o = (opts){.layers = 6, .heads = 6, .embd = 384, .block = 256, .steps = 5000, .batch = 64, .warmup = -1,
              .eval_every = 250, .eval_batches = 20, .seed = 1337, .lr = 1e-3, .min_lr = -1, .dropout = 0.2,
              .weight_decay = 0.1, .grad_clip = 1.0, .max_steps = -1, .temperature = 1.0, .prompt = "\n"};
  observe_opts_default(&o->obs);
  for (int i = 1; i < argc; i++) {
    int ob = observe_parse(&o->obs, argc, argv, &i, PROG);
    if (ob < 0) return 0;
    if (ob) continue;
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--quiet")) { o->quiet = 1; continue; }
    if (!strcmp(a, "--resume")) { o->resume = 1; continue; }
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
static double evaluate(loom_module *m, const corpus *c, int64_t lo, int64_t hi, const opts *o, int64_t salt) {
  loom_module_train(m, false);
  bool prev = loom_set_grad_enabled(false);
  uint64_t rng = rng_for(o->seed, -2 - salt);  /* the same validation batches at every evaluation */
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

/* Sample n bytes after the prompt: the last block_size tokens in, the last
 * position's logits / temperature, the top k kept (0: all), softmax, one
 * draw. Prompt bytes outside the vocabulary are an error. */
static int sample(loom_module *m, const corpus *c, const opts *o) {
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
    loom_tensor *logits = loom_module_forward(m, loom_from_host(toks + n - t, 2, sh, LOOM_I64, loom_cpu()));
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

static int save(const opts *o, loom_train_state *st, const loom_lr_schedule *sched, int64_t step) {
  st->schedule = sched;
  st->step = step;
  if (loom_checkpoint_save(o->save, st) != LOOM_OK) {
    fprintf(stderr, "%s: --save %s: %s\n", PROG, o->save, loom_last_error());
    return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  opts o;
  if (!parse(argc, argv, &o)) return 2;
  corpus c;
  if (!load_corpus(o.data, o.block, &c)) return 1;
  if (o.threads > 0) loom_set_num_threads((int)o.threads);  /* 0: loom's default (all cores) */
  loom_manual_seed((uint64_t)o.seed);
  loom_gpt_config cfg;
  loom_gpt_config_init(&cfg);
  cfg.vocab_size = c.vocab, cfg.block_size = o.block, cfg.n_layer = o.layers, cfg.n_head = o.heads;
  cfg.n_embd = o.embd, cfg.dropout = o.dropout;
  loom_module *m = loom_gpt_new(&cfg, loom_cpu());
  if (!m) return fail("model");
  if (o.precision != LOOM_PRECISION_FP32 && loom_module_set_precision(m, o.precision, false) != LOOM_OK)
    return fail("--precision");
  /* Loss scaling for f16 (bf16 has f32's range: the scaler only moves the gradients to the masters). */
  loom_scaler_options sco;
  loom_scaler_options_init(&sco);
  sco.enabled = o.precision == LOOM_PRECISION_MIXED_FP16;
  loom_grad_scaler *scaler = loom_scaler_new(&sco);
  if (!scaler) return fail("loss scaler");
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
  loom_train_state st = {.struct_size = sizeof st, .model = m, .optimizer = opt, .scaler = scaler};
  int64_t start = 0;
  if (o.resume && access(o.save, F_OK) == 0) {
    /* The model, AdamW's moments and counts, loom's RNG (dropout) and the step. */
    if (loom_checkpoint_restore(o.save, &st) != LOOM_OK) return fail("--resume");
    start = st.step;
  }
  if (loom_optimizer_set_schedule(opt, &sched, start) != LOOM_OK) return fail("schedule");
  if (!o.quiet)
    printf("%s: %lld bytes, vocabulary %d, %lld train / %lld val; %s, %lld parameters%s\n", PROG, (long long)c.n,
           c.vocab, (long long)c.n_train, (long long)(c.n - c.n_train), loom_module_name(m),
           (long long)loom_module_num_param_elements(m), start ? " (resumed)" : "");
  FILE *csv = NULL;
  if (o.csv) {
    csv = fopen(o.csv, start ? "a" : "w");
    if (!csv) {
      fprintf(stderr, "%s: --csv %s: %s\n", PROG, o.csv, strerror(errno));
      return 1;
    }
    if (!start) fprintf(csv, "step,train_loss,val_loss,lr,tokens_per_sec\n");
  }

  observe *obs = observe_open(&o.obs, loom_cpu(), NULL, PROG);
  if (!obs) return 1;
  int64_t end = o.max_steps >= 0 && o.max_steps < o.steps ? o.max_steps : o.steps;
  if (end < start) end = start;
  double train_s = 0, loss_v = NAN;
  int tty = isatty(1);
  for (int64_t step = start; step < end; step++) {
    if (observe_step_begin(obs, step)) return 1;
    double t0 = cli_now_s();
    loom_scope_begin();
    loom_tensor *x, *y;
    uint64_t rng = rng_for(o.seed, step);
    batch(&c, 0, c.n_train, o.batch, o.block, &rng, &x, &y);
    loom_tensor *loss = loom_gpt_forward(m, x, y);
    bool found_inf = false;
    /* Unscaled f32 master gradients first, so that clipping sees the true norm. */
    if (!loss || loom_optimizer_zero_grad(opt) != LOOM_OK || loom_backward(loom_scaler_scale(scaler, loss)) != LOOM_OK ||
        loom_scaler_unscale(scaler, opt, &found_inf) != LOOM_OK ||
        (o.grad_clip > 0 && !found_inf && loom_clip_grad_norm(all, np, o.grad_clip, NULL) != LOOM_OK) ||
        loom_scaler_step(scaler, opt, NULL) != LOOM_OK || loom_item(loss, &loss_v) != LOOM_OK)
      return fail("training step");
    loom_scope_end();
    train_s += cli_now_s() - t0;
    /* No accuracy for a language model: logged as 0. */
    observe_step os = {.global_step = step, .samples = o.batch, .logged = true, .loss = loss_v,
                       .lr = loom_optimizer_get_lr(opt), .loss_scale = loom_scaler_get_scale(scaler)};
    if (observe_step_end(obs, &os)) return 1;
    double tps = (double)((step + 1 - start) * o.batch * o.block) / train_s;
    /* The shared progress line counts samples: sequences of --block tokens. */
    cli_progress((cli_progress_style){50, 8, 1}, tty, o.quiet, 1, 1, step + 1, o.steps, loss_v, tps / (double)o.block);
    if (o.eval_every > 0 && (step + 1) % o.eval_every == 0 && step + 1 < o.steps && (!o.quiet || csv)) {
      double vl = evaluate(m, &c, c.n_train, c.n, &o, 7);
      if (isnan(vl)) return fail("evaluation");
      if (!o.quiet)
        printf("%sstep %lld: train loss %.4f, val loss %.4f, lr %.3g\n", tty ? "\n" : "", (long long)(step + 1),
               loss_v, vl, loom_optimizer_get_lr(opt));
      if (csv)
        fprintf(csv, "%lld,%.6f,%.6f,%.6g,%.0f\n", (long long)(step + 1), loss_v, vl, loom_optimizer_get_lr(opt), tps);
    }
    if (o.save && o.save_every > 0 && (step + 1) % o.save_every == 0 && !save(&o, &st, &sched, step + 1)) return 1;
  }
  /* Not when a resumed run had nothing left to train (it only samples). */
  if (o.save && (end > start || start == 0) && !save(&o, &st, &sched, end)) return 1;
  double val = evaluate(m, &c, c.n_train, c.n, &o, 7);
  if (isnan(val)) return fail("evaluation");
  if (tty && !o.quiet) printf("\n");
  double tps = train_s > 0 ? (double)((end - start) * o.batch * o.block) / train_s : 0;
  if (csv) {
    fprintf(csv, "%lld,%.6f,%.6f,%.6g,%.0f\n", (long long)end, loss_v, val, loom_optimizer_get_lr(opt), tps);
    fclose(csv);
  }
  observe_epoch oe = {end, loss_v, 0.0, tps / (double)o.block, 0.0, loom_optimizer_get_lr(opt), 1.0};
  if (observe_epoch_end(obs, &oe) || observe_close(obs)) return 1;
  if (o.sample > 0 && !sample(m, &c, &o)) return 1;
  printf("result val_loss=%.4f tokens_per_sec=%.0f\n", val, tps);
  loom_optimizer_free(opt);
  loom_scaler_free(scaler);
  loom_module_free(m);
  free(dec), free(nodec), free(all), free(c.ids);
  return loom_shutdown() == LOOM_OK ? 0 : fail("shutdown");
}
