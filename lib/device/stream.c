/* stream.c — streams and events: synchronous on the CPU, CUDA streams and
 * events on GPUs, behind one interface. Each logical CUDA device (virtual
 * devices included) has its own current stream; fake GPUs (tests) behave
 * like the CPU. */
#include <pthread.h>
#include <stdlib.h>

#include "core/teardown.h"
#include "device/device_internal.h"
#include "device/sync_stats.h"
#include "core/sys.h"

#define LOOM_MAX_CUDA_DEVICES 64

static loom_stream g_cpu_stream = {{LOOM_CPU, 0}, NULL, 0};
static loom_stream g_cuda_streams[LOOM_MAX_CUDA_DEVICES];
static int g_cuda_stream_init[LOOM_MAX_CUDA_DEVICES];
static pthread_mutex_t g_stream_lock = PTHREAD_MUTEX_INITIALIZER;

loom_stream *loom_stream_current(loom_device dev) {
  if (loom_device_check(dev) != LOOM_OK) return NULL;
  if (dev.kind == LOOM_CPU) return &g_cpu_stream;
  if (dev.index >= LOOM_MAX_CUDA_DEVICES) {
    loom_set_error(LOOM_ERR_DEVICE, "cuda:%d: loom supports at most %d CUDA devices", dev.index, LOOM_MAX_CUDA_DEVICES);
    return NULL;
  }
  pthread_mutex_lock(&g_stream_lock);
  loom_stream *s = &g_cuda_streams[dev.index];
  if (!g_cuda_stream_init[dev.index]) {
    s->device = dev;
    s->owned = 0;
    s->native = NULL;
#ifdef LOOM_HAVE_CUDA
    cudaStream_t cs = NULL;
    if (loom_device_is_real_cuda(dev) && (loom_cuda_set_device(dev.index) != LOOM_OK ||
        cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess)) {
      pthread_mutex_unlock(&g_stream_lock);
      loom_set_error(LOOM_ERR_CUDA, "cuda:%d: could not create the compute stream", dev.index);
      return NULL;
    }
    s->native = cs;
#endif
    g_cuda_stream_init[dev.index] = 1;
  }
  pthread_mutex_unlock(&g_stream_lock);
  return s;
}

/* loom_shutdown, first: every GPU loom made a compute stream on finishes
 * what was queued (an error there is reported, the teardown goes on). */
static loom_status streams_quiesce(void) {
  loom_status st = LOOM_OK;
#ifdef LOOM_HAVE_CUDA
  for (int i = 0; i < LOOM_MAX_CUDA_DEVICES; i++) {
    if (!g_cuda_stream_init[i] || !g_cuda_streams[i].native) continue;
    loom_sync_count(LOOM_SYNC_DEVICE);
    loom_status s = loom_cuda_set_device(i);
    if (s == LOOM_OK) {
      cudaError_t e = cudaDeviceSynchronize();
      if (e != cudaSuccess) s = loom_cuda_error(e, "cudaDeviceSynchronize (loom_shutdown)", __FILE__, __LINE__);
    }
    if (s != LOOM_OK && st == LOOM_OK) st = s;
  }
#endif
  return st;
}
LOOM_QUIESCE(LOOM_LAYER_DEVICE, streams_quiesce)

/* loom_shutdown, last: the compute streams are destroyed; the next
 * loom_stream_current makes a new one. */
static loom_status streams_teardown(void) {
  pthread_mutex_lock(&g_stream_lock);
  for (int i = 0; i < LOOM_MAX_CUDA_DEVICES; i++) {
    if (!g_cuda_stream_init[i]) continue;
#ifdef LOOM_HAVE_CUDA
    if (g_cuda_streams[i].native && loom_cuda_set_device(i) == LOOM_OK)
      cudaStreamDestroy((cudaStream_t)g_cuda_streams[i].native);
#endif
    g_cuda_streams[i].native = NULL;
    g_cuda_stream_init[i] = 0;
  }
  pthread_mutex_unlock(&g_stream_lock);
  return LOOM_OK;
}
LOOM_TEARDOWN(LOOM_LAYER_DEVICE, streams_teardown)

loom_status loom_stream_create(loom_device dev, loom_stream **out) {
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_stream_create: out is NULL");
  *out = NULL;
  LOOM_TRY(loom_device_check(dev));
  loom_stream *s = loom_sys_calloc(1, sizeof *s);
  if (!s) return loom_set_error(LOOM_ERR_OOM, "loom_stream_create: out of host memory");
  s->device = dev;
  s->owned = 1;
#ifdef LOOM_HAVE_CUDA
  if (loom_device_is_real_cuda(dev)) {
    cudaStream_t cs = NULL;
    loom_status st = loom_cuda_set_device(dev.index);
    if (st == LOOM_OK) {
      cudaError_t e = cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
      if (e != cudaSuccess) st = loom_cuda_error(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
    }
    if (st != LOOM_OK) { loom_sys_free(s); return st; }
    s->native = cs;
  }
#endif
  *out = s;
  return LOOM_OK;
}

void loom_stream_free(loom_stream *s) {
  if (!s || !s->owned) return;
#ifdef LOOM_HAVE_CUDA
  if (s->native) cudaStreamDestroy((cudaStream_t)s->native);
#endif
  loom_sys_free(s);
}

loom_device loom_stream_device(const loom_stream *s) { return s ? s->device : loom_cpu(); }
void *loom_stream_native(const loom_stream *s) { return s ? s->native : NULL; }

loom_status loom_stream_synchronize(loom_stream *s) {
  if (!s) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_stream_synchronize: stream is NULL");
  loom_sync_count(LOOM_SYNC_STREAM);
#ifdef LOOM_HAVE_CUDA
  if (loom_device_is_real_cuda(s->device)) {
    LOOM_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)s->native));
    return loom_deferred_check(s->device);
  }
#endif
  return LOOM_OK;
}

loom_status loom_stream_wait_event(loom_stream *s, loom_event *e) {
  if (!s || !e) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_stream_wait_event: NULL stream or event");
#ifdef LOOM_HAVE_CUDA
  if (loom_device_is_real_cuda(s->device) && loom_device_is_real_cuda(e->device) && e->recorded)
    LOOM_CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)s->native, (cudaEvent_t)e->native, 0));
  else if (loom_device_is_real_cuda(e->device) && e->recorded) {
    loom_sync_count(LOOM_SYNC_EVENT);
    LOOM_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e->native));  /* a CPU stream waits on the host */
  }
#endif
  return LOOM_OK;
}

loom_status loom_event_create(loom_device dev, loom_event **out) {
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_event_create: out is NULL");
  *out = NULL;
  LOOM_TRY(loom_device_check(dev));
  loom_event *e = loom_sys_calloc(1, sizeof *e);
  if (!e) return loom_set_error(LOOM_ERR_OOM, "loom_event_create: out of host memory");
  e->device = dev;
#ifdef LOOM_HAVE_CUDA
  if (loom_device_is_real_cuda(dev)) {
    cudaEvent_t ce = NULL;
    loom_status st = loom_cuda_set_device(dev.index);
    if (st == LOOM_OK) {
      cudaError_t err = cudaEventCreateWithFlags(&ce, cudaEventDisableTiming);
      if (err != cudaSuccess) st = loom_cuda_error(err, "cudaEventCreateWithFlags", __FILE__, __LINE__);
    }
    if (st != LOOM_OK) { loom_sys_free(e); return st; }
    e->native = ce;
  }
#endif
  *out = e;
  return LOOM_OK;
}

void loom_event_free(loom_event *e) {
  if (!e) return;
#ifdef LOOM_HAVE_CUDA
  if (e->native) cudaEventDestroy((cudaEvent_t)e->native);
#endif
  loom_sys_free(e);
}

loom_status loom_event_record(loom_event *e, loom_stream *s) {
  if (!e || !s) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_event_record: NULL event or stream");
  if (!loom_device_eq(e->device, s->device))
    return loom_set_error(LOOM_ERR_DEVICE, "loom_event_record: event and stream are on different devices");
#ifdef LOOM_HAVE_CUDA
  if (loom_device_is_real_cuda(s->device)) LOOM_CUDA_CHECK(cudaEventRecord((cudaEvent_t)e->native, (cudaStream_t)s->native));
#endif
  e->recorded = 1;
  return LOOM_OK;
}

int loom_event_query(loom_event *e) {
  if (!e) { loom_set_error(LOOM_ERR_INVALID_ARG, "loom_event_query: event is NULL"); return -1; }
#ifdef LOOM_HAVE_CUDA
  if (loom_device_is_real_cuda(e->device) && e->recorded) {
    cudaError_t r = cudaEventQuery((cudaEvent_t)e->native);
    if (r == cudaSuccess) return 1;
    if (r == cudaErrorNotReady) { (void)cudaGetLastError(); return 0; }
    loom_cuda_error(r, "cudaEventQuery", __FILE__, __LINE__);
    return -1;
  }
#endif
  return 1;
}

loom_status loom_event_synchronize(loom_event *e) {
  if (!e) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_event_synchronize: event is NULL");
  loom_sync_count(LOOM_SYNC_EVENT);
#ifdef LOOM_HAVE_CUDA
  if (loom_device_is_real_cuda(e->device) && e->recorded) LOOM_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e->native));
#endif
  return LOOM_OK;
}
