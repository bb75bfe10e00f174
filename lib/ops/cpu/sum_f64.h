/* sum_f64.h (internal) — deterministic f64 sums of f32 runs for the CPU
 * kernels' reductions (sum_f64.c): the same bits for the same run whatever
 * the instruction set or thread count. */
#ifndef LOOM_OPS_CPU_SUM_F64_H
#define LOOM_OPS_CPU_SUM_F64_H

#include <stdint.h>

/* sum of r[j] over j < n. */
double loom_cpu_sum_f64(const float *r, int64_t n);
/* sum of (r[j] - mean)^2 over j < n, in f64. */
double loom_cpu_sum_sq_dev_f64(const float *r, int64_t n, double mean);
/* *sg = sum of g[j], *sgx = sum of g[j] * x[j] (in f64), over j < n. */
void loom_cpu_sum_dot_f64(const float *g, const float *x, int64_t n, double *sg, double *sgx);

#endif
