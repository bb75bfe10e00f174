/* cpu_util.h (internal) — helpers shared by the CPU kernels: converting runs
 * of elements of any dtype to and from f32, strided broadcast iteration, and
 * the OpenMP threshold. */
#ifndef LOOM_OPS_CPU_UTIL_H
#define LOOM_OPS_CPU_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "loom/dtype.h"
#include "ops/iter.h"
#include "tensor/tensor_internal.h"

/* Below this many elements a kernel runs on one thread (fork/join costs more). */
#define LOOM_CPU_PAR_MIN 32768

/* dst[j] = (float)src[j * stride] for j < n. */
void loom_cpu_load_f32(const void *src, loom_dtype dt, int64_t stride, int64_t n, float *dst);
/* dst[j * stride] = convert(src[j]) for j < n (round to nearest even). */
void loom_cpu_store_f32(void *dst, loom_dtype dt, int64_t stride, int64_t n, const float *src);
/* The contiguous-run forms of the two above for one float dtype (f32, f16
 * or bf16; NULL for others), resolved once under the current instruction
 * set, for kernels that convert many short runs (the GEMM's packing): the
 * same results without the per-call dispatch. Resolve per operation, not
 * per process: LOOM_CPU_ISA may change between calls. */
typedef void (*loom_cpu_widen_fn)(const void *src, float *dst, int64_t n);
typedef void (*loom_cpu_round_fn)(const float *src, void *dst, int64_t n);
loom_cpu_widen_fn loom_cpu_widen_fn_for(loom_dtype dt);
loom_cpu_round_fn loom_cpu_round_fn_for(loom_dtype dt);
/* Whether the f16 runs above use F16C (the CPU has it and the instruction
 * set is avx2 or wider): kernels that convert f16 themselves ask here. */
bool loom_cpu_f16c(void);
double loom_cpu_load_f64(const void *base, loom_dtype dt, int64_t idx);
void loom_cpu_store_f64(void *base, loom_dtype dt, int64_t idx, double v);


static inline size_t loom_esize(loom_dtype dt) { return loom_dtype_size(dt); }

/* n values at element offset off of a buffer of float dtype dt, as f32:
 * the data itself for f32, else converted into buf (n floats). */
static inline const float *loom_cpu_span_f32(const void *base, loom_dtype dt, int64_t off, int64_t n, float *buf) {
  if (dt == LOOM_F32) return (const float *)base + off;
  loom_cpu_load_f32((const char *)base + (size_t)off * loom_dtype_size(dt), dt, 1, n, buf);
  return buf;
}
/* Where to write n f32 results destined for offset off: the output itself
 * for f32, else buf; loom_cpu_out_commit rounds buf into the output. */
static inline float *loom_cpu_out_f32(void *base, loom_dtype dt, int64_t off, float *buf) {
  return dt == LOOM_F32 ? (float *)base + off : buf;
}
static inline void loom_cpu_out_commit(void *base, loom_dtype dt, int64_t off, int64_t n, const float *buf) {
  if (dt != LOOM_F32) loom_cpu_store_f32((char *)base + (size_t)off * loom_dtype_size(dt), dt, 1, n, buf);
}

#endif
