/* scaler.cu — the loss scaler's update on the GPU: the same bookkeeping as
 * scaler.c's update_scale (skip on a non-finite gradient: scale ×backoff,
 * good-step streak reset; else ×growth after growth_interval good steps;
 * bounds), run by one thread on the device state after the optimizer
 * kernel, which has already read found_inf and skipped itself. Double
 * arithmetic and the roundings of scale_f / inv_scale are the host's, so a
 * GPU run follows the CPU's scale sequence exactly. */
#include <cuda_runtime.h>
#include <math.h>

#include "amp/unscale_kernels.h"

extern "C" loom_status loom_cuda_error(cudaError_t e, const char *call, const char *file, int line);

__global__ static void k_scaler_update(loom_amp_scaler_dev *d, loom_amp_scaler_rule r) {
  const bool inf = d->found_inf != 0;
  if (inf) {
    d->scale = fmax(d->scale * r.backoff_factor, r.min_scale);
    d->good_steps = 0;
    d->steps_skipped++;
    d->last_overflow_step = d->steps;
  } else if (++d->good_steps >= r.growth_interval) {
    d->scale = fmin(d->scale * r.growth_factor, r.max_scale);
    d->good_steps = 0;
  }
  d->steps++;
  d->last_skipped = inf;
  d->found_inf = 0;
  d->scale_f = (float)d->scale;
  d->inv_scale = (float)(1.0 / d->scale);
}

extern "C" loom_status loom_cuda_amp_scaler_update(loom_device dev, loom_amp_scaler_dev *d, loom_amp_scaler_rule r) {
  loom_stream *ls = loom_stream_current(dev);
  if (!ls) return loom_last_status();
  k_scaler_update<<<1, 1, 0, (cudaStream_t)loom_stream_native(ls)>>>(d, r);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? LOOM_OK : loom_cuda_error(e, "loss scaler update kernel", __FILE__, __LINE__);
}
