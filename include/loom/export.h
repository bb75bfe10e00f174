/* export.h — LOOM_API marks the public symbols of libloom.
 *
 * Which attribute LOOM_API carries depends on who compiles the header:
 *  - libloom's own sources (lib/CMakeLists.txt defines LOOM_BUILDING):
 *    the symbol is exported — __declspec(dllexport) on Windows,
 *    visibility("default") elsewhere (the rest of libloom is compiled with
 *    hidden visibility);
 *  - a program using the shared library: on Windows __declspec(dllimport),
 *    so calls go straight through the import table;
 *  - a program linking the static library libloom.a defines LOOM_STATIC
 *    (the loom::loom_static CMake target does it for its users): on Windows
 *    plain declarations, since there is no DLL to import from.
 * Elsewhere than Windows a user's declarations carry visibility("default"),
 * whichever library they link. */
#ifndef LOOM_EXPORT_H
#define LOOM_EXPORT_H

#if defined(_WIN32)
#  if defined(LOOM_BUILDING)
#    define LOOM_API __declspec(dllexport)
#  elif defined(LOOM_STATIC)
#    define LOOM_API
#  else
#    define LOOM_API __declspec(dllimport)
#  endif
#else
#  define LOOM_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
#  define LOOM_EXTERN_C_BEGIN extern "C" {
#  define LOOM_EXTERN_C_END }
#else
#  define LOOM_EXTERN_C_BEGIN
#  define LOOM_EXTERN_C_END
#endif

#endif
