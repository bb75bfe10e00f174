/* scope.c — per-thread ownership scopes (docs/design.md §11).
 *
 * Inside an open scope every new tensor is owned by the innermost scope and
 * released when it ends, unless moved out with loom_keep. A training step is
 * one scope, so C users do not release intermediates by hand. */
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor_internal.h"
#include "core/sys.h"

typedef struct scope_frame {
  loom_tensor **items;
  size_t n, cap;
} scope_frame;

typedef struct scope_stack {
  scope_frame *frames;
  int depth, cap;
} scope_stack;

static _Thread_local scope_stack tl_scopes;

int loom_scope_depth(void) { return tl_scopes.depth; }

void loom_scope_begin(void) {
  scope_stack *s = &tl_scopes;
  if (s->depth == s->cap) {
    int ncap = s->cap ? s->cap * 2 : 8;
    scope_frame *nf = loom_sys_realloc(s->frames, (size_t)ncap * sizeof *nf);
    if (!nf) {
      /* Still open a (zero-capacity) frame so begin/end stay balanced; pushes
       * into it fail soft (the tensor is then owned by the caller). */
      loom_set_error(LOOM_ERR_OOM, "loom_scope_begin: out of host memory");
      return;
    }
    memset(nf + s->cap, 0, (size_t)(ncap - s->cap) * sizeof *nf);
    s->frames = nf;
    s->cap = ncap;
  }
  s->frames[s->depth].n = 0;
  s->depth++;
}

static int frame_push(scope_frame *f, loom_tensor *t) {
  if (f->n == f->cap) {
    size_t ncap = f->cap ? f->cap * 2 : 64;
    loom_tensor **ni = loom_sys_realloc(f->items, ncap * sizeof *ni);
    if (!ni) return 0;
    f->items = ni;
    f->cap = ncap;
  }
  f->items[f->n++] = t;
  return 1;
}

void loom_scope_end(void) {
  scope_stack *s = &tl_scopes;
  if (s->depth == 0) return;
  scope_frame *f = &s->frames[s->depth - 1];
  /* Release newest first: results die before the inputs they were made of. */
  for (size_t i = f->n; i-- > 0;) loom_tensor_release(f->items[i]);
  f->n = 0;
  s->depth--;
  if (s->depth == 0) {
    for (int i = 0; i < s->cap; i++) loom_sys_free(s->frames[i].items);
    loom_sys_free(s->frames);
    memset(s, 0, sizeof *s);
  }
}

loom_tensor *loom_tensor_adopt(loom_tensor *t) {
  if (!t) return NULL;
  scope_stack *s = &tl_scopes;
  if (s->depth > 0 && !frame_push(&s->frames[s->depth - 1], t)) {
    /* Could not record ownership: hand it to the caller rather than leak
     * silently into nowhere; report it. */
    loom_set_error(LOOM_ERR_OOM, "scope: out of host memory recording a tensor; caller now owns it");
  }
  return t;
}

loom_tensor *loom_keep(loom_tensor *t) {
  if (!t) return NULL;
  scope_stack *s = &tl_scopes;
  if (s->depth == 0) return t;  /* no scope: the caller already owns it */
  scope_frame *f = &s->frames[s->depth - 1];
  int found = 0;
  for (size_t i = f->n; i-- > 0;) {
    if (f->items[i] == t) {
      memmove(f->items + i, f->items + i + 1, (f->n - i - 1) * sizeof *f->items);
      f->n--;
      found = 1;
      break;
    }
  }
  if (!found) loom_tensor_retain(t);  /* not the scope's: give out a new reference */
  if (s->depth > 1) frame_push(&s->frames[s->depth - 2], t);
  return t;
}
