/* struct_size.h (internal) — the one check of a caller's struct_size, and
 * the copies it allows.
 *
 * Every struct that crosses the API by pointer — options, callbacks,
 * statistics and other in/out structs — starts with `size_t struct_size`,
 * the sizeof the caller was compiled with. The library accepts
 *   sizeof(size_t) <= struct_size <= its own sizeof:
 * the same struct, or an older, smaller one (structs only grow at the end).
 * A struct coming in is copied over the library's defaults, so the fields an
 * older caller does not know keep their defaults; a struct going out is
 * filled as far as the caller's struct goes. Anything else (0, garbage,
 * a newer struct than this library's) is LOOM_ERR_INVALID_ARG naming the
 * struct and the size expected. */
#ifndef LOOM_CORE_STRUCT_SIZE_H
#define LOOM_CORE_STRUCT_SIZE_H

#include <stddef.h>

#include "loom/status.h"

/* LOOM_OK when struct_size is acceptable for a struct named `type` whose
 * size in this library is lib_size; else the error (fn: the calling API
 * function, for the message). */
loom_status loom_struct_size_check(const char *fn, const char *type, size_t struct_size, size_t lib_size);

/* A struct coming in: *dst holds the defaults (lib_size bytes); user NULL
 * keeps them, else its first user->struct_size bytes are copied over them
 * after the check. dst's struct_size is lib_size afterwards. */
loom_status loom_struct_in(const char *fn, const char *type, void *dst, const void *user, size_t lib_size);

/* A struct going out: the first out->struct_size bytes of *full (lib_size
 * bytes, the library's complete answer) are copied to *out after the check;
 * out->struct_size keeps the caller's value. out NULL is an error. */
loom_status loom_struct_out(const char *fn, const char *type, void *out, const void *full, size_t lib_size);

/* Type-checked forms: the pointers must point at `type`. */
#define LOOM_STRUCT_IN(fn, type, dst, user) \
  loom_struct_in((fn), #type, (1 ? (dst) : (type *)0), (1 ? (user) : (const type *)0), sizeof(type))
#define LOOM_STRUCT_OUT(fn, type, out, full) \
  loom_struct_out((fn), #type, (1 ? (out) : (type *)0), (1 ? (full) : (const type *)0), sizeof(type))

#endif
