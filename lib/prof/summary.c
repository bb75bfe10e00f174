/* summary.c — the per-name table of a stopped recording, like
 * torch.profiler's key_averages().table(): calls, host time (inclusive and
 * self, i.e. minus the ranges nested in it on the same thread), device time,
 * share of step time and GFLOP/s where the op knows its FLOPs. Sorted by
 * device time when there is any, else by host self time. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "core/error.h"
#include "prof/prof_internal.h"
#include "core/sys.h"

typedef struct row {
  const char *name;
  int cat;
  int64_t calls, dev_calls;
  int64_t host_total, host_self, dev_total; /* ns */
  double flops;
} row;

typedef struct table {
  row *rows;
  int n, cap;
  int *slots; /* open addressing over rows, -1: empty */
  int nslots;
  int64_t denom;
  int have_dev;
} table;

static uint64_t hash_key(const char *s, int cat) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)cat;
  for (; s && *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static row *find(table *t, const char *name, int cat) {
  if (!name) name = "?";
  size_t i = (size_t)(hash_key(name, cat) % (uint64_t)t->nslots);
  while (t->slots[i] >= 0) {
    row *r = &t->rows[t->slots[i]];
    if (r->cat == cat && (r->name == name || !strcmp(r->name, name))) return r;
    i = (i + 1) % (size_t)t->nslots;
  }
  if (t->n == t->cap) return NULL;  /* sized for every event: cannot happen */
  row *r = &t->rows[t->n];
  memset(r, 0, sizeof *r);
  r->name = name;
  r->cat = cat;
  t->slots[i] = t->n++;
  return r;
}

typedef struct span {
  int64_t t0, t1;
  int tid;
  row *r;
} span;

static int by_thread_time(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
  return x->t1 > y->t1 ? -1 : x->t1 < y->t1;  /* outer first */
}

/* Self time: walk each thread's ranges in start order with a stack of
 * enclosing ranges; a range fully inside the innermost open one is its
 * child and is subtracted from it. */
static void self_times(span *sp, size_t n) {
  qsort(sp, n, sizeof *sp, by_thread_time);
  span **stack = loom_sys_malloc((n ? n : 1) * sizeof *stack);
  int64_t *child = loom_sys_malloc((n ? n : 1) * sizeof *child);
  if (!stack || !child) {
    for (size_t i = 0; i < n; i++) sp[i].r->host_self += sp[i].t1 - sp[i].t0;
    loom_sys_free(stack);
    loom_sys_free(child);
    return;
  }
  size_t depth = 0;
  for (size_t i = 0; i <= n; i++) {
    /* Close the ranges that end before this one starts (or at the end). */
    while (depth > 0 && (i == n || sp[i].tid != stack[depth - 1]->tid || sp[i].t0 >= stack[depth - 1]->t1)) {
      span *s = stack[--depth];
      int64_t self = s->t1 - s->t0 - child[depth];
      s->r->host_self += self > 0 ? self : 0;
    }
    if (i == n) break;
    if (depth > 0 && sp[i].t1 <= stack[depth - 1]->t1) child[depth - 1] += sp[i].t1 - sp[i].t0;
    child[depth] = 0;
    stack[depth++] = &sp[i];
  }
  loom_sys_free(stack);
  loom_sys_free(child);
}

static table *build(const prof_session *s) {
  table *t = loom_sys_calloc(1, sizeof *t);
  size_t cap = s->nev + s->nsl + 1;
  if (!t) return NULL;
  t->cap = (int)(cap > 16384 ? 16384 : cap);  /* distinct names are few (ops, interned ranges) */
  t->nslots = t->cap * 2 + 1;
  t->rows = loom_sys_malloc((size_t)t->cap * sizeof *t->rows);
  t->slots = loom_sys_malloc((size_t)t->nslots * sizeof *t->slots);
  span *sp = loom_sys_malloc((s->nev + 1) * sizeof *sp);
  if (!t->rows || !t->slots || !sp) {
    loom_sys_free(t->rows);
    loom_sys_free(t->slots);
    loom_sys_free(t);
    loom_sys_free(sp);
    return NULL;
  }
  for (int i = 0; i < t->nslots; i++) t->slots[i] = -1;
  size_t nsp = 0;
  int64_t step_time = 0;
  for (size_t i = 0; i < s->nev; i++) {
    const prof_event *e = &s->ev[i];
    if (e->kind != EV_RANGE) continue;
    row *r = find(t, e->name, e->cat);
    if (!r) continue;
    r->calls++;
    r->host_total += e->t1 - e->t0;
    r->flops += e->flops;
    if (e->cat == LOOM_PROF_CAT_STEP) step_time += e->t1 - e->t0;
    sp[nsp++] = (span){e->t0, e->t1, e->tid, r};
  }
  self_times(sp, nsp);
  loom_sys_free(sp);
  for (size_t i = 0; i < s->nsl; i++) {
    row *r = find(t, s->sl[i].name, s->sl[i].cat);
    if (!r) continue;
    r->dev_total += s->sl[i].t1 - s->sl[i].t0;
    r->dev_calls++;
    t->have_dev = 1;
  }
  t->denom = s->steps > 0 ? step_time : s->t_stop - s->t_start;
  if (t->denom <= 0) t->denom = 1;
  return t;
}

static int g_sort_dev;
static int by_time(const void *a, const void *b) {
  const row *x = a, *y = b;
  int64_t kx = g_sort_dev ? x->dev_total : x->host_self, ky = g_sort_dev ? y->dev_total : y->host_self;
  if (kx != ky) return kx > ky ? -1 : 1;
  if (x->host_self != y->host_self) return x->host_self > y->host_self ? -1 : 1;
  return strcmp(x->name, y->name);
}

static void sort_rows(table *t) {
  g_sort_dev = t->have_dev;  /* callers hold the profiler lock */
  qsort(t->rows, (size_t)t->n, sizeof *t->rows, by_time);
}

static void free_table(table *t) {
  if (!t) return;
  loom_sys_free(t->rows);
  loom_sys_free(t->slots);
  loom_sys_free(t);
}

static void fill_row(const table *t, const row *r, loom_profiler_row *o) {
  memset(o, 0, sizeof *o);
  snprintf(o->name, sizeof o->name, "%s", r->name);
  snprintf(o->category, sizeof o->category, "%s", loom_prof_cat_name(r->cat));
  o->calls = r->calls ? r->calls : r->dev_calls;
  o->host_total_us = (double)r->host_total / 1e3;
  o->host_self_us = (double)r->host_self / 1e3;
  o->device_total_us = (double)r->dev_total / 1e3;
  o->step_share = (double)(r->dev_total > 0 ? r->dev_total : r->host_self) / (double)t->denom;
  o->flops = r->flops;
  double us = r->dev_total > 0 ? o->device_total_us : o->host_total_us;
  o->gflops_per_s = r->flops > 0 && us > 0 ? r->flops / us / 1e3 : 0.0;
}

int loom_prof_summary_fill(const prof_session *s, loom_profiler_row *rows, size_t row_size, int max) {
  table *t = build(s);
  if (!t) {
    loom_set_error(LOOM_ERR_OOM, "loom_profiler_summary_rows: out of host memory");
    return -1;
  }
  sort_rows(t);
  for (int i = 0; i < t->n && i < max; i++) {
    loom_profiler_row r;
    fill_row(t, &t->rows[i], &r);
    memcpy((char *)rows + (size_t)i * row_size, &r, row_size);
  }
  int n = t->n;
  free_table(t);
  return n;
}

static const char *fmt_time(char *buf, size_t n, double us) {
  if (us <= 0) snprintf(buf, n, "-");
  else if (us < 1e3) snprintf(buf, n, "%.1fus", us);
  else if (us < 1e6) snprintf(buf, n, "%.3fms", us / 1e3);
  else snprintf(buf, n, "%.3fs", us / 1e6);
  return buf;
}

char *loom_prof_summary_text(const prof_session *s, int max_rows) {
  table *t = build(s);
  if (!t) {
    loom_set_error(LOOM_ERR_OOM, "loom_profiler_summary: out of host memory");
    return NULL;
  }
  sort_rows(t);
  loom_text b = {0};
  double wall_ms = (double)(s->t_stop - s->t_start) / 1e6;
  loom_text_printf(&b, "loom profiler: %.3f ms recorded", wall_ms);
  if (s->steps > 0) loom_text_printf(&b, ", %lld steps, %.3f ms/step", (long long)s->steps, (double)t->denom / 1e6 / (double)s->steps);
  loom_text_printf(&b, ", %zu events, %zu device slices", s->nev, s->nsl);
  if (s->dropped || s->dropped_device)
    loom_text_printf(&b, " (%lld events and %lld device ranges dropped: raise max_events)", (long long)s->dropped,
        (long long)s->dropped_device);
  loom_text_printf(&b, "\n%-34s %-10s %7s %11s %11s %11s %12s %11s %7s %9s\n", "Name", "Category", "Calls", "Self host",
      "Host total", "Host avg", "Device total", "Device avg", t->have_dev ? "%dev/st" : "%step", "GFLOP/s");
  int shown = 0;
  for (int i = 0; i < t->n; i++) {
    if (max_rows > 0 && shown == max_rows) break;
    loom_profiler_row r;
    fill_row(t, &t->rows[i], &r);
    char a[24], c[24], d[24], e[24], g[24], gf[24];
    int64_t dc = t->rows[i].dev_calls;
    if (r.gflops_per_s > 0) snprintf(gf, sizeof gf, "%.2f", r.gflops_per_s);
    else snprintf(gf, sizeof gf, "-");
    loom_text_printf(&b, "%-34.34s %-10s %7lld %11s %11s %11s %12s %11s %6.2f%% %9s\n", r.name, r.category, (long long)r.calls,
        fmt_time(a, sizeof a, r.host_self_us), fmt_time(c, sizeof c, r.host_total_us),
        fmt_time(d, sizeof d, r.calls ? r.host_total_us / (double)r.calls : 0), fmt_time(e, sizeof e, r.device_total_us),
        fmt_time(g, sizeof g, dc ? r.device_total_us / (double)dc : 0), 100.0 * r.step_share, gf);
    shown++;
  }
  if (shown < t->n) loom_text_printf(&b, "... %d more rows\n", t->n - shown);
  free_table(t);
  if (b.failed) {
    loom_sys_free(b.s);
    loom_set_error(LOOM_ERR_OOM, "loom_profiler_summary: out of host memory");
    return NULL;
  }
  return b.s;
}
