/* io.h — safetensors files, training checkpoints and DLPack exchange.
 *
 * safetensors is the tensor file format of PyTorch, JAX and the Hugging Face
 * ecosystem: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...,
 * "__metadata__": {"key": "value"}}), then the tensors' bytes.
 *
 *  - Writing is atomic: a temporary file in the same directory, fsync,
 *    rename over the target, fsync of the directory. A crash or kill -9 at
 *    any moment leaves either the previous file or the new one, never a mix.
 *    Temporary files of a process that died mid-write (".NAME.tmp-PID-N")
 *    stay behind; they are never mistaken for the file itself.
 *  - Tensors are written largest element size first (then in the order
 *    given), and the header is padded with spaces so that the data starts at
 *    a multiple of 64 bytes: every tensor is aligned to its element size.
 *  - Opening validates the whole header before anything is mapped or
 *    allocated: the header length against the file size, the JSON (via
 *    jansson), each entry's dtype, shape and data_offsets, that byte counts
 *    agree with dtype and shape, that the tensors are contiguous,
 *    non-overlapping and cover the data section exactly (no gap, no trailing
 *    bytes), and that no name appears twice. Each failure is
 *    LOOM_ERR_FORMAT with a message naming the file and the rule.
 *  - On the CPU a loaded tensor is a zero-copy view of a private
 *    (copy-on-write) memory map of the file: writing to it never changes the
 *    file. The map lives as long as any tensor from it. (Do not truncate a
 *    file while tensors from it live: the kernel then raises SIGBUS on
 *    access, as for every memory map. loom's own writers replace files by
 *    rename, which is safe.) To a GPU, the bytes are read straight into a
 *    pinned staging buffer and copied on the device's current stream.
 *
 * dtypes: loom reads and writes F32, F16, BF16, I32, I64 and U8; BOOL is read
 * as U8. Files with other dtypes (F64, I8, ...) open and validate; getting
 * such a tensor is LOOM_ERR_UNSUPPORTED.
 *
 * Builds without jansson (Debian: libjansson-dev) return LOOM_ERR_UNSUPPORTED
 * from every safetensors and checkpoint call.
 *
 * Threads: loom_safetensors_save and the checkpoint calls may run on several
 * threads for different files. An open file handle may be read (info, get)
 * from several threads at once; close it once. Tensors follow tensor.h. The
 * DLPack calls are thread-safe; a DLPack deleter may be called from any
 * thread. */
#ifndef LOOM_IO_H
#define LOOM_IO_H

#include <stddef.h>
#include <stdint.h>
#include "export.h"
#include "status.h"
#include "tensor.h"
#include "nn.h"
#include "optim.h"
#include "amp.h"
#include "data.h"

LOOM_EXTERN_C_BEGIN

/* ---- safetensors ---------------------------------------------------------- */

typedef struct loom_safetensors loom_safetensors;

/* Write n tensors (any device and layout; stored row-major) under names
 * (unique, valid UTF-8) and n_meta metadata strings (keys[i] -> values[i];
 * may be 0 / NULL) to path, atomically. */
LOOM_API loom_status loom_safetensors_save(const char *path, int n, const char *const *names,
                                           loom_tensor *const *tensors, int n_meta, const char *const *keys,
                                           const char *const *values);

/* Files of 8 MiB and more (checkpoints) are written with O_DIRECT where the
 * file system allows it: straight to the device, through no page cache
 * (faster and steadier to save; but the file is not cached right after, so
 * a load at once reads the disk). false: buffered writes. Default: true,
 * unless the environment has LOOM_CHECKPOINT_DIRECT=0. Any thread. */
LOOM_API void loom_set_checkpoint_direct(bool on);

/* Open and validate a file. NULL + LOOM_ERR_IO (cannot open/read) or
 * LOOM_ERR_FORMAT (malformed) with a message. */
LOOM_API loom_safetensors *loom_safetensors_open(const char *path);
/* Close the handle; tensors already loaded stay valid. NULL is a no-op. */
LOOM_API void loom_safetensors_close(loom_safetensors *f);

/* Tensors in file order (by offset). Names are borrowed from the handle. */
LOOM_API int loom_safetensors_num_tensors(const loom_safetensors *f);
LOOM_API const char *loom_safetensors_name(const loom_safetensors *f, int i);
/* Index of name, or -1. */
LOOM_API int loom_safetensors_find(const loom_safetensors *f, const char *name);
/* The file's dtype string of tensor i ("F32", "BF16", "F64", ...). */
LOOM_API const char *loom_safetensors_dtype_name(const loom_safetensors *f, int i);
/* dtype and shape of tensor i (shape needs LOOM_MAX_DIMS entries; any
 * pointer may be NULL). LOOM_ERR_UNSUPPORTED when loom has no such dtype or
 * the tensor has more than LOOM_MAX_DIMS dimensions. */
LOOM_API loom_status loom_safetensors_info(const loom_safetensors *f, int i, loom_dtype *dtype, int *ndim,
                                           int64_t *shape);
/* The tensor called name on dev (CPU: zero-copy view of the map when its
 * bytes are aligned for its dtype, else a copy). Follows tensor.h's
 * ownership rule. NULL + error when absent or unsupported. */
LOOM_API loom_tensor *loom_safetensors_get(loom_safetensors *f, const char *name, loom_device dev);
/* The __metadata__ entries (borrowed strings). */
LOOM_API int loom_safetensors_num_metadata(const loom_safetensors *f);
LOOM_API const char *loom_safetensors_metadata_key(const loom_safetensors *f, int i);
/* Value for key, or NULL when absent. */
LOOM_API const char *loom_safetensors_metadata(const loom_safetensors *f, const char *key);

/* ---- training checkpoints ----------------------------------------------------- */

/* Everything that evolves during training, as one safetensors file whose
 * names other tools can read:
 *   model.<param>               f32 master parameters ("model.0.weight"), and
 *   model.<buffer>              module buffers ("model.bn1.running_mean");
 *   optim.<param>.exp_avg, optim.<param>.exp_avg_sq (AdamW),
 *   optim.<param>.momentum_buffer (SGD with momentum),
 *   optim.<param>.step          (i64 scalar: updates applied to it);
 * and in __metadata__ (decimal text; doubles with 17 significant digits):
 *   loom.checkpoint = "1", step, rng.seed, rng.offset (the Philox generator
 *   every device draws from), optim.type and the optimizer's
 *   hyper-parameters and counters (optim.lr, optim.beta1, ...), its
 *   parameter groups (optim.param_groups = count, and per group g
 *   optim.param_groups.<g>.params / .lr / .weight_decay; restore needs the
 *   same groups),
 *   scaler.* (loom_scaler_state), loader.epoch and loader.batch (position)
 *   with loader.batch_size / batches_per_epoch / seed / shuffle (checked on
 *   restore), and schedule.* (the LR schedule; its position is `step`;
 *   recorded, not restored: restoring under a different schedule logs a
 *   warning that names the fields that changed).
 * Optimizer state is named after the model's parameter it belongs to, so
 * every optimizer parameter must be a parameter of the model. */
typedef struct loom_train_state {
  size_t struct_size;                /* sizeof(loom_train_state), set by the caller */
  loom_module *model;                /* required */
  loom_optimizer *optimizer;         /* or NULL */
  loom_grad_scaler *scaler;          /* or NULL */
  loom_loader *loader;               /* or NULL: epoch and position */
  const loom_lr_schedule *schedule;  /* or NULL: recorded, never restored */
  int64_t step;                      /* saved; set by restore */
} loom_train_state;

/* Save st to path atomically (see above). */
LOOM_API loom_status loom_checkpoint_save(const char *path, const loom_train_state *st);
/* Restore every object given in st (NULL members are skipped; entries of
 * the file that st does not ask for are ignored) and the global RNG, and set
 * st->step. Everything is checked first — names, shapes, dtypes, optimizer
 * type, loader configuration — so a mismatching checkpoint changes nothing
 * and says what differs; and every tensor is read before any is written, so
 * an unreadable file or running out of memory while reading changes nothing
 * either (tests/test_fault_sweep.c fails each allocation and file call in
 * turn). Only a failure after that (a device copy, refreshing f16/bf16 weight
 * copies) can leave the objects partly restored; restoring again fixes them. Under a mixed-precision policy the low-precision
 * weight copies are refreshed. Resuming this way continues training
 * bit-identically on the CPU (same thread count). */
LOOM_API loom_status loom_checkpoint_restore(const char *path, loom_train_state *st);

/* ---- DLPack ---------------------------------------------------------------------- */

/* The DLPack structs (dlpack/dlpack.h). DLManagedTensorVersioned is DLPack
 * 1.x's; DLManagedTensor the legacy one that NumPy < 2 and PyTorch < 2.4
 * exchange. loom's headers only need their names. */
struct DLManagedTensor;
struct DLManagedTensorVersioned;

/* Export t without copying (any device, dtype and strides; data points at
 * the first element, byte_offset 0). The managed tensor keeps t's storage
 * alive until its deleter is called, exactly once, by the consumer. NULL +
 * error on failure. */
LOOM_API struct DLManagedTensor *loom_to_dlpack(loom_tensor *t);
LOOM_API struct DLManagedTensorVersioned *loom_to_dlpack_versioned(loom_tensor *t);

/* Import without copying: a tensor viewing m's memory (CPU, CUDA host
 * memory as CPU, or CUDA), honouring strides (non-negative) and
 * byte_offset. loom takes ownership of m in every case: m's deleter is
 * called exactly once — when the last loom tensor viewing the memory dies,
 * or before returning NULL on failure (unsupported dtype, device,
 * misalignment, a major version other than 1, NULL data for a non-empty
 * tensor, more elements or a wider extent than can be addressed, and, for
 * host memory, strides/shape whose first or last byte is not in mapped
 * memory: a producer's buffer they overrun is refused, not read; an overrun
 * that lands in other mapped memory cannot be seen). A read-only versioned
 * tensor is copied (loom tensors are writable) and released at once. */
LOOM_API loom_tensor *loom_from_dlpack(struct DLManagedTensor *m);
LOOM_API loom_tensor *loom_from_dlpack_versioned(struct DLManagedTensorVersioned *m);

/* t's DLPack device: (*type, *id) = (kDLCPU 1, 0) or (kDLCUDA 2, CUDA
 * ordinal). */
LOOM_API loom_status loom_dlpack_device(const loom_tensor *t, int32_t *type, int32_t *id);
/* For the Python protocol's __dlpack__(stream=...): make work submitted
 * later to `stream` (a cudaStream_t; 1 = the legacy default stream, 2 = the
 * per-thread default stream) wait for what loom queued on dev so far. -1 and
 * CPU devices: nothing to do. */
LOOM_API loom_status loom_dlpack_sync_stream(loom_device dev, intptr_t stream);

/* For CPython bindings: a PyCapsule destructor for capsules holding
 * loom_to_dlpack[_versioned] results ("dltensor" / "dltensor_versioned").
 * It calls the managed tensor's deleter when no consumer took the capsule
 * (a consumer renames it "used_..."), keeping any pending Python exception
 * intact — a destructor written in Python cannot, since it runs while a
 * failing consumer's exception is set. libloom does not link Python: the
 * binding hands over the four C-API functions once (ctypes can take their
 * addresses from ctypes.pythonapi). Call with the GIL held, as CPython does. */
typedef struct loom_pycapsule_api {
  size_t struct_size;                                     /* sizeof(loom_pycapsule_api) */
  int (*is_valid)(void *capsule, const char *name);       /* PyCapsule_IsValid */
  void *(*get_pointer)(void *capsule, const char *name);  /* PyCapsule_GetPointer */
  void (*err_fetch)(void **type, void **value, void **tb); /* PyErr_Fetch */
  void (*err_restore)(void *type, void *value, void *tb);  /* PyErr_Restore */
} loom_pycapsule_api;
LOOM_API loom_status loom_dlpack_set_pycapsule_api(const loom_pycapsule_api *api);
LOOM_API void loom_dlpack_pycapsule_destructor(void *capsule);

LOOM_EXTERN_C_END
#endif
