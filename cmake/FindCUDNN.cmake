# FindCUDNN: cuDNN 9 headers and library. Searched, in order: CUDNN_ROOT
# (CMake variable or environment; a prefix with include/ and lib/ or lib64/),
# the pip wheel layout under the `python3` on PATH
# (site-packages/nvidia/cudnn/{include,lib}, only libcudnn.so.9 there; see
# LoomPythonWheels.cmake), the CUDA toolkit, then the system. Defines
# CUDNN_FOUND, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY, CUDNN_LIBRARY_DIR and
# CUDNN::cudnn.
include(LoomPythonWheels)
loom_python_wheel_roots(_loom_cudnn_wheels cudnn cu13 cu12)
set(_loom_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${_loom_cudnn_wheels})
find_path(CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${_loom_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR
  HINTS ${_loom_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib lib64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN DEFAULT_MSG CUDNN_LIBRARY CUDNN_INCLUDE_DIR)
if(CUDNN_FOUND)
  get_filename_component(CUDNN_LIBRARY_DIR "${CUDNN_LIBRARY}" DIRECTORY)
  if(NOT TARGET CUDNN::cudnn)
    add_library(CUDNN::cudnn UNKNOWN IMPORTED)
    set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION ${CUDNN_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${CUDNN_INCLUDE_DIR})
  endif()
endif()
