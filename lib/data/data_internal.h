/* data_internal.h (internal) — the dataset object shared by the dataset
 * implementations and the loader, plus the raw-buffer loader layer that
 * loom_loader_next wraps into tensors (and that tests use directly). */
#ifndef LOOM_DATA_INTERNAL_H
#define LOOM_DATA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "loom/data.h"
#include "core/error.h"

/* Caps that keep a malformed header from asking for absurd memory. Real
 * datasets are far below them. */
#define LOOM_DATA_MAX_SAMPLE_ELEMS ((int64_t)1 << 26)   /* 64 Mi elements per sample */
#define LOOM_DATA_MAX_FILE_BYTES ((int64_t)1 << 34)     /* 16 GiB of payload */

struct loom_dataset {
  atomic_int refcount;
  int64_t length;
  loom_dtype x_dtype;
  int x_ndim;
  int64_t x_shape[LOOM_MAX_DIMS];
  size_t x_bytes;             /* bytes of one x sample */
  bool has_y;
  loom_dtype y_dtype;
  size_t y_bytes;             /* bytes of one y (0 without labels) */
  /* Implementation. read must be safe to call concurrently unless serialize. */
  loom_status (*read)(loom_dataset *ds, int64_t i, void *x, void *y);
  void (*destroy)(loom_dataset *ds);
  /* Datasets whose samples are random (the image folder's crops): read with
   * the loader's per-(seed, epoch, index) key. NULL: read is used. */
  loom_status (*read_keyed)(loom_dataset *ds, int64_t i, uint64_t key, void *x, void *y);
  /* Called by the loader when an epoch's last batch was delivered (may be NULL). */
  void (*epoch_end)(loom_dataset *ds, int64_t epoch);
  void *impl;
  bool serialize;
  pthread_mutex_t lock;       /* taken around read when serialize */
  char name[160];             /* for messages: "idx 'train-images...'" */
};

/* Element size without depending on lib/core's dtype table (0 if invalid). */
/* A memory dataset that takes ownership of x and y (freed with free()). */
loom_dataset *loom_dataset_memory_owned(void *x, loom_dtype x_dtype, int x_ndim, const int64_t *x_shape,
                                        void *y, loom_dtype y_dtype, int64_t n, const char *name);
loom_dataset *loom_dataset_retain(loom_dataset *ds);
/* A dataset header with the common checks; the caller sets impl, read
 * (and read_keyed, epoch_end) and destroy. NULL + error. */
loom_dataset *loom_dataset_internal_new(const char *who, loom_dtype x_dtype, int x_ndim, const int64_t *x_shape,
                                        bool has_y, loom_dtype y_dtype, int64_t n);
/* loom_dataset_read with the randomness key of a loader sample; datasets
 * without read_keyed ignore it. loom_dataset_read uses the key of seed 0,
 * epoch 0. */
loom_status loom_dataset_read_keyed(loom_dataset *ds, int64_t i, uint64_t key, void *x_buf, void *y_buf);
/* The key of sample idx in epoch `epoch` of a loader seeded `seed`. */
uint64_t loom_data_sample_key(uint64_t seed, int64_t epoch, int64_t idx);

/* Read a whole file (gzip or raw, detected by its magic bytes) into a fresh
 * malloc'd buffer, refusing more than max_bytes. Growth follows the data
 * actually decompressed, so a small file never triggers a big allocation. */
loom_status loom_data_read_file(const char *path, int64_t max_bytes, unsigned char **out, int64_t *len);

/* ---- raw batch layer ------------------------------------------------------ */
typedef struct loom_batch_buf loom_batch_buf;

typedef struct loom_raw_batch {
  loom_batch_buf *buf;  /* handle: give back with loom_loader_release_raw */
  void *x;              /* n samples of x (device memory on a GPU) */
  void *y;              /* n labels, or NULL */
  int64_t n;            /* samples in this batch; 0 = end of epoch */
  int64_t index;        /* batch number within the epoch */
} loom_raw_batch;

/* Like loom_loader_next but returns the buffers. Each delivered batch holds
 * `holders` references (1 for raw use, 2 when wrapped as x and y tensors). */
loom_status loom_loader_next_raw(loom_loader *l, loom_raw_batch *out, int holders);
/* Drop one reference of a delivered batch (any thread). When the last goes,
 * the buffer returns to the loader (after the compute stream is done with it
 * on a GPU), or is freed if the loader is gone. */
void loom_loader_release_raw(loom_batch_buf *b);
/* A delivered batch could not be handed over (out of memory wrapping it):
 * the loader keeps the error (the current one) like a worker's, so every
 * call returns it until loom_loader_start_epoch, and returns it. */
loom_status loom_loader_fail(loom_loader *l);
/* The loader's options (checkpoints record batch_size, seed and shuffle). */
const loom_loader_options *loom_loader_get_options(const loom_loader *l);
/* Shape/dtype/device of delivered batches (for wrapping). */
/* Whether x batches are channels-last (loom_loader_options.channels_last). */
bool loom_loader_channels_last(const loom_loader *l);
void loom_loader_out_info(const loom_loader *l, loom_dtype *x_dt, int *x_ndim, int64_t *x_shape,
                          loom_dtype *y_dt, bool *has_y, loom_device *dev);

/* ---- sampler and transforms (pure functions; exposed for tests) ---------- */
/* splitmix64-based mixing: deterministic, thread-free randomness. */
uint64_t loom_data_mix(uint64_t a, uint64_t b);
/* Fill order[0..count) with this rank's sample indices for `epoch`; returns
 * count. n: dataset length. order must hold ceil(n/world)+1 entries. */
int64_t loom_data_shard_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch, int rank, int world,
                              bool drop_last, int64_t *order, int64_t *perm_scratch);

/* Per-sample transform: crop (pad) + hflip + scale + normalize + dtype. */
typedef struct loom_transform {
  loom_dtype src, out;
  int64_t C, H, W;       /* channels and the plane the spatial ops act on */
  int64_t numel;
  int pad;               /* random crop padding (0: none) */
  bool flip;
  float *a, *b;          /* per channel: out = v * a[c] + b[c] (scale+normalize) */
  bool identity;         /* plain copy: same dtype, no transform */
  bool hwc;              /* write samples HWC (channels-last batches) */
  size_t out_bytes;      /* bytes of one transformed sample */
} loom_transform;

loom_status loom_transform_init(loom_transform *t, const loom_dataset *ds, const loom_loader_options *o);
void loom_transform_destroy(loom_transform *t);
/* dst <- transform(src); key seeds crop and flip (from seed, epoch, index). */
void loom_transform_apply(const loom_transform *t, const void *src, void *dst, uint64_t key);
/* Whether labels of dtype src can be delivered as out (LOOM_ERR_DTYPE if not). */
loom_status loom_label_check(loom_dtype src, loom_dtype out);
void loom_label_convert(loom_dtype src, const void *s, loom_dtype out, void *d);

#endif
