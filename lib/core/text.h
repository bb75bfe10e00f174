/* text.h (internal) — small text utilities several subsystems share: a
 * growable printf buffer (allocator summaries and snapshots, the profiler's
 * table) and strict decimal integer parsing (checkpoint metadata, optimizer
 * state). */
#ifndef LOOM_CORE_TEXT_H
#define LOOM_CORE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Zero-initialize; s is malloc'd (the caller frees it); failed is set once
 * an allocation or a format failed, and later appends do nothing. */
typedef struct loom_text {
  char *s;
  size_t len, cap;
  int failed;
} loom_text;

void loom_text_printf(loom_text *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* s, all of it, as a decimal integer (sign allowed); false for NULL, empty,
 * trailing characters or overflow. */
bool loom_parse_i64(const char *s, int64_t *out);

#endif
