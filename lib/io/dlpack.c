/* dlpack.c — zero-copy exchange of tensors through DLPack, both the legacy
 * DLManagedTensor and DLPack 1.x's DLManagedTensorVersioned.
 *
 * Export: one allocation holds the managed struct, its shape/stride arrays
 * and a fresh tensor header that keeps the storage alive (only the storage:
 * not the autograd graph of the tensor exported). The deleter releases it.
 *
 * Import: the foreign memory becomes a loom storage whose release callback
 * calls the producer's deleter, so the deleter runs exactly once, when the
 * last loom tensor viewing it dies — from whatever thread that is. loom takes
 * ownership in every case: each failure path calls the deleter itself.
 *
 * A capsule is checked before it is trusted: dtype, device, dimensions,
 * shape, strides (non-negative; the element count and the extent they reach
 * must be addressable), a data pointer that is not NULL and is aligned, and,
 * for host memory, that the first and the last byte the strides reach lie
 * in mapped pages (a stride or shape that does not describe the producer's
 * buffer is refused instead of faulting later; holes in between cannot be
 * seen); for memory a capsule says is on a GPU, that CUDA knows both bytes
 * as memory the device can use (its own, managed or mapped pinned memory)
 * and not as another GPU's (a kernel reading a pageable host address would
 * fail with an illegal address that poisons the whole CUDA context). */
#define _DEFAULT_SOURCE  /* mincore */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "device/device_internal.h"
#include "io/dlpack_abi.h"
#include "loom/io.h"
#include "tensor/tensor_internal.h"
#include "core/sys.h"

/* ---- dtype and device mapping --------------------------------------------------- */

static int dl_dtype_of(loom_dtype dt, DLDataType *out) {
  DLDataType d = {0, 0, 1};
  switch (dt) {
    case LOOM_F32: d.code = LOOM_DL_FLOAT, d.bits = 32; break;
    case LOOM_F16: d.code = LOOM_DL_FLOAT, d.bits = 16; break;
    case LOOM_BF16: d.code = LOOM_DL_BFLOAT, d.bits = 16; break;
    case LOOM_I32: d.code = LOOM_DL_INT, d.bits = 32; break;
    case LOOM_I64: d.code = LOOM_DL_INT, d.bits = 64; break;
    case LOOM_U8: d.code = LOOM_DL_UINT, d.bits = 8; break;
    default: return 0;
  }
  *out = d;
  return 1;
}

static int loom_dtype_of_dl(DLDataType d, loom_dtype *out) {
  if (d.lanes != 1) return 0;
  if (d.code == LOOM_DL_FLOAT && d.bits == 32) *out = LOOM_F32;
  else if (d.code == LOOM_DL_FLOAT && d.bits == 16) *out = LOOM_F16;
  else if (d.code == LOOM_DL_BFLOAT && d.bits == 16) *out = LOOM_BF16;
  else if (d.code == LOOM_DL_INT && d.bits == 32) *out = LOOM_I32;
  else if (d.code == LOOM_DL_INT && d.bits == 64) *out = LOOM_I64;
  else if ((d.code == LOOM_DL_UINT || d.code == LOOM_DL_BOOL) && d.bits == 8) *out = LOOM_U8;
  else return 0;
  return 1;
}

loom_status loom_dlpack_device(const loom_tensor *t, int32_t *type, int32_t *id) {
  if (!t) return loom_set_error(LOOM_ERR_NULL_INPUT, "loom_dlpack_device: tensor is NULL");
  loom_device dev = t->storage->device;
  int32_t ty = LOOM_DL_CPU, i = 0;
  if (dev.kind == LOOM_CUDA) {
    ty = LOOM_DL_CUDA;
    /* DLPack speaks CUDA ordinals; loom's index may be renumbered by visible
     * devices or split into virtual devices. */
    i = loom_device_physical(dev.index);
    if (i < 0) return loom_set_error(LOOM_ERR_DEVICE, "loom_dlpack_device: cuda:%d has no physical GPU", dev.index);
  }
  if (type) *type = ty;
  if (id) *id = i;
  return LOOM_OK;
}

/* The logical loom device for a DLPack device, or an error. */
static loom_status device_of_dl(DLDevice d, loom_device *out) {
  const int type = (int)d.device_type;
  if (type == LOOM_DL_CPU || type == LOOM_DL_CUDA_HOST) {
    *out = loom_cpu();  /* pinned host memory is host memory */
    return LOOM_OK;
  }
  if (type == LOOM_DL_CUDA) {
    int n = loom_device_count(LOOM_CUDA);
    for (int i = 0; i < n; i++)
      if (loom_device_physical(i) == d.device_id) {
        *out = loom_cuda(i);
        return LOOM_OK;
      }
    return loom_set_error(LOOM_ERR_DEVICE, "from_dlpack: the tensor is on CUDA device %d, which loom does not see (%s)",
                          d.device_id, n ? "not among its visible devices" : loom_cuda_unavailable_reason());
  }
  return loom_set_error(LOOM_ERR_UNSUPPORTED,
                        "from_dlpack: DLPack device type %d is not supported (loom takes CPU (1), CUDA (2) and CUDA host "
                        "(3) memory); copy the tensor to the CPU first",
                        type);
}

/* ---- export ------------------------------------------------------------------------ */

typedef struct dl_export {
  loom_tensor *view;   /* a header of its own on the storage: keeps the bytes alive */
  int64_t shape[LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS];
  union {
    DLManagedTensor legacy;
    DLManagedTensorVersioned versioned;
  } m;
} dl_export;

static void export_free(dl_export *x) {
  loom_tensor_release(x->view);
  loom_sys_free(x);
}
static void legacy_deleter(DLManagedTensor *self) { export_free(self->manager_ctx); }
static void versioned_deleter(DLManagedTensorVersioned *self) { export_free(self->manager_ctx); }

static dl_export *export_new(loom_tensor *t, DLTensor *(*pick)(dl_export *)) {
  if (!t) {
    if (loom_last_status() == LOOM_OK) loom_set_error(LOOM_ERR_NULL_INPUT, "to_dlpack: tensor is NULL");
    return NULL;
  }
  DLDataType dt;
  if (!dl_dtype_of(t->dtype, &dt)) {
    loom_set_error(LOOM_ERR_DTYPE, "to_dlpack: invalid dtype %d", (int)t->dtype);
    return NULL;
  }
  int32_t type, id;
  if (loom_dlpack_device(t, &type, &id) != LOOM_OK) return NULL;
  dl_export *x = loom_sys_calloc(1, sizeof *x);
  if (!x) {
    loom_set_error(LOOM_ERR_OOM, "to_dlpack: out of host memory");
    return NULL;
  }
  x->view = loom_tensor_new_header(t->storage, t->offset, t->dtype, t->ndim, t->shape, t->strides);
  if (!x->view) {
    loom_sys_free(x);
    return NULL;
  }
  for (int d = 0; d < t->ndim; d++) {
    x->shape[d] = t->shape[d];
    x->strides[d] = t->strides[d];
  }
  DLTensor *d = pick(x);
  d->data = loom_tensor_ptr(t);
  d->device.device_type = type;
  d->device.device_id = id;
  d->ndim = t->ndim;
  d->dtype = dt;
  d->shape = x->shape;
  d->strides = x->strides;
  d->byte_offset = 0;
  return x;
}

static DLTensor *pick_legacy(dl_export *x) { return &x->m.legacy.dl_tensor; }
static DLTensor *pick_versioned(dl_export *x) { return &x->m.versioned.dl_tensor; }

struct DLManagedTensor *loom_to_dlpack(loom_tensor *t) {
  dl_export *x = export_new(t, pick_legacy);
  if (!x) return NULL;
  x->m.legacy.manager_ctx = x;
  x->m.legacy.deleter = legacy_deleter;
  return &x->m.legacy;
}

struct DLManagedTensorVersioned *loom_to_dlpack_versioned(loom_tensor *t) {
  dl_export *x = export_new(t, pick_versioned);
  if (!x) return NULL;
  x->m.versioned.version.major = LOOM_DL_MAJOR;
  x->m.versioned.version.minor = LOOM_DL_MINOR;
  x->m.versioned.manager_ctx = x;
  x->m.versioned.deleter = versioned_deleter;
  x->m.versioned.flags = 0;
  return &x->m.versioned;
}

/* ---- import ------------------------------------------------------------------------ */

static void legacy_release(void *data, void *ctx) {
  (void)data;
  DLManagedTensor *m = ctx;
  if (m->deleter) m->deleter(m);
}

static void versioned_release(void *data, void *ctx) {
  (void)data;
  DLManagedTensorVersioned *m = ctx;
  if (m->deleter) m->deleter(m);
}

/* Whether the pages holding the bytes first and last are mapped (mincore
 * answers ENOMEM for an unmapped page; it reads no memory). */
static bool host_bytes_mapped(uintptr_t first, uintptr_t last) {
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return true;  /* cannot tell: trust the producer */
  uintptr_t at[2] = {first, last};
  for (int i = 0; i < 2; i++) {
    unsigned char v;
    if (mincore((void *)(at[i] - at[i] % (uintptr_t)page), 1, &v) != 0 && errno == ENOMEM) return false;
  }
  return true;
}

/* Whether CUDA knows the byte at p as memory CUDA device dl_id (a CUDA
 * ordinal, as DLPack's) can use. Simulated GPUs hold host memory: not
 * checked. */
static loom_status cuda_byte_usable(loom_device dev, int dl_id, uintptr_t p, const char *which) {
#ifdef LOOM_HAVE_CUDA
  if (!loom_device_is_real_cuda(dev)) return LOOM_OK;
  LOOM_TRY(loom_cuda_set_device(dev.index));
  struct cudaPointerAttributes pa;
  cudaError_t e = cudaPointerGetAttributes(&pa, (const void *)p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  /* not sticky: clear it */
    return loom_set_error(LOOM_ERR_INVALID_ARG, "from_dlpack: CUDA cannot tell what the %s byte (%p) of the data is (%s)",
                          which, (void *)p, cudaGetErrorString(e));
  }
  if (pa.type == cudaMemoryTypeUnregistered)
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "from_dlpack: the capsule says CUDA device %d, but its %s byte (%p) is not CUDA memory "
                          "(pageable host memory, or past the producer's buffer): the data and strides do not describe "
                          "memory the GPU can read",
                          dl_id, which, (void *)p);
  if (pa.type == cudaMemoryTypeDevice && pa.device != dl_id)
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "from_dlpack: the capsule says CUDA device %d, but its %s byte (%p) is memory of CUDA device %d",
                          dl_id, which, (void *)p, pa.device);
#else
  (void)dev, (void)dl_id, (void)p, (void)which;
#endif
  return LOOM_OK;
}

/* A tensor viewing d's memory whose storage calls release(ctx) when it dies.
 * Exactly one release(ctx) happens on every path: through the storage, or
 * here before returning NULL. */
static loom_tensor *import(const DLTensor *d, bool read_only, loom_storage_release_fn release, void *ctx) {
  loom_status st = LOOM_OK;
  loom_dtype dt = LOOM_F32;
  loom_device dev = loom_cpu();
  int64_t shape[LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS];
  if (d->ndim < 0 || d->ndim > LOOM_MAX_DIMS)
    st = loom_set_error(LOOM_ERR_UNSUPPORTED, "from_dlpack: %d dimensions; loom supports 0 to %d", (int)d->ndim,
                        LOOM_MAX_DIMS);
  else if (!loom_dtype_of_dl(d->dtype, &dt))
    st = loom_set_error(LOOM_ERR_UNSUPPORTED,
                        "from_dlpack: DLPack dtype (code %u, %u bits, %u lanes) has no loom dtype (loom has float32/16, "
                        "bfloat16, int32/64, uint8 and bool as uint8)",
                        d->dtype.code, d->dtype.bits, d->dtype.lanes);
  else if (d->ndim > 0 && !d->shape)
    st = loom_set_error(LOOM_ERR_INVALID_ARG, "from_dlpack: shape is NULL for a %d-d tensor", (int)d->ndim);
  else
    st = device_of_dl(d->device, &dev);
  /* Geometry: the extent in elements the strides reach, to size the storage. */
  int64_t extent = 1;
  bool empty = false;
  for (int i = 0; st == LOOM_OK && i < d->ndim; i++) {
    shape[i] = d->shape[i];
    if (shape[i] < 0) st = loom_set_error(LOOM_ERR_SHAPE, "from_dlpack: dimension %d is negative (%lld)", i, (long long)shape[i]);
    if (shape[i] == 0) empty = true;
  }
  if (st == LOOM_OK) {
    if (d->strides) {
      for (int i = 0; st == LOOM_OK && i < d->ndim; i++) {
        strides[i] = d->strides[i];
        if (strides[i] < 0 && shape[i] > 1)
          st = loom_set_error(LOOM_ERR_UNSUPPORTED,
                              "from_dlpack: dimension %d has a negative stride (%lld); loom tensors need non-negative "
                              "strides: make it contiguous first (e.g. numpy.ascontiguousarray)",
                              i, (long long)strides[i]);
        if (strides[i] < 0) strides[i] = 0;  /* a size-1 dim's stride is never used */
      }
    } else {
      loom_contiguous_strides(d->ndim, shape, strides);
    }
  }
  for (int i = 0; st == LOOM_OK && !empty && i < d->ndim; i++) {
    if (shape[i] > 1 && strides[i] > 0 && (shape[i] - 1) > (INT64_MAX / 16 - extent) / strides[i])
      st = loom_set_error(LOOM_ERR_SHAPE, "from_dlpack: the strides reach too far to address");
    else
      extent += (shape[i] - 1) * strides[i];
  }
  if (empty) extent = 0;
  /* The element count too (zero strides repeat one element any number of times). */
  int64_t numel = 1;
  for (int i = 0; st == LOOM_OK && !empty && i < d->ndim; i++) {
    if (shape[i] > 1 && numel > INT64_MAX / 16 / shape[i])
      st = loom_set_error(LOOM_ERR_SHAPE, "from_dlpack: the shape has too many elements to address (dimension %d: %lld)", i,
                          (long long)shape[i]);
    else
      numel *= shape[i];
  }
  size_t es = loom_dtype_size(dt);
  if (st == LOOM_OK && extent > 0 && !d->data)
    st = loom_set_error(LOOM_ERR_INVALID_ARG, "from_dlpack: data is NULL for a tensor of %lld elements", (long long)numel);
  char *ptr = st == LOOM_OK ? (char *)d->data + d->byte_offset : NULL;
  if (st == LOOM_OK && extent > 0) {
    uintptr_t first = (uintptr_t)ptr, bytes = (uintptr_t)extent * es;
    if (first + bytes - 1 < first)
      st = loom_set_error(LOOM_ERR_SHAPE, "from_dlpack: the data (%p + byte_offset %llu) and strides wrap around the "
                          "address space", d->data, (unsigned long long)d->byte_offset);
    else if (dev.kind == LOOM_CPU && !host_bytes_mapped(first, first + bytes - 1))
      st = loom_set_error(LOOM_ERR_INVALID_ARG,
                          "from_dlpack: the strides and shape reach %llu bytes from the data (%p + byte_offset %llu), "
                          "past the producer's memory (that address is not mapped): they do not describe its buffer",
                          (unsigned long long)bytes, d->data, (unsigned long long)d->byte_offset);
    else if (dev.kind == LOOM_CUDA && (st = cuda_byte_usable(dev, d->device.device_id, first, "first")) == LOOM_OK)
      st = cuda_byte_usable(dev, d->device.device_id, first + bytes - 1, "last");
  }
  if (st == LOOM_OK && extent > 0 && (uintptr_t)ptr % es != 0)
    st = loom_set_error(LOOM_ERR_UNSUPPORTED,
                        "from_dlpack: the data (%p + byte_offset %llu) is not aligned to its %zu-byte elements; copy it "
                        "first",
                        d->data, (unsigned long long)d->byte_offset, es);
  if (st != LOOM_OK) {
    release(NULL, ctx);
    return NULL;
  }
  /* The flat storage over the extent, then the real geometry on top of it.
   * Built in a private scope: only the header below survives it. */
  loom_scope_begin();
  loom_tensor *flat = loom_tensor_wrap(ptr, (size_t)extent * es, dev, 1, &extent, dt, release, ctx);
  loom_tensor *t = flat ? loom_tensor_new_header(flat->storage, 0, dt, d->ndim, shape, strides) : NULL;
  if (!flat) release(NULL, ctx);  /* the wrap failed before owning ctx */
  if (t && read_only) {
    /* loom tensors are writable: hand out a copy, let the producer go. */
    loom_tensor *c = loom_tensor_retain(loom_cast(t, dt));
    loom_tensor_release(t);
    t = c;
  }
  loom_scope_end();  /* drops flat; the storage lives on in t (or dies: the deleter runs) */
  return t ? loom_tensor_adopt(t) : NULL;
}

loom_tensor *loom_from_dlpack(struct DLManagedTensor *m) {
  if (!m) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_from_dlpack: managed tensor is NULL");
    return NULL;
  }
  return import(&m->dl_tensor, false, legacy_release, m);
}

loom_tensor *loom_from_dlpack_versioned(struct DLManagedTensorVersioned *m) {
  if (!m) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_from_dlpack_versioned: managed tensor is NULL");
    return NULL;
  }
  if (m->version.major != 1) {
    /* The specification: on a major mismatch, touch nothing but the deleter. */
    uint32_t major = m->version.major;
    if (m->deleter) m->deleter(m);
    loom_set_error(LOOM_ERR_UNSUPPORTED, "from_dlpack: DLPack major version %u; loom reads version 1", major);
    return NULL;
  }
  return import(&m->dl_tensor, (m->flags & LOOM_DL_FLAG_READ_ONLY) != 0, versioned_release, m);
}

/* ---- streams -------------------------------------------------------------------------- */

loom_status loom_dlpack_sync_stream(loom_device dev, intptr_t stream) {
  LOOM_TRY(loom_device_check(dev));
  if (dev.kind != LOOM_CUDA || stream == -1) return LOOM_OK;
#ifdef LOOM_HAVE_CUDA
  if (!loom_device_is_real_cuda(dev)) return LOOM_OK;
  LOOM_TRY(loom_cuda_set_device(dev.index));
  loom_stream *s = loom_stream_current(dev);
  if (!s) return loom_last_status();
  cudaStream_t mine = (cudaStream_t)loom_stream_native(s);
  cudaStream_t theirs = stream == 1 ? cudaStreamLegacy : stream == 2 ? cudaStreamPerThread : (cudaStream_t)stream;
  if (stream == 0)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "dlpack: stream 0 is ambiguous for CUDA (use 1 for the legacy default "
                          "stream, 2 for the per-thread one)");
  if (theirs == mine) return LOOM_OK;
  cudaEvent_t ev;
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  cudaError_t e = cudaEventRecord(ev, mine);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(theirs, ev, 0);
  cudaEventDestroy(ev);  /* safe: destruction waits for the recorded work */
  if (e != cudaSuccess) return loom_cuda_error(e, "dlpack: cudaStreamWaitEvent", __FILE__, __LINE__);
  return LOOM_OK;
#else
  return LOOM_OK;
#endif
}
