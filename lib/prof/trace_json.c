/* trace_json.c — a stopped recording as Chrome trace-event JSON (the format
 * Perfetto and chrome://tracing open).
 *
 * Layout: process 1 "loom host" has one track per host thread with the
 * ranges as complete ("X") events. Each device or memory pool is a process
 * of its own (pid 10 + its index): track 0 holds the allocator's events as
 * instants, the "memory" counter carries allocated/reserved/active bytes
 * after each of them, and each stream that got device time has a track with
 * its slices. A flow arrow ("s" on the host range, "f" on the slice) links
 * each launch to its device work. Timestamps are microseconds since the
 * profiler started, with nanosecond decimals. */
#include <inttypes.h>
#include <string.h>

#include "core/error.h"
#include "prof/prof_internal.h"
#include "core/sys.h"

#define HOST_PID 1
#define DEV_PID(t) (10 + (t))

static void put_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

static void put_ts(FILE *f, const char *key, int64_t ns) {
  int64_t us = ns / 1000, frac = ns % 1000;
  if (ns < 0) {
    us = -((-ns) / 1000);
    frac = (-ns) % 1000;
    fprintf(f, ",\"%s\":-%" PRId64 ".%03" PRId64, key, -us, frac);
    return;
  }
  fprintf(f, ",\"%s\":%" PRId64 ".%03" PRId64, key, us, frac);
}

static void meta(FILE *f, int *first, const char *what, int pid, int tid, const char *name) {
  fprintf(f, "%s\n{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", *first ? "" : ",", what, pid,
          tid);
  put_str(f, name);
  fputs("}}", f);
  *first = 0;
}

static void sort_index(FILE *f, int pid, int idx) {
  fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}", pid,
          idx);
}

loom_status loom_prof_write_json(const prof_session *s, FILE *f, const char *path) {
  int64_t t0 = s->t_start;
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"loom\",\"clock\":\"CLOCK_MONOTONIC\","
             "\"start_ns\":%" PRId64 ",\"stop_ns\":%" PRId64 ",\"steps\":%" PRId64 ",\"dropped_events\":%" PRId64
             ",\"dropped_device_ranges\":%" PRId64 "},\n\"traceEvents\":[",
          s->t_start, s->t_stop, s->steps, s->dropped, s->dropped_device);
  int first = 1;
  meta(f, &first, "process_name", HOST_PID, 0, "loom host");
  sort_index(f, HOST_PID, 0);
  for (int i = 0; i < s->nth; i++) meta(f, &first, "thread_name", HOST_PID, s->th[i].tid, s->th[i].name);

  /* Which device processes and stream tracks appear. */
  int nt = loom_prof_ntracks();
  unsigned char used[LOOM_PROF_MAX_TRACKS] = {0};
  for (size_t i = 0; i < s->nev; i++)
    if (s->ev[i].kind == EV_ALLOC && s->ev[i].track >= 0 && s->ev[i].track < nt) used[s->ev[i].track] |= 1;
  for (size_t i = 0; i < s->nsl; i++)
    if (s->sl[i].track >= 0 && s->sl[i].track < nt) used[s->sl[i].track] |= 2;
  for (int t = 0; t < nt; t++) {
    if (!used[t]) continue;
    meta(f, &first, "process_name", DEV_PID(t), 0, loom_prof_track_name(t));
    sort_index(f, DEV_PID(t), 1 + t);
    if (used[t] & 1) meta(f, &first, "thread_name", DEV_PID(t), 0, "allocator");
  }
  /* Stream track names. */
  static unsigned char named[LOOM_PROF_MAX_TRACKS][32];
  memset(named, 0, sizeof named);
  for (size_t i = 0; i < s->nsl; i++) {
    int t = s->sl[i].track, k = s->sl[i].stream;
    if (t < 0 || t >= LOOM_PROF_MAX_TRACKS || k < 0 || k >= 32 || named[t][k]) continue;
    named[t][k] = 1;
    meta(f, &first, "thread_name", DEV_PID(t), 1 + k, loom_prof_dev_stream_name(t, k));
  }

  for (size_t i = 0; i < s->nev; i++) {
    const prof_event *e = &s->ev[i];
    if (e->kind == EV_RANGE) {
      fputs(",\n{\"ph\":\"X\",\"cat\":", f);
      put_str(f, loom_prof_cat_name(e->cat));
      fputs(",\"name\":", f);
      put_str(f, e->name);
      fprintf(f, ",\"pid\":%d,\"tid\":%d", HOST_PID, e->tid);
      put_ts(f, "ts", e->t0 - t0);
      put_ts(f, "dur", e->t1 - e->t0);
      int args = e->flops > 0 || e->v[0] > 0 || e->flags || e->cat == LOOM_PROF_CAT_STEP;
      if (args) {
        fputs(",\"args\":{", f);
        const char *sep = "";
        if (e->flops > 0) fprintf(f, "%s\"flops\":%.0f", sep, e->flops), sep = ",";
        if (e->v[0] > 0) fprintf(f, "%s\"bytes\":%" PRId64, sep, e->v[0]), sep = ",";
        if (e->cat == LOOM_PROF_CAT_STEP) fprintf(f, "%s\"step\":%" PRId64, sep, e->v[1]), sep = ",";
        if (e->flags & EV_UNCLOSED) fprintf(f, "%s\"unclosed\":true", sep);
        fputc('}', f);
      }
      fputc('}', f);
      if (e->flow) {
        fprintf(f, ",\n{\"ph\":\"s\",\"cat\":\"launch\",\"name\":\"launch\",\"id\":%" PRIu32 ",\"pid\":%d,\"tid\":%d",
                e->flow, HOST_PID, e->tid);
        put_ts(f, "ts", e->t0 - t0);
        fputc('}', f);
      }
    } else {
      int pid = DEV_PID(e->track);
      fputs(",\n{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"allocator\",\"name\":", f);
      put_str(f, e->name);
      fprintf(f, ",\"pid\":%d,\"tid\":0", pid);
      put_ts(f, "ts", e->t0 - t0);
      fprintf(f, ",\"args\":{\"address\":%" PRIu64 ",\"size\":%" PRId64 ",\"stream\":%" PRIuPTR ",\"site\":",
              (uint64_t)e->v[0], e->v[1], (uintptr_t)e->stream);
      if (e->site) put_str(f, e->site);
      else fputs("null", f);
      fputs("}}", f);
      fprintf(f, ",\n{\"ph\":\"C\",\"name\":\"memory\",\"pid\":%d,\"tid\":0", pid);
      put_ts(f, "ts", e->t0 - t0);
      fprintf(f, ",\"args\":{\"allocated\":%" PRId64 ",\"reserved\":%" PRId64 ",\"active\":%" PRId64 "}}", e->v[2],
              e->v[3], e->v[4]);
    }
  }
  for (size_t i = 0; i < s->nsl; i++) {
    const prof_slice *d = &s->sl[i];
    int pid = DEV_PID(d->track), tid = 1 + d->stream;
    fputs(",\n{\"ph\":\"X\",\"cat\":", f);
    put_str(f, loom_prof_cat_name(d->cat));
    fputs(",\"name\":", f);
    put_str(f, d->name);
    fprintf(f, ",\"pid\":%d,\"tid\":%d", pid, tid);
    put_ts(f, "ts", d->t0 - t0);
    put_ts(f, "dur", d->t1 - d->t0);
    fprintf(f, ",\"args\":{\"flow\":%" PRIu32 "}}", d->flow);
    fprintf(f, ",\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"launch\",\"name\":\"launch\",\"id\":%" PRIu32
               ",\"pid\":%d,\"tid\":%d",
            d->flow, pid, tid);
    put_ts(f, "ts", d->t0 - t0);
    fputc('}', f);
  }
  fputs("\n]}\n", f);
  if (loom_sys_fflush(f) != 0 || ferror(f))
    return loom_set_error(LOOM_ERR_IO, "profiler: writing the trace '%s' failed (disk full?)", path ? path : "");
  return LOOM_OK;
}
