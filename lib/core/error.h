/* error.h (internal) — setting the thread-local error and checking inputs. */
#ifndef LOOM_CORE_ERROR_H
#define LOOM_CORE_ERROR_H

#include "loom/status.h"

/* Set this thread's error (printf-style message) and return code. */
loom_status loom_set_error(loom_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current message with "where: " (keeps the code). */
loom_status loom_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define LOOM_TRY(expr)                      \
  do {                                      \
    loom_status loom_try_s_ = (expr);       \
    if (loom_try_s_ != LOOM_OK) return loom_try_s_; \
  } while (0)

#define LOOM_UNUSED(x) ((void)(x))

#endif
