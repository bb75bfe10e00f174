/* ddp.c — data-parallel training (loom_ddp): parameters and buffers
 * broadcast from rank 0, gradients packed into buckets (ddp_plan.c) by the
 * autograd grad-ready hooks and all-reduced (average) bucket by bucket while
 * backward goes on, the optimizer ordered after the last bucket, no_sync
 * accumulation, and the loss scaler's found-inf agreed across ranks.
 *
 * Each parameter owns a slot (a view of its bucket's flat buffer, shaped
 * like the parameter). When the hook fires, the gradient is copied into the
 * slot and the slot becomes the gradient, so the in-place all-reduce of the
 * bucket averages the gradients themselves: nothing is copied back. Under a
 * mixed policy the hooks sit on the low-precision copies (their gradients
 * are what backward produces); by default their buckets are f16/bf16 (half
 * the bytes) and lib/amp turns them into the masters' f32 gradients as
 * usual; with reduce_in_fp32 the slot is f32 and becomes the master's
 * gradient directly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"
#include "core/struct_size.h"
#include "dist/dist_internal.h"
#include "loom/autograd.h"
#include "loom/log.h"
#include "nn/module_internal.h"
#include "ops/op.h"
#include "core/sys.h"

typedef struct ddp_param {
  struct loom_ddp *d;
  int index;            /* in loom_module_param order */
  loom_tensor *master;  /* borrowed (the module owns it) */
  loom_tensor *leaf;    /* retained: the tensor whose hook we own (master or its low-precision copy) */
  loom_tensor *slot;    /* owned view of the bucket buffer, the parameter's shape */
  int bucket;
  bool ready;           /* its gradient is in the slot this step */
} ddp_param;

typedef struct ddp_bucket {
  loom_tensor *buf;     /* owned, flat */
  int n_params, n_ready;
  int lo, hi;           /* parameter index range */
  int64_t numel;
  loom_dtype dtype;
  bool launched;
  loom_comm_times times;
} ddp_bucket;

struct loom_ddp {
  loom_module *m;
  loom_comm *c;
  loom_ddp_options o;
  int n, nb;
  ddp_param *p;
  ddp_bucket *b;
  int next_launch;
  bool sync;
  bool in_step;          /* a hook fired (or a bucket launched) since the last sync */
  loom_status hook_status;
  char hook_msg[512];
  loom_grad_scaler *scaler;
  loom_ddp_stats stats;
};

void loom_ddp_options_init(loom_ddp_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->first_bucket_mib = 1.0;
  o->bucket_mib = 25.0;
  o->reduce_in_fp32 = false;
  o->broadcast_buffers = true;
}

/* ---- the model check and the initial broadcast ------------------------------------ */

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}

static uint64_t tensor_sig(uint64_t h, const loom_tensor *t) {
  h = mix(h, (uint64_t)t->dtype);
  h = mix(h, (uint64_t)t->ndim);
  for (int k = 0; k < t->ndim; k++) h = mix(h, (uint64_t)t->shape[k]);
  return h;
}

/* Every rank must hold the same model: compare a signature of parameter
 * and buffer shapes and dtypes and bucket dtypes (max and min agree). */
static loom_status check_same_model(loom_ddp *d) {
  uint64_t h = mix(0, (uint64_t)d->n);
  for (int i = 0; i < d->n; i++) {
    h = tensor_sig(h, d->p[i].master);
    h = tensor_sig(h, d->p[i].leaf);
    h = mix(h, (uint64_t)d->b[d->p[i].bucket].dtype);
  }
  int nbuf = loom_module_num_buffers(d->m);
  h = mix(h, (uint64_t)nbuf);
  for (int i = 0; i < nbuf; i++) h = tensor_sig(h, loom_module_buffer(d->m, i));
  int64_t v[2] = {(int64_t)(h >> 2), -(int64_t)(h >> 2)};
  int64_t two = 2;
  loom_scope_begin();
  loom_tensor *t = loom_from_host(v, 1, &two, LOOM_I64, d->c->device);
  loom_status st = t ? loom_comm_all_reduce(d->c, t, LOOM_REDUCE_MAX) : loom_last_status();
  if (st == LOOM_OK) st = loom_comm_synchronize(d->c);
  int64_t got[2] = {0, 0};
  if (st == LOOM_OK) st = loom_to_host(t, got, sizeof got, LOOM_I64);
  loom_scope_end();
  LOOM_TRY(st);
  if (got[0] != v[0] || got[1] != v[1])
    return loom_set_error(LOOM_ERR_STATE,
                          "ddp: the model differs across ranks (parameter or buffer shapes, dtypes, precision policy or "
                          "bucket options): build the same model with the same options on every rank");
  return LOOM_OK;
}

static loom_status broadcast_list(loom_ddp *d, bool params) {
  int n = params ? d->n : loom_module_num_buffers(d->m);
  for (int i = 0; i < n; i++) {
    loom_tensor *t = params ? d->p[i].master : loom_module_buffer(d->m, i);
    LOOM_TRY(loom_comm_broadcast(d->c, t, 0));
  }
  return loom_comm_synchronize(d->c);
}

loom_status loom_ddp_broadcast_buffers(loom_ddp *d) {
  if (!d) return loom_set_error(LOOM_ERR_INVALID_ARG, "ddp_broadcast_buffers: ddp is NULL");
  if (d->in_step) return loom_set_error(LOOM_ERR_STATE, "ddp_broadcast_buffers: call loom_ddp_sync first");
  bool prev = loom_set_grad_enabled(false);
  loom_status st = broadcast_list(d, false);
  loom_set_grad_enabled(prev);
  return st;
}

/* ---- packing a gradient into its slot ---------------------------------------------- */

static bool same_memory(const loom_tensor *a, const loom_tensor *b) {
  return a && b && a->dtype == b->dtype && loom_tensor_ptr(a) == loom_tensor_ptr(b);
}

/* Put the gradient of p (grad, may be NULL: zeros) into its slot and make
 * the slot the gradient the optimizer (or lib/amp) will read. */
static loom_status pack(loom_ddp *d, ddp_param *p, loom_tensor *grad) {
  (void)d;
  loom_tensor *slot = p->slot;
  loom_tensor *leaf = p->leaf;
  loom_status st = LOOM_OK;
  loom_scope_begin();
  if (leaf != p->master && slot->dtype == LOOM_F32) {
    /* reduce_in_fp32 under a mixed policy: the slot is the master's f32
     * gradient; the copy's gradient is consumed. */
    loom_tensor *mg = p->master->grad;
    if (mg == slot) {
      if (grad) st = loom_add_inplace(slot, loom_cast(grad, LOOM_F32));
    } else {
      st = grad ? loom_copy_(slot, grad) : loom_fill_(slot, 0.0);
      if (st == LOOM_OK && mg) st = loom_add_inplace(slot, mg);
      if (st == LOOM_OK) {
        loom_tensor_release(p->master->grad);
        p->master->grad = loom_tensor_retain(slot);
      }
    }
    if (st == LOOM_OK && leaf->grad) {
      loom_tensor_release(leaf->grad);
      leaf->grad = NULL;
    }
  } else if (!same_memory(grad, slot)) {
    st = grad ? loom_copy_(slot, grad) : loom_fill_(slot, 0.0);
    if (st == LOOM_OK) {
      loom_tensor_release(leaf->grad);
      leaf->grad = loom_tensor_retain(slot);
    }
  }
  loom_scope_end();
  return st;
}

static void hook_fail(loom_ddp *d, const char *fmt, const char *detail) {
  if (d->hook_status != LOOM_OK) return;
  d->hook_status = loom_last_status() != LOOM_OK ? loom_last_status() : LOOM_ERR_STATE;
  snprintf(d->hook_msg, sizeof d->hook_msg, fmt, detail);
}

/* Launch every complete bucket that is next in order: all ranks must issue
 * the all-reduces in the same order, whatever order the hooks fire in. */
static void launch_ready(loom_ddp *d) {
  while (d->next_launch < d->nb && d->hook_status == LOOM_OK) {
    ddp_bucket *b = &d->b[d->next_launch];
    if (b->n_ready < b->n_params) break;
    if (loom_comm_all_reduce_timed(d->c, b->buf, LOOM_REDUCE_AVG, &b->times) != LOOM_OK) {
      hook_fail(d, "ddp: all-reduce of a bucket: %s", loom_last_error());
      return;
    }
    b->launched = true;
    d->next_launch++;
    d->stats.buckets++;
    d->stats.bytes += b->numel * (int64_t)loom_dtype_size(b->dtype);
  }
}

static void ddp_hook(loom_tensor *t, loom_tensor *grad, void *user) {
  ddp_param *p = user;
  loom_ddp *d = p->d;
  if (!d->sync || d->hook_status != LOOM_OK || t != p->leaf) return;
  d->in_step = true;
  if (p->ready) {
    char what[64];
    snprintf(what, sizeof what, "%d", p->index);
    loom_set_error(LOOM_ERR_STATE, "ddp");
    hook_fail(d, "ddp: the gradient of parameter %s was ready twice before loom_ddp_sync: call loom_ddp_sync after each "
              "synchronizing backward (or loom_ddp_set_sync(ddp, false) to accumulate)", what);
    return;
  }
  if (pack(d, p, grad) != LOOM_OK) {
    hook_fail(d, "ddp: packing a gradient into its bucket: %s", loom_last_error());
    return;
  }
  p->ready = true;
  if (++d->b[p->bucket].n_ready == d->b[p->bucket].n_params) launch_ready(d);
}

/* ---- creation ------------------------------------------------------------------- */

static loom_status check_options(const loom_ddp_options *o) {
  if (!(o->first_bucket_mib > 0 && o->first_bucket_mib <= 1 << 20) || !(o->bucket_mib > 0 && o->bucket_mib <= 1 << 20))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "ddp: bucket sizes must be > 0 MiB (got first %g, then %g)",
                          o->first_bucket_mib, o->bucket_mib);
  return LOOM_OK;
}

static void ddp_destroy(loom_ddp *d) {
  if (!d) return;
  for (int i = 0; i < d->n; i++) {
    ddp_param *p = &d->p[i];
    if (p->leaf && p->leaf->hook == ddp_hook && p->leaf->hook_user == p) loom_set_grad_hook(p->leaf, NULL, NULL);
    loom_tensor_release(p->leaf);
    loom_tensor_release(p->slot);
  }
  for (int i = 0; i < d->nb; i++) loom_tensor_release(d->b[i].buf);
  if (d->scaler) loom_amp_scaler_set_found_inf_reduce(d->scaler, NULL, NULL);
  loom_sys_free(d->p);
  loom_sys_free(d->b);
  loom_sys_free(d);
}

static loom_status build(loom_ddp *d) {
  int n = d->n;
  int64_t *numel = loom_sys_malloc((size_t)n * sizeof *numel), *offset = loom_sys_malloc((size_t)n * sizeof *offset);
  loom_dtype *dt = loom_sys_malloc((size_t)n * sizeof *dt);
  int *bucket = loom_sys_malloc((size_t)n * sizeof *bucket);
  loom_status st = numel && offset && dt && bucket ? LOOM_OK : loom_set_error(LOOM_ERR_OOM, "ddp: out of host memory");
  for (int i = 0; i < n && st == LOOM_OK; i++) {
    ddp_param *p = &d->p[i];
    p->d = d;
    p->index = i;
    p->master = loom_module_param(d->m, i);
    loom_tensor *copy = loom_amp_lowp_copy(p->master);
    p->leaf = loom_tensor_retain(copy ? copy : p->master);
    if (p->master->grad_fn || !p->master->requires_grad)
      st = loom_set_error(LOOM_ERR_INVALID_ARG, "ddp: parameter %d is not a leaf tensor that requires grad", i);
    else if (!loom_device_eq(p->master->storage->device, d->c->device)) {
      char b1[32], b2[32];
      st = loom_set_error(LOOM_ERR_DEVICE, "ddp: parameter %d is on %s but the communicator drives %s", i,
                          loom_device_str(p->master->storage->device, b1, 32), loom_device_str(d->c->device, b2, 32));
    } else if (!loom_dtype_is_float(p->leaf->dtype))
      st = loom_set_error(LOOM_ERR_DTYPE, "ddp: parameter %d is %s; only floating-point parameters are trained", i,
                          loom_dtype_name(p->leaf->dtype));
    numel[i] = loom_shape_numel(p->master->ndim, p->master->shape);
    dt[i] = d->o.reduce_in_fp32 ? LOOM_F32 : p->leaf->dtype;
  }
  if (st == LOOM_OK) {
    size_t first = (size_t)(d->o.first_bucket_mib * 1048576.0), cap = (size_t)(d->o.bucket_mib * 1048576.0);
    d->nb = loom_ddp_plan(n, numel, dt, first ? first : 1, cap ? cap : 1, bucket, offset);
    d->b = loom_sys_calloc((size_t)(d->nb ? d->nb : 1), sizeof *d->b);
    if (!d->b) st = loom_set_error(LOOM_ERR_OOM, "ddp: out of host memory");
  }
  for (int k = 0; k < d->nb && st == LOOM_OK; k++) d->b[k].lo = n, d->b[k].hi = -1;
  for (int i = 0; i < n && st == LOOM_OK; i++) {
    ddp_bucket *b = &d->b[bucket[i]];
    d->p[i].bucket = bucket[i];
    b->n_params++;
    b->numel += numel[i];
    b->dtype = dt[i];
    if (i < b->lo) b->lo = i;
    if (i > b->hi) b->hi = i;
  }
  for (int k = 0; k < d->nb && st == LOOM_OK; k++) {
    ddp_bucket *b = &d->b[k];
    int64_t len = b->numel > 0 ? b->numel : 1;
    b->buf = loom_tensor_alloc_raw(1, &len, b->dtype, d->c->device);
    if (!b->buf || loom_fill_(b->buf, 0.0) != LOOM_OK) st = loom_last_status();
  }
  for (int i = 0; i < n && st == LOOM_OK; i++) {
    ddp_param *p = &d->p[i];
    loom_tensor *buf = d->b[p->bucket].buf;
    int64_t strides[LOOM_MAX_DIMS];
    loom_contiguous_strides(p->master->ndim, p->master->shape, strides);
    p->slot = loom_tensor_new_header(buf->storage, offset[i], buf->dtype, p->master->ndim, p->master->shape, strides);
    if (!p->slot) st = loom_last_status();
  }
  loom_sys_free(numel);
  loom_sys_free(offset);
  loom_sys_free(dt);
  loom_sys_free(bucket);
  return st;
}

loom_ddp *loom_ddp_new(loom_module *m, loom_comm *c, const loom_ddp_options *opt) {
  if (!m || !c) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "ddp_new: model and communicator must not be NULL");
    return NULL;
  }
  loom_ddp_options o;
  loom_ddp_options_init(&o);
  if (LOOM_STRUCT_IN("ddp_new", loom_ddp_options, &o, opt) != LOOM_OK) return NULL;
  if (check_options(&o) != LOOM_OK || loom_comm_failed_error(c, "ddp_new") != LOOM_OK) return NULL;
  int n = loom_module_num_params(m);
  if (n < 1) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "ddp_new: the model has no parameters");
    return NULL;
  }
  loom_ddp *d = loom_sys_calloc(1, sizeof *d);
  if (d) d->p = loom_sys_calloc((size_t)n, sizeof *d->p);
  if (!d || !d->p) {
    loom_sys_free(d);
    loom_set_error(LOOM_ERR_OOM, "ddp_new: out of host memory");
    return NULL;
  }
  d->m = m;
  d->c = c;
  d->o = o;
  d->n = n;
  d->sync = true;
  bool prev = loom_set_grad_enabled(false);
  loom_status st = build(d);
  if (st == LOOM_OK) st = check_same_model(d);
  if (st == LOOM_OK) st = broadcast_list(d, true);
  if (st == LOOM_OK && o.broadcast_buffers) st = broadcast_list(d, false);
  if (st == LOOM_OK) st = loom_module_refresh_lowp(m);  /* the copies follow the broadcast masters */
  loom_set_grad_enabled(prev);
  for (int i = 0; i < n && st == LOOM_OK; i++) st = loom_set_grad_hook(d->p[i].leaf, ddp_hook, &d->p[i]);
  if (st != LOOM_OK) {
    loom_error_prefix("ddp_new");
    ddp_destroy(d);
    return NULL;
  }
  d->stats.struct_size = sizeof d->stats;
  loom_log_msg(LOOM_LOG_INFO, "ddp: rank %d of %d, %d parameters in %d bucket%s (%s)", c->rank, c->size, n, d->nb,
               d->nb == 1 ? "" : "s", loom_dtype_name(d->b[0].dtype));
  return d;
}

void loom_ddp_free(loom_ddp *d) {
  if (!d) return;
  if (d->in_step && !atomic_load(&d->c->failed)) loom_comm_synchronize(d->c);  /* buckets in flight */
  ddp_destroy(d);
}

loom_status loom_ddp_set_sync(loom_ddp *d, bool sync) {
  if (!d) return loom_set_error(LOOM_ERR_INVALID_ARG, "ddp_set_sync: ddp is NULL");
  if (d->in_step && !sync)
    return loom_set_error(LOOM_ERR_STATE, "ddp_set_sync: a synchronizing backward ran; call loom_ddp_sync before turning "
                          "sync off");
  d->sync = sync;
  return LOOM_OK;
}

bool loom_ddp_get_sync(const loom_ddp *d) { return d ? d->sync : false; }

/* ---- the end of a step --------------------------------------------------------------- */

static void reset_step(loom_ddp *d) {
  for (int i = 0; i < d->n; i++) d->p[i].ready = false;
  for (int k = 0; k < d->nb; k++) d->b[k].n_ready = 0, d->b[k].launched = false;
  d->next_launch = 0;
  d->in_step = false;
  d->hook_status = LOOM_OK;
}

static void account(loom_ddp *d, double t_sync, double t_done) {
  d->stats.steps++;
  d->stats.exposed_seconds += t_done - t_sync;
  for (int k = 0; k < d->nb; k++) {
    loom_comm_times *t = &d->b[k].times;
    if (!(t->end > 0 && t->end >= t->start)) continue;
    double busy = t->end - t->start;
    double hidden = (t->end < t_sync ? t->end : t_sync) - t->start;
    if (hidden < 0) hidden = 0;
    d->stats.comm_seconds += busy;
    d->stats.hidden_seconds += hidden;
    if (k != d->nb - 1) {
      d->stats.comm_seconds_but_last += busy;
      d->stats.hidden_seconds_but_last += hidden;
    }
  }
}

loom_status loom_ddp_sync(loom_ddp *d) {
  if (!d) return loom_set_error(LOOM_ERR_INVALID_ARG, "ddp_sync: ddp is NULL");
  if (!d->sync) return LOOM_OK;
  double t_sync = loom_dist_now();
  loom_status st = LOOM_OK;
  if (d->hook_status != LOOM_OK) st = loom_set_error(d->hook_status, "%s", d->hook_msg);
  for (int i = 0; i < d->n && st == LOOM_OK; i++) {
    ddp_param *p = &d->p[i];
    loom_tensor *copy = loom_amp_lowp_copy(p->master);
    if ((copy ? copy : p->master) != p->leaf)
      st = loom_set_error(LOOM_ERR_STATE, "ddp_sync: the precision policy of the model changed after loom_ddp_new; set "
                          "it first, then create the ddp");
  }
  /* Parameters whose hook did not fire (no gradient on this rank, or only
   * from no_sync micro-batches): their current gradient, or zeros. */
  bool prev = loom_set_grad_enabled(false);
  for (int i = 0; i < d->n && st == LOOM_OK; i++) {
    ddp_param *p = &d->p[i];
    if (p->ready) continue;
    st = pack(d, p, p->leaf->grad);
    if (st == LOOM_OK) {
      p->ready = true;
      d->b[p->bucket].n_ready++;
    }
  }
  loom_set_grad_enabled(prev);
  if (st == LOOM_OK) {
    launch_ready(d);
    if (d->hook_status != LOOM_OK) st = loom_set_error(d->hook_status, "%s", d->hook_msg);
  }
  if (st == LOOM_OK) st = loom_comm_wait(d->c);  /* the optimizer's stream waits for the last bucket */
  double t_done = loom_dist_now();
  if (st == LOOM_OK) account(d, t_sync, t_done);
  else {
    /* Whatever was launched must not be left half-done: the communicator
     * stays usable only if every rank failed the same way, so fail it. */
    if (d->next_launch > 0 && !atomic_load(&d->c->failed)) {
      char msg[600];
      snprintf(msg, sizeof msg, "%s", loom_last_error());
      loom_comm_abort(d->c);
      loom_set_error(st, "%s", msg);
    }
  }
  reset_step(d);
  return st;
}

/* ---- the loss scaler's found-inf ----------------------------------------------------- */

/* The CUDA scaler keeps its flag in device memory: MAX-reduce a copy of it
 * in stream order (compute -> communication stream -> compute), no host wait.
 * NOTE: never run (no GPU here). */
static loom_status reduce_found_inf_device(loom_ddp *d, int32_t *found_dev, loom_device dev) {
  if (!loom_device_eq(dev, d->c->device))
    return loom_set_error(LOOM_ERR_DEVICE, "loss scaler: its gradients are on another device than the communicator's");
  int64_t one = 1;
  loom_scope_begin();
  loom_tensor *flag_view = loom_tensor_view_raw(found_dev, LOOM_I32, 1, &one, dev);
  loom_tensor *flag = loom_tensor_alloc_raw(1, &one, LOOM_I32, dev);
  loom_status st = flag_view && flag ? loom_copy_(flag, flag_view) : loom_last_status();
  if (st == LOOM_OK) st = loom_comm_all_reduce(d->c, flag, LOOM_REDUCE_MAX);
  if (st == LOOM_OK) st = loom_comm_wait(d->c);
  if (st == LOOM_OK) st = loom_copy_(flag_view, flag);
  loom_tensor_release(flag_view);
  loom_tensor_release(flag);
  loom_scope_end();
  if (st != LOOM_OK) return loom_error_prefix("loss scaler: agreeing found-inf across ranks");
  return LOOM_OK;
}

static loom_status reduce_found_inf(void *user, bool *found_inf, int32_t *found_dev, loom_device dev) {
  loom_ddp *d = user;
  if (found_dev) return reduce_found_inf_device(d, found_dev, dev);
  int32_t v = *found_inf ? 1 : 0;
  int64_t one = 1;
  loom_scope_begin();
  loom_tensor *t = loom_from_host(&v, 1, &one, LOOM_I32, d->c->device);
  loom_status st = t ? loom_comm_all_reduce(d->c, t, LOOM_REDUCE_MAX) : loom_last_status();
  if (st == LOOM_OK) st = loom_comm_synchronize(d->c);
  if (st == LOOM_OK) st = loom_to_host(t, &v, sizeof v, LOOM_I32);
  loom_scope_end();
  if (st != LOOM_OK) return loom_error_prefix("loss scaler: agreeing found-inf across ranks");
  *found_inf = v != 0;
  return LOOM_OK;
}

loom_status loom_ddp_attach_scaler(loom_ddp *d, loom_grad_scaler *s) {
  if (!d) return loom_set_error(LOOM_ERR_INVALID_ARG, "ddp_attach_scaler: ddp is NULL");
  if (d->scaler && d->scaler != s) loom_amp_scaler_set_found_inf_reduce(d->scaler, NULL, NULL);
  d->scaler = s;
  if (s) loom_amp_scaler_set_found_inf_reduce(s, reduce_found_inf, d);
  return LOOM_OK;
}

/* ---- introspection ------------------------------------------------------------------ */

int loom_ddp_num_buckets(const loom_ddp *d) { return d ? d->nb : 0; }

loom_status loom_ddp_bucket_get(const loom_ddp *d, int i, loom_ddp_bucket_info *out) {
  if (!d || !out) return loom_set_error(LOOM_ERR_INVALID_ARG, "ddp_bucket_get: ddp and out must not be NULL");
  if (i < 0 || i >= d->nb)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "ddp_bucket_get: bucket %d of %d", i, d->nb);
  const ddp_bucket *b = &d->b[i];
  loom_ddp_bucket_info info = {sizeof info, b->n_params, b->hi, b->lo, b->numel,
                               b->numel * (int64_t)loom_dtype_size(b->dtype), b->dtype};
  return LOOM_STRUCT_OUT("ddp_bucket_get", loom_ddp_bucket_info, out, &info);
}

loom_status loom_ddp_stats_get(const loom_ddp *d, loom_ddp_stats *out) {
  if (!d || !out) return loom_set_error(LOOM_ERR_INVALID_ARG, "ddp_stats_get: ddp and out must not be NULL");
  loom_ddp_stats s = d->stats;
  s.struct_size = sizeof s;
  return LOOM_STRUCT_OUT("ddp_stats_get", loom_ddp_stats, out, &s);
}

void loom_ddp_stats_reset(loom_ddp *d) {
  if (!d) return;
  memset(&d->stats, 0, sizeof d->stats);
  d->stats.struct_size = sizeof d->stats;
}

/* ---- learning rate ------------------------------------------------------------------- */

loom_lr_schedule loom_lr_scale_for_world(loom_lr_schedule s, int world_size, int64_t warmup_steps) {
  double k = world_size > 1 ? (double)world_size : 1.0;
  s.base_lr *= k;
  s.min_lr *= k;
  if (warmup_steps > s.warmup_steps) s.warmup_steps = warmup_steps;
  return s;
}
