/* optim_cpu_x86.h (internal) — the AVX2 runs of the CPU optimizer updates
 * (optim_cpu_x86.c), bit-identical to optim_cpu.c's scalar loops. Call only
 * when the CPU kernels' instruction set is avx2 or wider and, for an f16
 * copy, the CPU has F16C (loom_cpu_f16c). */
#ifndef LOOM_OPTIM_CPU_X86_H
#define LOOM_OPTIM_CPU_X86_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* AdamW's per-step constants, as optim_cpu.c computes them. */
typedef struct loom_adamw_consts {
  float b1, c1, b2, c2, eps, decay, step_size, inv_bc2_sqrt;
} loom_adamw_consts;

typedef struct loom_sgd_consts {
  float wd, mom, damp, lr;
  int first, nesterov;
} loom_sgd_consts;

#if defined(__x86_64__)
/* Elements [0, n) of one parameter: p, m, v updated in place; lowp (NULL:
 * none) receives p rounded to f16 (f16) or bf16. g16 (NULL: none) is a
 * deferred 16-bit gradient (f16 when g16_f16, else bf16): widened in
 * registers, written into g and used (loom_param_group's grad16, without
 * the separate widening pass); otherwise g is only read. */
void loom_adamw_run_avx2(float *p, float *m, float *v, float *g, int64_t n, const loom_adamw_consts *c,
                         uint16_t *lowp, bool f16, const uint16_t *g16, bool g16_f16);
/* m NULL: no momentum. */
void loom_sgd_run_avx2(float *p, float *m, float *g, int64_t n, const loom_sgd_consts *c, uint16_t *lowp,
                       bool f16, const uint16_t *g16, bool g16_f16);
#endif

#endif
