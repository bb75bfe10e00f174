/* record.h (internal) — how ops reach autograd without depending on it:
 * autograd installs a recorder, and dispatch and the views hand it every
 * op whose result may need a gradient. The tensor keeps only the opaque
 * grad_fn the recorder attaches. */
#ifndef LOOM_OPS_RECORD_H
#define LOOM_OPS_RECORD_H

#include "ops/op.h"

/* Record op on a (inputs set, outputs computed): attach a node to out[0].
 * LOOM_OK also when op has no backward rule (then nothing is recorded). */
typedef loom_status (*loom_op_recorder_fn)(loom_op_id op, const loom_op_args *a);

/* Install the recorder (lib/autograd/node.c does, see loom_autograd_install). */
void loom_op_set_recorder(loom_op_recorder_fn fn);

/* Hand op to the recorder when grad mode is on, out[0] is a float tensor
 * and an input requires grad; LOOM_OK without doing anything otherwise. */
loom_status loom_op_record(loom_op_id op, const loom_op_args *a);

#endif
