/* reduce_cpu.c — CPU sum / max / argmax over any set of dims.
 *
 * Fast paths work in place on contiguous f32 when the reduced dims are a
 * trailing block (row reductions: softmax-style) or a leading block (column
 * reductions: bias gradients). Anything else is first gathered into a
 * contiguous f32 buffer with the reduced dims last. Sums accumulate in
 * double, a row in fixed chunks of independent lanes (sum_f64.h): the same
 * bits for any thread count. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/sum_f64.h"
#include "core/sys.h"

enum { RED_SUM, RED_MAX };

/* Gather x into a new contiguous f32 tensor with reduced dims moved last.
 * Returns rows (kept numel) and len (reduced numel). */
static loom_tensor *gather_reduced_last(loom_tensor *x, unsigned mask, int64_t *rows, int64_t *len) {
  int64_t shape[LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS];
  int n = 0;
  *rows = 1;
  *len = 1;
  for (int d = 0; d < x->ndim; d++)
    if (!(mask >> d & 1)) { shape[n] = x->shape[d]; strides[n] = x->strides[d]; *rows *= x->shape[d]; n++; }
  for (int d = 0; d < x->ndim; d++)
    if (mask >> d & 1) { shape[n] = x->shape[d]; strides[n] = x->strides[d]; *len *= x->shape[d]; n++; }
  loom_tensor *view = loom_tensor_new_header(x->storage, x->offset, x->dtype, n, shape, strides);
  if (!view) return NULL;
  loom_tensor *tmp = loom_tensor_alloc_raw(n, shape, LOOM_F32, loom_cpu());
  if (!tmp) { loom_tensor_release(view); return NULL; }
  loom_op_args ca = {.in = {view}, .n_in = 1, .out = {tmp}, .n_out = 1};
  loom_cpu_copy(&ca);
  loom_tensor_release(view);
  return tmp;
}

/* Is the reduced set a trailing (1) or leading (2) block of a contiguous x? */
static int block_kind(const loom_tensor *x, unsigned mask) {
  if (x->dtype != LOOM_F32 || !loom_tensor_is_contiguous(x)) return 0;
  int nd = x->ndim, first = -1, last = -1;
  for (int d = 0; d < nd; d++)
    if (mask >> d & 1) { if (first < 0) first = d; last = d; }
  if (first < 0) return 0;
  for (int d = first; d <= last; d++)
    if (!(mask >> d & 1)) return 0;
  if (last == nd - 1) return 1;
  if (first == 0) return 2;
  return 0;
}

/* A row's sum: chunks of SUM_CHUNK in order, each in sum_f64.h's lanes.
 * Fixed by len alone, so a long row may be split over the threads by
 * chunk (sum_long_row) and still give these bits. */
#define SUM_CHUNK 4096
static double chunk_sum(const float *p, int64_t len, int64_t c) {
  const int64_t c0 = c * SUM_CHUNK;
  return loom_cpu_sum_f64(p + c0, len - c0 < SUM_CHUNK ? len - c0 : SUM_CHUNK);
}
static double sum_row(const float *p, int64_t len) {
  double acc = 0;
  for (int64_t c = 0; c * SUM_CHUNK < len; c++) acc += chunk_sum(p, len, c);
  return acc;
}

/* sum_row with the chunks on all threads (sum_all over a big tensor was one
 * thread's chain of dependent adds); false if out of memory. */
static bool sum_long_row(const float *p, int64_t len, float *out) {
  const int64_t nch = (len + SUM_CHUNK - 1) / SUM_CHUNK;
  double *part = loom_sys_malloc((size_t)nch * sizeof *part);
  if (!part) return false;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nch; c++) part[c] = chunk_sum(p, len, c);
  double acc = 0;
  for (int64_t c = 0; c < nch; c++) acc += part[c];
  loom_sys_free(part);
  *out = (float)acc;
  return true;
}

static void reduce_rows(int kind, const float *x, int64_t rows, int64_t len, float *outbuf) {
  if (kind == RED_SUM && rows == 1 && len >= LOOM_CPU_PAR_MIN && sum_long_row(x, len, outbuf)) return;
#pragma omp parallel for schedule(static) if (rows * len >= LOOM_CPU_PAR_MIN && rows > 1)
  for (int64_t r = 0; r < rows; r++) {
    const float *p = x + r * len;
    if (kind == RED_SUM) {
      outbuf[r] = (float)sum_row(p, len);
    } else {
      float m = -INFINITY;
      for (int64_t j = 0; j < len; j++) {
        if (p[j] > m || isnan(p[j])) m = p[j];
        if (isnan(m)) break;
      }
      outbuf[r] = m;
    }
  }
}

static void reduce_cols(int kind, const float *x, int64_t len, int64_t cols, float *outbuf) {
  /* out[j] = reduce_i x[i*cols + j]; threads split the columns. */
  int64_t chunk = 1024;
  int64_t nch = (cols + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (len * cols >= LOOM_CPU_PAR_MIN && nch > 1)
  for (int64_t c = 0; c < nch; c++) {
    int64_t j0 = c * chunk, m = cols - j0 < chunk ? cols - j0 : chunk;
    double acc[1024];
    float mx[1024];
    for (int64_t j = 0; j < m; j++) { acc[j] = 0; mx[j] = -INFINITY; }
    for (int64_t i = 0; i < len; i++) {
      const float *p = x + i * cols + j0;
      if (kind == RED_SUM) for (int64_t j = 0; j < m; j++) acc[j] += p[j];
      else for (int64_t j = 0; j < m; j++) if (p[j] > mx[j] || isnan(p[j])) mx[j] = isnan(mx[j]) ? mx[j] : p[j];
    }
    for (int64_t j = 0; j < m; j++) outbuf[j0 + j] = kind == RED_SUM ? (float)acc[j] : mx[j];
  }
}

static loom_status reduce(loom_op_args *a, int kind) {
  loom_tensor *x = a->in[0], *o = a->out[0];
  unsigned mask = (unsigned)a->i[0];
  int64_t onum = loom_shape_numel(o->ndim, o->shape);
  int64_t xnum = loom_shape_numel(x->ndim, x->shape);
  float *obuf = o->dtype == LOOM_F32 ? (float *)loom_tensor_ptr(o) : loom_sys_malloc((size_t)(onum ? onum : 1) * sizeof(float));
  if (!obuf) return loom_set_error(LOOM_ERR_OOM, "reduce: out of host memory");
  if (xnum == 0) {
    for (int64_t r = 0; r < onum; r++) obuf[r] = kind == RED_SUM ? 0.0f : -INFINITY;
  } else {
    int bk = block_kind(x, mask);
    if (bk == 1) {
      reduce_rows(kind, loom_tensor_ptr(x), onum, xnum / (onum ? onum : 1), obuf);
    } else if (bk == 2) {
      reduce_cols(kind, loom_tensor_ptr(x), xnum / (onum ? onum : 1), onum, obuf);
    } else {
      int64_t rows, len;
      loom_tensor *tmp = gather_reduced_last(x, mask, &rows, &len);
      if (!tmp) {
        if (obuf != loom_tensor_ptr(o)) loom_sys_free(obuf);
        return loom_last_status();
      }
      reduce_rows(kind, loom_tensor_ptr(tmp), rows, len, obuf);
      loom_tensor_release(tmp);
    }
  }
  if (obuf != loom_tensor_ptr(o)) {
    loom_cpu_store_f32(loom_tensor_ptr(o), o->dtype, 1, onum, obuf);
    loom_sys_free(obuf);
  }
  return LOOM_OK;
}

loom_status loom_cpu_sum(loom_op_args *a) { return reduce(a, RED_SUM); }
loom_status loom_cpu_max(loom_op_args *a) { return reduce(a, RED_MAX); }

loom_status loom_cpu_argmax(loom_op_args *a) {
  loom_tensor *x = a->in[0], *o = a->out[0];
  int dim = (int)a->i[0];
  int64_t rows, len;
  loom_tensor *tmp = gather_reduced_last(x, 1u << dim, &rows, &len);
  if (!tmp) return loom_last_status();
  const float *p = loom_tensor_ptr(tmp);
  int64_t *out = loom_tensor_ptr(o);
#pragma omp parallel for schedule(static) if (rows * len >= LOOM_CPU_PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    const float *row = p + r * len;
    int64_t best = 0;
    for (int64_t j = 1; j < len; j++)
      if (row[j] > row[best] || (isnan(row[j]) && !isnan(row[best]))) best = j;
    out[r] = best;
  }
  loom_tensor_release(tmp);
  return LOOM_OK;
}
