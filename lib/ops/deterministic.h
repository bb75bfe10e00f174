/* deterministic.h (internal) — deterministic mode for the kernels that
 * choose among algorithms (deterministic.c; public: loom_set_deterministic
 * in ops.h). */
#ifndef LOOM_OPS_DETERMINISTIC_H
#define LOOM_OPS_DETERMINISTIC_H

#include <stdbool.h>
#include "loom/ops.h"

/* LOOM_OK, or the error of a bad LOOM_DETERMINISTIC (every op returns it). */
loom_status loom_deterministic_check(void);

#endif
