/* pool_verify.c — inspection of segments and blocks and the full
 * consistency check (loom_pool_verify), for tests. */
#include "alloc/pool_internal.h"

/* ---- inspection for tests -------------------------------------------------- */

static void seg_info(const segment *sg, loom_segment_info *out) {
  out->base = sg->base;
  out->size = sg->size;
  out->mapped = sg->mapped;
  out->expandable = sg->expandable;
  out->kind = sg->kind;
  out->stream = sg->stream;
  out->nblocks = 0;
  for (const block *b = sg->head; b; b = b->next) out->nblocks++;
}

int loom_pool_debug_segment(loom_pool *p, uintptr_t addr, loom_segment_info *seg, loom_block_info *blocks, int max) {
  pthread_mutex_lock(&p->mu);
  int i = loom_pool_seg_index(p, addr);
  if (i < 0) {
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  segment *sg = p->segs[i];
  seg_info(sg, seg);
  int n = 0;
  for (block *b = sg->head; b && n < max; b = b->next, n++)
    blocks[n] = (loom_block_info){b->addr, b->size, b->state == LOOM_BLOCK_FREE || b->state == LOOM_BLOCK_UNMAPPED ? 0 : b->requested, b->state,
                                  b->stream};
  pthread_mutex_unlock(&p->mu);
  return 1;
}

int loom_pool_debug_segments(loom_pool *p, loom_segment_info *segs, int max) {
  pthread_mutex_lock(&p->mu);
  int n = p->nsegs;
  for (int i = 0; segs && i < n && i < max; i++) seg_info(p->segs[i], &segs[i]);
  pthread_mutex_unlock(&p->mu);
  return n;
}

static int tree_count(int t, const block *n) { return n ? 1 + tree_count(t, n->l[t]) + tree_count(t, n->r[t]) : 0; }

static int tree_find(int t, block *root, const block *x) {
  block *f = loom_pool_tree_lower(t, root, x, 0);
  return f == x;
}

#define VFAIL(...)                    \
  do {                                \
    snprintf(err, n, __VA_ARGS__);    \
    pthread_mutex_unlock(&p->mu);     \
    return 0;                         \
  } while (0)

int loom_pool_verify(loom_pool *p, char *err, size_t n) {
  pthread_mutex_lock(&p->mu);
  int64_t alloc[3] = {0}, reserved[3] = {0}, active[3] = {0}, inactive[3] = {0}, req[3] = {0}, nalloc[3] = {0},
          nseg[3] = {0};
  int nfree[3] = {0}, nwhole[3] = {0};
  for (int i = 0; i < p->nsegs; i++) {
    segment *sg = p->segs[i];
    int k = sg->kind;
    if (i > 0 && p->segs[i - 1]->base + p->segs[i - 1]->size > sg->base)
      VFAIL("segments %d and %d overlap", i - 1, i);
    if (!sg->head || sg->head->prev) VFAIL("segment %#" PRIxPTR ": bad head", sg->base);
    if (sg->expandable && (!p->cfg.expandable || sg->base % p->granule || sg->size % p->granule))
      VFAIL("expandable segment %#" PRIxPTR " of %zu bytes is not granule-aligned", sg->base, sg->size);
    uintptr_t at = sg->base;
    size_t mapped = 0;
    for (block *b = sg->head; b; b = b->next) {
      if (b->state == LOOM_BLOCK_UNMAPPED) {
        if (!sg->expandable) VFAIL("unmapped block %#" PRIxPTR " in an ordinary segment", b->addr);
        if (b->addr % p->granule || b->size % p->granule)
          VFAIL("unmapped block %#" PRIxPTR " (%zu bytes) is not granule-aligned", b->addr, b->size);
        if (b->next && b->next->state == LOOM_BLOCK_UNMAPPED)
          VFAIL("unmapped blocks %#" PRIxPTR " and %#" PRIxPTR " left unmerged", b->addr, b->next->addr);
        if (tree_find(0, p->root[k][0], b) || loom_ptrmap_get(&p->live, b->addr) == b)
          VFAIL("unmapped block %#" PRIxPTR " is indexed as free or live", b->addr);
        if (b->addr != at || b->seg != sg || (b->next && b->next->prev != b))
          VFAIL("unmapped block %#" PRIxPTR ": wrong place or links", b->addr);
        at += b->size;
        continue;
      }
      mapped += b->size;
      if (b->addr != at) VFAIL("segment %#" PRIxPTR ": block at %#" PRIxPTR ", expected %#" PRIxPTR, sg->base, b->addr, at);
      if (b->seg != sg) VFAIL("block %#" PRIxPTR ": wrong segment", b->addr);
      if (b->size < LOOM_POOL_MIN_BLOCK || b->size % LOOM_POOL_MIN_BLOCK) VFAIL("block %#" PRIxPTR ": size %zu", b->addr, b->size);
      if (b->next && b->next->prev != b) VFAIL("block %#" PRIxPTR ": broken links", b->addr);
      if (b->stream != sg->stream && !sg->arena) VFAIL("block %#" PRIxPTR ": stream differs from its segment's", b->addr);
      if (b->state == LOOM_BLOCK_FREE && b->next && b->next->state == LOOM_BLOCK_FREE)
        VFAIL("blocks %#" PRIxPTR " and %#" PRIxPTR " are free neighbours left unmerged", b->addr, b->next->addr);
      if (b->state == LOOM_BLOCK_ALLOCATED) {
        if (loom_ptrmap_get(&p->live, b->addr) != b) VFAIL("allocated block %#" PRIxPTR " missing from the map", b->addr);
        if (b->requested > b->size) VFAIL("block %#" PRIxPTR ": requested > size", b->addr);
        alloc[k] += (int64_t)b->size;
        req[k] += (int64_t)b->requested;
        nalloc[k]++;
        active[k] += (int64_t)b->size;
      } else if (b->state == LOOM_BLOCK_PENDING) {
        if (b->event_count <= 0) VFAIL("pending block %#" PRIxPTR " without events", b->addr);
        active[k] += (int64_t)b->size;
      } else {
        nfree[k]++;
        if (!tree_find(0, p->root[k][0], b)) VFAIL("free block %#" PRIxPTR " missing from the free tree", b->addr);
        if (in_whole_tree(b)) {
          nwhole[k]++;
          if (!tree_find(1, p->root[k][1], b)) VFAIL("whole free segment %#" PRIxPTR " missing from its tree", b->addr);
        }
        if (is_split(b)) inactive[k] += (int64_t)b->size;
      }
      at += b->size;
    }
    if (at != sg->base + sg->size) VFAIL("segment %#" PRIxPTR ": blocks cover %zu of %zu bytes", sg->base,
                                         (size_t)(at - sg->base), sg->size);
    if (mapped != sg->mapped) VFAIL("segment %#" PRIxPTR ": says %zu bytes mapped, blocks add up to %zu", sg->base,
                                    sg->mapped, mapped);
    if (mapped == 0) VFAIL("segment %#" PRIxPTR ": nothing mapped but not given back", sg->base);
    reserved[k] += (int64_t)sg->mapped;
    nseg[k]++;
  }
  for (int k = 1; k <= 2; k++) {
    if (tree_count(0, p->root[k][0]) != nfree[k]) VFAIL("pool %d: free tree holds %d blocks, segments %d", k,
                                                        tree_count(0, p->root[k][0]), nfree[k]);
    if (tree_count(1, p->root[k][1]) != nwhole[k]) VFAIL("pool %d: whole-segment tree size mismatch", k);
  }
  struct { const char *name; int64_t *want; loom_memory_stat *have; } chk[] = {
      {"allocated_bytes", alloc, p->st.allocated_bytes},   {"reserved_bytes", reserved, p->st.reserved_bytes},
      {"active_bytes", active, p->st.active_bytes},        {"inactive_split_bytes", inactive, p->st.inactive_split_bytes},
      {"requested_bytes", req, p->st.requested_bytes},     {"allocations", nalloc, p->st.allocations},
      {"segments", nseg, p->st.segments},
  };
  for (size_t c = 0; c < sizeof chk / sizeof chk[0]; c++) {
    chk[c].want[0] = chk[c].want[1] + chk[c].want[2];
    for (int k = 0; k < 3; k++)
      if (chk[c].have[k].current != chk[c].want[k] || chk[c].have[k].peak < chk[c].have[k].current)
        VFAIL("%s[%d]: statistic says %" PRId64 " (peak %" PRId64 "), blocks add up to %" PRId64, chk[c].name, k,
              chk[c].have[k].current, chk[c].have[k].peak, chk[c].want[k]);
  }
  if ((int64_t)p->live.len != nalloc[0]) VFAIL("map holds %zu blocks, %" PRId64 " allocated", p->live.len, nalloc[0]);
  pthread_mutex_unlock(&p->mu);
  if (n) err[0] = '\0';
  return 1;
}
