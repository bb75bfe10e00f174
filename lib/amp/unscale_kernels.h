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

/* dst[j] = src[j] widened (f16/bf16 -> f32) for j < n: what
 * loom_cpu_amp_unscale writes for such an item at inv_scale 1 without
 * accumulation, bit for bit (a non-finite run takes the same multiply). */
void loom_cpu_amp_widen_grad(const uint16_t *src, loom_dtype dt, float *dst, int64_t n);
/* *found_inf = 1 if any written value is not finite (else left as is). */
loom_status loom_cpu_amp_unscale(const loom_amp_unscale_item *items, int n, float inv_scale, int *found_inf);
#if defined(LOOM_HAVE_CUDA)
struct loom_dev_table;
/* One launch over all items on the device's current stream, never waiting:
 * the inverse scale is inv_scale, or *inv_dev when inv_dev is not NULL (a
 * device word); when found_dev is not NULL, 1 is ORed into that device word
 * if any written value is not finite. The work list (items + chunk map)
 * stays in device memory in *table between calls and is uploaded only when
 * it changes (table NULL: a temporary one). */
loom_status loom_cuda_amp_unscale(loom_device dev, const loom_amp_unscale_item *items, int n, float inv_scale,
                                  const float *inv_dev, int32_t *found_dev, struct loom_dev_table **table);
/* Small helpers of the same file: zero n device bytes (stream-ordered), and
 * read a device int32 flag back (a counted host wait). */
loom_status loom_cuda_fill_zero(loom_device dev, void *p, size_t n);
loom_status loom_cuda_read_flag(loom_device dev, const void *flag, int *out);

/* The loss scaler's state on the GPU (scaler.c keeps the host mirror). The
 * scale is double, like the host's; scale_f and inv_scale are what the
 * loss multiply and the unscale pass read, each rounded from the double
 * exactly as the CPU path rounds it. */
typedef struct loom_amp_scaler_dev {
  double scale;
  float scale_f;             /* (float)scale */
  float inv_scale;           /* (float)(1.0 / scale) */
  int32_t found_inf;         /* ORed by the unscale pass; cleared by the update */
  int32_t last_skipped;      /* the last update saw found_inf */
  int64_t good_steps, steps, steps_skipped, last_overflow_step;
} loom_amp_scaler_dev;

typedef struct loom_amp_scaler_rule {
  double growth_factor, backoff_factor, min_scale, max_scale;
  int64_t growth_interval;
} loom_amp_scaler_rule;

/* One thread: skip bookkeeping and the scale move of scaler.c's
 * update_scale, on the device state (scaler.cu). */
loom_status loom_cuda_amp_scaler_update(loom_device dev, loom_amp_scaler_dev *d, loom_amp_scaler_rule r);
#endif

#ifdef __cplusplus
}
#endif

#endif
