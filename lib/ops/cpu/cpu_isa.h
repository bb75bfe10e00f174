/* cpu_isa.h (internal) — the instruction set loom's CPU kernels use: the
 * GEMM micro-kernels, the direct and depthwise convolutions, the conv
 * layout transposes and the f16 conversions all ask here instead of asking
 * the CPU themselves, so that one setting (loom_set_cpu_isa, env
 * LOOM_CPU_ISA) moves them together.
 *
 * Levels are ordered: a kernel for level L may run when the current level
 * is >= L. Threads: any; the setting is meant to change between calls. */
#ifndef LOOM_OPS_CPU_CPU_ISA_H
#define LOOM_OPS_CPU_CPU_ISA_H

#include <stdbool.h>

#include "loom/status.h"

typedef enum loom_cpu_isa_level {
  LOOM_CPU_ISA_SCALAR = 0, /* portable C (what the compiler makes of it for baseline x86-64) */
  LOOM_CPU_ISA_AVX2 = 1,   /* AVX2 + FMA */
  LOOM_CPU_ISA_AVX512 = 2, /* AVX-512F */
  /* AVX-512F/BW + AVX512_BF16: as avx512 for f32, and bf16 matmul / linear
   * / NHWC conv2d compute with vdpbf16ps (gemm_bf16.h, conv_bf16.c)
   * instead of widening to f32. */
  LOOM_CPU_ISA_AVX512BF16 = 3,
  /* avx512bf16 plus AMX-BF16 tiles (Intel Sapphire Rapids onward): the bf16
   * GEMM (matmul, linear) runs on TDPBF16PS (gemm_amx_x86.c); convolutions
   * widen to f32 (on Intel vdpbf16ps is slower than the f32 FMA; conv_bf16.c). */
  LOOM_CPU_ISA_AMXBF16 = 4,
} loom_cpu_isa_level;
#define LOOM_CPU_ISA_COUNT 5

/* The level the kernels use now: loom_set_cpu_isa's, else LOOM_CPU_ISA's
 * (read at the first call), else the widest this CPU runs. A bad
 * LOOM_CPU_ISA leaves the widest in force; loom_cpu_isa_check reports it. */
loom_cpu_isa_level loom_cpu_isa_level_now(void);
/* The widest level this CPU runs (at most the test limit below). */
loom_cpu_isa_level loom_cpu_isa_best(void);
/* Whether this CPU runs level l. */
bool loom_cpu_isa_runs(loom_cpu_isa_level l);
/* "scalar", "avx2", "avx512", "avx512bf16", "amxbf16". */
const char *loom_cpu_isa_level_name(loom_cpu_isa_level l);

/* "auto" or NULL (the widest; *forced = false), or a level's name. Errors
 * name `who` and what this CPU runs: LOOM_ERR_INVALID_ARG for an unknown
 * name, LOOM_ERR_UNSUPPORTED for a level this CPU cannot run. */
loom_status loom_cpu_isa_parse(const char *who, const char *name, loom_cpu_isa_level *level, bool *forced);
/* Force a level (forced = false: back to the widest); clears a bad
 * LOOM_CPU_ISA. The caller has validated it. */
void loom_cpu_isa_force(loom_cpu_isa_level level, bool forced);

/* LOOM_OK, or the error a bad LOOM_CPU_ISA left (set again on every call,
 * until loom_set_cpu_isa replaces the value). The CPU kernels that have an
 * instruction-set choice (conv2d, matmul, linear) return it before doing
 * anything. */
loom_status loom_cpu_isa_check(void);

/* Tests: pretend this CPU runs at most level `max` (-1: the real CPU), to
 * see the errors of a CPU without AVX-512 or AVX2 on one that has them. */
void loom_cpu_isa_test_limit(int max);

#endif
