/* shutdown.h — loom_shutdown: give back everything loom holds, for programs
 * and embedders that end, or unload the library, and for leak checkers.
 *
 * loom keeps caches for the life of the process: each device's caching
 * allocator (its cached segments, the pinned host pool, graph capture pools),
 * the per-device CUDA context (cuBLASLt/cuBLAS handles and the GEMM
 * workspace), cuDNN handles and plans, cuBLASLt plans, the deferred GPU
 * error word and its mapped record, the per-device compute and copy streams,
 * the profiler's device-time events. loom_shutdown waits for the devices
 * loom used (the work loom queued), then destroys all of them and returns
 * every segment to the driver or the C library, so that a leak checker
 * (LeakSanitizer, valgrind, compute-sanitizer --leak-check full) sees
 * nothing left behind.
 *
 * Before calling it, release or free every handle loom gave you (tensors,
 * modules, optimizers, scalers, loaders, graphs, communicators, streams,
 * events) and make sure no other thread is inside a loom call. While a data
 * loader (its worker threads run on their own) or a communicator (an MPI
 * communication thread, NCCL streams) is still alive, loom_shutdown refuses:
 * it returns LOOM_ERR_STATE naming what is alive ("still alive: 1 data
 * loader (...); 2 communicators (...)") and tears nothing down, so those
 * objects keep working; free them (loom_loader_free, loom_comm_free) and
 * call it again. Memory still
 * allocated at that point (a tensor not released) is freed all the same —
 * a handle still holding it is invalid afterwards — and the call returns
 * LOOM_ERR_STATE naming the device and how many bytes in how many blocks
 * were still in use, after finishing the teardown.
 *
 * Afterwards loom may be used again: every cache is rebuilt on first use,
 * as at start-up. Settings made through the API or the environment (log
 * level and sink, allocator options, visible and virtual devices, TF32,
 * deterministic mode, CPU threads and instruction set) stay as they were.
 * Two things are not undone: MPI, when loom started it, is finalized at
 * process exit or library unload as before (MPI cannot start twice in one
 * process), and the CUDA primary contexts are left alone (they belong to
 * the process; loom never calls cudaDeviceReset). A program that unloads
 * libloom (dlclose, a Python process dropping the module) should call
 * loom_shutdown first: nothing of loom's keeps running or holds memory.
 *
 * Idempotent: a second call, or a call before loom did anything, returns
 * LOOM_OK at once. Not thread-safe with any other loom call. */
#ifndef LOOM_SHUTDOWN_H
#define LOOM_SHUTDOWN_H

#include "export.h"
#include "status.h"

LOOM_EXTERN_C_BEGIN

LOOM_API loom_status loom_shutdown(void);

LOOM_EXTERN_C_END
#endif
