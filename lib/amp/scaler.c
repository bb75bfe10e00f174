/* scaler.c — the dynamic loss scaler: scale the loss, unscale and check all
 * gradients in one pass, skip the optimizer step on inf/NaN, and move the
 * scale (×growth after growth_interval good steps, ×backoff on overflow,
 * within [min_scale, max_scale]). The state machine is PyTorch GradScaler's,
 * with explicit bounds and counters. The scaler works on parameter lists;
 * lib/optim/scaled_step.c runs a step of an optimizer between
 * loom_amp_scaler_step_begin and _end.
 *
 * On a GPU the state lives on the device (loom_amp_scaler_dev, scaler.cu),
 * so a training step never waits for the GPU: the loss is multiplied by the
 * device copy of the scale, the unscale kernel reads the inverse scale and
 * ORs the found-inf flag there, the optimizer kernels read that flag and
 * skip themselves, and one more tiny kernel moves the scale. The host fields
 * below are then a mirror, refreshed by a read-back only when the program
 * asks (the getters, a non-NULL *skipped / *found_inf, state_save). The
 * kernels repeat the host's double arithmetic, so both devices follow the
 * same scale sequence; the CPU path is exactly what it was. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp_internal.h"
#include "core/struct_size.h"
#include "loom/ops.h"
#include "prof/prof.h"
#include "core/sys.h"
#ifdef LOOM_HAVE_CUDA
#include "alloc/alloc.h"
#include "device/device_internal.h"
#include "core/capture.h"
#include "device/sync_stats.h"
#include "ops/cuda/dev_table.h"
#endif

struct loom_grad_scaler {
  loom_scaler_options opt;
  double scale;
  int64_t good_steps;
  int64_t steps;
  int64_t steps_skipped;
  int64_t last_overflow_step;
  /* unscale() ran since the last step(): its verdict, for step(). */
  bool unscaled;
  bool found_inf;
  const void *unscaled_for;  /* the owner of the parameters unscaled */
  /* lib/dist: agrees found_inf across ranks (NULL: one process). */
  loom_amp_found_inf_reduce reduce_found_inf;
  void *reduce_user;
#ifdef LOOM_HAVE_CUDA
  /* The device state (NULL until the scaler first meets a CUDA tensor) and
   * whether the fields above lag behind it. */
  loom_device dev;
  loom_amp_scaler_dev *d;
  bool mirror_stale;
  int64_t synced_replays;  /* loom_graph_replay_count() when the mirror was last current */
  struct loom_dev_table *unscale_table;
#endif
};

void loom_amp_scaler_set_found_inf_reduce(loom_grad_scaler *s, loom_amp_found_inf_reduce fn, void *user) {
  if (!s) return;
  s->reduce_found_inf = fn;
  s->reduce_user = fn ? user : NULL;
}

void loom_scaler_options_init(loom_scaler_options *o) {
  if (!o) return;
  *o = (loom_scaler_options){sizeof *o, 65536.0, 2.0, 0.5, 2000, 1.0, 16777216.0, true};
}

static loom_status check_options(const loom_scaler_options *o) {
  if (!(o->init_scale > 0) || !isfinite(o->init_scale))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler: init_scale must be finite and > 0 (got %g)", o->init_scale);
  if (!(o->growth_factor > 1) || !isfinite(o->growth_factor))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler: growth_factor must be finite and > 1 (got %g)", o->growth_factor);
  if (!(o->backoff_factor > 0 && o->backoff_factor < 1))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler: backoff_factor must be in (0, 1) (got %g)", o->backoff_factor);
  if (o->growth_interval < 1)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler: growth_interval must be >= 1 (got %lld)",
                          (long long)o->growth_interval);
  if (!(o->min_scale > 0) || !(o->max_scale >= o->min_scale) || !isfinite(o->max_scale))
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "scaler: need 0 < min_scale <= max_scale < inf (got min %g, max %g)", o->min_scale, o->max_scale);
  if (o->init_scale < o->min_scale || o->init_scale > o->max_scale)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler: init_scale %g is outside [min_scale %g, max_scale %g]",
                          o->init_scale, o->min_scale, o->max_scale);
  return LOOM_OK;
}

loom_grad_scaler *loom_scaler_new(const loom_scaler_options *opt) {
  loom_scaler_options o;
  loom_scaler_options_init(&o);
  if (LOOM_STRUCT_IN("scaler", loom_scaler_options, &o, opt) != LOOM_OK) return NULL;
  if (check_options(&o) != LOOM_OK) return NULL;
  loom_grad_scaler *s = loom_sys_calloc(1, sizeof *s);
  if (!s) {
    loom_set_error(LOOM_ERR_OOM, "scaler: out of host memory");
    return NULL;
  }
  s->opt = o;
  s->scale = o.enabled ? o.init_scale : 1.0;
  s->last_overflow_step = -1;
  return s;
}

void loom_scaler_free(loom_grad_scaler *s) {
  if (!s) return;
#ifdef LOOM_HAVE_CUDA
  if (s->d) loom_alloc_free(s->dev, s->d);
  loom_dev_table_free(s->unscale_table);
#endif
  loom_sys_free(s);
}

#ifdef LOOM_HAVE_CUDA
/* ---- the device state ------------------------------------------------------------ */

static loom_amp_scaler_dev host_image(const loom_grad_scaler *s) {
  loom_amp_scaler_dev h;
  memset(&h, 0, sizeof h);
  h.scale = s->scale;
  h.scale_f = (float)s->scale;
  h.inv_scale = (float)(1.0 / s->scale);
  h.good_steps = s->good_steps;
  h.steps = s->steps;
  h.steps_skipped = s->steps_skipped;
  h.last_overflow_step = s->last_overflow_step;
  return h;
}

static loom_status push_state(loom_grad_scaler *s) {
  /* Inside a capture the upload would only be recorded, and replayed from a
   * stack buffer long gone: the scaler's device state is set eagerly. */
  if (loom_capture_current())
    return loom_set_error(LOOM_ERR_STATE, "scaler: its state cannot be uploaded to cuda:%d during graph capture (first "
                          "use on the device, or a restored state); use the scaler in one eager step before "
                          "loom_graph_capture_begin", s->dev.index);
  loom_amp_scaler_dev h = host_image(s);
  loom_stream *ls = loom_stream_current(s->dev);
  if (!ls) return loom_last_status();
  /* From pageable memory: staged before the call returns. */
  LOOM_CUDA_CHECK(cudaMemcpyAsync(s->d, &h, sizeof h, cudaMemcpyHostToDevice, (cudaStream_t)loom_stream_native(ls)));
  s->synced_replays = loom_graph_replay_count();
  return LOOM_OK;
}

/* The device state for dev, made from the host one on first use. */
static loom_status on_device(loom_grad_scaler *s, loom_device dev) {
  if (s->d) {
    if (!loom_device_eq(s->dev, dev))
      return loom_set_error(LOOM_ERR_DEVICE, "scaler: used on cuda:%d before, now on another device; use one scaler "
                            "per device", s->dev.index);
    return LOOM_OK;
  }
  if (loom_capture_current())
    return loom_set_error(LOOM_ERR_STATE, "scaler: its first use on cuda:%d cannot be captured (it uploads the "
                          "scaler's device state); use the scaler in one eager step before loom_graph_capture_begin",
                          dev.index);
  loom_stream *ls = loom_stream_current(dev);
  if (!ls) return loom_last_status();
  s->dev = dev;
  /* The scaler's, not the graph's: from the device's own pool. */
  LOOM_TRY(loom_alloc_malloc_uncaptured(dev, sizeof *s->d, ls, (void **)&s->d));
  loom_status st = push_state(s);
  if (st != LOOM_OK) {
    loom_alloc_free(dev, s->d);
    s->d = NULL;
  }
  return st;
}

/* Bring the host mirror up to date (a read-back: the host waits). */
static loom_status pull_state(const loom_grad_scaler *cs, loom_amp_scaler_dev *out) {
  loom_grad_scaler *s = (loom_grad_scaler *)cs;  /* the mirror is a cache */
  loom_amp_scaler_dev h;
  LOOM_TRY(loom_cuda_set_device(s->dev.index));
  loom_stream *ls = loom_stream_current(s->dev);
  if (!ls) return loom_last_status();
  cudaStream_t cs_ = (cudaStream_t)loom_stream_native(ls);
  loom_sync_count(LOOM_SYNC_D2H);
  LOOM_CUDA_CHECK(cudaMemcpyAsync(&h, s->d, sizeof h, cudaMemcpyDeviceToHost, cs_));
  loom_sync_count(LOOM_SYNC_STREAM);
  LOOM_CUDA_CHECK(cudaStreamSynchronize(cs_));
  s->scale = h.scale;
  s->good_steps = h.good_steps;
  s->steps = h.steps;
  s->steps_skipped = h.steps_skipped;
  s->last_overflow_step = h.last_overflow_step;
  s->mirror_stale = false;
  s->synced_replays = loom_graph_replay_count();
  if (out) *out = h;
  return LOOM_OK;
}

/* Stale: the device moved on (a step ran there) or graph replays did,
 * which the host never sees. */
static bool stale(const loom_grad_scaler *s) {
  return s->d && (s->mirror_stale || s->synced_replays != loom_graph_replay_count());
}

static void refresh(const loom_grad_scaler *s) {
  if (s && stale(s)) (void)pull_state(s, NULL);
}

static void no_release(void *data, void *ctx) {
  (void)data;
  (void)ctx;
}
#else
static void refresh(const loom_grad_scaler *s) { (void)s; }
#endif

loom_tensor *loom_scaler_scale(loom_grad_scaler *s, loom_tensor *loss) {
  if (!s) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "scaler_scale: scaler is NULL");
    return NULL;
  }
  if (!loss) return NULL;
#ifdef LOOM_HAVE_CUDA
  loom_device dev = loss->storage->device;
  if (s->opt.enabled && dev.kind == LOOM_CUDA && loom_device_is_real_cuda(dev)) {
    if (on_device(s, dev) != LOOM_OK) return NULL;
    if (loss->dtype == LOOM_F32) {
      /* loss * scale with the scale read on the device: the same f32
       * product as mul_scalar's, and autograd carries it back the same way. */
      loom_tensor *sv = loom_tensor_wrap(&s->d->scale_f, sizeof(float), dev, 0, NULL, LOOM_F32, no_release, NULL);
      return sv ? loom_mul(loss, sv) : NULL;
    }
    /* (A low-precision loss: the host needs the scale, which waits; and a
     * graph would bake this step's scale into every replay.) */
    loom_capture_note_unsafe("loss scaling of a low-precision loss (the scale, which moves on the device, would be "
                             "baked into the graph; compute the loss in f32)");
    if (stale(s) && pull_state(s, NULL) != LOOM_OK) return NULL;
  }
#endif
  /* mul_scalar is recorded, so backward multiplies d(loss) by the scale. */
  return loom_mul_scalar(loss, s->scale);
}

static loom_status unscale_run(loom_grad_scaler *s, loom_tensor *const *params, int n, loom_device dev,
                               const void *owner) {
#ifdef LOOM_HAVE_CUDA
  if (dev.kind == LOOM_CUDA && loom_device_is_real_cuda(dev)) {
    /* Scale and verdict stay on the device (found_inf is not known here). */
    LOOM_TRY(on_device(s, dev));
    LOOM_TRY(loom_amp_unscale_grads_device(params, n, &s->d->inv_scale, &s->d->found_inf, &s->unscale_table));
    if (s->reduce_found_inf) LOOM_TRY(s->reduce_found_inf(s->reduce_user, NULL, &s->d->found_inf, dev));
    s->unscaled = true;
    s->found_inf = false;
    s->unscaled_for = owner;
    return LOOM_OK;
  }
#endif
  bool inf = false;
  LOOM_TRY(loom_amp_unscale_grads(params, n, (float)(1.0 / s->scale), true, &inf, NULL));
  if (s->reduce_found_inf) LOOM_TRY(s->reduce_found_inf(s->reduce_user, &inf, NULL, dev));
  s->unscaled = true;
  s->found_inf = inf;
  s->unscaled_for = owner;
  return LOOM_OK;
}

/* In a profiler / NVTX range (device-timed on the parameters' device). */
static loom_status unscale(loom_grad_scaler *s, loom_tensor *const *params, int n, loom_device dev, const void *owner) {
  loom_prof_range pr = LOOM_PROF_RANGE_INIT;
  if (LOOM_PROF_ACTIVE()) loom_prof_begin_device(&pr, LOOM_PROF_CAT_AMP, "unscale + inf check", dev);
  loom_status st = unscale_run(s, params, n, dev, owner);
  loom_prof_end(&pr, 0.0, 0);
  return st;
}

loom_status loom_amp_scaler_unscale(loom_grad_scaler *s, loom_tensor *const *params, int n, loom_device dev,
                                    const void *owner, bool *found_inf) {
  if (s->unscaled)
    return loom_set_error(LOOM_ERR_STATE, "scaler_unscale: already called since the last scaler_step; call it once per step");
  if (s->opt.enabled) LOOM_TRY(unscale(s, params, n, dev, owner));
  else {
#ifdef LOOM_HAVE_CUDA
    /* The scaler's own kernel table: a temporary one would be freed while a
     * graph being captured still points at it. */
    LOOM_TRY(loom_amp_unscale_grads(params, n, 1.0f, false, NULL, &s->unscale_table));
#else
    LOOM_TRY(loom_amp_unscale_grads(params, n, 1.0f, false, NULL, NULL));
#endif
    s->unscaled = true;
    s->found_inf = false;
    s->unscaled_for = owner;
  }
#ifdef LOOM_HAVE_CUDA
  if (found_inf && s->opt.enabled && s->d && dev.kind == LOOM_CUDA) {
    /* Asked for the verdict now: read it back (the host waits). */
    loom_amp_scaler_dev h;
    LOOM_TRY(pull_state(s, &h));
    s->found_inf = h.found_inf != 0;
  }
#endif
  if (found_inf) *found_inf = s->found_inf;
  return LOOM_OK;
}

static void update_scale(loom_grad_scaler *s, bool inf) {
  if (inf) {
    s->scale = fmax(s->scale * s->opt.backoff_factor, s->opt.min_scale);
    s->good_steps = 0;
    s->steps_skipped++;
    s->last_overflow_step = s->steps;
  } else if (++s->good_steps >= s->opt.growth_interval) {
    double next = s->scale * s->opt.growth_factor;
    s->scale = fmin(next, s->opt.max_scale);
    s->good_steps = 0;
  }
  s->steps++;
}

loom_status loom_amp_scaler_step_begin(loom_grad_scaler *s, loom_tensor *const *params, int n, loom_device dev,
                                       const void *owner, loom_amp_step *out) {
  if (s->unscaled && s->unscaled_for != owner) {
    s->unscaled = false;
    return loom_set_error(LOOM_ERR_STATE, "scaler_step: scaler_unscale ran for another optimizer; unscale and step the same one");
  }
  if (!s->opt.enabled) {
    s->unscaled = false;
    s->steps++;
    *out = (loom_amp_step){LOOM_AMP_STEP_PLAIN, false, NULL};  /* the step gathers the copies' gradients itself */
    return LOOM_OK;
  }
  if (!s->unscaled) {
    loom_status st = unscale(s, params, n, dev, owner);
    if (st != LOOM_OK) return st;
  }
#ifdef LOOM_HAVE_CUDA
  if (s->d && dev.kind == LOOM_CUDA && loom_device_is_real_cuda(dev)) {
    /* The optimizer kernels read found_inf and skip themselves; then the
     * scale moves on the device (_end). */
    s->unscaled = false;
    *out = (loom_amp_step){LOOM_AMP_STEP_DEVICE, false, &s->d->found_inf};
    return LOOM_OK;
  }
#endif
  /* The masters' gradients are unscaled f32 now: a plain fused step (which
   * also refreshes the low-precision copies) unless one is not finite. */
  *out = (loom_amp_step){LOOM_AMP_STEP_HOST, s->found_inf, NULL};
  s->unscaled = false;
  return LOOM_OK;
}

loom_status loom_amp_scaler_step_end(loom_grad_scaler *s, const loom_amp_step *step, bool *skipped) {
#ifdef LOOM_HAVE_CUDA
  if (step->kind == LOOM_AMP_STEP_DEVICE) {
    /* Nothing waits unless *skipped is wanted. */
    loom_amp_scaler_rule r = {s->opt.growth_factor, s->opt.backoff_factor, s->opt.min_scale, s->opt.max_scale,
                              s->opt.growth_interval};
    LOOM_TRY(loom_cuda_amp_scaler_update(s->dev, s->d, r));
    s->mirror_stale = true;
    if (skipped) {
      loom_amp_scaler_dev h;
      LOOM_TRY(pull_state(s, &h));
      *skipped = h.last_skipped != 0;
    }
    return LOOM_OK;
  }
#endif
  if (step->kind != LOOM_AMP_STEP_HOST) return LOOM_OK;
  update_scale(s, step->found_inf);
  if (skipped) *skipped = step->found_inf;
  return LOOM_OK;
}

/* On a GPU each getter first refreshes the mirror when the device moved on
 * (a host wait: ask between steps, not inside one). */
double loom_scaler_get_scale(const loom_grad_scaler *s) { refresh(s); return s ? s->scale : 0.0; }
int64_t loom_scaler_steps(const loom_grad_scaler *s) { refresh(s); return s ? s->steps : 0; }
int64_t loom_scaler_steps_skipped(const loom_grad_scaler *s) { refresh(s); return s ? s->steps_skipped : 0; }
int64_t loom_scaler_last_overflow_step(const loom_grad_scaler *s) { refresh(s); return s ? s->last_overflow_step : -1; }
int64_t loom_scaler_good_steps(const loom_grad_scaler *s) { refresh(s); return s ? s->good_steps : 0; }

loom_status loom_scaler_state_save(const loom_grad_scaler *s, loom_scaler_state *out) {
  if (!s || !out) return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler_state_save: scaler and out must not be NULL");
  LOOM_TRY(loom_struct_size_check("scaler_state_save", "loom_scaler_state", out->struct_size, sizeof *out));
#ifdef LOOM_HAVE_CUDA
  if (stale(s)) LOOM_TRY(pull_state(s, NULL));
#endif
  loom_scaler_state st = {sizeof st, s->scale, s->good_steps, s->steps, s->steps_skipped, s->last_overflow_step};
  return LOOM_STRUCT_OUT("scaler_state_save", loom_scaler_state, out, &st);
}

loom_status loom_scaler_state_restore(loom_grad_scaler *s, const loom_scaler_state *in) {
  if (!s || !in) return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler_state_restore: scaler and state must not be NULL");
  /* An older, smaller state leaves the fields it lacks as they are (the
   * host's view: nothing is read back from the device here). */
  loom_scaler_state cur = {sizeof cur, s->scale, s->good_steps, s->steps, s->steps_skipped, s->last_overflow_step};
  LOOM_TRY(LOOM_STRUCT_IN("scaler_state_restore", loom_scaler_state, &cur, in));
  in = &cur;
  if (!(in->scale > 0) || !isfinite(in->scale) || in->good_steps < 0 || in->steps < 0 || in->steps_skipped < 0 ||
      in->steps_skipped > in->steps || in->last_overflow_step < -1 || in->last_overflow_step >= in->steps)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "scaler_state_restore: the state is inconsistent (scale %g, steps %lld, "
                          "skipped %lld, last overflow %lld); was it saved by loom_scaler_state_save?",
                          in->scale, (long long)in->steps, (long long)in->steps_skipped, (long long)in->last_overflow_step);
  s->scale = in->scale;
  s->good_steps = in->good_steps;
  s->steps = in->steps;
  s->steps_skipped = in->steps_skipped;
  s->last_overflow_step = in->last_overflow_step;
  s->unscaled = false;
#ifdef LOOM_HAVE_CUDA
  if (s->d) {
    s->mirror_stale = false;
    return push_state(s);
  }
#endif
  return LOOM_OK;
}
