/* metrics.h — training metrics as TensorBoard event files and CSV.
 *
 * A metrics writer logs scalars (tag, step, value) into a log directory:
 *   DIR/events.out.tfevents.<time>.<host>.<pid>.loom   what `tensorboard --logdir DIR` reads
 *   DIR/metrics.csv                                    wall_time,step,tag,value (one row per scalar)
 * The event file is TFRecord-framed (length, masked CRC-32C of the length,
 * data, masked CRC-32C of the data) tensorflow.Event protobuf messages: a
 * first one with file_version "brain.Event:2", then one per scalar with
 * wall_time, step and a Summary holding one simple_value (a float, so
 * TensorBoard shows value rounded to single precision; the CSV keeps every
 * digit). Files are flushed at least every two seconds, on
 * loom_metrics_flush and on close, so TensorBoard can follow a running job.
 *
 * Threads: a writer may be used from several threads (calls are
 * serialized); close it once, from one thread, after the others are done. */
#ifndef LOOM_METRICS_H
#define LOOM_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "export.h"
#include "status.h"

LOOM_EXTERN_C_BEGIN

typedef struct loom_metrics loom_metrics;

/* Options; initialize them with loom_metrics_options_init. */
typedef struct loom_metrics_options {
  size_t struct_size;  /* sizeof(loom_metrics_options) */
  bool tensorboard;    /* write the event file (true) */
  bool csv;            /* write metrics.csv (true) */
} loom_metrics_options;

/* Sets struct_size and every default (noted beside each field). */
LOOM_API void loom_metrics_options_init(loom_metrics_options *o);

/* Create logdir (and its parents) if needed and open the files in it (o may
 * be NULL for the defaults). NULL + LOOM_ERR_IO naming the path when the
 * directory or a file cannot be made; an existing metrics.csv is appended
 * to (its header is written only when it is new). */
LOOM_API loom_metrics *loom_metrics_open(const char *logdir, const loom_metrics_options *o);
/* Log value for tag at step. tag: non-empty, printable (TensorBoard groups
 * tags by their prefix before '/': "train/loss"). Any double (NaN and
 * infinities included). LOOM_ERR_IO if a write fails. */
LOOM_API loom_status loom_metrics_scalar(loom_metrics *m, const char *tag, int64_t step, double value);
LOOM_API loom_status loom_metrics_flush(loom_metrics *m);
/* Flush, close and free (NULL is a no-op); returns the first write error.
 * A write error is sticky: every later call returns it (the files may end in
 * a partial record, which TensorBoard's reader drops by its CRC); close the
 * writer and open a new one. */
LOOM_API loom_status loom_metrics_close(loom_metrics *m);
/* The event file's path (valid until close; NULL without tensorboard). */
LOOM_API const char *loom_metrics_event_path(const loom_metrics *m);

LOOM_EXTERN_C_END
#endif
