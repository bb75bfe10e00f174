/* provider_factory.c — where simulated GPUs get their memory (provider.h):
 * the factory a test registers. The library has no simulated device of its
 * own (tests/support/provider_fake.c is one). */
#include <pthread.h>

#include "alloc/provider.h"
#include "device/device_internal.h"

static pthread_mutex_t g_factory_lock = PTHREAD_MUTEX_INITIALIZER;
static loom_provider_factory g_factory;
static void *g_factory_ud;

void loom_provider_set_fake_gpu_factory(loom_provider_factory f, void *ud) {
  pthread_mutex_lock(&g_factory_lock);
  g_factory = f;
  g_factory_ud = ud;
  pthread_mutex_unlock(&g_factory_lock);
}

const loom_provider *loom_provider_fake_gpu(int phys) {
  size_t mem = 0;
  if (loom_device_fake_gpus(&mem) <= 0 || phys < 0) return NULL;
  pthread_mutex_lock(&g_factory_lock);
  const loom_provider *p = g_factory ? g_factory(g_factory_ud, phys, mem) : NULL;
  pthread_mutex_unlock(&g_factory_lock);
  return p;
}
