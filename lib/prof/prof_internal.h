/* prof_internal.h (internal to lib/prof) — the recorded events, the stopped
 * session the writers read, the device-process tracks and device timing.
 *
 * Recording: each thread appends to its own buffer (its mutex is contended
 * only by stop). A session generation number tags everything recorded, so
 * a range begun in one session and ended in the next is dropped, never
 * mixed in. Stop moves every buffer into one immutable session that the
 * trace writer and the summary read until the next start. */
#ifndef LOOM_PROF_INTERNAL_H
#define LOOM_PROF_INTERNAL_H

#include <pthread.h>
#include <stdio.h>
#include "prof/prof.h"

enum { EV_RANGE = 0, EV_ALLOC = 1 };
enum { EV_UNCLOSED = 1 };

typedef struct prof_event {
  int64_t t0, t1;    /* ns, CLOCK_MONOTONIC (t1 == t0 for instants) */
  const char *name;  /* range name or allocator action */
  const char *site;  /* EV_ALLOC: the op that made the allocation */
  double flops;      /* EV_RANGE */
  /* EV_RANGE: v[0] bytes, v[1] step number (steps). EV_ALLOC: address,
   * size, allocated, reserved, active. */
  int64_t v[5];
  const void *stream; /* EV_ALLOC */
  uint32_t flow;     /* EV_RANGE: flow id of its device slice (0: none) */
  int16_t tid;       /* thread (set when collected) */
  int16_t track;     /* EV_ALLOC: device process */
  uint8_t kind, cat, flags;
} prof_event;

/* A device slice: the device time of a range on one stream. */
typedef struct prof_slice {
  int64_t t0, t1;
  const char *name;
  uint32_t flow;
  int16_t track, stream;
  uint8_t cat;
} prof_slice;

typedef struct prof_thread {
  int tid;
  char name[48];
} prof_thread;

/* What stop leaves for the writer and the summary. */
typedef struct prof_session {
  int have;
  int64_t t_start, t_stop;
  prof_event *ev;
  size_t nev;
  prof_slice *sl;
  size_t nsl;
  prof_thread *th;
  int nth;
  int64_t steps, dropped, dropped_device;
} prof_session;

/* ---- recorder.c ---------------------------------------------------------- */
/* The current generation (valid while recording). */
uint32_t loom_prof_gen(void);
/* When the current (or last) recording started. */
int64_t loom_prof_start_ns(void);
/* Options of the current recording. */
int loom_prof_opt_device_timing(void);
int loom_prof_opt_record_memory(void);
/* Append e to the calling thread's buffer if gen is still recording.
 * Returns 0 when dropped. */
int loom_prof_emit(const prof_event *e, uint32_t gen);
const char *loom_prof_cat_name(int cat);
/* Under the profiler lock: the stopped session (have == 0: none). */
const prof_session *loom_prof_session(void);
void loom_prof_lock(void);
void loom_prof_unlock(void);
/* Register an exit handler that stops a LOOM_PROFILE recording (called
 * again after the CUDA runtime initializes, so ours runs before its
 * teardown). */
void loom_prof_register_exit(void);

/* ---- ranges.c ------------------------------------------------------------ */
/* Close this thread's open user ranges at stop (marked unclosed). */
void loom_prof_close_user_ranges(int64_t t);
void loom_prof_set_site(const char *site);

/* ---- tracks.c: device processes (one per device / memory pool) ------------ */
#define LOOM_PROF_MAX_TRACKS 96
/* Index of the process named name ("cpu", "cuda:0", "pinned"), added on
 * first use; -1 when the table is full. Lock-free lookup. */
int loom_prof_track(const char *name);
int loom_prof_ntracks(void);
const char *loom_prof_track_name(int track);
/* A timestamp for an allocator event on track: now, but strictly after the
 * previous one (callers hold the pool's lock, one per track). */
int64_t loom_prof_track_stamp(int track);

/* ---- devtime.c: device timing ------------------------------------------- */
/* Start a timed range on stream (of dev): returns a handle, -1 when device
 * timing could not be had (counted as dropped). *tl receives the device's
 * timeline, *flow the flow id that links the host range to its slice. */
int32_t loom_prof_dev_begin(loom_device dev, loom_stream *stream, const char *name, int cat, uint32_t gen,
                            uint32_t *flow, int16_t *tl);
void loom_prof_dev_end(int16_t tl, int32_t handle, uint32_t gen);
/* New session: forget pending pairs and slices. */
void loom_prof_dev_reset(void);
/* loom_shutdown (after the recording stopped): destroy every timeline's
 * events and forget the timelines; the next timed range rebuilds them. */
void loom_prof_dev_release(void);
/* Stop: wait (host side) for the last event of each device, resolve every
 * pair of generation gen; returns the slices (malloc'd) and how many pairs
 * were dropped. */
loom_status loom_prof_dev_finish(uint32_t gen, prof_slice **out, size_t *n, int64_t *dropped);
/* Name of stream s of the device whose process is track ("compute stream",
 * "copy stream", "stream 3"). */
const char *loom_prof_dev_stream_name(int track, int s);

/* ---- nvtx.c ---------------------------------------------------------------- */
int loom_prof_nvtx_available(void);
void loom_prof_nvtx_push(int cat, const char *name);
void loom_prof_nvtx_pop(void);

/* ---- trace_json.c / summary.c ------------------------------------------------ */
loom_status loom_prof_write_json(const prof_session *s, FILE *f, const char *path);
char *loom_prof_summary_text(const prof_session *s, int max_rows);
int loom_prof_summary_fill(const prof_session *s, loom_profiler_row *rows, size_t row_size, int max);

#endif
