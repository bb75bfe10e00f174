/* api_memory_format.c — the memory format of 4-D [N, C, H, W] tensors:
 * contiguous (NCHW) or channels-last (NHWC strides), as in PyTorch. The
 * logical shape never changes; only the strides say how memory is laid out,
 * so every op sees one shape convention and picks its kernel by layout. */
#include "ops/op.h"

void loom_set_channels_last_strides(loom_tensor *t) {
  int64_t C = t->shape[1], H = t->shape[2], W = t->shape[3];
  t->strides[1] = 1;
  t->strides[3] = C;
  t->strides[2] = W * C;
  t->strides[0] = H * W * C;
}

static const int to_nhwc[4] = {0, 2, 3, 1};
static const int from_nhwc[4] = {0, 3, 1, 2};

bool loom_tensor_is_channels_last(const loom_tensor *t) {
  if (!t || t->ndim != 4) return false;
  /* Memory order C, W, H, N (fastest first); size-1 dims match any stride. */
  static const int order[4] = {1, 3, 2, 0};
  int64_t s = 1;
  for (int k = 0; k < 4; k++) {
    int d = order[k];
    if (t->shape[d] != 1 && t->strides[d] != s) return false;
    s *= t->shape[d];
  }
  return true;
}

loom_memory_format loom_tensor_memory_format(const loom_tensor *t) {
  /* Ambiguous layouts (C == 1, or H == W == 1) count as NCHW, PyTorch's choice. */
  if (loom_tensor_is_contiguous(t)) return LOOM_FORMAT_NCHW;
  return loom_tensor_is_channels_last(t) ? LOOM_FORMAT_NHWC : LOOM_FORMAT_STRIDED;
}

loom_tensor *loom_to_memory_format(loom_tensor *t, loom_memory_format f) {
  if (!t) {
    if (loom_last_status() == LOOM_OK) loom_set_error(LOOM_ERR_NULL_INPUT, "to_memory_format: input is NULL");
    return NULL;
  }
  if (f == LOOM_FORMAT_NCHW) return loom_contiguous(t);
  if (f != LOOM_FORMAT_NHWC) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "to_memory_format: format %d is not NCHW (0) or NHWC (1)", (int)f);
    return NULL;
  }
  if (t->ndim != 4) {
    char b[96];
    loom_set_error(LOOM_ERR_SHAPE, "to_memory_format: channels-last needs a 4-D [N, C, H, W] tensor, got %s",
                   loom_shape_str(t->ndim, t->shape, b, sizeof b));
    return NULL;
  }
  if (loom_tensor_is_channels_last(t)) return loom_tensor_adopt(loom_tensor_retain(t));
  /* Make the NHWC-ordered view contiguous, then view it back as [N, C, H, W]:
   * two views and one copy, all recorded for autograd. */
  return loom_permute(loom_contiguous(loom_permute(t, to_nhwc)), from_nhwc);
}
