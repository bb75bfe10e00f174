/* batch.h — fitting the batch to the device's memory, inside the runtime:
 *  - loom_find_batch_size probes training steps at growing batch sizes
 *    (doubling, then bisecting between the last size that fit and the first
 *    that did not), backs off on LOOM_ERR_OOM without leaking (each probe
 *    must leave allocated memory as it found it; the finder checks) and
 *    answers the largest size that fit less a margin;
 *  - loom_backward_micro_batches runs the backward passes of one optimizer
 *    step over a global batch in micro-batches (gradient accumulation) and,
 *    with shrink on, halves the micro-batch and redoes the step when it runs
 *    out of memory, so training goes on from the same step with the same
 *    global batch (the results then equal a run that used the smaller
 *    micro-batch from the start).
 * Both work with any device whose allocator fails cleanly: on the CPU set a
 * hard limit (LOOM_ALLOC_CONF=limit:...) to try them.
 *
 * Threads: one call at a time per model; the callbacks run on the calling
 * thread. */
#ifndef LOOM_BATCH_H
#define LOOM_BATCH_H

#include "device.h"
#include "nn.h"
#include "optim.h"
#include "tensor.h"

LOOM_EXTERN_C_BEGIN

/* Run one probe training step (forward + backward, no parameter update) at
 * batch samples; return LOOM_ERR_OOM when memory runs out, LOOM_OK when it
 * fit, anything else to stop the search. Everything it allocates must be
 * freed when it returns (open a scope; zero the gradients). */
typedef loom_status (*loom_batch_probe_fn)(void *ctx, int64_t batch);

typedef struct loom_batch_finder_options {
  size_t struct_size;   /* sizeof(loom_batch_finder_options) */
  loom_device device;   /* whose memory is probed: cache emptied after each OOM */
  int64_t start;        /* first size tried (default 1) */
  int64_t max;          /* largest size tried (default 65536) */
  double margin;        /* answer = largest size that fit x (1 - margin), default 0.1 */
  int64_t multiple_of;  /* round the answer down to a multiple of this (default 1) */
} loom_batch_finder_options;

/* Sets struct_size and every default (noted beside each field; device: the
 * CPU). o NULL in loom_find_batch_size: these defaults. */
LOOM_API void loom_batch_finder_options_init(loom_batch_finder_options *o);
/* *batch = the size to train with; *largest (may be NULL) = the largest that
 * fit. LOOM_ERR_OOM with a message when even o->start does not fit;
 * LOOM_ERR_STATE when a probe left memory allocated. */
LOOM_API loom_status loom_find_batch_size(loom_batch_probe_fn probe, void *ctx, const loom_batch_finder_options *o,
                                          int64_t *batch, int64_t *largest);

/* A ready-made probe for a classifier taking [batch, in_features] inputs:
 * constant inputs and labels on device (the generator is not touched), forward, mean cross entropy,
 * backward, then the gradients are zeroed through opt (whose state, made
 * when it was created, is part of what must fit). Pass a pointer to this
 * struct as ctx. */
typedef struct loom_classifier_probe {
  size_t struct_size;  /* sizeof(loom_classifier_probe), set by the caller */
  loom_module *model;
  loom_optimizer *opt;
  int64_t in_features, num_classes;
  loom_device device;
} loom_classifier_probe;
LOOM_API loom_status loom_batch_probe_classifier(void *ctx, int64_t batch);

/* The loss of samples [start, start + count) of the current global batch,
 * averaged over those count samples (e.g. a slice of the batch through the
 * model and a mean cross entropy). The caller may scale it (loss scaling). */
typedef loom_tensor *(*loom_micro_loss_fn)(void *ctx, int64_t start, int64_t count);

/* Zero opt's gradients, then for each micro-batch of *micro samples (the
 * last may be smaller) backpropagate loss x count / batch, so the gradients
 * are those of the mean over the global batch. With shrink, an OOM zeroes
 * the gradients, empties dev's cache, halves *micro and starts the step
 * again (until *micro is 1); without it, the OOM is returned. *micro is the
 * micro-batch used in the end. The caller then steps the optimizer. */
LOOM_API loom_status loom_backward_micro_batches(loom_optimizer *opt, loom_micro_loss_fn loss, void *ctx, int64_t batch,
                                                 int64_t *micro, bool shrink, loom_device dev);

LOOM_EXTERN_C_END
#endif
