# FindCriterion: the Criterion unit-test library (Debian: libcriterion-dev).
# Honors CRITERION_ROOT (CMake variable or environment): a prefix with
# include/criterion/criterion.h and lib/libcriterion.so (or only the
# versioned libcriterion.so.3, as in scripts/bundle-offline.sh's bundle).
# Defines Criterion_FOUND, CRITERION_INCLUDE_DIR, CRITERION_LIBRARY and the
# imported target Criterion::criterion. Pretend it is absent with
# -DCMAKE_DISABLE_FIND_PACKAGE_Criterion=ON.
set(_loom_crit_hints ${CRITERION_ROOT} $ENV{CRITERION_ROOT})
find_path(CRITERION_INCLUDE_DIR criterion/criterion.h HINTS ${_loom_crit_hints} PATH_SUFFIXES include)
find_library(CRITERION_LIBRARY NAMES criterion libcriterion.so.3 NAMES_PER_DIR
  HINTS ${_loom_crit_hints} PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Criterion REQUIRED_VARS CRITERION_LIBRARY CRITERION_INCLUDE_DIR)
if(Criterion_FOUND AND NOT TARGET Criterion::criterion)
  add_library(Criterion::criterion UNKNOWN IMPORTED)
  set_target_properties(Criterion::criterion PROPERTIES IMPORTED_LOCATION ${CRITERION_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${CRITERION_INCLUDE_DIR})
endif()
