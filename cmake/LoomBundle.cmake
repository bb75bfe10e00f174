# LOOM_DEPS_DIR: the offline bundle of scripts/bundle-offline.sh (DIR/include,
# DIR/lib, DIR/fashion-mnist), for machines without Debian's development
# packages (the GPU node). Every dependency it carries is looked for there
# before the system: Criterion, zlib, jansson, the DLPack header (whatever
# find_path/find_library/find_package loom runs, through CMAKE_PREFIX_PATH),
# and the tests' Fashion-MNIST. Without it nothing changes.
set(LOOM_DEPS_DIR "" CACHE PATH "Offline dependency bundle (scripts/bundle-offline.sh), searched before the system")
if(LOOM_DEPS_DIR)
  get_filename_component(_loom_deps "${LOOM_DEPS_DIR}" ABSOLUTE)
  if(NOT IS_DIRECTORY "${_loom_deps}/include" OR NOT IS_DIRECTORY "${_loom_deps}/lib")
    message(FATAL_ERROR "LOOM_DEPS_DIR=${LOOM_DEPS_DIR} is not a bundle (no include/ and lib/): make one with scripts/bundle-offline.sh")
  endif()
  list(PREPEND CMAKE_PREFIX_PATH "${_loom_deps}")
  if(NOT CRITERION_ROOT)
    set(CRITERION_ROOT "${_loom_deps}")
  endif()
  if(NOT ZLIB_ROOT)
    set(ZLIB_ROOT "${_loom_deps}")
  endif()
  if(IS_DIRECTORY "${_loom_deps}/fashion-mnist" AND NOT DEFINED CACHE{LOOM_FASHION_MNIST_DIR})
    set(LOOM_FASHION_MNIST_DIR "${_loom_deps}/fashion-mnist" CACHE PATH "Fashion-MNIST IDX files used by tests")
  endif()
  message(STATUS "loom: dependency bundle ${_loom_deps} searched first")
endif()
