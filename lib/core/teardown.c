/* teardown.c — the hook table of teardown.h and loom_shutdown (shutdown.h).
 * A fixed array: hooks are registered by load-time constructors, a few per
 * layer, so there is no allocation that loom_shutdown itself would leave
 * behind. */
#include <pthread.h>
#include <stdio.h>

#include "core/error.h"
#include "core/teardown.h"
#include "loom/shutdown.h"

#define MAX_HOOKS 64

typedef struct hook {
  loom_layer layer;
  int kind;
  loom_teardown_fn fn;
} hook;

static hook g_hooks[MAX_HOOKS];
static int g_n;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

void loom_teardown_register(loom_layer layer, int kind, loom_teardown_fn fn) {
  if (!fn || (int)layer < 0 || layer >= LOOM_LAYER_COUNT) return;
  pthread_mutex_lock(&g_mu);
  int known = 0;
  for (int i = 0; i < g_n; i++) known |= g_hooks[i].fn == fn && g_hooks[i].kind == kind;
  if (!known && g_n < MAX_HOOKS) g_hooks[g_n++] = (hook){layer, kind, fn};
  pthread_mutex_unlock(&g_mu);
  /* MAX_HOOKS is far above the few hooks per layer loom has: a full table is
   * a bug caught by test_shutdown (loom_teardown_count). */
}

int loom_teardown_count(void) {
  pthread_mutex_lock(&g_mu);
  int n = g_n;
  pthread_mutex_unlock(&g_mu);
  return n;
}

/* Run one hook, keeping the first failure (code and message) in *first. */
static void run(const hook *h, loom_status *first, char *msg, size_t n) {
  loom_status st = h->fn();
  if (st != LOOM_OK && *first == LOOM_OK) {
    *first = st;
    snprintf(msg, n, "%s", loom_last_error());
  }
}

/* The busy checks: what is still alive, as "a; b" in msg (empty: nothing). */
static void busy(char *msg, size_t n) {
  size_t used = 0;
  msg[0] = 0;
  for (int i = 0; i < g_n; i++) {
    if (g_hooks[i].kind != LOOM_HOOK_BUSY || g_hooks[i].fn() == LOOM_OK) continue;
    int w = snprintf(msg + used, n - used, "%s%s", used ? "; " : "", loom_last_error());
    if (w > 0) used += (size_t)w < n - used ? (size_t)w : n - used - 1;
  }
}

loom_status loom_shutdown(void) {
  pthread_mutex_lock(&g_mu);
  loom_status first = LOOM_OK;
  char msg[512] = "";
  busy(msg, sizeof msg);
  if (msg[0]) {
    pthread_mutex_unlock(&g_mu);
    return loom_set_error(LOOM_ERR_STATE, "loom_shutdown: refused, nothing was torn down: still alive: %s", msg);
  }
  /* Quiesce, lowest layer first: the devices finish what loom queued. */
  for (int l = 0; l < LOOM_LAYER_COUNT; l++)
    for (int i = 0; i < g_n; i++)
      if (g_hooks[i].kind == LOOM_HOOK_QUIESCE && (int)g_hooks[i].layer == l) run(&g_hooks[i], &first, msg, sizeof msg);
  /* Tear down, highest layer first, each layer in reverse registration order. */
  for (int l = LOOM_LAYER_COUNT - 1; l >= 0; l--)
    for (int i = g_n - 1; i >= 0; i--)
      if (g_hooks[i].kind == LOOM_HOOK_TEARDOWN && (int)g_hooks[i].layer == l) run(&g_hooks[i], &first, msg, sizeof msg);
  pthread_mutex_unlock(&g_mu);
  if (first != LOOM_OK) return loom_set_error(first, "loom_shutdown: %s", msg);
  return LOOM_OK;
}
