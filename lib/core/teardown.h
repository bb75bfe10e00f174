/* teardown.h (internal) — the hook table loom_shutdown (loom/shutdown.h)
 * runs. The state to tear down lives in many layers (allocator caches in
 * alloc, CUDA handles in ops, streams and the deferred-error word in
 * device, ...), and core may not call up to them: instead each file that
 * keeps such state registers a hook here, at load time (LOOM_TEARDOWN), and
 * loom_shutdown runs them.
 *
 * Order: every quiesce hook first (lowest layer first: they wait for the
 * devices, so nothing still queued reads what is about to be freed), then
 * every teardown hook from the highest layer down, and within a layer in
 * the reverse order of registration. So ops gives its workspace back to the
 * allocator before alloc returns the allocator's segments, and device
 * destroys the streams the allocator's events were recorded on last. A hook
 * must leave its state as before first use (loom may be used again) and be
 * a no-op when there is nothing to free.
 *
 * Before any of that, the busy checks (LOOM_BUSY_CHECK): a layer whose
 * objects own threads or device work that teardown would pull memory from
 * under (data loaders' worker threads, communicators) says whether any is
 * still alive. If one is, loom_shutdown refuses with LOOM_ERR_STATE naming
 * them and tears nothing down: freeing the caches under running threads
 * crashes them. */
#ifndef LOOM_CORE_TEARDOWN_H
#define LOOM_CORE_TEARDOWN_H

#include "loom/status.h"

/* The layers of docs/design.md §2, lowest first. */
typedef enum loom_layer {
  LOOM_LAYER_CORE = 0,
  LOOM_LAYER_DEVICE,
  LOOM_LAYER_PROF,
  LOOM_LAYER_ALLOC,
  LOOM_LAYER_GRAPH,
  LOOM_LAYER_TENSOR,
  LOOM_LAYER_OPS,
  LOOM_LAYER_AUTOGRAD,
  LOOM_LAYER_AMP,
  LOOM_LAYER_NN,
  LOOM_LAYER_OPTIM,
  LOOM_LAYER_DATA,
  LOOM_LAYER_DIST,
  LOOM_LAYER_IO,
  LOOM_LAYER_COUNT
} loom_layer;

/* A hook: LOOM_OK, or an error (with loom_set_error) that loom_shutdown
 * returns once every other hook has run too. */
typedef loom_status (*loom_teardown_fn)(void);

/* LOOM_HOOK_BUSY: LOOM_OK when nothing of the layer is alive, else
 * LOOM_ERR_STATE with a message saying what (e.g. "2 data loaders"). */
enum { LOOM_HOOK_QUIESCE = 0, LOOM_HOOK_TEARDOWN = 1, LOOM_HOOK_BUSY = 2 };

/* Register fn (once; a second registration of the same fn is ignored).
 * Thread-safe; meant for load-time constructors (LOOM_TEARDOWN). */
void loom_teardown_register(loom_layer layer, int kind, loom_teardown_fn fn);

/* Register fn from a constructor of the file that keeps the state. */
#define LOOM_TEARDOWN(layer, fn)                                                       \
  __attribute__((constructor)) static void loom_teardown_reg_##fn(void) {              \
    loom_teardown_register((layer), LOOM_HOOK_TEARDOWN, fn);                           \
  }
#define LOOM_QUIESCE(layer, fn)                                                        \
  __attribute__((constructor)) static void loom_quiesce_reg_##fn(void) {               \
    loom_teardown_register((layer), LOOM_HOOK_QUIESCE, fn);                            \
  }

#define LOOM_BUSY_CHECK(layer, fn)                                                     \
  __attribute__((constructor)) static void loom_busy_reg_##fn(void) {                  \
    loom_teardown_register((layer), LOOM_HOOK_BUSY, fn);                               \
  }

/* Hooks registered so far (tests). */
int loom_teardown_count(void);

#endif
