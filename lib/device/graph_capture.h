/* graph_capture.h (internal) — what graph capture (graph.c) needs to hear
 * from the rest of the library: which op is running on this thread (set by
 * the op dispatcher, for messages), and capture-unsafe calls (host waits
 * from sync_stats.c, pinned allocations from alloc.c, random-number draws
 * from rng.c), and whether replays have run. Cheap when no capture is open:
 * a thread-local pointer test. */
#ifndef LOOM_DEVICE_GRAPH_CAPTURE_H
#define LOOM_DEVICE_GRAPH_CAPTURE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Set this thread's running op name (NULL: none); returns the previous. */
const char *loom_capture_set_op(const char *name);
/* what: "a stream synchronization", ... Recorded if a capture is open. */
void loom_capture_note_unsafe(const char *what);
/* Graph replays launched in this process so far. A replay moves device
 * state the host never sees (optimizer counts, the loss scaler): objects
 * that mirror such state on the host re-read it when this has changed
 * since their last read. */
int64_t loom_graph_replay_count(void);

#ifdef __cplusplus
}
#endif
#endif
