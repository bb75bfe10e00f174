/* status.h — status codes and the thread-local error message.
 *
 * Calls that do not produce a tensor return loom_status. On failure,
 * loom_last_error() returns a message for the calling thread that says what
 * failed, where, and what to do. Tensor-producing calls return NULL on
 * failure and set the same message. All functions here are thread-safe. */
#ifndef LOOM_STATUS_H
#define LOOM_STATUS_H

#include "export.h"

LOOM_EXTERN_C_BEGIN

/* Append-only: values never change meaning. */
typedef enum loom_status {
  LOOM_OK = 0,
  LOOM_ERR_INVALID_ARG = 1,  /* NULL where a value is needed, bad option */
  LOOM_ERR_SHAPE = 2,        /* shapes that do not agree */
  LOOM_ERR_DTYPE = 3,        /* dtype not supported by the op, or mismatched */
  LOOM_ERR_DEVICE = 4,       /* tensors on different devices, no such device */
  LOOM_ERR_OOM = 5,          /* out of memory (host or device) */
  LOOM_ERR_IO = 6,           /* a file could not be opened or read */
  LOOM_ERR_FORMAT = 7,       /* a file's contents are malformed */
  LOOM_ERR_UNSUPPORTED = 8,  /* valid request this build/device cannot do */
  LOOM_ERR_CUDA = 9,         /* a CUDA / cuBLAS / cuDNN / NCCL call failed */
  LOOM_ERR_STATE = 10,       /* call not allowed now (e.g. after init) */
  LOOM_ERR_INTERNAL = 11,    /* a bug in loom: please report */
  LOOM_ERR_NULL_INPUT = 12,  /* an input tensor was NULL (earlier failure) */
  LOOM_ERR_COMM = 13,        /* a collective failed: timed out (another rank failed or
                                stopped), an MPI/NCCL error, or the communicator was aborted */
} loom_status;

/* Message of the last failure on this thread ("" if none). Valid until the
 * next loom call on this thread. */
LOOM_API const char *loom_last_error(void);
/* Status code of the last failure on this thread (LOOM_OK if none). */
LOOM_API loom_status loom_last_status(void);
/* Forget the last failure on this thread. */
LOOM_API void loom_clear_error(void);
/* Short name of a status: "LOOM_ERR_SHAPE". */
LOOM_API const char *loom_status_name(loom_status s);

LOOM_EXTERN_C_END
#endif
