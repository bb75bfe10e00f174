/* dlpack_abi.h (internal) — the DLPack structs loom exchanges.
 *
 * With Debian's libdlpack-dev (LOOM_HAVE_DLPACK_H) they come from
 * <dlpack/dlpack.h>. Without it, they are declared here, from the DLPack
 * specification: the layout is a fixed C ABI that every framework shares
 * (that is the point of DLPack), and the checks at the bottom pin it.
 * DLManagedTensorVersioned appeared in DLPack 1.0; Debian 12 ships 0.6, so
 * whenever the header in use predates it, it is declared here too.
 * Enum values are used through loom's own constants (LOOM_DL_*), which
 * exist whatever the header's version (kDLBool, for one, is 1.0's). */
#ifndef LOOM_IO_DLPACK_ABI_H
#define LOOM_IO_DLPACK_ABI_H

#include <stddef.h>
#include <stdint.h>

#if defined(LOOM_HAVE_DLPACK_H) && LOOM_HAVE_DLPACK_H
#include <dlpack/dlpack.h>
#else
typedef struct {
  int32_t device_type;   /* DLDeviceType (a C enum: 4 bytes) */
  int32_t device_id;
} DLDevice;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;      /* elements; NULL: compact row-major */
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
#endif

#ifndef DLPACK_MAJOR_VERSION  /* a pre-1.0 header (or none): add 1.0's versioned struct */
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;
#define LOOM_DL_MAJOR 1u
#define LOOM_DL_MINOR 0u
#else
#define LOOM_DL_MAJOR ((uint32_t)DLPACK_MAJOR_VERSION)
#define LOOM_DL_MINOR ((uint32_t)DLPACK_MINOR_VERSION)
#endif

/* Device types and type codes (fixed values of the specification). */
enum {
  LOOM_DL_CPU = 1,
  LOOM_DL_CUDA = 2,
  LOOM_DL_CUDA_HOST = 3,
  LOOM_DL_CUDA_MANAGED = 13,
};
enum {
  LOOM_DL_INT = 0,
  LOOM_DL_UINT = 1,
  LOOM_DL_FLOAT = 2,
  LOOM_DL_BFLOAT = 4,
  LOOM_DL_BOOL = 6,
};
#define LOOM_DL_FLAG_READ_ONLY ((uint64_t)1 << 0)
#define LOOM_DL_FLAG_IS_COPIED ((uint64_t)1 << 1)

/* The ABI every DLPack producer and consumer agrees on (LP64). */
_Static_assert(sizeof(DLDevice) == 8, "DLDevice layout");
_Static_assert(sizeof(DLDataType) == 4, "DLDataType layout");
_Static_assert(sizeof(void *) != 8 || sizeof(DLTensor) == 48, "DLTensor layout");
_Static_assert(sizeof(void *) != 8 || offsetof(DLTensor, shape) == 24, "DLTensor.shape offset");
_Static_assert(sizeof(void *) != 8 || offsetof(DLTensor, byte_offset) == 40, "DLTensor.byte_offset offset");
_Static_assert(sizeof(void *) != 8 || sizeof(DLManagedTensor) == 64, "DLManagedTensor layout");
_Static_assert(sizeof(void *) != 8 || offsetof(DLManagedTensor, deleter) == 56, "DLManagedTensor.deleter offset");
_Static_assert(sizeof(void *) != 8 || sizeof(DLManagedTensorVersioned) == 80, "DLManagedTensorVersioned layout");
_Static_assert(sizeof(void *) != 8 || offsetof(DLManagedTensorVersioned, flags) == 24, "versioned flags offset");
_Static_assert(sizeof(void *) != 8 || offsetof(DLManagedTensorVersioned, dl_tensor) == 32, "versioned dl_tensor offset");

#endif
