/* error.c — thread-local error state behind loom_last_error(). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

#define LOOM_ERR_MSG_MAX 1024

static _Thread_local char tl_msg[LOOM_ERR_MSG_MAX];
static _Thread_local loom_status tl_code = LOOM_OK;

loom_status loom_set_error(loom_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
  va_end(ap);
  tl_code = code;
  return code;
}

loom_status loom_error_prefix(const char *fmt, ...) {
  char prefix[256];
  char old[LOOM_ERR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, tl_msg, sizeof old);
  /* Say each place once: when the message already starts with the prefix's
   * first component ("cross_entropy: label 7 ..." under "cross_entropy",
   * "loader: ..." under "loader: epoch 2, batch 5"), that component is not
   * repeated. */
  const char *rest = old;
  size_t head = strcspn(prefix, ":");
  if (head > 0 && strncmp(old, prefix, head) == 0 && old[head] == ':' && old[head + 1] == ' ') {
    rest = old + head + 2;
    if (prefix[head] == '\0') {  /* the whole prefix is already there */
      return tl_code;
    }
  }
  /* "prefix: rest", truncated to the buffer. Built by hand: snprintf of two
   * %s into one buffer trips -Wformat-truncation under -Werror. */
  int n = snprintf(tl_msg, sizeof tl_msg, "%s: ", prefix);
  if (n > 0 && (size_t)n < sizeof tl_msg) {
    size_t len = strnlen(rest, sizeof tl_msg - (size_t)n - 1);
    memcpy(tl_msg + n, rest, len);
    tl_msg[(size_t)n + len] = '\0';
  }
  return tl_code;
}

const char *loom_last_error(void) { return tl_msg; }
loom_status loom_last_status(void) { return tl_code; }

void loom_clear_error(void) {
  tl_msg[0] = '\0';
  tl_code = LOOM_OK;
}

const char *loom_status_name(loom_status s) {
  switch (s) {
    case LOOM_OK: return "LOOM_OK";
    case LOOM_ERR_INVALID_ARG: return "LOOM_ERR_INVALID_ARG";
    case LOOM_ERR_SHAPE: return "LOOM_ERR_SHAPE";
    case LOOM_ERR_DTYPE: return "LOOM_ERR_DTYPE";
    case LOOM_ERR_DEVICE: return "LOOM_ERR_DEVICE";
    case LOOM_ERR_OOM: return "LOOM_ERR_OOM";
    case LOOM_ERR_IO: return "LOOM_ERR_IO";
    case LOOM_ERR_FORMAT: return "LOOM_ERR_FORMAT";
    case LOOM_ERR_UNSUPPORTED: return "LOOM_ERR_UNSUPPORTED";
    case LOOM_ERR_CUDA: return "LOOM_ERR_CUDA";
    case LOOM_ERR_STATE: return "LOOM_ERR_STATE";
    case LOOM_ERR_INTERNAL: return "LOOM_ERR_INTERNAL";
    case LOOM_ERR_NULL_INPUT: return "LOOM_ERR_NULL_INPUT";
  }
  return "LOOM_ERR_UNKNOWN";
}
