/* dataset.c — the dataset object: reference counting, the accessors, and the
 * in-memory and user-callback datasets (IDX and CIFAR-10 decode into an
 * in-memory dataset). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/struct_size.h"
#include "data/data_internal.h"
#include "core/sys.h"


/* Common checks and setup; the caller fills read/destroy/impl. */
static loom_dataset *ds_new(const char *who, loom_dtype x_dtype, int x_ndim, const int64_t *x_shape, bool has_y,
                            loom_dtype y_dtype, int64_t n) {
  if (n < 0) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "%s: length %lld is negative", who, (long long)n);
    return NULL;
  }
  size_t xe = loom_dtype_size(x_dtype);
  if (xe == 0) {
    loom_set_error(LOOM_ERR_DTYPE, "%s: invalid x dtype %d", who, (int)x_dtype);
    return NULL;
  }
  if (x_ndim < 0 || x_ndim >= LOOM_MAX_DIMS || (x_ndim > 0 && !x_shape)) {
    loom_set_error(LOOM_ERR_SHAPE, "%s: a sample has %d dims (shape %s); allowed: 0..%d", who, x_ndim,
                   x_shape ? "given" : "NULL", LOOM_MAX_DIMS - 1);
    return NULL;
  }
  int64_t elems = 1;
  for (int i = 0; i < x_ndim; i++) {
    if (x_shape[i] < 1 || x_shape[i] > LOOM_DATA_MAX_SAMPLE_ELEMS) {
      loom_set_error(LOOM_ERR_SHAPE, "%s: sample dim %d is %lld; dims must be in 1..%lld", who, i, (long long)x_shape[i],
                     (long long)LOOM_DATA_MAX_SAMPLE_ELEMS);
      return NULL;
    }
    elems *= x_shape[i];
    if (elems > LOOM_DATA_MAX_SAMPLE_ELEMS) {
      loom_set_error(LOOM_ERR_SHAPE, "%s: a sample has more than %lld elements", who, (long long)LOOM_DATA_MAX_SAMPLE_ELEMS);
      return NULL;
    }
  }
  size_t ye = has_y ? loom_dtype_size(y_dtype) : 0;
  if (has_y && ye == 0) {
    loom_set_error(LOOM_ERR_DTYPE, "%s: invalid y dtype %d", who, (int)y_dtype);
    return NULL;
  }
  loom_dataset *ds = loom_sys_calloc(1, sizeof *ds);
  if (!ds) {
    loom_set_error(LOOM_ERR_OOM, "%s: out of host memory", who);
    return NULL;
  }
  atomic_init(&ds->refcount, 1);
  ds->length = n;
  ds->x_dtype = x_dtype;
  ds->x_ndim = x_ndim;
  for (int i = 0; i < x_ndim; i++) ds->x_shape[i] = x_shape[i];
  ds->x_bytes = (size_t)elems * xe;
  ds->has_y = has_y;
  ds->y_dtype = has_y ? y_dtype : LOOM_U8;
  ds->y_bytes = ye;
  pthread_mutex_init(&ds->lock, NULL);
  snprintf(ds->name, sizeof ds->name, "%s", who);
  return ds;
}

loom_dataset *loom_dataset_internal_new(const char *who, loom_dtype x_dtype, int x_ndim, const int64_t *x_shape,
                                        bool has_y, loom_dtype y_dtype, int64_t n) {
  return ds_new(who, x_dtype, x_ndim, x_shape, has_y, y_dtype, n);
}

/* ---- in-memory ----------------------------------------------------------- */
typedef struct mem_impl {
  const unsigned char *x, *y;
  void *own_x, *own_y;  /* freed with the dataset */
} mem_impl;

static loom_status mem_read(loom_dataset *ds, int64_t i, void *x, void *y) {
  mem_impl *m = ds->impl;
  if (x) memcpy(x, m->x + (size_t)i * ds->x_bytes, ds->x_bytes);
  if (y && ds->has_y) memcpy(y, m->y + (size_t)i * ds->y_bytes, ds->y_bytes);
  return LOOM_OK;
}

static void mem_destroy(loom_dataset *ds) {
  mem_impl *m = ds->impl;
  if (!m) return;
  loom_sys_free(m->own_x);
  loom_sys_free(m->own_y);
  loom_sys_free(m);
}

static loom_dataset *memory_new(const char *who, const void *x, void *own_x, loom_dtype x_dtype, int x_ndim,
                                const int64_t *x_shape, const void *y, void *own_y, loom_dtype y_dtype, int64_t n) {
  loom_dataset *ds = ds_new(who, x_dtype, x_ndim, x_shape, y != NULL, y_dtype, n);
  if (!ds) return NULL;
  mem_impl *m = loom_sys_calloc(1, sizeof *m);
  if (!m) {
    pthread_mutex_destroy(&ds->lock);
    loom_sys_free(ds);
    loom_set_error(LOOM_ERR_OOM, "%s: out of host memory", who);
    return NULL;
  }
  m->x = x;
  m->y = y;
  m->own_x = own_x;
  m->own_y = own_y;
  ds->impl = m;
  ds->read = mem_read;
  ds->destroy = mem_destroy;
  return ds;
}

loom_dataset *loom_dataset_memory(const void *x, loom_dtype x_dtype, int x_ndim, const int64_t *x_sample_shape,
                                  const void *y, loom_dtype y_dtype, int64_t n, bool copy) {
  if (!x && n > 0) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_dataset_memory: x is NULL");
    return NULL;
  }
  if (!copy) return memory_new("memory dataset", x, NULL, x_dtype, x_ndim, x_sample_shape, y, NULL, y_dtype, n);
  /* Validate first (through a throwaway header) so sizes are trusted below. */
  loom_dataset *probe = ds_new("memory dataset", x_dtype, x_ndim, x_sample_shape, y != NULL, y_dtype, n);
  if (!probe) return NULL;
  size_t xb = probe->x_bytes, yb = probe->y_bytes;
  pthread_mutex_destroy(&probe->lock);
  loom_sys_free(probe);
  if (n > 0 && xb > 0 && (uint64_t)n > SIZE_MAX / xb) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_dataset_memory: %lld samples of %zu bytes overflow", (long long)n, xb);
    return NULL;
  }
  void *cx = loom_sys_malloc(xb * (size_t)n + 1);
  void *cy = y ? loom_sys_malloc(yb * (size_t)n + 1) : NULL;
  if (!cx || (y && !cy)) {
    loom_sys_free(cx);
    loom_sys_free(cy);
    loom_set_error(LOOM_ERR_OOM, "loom_dataset_memory: out of host memory copying %lld samples", (long long)n);
    return NULL;
  }
  if (n > 0) memcpy(cx, x, xb * (size_t)n);
  if (y && n > 0) memcpy(cy, y, yb * (size_t)n);
  loom_dataset *ds = memory_new("memory dataset", cx, cx, x_dtype, x_ndim, x_sample_shape, cy, cy, y_dtype, n);
  if (!ds) { loom_sys_free(cx); loom_sys_free(cy); }
  return ds;
}

loom_dataset *loom_dataset_memory_owned(void *x, loom_dtype x_dtype, int x_ndim, const int64_t *x_shape, void *y,
                                        loom_dtype y_dtype, int64_t n, const char *name) {
  /* On failure the caller still owns x and y. */
  return memory_new(name, x, x, x_dtype, x_ndim, x_shape, y, y, y_dtype, n);
}

/* ---- user callbacks -------------------------------------------------------- */
typedef struct cb_impl {
  loom_dataset_callbacks cb;
} cb_impl;

static loom_status cb_read(loom_dataset *ds, int64_t i, void *x, void *y) {
  cb_impl *c = ds->impl;
  /* The callback always gets both buffers; a NULL request reads into scratch
   * the caller provides (see loom_dataset_read). */
  return c->cb.read(c->cb.user, i, x, y);
}

static void cb_destroy(loom_dataset *ds) {
  cb_impl *c = ds->impl;
  if (!c) return;
  if (c->cb.destroy) c->cb.destroy(c->cb.user);
  loom_sys_free(c);
}

loom_dataset *loom_dataset_callback(const loom_dataset_callbacks *user_cb) {
  if (!user_cb) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_dataset_callback: callbacks are NULL");
    return NULL;
  }
  /* Fields an older, smaller struct lacks are 0 / NULL / false. */
  loom_dataset_callbacks copy = {0}, *cb = &copy;
  if (LOOM_STRUCT_IN("loom_dataset_callback", loom_dataset_callbacks, &copy, user_cb) != LOOM_OK) return NULL;
  if (!cb->read) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_dataset_callback: read function is NULL");
    return NULL;
  }
  loom_dataset *ds = ds_new("callback dataset", cb->x_dtype, cb->x_ndim, cb->x_shape, cb->has_y, cb->y_dtype,
                            cb->length);
  if (!ds) return NULL;
  cb_impl *c = loom_sys_calloc(1, sizeof *c);
  if (!c) {
    pthread_mutex_destroy(&ds->lock);
    loom_sys_free(ds);
    loom_set_error(LOOM_ERR_OOM, "loom_dataset_callback: out of host memory");
    return NULL;
  }
  c->cb = *cb;
  ds->impl = c;
  ds->read = cb_read;
  ds->destroy = cb_destroy;
  ds->serialize = !cb->thread_safe;
  return ds;
}

loom_status loom_dataset_fail(loom_status code, const char *message) {
  if (code == LOOM_OK) code = LOOM_ERR_INTERNAL;
  return loom_set_error(code, "%s", message ? message : "dataset read failed");
}

/* ---- accessors ------------------------------------------------------------- */
loom_dataset *loom_dataset_retain(loom_dataset *ds) {
  if (ds) atomic_fetch_add(&ds->refcount, 1);
  return ds;
}

void loom_dataset_release(loom_dataset *ds) {
  if (!ds) return;
  if (atomic_fetch_sub(&ds->refcount, 1) != 1) return;
  if (ds->destroy) ds->destroy(ds);
  pthread_mutex_destroy(&ds->lock);
  loom_sys_free(ds);
}

int64_t loom_dataset_length(const loom_dataset *ds) { return ds ? ds->length : 0; }

loom_status loom_dataset_x_info(const loom_dataset *ds, loom_dtype *dtype, int *ndim, int64_t *shape) {
  if (!ds) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_dataset_x_info: dataset is NULL");
  if (dtype) *dtype = ds->x_dtype;
  if (ndim) *ndim = ds->x_ndim;
  if (shape) for (int i = 0; i < ds->x_ndim; i++) shape[i] = ds->x_shape[i];
  return LOOM_OK;
}

loom_status loom_dataset_y_info(const loom_dataset *ds, bool *has_y, loom_dtype *dtype) {
  if (!ds) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_dataset_y_info: dataset is NULL");
  if (has_y) *has_y = ds->has_y;
  if (dtype) *dtype = ds->y_dtype;
  return LOOM_OK;
}

uint64_t loom_data_sample_key(uint64_t seed, int64_t epoch, int64_t idx) {
  return loom_data_mix(loom_data_mix(seed, (uint64_t)epoch), (uint64_t)idx);
}

loom_status loom_dataset_read(loom_dataset *ds, int64_t i, void *x_buf, void *y_buf) {
  return loom_dataset_read_keyed(ds, i, loom_data_sample_key(0, 0, i), x_buf, y_buf);
}

loom_status loom_dataset_read_keyed(loom_dataset *ds, int64_t i, uint64_t key, void *x_buf, void *y_buf) {
  if (!ds) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_dataset_read: dataset is NULL");
  if (i < 0 || i >= ds->length)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: sample %lld is out of range (the dataset has %lld)", ds->name,
                          (long long)i, (long long)ds->length);
  /* Callbacks always receive both buffers: give them scratch for a NULL one. */
  unsigned char small[64];
  void *tmp_x = NULL;
  if (ds->read == cb_read) {
    if (!x_buf) {
      x_buf = tmp_x = loom_sys_malloc(ds->x_bytes ? ds->x_bytes : 1);
      if (!tmp_x) return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory", ds->name);
    }
    if (!y_buf && ds->has_y) y_buf = small;  /* y is one scalar: at most 8 bytes */
  }
  loom_clear_error();  /* so a callback that sets no message is not blamed for an old one */
  if (ds->serialize) pthread_mutex_lock(&ds->lock);
  loom_status s = ds->read_keyed ? ds->read_keyed(ds, i, key, x_buf, ds->has_y ? y_buf : NULL)
                                 : ds->read(ds, i, x_buf, ds->has_y ? y_buf : NULL);
  if (ds->serialize) pthread_mutex_unlock(&ds->lock);
  loom_sys_free(tmp_x);
  if (s != LOOM_OK) {
    if (loom_last_status() == LOOM_OK)
      loom_set_error(s, "%s: reading sample %lld failed (%s)", ds->name, (long long)i, loom_status_name(s));
    return s;
  }
  return LOOM_OK;
}
