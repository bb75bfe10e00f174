/* text.c — the shared text utilities (text.h). */
#include "core/text.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "core/sys.h"

void loom_text_printf(loom_text *b, const char *fmt, ...) {
  if (b->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = 1;
      return;
    }
    if (b->s && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t nc = b->cap ? b->cap * 2 : 4096;
    while (nc < b->len + (size_t)n + 1) nc *= 2;
    char *ns = loom_sys_realloc(b->s, nc);
    if (!ns) {
      b->failed = 1;
      return;
    }
    b->s = ns;
    b->cap = nc;
  }
}

bool loom_parse_i64(const char *s, int64_t *out) {
  if (!s || !*s) return false;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}
