/* safetensors_internal.h (internal) — the dtype table of the safetensors
 * format and the open-file object shared by the reader, the writer and the
 * checkpoint code. */
#ifndef LOOM_IO_SAFETENSORS_INTERNAL_H
#define LOOM_IO_SAFETENSORS_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "loom/io.h"

/* The Rust reference implementation's cap: a header above 100 MB is refused
 * before it is read. */
#define LOOM_ST_MAX_HEADER ((uint64_t)100000000)
/* Data starts at a multiple of this (the writer pads the header). */
#define LOOM_ST_ALIGN 64
/* Rank the validator accepts (beyond LOOM_MAX_DIMS a tensor validates but
 * cannot be loaded). */
#define LOOM_ST_MAX_RANK 64

typedef struct loom_st_dtype {
  const char *name;   /* "F32" */
  size_t size;        /* bytes per element */
  int loom;           /* loom_dtype, or -1 when loom has none */
} loom_st_dtype;

/* Every dtype of the format (so byte counts of any file validate); NULL for
 * an unknown name. */
const loom_st_dtype *loom_st_dtype_by_name(const char *name);
/* The format's name of a loom dtype ("F32"). */
const char *loom_st_dtype_of(loom_dtype dt);

/* A read-only view of a file: refcounted, unmapped when the last tensor
 * viewing it (and the handle) are gone. */
typedef struct loom_st_map {
  atomic_int refcount;
  void *base;
  size_t len;
} loom_st_map;

typedef struct loom_st_entry {
  char *name;
  const loom_st_dtype *dtype;
  int ndim;                         /* may exceed LOOM_MAX_DIMS */
  int64_t shape[LOOM_MAX_DIMS];     /* valid when ndim <= LOOM_MAX_DIMS */
  uint64_t begin, end;              /* within the data section */
} loom_st_entry;

struct loom_safetensors {
  char *path;
  int fd;                /* kept open for GPU loads (pread into pinned memory) */
  loom_st_map *map;
  uint64_t data_start;   /* 8 + header length */
  int n;
  loom_st_entry *e;      /* sorted by begin */
  int n_meta;
  char **meta_keys, **meta_values;
};

#endif
