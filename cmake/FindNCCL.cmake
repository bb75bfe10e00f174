# FindNCCL: NCCL headers and library. Searched, in order: NCCL_ROOT (CMake
# variable or environment; a prefix with include/ and lib/ or lib64/), the
# pip wheel layout under the `python3` on PATH
# (site-packages/nvidia/nccl/{include,lib}, only libnccl.so.2 there; see
# LoomPythonWheels.cmake), the CUDA toolkit, then the system. Defines
# NCCL_FOUND, NCCL_INCLUDE_DIR, NCCL_LIBRARY, NCCL_LIBRARY_DIR and NCCL::nccl.
include(LoomPythonWheels)
loom_python_wheel_roots(_loom_nccl_wheels nccl cu13 cu12)
set(_loom_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} ${_loom_nccl_wheels})
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${_loom_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
  HINTS ${_loom_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib lib64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL DEFAULT_MSG NCCL_LIBRARY NCCL_INCLUDE_DIR)
if(NCCL_FOUND)
  get_filename_component(NCCL_LIBRARY_DIR "${NCCL_LIBRARY}" DIRECTORY)
  if(NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
  endif()
endif()
