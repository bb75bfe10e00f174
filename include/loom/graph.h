/* graph.h — whole-step graph capture (CUDA graphs): record the kernels a
 * region launches once, then replay them with one launch per step.
 *
 *   loom_graph *g;
 *   loom_graph_capture_begin(dev, &g);   // after warm-up steps
 *   ... forward, backward, unscale, optimizer step ...
 *   loom_graph_capture_end(g);           // errors name the first unsafe op
 *   for (...) { copy the next batch into the captured inputs; loom_graph_replay(g); }
 *   loom_graph_free(g);
 *
 * While a capture is open on a thread:
 *  - allocations on its device come from a private pool that belongs to the
 *    graph (so the addresses baked into the graph stay valid for every
 *    replay, and nothing captured is handed to another stream); blocks the
 *    region frees go back to that pool, and the pool dies with the graph;
 *  - capture-unsafe calls — anything that makes the host wait for the device
 *    (stream/device/event synchronization, reading a value back such as
 *    loom_item), pinned host allocations, and random draws (dropout,
 *    loom_rand: the offset would be baked in and every replay would repeat
 *    the same numbers), and copies from host memory (loom_from_host,
 *    loom_copy_ or loom_to_device from a CPU tensor: the graph would copy
 *    from that host address again at every replay, after it was reused;
 *    fills and zeros/ones/full make none) — invalidate the capture:
 *    loom_graph_capture_end then fails with LOOM_ERR_STATE and a message
 *    naming the op (or API call) that did it.
 * On the CPU there are no graphs: capture runs the same checks and the
 * private pool (so a step can be tested for capture safety without a GPU),
 * and loom_graph_replay returns LOOM_ERR_UNSUPPORTED.
 * Tensors made inside the region are the graph's static buffers: keep the
 * inputs and outputs you need (loom_keep) and write new inputs into them
 * (loom_copy_) before each replay.
 *
 * A training step captures whole when its optimizer follows an attached LR
 * schedule (loom_optimizer_set_schedule: evaluated on the device) and its
 * loss scaler decides skips on the device (it does on CUDA); the loader can
 * write each batch into the captured inputs (loom_loader_next_into). State
 * the host mirrors (optimizer step counts, the scaler's scale and counters)
 * is read back after replays when asked.
 *
 * Threads: a capture belongs to the thread that began it; one open capture
 * per thread. Replays of one graph must not overlap. */
#ifndef LOOM_GRAPH_H
#define LOOM_GRAPH_H

#include "device.h"

LOOM_EXTERN_C_BEGIN

typedef struct loom_graph loom_graph;

LOOM_API loom_status loom_graph_capture_begin(loom_device dev, loom_graph **out);
LOOM_API loom_status loom_graph_capture_end(loom_graph *g);
LOOM_API loom_status loom_graph_replay(loom_graph *g);
/* Frees the graph and its private pool (the region's tensors must be gone). */
LOOM_API void loom_graph_free(loom_graph *g);
/* Is a capture open on this thread? */
LOOM_API bool loom_graph_capturing(void);
/* Bytes the graph's private pool holds (reserved), for accounting. */
LOOM_API int64_t loom_graph_pool_reserved(const loom_graph *g);

LOOM_EXTERN_C_END
#endif
