# Finds loom's dependencies: threads, OpenMP, zlib, CBLAS (OpenBLAS), CUDA
# toolkit (cudart, cuBLAS, cuBLASLt), cuDNN and NCCL. Only threads are
# required: a plain configure needs a C compiler and CMake.
find_package(Threads REQUIRED)
find_package(OpenMP COMPONENTS C)
# zlib (ZLIB_ROOT is honoured): gzip dataset files. Without it loom reads raw
# files and says what to install when it meets a gzip one.
find_package(ZLIB)
set(LOOM_HAVE_ZLIB ${ZLIB_FOUND})
if(NOT ZLIB_FOUND)
  message(STATUS "loom: zlib not found: gzip dataset files will be refused (install zlib1g-dev or set ZLIB_ROOT)")
endif()

# --- CBLAS -----------------------------------------------------------------
set(LOOM_HAVE_CBLAS OFF)
if(NOT LOOM_BLAS STREQUAL "OFF")
  find_path(LOOM_CBLAS_INCLUDE cblas.h PATHS /usr/include/x86_64-linux-gnu /usr/include/openblas /usr/include)
  # Prefer OpenBLAS built on OpenMP (Debian's libopenblas-openmp-dev): it
  # shares loom's OpenMP thread pool. The pthread build's threads fight
  # OpenMP's spinning workers for the cores and halve throughput.
  find_library(LOOM_OPENBLAS_LIB NAMES openblas
    PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp NO_DEFAULT_PATH)
  if(NOT LOOM_OPENBLAS_LIB)
    find_library(LOOM_OPENBLAS_LIB NAMES openblas openblasp openblaso)
  endif()
  if(LOOM_CBLAS_INCLUDE AND LOOM_OPENBLAS_LIB)
    set(LOOM_HAVE_CBLAS ON)
  elseif(LOOM_BLAS STREQUAL "ON")
    message(FATAL_ERROR "LOOM_BLAS=ON but OpenBLAS (libopenblas-dev) was not found")
  endif()
endif()

# --- CUDA ------------------------------------------------------------------
set(LOOM_HAVE_CUDA OFF)
if(NOT LOOM_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(LOOM_HAVE_CUDA ON)
      find_package(CUDNN)
      find_package(NCCL)
      # Binaries find cuDNN/NCCL where they were found (pip wheels included)
      # without LD_LIBRARY_PATH: their directories go into the build RPATH,
      # and into the install RPATH of what links them.
      foreach(_d ${CUDNN_LIBRARY_DIR} ${NCCL_LIBRARY_DIR})
        list(APPEND CMAKE_BUILD_RPATH "${_d}")
      endforeach()
      set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)
    endif()
  endif()
  if(NOT LOOM_HAVE_CUDA AND LOOM_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LOOM_CUDA=ON but no CUDA toolkit was found")
  endif()
endif()
