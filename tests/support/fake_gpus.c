/* fake_gpus.c — simulated GPUs for tests (fake_gpus.h): the provider
 * factory that gives each physical GPU its own simulated device, made at
 * its first use and kept for the life of the test process. */
#include <pthread.h>

#include "alloc/provider.h"
#include "device/device_internal.h"
#include "support/fake_gpus.h"

static pthread_mutex_t g_fake_lock = PTHREAD_MUTEX_INITIALIZER;
static loom_fake *g_fake_phys[LOOM_MAX_LOGICAL_GPUS];

static const loom_provider *fake_gpu_provider(void *ud, int phys, size_t capacity) {
  (void)ud;
  if (phys < 0 || phys >= LOOM_MAX_LOGICAL_GPUS) return NULL;
  pthread_mutex_lock(&g_fake_lock);
  if (!g_fake_phys[phys]) g_fake_phys[phys] = loom_fake_create(capacity);
  loom_fake *f = g_fake_phys[phys];
  pthread_mutex_unlock(&g_fake_lock);
  return f ? loom_fake_provider(f) : NULL;
}

loom_status tk_fake_gpus(int n, size_t mem) {
  loom_provider_set_fake_gpu_factory(fake_gpu_provider, NULL);
  return loom_device_testing_fake_gpus(n, mem);
}

loom_fake *tk_fake_gpu(int phys) {
  if (phys < 0 || phys >= LOOM_MAX_LOGICAL_GPUS) return NULL;
  pthread_mutex_lock(&g_fake_lock);
  loom_fake *f = g_fake_phys[phys];
  pthread_mutex_unlock(&g_fake_lock);
  return f;
}
