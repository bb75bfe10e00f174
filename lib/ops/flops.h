/* flops.h (internal) — how much arithmetic an op did, for the profiler's
 * GFLOP/s column. */
#ifndef LOOM_OPS_FLOPS_H
#define LOOM_OPS_FLOPS_H

#include "ops/op.h"

/* Floating-point operations of op id on a (after it ran: outputs set),
 * counting a multiply-add as 2; 0 for ops that move data or whose count is
 * not known (the profiler then shows no GFLOP/s). */
double loom_op_flops(loom_op_id id, const loom_op_args *a);

#endif
