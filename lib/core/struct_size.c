/* struct_size.c — validating a caller's struct_size and the copies over
 * defaults / out to the caller that it allows (struct_size.h). */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/struct_size.h"

/* What to tell the caller: options have an init function, every other
 * struct is sized by the caller. */
static void hint(const char *type, char *buf, size_t n) {
  size_t len = strlen(type), suffix = strlen("_options");
  if (len > suffix && strcmp(type + len - suffix, "_options") == 0)
    snprintf(buf, n, "initialize it with %s_init()", type);
  else
    snprintf(buf, n, "set it to sizeof(%s)", type);
}

loom_status loom_struct_size_check(const char *fn, const char *type, size_t struct_size, size_t lib_size) {
  if (struct_size >= sizeof(size_t) && struct_size <= lib_size) return LOOM_OK;
  char h[96];
  hint(type, h, sizeof h);
  return loom_set_error(LOOM_ERR_INVALID_ARG,
                        "%s: %s.struct_size is %zu; expected sizeof(%s) = %zu (or an older, smaller struct's size "
                        "down to %zu); %s",
                        fn, type, struct_size, type, lib_size, sizeof(size_t), h);
}

loom_status loom_struct_in(const char *fn, const char *type, void *dst, const void *user, size_t lib_size) {
  if (user) {
    size_t n;
    memcpy(&n, user, sizeof n);
    LOOM_TRY(loom_struct_size_check(fn, type, n, lib_size));
    memcpy(dst, user, n);
  }
  memcpy(dst, &lib_size, sizeof lib_size);
  return LOOM_OK;
}

loom_status loom_struct_out(const char *fn, const char *type, void *out, const void *full, size_t lib_size) {
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: the %s to fill is NULL", fn, type);
  size_t n;
  memcpy(&n, out, sizeof n);
  LOOM_TRY(loom_struct_size_check(fn, type, n, lib_size));
  memcpy(out, full, n);
  memcpy(out, &n, sizeof n);
  return LOOM_OK;
}
