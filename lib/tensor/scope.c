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

/* Frames live in the thread's own storage, so opening a scope never
 * allocates and cannot fail; beyond SCOPE_FRAMES nested scopes the extra
 * ones are only counted (their tensors cannot be recorded: ops fail). */
#define SCOPE_FRAMES 128

typedef struct scope_stack {
  scope_frame frames[SCOPE_FRAMES];
  int depth;     /* frames in use */
  int overflow;  /* scopes open beyond SCOPE_FRAMES, innermost */
  int used;      /* frames that may hold an items array */
} scope_stack;

static _Thread_local scope_stack tl_scopes;

int loom_scope_depth(void) { return tl_scopes.depth + tl_scopes.overflow; }

void loom_scope_begin(void) {
  scope_stack *s = &tl_scopes;
  if (s->depth == SCOPE_FRAMES) {
    s->overflow++;
    loom_set_error(LOOM_ERR_STATE, "loom_scope_begin: more than %d nested scopes; tensors made in the innermost ones "
                   "cannot be recorded", SCOPE_FRAMES);
    return;
  }
  s->frames[s->depth].n = 0;
  s->depth++;
  if (s->depth > s->used) s->used = s->depth;
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
  if (s->overflow) {
    s->overflow--;
    return;
  }
  if (s->depth == 0) return;
  scope_frame *f = &s->frames[s->depth - 1];
  /* Release newest first: results die before the inputs they were made of. */
  for (size_t i = f->n; i-- > 0;) loom_tensor_release(f->items[i]);
  f->n = 0;
  s->depth--;
  if (s->depth == 0) {
    for (int i = 0; i < s->used; i++) {
      loom_sys_free(s->frames[i].items);
      s->frames[i] = (scope_frame){0};
    }
    s->used = 0;
  }
}

/* A tensor that cannot be recorded in the open scope (out of memory) is
 * released and the call fails: nobody else would ever release it. */
loom_tensor *loom_tensor_adopt(loom_tensor *t) {
  if (!t) return NULL;
  scope_stack *s = &tl_scopes;
  if (s->overflow || (s->depth > 0 && !frame_push(&s->frames[s->depth - 1], t))) {
    loom_tensor_release(t);
    if (!s->overflow) loom_set_error(LOOM_ERR_OOM, "scope: out of host memory recording a new tensor");
    else loom_set_error(LOOM_ERR_STATE, "scope: more than %d nested scopes", SCOPE_FRAMES);
    return NULL;
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
  if (s->depth > 1 && !frame_push(&s->frames[s->depth - 2], t)) {
    loom_tensor_release(t);  /* no scope could own it */
    loom_set_error(LOOM_ERR_OOM, "loom_keep: out of host memory moving a tensor to the enclosing scope");
    return NULL;
  }
  return t;
}
