# Finds loom's dependencies: threads, OpenMP, zlib, CBLAS (OpenBLAS), CUDA
# toolkit (cudart, cuBLAS, cuBLASLt), cuDNN and NCCL, MPI (C bindings). Only
# threads are required: a plain configure needs a C compiler and CMake.
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

# --- jansson (JSON headers of safetensors checkpoints) ----------------------
# jansson rather than cJSON: its parser rejects duplicate keys itself
# (JSON_REJECT_DUPLICATES; the format forbids duplicate tensor names, and
# cJSON keeps both and answers lookups with the first), holds integers as
# 64-bit json_int_t (data_offsets past 2^53 stay exact and "1.5" is not an
# integer; cJSON stores every number as a double), checks UTF-8, and reports
# line/column for error messages.
# Optional: without it libloom still builds, and the safetensors/checkpoint
# calls fail with LOOM_ERR_UNSUPPORTED naming the package (the offline GPU
# machine has no Debian packages). Linked by path so the installed package
# config needs no find module.
set(LOOM_HAVE_JANSSON OFF)
find_path(LOOM_JANSSON_INCLUDE jansson.h)
find_library(LOOM_JANSSON_LIB NAMES jansson)
if(LOOM_JANSSON_INCLUDE AND LOOM_JANSSON_LIB)
  set(LOOM_HAVE_JANSSON ON)
else()
  message(STATUS "loom: jansson not found (Debian: libjansson-dev): safetensors checkpoints disabled")
endif()

# --- JPEG / PNG (the image-folder dataset's decoders) -------------------------
# libjpeg-turbo's libjpeg API (Debian: libjpeg62-turbo-dev; DCT scaling,
# jpeg_skip_scanlines and jpeg_crop_scanline need libjpeg-turbo >= 1.5) and
# libpng (libpng-dev). LOOM_IMAGE=AUTO uses what is found, ON requires both,
# OFF builds without: loom_dataset_image_folder_open then says what to
# install. Linked by path, like jansson.
set(LOOM_IMAGE AUTO CACHE STRING "JPEG/PNG decoding for image folders (libjpeg-turbo, libpng): AUTO, ON or OFF")
set(LOOM_HAVE_JPEG OFF)
set(LOOM_HAVE_PNG OFF)
if(NOT LOOM_IMAGE STREQUAL "OFF")
  find_path(LOOM_JPEG_INCLUDE jpeglib.h)
  find_library(LOOM_JPEG_LIB NAMES jpeg)
  if(LOOM_JPEG_INCLUDE AND LOOM_JPEG_LIB)
    include(CheckSymbolExists)
    set(CMAKE_REQUIRED_INCLUDES ${LOOM_JPEG_INCLUDE})
    set(CMAKE_REQUIRED_LIBRARIES ${LOOM_JPEG_LIB})
    check_symbol_exists(jpeg_crop_scanline "stdio.h;jpeglib.h" LOOM_JPEG_HAS_CROP)
    unset(CMAKE_REQUIRED_INCLUDES)
    unset(CMAKE_REQUIRED_LIBRARIES)
    if(LOOM_JPEG_HAS_CROP)
      set(LOOM_HAVE_JPEG ON)
    endif()
  endif()
  find_path(LOOM_PNG_INCLUDE png.h)
  find_library(LOOM_PNG_LIB NAMES png16 png)
  if(LOOM_PNG_INCLUDE AND LOOM_PNG_LIB)
    set(LOOM_HAVE_PNG ON)
  endif()
  if(LOOM_IMAGE STREQUAL "ON" AND NOT (LOOM_HAVE_JPEG AND LOOM_HAVE_PNG))
    message(FATAL_ERROR "LOOM_IMAGE=ON but libjpeg-turbo (libjpeg62-turbo-dev) or libpng (libpng-dev) was not found")
  endif()
  if(NOT LOOM_HAVE_JPEG)
    message(STATUS "loom: libjpeg-turbo not found (Debian: libjpeg62-turbo-dev): image folders without JPEG")
  endif()
  if(NOT LOOM_HAVE_PNG)
    message(STATUS "loom: libpng not found (Debian: libpng-dev): image folders without PNG")
  endif()
endif()

# --- DLPack header ----------------------------------------------------------
# Debian's libdlpack-dev (0.6 on Debian 12). Without it lib/io/dlpack_abi.h
# declares the same ABI itself; DLManagedTensorVersioned (DLPack >= 1.0) is
# declared there whenever the header found is older.
find_path(LOOM_DLPACK_INCLUDE dlpack/dlpack.h)
set(LOOM_HAVE_DLPACK_H OFF)
if(LOOM_DLPACK_INCLUDE)
  set(LOOM_HAVE_DLPACK_H ON)
endif()

# --- MPI (lib/dist's CPU back end and the NCCL id exchange) -----------------
set(LOOM_HAVE_MPI OFF)
if(NOT LOOM_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C)
  if(MPI_C_FOUND)
    set(LOOM_HAVE_MPI ON)
    # How tests launch ranks: OpenMPI needs --oversubscribe to run more ranks
    # than cores (CI: 2 ranks, often fewer free cores); MPICH allows it.
    set(LOOM_MPIEXEC_FLAGS "")
    if(MPI_C_LIBRARY_VERSION_STRING MATCHES "Open MPI")
      set(LOOM_MPIEXEC_FLAGS --oversubscribe)
    endif()
  elseif(LOOM_MPI STREQUAL "ON")
    message(FATAL_ERROR "LOOM_MPI=ON but no MPI was found (install libopenmpi-dev or libmpich-dev)")
  endif()
endif()
