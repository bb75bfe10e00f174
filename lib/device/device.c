/* device.c — device discovery (CPU always; CUDA at first use), naming,
 * and the logical CUDA device table: physical GPUs filtered and renumbered
 * by the visible list (LOOM_VISIBLE_DEVICES / loom_set_visible_devices), with
 * a GPU optionally split into virtual devices (loom_set_virtual_devices).
 * The table is built once, at the first call that needs CUDA devices; from
 * then on it is read without locks and can no longer change. */
#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_internal.h"
#include "device/sync_stats.h"
#include "loom/log.h"

typedef struct logical_gpu {
  int physical;
  size_t mem_limit;  /* 0 unless virtual */
} logical_gpu;

static pthread_mutex_t g_dev_lock = PTHREAD_MUTEX_INITIALIZER;
/* Physical discovery (does not freeze the configuration). */
static int g_phys_known = 0;
static int g_phys_count = 0;
static char g_phys_reason[256] = "";
static atomic_int g_fake_n = 0;
static size_t g_fake_mem = 0;
/* Configuration, before first use. */
static int g_vis_set = 0;
static int g_vis[LOOM_MAX_LOGICAL_GPUS];
static int g_vis_n = 0;
static int g_virt_n[LOOM_MAX_LOGICAL_GPUS];
static size_t g_virt_limits[LOOM_MAX_LOGICAL_GPUS][LOOM_MAX_VIRTUAL_PER_GPU];
/* The logical table, frozen at first use. */
static atomic_int g_ready = 0;
static int g_cuda_count = 0;
static logical_gpu g_logical[LOOM_MAX_LOGICAL_GPUS];
static char g_cuda_reason[512] = "";

static int phys_count_locked(void) {
  if (g_phys_known) return g_phys_count;
  g_phys_known = 1;
  if (atomic_load(&g_fake_n) > 0) {
    g_phys_count = atomic_load(&g_fake_n);
    return g_phys_count;
  }
#ifdef LOOM_HAVE_CUDA
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
    snprintf(g_phys_reason, sizeof g_phys_reason, "no CUDA device (cudaGetDeviceCount: %s)",
             e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    n = 0;
  } else if (e != cudaSuccess) {
    snprintf(g_phys_reason, sizeof g_phys_reason, "no usable CUDA driver (cudaGetDeviceCount: %s)",
             cudaGetErrorString(e));
    n = 0;
  }
  (void)cudaGetLastError();
  g_phys_count = n;
#else
  snprintf(g_phys_reason, sizeof g_phys_reason, "loom was built without CUDA (LOOM_CUDA=OFF or no toolkit)");
  g_phys_count = 0;
#endif
  return g_phys_count;
}

/* Total memory of a physical GPU (0 if unknown). */
static size_t phys_mem_locked(int phys) {
  if (atomic_load(&g_fake_n) > 0) return g_fake_mem;
#ifdef LOOM_HAVE_CUDA
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, phys) == cudaSuccess) return prop.totalGlobalMem;
  (void)cudaGetLastError();
#else
  (void)phys;
#endif
  return 0;
}

/* Parse "1,0" into ids; "" is the empty list. nphys < 0: syntax only. */
static loom_status parse_visible(const char *what, const char *list, int nphys, int *ids, int *n) {
  *n = 0;
  const char *p = list;
  while (*p) {
    while (isspace((unsigned char)*p)) p++;
    if (!*p) break;
    char *end = NULL;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0)
      return loom_set_error(LOOM_ERR_INVALID_ARG, "%s='%s': expected comma-separated GPU indices like \"1,0\"", what, list);
    if (nphys >= 0 && v >= nphys)
      return loom_set_error(LOOM_ERR_DEVICE, "%s='%s': GPU %ld does not exist (%d physical GPU%s%s%s)", what, list, v,
                            nphys, nphys == 1 ? "" : "s", nphys ? "" : ": ", nphys ? "" : g_phys_reason);
    for (int i = 0; i < *n; i++)
      if (ids[i] == (int)v) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s='%s': GPU %ld is listed twice", what, list, v);
    if (*n >= LOOM_MAX_LOGICAL_GPUS)
      return loom_set_error(LOOM_ERR_INVALID_ARG, "%s='%s': more than %d GPUs", what, list, LOOM_MAX_LOGICAL_GPUS);
    ids[(*n)++] = (int)v;
    p = end;
    while (isspace((unsigned char)*p)) p++;
    if (*p == ',') p++;
    else if (*p)
      return loom_set_error(LOOM_ERR_INVALID_ARG, "%s='%s': expected comma-separated GPU indices like \"1,0\"", what, list);
  }
  return LOOM_OK;
}

/* The visible physical GPUs in logical order: the API's list, else
 * LOOM_VISIBLE_DEVICES, else all. */
static loom_status visible_locked(int *ids, int *n) {
  int nphys = phys_count_locked();
  if (g_vis_set) {
    memcpy(ids, g_vis, sizeof g_vis);
    *n = g_vis_n;
    return LOOM_OK;
  }
  const char *env = getenv("LOOM_VISIBLE_DEVICES");
  if (env) return parse_visible("LOOM_VISIBLE_DEVICES", env, nphys, ids, n);
  *n = nphys < LOOM_MAX_LOGICAL_GPUS ? nphys : LOOM_MAX_LOGICAL_GPUS;
  for (int i = 0; i < *n; i++) ids[i] = i;
  return LOOM_OK;
}

static void build_table(void) {
  pthread_mutex_lock(&g_dev_lock);
  if (atomic_load(&g_ready)) {
    pthread_mutex_unlock(&g_dev_lock);
    return;
  }
  int nphys = phys_count_locked();
  int ids[LOOM_MAX_LOGICAL_GPUS], nvis = 0, bad_env = 0;
  g_cuda_count = 0;
  const char *env = getenv("LOOM_VISIBLE_DEVICES");
  if (nphys == 0 && !g_vis_set && env && parse_visible("LOOM_VISIBLE_DEVICES", env, -1, ids, &nvis) != LOOM_OK) {
    /* A malformed value is an error on every machine, not only on one with
     * GPUs to filter: it becomes the reason and a warning. */
    snprintf(g_cuda_reason, sizeof g_cuda_reason, "%s", loom_last_error());
    loom_clear_error();
    bad_env = 1;
  } else if (nphys == 0) {
    snprintf(g_cuda_reason, sizeof g_cuda_reason, "%s", g_phys_reason);
  } else if (visible_locked(ids, &nvis) != LOOM_OK) {
    snprintf(g_cuda_reason, sizeof g_cuda_reason, "%s", loom_last_error());
    loom_clear_error();
    bad_env = 1;
  } else {
    for (int v = 0; v < nvis; v++) {
      int nv = g_virt_n[v] > 0 ? g_virt_n[v] : 1;
      for (int j = 0; j < nv && g_cuda_count < LOOM_MAX_LOGICAL_GPUS; j++) {
        g_logical[g_cuda_count].physical = ids[v];
        g_logical[g_cuda_count].mem_limit = g_virt_n[v] > 0 ? g_virt_limits[v][j] : 0;
        g_cuda_count++;
      }
    }
    if (g_cuda_count == 0)
      snprintf(g_cuda_reason, sizeof g_cuda_reason, "no CUDA device is visible (LOOM_VISIBLE_DEVICES or "
               "loom_set_visible_devices hides all %d)", nphys);
  }
  atomic_store(&g_ready, 1);
  int count = g_cuda_count;
  pthread_mutex_unlock(&g_dev_lock);
  if (count > 0) loom_log_msg(LOOM_LOG_INFO, "CUDA: %d device%s visible", count, count == 1 ? "" : "s");
  else if (bad_env) loom_log_msg(LOOM_LOG_WARN, "CUDA devices disabled: %s", g_cuda_reason);
  else loom_log_msg(LOOM_LOG_INFO, "CUDA unavailable: %s", g_cuda_reason);
}

static int cuda_count(void) {
  if (!atomic_load_explicit(&g_ready, memory_order_acquire)) build_table();
  return g_cuda_count;
}

int loom_device_count(loom_device_kind kind) {
  if (kind == LOOM_CPU) return 1;
  if (kind == LOOM_CUDA) return cuda_count();
  return 0;
}

const char *loom_cuda_unavailable_reason(void) {
  return loom_device_count(LOOM_CUDA) > 0 ? NULL : g_cuda_reason;
}

int loom_device_physical(int index) {
  if (index < 0 || index >= cuda_count()) return -1;
  return g_logical[index].physical;
}

size_t loom_device_memory_limit(int index) {
  if (index < 0 || index >= cuda_count()) return 0;
  return g_logical[index].mem_limit;
}

int loom_device_fake_gpus(size_t *mem) {
  int n = atomic_load(&g_fake_n);
  if (mem) *mem = n > 0 ? g_fake_mem : 0;
  return n;
}

int loom_device_is_real_cuda(loom_device dev) { return dev.kind == LOOM_CUDA && atomic_load(&g_fake_n) == 0; }

static loom_status too_late(const char *what) {
  return loom_set_error(LOOM_ERR_STATE, "%s: CUDA devices are already initialized (a device was used); call it before "
                        "the first call that touches a device, or set the environment variable instead", what);
}

loom_status loom_device_testing_fake_gpus(int n, size_t mem) {
  if (n < 1 || n > LOOM_MAX_LOGICAL_GPUS || mem == 0)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_device_testing_fake_gpus: n=%d mem=%zu", n, mem);
  pthread_mutex_lock(&g_dev_lock);
  loom_status st = LOOM_OK;
  if (atomic_load(&g_ready) || g_phys_known) st = too_late("loom_device_testing_fake_gpus");
  else {
    g_fake_mem = mem;
    atomic_store(&g_fake_n, n);
  }
  pthread_mutex_unlock(&g_dev_lock);
  return st;
}

loom_status loom_set_visible_devices(const char *list) {
  if (!list) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_set_visible_devices: list is NULL (\"\" hides every GPU)");
  pthread_mutex_lock(&g_dev_lock);
  loom_status st = LOOM_OK;
  int ids[LOOM_MAX_LOGICAL_GPUS], n = 0;
  if (atomic_load(&g_ready)) st = too_late("loom_set_visible_devices");
  else st = parse_visible("loom_set_visible_devices", list, phys_count_locked(), ids, &n);
  for (int v = n; st == LOOM_OK && v < LOOM_MAX_LOGICAL_GPUS; v++)
    if (g_virt_n[v] > 0)
      st = loom_set_error(LOOM_ERR_STATE, "loom_set_visible_devices('%s'): virtual devices were set for visible GPU %d, "
                          "which this list removes; set visible devices first", list, v);
  if (st == LOOM_OK) {
    memcpy(g_vis, ids, sizeof ids);
    g_vis_n = n;
    g_vis_set = 1;
  }
  pthread_mutex_unlock(&g_dev_lock);
  return st;
}

loom_status loom_set_virtual_devices(int gpu, int n, const size_t *limits) {
  if (n < 1 || n > LOOM_MAX_VIRTUAL_PER_GPU || !limits)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_set_virtual_devices: n=%d must be in [1, %d] with n limits", n,
                          LOOM_MAX_VIRTUAL_PER_GPU);
  pthread_mutex_lock(&g_dev_lock);
  loom_status st = LOOM_OK;
  int ids[LOOM_MAX_LOGICAL_GPUS], nvis = 0;
  size_t sum = 0;
  if (atomic_load(&g_ready)) st = too_late("loom_set_virtual_devices");
  else st = visible_locked(ids, &nvis);
  if (st == LOOM_OK && (gpu < 0 || gpu >= nvis))
    st = loom_set_error(LOOM_ERR_DEVICE, "loom_set_virtual_devices: GPU %d is not visible (%d visible GPU%s%s%s)", gpu,
                        nvis, nvis == 1 ? "" : "s", phys_count_locked() ? "" : ": ", phys_count_locked() ? "" : g_phys_reason);
  int total = 0;
  for (int v = 0; st == LOOM_OK && v < nvis; v++) total += v == gpu ? n : (g_virt_n[v] > 0 ? g_virt_n[v] : 1);
  if (st == LOOM_OK && total > LOOM_MAX_LOGICAL_GPUS)
    st = loom_set_error(LOOM_ERR_INVALID_ARG, "loom_set_virtual_devices: %d logical devices exceed the maximum of %d",
                        total, LOOM_MAX_LOGICAL_GPUS);
  for (int i = 0; st == LOOM_OK && i < n; i++) {
    if (limits[i] == 0)
      st = loom_set_error(LOOM_ERR_INVALID_ARG, "loom_set_virtual_devices: limit %d is 0; give each virtual device "
                          "its memory in bytes", i);
    sum += limits[i];
  }
  if (st == LOOM_OK) {
    size_t mem = phys_mem_locked(ids[gpu]);
    if (mem && sum > mem)
      st = loom_set_error(LOOM_ERR_INVALID_ARG, "loom_set_virtual_devices: limits add up to %zu bytes but GPU %d "
                          "(physical %d) has %zu", sum, gpu, ids[gpu], mem);
  }
  if (st == LOOM_OK) {
    g_virt_n[gpu] = n;
    memcpy(g_virt_limits[gpu], limits, (size_t)n * sizeof *limits);
  }
  pthread_mutex_unlock(&g_dev_lock);
  return st;
}

loom_status loom_device_check(loom_device dev) {
  if (dev.kind == LOOM_CPU) {
    if (dev.index != 0) return loom_set_error(LOOM_ERR_DEVICE, "device cpu:%d does not exist (only cpu:0)", dev.index);
    return LOOM_OK;
  }
  if (dev.kind == LOOM_CUDA) {
    int n = loom_device_count(LOOM_CUDA);
    if (n == 0) return loom_set_error(LOOM_ERR_DEVICE, "CUDA is unavailable: %s; use the CPU device", g_cuda_reason);
    if (dev.index < 0 || dev.index >= n)
      return loom_set_error(LOOM_ERR_DEVICE, "device cuda:%d does not exist (%d CUDA device%s visible)", dev.index, n,
                            n == 1 ? "" : "s");
    return LOOM_OK;
  }
  return loom_set_error(LOOM_ERR_DEVICE, "unknown device kind %d", dev.kind);
}

loom_status loom_device_parse(const char *text, loom_device *out) {
  if (!text || !out) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_device_parse: NULL argument");
  if (strcmp(text, "cpu") == 0) { *out = loom_cpu(); return LOOM_OK; }
  if (strcmp(text, "auto") == 0) {
    *out = loom_device_count(LOOM_CUDA) > 0 ? loom_cuda(0) : loom_cpu();
    return LOOM_OK;
  }
  if (strncmp(text, "cuda", 4) == 0) {
    int idx = 0;
    if (text[4] == ':') {
      char *end = NULL;
      long v = strtol(text + 5, &end, 10);
      if (end == text + 5 || *end != '\0' || v < 0 || v > 1024)
        return loom_set_error(LOOM_ERR_INVALID_ARG, "device '%s': expected cuda:N with N a device index", text);
      idx = (int)v;
    } else if (text[4] != '\0') {
      return loom_set_error(LOOM_ERR_INVALID_ARG, "device '%s': expected cpu, cuda, cuda:N or auto", text);
    }
    *out = loom_cuda(idx);
    return loom_device_check(*out);
  }
  return loom_set_error(LOOM_ERR_INVALID_ARG, "device '%s': expected cpu, cuda, cuda:N or auto", text);
}

const char *loom_device_str(loom_device dev, char *buf, int n) {
  if (!buf || n <= 0) return "";
  if (dev.kind == LOOM_CPU) snprintf(buf, (size_t)n, "cpu");
  else if (dev.kind == LOOM_CUDA) snprintf(buf, (size_t)n, "cuda:%d", dev.index);
  else snprintf(buf, (size_t)n, "unknown:%d", dev.index);
  return buf;
}

loom_status loom_device_synchronize(loom_device dev) {
  LOOM_TRY(loom_device_check(dev));
  loom_sync_count(LOOM_SYNC_DEVICE);
#ifdef LOOM_HAVE_CUDA
  if (loom_device_is_real_cuda(dev)) {
    LOOM_TRY(loom_cuda_set_device(dev.index));
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
    return loom_deferred_check(dev);
  }
#endif
  return LOOM_OK;
}

#ifdef LOOM_HAVE_CUDA
loom_status loom_cuda_error(cudaError_t e, const char *call, const char *file, int line) {
  (void)cudaGetLastError();
  return loom_set_error(LOOM_ERR_CUDA, "%s failed at %s:%d: %s (%s)", call, file, line, cudaGetErrorString(e),
                        cudaGetErrorName(e));
}

loom_status loom_cuda_set_device(int index) {
  static _Thread_local int current = -1;
  int phys = loom_device_physical(index);
  if (phys < 0) return loom_set_error(LOOM_ERR_DEVICE, "cuda:%d does not exist (%d CUDA devices)", index, cuda_count());
  if (atomic_load(&g_fake_n) > 0 || current == phys) return LOOM_OK;
  loom_sync_count(LOOM_SYNC_SET_DEVICE);
  LOOM_CUDA_CHECK(cudaSetDevice(phys));
  current = phys;
  return LOOM_OK;
}
#endif
