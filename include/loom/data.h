/* data.h — datasets and the asynchronous prefetching data loader.
 *
 * A dataset is a length plus "read sample i into this buffer". Built-ins read
 * IDX files (MNIST, Fashion-MNIST; raw or gzip), CIFAR-10 binary batches,
 * folders of JPEG/PNG images (decoded per read, in the loader's workers),
 * in-memory arrays, and user callbacks (the path language bindings use).
 * Every IDX/CIFAR file is validated in full when it is opened: a malformed file gives
 * LOOM_ERR_FORMAT with a message naming the file and the problem, a missing
 * or unreadable one LOOM_ERR_IO; nothing crashes and no allocation is made
 * from a size the file merely claims before the real data confirms it.
 *
 * The loader turns a dataset into batches: a sampler (sequential or shuffled
 * per epoch from a seed, sharded by rank for data parallelism), transforms
 * (random crop with padding, horizontal flip, scale + per-channel normalize,
 * seeded per sample), worker threads that assemble whole batches into host
 * buffers (pinned when the target is a GPU), a ring of `prefetch` batches in
 * flight and, on a GPU, host-to-device copies on a copy stream handed to the
 * compute stream by an event. The sequence of batches depends only on the
 * dataset, the options and the epoch — never on the number of workers, the
 * prefetch depth or thread scheduling.
 *
 * Ownership: datasets are reference counted (a loader keeps its dataset
 * alive; loom_dataset_release drops the caller's reference). Batch tensors follow
 * the tensor rule: every tensor is reference counted; inside an open scope,
 * new tensors belong to the scope and die with it unless kept; outside a
 * scope, the caller owns what it gets. A batch's buffer goes back to the
 * loader when its last tensor dies — it may outlive the loader.
 *
 * Threads: dataset calls may be made from several threads at once (the
 * loader's workers do). A loader is driven by one consumer thread
 * (loom_loader_next / next_into / start_epoch / free); loom_loader_stats and
 * loom_loader_num_batches may be called from any thread, and batch tensors may
 * be released from any thread. */
#ifndef LOOM_DATA_H
#define LOOM_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "export.h"
#include "status.h"
#include "free.h"
#include "dtype.h"
#include "device.h"
#include "tensor.h"

LOOM_EXTERN_C_BEGIN

typedef struct loom_dataset loom_dataset;
typedef struct loom_loader loom_loader;

/* ---- IDX files ----------------------------------------------------------- */
/* Read a whole IDX file (raw, or gzip when it starts with 1f 8b) into memory.
 * Element types: u8 (0x08), i32 (0x0C, converted to host order), f32 (0x0D).
 * On success *data (free it with loom_free), *dtype, *ndim (1..4) and
 * shape[0..ndim) are set. LOOM_ERR_IO: cannot open/read; LOOM_ERR_FORMAT: bad
 * magic, absurd dims, truncated data, trailing bytes, bad gzip stream;
 * LOOM_ERR_UNSUPPORTED: i8/i16/f64 element types. Thread-safe. */
LOOM_API loom_status loom_idx_load(const char *path, void **data, loom_dtype *dtype, int *ndim,
                                   int64_t shape[LOOM_MAX_DIMS]);

/* ---- datasets ------------------------------------------------------------ */
/* Images + labels from two IDX files (e.g. train-images-idx3-ubyte.gz and
 * train-labels-idx1-ubyte.gz). Sample x: the image dims (28x28 for MNIST), y:
 * a scalar label. labels_path may be NULL (then samples have no y). The
 * counts must agree. Everything is loaded into memory. NULL + error on
 * failure. */
LOOM_API loom_dataset *loom_dataset_idx_open(const char *images_path, const char *labels_path);

/* CIFAR-10 binary batches (data_batch_1.bin ... test_batch.bin; raw or gzip),
 * concatenated in the order given. Each record is 1 label byte (0..9) and
 * 3x32x32 u8 pixels (CHW). Sample x: u8 [3,32,32]; y: u8 scalar. */
LOOM_API loom_dataset *loom_dataset_cifar10_open(const char *const *files, int n);

/* n samples of x (row-major, each of x_sample_shape[0..x_ndim), x_dtype) and
 * scalar labels y (y_dtype; y may be NULL for no labels). copy: take a private
 * copy (the caller may free its arrays at once); else borrow them (they must
 * outlive the dataset and every loader using it). */
LOOM_API loom_dataset *loom_dataset_memory(const void *x, loom_dtype x_dtype, int x_ndim,
                                           const int64_t *x_sample_shape, const void *y,
                                           loom_dtype y_dtype, int64_t n, bool copy);

/* A dataset made of user functions (what language bindings use). */
typedef struct loom_dataset_callbacks {
  size_t struct_size;           /* sizeof(loom_dataset_callbacks), set by the caller */
  int64_t length;               /* number of samples */
  loom_dtype x_dtype;
  int x_ndim;                   /* 0..LOOM_MAX_DIMS-1 */
  int64_t x_shape[LOOM_MAX_DIMS];
  bool has_y;                   /* false: samples have no y */
  loom_dtype y_dtype;           /* y is one scalar per sample */
  /* Read sample i (0 <= i < length) into x (and y when has_y) as densely
   * packed row-major elements. Return LOOM_OK, or a status (optionally after
   * loom_dataset_fail() to attach a message). Called from loader workers:
   * concurrently unless thread_safe is false. */
  loom_status (*read)(void *user, int64_t i, void *x, void *y);
  /* Called once when the dataset dies (may be NULL). */
  void (*destroy)(void *user);
  void *user;
  bool thread_safe;             /* false: loom serializes calls to read */
} loom_dataset_callbacks;

/* cb is copied. NULL + error on invalid callbacks. If creation fails,
 * destroy is NOT called (the caller still owns user). */
LOOM_API loom_dataset *loom_dataset_callback(const loom_dataset_callbacks *cb);

/* For read callbacks: attach a message to a failure; returns code. */
LOOM_API loom_status loom_dataset_fail(loom_status code, const char *message);

LOOM_API int64_t loom_dataset_length(const loom_dataset *ds);
/* Per-sample x shape/dtype; ndim 0 is a scalar. shape needs LOOM_MAX_DIMS. */
LOOM_API loom_status loom_dataset_x_info(const loom_dataset *ds, loom_dtype *dtype, int *ndim,
                                         int64_t *shape);
/* y: *has_y false when the dataset has no labels; y is always a scalar. */
LOOM_API loom_status loom_dataset_y_info(const loom_dataset *ds, bool *has_y, loom_dtype *dtype);
/* Read sample i into x_buf (x bytes) and y_buf (y bytes); either may be NULL
 * to skip it. LOOM_ERR_INVALID_ARG for i out of range. */
LOOM_API loom_status loom_dataset_read(loom_dataset *ds, int64_t i, void *x_buf, void *y_buf);
/* Drop the caller's reference (loaders keep their own). NULL is a no-op. */
LOOM_API void loom_dataset_release(loom_dataset *ds);

/* ---- image folders (JPEG / PNG) ------------------------------------------- */
/* torchvision's ImageFolder: ROOT/<class>/.../<image>.{jpg,jpeg,png} (any
 * case), classes from the sub-directory names in sorted order, files sorted
 * as torchvision lists them (directories walked in sorted order, links
 * followed). Or a file list instead of a scan. Images are decoded when
 * samples are read (in the loader's workers; nothing is preloaded) and
 * transformed as torchvision's ImageNet recipe: sample x is u8 [3, S, S]
 * (RGB planes; the loader's channels_last option makes batches NHWC, and its
 * scale/mean/std/x_dtype fuse normalization and the cast into its copy),
 * y is i32, the class.
 *  - LOOM_IMAGE_TRAIN: RandomResizedCrop(S, scale, ratio) + horizontal flip
 *    (p = 0.5), drawn from (loader seed, epoch, sample index) — the same
 *    whatever the worker count. A read outside a loader uses seed 0, epoch 0.
 *  - LOOM_IMAGE_EVAL: Resize(resize_size) + CenterCrop(S).
 * Resampling is Pillow's antialiased bilinear; JPEGs are decoded by
 * libjpeg-turbo at 1/2, 1/4 or 1/8 scale in the DCT when the crop still has
 * S pixels per side there (dct_scaling), and only the rows and columns the
 * crop needs. Greyscale and CMYK JPEGs, palette / grey / 16-bit / alpha PNGs
 * become RGB (as PIL's convert("RGB")); EXIF orientation is not applied (as
 * torchvision's loader). A corrupt, truncated or unreadable file is an
 * error naming it (LOOM_ERR_FORMAT / LOOM_ERR_IO) at the batch that reads
 * it — or, with skip_bad, it is counted (loom_image_folder_bad_files; the
 * loader logs the count at the end of each epoch that found new ones) and
 * the sample is replaced by the next good one. A build without libjpeg /
 * libpng returns LOOM_ERR_UNSUPPORTED saying what to install. */
typedef enum loom_image_mode {
  LOOM_IMAGE_TRAIN = 0, /* RandomResizedCrop + flip */
  LOOM_IMAGE_EVAL = 1,  /* Resize + CenterCrop */
} loom_image_mode;

typedef struct loom_image_folder_options {
  size_t struct_size;       /* sizeof(loom_image_folder_options) */
  loom_image_mode mode;     /* LOOM_IMAGE_TRAIN */
  int image_size;           /* S, the square crop's side (224) */
  int resize_size;          /* eval: the shorter side before the crop; >= image_size (256) */
  float scale_min, scale_max; /* train: crop area fraction (0.08, 1) */
  float ratio_min, ratio_max; /* train: crop aspect ratio w/h (3/4, 4/3) */
  bool hflip;               /* train: random horizontal flip (true) */
  bool dct_scaling;         /* decode JPEGs at 1/2..1/8 when the crop allows (true) */
  bool skip_bad;            /* count and replace bad images instead of failing (false) */
  const char *file_list;    /* NULL: scan root. Else a text file of "path label"
                               lines (path relative to root unless absolute; label
                               a class number; blank lines and # comments skipped) */
  int num_classes;          /* with file_list: 0 = largest label + 1 */
} loom_image_folder_options;

/* Sets struct_size and every default (noted beside each field). */
LOOM_API void loom_image_folder_options_init(loom_image_folder_options *o);
/* Open root (o NULL: the defaults). Lists the files only; images are read
 * by the loader. NULL + error: no class folder, a class with no image
 * (naming it), an unreadable directory or list, a bad list line (naming the
 * line), bad options, or no JPEG/PNG support in this build. */
LOOM_API loom_dataset *loom_dataset_image_folder_open(const char *root, const loom_image_folder_options *o);
/* Whether this build decodes "jpeg" / "png" (other names: false). */
LOOM_API bool loom_image_folder_supports(const char *format);
/* Number of classes; the name of class k (its folder; NULL for file lists or
 * k out of range); the file of sample i (NULL if out of range). The strings
 * live as long as the dataset. */
LOOM_API int64_t loom_image_folder_num_classes(const loom_dataset *ds);
LOOM_API const char *loom_image_folder_class_name(const loom_dataset *ds, int64_t k);
LOOM_API const char *loom_image_folder_path(const loom_dataset *ds, int64_t i);
/* Distinct bad files met so far (skip_bad), and *first the message of the
 * first one (or NULL; lives as long as the dataset). Either may be NULL. */
LOOM_API loom_status loom_image_folder_bad_files(loom_dataset *ds, int64_t *count, const char **first);

/* ---- loader -------------------------------------------------------------- */
typedef struct loom_loader_options {
  size_t struct_size;      /* sizeof(loom_loader_options) */
  int64_t batch_size;      /* samples per batch (64) */
  bool shuffle;            /* permute samples every epoch (false) */
  uint64_t seed;           /* seeds the shuffle and the transforms (0) */
  bool drop_last;          /* drop the short last batch, and the tail that
                              does not divide evenly among ranks (false) */
  int workers;             /* worker threads; 0 = in the consumer thread (2) */
  int prefetch;            /* batches in flight ahead of the consumer (2) */
  int rank, world_size;    /* shard: this rank of world_size (0, 1) */
  loom_device device;      /* where batches are delivered (cpu) */
  loom_dtype x_dtype;      /* f32: converted (scale, normalize); or u8 from
                              u8 data: shipped as is (transfers 4x fewer
                              bytes; convert on the device) (f32) */
  loom_dtype y_dtype;      /* labels converted to this (i64) */
  /* Transforms, applied per sample in this order: random crop (pad by
   * crop_padding with zeros, then take a random HxW window), random horizontal
   * flip (p = 0.5), then x*scale, then (x - mean[c]) / std[c]. Samples of
   * shape [H,W] are one channel; [C,H,W] are CHW. Randomness comes from
   * (seed, epoch, sample index), so it does not depend on threads. */
  int crop_padding;        /* > 0: random crop with this padding (0) */
  bool hflip;              /* random horizontal flip (false) */
  float scale;             /* e.g. 1/255 for u8 images (1) */
  const float *mean;       /* norm_channels values (copied), or NULL */
  const float *std;        /* norm_channels values, all > 0 */
  int norm_channels;       /* 0: no normalize; 1: same for every channel */
  /* Channels-last batches for [C,H,W] samples: each sample is written HWC
   * by the transform pass itself (no separate transpose), and x is
   * [n, C, H, W] with NHWC strides (loom_tensor_is_channels_last), what a
   * channels-last model takes as it is. Needs 3-D samples (false). */
  bool channels_last;
} loom_loader_options;

/* Sets struct_size and every default (noted beside each field). */
LOOM_API void loom_loader_options_init(loom_loader_options *o);

/* A loader over ds (retained). Starts epoch 0 and its workers at once.
 * o NULL: the defaults. NULL + error for bad options (message names the
 * option). */
LOOM_API loom_loader *loom_loader_new(loom_dataset *ds, const loom_loader_options *o);

/* The next batch of the current epoch: *x is [n, sample shape...] of
 * x_dtype, *y is [n] of y_dtype (NULL when the dataset has no labels), on the
 * loader's device, n == batch_size except for a short last batch. On a GPU
 * the batch is ready for work queued on the device's current stream (no host
 * sync). End of epoch: returns LOOM_OK with *x == NULL and *y == NULL; the
 * next call then starts the following epoch (epoch + 1; workers already
 * prefetch it). An error (a dataset read failed, a bad record, OOM) is
 * returned at the batch it hit, after every earlier batch was delivered; the
 * loader then returns it on every call until loom_loader_start_epoch, and can
 * always be freed. */
LOOM_API loom_status loom_loader_next(loom_loader *l, loom_tensor **x, loom_tensor **y);

/* The next batch copied INTO tensors the caller owns — e.g. the static input
 * buffers of a captured CUDA graph (graph.h) — instead of fresh tensors.
 * x receives the samples; y the labels when y is non-NULL and the dataset has
 * labels (y NULL: labels are skipped; ignored for a dataset without labels).
 * *n receives the number of samples delivered: batch_size, fewer for a short
 * last batch (drop_last false: rows n.. of x and y are left untouched), and 0
 * at the end of the epoch (as loom_loader_next's NULL; the next call starts
 * the following epoch). It is the same stream as loom_loader_next — same
 * batches, same order, same position (loom_loader_position, checkpoints) and
 * stats — so the two calls may be interleaved freely.
 * x must be on the loader's device, of its x_dtype, with shape
 * [batch_size, sample shape...] and contiguous — or, when the loader delivers
 * channels-last batches, channels-last (the strides a batch would have). y:
 * [batch_size] of y_dtype, contiguous, on the same device. A mismatch (or a
 * NULL loader, x or n) is LOOM_ERR_INVALID_ARG with a message naming the
 * argument and what was expected against what was given, and takes no batch.
 * On a GPU the copy is device to device on the device's current stream:
 * ordered after work queued there before the call (a graph replay still
 * reading x) and before work queued after it; the host never waits for the
 * device, so it may run between graph replays. On the CPU it is a memcpy.
 * A loader in error returns that error, as loom_loader_next does. */
LOOM_API loom_status loom_loader_next_into(loom_loader *l, loom_tensor *x, loom_tensor *y, int64_t *n);

/* Restart at the beginning of `epoch` (discarding batches prefetched for the
 * current one; the shuffle and transforms of an epoch depend only on the seed
 * and the epoch number). */
LOOM_API loom_status loom_loader_start_epoch(loom_loader *l, int64_t epoch);
/* Current epoch number. */
LOOM_API int64_t loom_loader_epoch(const loom_loader *l);
/* Where the consumer stands, for checkpoints: *epoch, and *batch = batches
 * of that epoch delivered so far (0..num_batches; num_batches: the next call
 * reports the end of the epoch). Either pointer may be NULL. */
LOOM_API loom_status loom_loader_position(const loom_loader *l, int64_t *epoch, int64_t *batch);
/* Continue at (epoch, batch) as loom_loader_position reported it: the
 * following batches are exactly those a loader that had delivered `batch`
 * batches of `epoch` would deliver (batches prefetched for the old position
 * are discarded). 0 <= batch <= loom_loader_num_batches. */
LOOM_API loom_status loom_loader_seek(loom_loader *l, int64_t epoch, int64_t batch);
/* Batches per epoch on this rank; samples per epoch on this rank. */
LOOM_API int64_t loom_loader_num_batches(const loom_loader *l);
LOOM_API int64_t loom_loader_num_samples(const loom_loader *l);

typedef struct loom_loader_stats {
  size_t struct_size;        /* sizeof(loom_loader_stats), set by the caller */
  double wait_seconds;       /* consumer time blocked in loom_loader_next */
  double elapsed_seconds;    /* wall time since the loader (or stats) reset */
  double wait_fraction;      /* wait_seconds / elapsed_seconds: the share of
                                step time spent waiting for data */
  int64_t batches;           /* batches delivered to the consumer */
  int64_t samples;           /* samples delivered to the consumer */
  int64_t batches_produced;  /* batches assembled by workers */
  double samples_per_second; /* samples / elapsed_seconds */
} loom_loader_stats;

/* Fill *out (up to out->struct_size bytes). Any thread. */
LOOM_API loom_status loom_loader_stats_get(loom_loader *l, loom_loader_stats *out);
/* Zero the counters and restart the clock (e.g. after warm-up). */
LOOM_API void loom_loader_stats_reset(loom_loader *l);

/* Stop and join the workers, free every buffer not held by a live batch
 * tensor (those are freed when their tensors die) and release the dataset.
 * Safe mid-epoch and after errors. NULL is a no-op. */
LOOM_API void loom_loader_free(loom_loader *l);

LOOM_EXTERN_C_END
#endif
