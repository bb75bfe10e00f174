/* micro_batch.c — loom_backward_micro_batches (see batch.h): gradient
 * accumulation over micro-batches, and the on-OOM shrink that halves the
 * micro-batch and redoes the step from clean gradients. */
#include "core/error.h"
#include "loom/alloc.h"
#include "loom/autograd.h"
#include "loom/batch.h"
#include "loom/log.h"
#include "loom/ops.h"

/* Backpropagate every micro-batch of one step; LOOM_ERR_OOM as soon as
 * memory runs out. Each micro-batch is its own scope, so its graph and
 * activations are gone before the next one starts. */
static loom_status one_pass(loom_micro_loss_fn loss_fn, void *ctx, int64_t batch, int64_t micro) {
  loom_status st = LOOM_OK;
  for (int64_t start = 0; start < batch && st == LOOM_OK; start += micro) {
    int64_t n = batch - start < micro ? batch - start : micro;
    loom_scope_begin();
    loom_tensor *loss = loss_fn(ctx, start, n);
    /* The mean over the global batch: each micro-batch's mean weighted by
     * its share (exactly 1 when there is a single micro-batch). */
    if (loss && n != batch) loss = loom_mul_scalar(loss, (double)n / (double)batch);
    st = loss ? loom_backward(loss) : (loom_last_status() != LOOM_OK ? loom_last_status() : LOOM_ERR_INTERNAL);
    loom_scope_end();
  }
  return st;
}

loom_status loom_backward_micro_batches(loom_optimizer *opt, loom_micro_loss_fn loss, void *ctx, int64_t batch,
                                        int64_t *micro, bool shrink, loom_device dev) {
  if (!opt || !loss || !micro)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "backward_micro_batches: optimizer, loss function and micro must not "
                          "be NULL");
  if (batch < 1 || *micro < 1)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "backward_micro_batches: batch %lld and micro-batch %lld must be >= 1",
                          (long long)batch, (long long)*micro);
  if (*micro > batch) *micro = batch;
  for (;;) {
    LOOM_TRY(loom_optimizer_zero_grad(opt));
    loom_status st = one_pass(loss, ctx, batch, *micro);
    if (st == LOOM_OK) return LOOM_OK;
    if (st != LOOM_ERR_OOM || !shrink || *micro == 1) {
      if (st == LOOM_ERR_OOM && shrink)
        loom_error_prefix("backward_micro_batches: out of memory even with micro-batches of 1");
      return st;
    }
    /* Drop the partial gradients and the cached blocks, then halve. */
    loom_clear_error();
    LOOM_TRY(loom_optimizer_zero_grad(opt));
    LOOM_TRY(loom_empty_cache(dev));
    int64_t from = *micro;
    *micro = (*micro + 1) / 2;
    loom_log_msg(LOOM_LOG_WARN, "out of memory with micro-batches of %lld: halving to %lld (global batch %lld kept by gradient "
                  "accumulation)", (long long)from, (long long)*micro, (long long)batch);
  }
}
