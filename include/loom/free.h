/* free.h — loom_free: giving back memory that loom handed to the caller.
 *
 * A few calls return memory the caller then owns — the text of
 * loom_memory_summary, loom_memory_snapshot_json and loom_profiler_summary,
 * the samples loom_idx_load reads. Free it with loom_free, never with the
 * caller's own free(): libloom may use another allocator or C runtime than
 * the program (a DLL on Windows, a Python process through ctypes).
 * Everything else loom makes has its own destructor (tensor.h's rule:
 * reference-counted objects are released, open files closed, other handles
 * freed with their loom_X_free). Thread-safe. */
#ifndef LOOM_FREE_H
#define LOOM_FREE_H

#include "export.h"

LOOM_EXTERN_C_BEGIN

/* Free memory loom returned to the caller. NULL is a no-op. */
LOOM_API void loom_free(void *p);

LOOM_EXTERN_C_END
#endif
