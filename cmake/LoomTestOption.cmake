# LOOM_BUILD_TESTS: ON by default only when Criterion is found, so a plain
# configure needs nothing but a compiler and CMake; asking for the tests
# without Criterion is an error that names the package.
find_package(Criterion QUIET)
if(DEFINED CACHE{LOOM_BUILD_TESTS})
  if(LOOM_BUILD_TESTS AND NOT Criterion_FOUND)
    message(FATAL_ERROR "LOOM_BUILD_TESTS=ON but Criterion was not found: install libcriterion-dev "
      "(Debian/Ubuntu), or point -DCRITERION_ROOT=DIR at a prefix with include/criterion/ and lib/ "
      "(scripts/bundle-offline.sh makes one), or configure with -DLOOM_BUILD_TESTS=OFF")
  endif()
else()
  if(NOT Criterion_FOUND)
    message(STATUS "loom: tests off: Criterion not found (install libcriterion-dev or set CRITERION_ROOT)")
  endif()
  option(LOOM_BUILD_TESTS "Build the Criterion test suite (default: ON when Criterion is found)" ${Criterion_FOUND})
endif()
# Where the tests that train find Fashion-MNIST (Debian's dataset-fashion-mnist,
# or the copy in scripts/bundle-offline.sh's bundle on the GPU node).
set(LOOM_FASHION_MNIST_DIR /usr/share/datasets/fashion-mnist CACHE PATH "Fashion-MNIST IDX files used by tests")
