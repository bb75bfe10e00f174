/* api_view.c — views share storage: view/reshape, transpose/permute, slice,
 * expand, detach, contiguous. A view has no kernel; views of tensors that
 * require grad are recorded (through the recorder hook, like any op), so
 * gradients flow through them. */
#include "ops/op.h"
#include "ops/record.h"

static loom_tensor *record_view(loom_op_id op, loom_tensor *src, loom_tensor *v, const int64_t *ints, int nints) {
  if (!v) return NULL;
  loom_op_args a = {.in = {src}, .n_in = 1, .out = {v}, .n_out = 1};
  for (int k = 0; k < nints && k < LOOM_OP_MAX_INTS; k++) a.i[k] = ints[k];
  if (loom_op_record(op, &a) != LOOM_OK) {
    loom_tensor_release(v);
    return NULL;
  }
  return loom_tensor_adopt(v);
}

static loom_status resolve_shape(const char *fn, const loom_tensor *t, int ndim, const int64_t *shape, int64_t *out) {
  if (ndim < 0 || ndim > LOOM_MAX_DIMS)
    return loom_set_error(LOOM_ERR_SHAPE, "%s: %d dimensions requested; loom supports 0 to %d", fn, ndim, LOOM_MAX_DIMS);
  if (ndim > 0 && !shape) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: shape is NULL", fn);
  int64_t known = 1, total = loom_shape_numel(t->ndim, t->shape);
  int infer = -1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == -1) {
      if (infer >= 0) return loom_set_error(LOOM_ERR_SHAPE, "%s: only one dimension may be -1", fn);
      infer = i;
    } else if (shape[i] < 0) {
      return loom_set_error(LOOM_ERR_SHAPE, "%s: dimension %d is negative (%lld)", fn, i, (long long)shape[i]);
    } else {
      known *= shape[i];
    }
    out[i] = shape[i];
  }
  if (infer >= 0) {
    if (known == 0 || total % known != 0) goto mismatch;
    out[infer] = total / known;
  } else if (known != total) {
    goto mismatch;
  }
  return LOOM_OK;
mismatch: {
  char b1[96], b2[96];
  return loom_set_error(LOOM_ERR_SHAPE, "%s: cannot view %s (%lld elements) as %s", fn,
                        loom_shape_str(t->ndim, t->shape, b1, 96), (long long)total, loom_shape_str(ndim, shape, b2, 96));
}
}

/* Strides for viewing t as new shape without copying, if possible. */
static bool view_strides(const loom_tensor *t, int ndim, const int64_t *shape, int64_t *strides) {
  if (loom_tensor_is_contiguous(t)) {
    loom_contiguous_strides(ndim, shape, strides);
    return true;
  }
  /* Match groups of old dims to groups of new dims (PyTorch's rule). */
  int64_t numel = loom_shape_numel(t->ndim, t->shape);
  if (numel == 0) {
    loom_contiguous_strides(ndim, shape, strides);
    return true;
  }
  int view_d = ndim - 1;
  int64_t chunk_base_stride = t->ndim ? t->strides[t->ndim - 1] : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    tensor_numel *= t->shape[d];
    if (d == 0 || (t->shape[d - 1] != 1 && t->strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = t->strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

loom_tensor *loom_view(loom_tensor *t, int ndim, const int64_t *shape) {
  if (!t) return NULL;
  int64_t s[LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS];
  if (resolve_shape("view", t, ndim, shape, s) != LOOM_OK) return NULL;
  if (!view_strides(t, ndim, s, strides)) {
    loom_set_error(LOOM_ERR_SHAPE, "view: the tensor's layout cannot be viewed with this shape; use loom_reshape");
    return NULL;
  }
  loom_tensor *v = loom_tensor_new_header(t->storage, t->offset, t->dtype, ndim, s, strides);
  return record_view(LOOM_OP_VIEW_RESHAPE, t, v, NULL, 0);
}

loom_tensor *loom_reshape(loom_tensor *t, int ndim, const int64_t *shape) {
  if (!t) return NULL;
  int64_t s[LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS];
  if (resolve_shape("reshape", t, ndim, shape, s) != LOOM_OK) return NULL;
  if (view_strides(t, ndim, s, strides)) return loom_view(t, ndim, s);
  /* The contiguous copy is an intermediate: scope it so that, outside any
   * scope, the caller owns only the returned view. */
  loom_scope_begin();
  loom_tensor *r = loom_keep(loom_view(loom_contiguous(t), ndim, s));
  loom_scope_end();
  return r;
}

loom_tensor *loom_permute(loom_tensor *t, const int *dims) {
  if (!t) return NULL;
  if (t->ndim > 0 && !dims) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "permute: dims is NULL");
    return NULL;
  }
  int64_t shape[LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS], ints[LOOM_MAX_DIMS];
  bool seen[LOOM_MAX_DIMS] = {0};
  for (int i = 0; i < t->ndim; i++) {
    int d = dims[i] < 0 ? dims[i] + t->ndim : dims[i];
    if (d < 0 || d >= t->ndim || seen[d]) {
      loom_set_error(LOOM_ERR_SHAPE, "permute: dims must be a permutation of 0..%d (bad entry %d at %d)", t->ndim - 1,
                     dims[i], i);
      return NULL;
    }
    seen[d] = true;
    shape[i] = t->shape[d];
    strides[i] = t->strides[d];
    ints[i] = d;
  }
  loom_tensor *v = loom_tensor_new_header(t->storage, t->offset, t->dtype, t->ndim, shape, strides);
  return record_view(LOOM_OP_VIEW_PERMUTE, t, v, ints, t->ndim);
}

loom_tensor *loom_transpose(loom_tensor *t, int dim0, int dim1) {
  if (!t) return NULL;
  int d0, d1;
  if (loom_norm_dim("transpose", dim0, t->ndim, &d0) != LOOM_OK || loom_norm_dim("transpose", dim1, t->ndim, &d1) != LOOM_OK)
    return NULL;
  int perm[LOOM_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++) perm[i] = i;
  perm[d0] = d1;
  perm[d1] = d0;
  return loom_permute(t, perm);
}

loom_tensor *loom_slice(loom_tensor *t, int dim, int64_t start, int64_t end, int64_t step) {
  if (!t) return NULL;
  int d;
  if (loom_norm_dim("slice", dim, t->ndim, &d) != LOOM_OK) return NULL;
  if (t->ndim == 0) {
    loom_set_error(LOOM_ERR_SHAPE, "slice: cannot slice a 0-d tensor");
    return NULL;
  }
  int64_t n = t->shape[d];
  if (step < 1) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "slice: step must be >= 1 (got %lld)", (long long)step);
    return NULL;
  }
  if (start < 0) start += n;
  if (end < 0) end += n;
  if (start < 0) start = 0;
  if (end > n) end = n;
  if (start > n) start = n;
  /* Store a fully normalized range (0 <= start <= end <= n): backward replays
   * this slice with the recorded ints, and an end that is still negative
   * (e.g. -7 on 6 elements) would be wrapped a second time there. */
  if (end < start) end = start;
  int64_t len = end > start ? (end - start + step - 1) / step : 0;
  int64_t shape[LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++) {
    shape[i] = t->shape[i];
    strides[i] = t->strides[i];
  }
  shape[d] = len;
  strides[d] = t->strides[d] * step;
  loom_tensor *v = loom_tensor_new_header(t->storage, t->offset + start * t->strides[d], t->dtype, t->ndim, shape, strides);
  int64_t ints[4] = {d, start, end, step};
  return record_view(LOOM_OP_VIEW_SLICE, t, v, ints, 4);
}

loom_tensor *loom_expand(loom_tensor *t, int ndim, const int64_t *shape) {
  if (!t) return NULL;
  if (ndim < t->ndim || ndim > LOOM_MAX_DIMS) {
    loom_set_error(LOOM_ERR_SHAPE, "expand: cannot expand %d dims to %d", t->ndim, ndim);
    return NULL;
  }
  if (ndim > 0 && !shape) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "expand: shape is NULL");
    return NULL;
  }
  int64_t strides[LOOM_MAX_DIMS];
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) {
      loom_set_error(LOOM_ERR_SHAPE, "expand: dimension %d is negative (%lld)", i, (long long)shape[i]);
      return NULL;
    }
    int td = i - (ndim - t->ndim);
    if (td < 0) { strides[i] = 0; continue; }
    if (t->shape[td] == shape[i]) strides[i] = t->strides[td];
    else if (t->shape[td] == 1) strides[i] = 0;
    else {
      char b1[96], b2[96];
      loom_set_error(LOOM_ERR_SHAPE, "expand: cannot broadcast %s to %s", loom_shape_str(t->ndim, t->shape, b1, 96),
                     loom_shape_str(ndim, shape, b2, 96));
      return NULL;
    }
  }
  loom_tensor *v = loom_tensor_new_header(t->storage, t->offset, t->dtype, ndim, shape, strides);
  return record_view(LOOM_OP_VIEW_EXPAND, t, v, NULL, 0);
}

loom_tensor *loom_detach(loom_tensor *t) {
  if (!t) return NULL;
  return loom_tensor_adopt(loom_tensor_new_header(t->storage, t->offset, t->dtype, t->ndim, t->shape, t->strides));
}

loom_tensor *loom_contiguous(loom_tensor *t) {
  if (!t) return NULL;
  if (loom_tensor_is_contiguous(t)) return loom_tensor_adopt(loom_tensor_retain(t));
  return loom_cast(t, t->dtype);
}
