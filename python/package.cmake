# package.cmake — what `pip install ./python` (scikit-build-core, see
# python/pyproject.toml) needs from loom's top-level CMakeLists: build the
# shared library and install it into the package as loom/libloom.so (the
# "python" install component; nothing else of loom's install goes into the
# wheel). CUDA follows LOOM_CUDA as for any build (AUTO: with CUDA when a
# toolkit is found); the environment variable LOOM_CUDA=OFF|ON|AUTO sets it
# for pip, as does -Ccmake.define.LOOM_CUDA=OFF. With LOOM_LIBRARY=/path/to/
# libloom.so in the environment nothing is built: that library is bundled
# (LOOM_PACKAGE_PREBUILT is then set, and the caller stops configuring).
if(DEFINED ENV{LOOM_CUDA} AND NOT "$ENV{LOOM_CUDA}" STREQUAL "")
  set(LOOM_CUDA "$ENV{LOOM_CUDA}" CACHE STRING "Build the CUDA backend: AUTO, ON or OFF" FORCE)
endif()
set(LOOM_PACKAGE_PREBUILT OFF)
if(DEFINED ENV{LOOM_LIBRARY} AND NOT "$ENV{LOOM_LIBRARY}" STREQUAL "")
  set(lib "$ENV{LOOM_LIBRARY}")
  if(IS_DIRECTORY "${lib}")
    set(lib "${lib}/libloom.so")
  endif()
  if(NOT EXISTS "${lib}")
    message(FATAL_ERROR "loom: LOOM_LIBRARY=$ENV{LOOM_LIBRARY}: no such library")
  endif()
  get_filename_component(lib "${lib}" REALPATH)
  message(STATUS "loom: bundling the prebuilt ${lib} (LOOM_LIBRARY); nothing is built")
  install(FILES "${lib}" DESTINATION loom RENAME libloom.so COMPONENT python)
  # pyproject.toml's build target, with nothing to do.
  add_custom_target(loom)
  set(LOOM_PACKAGE_PREBUILT ON)
else()
  # One file (wheels hold no symlinks), found by path at import (loom/_lib.py).
  install(FILES $<TARGET_FILE:loom> DESTINATION loom RENAME libloom.so COMPONENT python)
endif()
