/* capture.c — the graph-capture state of capture.h: a thread-local open
 * record and running op name, and an atomic replay count. */
#include <stdatomic.h>
#include <stdio.h>

#include "core/capture.h"

static _Thread_local loom_capture_record *tl_capture;
static _Thread_local const char *tl_op;
static atomic_llong g_replays;

void loom_capture_open(loom_capture_record *rec) { tl_capture = rec; }

loom_capture_record *loom_capture_current(void) { return tl_capture; }

const char *loom_capture_set_op(const char *name) {
  const char *prev = tl_op;
  tl_op = name;
  return prev;
}

void loom_capture_note_unsafe(const char *what) {
  loom_capture_record *r = tl_capture;
  if (!r || r->why[0]) return;
  if (tl_op)
    snprintf(r->why, sizeof r->why, "%s made %s during graph capture", tl_op, what);
  else
    snprintf(r->why, sizeof r->why, "%s happened during graph capture (a direct API call, outside any op)", what);
}

void loom_capture_count_replay(void) { atomic_fetch_add(&g_replays, 1); }

int64_t loom_graph_replay_count(void) { return (int64_t)atomic_load(&g_replays); }
