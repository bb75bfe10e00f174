/* capture.h (internal) — the graph-capture state every layer may report to:
 * the capture record open on this thread (set by lib/graph while a capture
 * runs), the op running on this thread (set by the op dispatcher, for
 * messages), capture-unsafe calls (host waits from device/sync_stats.c,
 * pinned allocations from alloc.c, random-number draws from rng.c) and the
 * process-wide count of graph replays. It lives in core so that the layers
 * below the graphs can report without calling up to them. Cheap when no
 * capture is open: a thread-local pointer test. */
#ifndef LOOM_CORE_CAPTURE_H
#define LOOM_CORE_CAPTURE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a capture remembers while it is open: the first capture-unsafe call
 * ("" while there is none). */
typedef struct loom_capture_record {
  char why[320];
} loom_capture_record;

/* Make rec this thread's open capture record (NULL: none is open). */
void loom_capture_open(loom_capture_record *rec);
/* This thread's open capture record, or NULL. */
loom_capture_record *loom_capture_current(void);
/* Set this thread's running op name (NULL: none); returns the previous. */
const char *loom_capture_set_op(const char *name);
/* what: "a stream synchronization", ... Recorded (the first one only) into
 * the open capture record, if any. */
void loom_capture_note_unsafe(const char *what);
/* Count one graph replay (lib/graph, after each launch). */
void loom_capture_count_replay(void);
/* Graph replays launched in this process so far. A replay moves device
 * state the host never sees (optimizer counts, the loss scaler): objects
 * that mirror such state on the host re-read it when this has changed
 * since their last read. */
int64_t loom_graph_replay_count(void);

#ifdef __cplusplus
}
#endif
#endif
