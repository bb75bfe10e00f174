/* fault.c — the fault-injection counter (core/fault.h). Lock-free: loader
 * workers and the caller's thread count into the same sequence. */
#include <execinfo.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/fault.h"

#ifdef LOOM_FAULT_INJECTION
static atomic_uint g_mask;      /* 0: disarmed */
static atomic_long g_target;    /* the call number that fails */
static atomic_bool g_persist;
static atomic_long g_calls, g_hits;

bool loom_fault_compiled(void) { return true; }

void loom_fault_arm(unsigned mask, long n, bool persistent) {
  atomic_store(&g_mask, 0u);
  atomic_store(&g_calls, 0);
  atomic_store(&g_hits, 0);
  atomic_store(&g_target, n);
  atomic_store(&g_persist, persistent);
  atomic_store(&g_mask, mask);
}

void loom_fault_clear(void) { atomic_store(&g_mask, 0u); }
long loom_fault_calls(void) { return atomic_load(&g_calls); }
long loom_fault_hits(void) { return atomic_load(&g_hits); }

bool loom_fault_fail(unsigned kind) {
  if (!(atomic_load_explicit(&g_mask, memory_order_relaxed) & kind)) return false;
  long c = atomic_fetch_add(&g_calls, 1) + 1;
  long t = atomic_load(&g_target);
  if (c == t || (c > t && atomic_load(&g_persist))) {
    atomic_fetch_add(&g_hits, 1);
    /* Where the fault landed, for whoever is fixing what it broke. */
    if (getenv("LOOM_FAULT_BACKTRACE")) {
      void *frames[24];
      backtrace_symbols_fd(frames, backtrace(frames, 24), STDERR_FILENO);
    }
    return true;
  }
  return false;
}
#else
bool loom_fault_compiled(void) { return false; }
void loom_fault_arm(unsigned mask, long n, bool persistent) { (void)mask, (void)n, (void)persistent; }
void loom_fault_clear(void) {}
long loom_fault_calls(void) { return 0; }
long loom_fault_hits(void) { return 0; }
#endif
