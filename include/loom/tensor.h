/* tensor.h — tensors: storage, scopes, reference counting, metadata, grad
 * mode. Creation that fills memory, views, copies, casts and read-back are
 * ops (ops.h); gradients are autograd's (autograd.h).
 *
 * Ownership: every tensor is reference counted; inside an open scope, new
 * tensors belong to the scope and die with it unless kept; outside a scope,
 * the caller owns what it gets (release it with loom_tensor_release).
 *
 * Failure: functions returning a tensor return NULL and set loom_last_error();
 * every function taking a tensor accepts NULL (the result of an earlier
 * failure) and returns NULL / LOOM_ERR_NULL_INPUT, so an expression can be
 * written in one line and checked once.
 *
 * Threads: scopes are per thread. A tensor may be read from several threads;
 * it should be mutated by one. Reference counts are atomic. */
#ifndef LOOM_TENSOR_H
#define LOOM_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include "export.h"
#include "status.h"
#include "dtype.h"
#include "device.h"

LOOM_EXTERN_C_BEGIN

#define LOOM_MAX_DIMS 8

typedef struct loom_tensor loom_tensor;

/* ---- scopes ------------------------------------------------------------- */
/* Open a scope on this thread (scopes nest). */
LOOM_API void loom_scope_begin(void);
/* Close the innermost scope: release every tensor it owns. */
LOOM_API void loom_scope_end(void);
/* Move t out of the innermost scope: into the enclosing scope if there is
 * one, else to the caller, who then owns it. Returns t. */
LOOM_API loom_tensor *loom_keep(loom_tensor *t);
/* Depth of open scopes on this thread. */
LOOM_API int loom_scope_depth(void);

/* ---- reference counting ------------------------------------------------- */
LOOM_API loom_tensor *loom_tensor_retain(loom_tensor *t);
LOOM_API void loom_tensor_release(loom_tensor *t);

/* ---- creation (uninitialized memory; filled tensors: ops.h) ------------- */
LOOM_API loom_tensor *loom_empty(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev);
LOOM_API loom_tensor *loom_empty_like(const loom_tensor *t);

/* ---- metadata ------------------------------------------------------------ */
LOOM_API int loom_tensor_ndim(const loom_tensor *t);
LOOM_API int64_t loom_tensor_dim(const loom_tensor *t, int i);   /* negative i counts from the end */
LOOM_API const int64_t *loom_tensor_shape(const loom_tensor *t);
LOOM_API const int64_t *loom_tensor_strides(const loom_tensor *t); /* in elements */
LOOM_API int64_t loom_tensor_numel(const loom_tensor *t);
LOOM_API loom_dtype loom_tensor_dtype(const loom_tensor *t);
LOOM_API loom_device loom_tensor_device(const loom_tensor *t);
LOOM_API bool loom_tensor_is_contiguous(const loom_tensor *t);
/* Pointer to the first element (device memory for CUDA tensors). */
LOOM_API void *loom_tensor_data(const loom_tensor *t);
/* "[128, 784]" into buf. */
LOOM_API const char *loom_shape_str(int ndim, const int64_t *shape, char *buf, int n);

/* ---- grad mode (per thread; see autograd.h) ------------------------------ */
/* Whether ops record for autograd on this thread. Returns the previous mode. */
LOOM_API bool loom_set_grad_enabled(bool enabled);
LOOM_API bool loom_is_grad_enabled(void);
/* Convenience: no_grad_begin returns the previous mode for no_grad_end. */
static inline bool loom_no_grad_begin(void) { return loom_set_grad_enabled(false); }
static inline void loom_no_grad_end(bool prev) { loom_set_grad_enabled(prev); }

/* ---- streams -------------------------------------------------------------- */
/* Mark that t's memory is used by work queued on stream s, so freeing it
 * waits (without a host sync) until s is done before reusing the memory
 * (the caching allocator's record_stream, see alloc.h). */
LOOM_API loom_status loom_tensor_record_stream(loom_tensor *t, loom_stream *s);

/* ---- autograd state (set through autograd.h) ------------------------------ */
/* A leaf that requires grad, or the result of a recorded op. */
LOOM_API bool loom_requires_grad(const loom_tensor *t);
/* The accumulated gradient (borrowed; NULL if none yet). */
LOOM_API loom_tensor *loom_grad(const loom_tensor *t);

LOOM_EXTERN_C_END
#endif
