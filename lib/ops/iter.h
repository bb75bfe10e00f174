/* iter.h (internal) — strided N-d iteration with broadcasting, shared by the
 * CPU kernels and the CUDA launch code (which copies it into its own plain-C
 * struct). */
#ifndef LOOM_OPS_ITER_H
#define LOOM_OPS_ITER_H

#include <stdint.h>
#include "tensor/tensor_internal.h"

/* Strided N-d iteration over an output shape with up to 3 operands. Dims are
 * coalesced; the innermost dim is walked by the caller's loop. */
typedef struct loom_iter {
  int ndim;                       /* after coalescing, >= 1 */
  int nops;
  int64_t shape[LOOM_MAX_DIMS];
  int64_t strides[3][LOOM_MAX_DIMS];
  int64_t inner;                  /* shape[ndim-1] */
  int64_t rows;                   /* product of the other dims */
} loom_iter;

/* ops[0] is the output (its own strides); ops[1..] are broadcast to it. */
void loom_iter_init(loom_iter *it, int nops, loom_tensor *const *ops);
/* Element offsets (in elements) of row r's first element for each operand. */
void loom_iter_row_offsets(const loom_iter *it, int64_t r, int64_t *offs);

#endif
