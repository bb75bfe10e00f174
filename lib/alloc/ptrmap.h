/* ptrmap.h (internal) — address -> object hash map (open addressing, linear
 * probing, backward-shift deletion). The allocator is handed back bare
 * pointers at free time, so finding their block must be O(1). Not
 * thread-safe: the owner's lock protects it. Keys are never 0. */
#ifndef LOOM_ALLOC_PTRMAP_H
#define LOOM_ALLOC_PTRMAP_H

#include <stdint.h>
#include <stdlib.h>
#include "core/sys.h"

typedef struct loom_ptrmap {
  uintptr_t *keys;
  void **vals;
  size_t cap;  /* power of two, or 0 */
  size_t len;
} loom_ptrmap;

static inline size_t loom_ptrmap_slot(const loom_ptrmap *m, uintptr_t k) {
  /* Blocks are 512-byte aligned: drop the zero bits, then mix. */
  uint64_t h = (uint64_t)(k >> 6) * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 17) & (m->cap - 1);
}

static inline void *loom_ptrmap_get(const loom_ptrmap *m, uintptr_t k) {
  if (!m->cap) return NULL;
  for (size_t i = loom_ptrmap_slot(m, k);; i = (i + 1) & (m->cap - 1)) {
    if (m->keys[i] == k) return m->vals[i];
    if (m->keys[i] == 0) return NULL;
  }
}

static inline int loom_ptrmap_put(loom_ptrmap *m, uintptr_t k, void *v);

static inline int loom_ptrmap_rehash(loom_ptrmap *m, size_t ncap) {
  loom_ptrmap n = {loom_sys_calloc(ncap, sizeof(uintptr_t)), loom_sys_calloc(ncap, sizeof(void *)), ncap, 0};
  if (!n.keys || !n.vals) {
    loom_sys_free(n.keys);
    loom_sys_free(n.vals);
    return 0;
  }
  for (size_t i = 0; i < m->cap; i++)
    if (m->keys[i]) loom_ptrmap_put(&n, m->keys[i], m->vals[i]);
  loom_sys_free(m->keys);
  loom_sys_free(m->vals);
  *m = n;
  return 1;
}

/* Insert or replace. 0 when out of host memory. */
static inline int loom_ptrmap_put(loom_ptrmap *m, uintptr_t k, void *v) {
  if ((m->len + 1) * 2 > m->cap && !loom_ptrmap_rehash(m, m->cap ? m->cap * 2 : 64)) return 0;
  size_t i = loom_ptrmap_slot(m, k);
  while (m->keys[i] != 0 && m->keys[i] != k) i = (i + 1) & (m->cap - 1);
  if (m->keys[i] == 0) m->len++;
  m->keys[i] = k;
  m->vals[i] = v;
  return 1;
}

/* Remove k; returns its value or NULL. */
static inline void *loom_ptrmap_del(loom_ptrmap *m, uintptr_t k) {
  if (!m->cap) return NULL;
  size_t mask = m->cap - 1, i = loom_ptrmap_slot(m, k);
  while (m->keys[i] != k) {
    if (m->keys[i] == 0) return NULL;
    i = (i + 1) & mask;
  }
  void *v = m->vals[i];
  /* Backward shift: pull later entries of the probe run into the hole. */
  for (size_t j = (i + 1) & mask; m->keys[j] != 0; j = (j + 1) & mask) {
    size_t home = loom_ptrmap_slot(m, m->keys[j]);
    if (((j - home) & mask) >= ((j - i) & mask)) {
      m->keys[i] = m->keys[j];
      m->vals[i] = m->vals[j];
      i = j;
    }
  }
  m->keys[i] = 0;
  m->vals[i] = NULL;
  m->len--;
  return v;
}

static inline void loom_ptrmap_free(loom_ptrmap *m) {
  loom_sys_free(m->keys);
  loom_sys_free(m->vals);
  m->keys = NULL;
  m->vals = NULL;
  m->cap = m->len = 0;
}

#endif
