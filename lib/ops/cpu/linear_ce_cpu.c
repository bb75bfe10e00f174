/* linear_ce_cpu.c — the final projection fused with the cross-entropy on
 * the CPU: loss = mean over rows of lse(x wᵀ) - (x wᵀ)[label], without ever
 * holding the [N, V] logits. Rows go through in chunks whose logits fit in
 * CHUNK_FLOATS (the GEMMs stay large enough to run at full speed); forward
 * keeps the logsumexp of each row ([N] f32), and backward recomputes each
 * chunk's logits from it, turns them into dlogits = (softmax - onehot) gy/N
 * in place and adds dlogits · w into dx and dlogitsᵀ · x into dw. Chunks
 * run in order (the GEMMs use the threads), so the sums do not depend on
 * the thread count. f16/bf16 x and w are widened to f32 first (exact) and
 * dx, dw rounded to their dtype at the end: f32 sums throughout. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/sys.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/gemm.h"
#include "ops/elementwise_math.h" /* loom_exp_host_f: a vectorizable expf */

#define CHUNK_FLOATS ((int64_t)1 << 22) /* 16 MiB of logits at a time */

static int64_t label_at(const loom_tensor *l, int64_t i) {
  const void *p = loom_tensor_ptr(l);
  switch (l->dtype) {
    case LOOM_I32: return ((const int32_t *)p)[i];
    case LOOM_I64: return ((const int64_t *)p)[i];
    case LOOM_U8: return ((const uint8_t *)p)[i];
    default: return -1;
  }
}

static int64_t chunk_rows(int64_t N, int64_t V) {
  int64_t r = CHUNK_FLOATS / V;
  if (r < 1) r = 1;
  return r < N ? r : (N > 0 ? N : 1);
}

/* An f32 buffer for t (its own data when f32, NULL for no t): for an
 * f16/bf16 t a new one in *tmp (NULL when out of memory), which finish_out
 * rounds into t. */
static float *out_f32(loom_tensor *t, float **tmp) {
  *tmp = NULL;
  if (!t || t->dtype == LOOM_F32) return t ? loom_tensor_ptr(t) : NULL;
  int64_t n = loom_shape_numel(t->ndim, t->shape);
  *tmp = loom_sys_malloc((size_t)(n ? n : 1) * sizeof(float));
  return *tmp;
}

/* t's elements as f32: out_f32's buffer, filled with t widened. */
static float *as_f32(loom_tensor *t, float **tmp) {
  float *p = out_f32(t, tmp);
  if (*tmp) loom_cpu_load_f32(loom_tensor_ptr(t), t->dtype, 1, loom_shape_numel(t->ndim, t->shape), *tmp);
  return p;
}

static void finish_out(loom_tensor *t, float *tmp) {
  if (!tmp) return;
  loom_cpu_store_f32(loom_tensor_ptr(t), t->dtype, 1, loom_shape_numel(t->ndim, t->shape), tmp);
  loom_sys_free(tmp);
}

/* Logits of rows [r0, r0 + nr) into L [nr, V]. */
static void logits(const float *x, const float *w, int64_t r0, int64_t nr, int64_t V, int64_t E, float *L) {
  loom_cpu_sgemm(false, true, nr, V, E, 1.0f, x + r0 * E, E, w, E, 0.0f, L, V);
}

loom_status loom_cpu_linear_cross_entropy(loom_op_args *a) {
  loom_tensor *x = a->in[0], *w = a->in[1], *labels = a->in[2];
  int64_t N = x->shape[0], E = x->shape[1], V = w->shape[0];
  for (int64_t i = 0; i < N; i++) {
    int64_t l = label_at(labels, i);
    if (l < 0 || l >= V)
      return loom_set_error(LOOM_ERR_INVALID_ARG, "linear_cross_entropy: label %lld at row %lld is outside [0, %lld)",
                            (long long)l, (long long)i, (long long)V);
  }
  int64_t R = chunk_rows(N, V);
  float *L = loom_sys_malloc((size_t)(R * V) * sizeof(float));
  double *rl = loom_sys_malloc((size_t)R * sizeof(double));
  float *xt, *wt;
  const float *px = as_f32(x, &xt), *pw = as_f32(w, &wt);
  if (!L || !rl || !px || !pw) {
    loom_sys_free(L);
    loom_sys_free(rl);
    loom_sys_free(xt);
    loom_sys_free(wt);
    return loom_set_error(LOOM_ERR_OOM, "linear_cross_entropy: out of host memory for %lld rows of logits",
                          (long long)R);
  }
  float *plse = loom_tensor_ptr(a->out[1]);
  double total = 0;
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    int64_t nr = N - r0 < R ? N - r0 : R;
    logits(px, pw, r0, nr, V, E, L);
#pragma omp parallel for schedule(static) if (nr * V >= LOOM_CPU_PAR_MIN)
    for (int64_t i = 0; i < nr; i++) {
      const float *row = L + i * V;
      float m = -INFINITY;
      for (int64_t j = 0; j < V; j++) m = row[j] > m ? row[j] : m;
      double s = 0;
      float e[256];
      for (int64_t j0 = 0; j0 < V; j0 += 256) {
        int64_t nn = V - j0 < 256 ? V - j0 : 256;
        for (int64_t j = 0; j < nn; j++) e[j] = loom_exp_host_f(row[j0 + j] - m);
        for (int64_t j = 0; j < nn; j++) s += e[j];
      }
      float ls = (float)log(s);
      plse[r0 + i] = m + ls;
      rl[i] = (double)(m - row[label_at(labels, r0 + i)]) + (double)ls;
    }
    for (int64_t i = 0; i < nr; i++) total += rl[i];
  }
  loom_sys_free(L);
  loom_sys_free(rl);
  loom_sys_free(xt);
  loom_sys_free(wt);
  *(float *)loom_tensor_ptr(a->out[0]) = N > 0 ? (float)(total / (double)N) : NAN;
  return LOOM_OK;
}

loom_status loom_cpu_linear_cross_entropy_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2], *labels = a->in[3], *lse = a->in[4];
  loom_tensor *dx = a->out[0], *dw = a->out[1];
  int64_t N = x->shape[0], E = x->shape[1], V = w->shape[0];
  float g = *(const float *)loom_tensor_ptr(gy) / (float)(N > 0 ? N : 1);
  int64_t R = chunk_rows(N, V);
  float *L = loom_sys_malloc((size_t)(R * V) * sizeof(float));
  float *xt, *wt, *dxt, *dwt;
  const float *px = as_f32(x, &xt), *pw = as_f32(w, &wt);
  float *pdx = out_f32(dx, &dxt), *pdw = out_f32(dw, &dwt);
  if (!L || !px || !pw || (dx && !pdx) || (dw && !pdw)) {
    loom_sys_free(L);
    loom_sys_free(xt);
    loom_sys_free(wt);
    loom_sys_free(dxt);
    loom_sys_free(dwt);
    return loom_set_error(LOOM_ERR_OOM, "linear_cross_entropy backward: out of host memory for %lld rows of logits",
                          (long long)R);
  }
  if (pdw) memset(pdw, 0, (size_t)(V * E) * sizeof(float));
  const float *plse = loom_tensor_ptr(lse);
  for (int64_t r0 = 0; r0 < N; r0 += R) {
    int64_t nr = N - r0 < R ? N - r0 : R;
    logits(px, pw, r0, nr, V, E, L);
#pragma omp parallel for schedule(static) if (nr * V >= LOOM_CPU_PAR_MIN)
    for (int64_t i = 0; i < nr; i++) {
      float *row = L + i * V, ls = plse[r0 + i];
      for (int64_t j = 0; j < V; j++) row[j] = loom_exp_host_f(row[j] - ls) * g;
      row[label_at(labels, r0 + i)] -= g;
    }
    if (pdx) loom_cpu_sgemm(false, false, nr, E, V, 1.0f, L, V, pw, E, 0.0f, pdx + r0 * E, E);
    if (pdw) loom_cpu_sgemm(true, false, V, E, nr, 1.0f, L, V, px + r0 * E, E, 1.0f, pdw, E);
  }
  loom_sys_free(L);
  loom_sys_free(xt);
  loom_sys_free(wt);
  finish_out(dx, dxt);
  finish_out(dw, dwt);
  return LOOM_OK;
}
