/* dispatch.c — running an op: NULL propagation, device and dtype checks, the
 * shape rule, output allocation, the device's kernel, autograd recording
 * (through the recorder hook, record.h), and handing results to the
 * ownership rule. */
#include <stdio.h>

#include "core/capture.h"
#include "ops/deterministic.h"
#include "ops/flops.h"
#include "ops/op.h"
#include "ops/record.h"
#include "prof/prof.h"

static loom_status check_inputs(const loom_op_def *d, loom_op_args *a) {
  for (int k = 0; k < d->n_in; k++) {
    if (!a->in[k]) {
      /* An earlier call failed and returned NULL: keep its code and message,
       * which name the root cause, so a one-line expression is checked once. */
      if (loom_last_status() == LOOM_OK)
        return loom_set_error(LOOM_ERR_NULL_INPUT, "%s: input %d is NULL", d->name, k);
      return loom_last_status();
    }
  }
  loom_device dev = a->in[0]->storage->device;
  for (int k = 1; k < a->n_in; k++) {
    if (!a->in[k]) continue;
    loom_device dk = a->in[k]->storage->device;
    if (!loom_device_eq(dev, dk)) {
      char b1[32], b2[32];
      return loom_set_error(LOOM_ERR_DEVICE, "%s: input 0 is on %s but input %d is on %s; move them to one device first",
                            d->name, loom_device_str(dev, b1, 32), k, loom_device_str(dk, b2, 32));
    }
    if (d->same_dtype && a->in[k]->dtype != a->in[0]->dtype)
      return loom_set_error(LOOM_ERR_DTYPE, "%s: input 0 is %s but input %d is %s; cast one of them first", d->name,
                            loom_dtype_name(a->in[0]->dtype), k, loom_dtype_name(a->in[k]->dtype));
  }
  return LOOM_OK;
}

/* The op's kernel for dev, or LOOM_ERR_UNSUPPORTED naming op and device. */
static loom_status kernel_for(const loom_op_def *d, loom_device dev, loom_kernel_fn *out) {
  *out = dev.kind == LOOM_CPU ? d->cpu : d->cuda;
  if (*out) return LOOM_OK;
  char b[32];
  return loom_set_error(LOOM_ERR_UNSUPPORTED, "%s: no kernel for device %s in this build", d->name,
                        loom_device_str(dev, b, 32));
}

static loom_status run(loom_op_id id, loom_op_args *a, bool record) {
  const loom_op_def *d = loom_op_get(id);
  if (!d || !d->infer) return loom_set_error(LOOM_ERR_INTERNAL, "op %d is not runnable", (int)id);
  LOOM_TRY(loom_deterministic_check());  /* a bad LOOM_DETERMINISTIC fails every op */
  for (int k = 0; k < LOOM_OP_MAX_OUT; k++) a->out[k] = NULL;
  a->n_out = 0;
  if (a->n_in < d->n_in) a->n_in = d->n_in;
  LOOM_TRY(check_inputs(d, a));
  loom_out_spec spec[LOOM_OP_MAX_OUT];
  for (int k = 0; k < LOOM_OP_MAX_OUT; k++) spec[k].ndim = -1, spec[k].format = LOOM_FORMAT_NCHW;
  LOOM_TRY(d->infer(d->name, a, spec));
  loom_device dev = a->in[0]->storage->device;
  loom_kernel_fn kernel;
  LOOM_TRY(kernel_for(d, dev, &kernel));
  for (int k = 0; k < d->n_out; k++) {
    if (spec[k].ndim < 0) continue;
    a->out[k] = loom_tensor_alloc_raw(spec[k].ndim, spec[k].shape, spec[k].dtype, dev);
    if (!a->out[k]) goto fail;
    if (spec[k].format == LOOM_FORMAT_NHWC && spec[k].ndim == 4) loom_set_channels_last_strides(a->out[k]);
  }
  a->n_out = d->n_out;
  if (kernel(a) != LOOM_OK) {
    if (loom_last_status() != LOOM_OK) loom_error_prefix("%s", d->name);
    goto fail;
  }
  if (record && loom_op_record(id, a) != LOOM_OK) goto fail;
  return LOOM_OK;
fail:
  for (int k = 0; k < LOOM_OP_MAX_OUT; k++) {
    loom_tensor_release(a->out[k]);
    a->out[k] = NULL;
  }
  return loom_last_status() != LOOM_OK ? loom_last_status() : LOOM_ERR_INTERNAL;
}

/* run() with the op named for graph capture's messages (core/capture.h). */
static loom_status run_named(loom_op_id id, loom_op_args *a, bool record) {
  const loom_op_def *d = loom_op_get(id);
  const char *prev = loom_capture_set_op(d ? d->name : NULL);
  loom_status st = run(id, a, record);
  loom_capture_set_op(prev);
  return st;
}

static loom_status run_into(loom_op_id id, loom_op_args *a) {
  const loom_op_def *d = loom_op_get(id);
  if (!d) return loom_set_error(LOOM_ERR_INTERNAL, "op %d is not runnable", (int)id);
  LOOM_TRY(loom_deterministic_check());
  for (int k = 0; k < d->n_in; k++)
    if (!a->in[k]) return loom_set_error(LOOM_ERR_NULL_INPUT, "%s: input %d is NULL", d->name, k);
  loom_device dev = a->in[0]->storage->device;
  loom_kernel_fn kernel;
  LOOM_TRY(kernel_for(d, dev, &kernel));
  const char *prev = loom_capture_set_op(d->name);
  loom_status st = kernel(a);
  loom_capture_set_op(prev);
  return st;
}

/* The op inside a profiler / NVTX range (and as the allocation site of its
 * outputs). Out of line: with the profiler off, an op pays only the branch
 * that leads here. */
__attribute__((noinline)) static loom_status run_observed(loom_op_id id, loom_op_args *a, bool into) {
  const loom_op_def *d = loom_op_get(id);
  loom_prof_range r = LOOM_PROF_RANGE_INIT;
  if (d && a->in[0]) loom_prof_begin_device(&r, LOOM_PROF_CAT_OP, d->name, a->in[0]->storage->device);
  else loom_prof_begin(&r, LOOM_PROF_CAT_OP, d ? d->name : "op", NULL);
  loom_status st = into ? run_into(id, a) : run_named(id, a, true);
  loom_prof_end(&r, st == LOOM_OK ? loom_op_flops(id, a) : 0.0, 0);
  return st;
}

loom_tensor *loom_op_run(loom_op_id id, loom_op_args *a) {
  loom_status st = LOOM_PROF_ACTIVE() ? run_observed(id, a, false) : run_named(id, a, true);
  if (st != LOOM_OK) return NULL;
  /* An output the open scope cannot record dies (adopt releases it), and so
   * do the ones after it: the op fails as a whole. */
  bool ok = true;
  for (int k = 0; k < LOOM_OP_MAX_OUT; k++) {
    if (!a->out[k]) continue;
    if (!ok) loom_tensor_release(a->out[k]);
    else if (!loom_tensor_adopt(a->out[k])) ok = false;
    if (!ok) a->out[k] = NULL;
  }
  return ok ? a->out[0] : NULL;
}

loom_status loom_op_run_into(loom_op_id id, loom_op_args *a) {
  return LOOM_PROF_ACTIVE() ? run_observed(id, a, true) : run_into(id, a);
}
