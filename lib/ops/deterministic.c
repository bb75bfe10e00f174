/* deterministic.c — deterministic mode (loom_set_deterministic, ops.h):
 * the process-wide switch the GPU paths consult, and LOOM_DETERMINISTIC,
 * read at the first question. A value other than 1/0/on/off/true/false is
 * kept as an error that every op returns (as LOOM_ALLOC_CONF's makes every
 * allocation fail) until loom_set_deterministic replaces it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ops/deterministic.h"

static atomic_bool g_on = false;
static atomic_int g_env_status = LOOM_OK;
static char g_env_msg[160];  /* written once, before g_env_status is set */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void read_env(void) {
  const char *v = getenv("LOOM_DETERMINISTIC");
  if (!v) return;
  if (!strcmp(v, "1") || !strcmp(v, "on") || !strcmp(v, "true")) {
    atomic_store(&g_on, true);
  } else if (strcmp(v, "0") && strcmp(v, "off") && strcmp(v, "false")) {
    snprintf(g_env_msg, sizeof g_env_msg, "LOOM_DETERMINISTIC='%.40s': expected 1 or 0 (on/off, true/false); "
             "unset it or call loom_set_deterministic", v);
    atomic_store(&g_env_status, LOOM_ERR_INVALID_ARG);
  }
}

void loom_set_deterministic(bool on) {
  pthread_once(&g_once, read_env);  /* so that a later first read cannot override the API */
  atomic_store(&g_on, on);
  atomic_store(&g_env_status, LOOM_OK);
}

bool loom_get_deterministic(void) {
  pthread_once(&g_once, read_env);
  return atomic_load_explicit(&g_on, memory_order_relaxed);
}

loom_status loom_deterministic_check(void) {
  pthread_once(&g_once, read_env);
  int st = atomic_load_explicit(&g_env_status, memory_order_relaxed);
  return st == LOOM_OK ? LOOM_OK : loom_set_error((loom_status)st, "%s", g_env_msg);
}
