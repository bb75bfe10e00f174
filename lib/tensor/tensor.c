/* tensor.c — storage and tensor lifetime, raw allocation and wrapping,
 * metadata. */
#include <stdio.h>
#include <stdlib.h>

#include "alloc/alloc.h"
#include "loom/alloc.h"
#include "tensor/tensor_internal.h"
#include "core/sys.h"

int64_t loom_shape_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

void loom_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i] > 0 ? shape[i] : 1;
  }
}

const char *loom_shape_str(int ndim, const int64_t *shape, char *buf, int n) {
  if (!buf || n <= 0) return "";
  int pos = snprintf(buf, (size_t)n, "[");
  for (int i = 0; i < ndim && pos < n; i++)
    pos += snprintf(buf + pos, (size_t)(n - pos), i ? ", %lld" : "%lld", (long long)shape[i]);
  if (pos < n) snprintf(buf + pos, (size_t)(n - pos), "]");
  return buf;
}

static void storage_release(loom_storage *st) {
  if (!st) return;
  if (atomic_fetch_sub(&st->refcount, 1) != 1) return;
  if (st->release) st->release(st->data, st->release_ctx);
  else loom_alloc_free(st->device, st->data);
  loom_sys_free(st);
}

/* How a dying tensor drops its reference to grad_fn. The node is autograd's
 * (a layer above), so autograd registers this before it records the first
 * node: a tensor with a grad_fn implies it is set. */
static _Atomic(loom_grad_fn_release_fn) g_grad_fn_release;

void loom_tensor_set_grad_fn_release(loom_grad_fn_release_fn fn) { atomic_store(&g_grad_fn_release, fn); }

loom_tensor *loom_tensor_retain(loom_tensor *t) {
  if (t) atomic_fetch_add(&t->refcount, 1);
  return t;
}

void loom_tensor_release(loom_tensor *t) {
  if (!t) return;
  if (atomic_fetch_sub(&t->refcount, 1) != 1) return;
  loom_tensor_release(t->grad);
  if (t->grad_fn) {
    loom_grad_fn_release_fn rel = atomic_load(&g_grad_fn_release);
    if (rel) rel(t->grad_fn);
  }
  if (t->user_tag_free) t->user_tag_free(t->user_tag);
  storage_release(t->storage);
  loom_sys_free(t);
}

static loom_status check_shape(const char *fn, int ndim, const int64_t *shape) {
  if (ndim < 0 || ndim > LOOM_MAX_DIMS)
    return loom_set_error(LOOM_ERR_SHAPE, "%s: %d dimensions requested; loom supports 0 to %d", fn, ndim,
                          LOOM_MAX_DIMS);
  if (ndim > 0 && !shape) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: shape is NULL", fn);
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) return loom_set_error(LOOM_ERR_SHAPE, "%s: dimension %d is negative (%lld)", fn, i, (long long)shape[i]);
    if (shape[i] > 0 && n > INT64_MAX / 16 / shape[i])
      return loom_set_error(LOOM_ERR_SHAPE, "%s: shape is too large to address", fn);
    n *= shape[i];
  }
  return LOOM_OK;
}

loom_tensor *loom_tensor_new_header(loom_storage *st, int64_t offset, loom_dtype dt, int ndim,
                                    const int64_t *shape, const int64_t *strides) {
  loom_tensor *t = loom_sys_calloc(1, sizeof *t);
  if (!t) {
    loom_set_error(LOOM_ERR_OOM, "out of host memory allocating a tensor header");
    return NULL;
  }
  atomic_init(&t->refcount, 1);
  atomic_fetch_add(&st->refcount, 1);
  t->storage = st;
  t->offset = offset;
  t->dtype = dt;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++) {
    t->shape[i] = shape[i];
    t->strides[i] = strides[i];
  }
  return t;
}

static loom_storage *storage_new(loom_device dev, void *data, size_t nbytes, loom_storage_release_fn rel, void *ctx) {
  loom_storage *st = loom_sys_calloc(1, sizeof *st);
  if (!st) {
    loom_set_error(LOOM_ERR_OOM, "out of host memory allocating tensor storage");
    return NULL;
  }
  atomic_init(&st->refcount, 0);
  st->device = dev;
  st->data = data;
  st->nbytes = nbytes;
  st->release = rel;
  st->release_ctx = ctx;
  return st;
}

loom_tensor *loom_tensor_alloc_raw(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev) {
  if (check_shape("tensor", ndim, shape) != LOOM_OK) return NULL;
  if (!loom_dtype_valid((int)dt)) {
    loom_set_error(LOOM_ERR_DTYPE, "tensor: invalid dtype %d", (int)dt);
    return NULL;
  }
  int64_t n = loom_shape_numel(ndim, shape);
  size_t nbytes = (size_t)n * loom_dtype_size(dt);
  void *data = NULL;
  if (loom_alloc_malloc(dev, nbytes, NULL, &data) != LOOM_OK) return NULL;
  loom_storage *st = storage_new(dev, data, nbytes, NULL, NULL);
  if (!st) {
    loom_alloc_free(dev, data);
    return NULL;
  }
  int64_t strides[LOOM_MAX_DIMS];
  loom_contiguous_strides(ndim, shape, strides);
  loom_tensor *t = loom_tensor_new_header(st, 0, dt, ndim, shape, strides);
  if (!t) {
    atomic_fetch_add(&st->refcount, 1);
    storage_release(st);
  }
  return t;
}

static void release_nothing(void *data, void *ctx) {
  (void)data;
  (void)ctx;
}

loom_tensor *loom_tensor_wrap(void *data, size_t nbytes, loom_device dev, int ndim, const int64_t *shape,
                              loom_dtype dt, loom_storage_release_fn release, void *ctx) {
  if (check_shape("loom_tensor_wrap", ndim, shape) != LOOM_OK) return NULL;
  int64_t n = loom_shape_numel(ndim, shape);
  if ((size_t)n * loom_dtype_size(dt) > nbytes) {
    loom_set_error(LOOM_ERR_SHAPE, "loom_tensor_wrap: %lld elements of %s need more than the %zu bytes given",
                   (long long)n, loom_dtype_name(dt), nbytes);
    return NULL;
  }
  loom_storage *st = storage_new(dev, data, nbytes, release, ctx);
  if (!st) return NULL;
  int64_t strides[LOOM_MAX_DIMS];
  loom_contiguous_strides(ndim, shape, strides);
  loom_tensor *t = loom_tensor_new_header(st, 0, dt, ndim, shape, strides);
  if (!t) {
    loom_sys_free(st);
    return NULL;
  }
  /* A failed wrap never calls release (callers give data back themselves):
   * if the scope cannot take t, it dies without calling it. */
  st->release = release_nothing;
  if (!loom_tensor_adopt(t)) return NULL;
  st->release = release;
  return t;
}

loom_tensor *loom_tensor_view_raw(void *data, loom_dtype dt, int ndim, const int64_t *shape, loom_device dev) {
  int64_t n = loom_shape_numel(ndim, shape);
  loom_storage *st = storage_new(dev, data, (size_t)n * loom_dtype_size(dt), release_nothing, NULL);
  if (!st) return NULL;
  int64_t strides[LOOM_MAX_DIMS];
  loom_contiguous_strides(ndim, shape, strides);
  loom_tensor *t = loom_tensor_new_header(st, 0, dt, ndim, shape, strides);
  if (!t) loom_sys_free(st);
  return t;
}

loom_tensor *loom_empty(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev) {
  return loom_tensor_adopt(loom_tensor_alloc_raw(ndim, shape, dt, dev));
}

loom_tensor *loom_empty_like(const loom_tensor *t) {
  return t ? loom_empty(t->ndim, t->shape, t->dtype, t->storage->device) : NULL;
}

/* ---- metadata ------------------------------------------------------------ */
int loom_tensor_ndim(const loom_tensor *t) { return t ? t->ndim : -1; }
int64_t loom_tensor_dim(const loom_tensor *t, int i) {
  if (!t) return -1;
  if (i < 0) i += t->ndim;
  return (i >= 0 && i < t->ndim) ? t->shape[i] : -1;
}
const int64_t *loom_tensor_shape(const loom_tensor *t) { return t ? t->shape : NULL; }
const int64_t *loom_tensor_strides(const loom_tensor *t) { return t ? t->strides : NULL; }
int64_t loom_tensor_numel(const loom_tensor *t) { return t ? loom_shape_numel(t->ndim, t->shape) : 0; }
loom_dtype loom_tensor_dtype(const loom_tensor *t) { return t ? t->dtype : LOOM_F32; }
loom_device loom_tensor_device(const loom_tensor *t) { return t ? t->storage->device : loom_cpu(); }
void *loom_tensor_data(const loom_tensor *t) { return t ? loom_tensor_ptr(t) : NULL; }

bool loom_tensor_is_contiguous(const loom_tensor *t) {
  if (!t) return false;
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != s) return false;
    s *= t->shape[i];
  }
  return true;
}

/* ---- autograd state ------------------------------------------------------ */
bool loom_requires_grad(const loom_tensor *t) { return t && (t->requires_grad || t->grad_fn); }
loom_tensor *loom_grad(const loom_tensor *t) { return t ? t->grad : NULL; }

/* ---- streams ---------------------------------------------------------------- */
loom_status loom_tensor_record_stream(loom_tensor *t, loom_stream *s) {
  if (!t) return loom_set_error(LOOM_ERR_NULL_INPUT, "record_stream: tensor is NULL");
  if (!s) return loom_set_error(LOOM_ERR_INVALID_ARG, "record_stream: stream is NULL");
  if (t->storage->release)
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "record_stream: this tensor wraps memory loom does not own (loom_tensor_wrap); its owner "
                          "decides when it may be reused");
  return loom_alloc_record_stream(t->storage->device, t->storage->data, s);
}
