/* config.c — LOOM_ALLOC_CONF / loom_alloc_configure parsing and validation
 * of loom_alloc_options. Unknown keys and bad values are errors whose
 * message names the key, the value and what is accepted. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"
#include "core/struct_size.h"
#include "core/sys.h"

#define KNOWN_KEYS \
  "preallocate, limit, max_split_size_mb, garbage_collection_threshold, backend, history, expandable_segments"

void loom_alloc_options_init(loom_alloc_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->backend = LOOM_ALLOC_BACKEND_NATIVE;
  o->max_split_size = SIZE_MAX;
}

loom_status loom_alloc_options_check(const loom_alloc_options *o) {
  if (!o) return loom_set_error(LOOM_ERR_INVALID_ARG, "allocator options: NULL");
  if (o->backend != LOOM_ALLOC_BACKEND_NATIVE && o->backend != LOOM_ALLOC_BACKEND_CUDA_ASYNC)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "allocator options: backend %d is neither native (0) nor cuda_async (1)",
                          o->backend);
  if (!(o->preallocate_fraction >= 0 && o->preallocate_fraction <= 1))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "allocator options: preallocate %g must be in (0, 1], or 0 to grow on demand",
                          o->preallocate_fraction);
  if (!(o->limit_fraction >= 0 && o->limit_fraction <= 1))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "allocator options: limit fraction %g must be in (0, 1], or 0 for none",
                          o->limit_fraction);
  if (o->max_split_size != SIZE_MAX && o->max_split_size <= ((size_t)20 << 20))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "allocator options: max_split_size %zu bytes must be more than 20 MiB "
                          "(or SIZE_MAX for no limit)", o->max_split_size);
  if (!(o->gc_threshold >= 0 && o->gc_threshold < 1))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "allocator options: garbage_collection_threshold %g must be in (0, 1), "
                          "or 0 for off", o->gc_threshold);
  if (o->expandable_segments < 0 || o->expandable_segments > 2)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "allocator options: expandable_segments %d must be 0 (off), 1 or "
                          "2 (compact)",
                          o->expandable_segments);
  if (o->expandable_segments && o->preallocate_fraction > 0)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "allocator options: expandable_segments and preallocate exclude each "
                          "other (ranges that grow, or one arena that never does); choose one");
  if (o->expandable_segments && o->backend == LOOM_ALLOC_BACKEND_CUDA_ASYNC)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "allocator options: expandable_segments belongs to the native backend; "
                          "backend:cuda_async manages its own memory; choose one");
  if (o->history < 0 || o->history > 10000000)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "allocator options: history %d must be in [0, 10000000]", o->history);
  return LOOM_OK;
}

static int parse_double(const char *v, double *out) {
  char *end = NULL;
  errno = 0;
  double d = strtod(v, &end);
  if (end == v || *end != '\0' || errno || !isfinite(d)) return 0;
  *out = d;
  return 1;
}

static int parse_bytes(const char *v, size_t *out) {
  if (!isdigit((unsigned char)v[0])) return 0;
  char *end = NULL;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno) return 0;
  unsigned long long mult = 1;
  if (*end) {
    const char *suf[] = {"B", "K", "KB", "KiB", "M", "MB", "MiB", "G", "GB", "GiB", "T", "TB", "TiB"};
    const unsigned long long mul[] = {1, 1ull << 10, 1ull << 10, 1ull << 10, 1ull << 20, 1ull << 20, 1ull << 20,
                                      1ull << 30, 1ull << 30, 1ull << 30, 1ull << 40, 1ull << 40, 1ull << 40};
    size_t i = 0;
    for (; i < sizeof suf / sizeof suf[0]; i++)
      if (strcmp(end, suf[i]) == 0) break;
    if (i == sizeof suf / sizeof suf[0]) return 0;
    mult = mul[i];
  }
  if (n > SIZE_MAX / mult) return 0;
  *out = (size_t)(n * mult);
  return 1;
}

static int parse_int(const char *v, long long lo, long long hi, long long *out) {
  char *end = NULL;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (end == v || *end != '\0' || errno || n < lo || n > hi) return 0;
  *out = n;
  return 1;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

loom_status loom_alloc_options_parse(const char *conf, loom_alloc_options *o) {
  if (!conf || !o) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_alloc_options_parse: NULL argument");
  loom_alloc_options r;
  loom_alloc_options_init(&r);
  LOOM_TRY(LOOM_STRUCT_IN("loom_alloc_options_parse", loom_alloc_options, &r, o));
  char *copy = loom_sys_strdup(conf);
  if (!copy) return loom_set_error(LOOM_ERR_OOM, "loom_alloc_options_parse: out of host memory");
  loom_status st = LOOM_OK;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok && st == LOOM_OK; tok = strtok_r(NULL, ",", &save)) {
    char *item = trim(tok);
    if (!*item) continue;
    char *colon = strchr(item, ':');
    if (!colon) {
      st = loom_set_error(LOOM_ERR_INVALID_ARG, "allocator config '%s': '%s' is not key:value (known keys: " KNOWN_KEYS ")",
                          conf, item);
      break;
    }
    *colon = '\0';
    char *key = trim(item), *val = trim(colon + 1);
    double d;
    long long n;
    size_t bytes;
    if (strcmp(key, "preallocate") == 0) {
      if (!parse_double(val, &d) || !(d > 0 && d <= 1))
        st = loom_set_error(LOOM_ERR_INVALID_ARG, "allocator config '%s': preallocate:%s must be a fraction in (0, 1]",
                            conf, val);
      else r.preallocate_fraction = d;
    } else if (strcmp(key, "limit") == 0) {
      if (strchr(val, '.') || strchr(val, 'e')) {
        if (!parse_double(val, &d) || !(d > 0 && d <= 1))
          st = loom_set_error(LOOM_ERR_INVALID_ARG, "allocator config '%s': limit:%s: a fraction of the device must be "
                              "in (0, 1] (or give bytes, e.g. limit:4GiB)", conf, val);
        else {
          r.limit_fraction = d;
          r.limit_bytes = 0;
        }
      } else if (!parse_bytes(val, &bytes)) {
        st = loom_set_error(LOOM_ERR_INVALID_ARG, "allocator config '%s': limit:%s is neither bytes (e.g. 1073741824, "
                            "512MiB, 4G) nor a fraction with a decimal point (e.g. 0.5)", conf, val);
      } else {
        r.limit_bytes = bytes;
        r.limit_fraction = 0;
      }
    } else if (strcmp(key, "max_split_size_mb") == 0) {
      if (!parse_int(val, 21, (long long)(SIZE_MAX >> 21), &n))
        st = loom_set_error(LOOM_ERR_INVALID_ARG, "allocator config '%s': max_split_size_mb:%s must be an integer "
                            "above 20", conf, val);
      else r.max_split_size = (size_t)n << 20;
    } else if (strcmp(key, "garbage_collection_threshold") == 0) {
      if (!parse_double(val, &d) || !(d > 0 && d < 1))
        st = loom_set_error(LOOM_ERR_INVALID_ARG, "allocator config '%s': garbage_collection_threshold:%s must be in "
                            "(0, 1)", conf, val);
      else r.gc_threshold = d;
    } else if (strcmp(key, "backend") == 0) {
      if (strcmp(val, "native") == 0) r.backend = LOOM_ALLOC_BACKEND_NATIVE;
      else if (strcmp(val, "cuda_async") == 0) r.backend = LOOM_ALLOC_BACKEND_CUDA_ASYNC;
      else st = loom_set_error(LOOM_ERR_INVALID_ARG, "allocator config '%s': backend:%s must be native or cuda_async",
                               conf, val);
    } else if (strcmp(key, "expandable_segments") == 0) {
      if (strcmp(val, "true") == 0 || strcmp(val, "1") == 0) r.expandable_segments = 1;
      else if (strcmp(val, "compact") == 0) r.expandable_segments = 2;
      else if (strcmp(val, "false") == 0 || strcmp(val, "0") == 0) r.expandable_segments = 0;
      else st = loom_set_error(LOOM_ERR_INVALID_ARG, "allocator config '%s': expandable_segments:%s must be true, "
                               "false or compact", conf, val);
    } else if (strcmp(key, "history") == 0) {
      if (!parse_int(val, 0, 10000000, &n))
        st = loom_set_error(LOOM_ERR_INVALID_ARG, "allocator config '%s': history:%s must be an integer in [0, 10000000]",
                            conf, val);
      else r.history = (int32_t)n;
    } else {
      st = loom_set_error(LOOM_ERR_INVALID_ARG, "allocator config '%s': unknown key '%s' (known keys: " KNOWN_KEYS ")",
                          conf, key);
    }
  }
  loom_sys_free(copy);
  if (st == LOOM_OK) st = loom_alloc_options_check(&r);  /* combinations (expandable with preallocate, ...) */
  if (st == LOOM_OK) st = LOOM_STRUCT_OUT("loom_alloc_options_parse", loom_alloc_options, o, &r);
  return st;
}
