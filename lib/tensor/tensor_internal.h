/* tensor_internal.h (internal) — the tensor and storage structs, and helpers
 * shared by tensor/, ops/, autograd/, nn/, optim/, amp/ and data/. */
#ifndef LOOM_TENSOR_INTERNAL_H
#define LOOM_TENSOR_INTERNAL_H

#include <stdatomic.h>
#include "loom/tensor.h"
#include "core/error.h"

struct loom_node;

typedef void (*loom_storage_release_fn)(void *data, void *ctx);

typedef struct loom_storage {
  atomic_int refcount;
  atomic_uint version;            /* bumped by every in-place write (autograd checks it) */
  loom_device device;
  void *data;
  size_t nbytes;
  loom_storage_release_fn release;  /* NULL: memory came from loom_alloc_malloc */
  void *release_ctx;
} loom_storage;

struct loom_tensor {
  atomic_int refcount;
  loom_storage *storage;
  int64_t offset;                 /* in elements */
  loom_dtype dtype;
  int ndim;
  int64_t shape[LOOM_MAX_DIMS];
  int64_t strides[LOOM_MAX_DIMS]; /* in elements */
  /* autograd */
  bool requires_grad;
  struct loom_tensor *grad;       /* owned */
  struct loom_node *grad_fn;      /* owned reference (opaque here: autograd's node) */
  void (*hook)(loom_tensor *t, loom_tensor *grad, void *user); /* grad-ready hook */
  void *hook_user;
  void *user_tag;                 /* free for subsystems (e.g. amp low-precision copy) */
  void (*user_tag_free)(void *);  /* if set, called on user_tag when the tensor dies (amp: its copy) */
};

/* Wrap memory loom does not own (zero copy). release(data, ctx) is called
 * when the last tensor viewing it dies (NULL: never). Follows the ownership
 * rule (belongs to the open scope if any). */
loom_tensor *loom_tensor_wrap(void *data, size_t nbytes, loom_device dev, int ndim, const int64_t *shape,
                              loom_dtype dt, loom_storage_release_fn release, void *ctx);

/* A header over memory that stays the caller's (never freed by loom), not
 * adopted by any scope: for kernels that need scratch tensors. */
loom_tensor *loom_tensor_view_raw(void *data, loom_dtype dt, int ndim, const int64_t *shape, loom_device dev);

/* A new tensor header (retained storage) with the given geometry; does not
 * join a scope (the caller decides via loom_tensor_adopt). */
loom_tensor *loom_tensor_new_header(loom_storage *st, int64_t offset, loom_dtype dt, int ndim,
                                    const int64_t *shape, const int64_t *strides);
/* Hand a freshly created tensor (refcount 1) to the ownership rule: the open
 * scope takes it, or the caller keeps it. Returns t; NULL with an error when
 * the scope cannot record it (out of memory), having released t. */
loom_tensor *loom_tensor_adopt(loom_tensor *t);
/* Allocate uninitialized contiguous storage + header, not yet adopted. */
loom_tensor *loom_tensor_alloc_raw(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev);

/* Record an in-place write to t's memory: tensors saved for backward from
 * before it are then refused by the engine instead of giving wrong grads. */
static inline void loom_tensor_bump_version(loom_tensor *t) {
  if (t) atomic_fetch_add(&t->storage->version, 1u);
}

static inline void *loom_tensor_ptr(const loom_tensor *t) {
  return (char *)t->storage->data + t->offset * (int64_t)loom_dtype_size(t->dtype);
}

/* Byte copies between host memory and a contiguous tensor (host_copy.c):
 * no kernel, no conversion; device-to-host waits for the copy. */
loom_status loom_copy_from_host_raw(loom_tensor *dst, const void *src);
loom_status loom_copy_to_host_raw(loom_tensor *src, void *dst);

/* Autograd registers how a tensor releases its grad_fn (loom_node_release)
 * before it attaches the first one, as PyTorch's c10 leaves autograd
 * metadata to a hook: the tensor layer never sees a node. */
typedef void (*loom_grad_fn_release_fn)(struct loom_node *n);
void loom_tensor_set_grad_fn_release(loom_grad_fn_release_fn fn);

int64_t loom_shape_numel(int ndim, const int64_t *shape);
void loom_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);

#endif
