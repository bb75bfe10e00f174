/* log.c — leveled logging to stderr or a user sink (include/loom/log.h).
 *
 * The level is read from LOOM_LOG once, at the first logging call of any
 * kind (pthread_once), so an explicit loom_log_set_level() is never
 * overridden later by the environment. A bad LOOM_LOG value is reported once
 * on stderr and the default (warn) is kept: a typo in an environment
 * variable must not stop a training run. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "core/error.h"
#include "loom/log.h"
#include "core/sys.h"

#define LOOM_LOG_DEFAULT LOOM_LOG_WARN
#define LOOM_LOG_ACCEPTED "error, warn, info, debug, trace, off"

static pthread_once_t g_log_once = PTHREAD_ONCE_INIT;
static atomic_int g_log_level = LOOM_LOG_DEFAULT;

/* The sink and its user pointer change together, and a sink is never called
 * after loom_log_set_sink() has replaced it: both need the mutex, which is
 * held while the sink runs (this also keeps lines from interleaving). */
static pthread_mutex_t g_sink_mu = PTHREAD_MUTEX_INITIALIZER;
static loom_log_sink g_sink = NULL;
static void *g_sink_user = NULL;
/* Set while this thread runs the sink: a sink that logs itself must not
 * deadlock on g_sink_mu, its messages go straight to stderr. */
static _Thread_local int tl_in_sink = 0;

static const struct {
  const char *name;
  loom_log_level level;
} k_levels[] = {
    {"off", LOOM_LOG_OFF},     {"error", LOOM_LOG_ERROR}, {"warn", LOOM_LOG_WARN},
    {"info", LOOM_LOG_INFO},   {"debug", LOOM_LOG_DEBUG}, {"trace", LOOM_LOG_TRACE},
};

static int lookup_level(const char *name, loom_log_level *out) {
  for (size_t i = 0; i < sizeof k_levels / sizeof k_levels[0]; i++) {
    if (strcasecmp(name, k_levels[i].name) == 0) {
      *out = k_levels[i].level;
      return 1;
    }
  }
  return 0;
}

static void log_init_from_env(void) {
  const char *env = getenv("LOOM_LOG");
  if (!env || !*env) return; /* unset or empty: the default */
  loom_log_level lv;
  if (lookup_level(env, &lv)) {
    atomic_store(&g_log_level, (int)lv);
  } else {
    fprintf(stderr, "[loom W] LOOM_LOG=\"%s\" is not a log level (accepted: %s); using warn\n", env,
            LOOM_LOG_ACCEPTED);
  }
}

static void log_init(void) { pthread_once(&g_log_once, log_init_from_env); }

loom_status loom_log_parse_level(const char *name, loom_log_level *out) {
  if (!name || !out)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_log_parse_level: name and out must not be NULL");
  if (!lookup_level(name, out))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_log_parse_level: \"%s\" is not a log level (accepted: %s)",
                          name, LOOM_LOG_ACCEPTED);
  return LOOM_OK;
}

void loom_log_set_level(loom_log_level level) {
  log_init();
  if ((int)level < LOOM_LOG_OFF || (int)level > LOOM_LOG_TRACE) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_log_set_level: %d is not a log level (LOOM_LOG_OFF..LOOM_LOG_TRACE)",
                   (int)level);
    return;
  }
  atomic_store(&g_log_level, (int)level);
}

loom_log_level loom_log_get_level(void) {
  log_init();
  return (loom_log_level)atomic_load(&g_log_level);
}

void loom_log_set_sink(loom_log_sink sink, void *user) {
  pthread_mutex_lock(&g_sink_mu);
  g_sink = sink;
  g_sink_user = sink ? user : NULL;
  pthread_mutex_unlock(&g_sink_mu);
}

static char level_letter(loom_log_level level) {
  switch (level) {
    case LOOM_LOG_ERROR: return 'E';
    case LOOM_LOG_WARN: return 'W';
    case LOOM_LOG_INFO: return 'I';
    case LOOM_LOG_DEBUG: return 'D';
    case LOOM_LOG_TRACE: return 'T';
    case LOOM_LOG_OFF: break;
  }
  return '?';
}

void loom_log_msg(loom_log_level level, const char *fmt, ...) {
  if ((int)level <= LOOM_LOG_OFF || (int)level > LOOM_LOG_TRACE || !fmt) return;
  if ((int)level > (int)loom_log_get_level()) return;

  /* Format into a stack buffer; fall back to the heap for long messages. */
  char small[512];
  char *msg = small;
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (len < 0) return;
  if ((size_t)len >= sizeof small) {
    char *big = loom_sys_malloc((size_t)len + 1);
    if (big) {
      va_start(ap, fmt);
      vsnprintf(big, (size_t)len + 1, fmt, ap);
      va_end(ap);
      msg = big;
    } else {
      len = (int)sizeof small - 1; /* out of memory: log it truncated */
    }
  }
  if (len > 0 && msg[len - 1] == '\n') msg[--len] = '\0'; /* we add our own */

  if (tl_in_sink) {
    fprintf(stderr, "[loom %c] %s\n", level_letter(level), msg);
  } else {
    pthread_mutex_lock(&g_sink_mu);
    if (g_sink) {
      tl_in_sink = 1;
      g_sink(level, msg, g_sink_user);
      tl_in_sink = 0;
    } else {
      fprintf(stderr, "[loom %c] %s\n", level_letter(level), msg);
    }
    pthread_mutex_unlock(&g_sink_mu);
  }
  if (msg != small) loom_sys_free(msg);
}
