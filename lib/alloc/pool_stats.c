/* pool_stats.c — the pool's statistics, their resets, the readable summary
 * and the JSON snapshot of segments, blocks and the event history. */
#include <stdarg.h>

#include "core/text.h"
#include "alloc/pool_internal.h"
#include "core/sys.h"

static const char *const hist_names[] = {"alloc", "free", "free_completed", "segment_alloc", "segment_free", "oom"};

__attribute__((noinline)) void loom_pool_history_record(loom_pool *p, int action, uintptr_t addr, size_t size,
                                                        loom_stream *s, const char *site) {
  int64_t ts = 0;
  if (LOOM_PROF_ACTIVE())
    ts = loom_prof_alloc_event(p->cfg.name, hist_names[action], addr, size, s, site, p->st.allocated_bytes[0].current,
                               p->st.reserved_bytes[0].current, p->st.active_bytes[0].current);
  if (!p->hist || p->cfg.history <= 0) return;
  hist_entry *h = &p->hist[p->hist_head];
  h->ts_ns = ts ? ts : loom_prof_now_ns();
  h->site = site;
  h->action = action;
  h->addr = addr;
  h->size = size;
  h->stream = s;
  h->seq = ++p->hist_seq;
  p->hist_head = (p->hist_head + 1) % p->cfg.history;
  if (p->hist_len < p->cfg.history) p->hist_len++;
}

/* ---- statistics ------------------------------------------------------------ */

static void fill_stats(loom_pool *p, loom_memory_stats *s) {
  *s = p->st;
  s->struct_size = sizeof *s;
  s->limit_bytes = (int64_t)p->cfg.limit;
  s->max_split_size = p->cfg.max_split_size == SIZE_MAX ? -1 : (int64_t)p->cfg.max_split_size;
}

void loom_pool_stats(loom_pool *p, loom_memory_stats *out) {
  size_t want = out->struct_size ? out->struct_size : sizeof *out;
  if (want > sizeof *out) want = sizeof *out;
  loom_memory_stats s;
  pthread_mutex_lock(&p->mu);
  fill_stats(p, &s);
  pthread_mutex_unlock(&p->mu);
  memcpy(out, &s, want);
  out->struct_size = want;
}

#define LOOM_STAT_ARRAYS(s)                                                                        \
  { (s)->allocated_bytes, (s)->reserved_bytes, (s)->active_bytes, (s)->inactive_split_bytes,       \
    (s)->requested_bytes, (s)->allocations, (s)->segments }

void loom_pool_reset_peaks(loom_pool *p) {
  pthread_mutex_lock(&p->mu);
  loom_memory_stat *arrs[] = LOOM_STAT_ARRAYS(&p->st);
  for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++)
    for (int k = 0; k < LOOM_MEM_POOLS; k++) arrs[i][k].peak = arrs[i][k].current;
  pthread_mutex_unlock(&p->mu);
}

void loom_pool_reset_counters(loom_pool *p) {
  pthread_mutex_lock(&p->mu);
  p->st.num_allocs = p->st.num_frees = p->st.num_cache_hits = p->st.num_cross_stream_reuses = 0;
  p->st.num_device_allocs = p->st.num_device_frees = p->st.num_alloc_retries = p->st.num_ooms = 0;
  pthread_mutex_unlock(&p->mu);
}

/* A JSON string (null for NULL); sites are op names and user range names. */
static void sb_json_str(loom_text *b, const char *s) {
  if (!s) {
    loom_text_printf(b, "null");
    return;
  }
  loom_text_printf(b, "\"");
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') loom_text_printf(b, "\\%c", *c);
    else if (*c < 0x20) loom_text_printf(b, "\\u%04x", *c);
    else loom_text_printf(b, "%c", *c);
  }
  loom_text_printf(b, "\"");
}

static char *sb_finish(loom_text *b) {
  if (b->failed) {
    loom_sys_free(b->s);
    loom_set_error(LOOM_ERR_OOM, "out of host memory formatting allocator state");
    return NULL;
  }
  return b->s;
}

char *loom_pool_summary(loom_pool *p) {
  loom_memory_stats s;
  pthread_mutex_lock(&p->mu);
  fill_stats(p, &s);
  int npend = p->npend;
  pthread_mutex_unlock(&p->mu);
  loom_text b = {0};
  char x[32], y[32];
  char gr[80];
  if (p->cfg.expandable)
    snprintf(gr, sizeof gr, " (expandable segments, %s granules)", fmt_bytes(x, sizeof x, p->granule));
  loom_text_printf(&b, "loom memory summary: %s%s\n", p->cfg.name,
            p->arena ? " (preallocated arena, no growth)" : p->cfg.expandable ? gr : "");
  loom_text_printf(&b, "  limit: %s   max_split_size: %s   gc threshold: %g\n",
            s.limit_bytes ? fmt_bytes(x, sizeof x, (uint64_t)s.limit_bytes) : "none",
            s.max_split_size < 0 ? "unlimited" : fmt_bytes(y, sizeof y, (uint64_t)s.max_split_size),
            p->cfg.gc_threshold);
  loom_text_printf(&b, "  %-22s %-6s %14s %14s\n", "metric", "pool", "current", "peak");
  struct { const char *name; loom_memory_stat *a; int bytes; } rows[] = {
      {"allocated", s.allocated_bytes, 1}, {"reserved", s.reserved_bytes, 1},
      {"active", s.active_bytes, 1},       {"inactive split", s.inactive_split_bytes, 1},
      {"requested", s.requested_bytes, 1}, {"allocations", s.allocations, 0},
      {"segments", s.segments, 0},
  };
  const char *pools[] = {"all", "small", "large"};
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    for (int k = 0; k < LOOM_MEM_POOLS; k++) {
      if (rows[r].bytes)
        loom_text_printf(&b, "  %-22s %-6s %14s %14s\n", k ? "" : rows[r].name, pools[k],
                  fmt_bytes(x, sizeof x, (uint64_t)rows[r].a[k].current),
                  fmt_bytes(y, sizeof y, (uint64_t)rows[r].a[k].peak));
      else
        loom_text_printf(&b, "  %-22s %-6s %14" PRId64 " %14" PRId64 "\n", k ? "" : rows[r].name, pools[k],
                  rows[r].a[k].current, rows[r].a[k].peak);
    }
  }
  loom_text_printf(&b,
            "  counters: allocs %" PRId64 ", frees %" PRId64 ", cache hits %" PRId64 ", cross-stream reuses %" PRId64
            ", device allocs %" PRId64 ", device frees %" PRId64 ", retries %" PRId64 ", OOMs %" PRId64
            ", pending frees %d\n",
            s.num_allocs, s.num_frees, s.num_cache_hits, s.num_cross_stream_reuses, s.num_device_allocs,
            s.num_device_frees, s.num_alloc_retries, s.num_ooms, npend);
  return sb_finish(&b);
}

static const char *state_name(int st) {
  return st == LOOM_BLOCK_ALLOCATED ? "active_allocated"
         : st == LOOM_BLOCK_PENDING ? "active_pending_free"
         : st == LOOM_BLOCK_UNMAPPED ? "unmapped"
                                     : "inactive";
}

char *loom_pool_snapshot_json(loom_pool *p) {
  loom_text b = {0};
  pthread_mutex_lock(&p->mu);
  loom_memory_stats s;
  fill_stats(p, &s);
  loom_text_printf(&b, "{\"device\":\"%s\",\"preallocated\":%s,\"expandable_segments\":%s,\"stats\":{", p->cfg.name,
            p->arena ? "true" : "false", p->cfg.expandable ? "true" : "false");
  struct { const char *name; loom_memory_stat *a; } rows[] = {
      {"allocated_bytes", s.allocated_bytes}, {"reserved_bytes", s.reserved_bytes},
      {"active_bytes", s.active_bytes},       {"inactive_split_bytes", s.inactive_split_bytes},
      {"requested_bytes", s.requested_bytes}, {"allocations", s.allocations},
      {"segments", s.segments},
  };
  const char *pools[] = {"all", "small_pool", "large_pool"};
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
    loom_text_printf(&b, "%s\"%s\":{", r ? "," : "", rows[r].name);
    for (int k = 0; k < LOOM_MEM_POOLS; k++)
      loom_text_printf(&b, "%s\"%s\":{\"current\":%" PRId64 ",\"peak\":%" PRId64 "}", k ? "," : "", pools[k],
                rows[r].a[k].current, rows[r].a[k].peak);
    loom_text_printf(&b, "}");
  }
  loom_text_printf(&b,
            ",\"num_allocs\":%" PRId64 ",\"num_frees\":%" PRId64 ",\"num_cache_hits\":%" PRId64
            ",\"num_cross_stream_reuses\":%" PRId64 ",\"num_device_allocs\":%" PRId64 ",\"num_device_frees\":%" PRId64
            ",\"num_alloc_retries\":%" PRId64 ",\"num_ooms\":%" PRId64 ",\"limit_bytes\":%" PRId64
            ",\"max_split_size\":%" PRId64 "},\"segments\":[",
            s.num_allocs, s.num_frees, s.num_cache_hits, s.num_cross_stream_reuses, s.num_device_allocs,
            s.num_device_frees, s.num_alloc_retries, s.num_ooms, s.limit_bytes, s.max_split_size);
  for (int i = 0; i < p->nsegs; i++) {
    segment *sg = p->segs[i];
    loom_text_printf(&b,
              "%s{\"address\":%" PRIuPTR ",\"size\":%zu,\"mapped\":%zu,\"expandable\":%s,\"pool\":\"%s\",\"stream\":%" PRIuPTR
              ",\"blocks\":[",
              i ? "," : "", sg->base, sg->size, sg->mapped, sg->expandable ? "true" : "false",
              sg->kind == LOOM_POOL_SMALL ? "small" : "large", (uintptr_t)sg->stream);
    for (block *x = sg->head; x; x = x->next) {
      int unused = x->state == LOOM_BLOCK_FREE || x->state == LOOM_BLOCK_UNMAPPED;
      loom_text_printf(&b, "%s{\"address\":%" PRIuPTR ",\"size\":%zu,\"requested\":%zu,\"state\":\"%s\",\"site\":",
                x == sg->head ? "" : ",", x->addr, x->size, unused ? (size_t)0 : x->requested, state_name(x->state));
      sb_json_str(&b, unused ? NULL : x->site);
      loom_text_printf(&b, "}");
    }
    loom_text_printf(&b, "]}");
  }
  loom_text_printf(&b, "],\"history\":[");
  for (int i = 0; i < p->hist_len; i++) {
    int idx = (p->hist_head - p->hist_len + i + p->cfg.history) % p->cfg.history;
    hist_entry *h = &p->hist[idx];
    loom_text_printf(&b, "%s{\"seq\":%" PRIu64 ",\"ts_ns\":%" PRId64 ",\"action\":\"%s\",\"address\":%" PRIuPTR
              ",\"size\":%zu,\"stream\":%" PRIuPTR ",\"site\":",
              i ? "," : "", h->seq, h->ts_ns, hist_names[h->action], h->addr, h->size, (uintptr_t)h->stream);
    sb_json_str(&b, h->site);
    loom_text_printf(&b, "}");
  }
  loom_text_printf(&b, "]}");
  pthread_mutex_unlock(&p->mu);
  return sb_finish(&b);
}
