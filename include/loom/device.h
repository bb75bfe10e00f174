/* device.h — devices, streams and events.
 *
 * A device is (kind, index). The CPU always exists. CUDA devices are
 * discovered at first use; a machine with no driver or no GPU reports zero
 * CUDA devices and loom_cuda_unavailable_reason() says why. That is not an
 * error until someone asks for a CUDA tensor.
 *
 * Streams and events have one interface on every device. On the CPU, work is
 * executed synchronously, so an event is complete as soon as it is recorded.
 * Each device has a current stream that ops enqueue on; it is borrowed (do
 * not free it). Streams and events made by loom_stream_create /
 * loom_event_create are the caller's: free them with loom_stream_free /
 * loom_event_free.
 *
 * Visible and virtual devices (LOOM_VISIBLE_DEVICES, loom_set_visible_devices,
 * loom_set_virtual_devices) must be set before the first call that touches a
 * CUDA device; afterwards they are LOOM_ERR_STATE.
 *
 * Threads: every call here may be made from several threads; one stream
 * object should be driven by one thread at a time. */
#ifndef LOOM_DEVICE_H
#define LOOM_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "export.h"
#include "status.h"

LOOM_EXTERN_C_BEGIN

/* Append-only. */
typedef enum loom_device_kind {
  LOOM_CPU = 0,
  LOOM_CUDA = 1,
} loom_device_kind;

typedef struct loom_device {
  int32_t kind;   /* loom_device_kind */
  int32_t index;  /* 0 for the CPU */
} loom_device;

static inline loom_device loom_cpu(void) { loom_device d = {LOOM_CPU, 0}; return d; }
static inline loom_device loom_cuda(int index) { loom_device d = {LOOM_CUDA, index}; return d; }
static inline bool loom_device_eq(loom_device a, loom_device b) {
  return a.kind == b.kind && a.index == b.index;
}

/* Number of devices of a kind (CPU: 1; CUDA: 0 when unavailable). */
LOOM_API int loom_device_count(loom_device_kind kind);
/* Why CUDA is unavailable ("built without CUDA", "no CUDA driver", "no CUDA
 * device"), or NULL if at least one CUDA device is usable. */
LOOM_API const char *loom_cuda_unavailable_reason(void);
/* What this libloom was built with, as space-separated key=value pairs:
 * "version=0.1.0 cuda=yes cudnn=yes nccl=no nvtx=yes mpi=yes openblas=yes
 * zlib=yes jansson=yes profiler=yes" (jansson: safetensors and checkpoints;
 * zlib: gzip dataset files). A static string; keys are only ever added. */
LOOM_API const char *loom_build_info(void);
/* Parse "cpu", "cuda", "cuda:N" or "auto" (the first GPU if any, else CPU). */
LOOM_API loom_status loom_device_parse(const char *text, loom_device *out);
/* Check that a device exists; LOOM_ERR_DEVICE with a reason otherwise. */
LOOM_API loom_status loom_device_check(loom_device dev);
/* "cpu" or "cuda:0"; writes at most n bytes; returns buf. */
LOOM_API const char *loom_device_str(loom_device dev, char *buf, int n);
/* Wait until all work queued on the device is done. */
LOOM_API loom_status loom_device_synchronize(loom_device dev);

/* Filter and renumber physical GPUs, like LOOM_VISIBLE_DEVICES:
 * "1,0" makes physical GPU 1 cuda:0 and GPU 0 cuda:1; "" hides every GPU.
 * Before first use only. */
LOOM_API loom_status loom_set_visible_devices(const char *list);
/* Split visible GPU gpu (numbered after the visible filter, before
 * virtualization) into n logical devices with memory limits limits[0..n-1]
 * bytes (each > 0, summing to at most the GPU's memory). Each gets its own
 * pool, limit and stream; logical numbering follows visible order, with the
 * virtual devices of a GPU in place of it. Before first use only. */
LOOM_API loom_status loom_set_virtual_devices(int gpu, int n, const size_t *limits);

typedef struct loom_stream loom_stream;
typedef struct loom_event loom_event;

/* The device's current compute stream (borrowed, lives until exit). NULL and
 * an error if the device does not exist. */
LOOM_API loom_stream *loom_stream_current(loom_device dev);
LOOM_API loom_status loom_stream_create(loom_device dev, loom_stream **out);
/* Free a stream from loom_stream_create. NULL, and a borrowed stream
 * (loom_stream_current), are no-ops. */
LOOM_API void loom_stream_free(loom_stream *s);
LOOM_API loom_device loom_stream_device(const loom_stream *s);
LOOM_API loom_status loom_stream_synchronize(loom_stream *s);
/* Make future work on s wait for e (no host sync). */
LOOM_API loom_status loom_stream_wait_event(loom_stream *s, loom_event *e);
/* The backend handle (cudaStream_t on CUDA, NULL on the CPU). */
LOOM_API void *loom_stream_native(const loom_stream *s);

LOOM_API loom_status loom_event_create(loom_device dev, loom_event **out);
/* NULL is a no-op. */
LOOM_API void loom_event_free(loom_event *e);
LOOM_API loom_status loom_event_record(loom_event *e, loom_stream *s);
/* 1: complete (or never recorded), 0: pending, -1: error (see last error). */
LOOM_API int loom_event_query(loom_event *e);
LOOM_API loom_status loom_event_synchronize(loom_event *e);

LOOM_EXTERN_C_END
#endif
