/* batch_finder.c — loom_find_batch_size (see batch.h): doubling probes until
 * one runs out of memory, then bisection between the last size that fit and
 * the first that did not, then the margin. Each probe's allocations are
 * checked against what was allocated before it, so a probe that leaks on
 * the OOM path is reported rather than silently shrinking later answers. */
#include <string.h>

#include "core/error.h"
#include "core/struct_size.h"
#include "loom/alloc.h"
#include "loom/autograd.h"
#include "loom/ops.h"
#include "loom/batch.h"

void loom_batch_finder_options_init(loom_batch_finder_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->device = loom_cpu();
  o->start = 1;
  o->max = 65536;
  o->margin = 0.1;
  o->multiple_of = 1;
}

static int64_t allocated_now(loom_device dev) {
  loom_memory_stats st = {.struct_size = sizeof st};
  if (loom_memory_stats_get(dev, &st) != LOOM_OK) return -1;
  return st.allocated_bytes[0].current;
}

/* One probe: 1 fit, 0 out of memory, -1 error (set). */
static int probe_once(loom_batch_probe_fn probe, void *ctx, loom_device dev, int64_t b) {
  int64_t before = allocated_now(dev);
  loom_status st = probe(ctx, b);
  if (st != LOOM_OK && st != LOOM_ERR_OOM) {
    loom_error_prefix("find_batch_size: the probe at batch %lld failed", (long long)b);
    return -1;
  }
  if (st == LOOM_ERR_OOM) {
    loom_clear_error();
    if (loom_empty_cache(dev) != LOOM_OK) return -1;
  }
  int64_t after = allocated_now(dev);
  if (before >= 0 && after != before) {
    loom_set_error(LOOM_ERR_STATE, "find_batch_size: the probe at batch %lld %s and left %lld bytes allocated that "
                   "were not before it; open a scope in the probe and zero the gradients before returning",
                   (long long)b, st == LOOM_OK ? "fit" : "ran out of memory", (long long)(after - before));
    return -1;
  }
  return st == LOOM_OK;
}

loom_status loom_find_batch_size(loom_batch_probe_fn probe, void *ctx, const loom_batch_finder_options *o,
                                 int64_t *batch, int64_t *largest) {
  if (!probe || !batch) return loom_set_error(LOOM_ERR_INVALID_ARG, "find_batch_size: probe and batch must not be NULL");
  loom_batch_finder_options d;
  loom_batch_finder_options_init(&d);
  LOOM_TRY(LOOM_STRUCT_IN("find_batch_size", loom_batch_finder_options, &d, o));
  if (d.start < 1 || d.max < d.start || !(d.margin >= 0 && d.margin < 1) || d.multiple_of < 1)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "find_batch_size: need 1 <= start (%lld) <= max (%lld), margin %g in "
                          "[0, 1) and multiple_of %lld >= 1", (long long)d.start, (long long)d.max, d.margin,
                          (long long)d.multiple_of);
  LOOM_TRY(loom_device_check(d.device));
  /* Doubling: good = largest size known to fit, bad = smallest known not to. */
  int64_t good = 0, bad = 0;
  for (int64_t b = d.start;; b = b > d.max / 2 ? d.max : b * 2) {
    int r = probe_once(probe, ctx, d.device, b);
    if (r < 0) return loom_last_status();
    if (!r) {
      bad = b;
      break;
    }
    good = b;
    if (b == d.max) break;
  }
  if (good == 0) {
    char dn[32];
    return loom_set_error(LOOM_ERR_OOM, "find_batch_size: even batch %lld does not fit in %s's memory; use a smaller "
                          "model, checkpointing (loom_checkpoint) or a lower start", (long long)d.start,
                          loom_device_str(d.device, dn, sizeof dn));
  }
  /* Bisection between good (fits) and bad (does not). */
  while (bad && bad - good > 1) {
    int64_t mid = good + (bad - good) / 2;
    int r = probe_once(probe, ctx, d.device, mid);
    if (r < 0) return loom_last_status();
    if (r) good = mid;
    else bad = mid;
  }
  int64_t ans = (int64_t)((double)good * (1.0 - d.margin));
  ans = ans / d.multiple_of * d.multiple_of;
  if (ans < 1) ans = good < d.multiple_of ? good : d.multiple_of;
  if (ans > good) ans = good;
  *batch = ans;
  if (largest) *largest = good;
  return LOOM_OK;
}

loom_status loom_batch_probe_classifier(void *ctx, int64_t batch) {
  loom_classifier_probe probe = {0}, *c = &probe;
  if (ctx) LOOM_TRY(LOOM_STRUCT_IN("batch_probe_classifier", loom_classifier_probe, &probe, ctx));
  if (!ctx || !c->model || !c->opt || c->in_features < 1 || c->num_classes < 1)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "batch_probe_classifier: ctx must be a filled loom_classifier_probe");
  loom_scope_begin();
  int64_t xs[2] = {batch, c->in_features}, ys[1] = {batch};
  loom_tensor *x = loom_full(2, xs, 0.5, LOOM_F32, c->device);  /* no draw from the generator */
  loom_tensor *y = loom_zeros(1, ys, LOOM_I64, c->device);
  loom_tensor *loss = loom_cross_entropy(loom_module_forward(c->model, x), y);
  loom_status st = loss ? loom_backward(loss) : loom_last_status();
  loom_scope_end();
  loom_status z = loom_optimizer_zero_grad(c->opt);
  return st != LOOM_OK ? st : z;
}
