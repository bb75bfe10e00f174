/* safetensors_dtype.c — the format's dtype names and sizes, and their loom
 * counterparts. */
#include <string.h>

#include "io/safetensors_internal.h"

static const loom_st_dtype k_dtypes[] = {
    {"F32", 4, LOOM_F32},  {"F16", 2, LOOM_F16},  {"BF16", 2, LOOM_BF16}, {"I32", 4, LOOM_I32},
    {"I64", 8, LOOM_I64},  {"U8", 1, LOOM_U8},    {"BOOL", 1, LOOM_U8},   {"F64", 8, -1},
    {"I8", 1, -1},         {"I16", 2, -1},        {"U16", 2, -1},         {"U32", 4, -1},
    {"U64", 8, -1},        {"F8_E4M3", 1, -1},    {"F8_E5M2", 1, -1},     {"F8_E8M0", 1, -1},
    {"C64", 8, -1},
};

const loom_st_dtype *loom_st_dtype_by_name(const char *name) {
  for (size_t i = 0; i < sizeof k_dtypes / sizeof *k_dtypes; i++)
    if (!strcmp(k_dtypes[i].name, name)) return &k_dtypes[i];
  return NULL;
}

const char *loom_st_dtype_of(loom_dtype dt) {
  switch (dt) {
    case LOOM_F32: return "F32";
    case LOOM_F16: return "F16";
    case LOOM_BF16: return "BF16";
    case LOOM_I32: return "I32";
    case LOOM_I64: return "I64";
    case LOOM_U8: return "U8";
  }
  return NULL;
}
