/* pool_tree.c — the pool's free-block index: treaps keyed by (stream, size,
 * address) over every free block and by (size, address) over free blocks
 * that span a whole segment (see pool_internal.h). */
#include "alloc/pool_internal.h"

static int bcmp_key(int t, const block *a, const block *b) {
  if (t == 0 && a->stream != b->stream) return (uintptr_t)a->stream < (uintptr_t)b->stream ? -1 : 1;
  if (a->size != b->size) return a->size < b->size ? -1 : 1;
  return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static void tsplit(int t, block *n, const block *key, block **lo, block **hi) {
  if (!n) {
    *lo = *hi = NULL;
  } else if (bcmp_key(t, n, key) < 0) {
    tsplit(t, n->r[t], key, &n->r[t], hi);
    *lo = n;
  } else {
    tsplit(t, n->l[t], key, lo, &n->l[t]);
    *hi = n;
  }
}

static block *tmerge(int t, block *a, block *b) {
  if (!a) return b;
  if (!b) return a;
  if (a->prio > b->prio) {
    a->r[t] = tmerge(t, a->r[t], b);
    return a;
  }
  b->l[t] = tmerge(t, a, b->l[t]);
  return b;
}

static block *tinsert(int t, block *root, block *x) {
  if (!root) {
    x->l[t] = x->r[t] = NULL;
    return x;
  }
  if (x->prio > root->prio) {
    tsplit(t, root, x, &x->l[t], &x->r[t]);
    return x;
  }
  if (bcmp_key(t, x, root) < 0) root->l[t] = tinsert(t, root->l[t], x);
  else root->r[t] = tinsert(t, root->r[t], x);
  return root;
}

static block *terase(int t, block *root, const block *x) {
  if (!root) return NULL;
  int c = bcmp_key(t, x, root);
  if (c == 0) return tmerge(t, root->l[t], root->r[t]);
  if (c < 0) root->l[t] = terase(t, root->l[t], x);
  else root->r[t] = terase(t, root->r[t], x);
  return root;
}

/* First block >= key (strict: > key). */
block *loom_pool_tree_lower(int t, block *n, const block *key, int strict) {
  block *best = NULL;
  while (n) {
    int c = bcmp_key(t, n, key);
    if (c > 0 || (c == 0 && !strict)) {
      best = n;
      n = n->l[t];
    } else {
      n = n->r[t];
    }
  }
  return best;
}

void loom_pool_tree_insert(loom_pool *p, block *b) {
  int k = b->seg->kind;
  p->root[k][0] = tinsert(0, p->root[k][0], b);
  if (in_whole_tree(b)) p->root[k][1] = tinsert(1, p->root[k][1], b);
  else if (is_split(b)) stat_add(p->st.inactive_split_bytes, k, (int64_t)b->size);
  b->free_tick = ++p->tick;
}

void loom_pool_tree_remove(loom_pool *p, block *b) {
  int k = b->seg->kind;
  p->root[k][0] = terase(0, p->root[k][0], b);
  if (in_whole_tree(b)) p->root[k][1] = terase(1, p->root[k][1], b);
  else if (is_split(b)) stat_add(p->st.inactive_split_bytes, k, -(int64_t)b->size);
}
