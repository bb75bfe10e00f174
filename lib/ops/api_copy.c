/* api_copy.c — copies between devices, casts, fills and read-back to the
 * host: the strided, converting part runs the COPY op's kernel; the byte
 * transfers between host and device are tensor/host_copy.c's (a fill writes
 * its one value without them: capture-safe, see write_element). */
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/cpu_util.h"
#include "ops/op.h"
#include "core/sys.h"
#if defined(LOOM_HAVE_CUDA) && defined(LOOM_CUDA_OPS)
#include "device/device_internal.h"
#include "ops/cuda/cuda_launch.h"
#endif

/* A contiguous same-device, same-dtype copy (autograd-free), or t retained. */
static loom_tensor *contig_raw(loom_tensor *t) {
  if (loom_tensor_is_contiguous(t)) return loom_tensor_retain(t);
  loom_tensor *c = loom_tensor_alloc_raw(t->ndim, t->shape, t->dtype, t->storage->device);
  if (!c) return NULL;
  loom_op_args a = {.in = {t}, .n_in = 1, .out = {c}, .n_out = 1};
  if (loom_op_run_into(LOOM_OP_COPY, &a) != LOOM_OK) {
    loom_tensor_release(c);
    return NULL;
  }
  return c;
}

loom_tensor *loom_cast(loom_tensor *t, loom_dtype dt) {
  if (!t) return NULL;
  loom_op_args a = {.in = {t}, .n_in = 1};
  a.i[0] = dt;
  return loom_op_run(LOOM_OP_COPY, &a);
}

loom_tensor *loom_clone(loom_tensor *t) { return t ? loom_cast(t, t->dtype) : NULL; }

loom_tensor *loom_to_device(loom_tensor *t, loom_device dev) {
  if (!t) return NULL;
  if (loom_device_check(dev) != LOOM_OK) return NULL;
  if (loom_device_eq(t->storage->device, dev)) return loom_tensor_adopt(loom_tensor_retain(t));
  if (loom_requires_grad(t) && loom_is_grad_enabled()) {
    loom_set_error(LOOM_ERR_UNSUPPORTED,
                   "to_device: moving a tensor that requires grad is not differentiable; move parameters before "
                   "training or detach first");
    return NULL;
  }
  loom_tensor *src = contig_raw(t);
  if (!src) return NULL;
  loom_tensor *dst = loom_tensor_alloc_raw(t->ndim, t->shape, t->dtype, dev);
  loom_status st = dst ? LOOM_OK : loom_last_status();
  if (st == LOOM_OK) {
    if (src->storage->device.kind == LOOM_CPU) {
      st = loom_copy_from_host_raw(dst, loom_tensor_ptr(src));
    } else if (dev.kind == LOOM_CPU) {
      st = loom_copy_to_host_raw(src, loom_tensor_ptr(dst));
    } else {
      /* GPU to GPU through the host: simple and always correct. */
      size_t n = (size_t)loom_shape_numel(t->ndim, t->shape) * loom_dtype_size(t->dtype);
      void *tmp = loom_sys_malloc(n ? n : 1);
      st = tmp ? loom_copy_to_host_raw(src, tmp) : loom_set_error(LOOM_ERR_OOM, "to_device: out of host memory");
      if (st == LOOM_OK) st = loom_copy_from_host_raw(dst, tmp);
      loom_sys_free(tmp);
    }
  }
  loom_tensor_release(src);
  if (st != LOOM_OK) {
    loom_tensor_release(dst);
    return NULL;
  }
  return loom_tensor_adopt(dst);
}

loom_status loom_copy_(loom_tensor *dst, loom_tensor *src) {
  if (!dst || !src) return loom_set_error(LOOM_ERR_NULL_INPUT, "copy_: NULL tensor");
  loom_tensor_bump_version(dst);
  if (loom_shape_numel(dst->ndim, dst->shape) != loom_shape_numel(src->ndim, src->shape)) {
    char b1[96], b2[96];
    return loom_set_error(LOOM_ERR_SHAPE, "copy_: destination %s and source %s differ in size",
                          loom_shape_str(dst->ndim, dst->shape, b1, 96), loom_shape_str(src->ndim, src->shape, b2, 96));
  }
  loom_tensor *s = src;
  if (!loom_device_eq(dst->storage->device, src->storage->device)) {
    /* Our own reference, whatever scope the caller has open: loom_keep
     * would hand the copy to the caller's scope, which releases it again
     * after the release below (a use-after-free seen on the GPU). */
    bool prev = loom_set_grad_enabled(false);
    loom_scope_begin();
    s = loom_to_device(src, dst->storage->device);
    if (s) loom_tensor_retain(s);
    loom_scope_end();
    loom_set_grad_enabled(prev);
    if (!s) return loom_last_status();
  } else {
    loom_tensor_retain(s);
  }
  loom_tensor *view = s;
  bool same_shape = s->ndim == dst->ndim;
  for (int d = 0; same_shape && d < dst->ndim; d++) same_shape = s->shape[d] == dst->shape[d];
  if (!same_shape) {
    /* Same element count, different shape (rank or dims): read the source as
     * contiguous row-major. Handing differently-shaped operands to the copy
     * kernel would broadcast one against the other ([1,6] -> [6,1] copied
     * element 0 six times; [2,3] -> [3,2] read the wrong elements). */
    int64_t strides[LOOM_MAX_DIMS];
    loom_contiguous_strides(dst->ndim, dst->shape, strides);
    if (!loom_tensor_is_contiguous(s)) {
      view = NULL;
      loom_set_error(LOOM_ERR_SHAPE, "copy_: a non-contiguous source must have the destination's shape");
    } else {
      view = loom_tensor_new_header(s->storage, s->offset, s->dtype, dst->ndim, dst->shape, strides);
    }
  }
  loom_status st = loom_last_status();
  if (view) {
    loom_op_args a = {.in = {view}, .n_in = 1, .out = {dst}, .n_out = 1};
    st = loom_op_run_into(LOOM_OP_COPY, &a);
  }
  if (view != s) loom_tensor_release(view);
  loom_tensor_release(s);
  return st;
}

/* The one element of src (on its device) <- the es bytes at buf, without a
 * copy from host memory: on a GPU the bytes travel as a kernel argument.
 * A host-to-device memcpy recorded by a graph capture would read buf (a
 * stack slot of this call) again at every replay, long after it was
 * reused: the backward seed and every zeros/ones made inside a captured
 * step would be garbage (the first GPU run: replays that did not train). */
static loom_status write_element(loom_tensor *src, const void *buf, size_t es) {
  loom_device d = src->storage->device;
  if (d.kind == LOOM_CPU) {
    memcpy(loom_tensor_ptr(src), buf, es);
    return LOOM_OK;
  }
#if defined(LOOM_HAVE_CUDA) && defined(LOOM_CUDA_OPS)
  if (loom_device_is_real_cuda(d)) {
    LOOM_TRY(loom_cuda_set_device(d.index));
    loom_stream *s = loom_stream_current(d);
    if (!s) return loom_last_status();
    cudaError_t e = loom_cu_write_bytes(loom_tensor_ptr(src), buf, es, (cudaStream_t)loom_stream_native(s));
    return e == cudaSuccess ? LOOM_OK : loom_cuda_error(e, "loom_cu_write_bytes (fill_)", __FILE__, __LINE__);
  }
#endif
  return loom_copy_from_host_raw(src, buf);  /* simulated GPUs (tests) */
}

loom_status loom_fill_(loom_tensor *t, double value) {
  if (!t) return loom_set_error(LOOM_ERR_NULL_INPUT, "fill_: tensor is NULL");
  loom_tensor_bump_version(t);
  /* Write one element, then broadcast it with the copy kernel. */
  int64_t one = 1;
  unsigned char buf[8];
  loom_cpu_store_f64(buf, t->dtype, 0, value);
  loom_tensor *src = loom_tensor_alloc_raw(0, &one, t->dtype, t->storage->device);
  if (!src) return loom_last_status();
  loom_status st = write_element(src, buf, loom_dtype_size(t->dtype));
  if (st == LOOM_OK) {
    int64_t zeros[LOOM_MAX_DIMS] = {0};
    loom_tensor *bc = loom_tensor_new_header(src->storage, 0, t->dtype, t->ndim, t->shape, zeros);
    if (!bc) st = loom_last_status();
    else {
      loom_op_args a = {.in = {bc}, .n_in = 1, .out = {t}, .n_out = 1};
      st = loom_op_run_into(LOOM_OP_COPY, &a);
      loom_tensor_release(bc);
    }
  }
  loom_tensor_release(src);
  return st;
}

loom_status loom_to_host(loom_tensor *t, void *dst, size_t nbytes, loom_dtype dt) {
  if (!t) return loom_last_status() != LOOM_OK ? loom_last_status() : loom_set_error(LOOM_ERR_NULL_INPUT, "to_host: tensor is NULL");
  if (!dst) return loom_set_error(LOOM_ERR_INVALID_ARG, "to_host: destination is NULL");
  if (!loom_dtype_valid((int)dt)) return loom_set_error(LOOM_ERR_DTYPE, "to_host: invalid dtype %d", (int)dt);
  int64_t n = loom_shape_numel(t->ndim, t->shape);
  if ((size_t)n * loom_dtype_size(dt) > nbytes)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "to_host: %lld elements of %s need %zu bytes but the buffer has %zu",
                          (long long)n, loom_dtype_name(dt), (size_t)n * loom_dtype_size(dt), nbytes);
  bool prev = loom_set_grad_enabled(false);
  loom_tensor *c = NULL;
  if (t->dtype == dt) c = contig_raw(t);
  else {
    c = loom_tensor_alloc_raw(t->ndim, t->shape, dt, t->storage->device);
    if (c) {
      loom_op_args a = {.in = {t}, .n_in = 1, .out = {c}, .n_out = 1};
      if (loom_op_run_into(LOOM_OP_COPY, &a) != LOOM_OK) {
        loom_tensor_release(c);
        c = NULL;
      }
    }
  }
  loom_set_grad_enabled(prev);
  if (!c) return loom_last_status();
  loom_status st = loom_copy_to_host_raw(c, dst);
  loom_tensor_release(c);
  return st;
}

loom_status loom_item(loom_tensor *t, double *out) {
  if (!t) return loom_last_status() != LOOM_OK ? loom_last_status() : loom_set_error(LOOM_ERR_NULL_INPUT, "item: tensor is NULL");
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "item: out is NULL");
  if (loom_shape_numel(t->ndim, t->shape) != 1) {
    char b[96];
    return loom_set_error(LOOM_ERR_SHAPE, "item: tensor of shape %s has %lld elements, not 1",
                          loom_shape_str(t->ndim, t->shape, b, 96), (long long)loom_shape_numel(t->ndim, t->shape));
  }
  if (loom_dtype_is_float(t->dtype)) {
    float v;
    LOOM_TRY(loom_to_host(t, &v, sizeof v, LOOM_F32));
    *out = v;
  } else {
    int64_t v;
    LOOM_TRY(loom_to_host(t, &v, sizeof v, LOOM_I64));
    *out = (double)v;
  }
  return LOOM_OK;
}
