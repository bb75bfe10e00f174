/* tensor.h — tensors: creation, views, copies, casts, read-back, scopes.
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

/* ---- creation ----------------------------------------------------------- */
LOOM_API loom_tensor *loom_empty(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev);
LOOM_API loom_tensor *loom_zeros(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev);
LOOM_API loom_tensor *loom_ones(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev);
LOOM_API loom_tensor *loom_full(int ndim, const int64_t *shape, double value, loom_dtype dt, loom_device dev);
/* Copy host data (laid out row-major, of dtype dt) into a new tensor. */
LOOM_API loom_tensor *loom_from_host(const void *data, int ndim, const int64_t *shape,
                                     loom_dtype dt, loom_device dev);
/* [start, start+step, ...) up to end (exclusive). */
LOOM_API loom_tensor *loom_arange(double start, double end, double step, loom_dtype dt, loom_device dev);
/* U(0,1) / N(0,1) from the global generator (see rng.h). Float dtypes. */
LOOM_API loom_tensor *loom_rand(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev);
LOOM_API loom_tensor *loom_randn(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev);
/* Same-shaped companions. */
LOOM_API loom_tensor *loom_zeros_like(const loom_tensor *t);
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

/* ---- views (share storage) ---------------------------------------------- */
/* One dim of new_shape may be -1. Needs a viewable layout (else use reshape). */
LOOM_API loom_tensor *loom_view(loom_tensor *t, int ndim, const int64_t *shape);
/* View when possible, else a contiguous copy. */
LOOM_API loom_tensor *loom_reshape(loom_tensor *t, int ndim, const int64_t *shape);
LOOM_API loom_tensor *loom_transpose(loom_tensor *t, int dim0, int dim1);
LOOM_API loom_tensor *loom_permute(loom_tensor *t, const int *dims);
/* Elements start, start+step, ... < end along dim (step >= 1). */
LOOM_API loom_tensor *loom_slice(loom_tensor *t, int dim, int64_t start, int64_t end, int64_t step);
/* Broadcast view of t to shape (NumPy rules; no copy: broadcast dims get
 * stride 0, so write to the result only through ops, not in place). */
LOOM_API loom_tensor *loom_expand(loom_tensor *t, int ndim, const int64_t *shape);
/* t itself (retained) when contiguous, else a contiguous copy. */
LOOM_API loom_tensor *loom_contiguous(loom_tensor *t);
/* A view that shares storage but is cut off from autograd. */
LOOM_API loom_tensor *loom_detach(loom_tensor *t);

/* ---- copies and casts --------------------------------------------------- */
LOOM_API loom_tensor *loom_to_device(loom_tensor *t, loom_device dev);
LOOM_API loom_tensor *loom_cast(loom_tensor *t, loom_dtype dt);
LOOM_API loom_tensor *loom_clone(loom_tensor *t);
/* dst <- src elementwise (same shape; dtype and device may differ). */
LOOM_API loom_status loom_copy_(loom_tensor *dst, loom_tensor *src);
LOOM_API loom_status loom_fill_(loom_tensor *t, double value);
/* Copy out as dtype dt (row-major) into host memory of nbytes. */
LOOM_API loom_status loom_to_host(loom_tensor *t, void *dst, size_t nbytes, loom_dtype dt);
/* The single element as a double (t must have one element). */
LOOM_API loom_status loom_item(loom_tensor *t, double *out);

/* ---- streams -------------------------------------------------------------- */
/* Mark that t's memory is used by work queued on stream s, so freeing it
 * waits (without a host sync) until s is done before reusing the memory
 * (the caching allocator's record_stream, see alloc.h). */
LOOM_API loom_status loom_tensor_record_stream(loom_tensor *t, loom_stream *s);

/* ---- autograd flags (see autograd.h) ------------------------------------ */
LOOM_API loom_status loom_set_requires_grad(loom_tensor *t, bool requires_grad);
LOOM_API bool loom_requires_grad(const loom_tensor *t);
/* The accumulated gradient (borrowed; NULL if none yet). */
LOOM_API loom_tensor *loom_grad(const loom_tensor *t);

LOOM_EXTERN_C_END
#endif
