/* grad_table.h (internal) — autograd's half of the op table: for each op
 * id, its backward rule and which tensors a recorded node keeps for it.
 * The op table (ops/op.h) knows nothing of gradients. */
#ifndef LOOM_AUTOGRAD_GRAD_TABLE_H
#define LOOM_AUTOGRAD_GRAD_TABLE_H

#include "ops/op.h"

struct loom_node;
/* Given the node and d(out0), compute gx[k] for each input k with
 * node->needs_grad[k] (others stay NULL), using ops. */
typedef loom_status (*loom_backward_fn)(struct loom_node *n, loom_tensor *gy, loom_tensor **gx);

/* Which tensors a node keeps for backward (bit k: input k; OUT0: output 0). */
#define LOOM_SAVE_IN(k) (1u << (k))
#define LOOM_SAVE_OUT0 (1u << 8)
#define LOOM_SAVE_OUT1 (1u << 9)

typedef struct loom_grad_def {
  loom_backward_fn backward;
  unsigned saves;
} loom_grad_def;

/* op's entry, or NULL when op has no backward rule (it is then never
 * recorded: its result does not require grad) or is not an op id. */
const loom_grad_def *loom_grad_get(loom_op_id op);

#endif
