/* log.h — leveled logging to stderr (or a user sink).
 *
 * The level comes from LOOM_LOG (error|warn|info|debug|trace, default warn)
 * at first use, or from loom_log_set_level(). Thread-safe. */
#ifndef LOOM_LOG_H
#define LOOM_LOG_H

#include "export.h"
#include "status.h"

LOOM_EXTERN_C_BEGIN

typedef enum loom_log_level {
  LOOM_LOG_OFF = 0,
  LOOM_LOG_ERROR = 1,
  LOOM_LOG_WARN = 2,
  LOOM_LOG_INFO = 3,
  LOOM_LOG_DEBUG = 4,
  LOOM_LOG_TRACE = 5,
} loom_log_level;

typedef void (*loom_log_sink)(loom_log_level level, const char *msg, void *user);

LOOM_API void loom_log_set_level(loom_log_level level);
LOOM_API loom_log_level loom_log_get_level(void);
/* Parse "error", "warn", "info", "debug", "trace", "off". Unknown names are
 * LOOM_ERR_INVALID_ARG (the same rule LOOM_LOG follows). */
LOOM_API loom_status loom_log_parse_level(const char *name, loom_log_level *out);
/* Route messages to sink (NULL restores stderr). */
LOOM_API void loom_log_set_sink(loom_log_sink sink, void *user);
LOOM_API void loom_log_msg(loom_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

LOOM_EXTERN_C_END
#endif
