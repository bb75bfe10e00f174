/* fault.h (internal) — fault injection, the way SQLite tests itself: a
 * counter makes the Nth host allocation, device-allocator reservation or
 * file operation fail, as the real failure would (NULL/-1 with ENOMEM, EIO,
 * ENOSPC...; LOOM_ERR_OOM from the pool). Tests sweep N = 1, 2, ... over a
 * whole operation (tests/test_fault_sweep.c).
 *
 * Compiled in with -DLOOM_FAULT_INJECTION=ON (CI's sanitizer build); in
 * other builds loom_fault_fail is a constant false that the compiler folds
 * away, the control calls below do nothing and loom_fault_compiled() says
 * so. Every call site goes through core/sys.h (and the pool's reservation
 * in alloc/pool_segment.c, pool_expandable.c); scripts/check-raw-calls.py
 * keeps it that way. The counter is global and atomic: worker threads'
 * calls count too. */
#ifndef LOOM_CORE_FAULT_H
#define LOOM_CORE_FAULT_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a fault can hit; a mask of these selects which calls count. */
enum {
  LOOM_FAULT_HOST = 1u,    /* malloc, calloc, realloc, aligned allocation, strdup */
  LOOM_FAULT_DEVICE = 2u,  /* a segment or mapping the caching allocator asks a provider for */
  LOOM_FAULT_FILE = 4u,    /* open, read, write, fsync, rename, mmap, close, stdio and zlib file calls */
  LOOM_FAULT_ALL = 7u,
};

/* true when this build can inject faults (LOOM_FAULT_INJECTION). */
bool loom_fault_compiled(void);
/* From now on count the calls of the kinds in mask; the nth (1-based) fails,
 * and with persistent every later one too (until loom_fault_clear). Resets
 * the counts below. */
void loom_fault_arm(unsigned mask, long n, bool persistent);
/* Stop failing calls (counts are kept for reading). */
void loom_fault_clear(void);
/* Calls of the armed kinds seen since loom_fault_arm. */
long loom_fault_calls(void);
/* Faults injected since loom_fault_arm (0: the operation never reached the nth call). */
long loom_fault_hits(void);

#ifdef LOOM_FAULT_INJECTION
/* The one decision: should this call of kind fail? Counts it when armed. */
bool loom_fault_fail(unsigned kind);
#else
static inline bool loom_fault_fail(unsigned kind) { (void)kind; return false; }
#endif

#ifdef __cplusplus
}
#endif
#endif
