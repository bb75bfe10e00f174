/* device.c — device discovery (CPU always; CUDA at first use) and naming. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_internal.h"

static pthread_once_t g_cuda_once = PTHREAD_ONCE_INIT;
static int g_cuda_count = 0;
static char g_cuda_reason[256] = "";

static void cuda_discover(void) {
#ifdef LOOM_HAVE_CUDA
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
    snprintf(g_cuda_reason, sizeof g_cuda_reason, "no CUDA device (cudaGetDeviceCount: %s)",
             e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    n = 0;
  } else if (e != cudaSuccess) {
    snprintf(g_cuda_reason, sizeof g_cuda_reason, "no usable CUDA driver (cudaGetDeviceCount: %s)",
             cudaGetErrorString(e));
    n = 0;
  }
  (void)cudaGetLastError();
  g_cuda_count = n;
#else
  snprintf(g_cuda_reason, sizeof g_cuda_reason, "loom was built without CUDA (LOOM_CUDA=OFF or no toolkit)");
  g_cuda_count = 0;
#endif
}

int loom_device_count(loom_device_kind kind) {
  if (kind == LOOM_CPU) return 1;
  if (kind == LOOM_CUDA) {
    pthread_once(&g_cuda_once, cuda_discover);
    return g_cuda_count;
  }
  return 0;
}

const char *loom_cuda_unavailable_reason(void) {
  return loom_device_count(LOOM_CUDA) > 0 ? NULL : g_cuda_reason;
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
#ifdef LOOM_HAVE_CUDA
  if (dev.kind == LOOM_CUDA) {
    LOOM_TRY(loom_cuda_set_device(dev.index));
    LOOM_CUDA_CHECK(cudaDeviceSynchronize());
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
  if (current == index) return LOOM_OK;
  LOOM_CUDA_CHECK(cudaSetDevice(index));
  current = index;
  return LOOM_OK;
}
#endif
