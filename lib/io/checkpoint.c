/* checkpoint.c — one call saves and one restores the whole training state
 * (model parameters and buffers, optimizer state and hyper-parameters, loss
 * scaler, loader position, RNG, step) as a safetensors file with names other
 * tools can read. Restore checks everything against the live objects before
 * changing any of them. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/struct_size.h"
#include "core/text.h"
#include "data/data_internal.h"
#include "loom/autograd.h"
#include "loom/log.h"
#include "loom/rng.h"
#include "io/safetensors_internal.h"
#include "optim/optim_state.h"
#include "tensor/tensor_internal.h"
#include "core/sys.h"

#define CKPT_FORMAT_KEY "loom.checkpoint"
#define CKPT_FORMAT_VERSION "1"
#define NAME_MAX_LEN 512

/* ---- growable lists of names/tensors and metadata --------------------------- */

typedef struct entries {
  char **names;
  loom_tensor **tensors;
  bool *owned;          /* tensors made here (step counters), released at the end */
  int n, cap;
  char **keys, **values;
  int n_meta, cap_meta;
} entries;

/* Make room for one more in each of the parallel arrays (same capacity). */
static loom_status reserve(int n, int *cap, void **a, size_t sa, void **b, size_t sb, void **c, size_t sc) {
  if (n < *cap) return LOOM_OK;
  int nc = *cap ? *cap * 2 : 32;
  void *na = loom_sys_realloc(*a, (size_t)nc * sa);
  if (na) *a = na;
  void *nb = na ? loom_sys_realloc(*b, (size_t)nc * sb) : NULL;
  if (nb) *b = nb;
  void *ncp = (nb && c) ? loom_sys_realloc(*c, (size_t)nc * sc) : NULL;
  if (ncp) *c = ncp;
  if (!na || !nb || (c && !ncp)) return loom_set_error(LOOM_ERR_OOM, "checkpoint: out of host memory");
  *cap = nc;
  return LOOM_OK;
}

static loom_status add_tensor(entries *e, loom_tensor *t, bool owned, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static loom_status add_tensor(entries *e, loom_tensor *t, bool owned, const char *fmt, ...) {
  loom_status st = reserve(e->n, &e->cap, (void **)&e->names, sizeof *e->names, (void **)&e->tensors,
                           sizeof *e->tensors, (void **)&e->owned, sizeof *e->owned);
  char *name = st == LOOM_OK ? loom_sys_malloc(NAME_MAX_LEN) : NULL;
  if (!name) {
    if (owned) loom_tensor_release(t);
    return st != LOOM_OK ? st : loom_set_error(LOOM_ERR_OOM, "checkpoint: out of host memory");
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, NAME_MAX_LEN, fmt, ap);
  va_end(ap);
  e->names[e->n] = name;
  e->tensors[e->n] = t;
  e->owned[e->n] = owned;
  e->n++;
  return LOOM_OK;
}

static loom_status add_meta(entries *e, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static loom_status add_meta(entries *e, const char *key, const char *fmt, ...) {
  LOOM_TRY(reserve(e->n_meta, &e->cap_meta, (void **)&e->keys, sizeof *e->keys, (void **)&e->values,
                   sizeof *e->values, NULL, 0));
  char *k = loom_sys_strdup(key), *v = loom_sys_malloc(64);
  if (!k || !v) {
    loom_sys_free(k), loom_sys_free(v);
    return loom_set_error(LOOM_ERR_OOM, "checkpoint: out of host memory");
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v, 64, fmt, ap);
  va_end(ap);
  e->keys[e->n_meta] = k;
  e->values[e->n_meta] = v;
  e->n_meta++;
  return LOOM_OK;
}

static void entries_free(entries *e) {
  for (int i = 0; i < e->n; i++) {
    loom_sys_free(e->names[i]);
    if (e->owned[i]) loom_tensor_release(e->tensors[i]);
  }
  for (int i = 0; i < e->n_meta; i++) loom_sys_free(e->keys[i]), loom_sys_free(e->values[i]);
  loom_sys_free(e->names), loom_sys_free(e->tensors), loom_sys_free(e->owned), loom_sys_free(e->keys), loom_sys_free(e->values);
}

/* ---- shared checks -------------------------------------------------------------- */

/* *s: a copy of the caller's state, fields beyond its struct_size NULL/0
 * (older callers), checked. */
static loom_status state_copy(const loom_train_state *st, const char *fn, loom_train_state *s) {
  if (!st) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: state is NULL", fn);
  memset(s, 0, sizeof *s);
  LOOM_TRY(LOOM_STRUCT_IN(fn, loom_train_state, s, st));
  if (!s->model) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: state.model is NULL (a checkpoint needs the model)", fn);
  if (s->schedule)
    LOOM_TRY(loom_struct_size_check(fn, "loom_lr_schedule", s->schedule->struct_size, sizeof *s->schedule));
  return LOOM_OK;
}

/* The model's name of optimizer parameter i ("0.weight"), or an error. */
static loom_status opt_param_name(const loom_module *m, const loom_optimizer *o, int i, char *buf, size_t n) {
  loom_tensor *p = loom_optim_param(o, i);
  int np = loom_module_num_params(m);
  for (int j = 0; j < np; j++)
    if (loom_module_param(m, j) == p) {
      if (!loom_module_param_name(m, j, buf, n)) return loom_last_status();
      return LOOM_OK;
    }
  return loom_set_error(LOOM_ERR_INVALID_ARG,
                        "checkpoint: optimizer parameter %d is not a parameter of the model (optimizer state is saved "
                        "under the model's parameter names)",
                        i);
}

static const char *schedule_kind_name(int k) {
  switch (k) {
    case LOOM_LR_CONSTANT: return "constant";
    case LOOM_LR_STEP: return "step";
    case LOOM_LR_COSINE: return "cosine";
    case LOOM_LR_ONE_CYCLE: return "one_cycle";
  }
  return "unknown";
}

/* The schedule as a checkpoint records it: key and value strings (saved by
 * loom_checkpoint_save, compared by restore). Returns how many. */
#define SCHED_FIELDS 9
static int schedule_meta(const loom_lr_schedule *sc, const char *key[SCHED_FIELDS], char val[SCHED_FIELDS][40]) {
  int n = 0;
#define FIELD(k, ...) (key[n] = (k), snprintf(val[n++], sizeof val[0], __VA_ARGS__))
  FIELD("schedule.kind", "%s", schedule_kind_name(sc->kind));
  FIELD("schedule.base_lr", "%.17g", sc->base_lr);
  FIELD("schedule.warmup_steps", "%lld", (long long)sc->warmup_steps);
  FIELD("schedule.step_size", "%lld", (long long)sc->step_size);
  FIELD("schedule.gamma", "%.17g", sc->gamma);
  FIELD("schedule.total_steps", "%lld", (long long)sc->total_steps);
  FIELD("schedule.min_lr", "%.17g", sc->min_lr);
  if (sc->struct_size >= offsetof(loom_lr_schedule, final_div_factor) + sizeof sc->final_div_factor) { /* one-cycle */
    FIELD("schedule.div_factor", "%.17g", sc->div_factor);
    FIELD("schedule.final_div_factor", "%.17g", sc->final_div_factor);
  }
#undef FIELD
  return n;
}

/* The schedule is recorded, never restored (the caller's is the one that
 * runs), but a resumed run that follows another schedule than the saved one
 * (e.g. a changed --epochs: another total_steps) is worth a warning. */
static void warn_schedule_change(loom_safetensors *f, const char *path, const loom_lr_schedule *sc, int64_t step) {
  char val[SCHED_FIELDS][40], diff[512] = "";
  const char *key[SCHED_FIELDS];
  int n = schedule_meta(sc, key, val);
  size_t used = 0;
  for (int i = 0; i < n; i++) {
    const char *saved = loom_safetensors_metadata(f, key[i]);
    if (!saved || !strcmp(saved, val[i]) || used >= sizeof diff) continue;
    int w = snprintf(diff + used, sizeof diff - used, "%s%s %s -> %s", used ? ", " : "", key[i] + 9, saved, val[i]);
    if (w > 0) used += (size_t)w;
  }
  if (used)
    loom_log_msg(LOOM_LOG_WARN, "checkpoint '%s' was saved under another LR schedule (%s); training continues at step "
                 "%lld with this run's schedule", path, diff, (long long)step);
}

/* ---- save ------------------------------------------------------------------------ */

loom_status loom_checkpoint_save(const char *path, const loom_train_state *state) {
  loom_train_state s;
  LOOM_TRY(state_copy(state, "loom_checkpoint_save", &s));
  entries e;
  memset(&e, 0, sizeof e);
  char name[NAME_MAX_LEN - 32];
  loom_status st = LOOM_OK;
  /* Model: parameters (the f32 masters), then buffers. */
  int np = loom_module_num_params(s.model);
  for (int i = 0; i < np && st == LOOM_OK; i++) {
    if (!loom_module_param_name(s.model, i, name, sizeof name)) st = loom_last_status();
    else st = add_tensor(&e, loom_module_param(s.model, i), false, "model.%s", name);
  }
  int nb = loom_module_num_buffers(s.model);
  for (int i = 0; i < nb && st == LOOM_OK; i++) {
    if (!loom_module_buffer_name(s.model, i, name, sizeof name)) st = loom_last_status();
    else st = add_tensor(&e, loom_module_buffer(s.model, i), false, "model.%s", name);
  }
  if (st == LOOM_OK) st = add_meta(&e, CKPT_FORMAT_KEY, "%s", CKPT_FORMAT_VERSION);
  if (st == LOOM_OK) st = add_meta(&e, "step", "%lld", (long long)s.step);
  if (st == LOOM_OK) st = add_meta(&e, "model.precision", "%s", loom_precision_name(loom_module_get_precision(s.model)));
  uint64_t seed, offset;
  loom_rng_get_state(&seed, &offset);
  if (st == LOOM_OK) st = add_meta(&e, "rng.seed", "%llu", (unsigned long long)seed);
  if (st == LOOM_OK) st = add_meta(&e, "rng.offset", "%llu", (unsigned long long)offset);
  /* Optimizer: state tensors and update counts per parameter, hyper-parameters. */
  if (s.optimizer && st == LOOM_OK) st = loom_optim_sync_counts(s.optimizer);
  if (s.optimizer) {
    int n = loom_optim_num_params(s.optimizer);
    for (int i = 0; i < n && st == LOOM_OK; i++) {
      st = opt_param_name(s.model, s.optimizer, i, name, sizeof name);
      const char *slots[LOOM_OPTIM_MAX_SLOTS];
      loom_tensor *ts[LOOM_OPTIM_MAX_SLOTS];
      int k = st == LOOM_OK ? loom_optim_param_state(s.optimizer, i, slots, ts) : 0;
      for (int j = 0; j < k && st == LOOM_OK; j++) st = add_tensor(&e, ts[j], false, "optim.%s.%s", name, slots[j]);
      if (st == LOOM_OK) {
        int64_t steps = loom_optim_param_steps(s.optimizer, i);
        loom_tensor *t = loom_tensor_alloc_raw(0, NULL, LOOM_I64, loom_cpu());
        if (!t) st = loom_last_status();
        else {
          memcpy(loom_tensor_ptr(t), &steps, sizeof steps);
          st = add_tensor(&e, t, true, "optim.%s.step", name);
        }
      }
    }
    int nh = loom_optim_hparams(s.optimizer, NULL, 0); /* grows with parameter groups */
    loom_optim_hparam *hp = loom_sys_malloc((size_t)nh * sizeof *hp);
    if (!hp && st == LOOM_OK) st = loom_set_error(LOOM_ERR_OOM, "out of host memory");
    if (hp) loom_optim_hparams(s.optimizer, hp, nh);
    for (int i = 0; hp && i < nh && st == LOOM_OK; i++) {
      char key[LOOM_OPTIM_KEY_MAX + 8];
      snprintf(key, sizeof key, "optim.%.*s", LOOM_OPTIM_KEY_MAX - 1, hp[i].key);
      st = add_meta(&e, key, "%s", hp[i].value);
    }
    loom_sys_free(hp);
  }
  if (s.scaler && st == LOOM_OK) {
    loom_scaler_state ss = {.struct_size = sizeof ss};
    st = loom_scaler_state_save(s.scaler, &ss);
    if (st == LOOM_OK) st = add_meta(&e, "scaler.scale", "%.17g", ss.scale);
    if (st == LOOM_OK) st = add_meta(&e, "scaler.good_steps", "%lld", (long long)ss.good_steps);
    if (st == LOOM_OK) st = add_meta(&e, "scaler.steps", "%lld", (long long)ss.steps);
    if (st == LOOM_OK) st = add_meta(&e, "scaler.steps_skipped", "%lld", (long long)ss.steps_skipped);
    if (st == LOOM_OK) st = add_meta(&e, "scaler.last_overflow_step", "%lld", (long long)ss.last_overflow_step);
  }
  if (s.loader && st == LOOM_OK) {
    int64_t epoch, batch;
    const loom_loader_options *lo = loom_loader_get_options(s.loader);
    st = loom_loader_position(s.loader, &epoch, &batch);
    if (st == LOOM_OK) st = add_meta(&e, "loader.epoch", "%lld", (long long)epoch);
    if (st == LOOM_OK) st = add_meta(&e, "loader.batch", "%lld", (long long)batch);
    if (st == LOOM_OK)
      st = add_meta(&e, "loader.batches_per_epoch", "%lld", (long long)loom_loader_num_batches(s.loader));
    if (st == LOOM_OK) st = add_meta(&e, "loader.batch_size", "%lld", (long long)lo->batch_size);
    if (st == LOOM_OK) st = add_meta(&e, "loader.seed", "%llu", (unsigned long long)lo->seed);
    if (st == LOOM_OK) st = add_meta(&e, "loader.shuffle", "%d", lo->shuffle ? 1 : 0);
  }
  if (s.schedule && st == LOOM_OK) {
    char val[SCHED_FIELDS][40];
    const char *key[SCHED_FIELDS];
    int n = schedule_meta(s.schedule, key, val);
    for (int i = 0; i < n && st == LOOM_OK; i++) st = add_meta(&e, key[i], "%s", val[i]);
  }
  if (st == LOOM_OK)
    st = loom_safetensors_save(path, e.n, (const char *const *)e.names, e.tensors, e.n_meta,
                               (const char *const *)e.keys, (const char *const *)e.values);
  if (st != LOOM_OK) loom_error_prefix("loom_checkpoint_save");
  entries_free(&e);
  return st;
}

/* ---- restore ------------------------------------------------------------------- */

typedef struct lookup_ctx {
  const loom_safetensors *f;
  const char *prefix;
} lookup_ctx;

static const char *lookup_prefixed(void *ctx, const char *key) {
  const lookup_ctx *c = ctx;
  char full[128];
  snprintf(full, sizeof full, "%s%s", c->prefix, key);
  return loom_safetensors_metadata(c->f, full);
}

static int parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s || *s == '-') return 0;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end) return 0;
  *out = v;
  return 1;
}

static loom_status meta_i64(const loom_safetensors *f, const char *key, int64_t lo, int64_t *out) {
  const char *s = loom_safetensors_metadata(f, key);
  if (!s) return loom_set_error(LOOM_ERR_FORMAT, "checkpoint: metadata '%s' is missing", key);
  if (!loom_parse_i64(s, out) || *out < lo)
    return loom_set_error(LOOM_ERR_FORMAT, "checkpoint: metadata %s = '%s' is not an integer >= %lld", key, s,
                          (long long)lo);
  return LOOM_OK;
}

static loom_status meta_u64(const loom_safetensors *f, const char *key, uint64_t *out) {
  const char *s = loom_safetensors_metadata(f, key);
  if (!s) return loom_set_error(LOOM_ERR_FORMAT, "checkpoint: metadata '%s' is missing", key);
  if (!parse_u64(s, out)) return loom_set_error(LOOM_ERR_FORMAT, "checkpoint: metadata %s = '%s' is not an unsigned integer", key, s);
  return LOOM_OK;
}

/* Entry `name` exists with exactly dst's dtype and shape; its index in *idx. */
static loom_status expect_like(const loom_safetensors *f, const char *name, const loom_tensor *dst, int *idx) {
  int i = loom_safetensors_find(f, name);
  if (i < 0) return loom_set_error(LOOM_ERR_FORMAT, "checkpoint: '%s' is missing (was it saved from another model?)", name);
  loom_dtype dt;
  int nd;
  int64_t shape[LOOM_MAX_DIMS];
  LOOM_TRY(loom_safetensors_info(f, i, &dt, &nd, shape));
  bool same = dt == dst->dtype && nd == dst->ndim;
  for (int d = 0; same && d < nd; d++) same = shape[d] == dst->shape[d];
  if (!same) {
    char a[128], b[128];
    return loom_set_error(LOOM_ERR_SHAPE, "checkpoint: '%s' is %s %s in the file but %s %s here", name,
                          loom_dtype_name(dt), loom_shape_str(nd, shape, a, sizeof a), loom_dtype_name(dst->dtype),
                          loom_shape_str(dst->ndim, dst->shape, b, sizeof b));
  }
  *idx = i;
  return LOOM_OK;
}

/* One (file entry -> live tensor) copy planned by the check phase. */
typedef struct plan_item {
  char name[NAME_MAX_LEN];
  loom_tensor *dst;
} plan_item;

typedef struct plan {
  plan_item *items;
  int n, cap;
  int64_t *param_steps;   /* per optimizer parameter */
  loom_scaler_state scaler;
  int64_t epoch, batch, step;
  uint64_t seed, offset;
} plan;

static loom_status plan_add(plan *p, const loom_safetensors *f, loom_tensor *dst, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static loom_status plan_add(plan *p, const loom_safetensors *f, loom_tensor *dst, const char *fmt, ...) {
  if (p->n == p->cap) {
    int nc = p->cap ? p->cap * 2 : 32;
    plan_item *ni = loom_sys_realloc(p->items, (size_t)nc * sizeof *ni);
    if (!ni) return loom_set_error(LOOM_ERR_OOM, "checkpoint: out of host memory");
    p->items = ni;
    p->cap = nc;
  }
  plan_item *it = &p->items[p->n];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(it->name, sizeof it->name, fmt, ap);
  va_end(ap);
  int idx;
  LOOM_TRY(expect_like(f, it->name, dst, &idx));
  it->dst = dst;
  p->n++;
  return LOOM_OK;
}

/* Every check; fills p. Changes nothing. */
static loom_status check_all(const loom_safetensors *f, const loom_train_state *s, plan *p) {
  const char *fmt = loom_safetensors_metadata(f, CKPT_FORMAT_KEY);
  if (!fmt)
    return loom_set_error(LOOM_ERR_FORMAT,
                          "checkpoint: the file has no '%s' metadata: it is not a loom training checkpoint (plain "
                          "safetensors files load with loom_safetensors_open)",
                          CKPT_FORMAT_KEY);
  if (strcmp(fmt, CKPT_FORMAT_VERSION))
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "checkpoint: format version '%s'; this loom reads version %s", fmt,
                          CKPT_FORMAT_VERSION);
  char name[NAME_MAX_LEN - 32];
  int np = loom_module_num_params(s->model);
  for (int i = 0; i < np; i++) {
    if (!loom_module_param_name(s->model, i, name, sizeof name)) return loom_last_status();
    LOOM_TRY(plan_add(p, f, loom_module_param(s->model, i), "model.%s", name));
  }
  int nb = loom_module_num_buffers(s->model);
  for (int i = 0; i < nb; i++) {
    if (!loom_module_buffer_name(s->model, i, name, sizeof name)) return loom_last_status();
    LOOM_TRY(plan_add(p, f, loom_module_buffer(s->model, i), "model.%s", name));
  }
  LOOM_TRY(meta_i64(f, "step", 0, &p->step));
  LOOM_TRY(meta_u64(f, "rng.seed", &p->seed));
  LOOM_TRY(meta_u64(f, "rng.offset", &p->offset));
  if (s->optimizer) {
    lookup_ctx lc = {f, "optim."};
    LOOM_TRY(loom_optim_hparams_check(s->optimizer, lookup_prefixed, &lc));
    int n = loom_optim_num_params(s->optimizer);
    p->param_steps = loom_sys_calloc((size_t)n, sizeof *p->param_steps);
    if (!p->param_steps) return loom_set_error(LOOM_ERR_OOM, "checkpoint: out of host memory");
    for (int i = 0; i < n; i++) {
      LOOM_TRY(opt_param_name(s->model, s->optimizer, i, name, sizeof name));
      const char *slots[LOOM_OPTIM_MAX_SLOTS];
      loom_tensor *ts[LOOM_OPTIM_MAX_SLOTS];
      int k = loom_optim_param_state(s->optimizer, i, slots, ts);
      for (int j = 0; j < k; j++) LOOM_TRY(plan_add(p, f, ts[j], "optim.%s.%s", name, slots[j]));
      char sname[NAME_MAX_LEN];
      snprintf(sname, sizeof sname, "optim.%s.step", name);
      int idx = loom_safetensors_find(f, sname);
      loom_dtype dt;
      int nd = -1;
      if (idx < 0 || loom_safetensors_info(f, idx, &dt, &nd, NULL) != LOOM_OK || dt != LOOM_I64 || nd != 0)
        return loom_set_error(LOOM_ERR_FORMAT, "checkpoint: '%s' is missing or not an i64 scalar", sname);
      const loom_st_entry *en = &f->e[idx];
      memcpy(&p->param_steps[i], (const char *)f->map->base + f->data_start + en->begin, sizeof(int64_t));
      if (p->param_steps[i] < 0)
        return loom_set_error(LOOM_ERR_FORMAT, "checkpoint: '%s' is negative (%lld)", sname, (long long)p->param_steps[i]);
    }
  }
  if (s->scaler) {
    loom_scaler_state *ss = &p->scaler;
    ss->struct_size = sizeof *ss;
    const char *sv = loom_safetensors_metadata(f, "scaler.scale");
    char *end = NULL;
    if (!sv) return loom_set_error(LOOM_ERR_FORMAT, "checkpoint: the file has no loss-scaler state (scaler.scale)");
    ss->scale = strtod(sv, &end);
    if (*end) return loom_set_error(LOOM_ERR_FORMAT, "checkpoint: scaler.scale = '%s' is not a number", sv);
    LOOM_TRY(meta_i64(f, "scaler.good_steps", 0, &ss->good_steps));
    LOOM_TRY(meta_i64(f, "scaler.steps", 0, &ss->steps));
    LOOM_TRY(meta_i64(f, "scaler.steps_skipped", 0, &ss->steps_skipped));
    LOOM_TRY(meta_i64(f, "scaler.last_overflow_step", -1, &ss->last_overflow_step));
    /* The scaler validates a state in full; try it on a scratch scaler. */
    loom_grad_scaler *tmp = loom_scaler_new(NULL);
    if (!tmp) return loom_last_status();
    loom_status st = loom_scaler_state_restore(tmp, ss);
    loom_scaler_free(tmp);
    if (st != LOOM_OK) return loom_error_prefix("checkpoint");
  }
  if (s->loader) {
    const loom_loader_options *lo = loom_loader_get_options(s->loader);
    int64_t bs, bpe, shuffle;
    uint64_t seed;
    LOOM_TRY(meta_i64(f, "loader.epoch", 0, &p->epoch));
    LOOM_TRY(meta_i64(f, "loader.batch", 0, &p->batch));
    LOOM_TRY(meta_i64(f, "loader.batch_size", 1, &bs));
    LOOM_TRY(meta_i64(f, "loader.batches_per_epoch", 0, &bpe));
    LOOM_TRY(meta_i64(f, "loader.shuffle", 0, &shuffle));
    LOOM_TRY(meta_u64(f, "loader.seed", &seed));
    int64_t mine = loom_loader_num_batches(s->loader);
    if (bs != lo->batch_size || bpe != mine || seed != lo->seed || (shuffle != 0) != lo->shuffle)
      return loom_set_error(LOOM_ERR_INVALID_ARG,
                            "checkpoint: the loader was saved with batch_size %lld, %lld batches per epoch, seed %llu, "
                            "shuffle %lld, but this one has %lld, %lld, %llu, %d: its position would mean other batches",
                            (long long)bs, (long long)bpe, (unsigned long long)seed, (long long)shuffle,
                            (long long)lo->batch_size, (long long)mine, (unsigned long long)lo->seed, lo->shuffle ? 1 : 0);
    if (p->batch > bpe)
      return loom_set_error(LOOM_ERR_FORMAT, "checkpoint: loader.batch %lld is beyond the %lld batches of an epoch",
                            (long long)p->batch, (long long)bpe);
  }
  return LOOM_OK;
}

/* Copy everything planned; set the counters. Runs only after check_all. */
static loom_status apply_all(loom_safetensors *f, loom_train_state *s, const plan *p) {
  loom_status st = LOOM_OK;
  bool prev = loom_set_grad_enabled(false);
  /* Read every tensor before writing any (file and memory errors end the
   * restore before it changes anything), then copy them in. */
  loom_tensor **src = loom_sys_calloc(p->n ? (size_t)p->n : 1, sizeof *src);
  if (!src) st = loom_set_error(LOOM_ERR_OOM, "checkpoint: out of host memory");
  loom_scope_begin();
  for (int i = 0; i < p->n && st == LOOM_OK; i++) {
    src[i] = loom_safetensors_get(f, p->items[i].name, loom_cpu());
    if (!src[i]) st = loom_error_prefix("checkpoint: reading '%s'", p->items[i].name);
  }
  for (int i = 0; i < p->n && st == LOOM_OK; i++)
    if ((st = loom_copy_(p->items[i].dst, src[i])) != LOOM_OK)
      loom_error_prefix("checkpoint: restoring '%s'", p->items[i].name);
  loom_scope_end();
  loom_sys_free(src);
  loom_set_grad_enabled(prev);
  if (st != LOOM_OK) return st;
  if (s->optimizer) {
    lookup_ctx lc = {f, "optim."};
    loom_optim_hparams_apply(s->optimizer, lookup_prefixed, &lc);
    for (int i = 0; i < loom_optim_num_params(s->optimizer); i++)
      loom_optim_set_param_steps(s->optimizer, i, p->param_steps[i]);
    LOOM_TRY(loom_optim_counts_restored(s->optimizer));
  }
  if (s->scaler) LOOM_TRY(loom_scaler_state_restore(s->scaler, &p->scaler));
  if (s->loader) LOOM_TRY(loom_loader_seek(s->loader, p->epoch, p->batch));
  loom_rng_set_state(p->seed, p->offset);
  s->step = p->step;
  /* The masters changed outside the optimizer: refresh f16/bf16 copies. */
  return loom_module_refresh_lowp(s->model);
}

loom_status loom_checkpoint_restore(const char *path, loom_train_state *state) {
  loom_train_state s;
  LOOM_TRY(state_copy(state, "loom_checkpoint_restore", &s));
  loom_safetensors *f = loom_safetensors_open(path);
  if (!f) return loom_error_prefix("loom_checkpoint_restore");
  plan p;
  memset(&p, 0, sizeof p);
  loom_status st = check_all(f, &s, &p);
  if (st == LOOM_OK) st = apply_all(f, &s, &p);
  if (st == LOOM_OK) {
    st = LOOM_STRUCT_OUT("loom_checkpoint_restore", loom_train_state, state, &s);  /* sets state->step */
    if (s.schedule) warn_schedule_change(f, path, s.schedule, s.step);
  } else {
    loom_error_prefix("loom_checkpoint_restore '%s'", path);
  }
  loom_sys_free(p.items);
  loom_sys_free(p.param_steps);
  loom_safetensors_close(f);
  return st;
}
