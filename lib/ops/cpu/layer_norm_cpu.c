/* layer_norm_cpu.c — LayerNorm over the last dim on the CPU, fused: one
 * pass per row forward (statistics in f64 from the row widened to f32,
 * saved as f32 mean and rstd for backward), one pass per row backward for
 * dx, and dweight / dbias summed over rows in fixed blocks of rows whose
 * partial sums are added in block order: the same result for any thread
 * count, no atomics. The row sums are sum_f64.h's lane sums. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/sys.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/sum_f64.h"

#define BLOCK_ROWS 32 /* rows per partial sum of dweight / dbias */

/* A [D] parameter as f32: its data for f32, else widened into buf. */
static const float *param_f32(const loom_tensor *p, int64_t D, float *buf) {
  return p ? loom_cpu_span_f32(loom_tensor_ptr(p), p->dtype, 0, D, buf) : NULL;
}

loom_status loom_cpu_layer_norm(loom_op_args *a) {
  loom_tensor *x = a->in[0], *w = a->n_in > 1 ? a->in[1] : NULL, *b = a->n_in > 2 ? a->in[2] : NULL;
  loom_tensor *y = a->out[0], *stats = a->out[1];
  int64_t D = x->shape[x->ndim - 1], rows = loom_shape_numel(x->ndim, x->shape) / D;
  double eps = a->f[0];
  float *pbuf = loom_sys_malloc((size_t)D * 2 * sizeof(float));
  if (!pbuf) return loom_set_error(LOOM_ERR_OOM, "layer_norm: out of host memory");
  const float *pw = param_f32(w, D, pbuf), *pb = param_f32(b, D, pbuf + D);
  const char *px = loom_tensor_ptr(x);
  char *py = loom_tensor_ptr(y);
  float *ps = loom_tensor_ptr(stats);
  loom_status st = LOOM_OK;
#pragma omp parallel if (rows * D >= LOOM_CPU_PAR_MIN)
  {
    float *r = loom_sys_malloc((size_t)D * sizeof(float));
    if (!r) {
#pragma omp atomic write
      st = LOOM_ERR_OOM;
    } else {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < rows; i++) {
        /* f32: read x and write y in place of the row buffer. */
        const float *xr = loom_cpu_span_f32(px, x->dtype, i * D, D, r);
        float *yr = loom_cpu_out_f32(py, y->dtype, i * D, r);
        const double mean = loom_cpu_sum_f64(xr, D) / (double)D, q = loom_cpu_sum_sq_dev_f64(xr, D, mean);
        float fm = (float)mean, rstd = (float)(1.0 / sqrt(q / (double)D + eps));
        for (int64_t j = 0; j < D; j++) {
          float v = (xr[j] - fm) * rstd;
          if (pw) v *= pw[j];
          if (pb) v += pb[j];
          yr[j] = v;
        }
        loom_cpu_out_commit(py, y->dtype, i * D, D, r);
        ps[2 * i] = fm;
        ps[2 * i + 1] = rstd;
      }
    }
    loom_sys_free(r);
  }
  loom_sys_free(pbuf);
  if (st != LOOM_OK) return loom_set_error(st, "layer_norm: out of host memory for a row of %lld", (long long)D);
  return LOOM_OK;
}

/* xhat = (x - mean) rstd, g = gy * weight:
 *   dx = rstd (g - mean(g) - xhat mean(g xhat)),
 *   dweight = sum over rows of gy xhat, dbias = sum over rows of gy. */
loom_status loom_cpu_layer_norm_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *x = a->in[1], *stats = a->in[2], *w = a->n_in > 3 ? a->in[3] : NULL;
  loom_tensor *dx = a->out[0], *dw = a->out[1], *db = a->out[2];
  int64_t D = x->shape[x->ndim - 1], rows = loom_shape_numel(x->ndim, x->shape) / D;
  int64_t blocks = (rows + BLOCK_ROWS - 1) / BLOCK_ROWS;
  bool sums = dw || db;
  /* weight as f32, then per block: sum(gy xhat) and sum(gy) over D. */
  float *pbuf = loom_sys_malloc(((size_t)D + (sums ? (size_t)blocks * 2 * (size_t)D : 0)) * sizeof(float));
  if (!pbuf) return loom_set_error(LOOM_ERR_OOM, "layer_norm backward: out of host memory");
  const float *pw = param_f32(w, D, pbuf);
  float *part = pbuf + D;
  const char *px = loom_tensor_ptr(x), *pg = loom_tensor_ptr(gy);
  const float *ps = loom_tensor_ptr(stats);
  char *pdx = dx ? loom_tensor_ptr(dx) : NULL;
  loom_status st = LOOM_OK;
#pragma omp parallel if (rows * D >= LOOM_CPU_PAR_MIN)
  {
    float *r = loom_sys_malloc((size_t)D * 3 * sizeof(float));
    if (!r) {
#pragma omp atomic write
      st = LOOM_ERR_OOM;
    } else {
      float *g = r + D, *xh = r + 2 * D;
#pragma omp for schedule(static)
      for (int64_t blk = 0; blk < blocks; blk++) {
        float *pdw = sums ? part + blk * 2 * D : NULL, *pdb = pdw ? pdw + D : NULL;
        if (sums) memset(pdw, 0, (size_t)D * 2 * sizeof(float));
        int64_t end = (blk + 1) * BLOCK_ROWS < rows ? (blk + 1) * BLOCK_ROWS : rows;
        for (int64_t i = blk * BLOCK_ROWS; i < end; i++) {
          float mean = ps[2 * i], rstd = ps[2 * i + 1];
          /* f32 x and dy are read where they are, an f32 dx written there. */
          const float *xr = loom_cpu_span_f32(px, x->dtype, i * D, D, xh);
          const float *gr = loom_cpu_span_f32(pg, gy->dtype, i * D, D, g);
          for (int64_t j = 0; j < D; j++) xh[j] = (xr[j] - mean) * rstd;
          if (sums)
            for (int64_t j = 0; j < D; j++) {
              pdw[j] += gr[j] * xh[j];
              pdb[j] += gr[j];
            }
          if (!pdx) continue;
          if (pw) {
            for (int64_t j = 0; j < D; j++) g[j] = gr[j] * pw[j];
            gr = g;
          }
          double sg, sgx;
          loom_cpu_sum_dot_f64(gr, xh, D, &sg, &sgx);
          float mg = (float)(sg / (double)D), mgx = (float)(sgx / (double)D);
          float *dr = loom_cpu_out_f32(pdx, dx->dtype, i * D, r);
          for (int64_t j = 0; j < D; j++) dr[j] = rstd * (gr[j] - mg - xh[j] * mgx);
          loom_cpu_out_commit(pdx, dx->dtype, i * D, D, r);
        }
      }
    }
    loom_sys_free(r);
  }
  if (st == LOOM_OK && sums) {
    /* Blocks in order, in f64. */
    for (int k = 0; k < 2; k++) {
      loom_tensor *out = k ? db : dw;
      if (!out) continue;
      for (int64_t j0 = 0; j0 < D; j0 += 256) {
        int64_t m = D - j0 < 256 ? D - j0 : 256;
        float tmp[256];
        for (int64_t j = 0; j < m; j++) {
          double s = 0;
          for (int64_t blk = 0; blk < blocks; blk++) s += part[blk * 2 * D + k * D + j0 + j];
          tmp[j] = (float)s;
        }
        loom_cpu_store_f32((char *)loom_tensor_ptr(out) + (size_t)j0 * loom_dtype_size(out->dtype), out->dtype, 1, m, tmp);
      }
    }
  }
  loom_sys_free(pbuf);
  if (st != LOOM_OK) return loom_set_error(st, "layer_norm backward: out of host memory for a row of %lld", (long long)D);
  return LOOM_OK;
}
