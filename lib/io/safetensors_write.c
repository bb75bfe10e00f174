/* safetensors_write.c — write named tensors as a safetensors file through
 * the atomic temp-fsync-rename path. The JSON header is built and printed by
 * jansson; tensors are ordered by element size (largest first) and the
 * header is space-padded so the data starts at a multiple of 64 bytes, which
 * keeps every tensor aligned to its element size for zero-copy loading. */
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "io/atomic_file.h"
#include "io/safetensors_internal.h"
#include "ops/op.h"
#include "tensor/tensor_internal.h"
#include "core/sys.h"

#ifdef LOOM_HAVE_JANSSON
#include <jansson.h>

/* Device-to-host staging chunk for tensors that are not plain host memory. */
#define STAGE_BYTES ((size_t)16 << 20)

/* A caller-owned reference to op's result, whatever scopes are open. */
static loom_tensor *contiguous_owned(loom_tensor *t) {
  loom_scope_begin();
  loom_tensor *c = loom_tensor_retain(loom_contiguous(t));
  loom_scope_end();
  return c;
}

static loom_status write_tensor(loom_atomic_file *af, loom_tensor *t, const char *name) {
  size_t es = loom_dtype_size(t->dtype);
  size_t nbytes = (size_t)loom_shape_numel(t->ndim, t->shape) * es;
  if (nbytes == 0) return LOOM_OK;
  if (t->storage->device.kind == LOOM_CPU && loom_tensor_is_contiguous(t))
    return loom_atomic_write(af, loom_tensor_ptr(t), nbytes);
  bool prev = loom_set_grad_enabled(false);
  loom_tensor *c = contiguous_owned(t);
  loom_set_grad_enabled(prev);
  if (!c) return loom_error_prefix("save: making tensor '%s' contiguous", name);
  loom_status st = LOOM_OK;
  if (c->storage->device.kind == LOOM_CPU) {
    st = loom_atomic_write(af, loom_tensor_ptr(c), nbytes);
  } else {
    /* Device memory: through a pinned staging buffer, one chunk at a time
     * (a flat view of the contiguous tensor per chunk). */
    void *stage = NULL;
    st = loom_alloc_pinned_malloc(STAGE_BYTES, &stage);
    int64_t per = (int64_t)(STAGE_BYTES / es), total = (int64_t)(nbytes / es), one = 1;
    for (int64_t at = 0; at < total && st == LOOM_OK; at += per) {
      int64_t len = total - at < per ? total - at : per;
      loom_tensor *v = loom_tensor_new_header(c->storage, c->offset + at, c->dtype, 1, &len, &one);
      st = v ? loom_copy_to_host_raw(v, stage) : loom_last_status();
      loom_tensor_release(v);
      if (st == LOOM_OK) st = loom_atomic_write(af, stage, (size_t)len * es);
    }
    loom_alloc_pinned_free(stage);
  }
  loom_tensor_release(c);
  return st;
}

/* Stable order: larger elements first, so each tensor stays aligned. */
static int *size_order(loom_tensor *const *tensors, int n) {
  int *ord = loom_sys_malloc((size_t)(n ? n : 1) * sizeof *ord);
  if (!ord) return NULL;
  int k = 0;
  for (size_t sz = 8; sz >= 1; sz /= 2)
    for (int i = 0; i < n; i++)
      if (loom_dtype_size(tensors[i]->dtype) == sz) ord[k++] = i;
  return ord;
}

static json_t *shape_json(const loom_tensor *t) {
  json_t *a = json_array();
  for (int d = 0; a && d < t->ndim; d++)
    if (json_array_append_new(a, json_integer(t->shape[d])) != 0) {
      json_decref(a);
      return NULL;
    }
  return a;
}

/* The header text (padded) for tensors in order ord. */
static loom_status build_header(const char *path, int n, const char *const *names, loom_tensor *const *tensors,
                                const int *ord, int n_meta, const char *const *keys, const char *const *values,
                                char **out, size_t *out_len) {
  loom_status st = LOOM_OK;
  json_t *root = json_object();
  if (!root) return loom_set_error(LOOM_ERR_OOM, "save '%s': out of host memory", path);
  if (n_meta > 0) {
    json_t *meta = json_object();
    if (!meta || json_object_set_new(root, "__metadata__", meta) != 0) {
      st = loom_set_error(LOOM_ERR_OOM, "save '%s': out of host memory", path);
      goto out;
    }
    for (int i = 0; i < n_meta; i++) {
      if (!keys[i] || !values[i]) {
        st = loom_set_error(LOOM_ERR_INVALID_ARG, "save '%s': metadata key or value %d is NULL", path, i);
        goto out;
      }
      if (json_object_get(meta, keys[i])) {
        st = loom_set_error(LOOM_ERR_INVALID_ARG, "save '%s': metadata key '%s' given twice", path, keys[i]);
        goto out;
      }
      json_t *v = json_string(values[i]);
      if (!v || json_object_set_new(meta, keys[i], v) != 0) {
        st = loom_set_error(LOOM_ERR_INVALID_ARG, "save '%s': metadata '%s' is not valid UTF-8 text", path, keys[i]);
        goto out;
      }
    }
  }
  uint64_t at = 0;
  for (int k = 0; k < n; k++) {
    int i = ord[k];
    loom_tensor *t = tensors[i];
    const char *name = names[i];
    if (json_object_get(root, name)) {
      st = loom_set_error(LOOM_ERR_INVALID_ARG, "save '%s': the name '%s' is given twice", path, name);
      goto out;
    }
    uint64_t bytes = (uint64_t)loom_shape_numel(t->ndim, t->shape) * loom_dtype_size(t->dtype);
    json_t *e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", loom_st_dtype_of(t->dtype), "shape", shape_json(t),
                          "data_offsets", (json_int_t)at, (json_int_t)(at + bytes));
    if (!e) {
      st = loom_set_error(LOOM_ERR_OOM, "save '%s': out of host memory building the header", path);
      goto out;
    }
    if (json_object_set_new(root, name, e) != 0) {
      st = loom_set_error(LOOM_ERR_INVALID_ARG, "save '%s': tensor name %d is not valid UTF-8 text", path, i);
      goto out;
    }
    at += bytes;
  }
  char *text = json_dumps(root, JSON_COMPACT);
  if (!text) {
    st = loom_set_error(LOOM_ERR_OOM, "save '%s': out of host memory printing the header", path);
    goto out;
  }
  size_t len = strlen(text);
  size_t pad = (LOOM_ST_ALIGN - (8 + len) % LOOM_ST_ALIGN) % LOOM_ST_ALIGN;
  char *h = loom_sys_malloc(len + pad);
  if (!h) {
    loom_sys_free(text);
    st = loom_set_error(LOOM_ERR_OOM, "save '%s': out of host memory", path);
    goto out;
  }
  memcpy(h, text, len);
  memset(h + len, ' ', pad);
  loom_sys_free(text);
  *out = h;
  *out_len = len + pad;
out:
  json_decref(root);
  return st;
}

loom_status loom_safetensors_save(const char *path, int n, const char *const *names, loom_tensor *const *tensors,
                                  int n_meta, const char *const *keys, const char *const *values) {
  if (!path) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_safetensors_save: path is NULL");
  if (n < 0 || (n > 0 && (!names || !tensors)) || n_meta < 0 || (n_meta > 0 && (!keys || !values)))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "save '%s': %d tensors / %d metadata entries with NULL arrays", path, n,
                          n_meta);
  for (int i = 0; i < n; i++) {
    if (!names[i]) return loom_set_error(LOOM_ERR_INVALID_ARG, "save '%s': name %d is NULL", path, i);
    if (!strcmp(names[i], "__metadata__"))
      return loom_set_error(LOOM_ERR_INVALID_ARG, "save '%s': '__metadata__' is reserved by the format", path);
    if (!tensors[i]) {
      if (loom_last_status() != LOOM_OK) return loom_error_prefix("save '%s': tensor '%s'", path, names[i]);
      return loom_set_error(LOOM_ERR_NULL_INPUT, "save '%s': tensor '%s' is NULL", path, names[i]);
    }
    if (!loom_st_dtype_of(tensors[i]->dtype))
      return loom_set_error(LOOM_ERR_DTYPE, "save '%s': tensor '%s' has an invalid dtype", path, names[i]);
  }
  int *ord = size_order(tensors, n);
  if (!ord) return loom_set_error(LOOM_ERR_OOM, "save '%s': out of host memory", path);
  char *header = NULL;
  size_t hlen = 0;
  loom_status st = build_header(path, n, names, tensors, ord, n_meta, keys, values, &header, &hlen);
  loom_atomic_file af;
  if (st == LOOM_OK) st = loom_atomic_open(&af, path);
  if (st == LOOM_OK) {
    unsigned char lenb[8];
    for (int b = 0; b < 8; b++) lenb[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
    st = loom_atomic_write(&af, lenb, 8);
    if (st == LOOM_OK) st = loom_atomic_write(&af, header, hlen);
    for (int k = 0; k < n && st == LOOM_OK; k++) st = write_tensor(&af, tensors[ord[k]], names[ord[k]]);
    if (st == LOOM_OK) st = loom_atomic_commit(&af);
    else loom_atomic_abort(&af);
  }
  loom_sys_free(header);
  loom_sys_free(ord);
  return st;
}

#else  /* !LOOM_HAVE_JANSSON */

loom_status loom_safetensors_save(const char *path, int n, const char *const *names, loom_tensor *const *tensors,
                                  int n_meta, const char *const *keys, const char *const *values) {
  (void)n, (void)names, (void)tensors, (void)n_meta, (void)keys, (void)values;
  return loom_set_error(LOOM_ERR_UNSUPPORTED,
                        "save '%s': this loom was built without jansson; install libjansson-dev (Debian) and rebuild",
                        path ? path : "(null)");
}

#endif
