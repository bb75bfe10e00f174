/* tfrecord.h (internal) — what a TensorBoard event file is made of: CRC-32C
 * (Castagnoli) and its TFRecord mask, the record framing, and a minimal
 * protobuf encoder for the three messages loom writes (tensorflow.Event,
 * Summary, Summary.Value).
 *
 * Why not protobuf-c: generating it needs TensorFlow's event.proto and
 * summary.proto with their imports (tensor, types, resource handles...) and
 * adds libprotobuf-c to every program linking loom, for seven fields whose
 * wire format (varints, fixed64/fixed32, length-delimited) takes ~50 lines.
 * The encoding is checked against TensorBoard's own reader in CI
 * (scripts/check-observability.sh). */
#ifndef LOOM_IO_TFRECORD_H
#define LOOM_IO_TFRECORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

uint32_t loom_crc32c(const void *data, size_t n);
/* TFRecord's masked CRC: rotate right by 15, add 0xa282ead8. */
uint32_t loom_crc32c_masked(const void *data, size_t n);

/* Write one record (length, masked crc of length, data, masked crc of data).
 * 0 on success, -1 on a write error. */
int loom_tfrecord_write(FILE *f, const void *data, size_t n);

/* Encoders fill buf (cap bytes) and return the length, or 0 if it does not fit. */
size_t loom_event_file_version(uint8_t *buf, size_t cap, double wall_time);
size_t loom_event_scalar(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *tag, float value);

#endif
