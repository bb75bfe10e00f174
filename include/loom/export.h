/* export.h — LOOM_API marks the public symbols of libloom. */
#ifndef LOOM_EXPORT_H
#define LOOM_EXPORT_H

#if defined(_WIN32)
#  define LOOM_API __declspec(dllexport)
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
