/* build_info.c — loom_build_info: which optional parts this libloom was
 * compiled with (the build's LOOM_HAVE_* definitions), for `python -m loom`
 * and bug reports. */
#include "loom/device.h"

#ifndef LOOM_VERSION_STRING
#define LOOM_VERSION_STRING "unknown"
#endif

#ifdef LOOM_HAVE_CUDA
#define HAVE_CUDA "yes"
#else
#define HAVE_CUDA "no"
#endif
#ifdef LOOM_HAVE_CUDNN
#define HAVE_CUDNN "yes"
#else
#define HAVE_CUDNN "no"
#endif
#ifdef LOOM_HAVE_NCCL
#define HAVE_NCCL "yes"
#else
#define HAVE_NCCL "no"
#endif
#ifdef LOOM_HAVE_NVTX
#define HAVE_NVTX "yes"
#else
#define HAVE_NVTX "no"
#endif
#ifdef LOOM_HAVE_MPI
#define HAVE_MPI "yes"
#else
#define HAVE_MPI "no"
#endif
#ifdef LOOM_HAVE_CBLAS
#define HAVE_CBLAS "yes"
#else
#define HAVE_CBLAS "no"
#endif
#ifdef LOOM_HAVE_ZLIB
#define HAVE_ZLIB "yes"
#else
#define HAVE_ZLIB "no"
#endif
#ifdef LOOM_HAVE_JANSSON
#define HAVE_JANSSON "yes"
#else
#define HAVE_JANSSON "no"
#endif
#ifdef LOOM_PROFILER_DISABLED
#define HAVE_PROFILER "no"
#else
#define HAVE_PROFILER "yes"
#endif

const char *loom_build_info(void) {
  return "version=" LOOM_VERSION_STRING " cuda=" HAVE_CUDA " cudnn=" HAVE_CUDNN " nccl=" HAVE_NCCL " nvtx=" HAVE_NVTX
         " mpi=" HAVE_MPI " openblas=" HAVE_CBLAS " zlib=" HAVE_ZLIB " jansson=" HAVE_JANSSON " profiler=" HAVE_PROFILER;
}
