/* unscale_kernels.h (internal) — the interface of the one-pass unscale +
 * non-finite check kernels (unscale_cpu.c, unscale.cu). Plain C types only,
 * so the CUDA translation unit can include it. */
#ifndef LOOM_AMP_UNSCALE_KERNELS_H
#define LOOM_AMP_UNSCALE_KERNELS_H

#include <stdint.h>
#include "loom/device.h"
#include "loom/dtype.h"
#include "loom/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_amp_unscale_item {
  const void *src;      /* scaled gradient: f32, f16 or bf16, contiguous */
  float *dst;           /* f32 master gradient (may alias src when f32) */
  int64_t numel;
  int32_t src_dtype;    /* loom_dtype */
  int32_t accumulate;   /* dst += src * inv instead of dst = src * inv */
} loom_amp_unscale_item;

/* *found_inf = 1 if any written value is not finite (else left as is). */
loom_status loom_cpu_amp_unscale(const loom_amp_unscale_item *items, int n, float inv_scale, int *found_inf);
#if defined(LOOM_HAVE_CUDA)
/* One launch over all items on the device's current stream; found_inf is
 * copied back once at the end (the only host sync of the step). */
loom_status loom_cuda_amp_unscale(loom_device dev, const loom_amp_unscale_item *items, int n, float inv_scale,
                                  int *found_inf);
#endif

#ifdef __cplusplus
}
#endif

#endif
