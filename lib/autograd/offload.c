/* offload.c — activation offload (loom_offload, see autograd.h): while a
 * marked region runs, every contiguous tensor an op saves for backward is
 * copied to host memory and the node keeps only that copy, so the device
 * copies die with the region's scope; backward copies them back to the
 * device a few nodes ahead of their use (engine.c calls
 * loom_offload_prefetch on the next nodes before running one).
 *
 * On CUDA devices the copies are asynchronous, on a copy stream of the
 * device, into pinned host memory: device -> host after the compute stream
 * has produced the tensor (event), with the device block and the pinned
 * buffer both marked as used by the copy stream so neither is reused early;
 * host -> device into a fresh block after the compute stream is done with
 * whatever used that block before (event), the compute stream waiting for
 * the copy (event) before the node runs. Nothing waits on the host. This
 * CUDA path has never run (no GPU on the development machines). On the CPU
 * the "host copy" is a second CPU buffer (synchronous memcpy): nothing is
 * saved, but the logic runs and is tested there. */
#include <stdint.h>
#include <string.h>

#include "alloc/alloc.h"
#include "autograd/node.h"
#include "core/teardown.h"
#include "device/device_internal.h"
#include "loom/autograd.h"
#include "tensor/tensor_internal.h"

#ifdef LOOM_HAVE_CUDA
#include <pthread.h>

static pthread_mutex_t g_copy_mu = PTHREAD_MUTEX_INITIALIZER;
static loom_stream *g_copy[LOOM_MAX_LOGICAL_GPUS];

/* The offload copy stream of a CUDA device (created on first use). */
static loom_stream *copy_stream(loom_device dev) {
  if (dev.index < 0 || dev.index >= LOOM_MAX_LOGICAL_GPUS) return NULL;
  pthread_mutex_lock(&g_copy_mu);
  if (!g_copy[dev.index] && loom_stream_create(dev, &g_copy[dev.index]) != LOOM_OK) g_copy[dev.index] = NULL;
  loom_stream *s = g_copy[dev.index];
  pthread_mutex_unlock(&g_copy_mu);
  return s;
}

/* loom_shutdown: the copy streams go (made again at the next offload). */
static loom_status copy_streams_teardown(void) {
  pthread_mutex_lock(&g_copy_mu);
  for (int i = 0; i < LOOM_MAX_LOGICAL_GPUS; i++) {
    loom_stream_free(g_copy[i]);
    g_copy[i] = NULL;
  }
  pthread_mutex_unlock(&g_copy_mu);
  return LOOM_OK;
}
LOOM_TEARDOWN(LOOM_LAYER_AUTOGRAD, copy_streams_teardown)

/* `after` waits (GPU-side) for the work queued on `before` so far. */
static loom_status order(loom_stream *before, loom_stream *after, loom_device dev) {
  loom_event *e = NULL;
  LOOM_TRY(loom_event_create(dev, &e));
  loom_status st = loom_event_record(e, before);
  if (st == LOOM_OK) st = loom_stream_wait_event(after, e);
  loom_event_free(e);
  return st;
}

static void pinned_release(void *data, void *ctx) {
  (void)ctx;
  loom_alloc_pinned_free(data);
}

static bool async_ok(loom_device dev) { return dev.kind == LOOM_CUDA && loom_device_is_real_cuda(dev); }

/* Device tensor t -> a new pinned host tensor (raw), copied on the copy
 * stream after the compute stream's work so far. */
static loom_tensor *to_host_async(loom_tensor *t) {
  loom_device dev = t->storage->device;
  size_t n = (size_t)loom_tensor_numel(t) * loom_dtype_size(t->dtype);
  loom_stream *cs = copy_stream(dev), *ks = loom_stream_current(dev);
  void *host = NULL;
  if (!cs || !ks || loom_alloc_pinned_malloc(n ? n : 1, &host) != LOOM_OK) return NULL;
  loom_tensor *h = loom_tensor_wrap(host, n ? n : 1, loom_cpu(), t->ndim, t->shape, t->dtype, pinned_release, NULL);
  if (!h) {
    loom_alloc_pinned_free(host);
    return NULL;
  }
  loom_tensor_retain(h);  /* ours, beside the open scope's reference */
  loom_status st = order(ks, cs, dev);
  if (st == LOOM_OK && n) {
    cudaError_t e = cudaMemcpyAsync(host, loom_tensor_ptr(t), n, cudaMemcpyDeviceToHost,
                                    (cudaStream_t)loom_stream_native(cs));
    if (e != cudaSuccess) st = loom_cuda_error(e, "cudaMemcpyAsync(offload to host)", __FILE__, __LINE__);
  }
  /* Neither buffer is reused before the copy has read / written it. */
  if (st == LOOM_OK) st = loom_alloc_record_stream(dev, t->storage->data, cs);
  if (st == LOOM_OK) st = loom_alloc_pinned_record_stream(host, cs);
  if (st != LOOM_OK) {
    loom_tensor_release(h);
    return NULL;
  }
  return h;
}

/* Pinned host tensor h -> a new device tensor on dev (raw); the compute
 * stream will wait for the copy. */
static loom_tensor *to_device_async(loom_tensor *h, loom_device dev) {
  size_t n = (size_t)loom_tensor_numel(h) * loom_dtype_size(h->dtype);
  loom_stream *cs = copy_stream(dev), *ks = loom_stream_current(dev);
  if (!cs || !ks) return NULL;
  loom_tensor *d = loom_tensor_alloc_raw(h->ndim, h->shape, h->dtype, dev);
  if (!d) return NULL;
  loom_status st = order(ks, cs, dev);  /* the block's previous users are done */
  if (st == LOOM_OK && n) {
    cudaError_t e = cudaMemcpyAsync(loom_tensor_ptr(d), loom_tensor_ptr(h), n, cudaMemcpyHostToDevice,
                                    (cudaStream_t)loom_stream_native(cs));
    if (e != cudaSuccess) st = loom_cuda_error(e, "cudaMemcpyAsync(offload back to the device)", __FILE__, __LINE__);
  }
  if (st == LOOM_OK) st = loom_alloc_pinned_record_stream(h->storage->data, cs);
  if (st == LOOM_OK) st = order(cs, ks, dev);  /* the node runs after the copy */
  if (st != LOOM_OK) {
    loom_tensor_release(d);
    return NULL;
  }
  return d;
}
#endif

static _Thread_local int tl_offload_depth;

int loom_offload_active(void) { return tl_offload_depth > 0; }

loom_tensor *loom_offload_to_host(loom_tensor *t) {
  if (!loom_tensor_is_contiguous(t)) return NULL;
#ifdef LOOM_HAVE_CUDA
  if (async_ok(t->storage->device)) return to_host_async(t);
#endif
  loom_tensor *h = loom_tensor_alloc_raw(t->ndim, t->shape, t->dtype, loom_cpu());
  if (!h) return NULL;
  loom_status st;
  if (t->storage->device.kind == LOOM_CPU) {
    memcpy(loom_tensor_ptr(h), loom_tensor_ptr(t), (size_t)loom_tensor_numel(t) * loom_dtype_size(t->dtype));
    st = LOOM_OK;
  } else {
    st = loom_copy_to_host_raw(t, loom_tensor_ptr(h));
  }
  if (st != LOOM_OK) {
    loom_tensor_release(h);
    return NULL;
  }
  return h;
}

/* Bring saved tensor *slot (a host copy) back to dev. */
static loom_status restore(loom_tensor **slot, unsigned *version, loom_device dev) {
  loom_tensor *h = *slot;
#ifdef LOOM_HAVE_CUDA
  if (async_ok(dev)) {
    loom_tensor *d = to_device_async(h, dev);
    if (!d) return loom_last_status() != LOOM_OK ? loom_last_status() : LOOM_ERR_INTERNAL;
    *version = atomic_load(&d->storage->version);
    loom_tensor_release(h);
    *slot = d;
    return LOOM_OK;
  }
#endif
  loom_tensor *d = loom_tensor_alloc_raw(h->ndim, h->shape, h->dtype, dev);
  if (!d) return loom_last_status();
  loom_status st = LOOM_OK;
  if (dev.kind == LOOM_CPU)
    memcpy(loom_tensor_ptr(d), loom_tensor_ptr(h), (size_t)loom_tensor_numel(h) * loom_dtype_size(h->dtype));
  else
    st = loom_copy_from_host_raw(d, loom_tensor_ptr(h));
  if (st != LOOM_OK) {
    loom_tensor_release(d);
    return st;
  }
  /* A changed host copy (nobody else can reach it) would be a bug: the
   * version check carries over to the device copy. */
  if (atomic_load(&h->storage->version) != *version) atomic_fetch_add(&d->storage->version, 1u);
  *version = atomic_load(&d->storage->version);
  loom_tensor_release(h);
  *slot = d;
  return LOOM_OK;
}

loom_status loom_offload_prefetch(loom_node *n) {
  if (!n->offloaded || n->freed) return LOOM_OK;
  for (int k = 0; k < LOOM_OP_MAX_IN; k++)
    if (n->offloaded & (1u << k)) {
      LOOM_TRY(restore(&n->saved_in[k], &n->saved_in_version[k], n->offload_dev));
      n->offloaded &= ~(1u << k);
    }
  for (int k = 0; k < LOOM_OP_MAX_OUT; k++)
    if (n->offloaded & (1u << (8 + k))) {
      LOOM_TRY(restore(&n->saved_out[k], &n->saved_out_version[k], n->offload_dev));
      n->offloaded &= ~(1u << (8 + k));
    }
  return LOOM_OK;
}

loom_tensor *loom_offload(loom_checkpoint_fn fn, void *ctx, int n, loom_tensor *const *inputs) {
  if (!fn || n < 0 || (n > 0 && !inputs)) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "offload: needs a function and its inputs");
    return NULL;
  }
  for (int k = 0; k < n; k++)
    if (!inputs[k]) {
      if (loom_last_status() == LOOM_OK) loom_set_error(LOOM_ERR_NULL_INPUT, "offload: input %d is NULL", k);
      return NULL;
    }
  if (!loom_is_grad_enabled()) return fn(ctx, n, inputs);
  tl_offload_depth++;
  loom_scope_begin();
  loom_tensor *y = fn(ctx, n, inputs);
  if (y) loom_keep(y);  /* the output stays; the region's intermediates go */
  loom_scope_end();
  tl_offload_depth--;
  if (!y) loom_error_prefix("offload");
  return y;
}
