/* elementwise_cpu.c — CPU kernels for elementwise ops with broadcasting and
 * for strided copies/casts. f32 runs straight on the data; f16/bf16 are
 * converted in short runs to f32, computed, and rounded back (the same
 * arithmetic the GPU does). */
#include <omp.h>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/elementwise_math.h"

#define RUN 256  /* elements converted per run for non-f32 dtypes */

/* Tight loops per op so the compiler vectorizes the common stride cases. */
#define BIN_LOOP(EXPR)                                                                  \
  if (sa == 1 && sb == 1) { for (int64_t j = 0; j < n; j++) { float x = a[j], y = b[j]; o[j] = (EXPR); } } \
  else if (sa == 1 && sb == 0) { float y = b[0]; for (int64_t j = 0; j < n; j++) { float x = a[j]; o[j] = (EXPR); } } \
  else if (sa == 0 && sb == 1) { float x = a[0]; for (int64_t j = 0; j < n; j++) { float y = b[j]; o[j] = (EXPR); } } \
  else { for (int64_t j = 0; j < n; j++) { float x = a[j * sa], y = b[j * sb]; o[j] = (EXPR); } }

static void bin_f32(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *o, int64_t n) {
  switch (op) {
    case LOOM_EW_ADD: BIN_LOOP(x + y); break;
    case LOOM_EW_SUB: BIN_LOOP(x - y); break;
    case LOOM_EW_MUL: BIN_LOOP(x * y); break;
    case LOOM_EW_DIV: BIN_LOOP(x / y); break;
    default: for (int64_t j = 0; j < n; j++) o[j] = loom_ew_binary(op, a[j * sa], b[j * sb]); break;
  }
}

#define UN_LOOP(EXPR) \
  if (sa == 1) { for (int64_t j = 0; j < n; j++) { float x = a[j]; o[j] = (EXPR); } } \
  else { for (int64_t j = 0; j < n; j++) { float x = a[j * sa]; o[j] = (EXPR); } }

static void un_f32(int op, float s, const float *a, int64_t sa, float *o, int64_t n) {
  switch (op) {
    case LOOM_EW_ADD_S: UN_LOOP(x + s); break;
    case LOOM_EW_MUL_S: UN_LOOP(x * s); break;
    case LOOM_EW_RELU: UN_LOOP(x > 0.0f ? x : 0.0f); break;
    case LOOM_EW_NEG: UN_LOOP(-x); break;
    default: for (int64_t j = 0; j < n; j++) o[j] = loom_ew_unary(op, a[j * sa], s); break;
  }
}

/* One output row of a binary op for any float dtype. */
static void bin_row(int op, loom_dtype dt, const char *pa, int64_t sa, const char *pb, int64_t sb, char *po,
                    int64_t so, int64_t n) {
  size_t es = loom_dtype_size(dt);
  if (dt == LOOM_F32 && so == 1) {
    bin_f32(op, (const float *)pa, sa, (const float *)pb, sb, (float *)po, n);
    return;
  }
  float ta[RUN], tb[RUN], to[RUN];
  for (int64_t j0 = 0; j0 < n; j0 += RUN) {
    int64_t m = n - j0 < RUN ? n - j0 : RUN;
    loom_cpu_load_f32(pa + (size_t)(j0 * sa) * es, dt, sa, m, ta);
    loom_cpu_load_f32(pb + (size_t)(j0 * sb) * es, dt, sb, m, tb);
    bin_f32(op, ta, 1, tb, 1, to, m);
    loom_cpu_store_f32(po + (size_t)(j0 * so) * es, dt, so, m, to);
  }
}

static void un_row(int op, float s, loom_dtype dt, const char *pa, int64_t sa, char *po, int64_t so, int64_t n) {
  size_t es = loom_dtype_size(dt);
  if (dt == LOOM_F32 && so == 1) {
    un_f32(op, s, (const float *)pa, sa, (float *)po, n);
    return;
  }
  float ta[RUN], to[RUN];
  for (int64_t j0 = 0; j0 < n; j0 += RUN) {
    int64_t m = n - j0 < RUN ? n - j0 : RUN;
    loom_cpu_load_f32(pa + (size_t)(j0 * sa) * es, dt, sa, m, ta);
    un_f32(op, s, ta, 1, to, m);
    loom_cpu_store_f32(po + (size_t)(j0 * so) * es, dt, so, m, to);
  }
}

loom_status loom_cpu_ew_binary(loom_op_args *a, int op) {
  loom_tensor *o = a->out[0], *x = a->in[0], *y = a->in[1];
  loom_tensor *ops[3] = {o, x, y};
  loom_iter it;
  loom_iter_init(&it, 3, ops);
  size_t es = loom_dtype_size(o->dtype);
  char *po = loom_tensor_ptr(o);
  const char *px = loom_tensor_ptr(x), *py = loom_tensor_ptr(y);
  int d = it.ndim - 1;
  int64_t s0 = it.strides[0][d], s1 = it.strides[1][d], s2 = it.strides[2][d];
  if (it.rows == 1) {
    /* One long run: chunk it so both cores work. */
    int64_t n = it.inner, chunk = 16384;
    int64_t nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n >= LOOM_CPU_PAR_MIN)
    for (int64_t c = 0; c < nchunks; c++) {
      int64_t j0 = c * chunk, m = n - j0 < chunk ? n - j0 : chunk;
      bin_row(op, o->dtype, px + (size_t)(j0 * s1) * es, s1, py + (size_t)(j0 * s2) * es, s2,
              po + (size_t)(j0 * s0) * es, s0, m);
    }
    return LOOM_OK;
  }
  int64_t total = it.rows * it.inner;
#pragma omp parallel for schedule(static) if (total >= LOOM_CPU_PAR_MIN)
  for (int64_t r = 0; r < it.rows; r++) {
    int64_t off[3];
    loom_iter_row_offsets(&it, r, off);
    bin_row(op, o->dtype, px + (size_t)off[1] * es, s1, py + (size_t)off[2] * es, s2, po + (size_t)off[0] * es, s0,
            it.inner);
  }
  return LOOM_OK;
}

loom_status loom_cpu_ew_unary(loom_op_args *a, int op) {
  loom_tensor *o = a->out[0], *x = a->in[0];
  loom_tensor *ops[2] = {o, x};
  loom_iter it;
  loom_iter_init(&it, 2, ops);
  size_t es = loom_dtype_size(o->dtype);
  char *po = loom_tensor_ptr(o);
  const char *px = loom_tensor_ptr(x);
  float s = (float)a->f[0];
  int d = it.ndim - 1;
  if (it.rows == 1) {
    /* One long run: chunk it so both cores work. */
    int64_t n = it.inner, chunk = 16384;
    int64_t nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n >= LOOM_CPU_PAR_MIN)
    for (int64_t c = 0; c < nchunks; c++) {
      int64_t j0 = c * chunk, m = n - j0 < chunk ? n - j0 : chunk;
      un_row(op, s, o->dtype, px + (size_t)(j0 * it.strides[1][d]) * es, it.strides[1][d],
             po + (size_t)(j0 * it.strides[0][d]) * es, it.strides[0][d], m);
    }
    return LOOM_OK;
  }
  int64_t total = it.rows * it.inner;
#pragma omp parallel for schedule(static) if (total >= LOOM_CPU_PAR_MIN)
  for (int64_t r = 0; r < it.rows; r++) {
    int64_t off[2];
    loom_iter_row_offsets(&it, r, off);
    un_row(op, s, o->dtype, px + (size_t)off[1] * es, it.strides[1][d], po + (size_t)off[0] * es, it.strides[0][d],
           it.inner);
  }
  return LOOM_OK;
}

/* Strided copy with dtype conversion: out (contiguous or not) <- in. */
loom_status loom_cpu_copy(loom_op_args *a) {
  loom_tensor *o = a->out[0], *x = a->in[0];
  loom_tensor *ops[2] = {o, x};
  loom_iter it;
  loom_iter_init(&it, 2, ops);
  size_t eo = loom_dtype_size(o->dtype), ex = loom_dtype_size(x->dtype);
  char *po = loom_tensor_ptr(o);
  const char *px = loom_tensor_ptr(x);
  int d = it.ndim - 1;
  bool ints = !loom_dtype_is_float(o->dtype) || !loom_dtype_is_float(x->dtype);
  int64_t total = it.rows * it.inner;
#pragma omp parallel for schedule(static) if (total >= LOOM_CPU_PAR_MIN && it.rows > 1)
  for (int64_t r = 0; r < it.rows; r++) {
    int64_t off[2];
    loom_iter_row_offsets(&it, r, off);
    char *ro = po + (size_t)off[0] * eo;
    const char *rx = px + (size_t)off[1] * ex;
    int64_t so = it.strides[0][d], sx = it.strides[1][d];
    if (o->dtype == x->dtype && so == 1 && sx == 1) {
      memcpy(ro, rx, (size_t)it.inner * eo);
    } else if (ints) {
      /* Integers travel through double: exact for |v| < 2^53. */
      for (int64_t j = 0; j < it.inner; j++)
        loom_cpu_store_f64(ro, o->dtype, j * so, loom_cpu_load_f64(rx, x->dtype, j * sx));
    } else {
      float t[RUN];
      for (int64_t j0 = 0; j0 < it.inner; j0 += RUN) {
        int64_t m = it.inner - j0 < RUN ? it.inner - j0 : RUN;
        loom_cpu_load_f32(rx + (size_t)(j0 * sx) * ex, x->dtype, sx, m, t);
        loom_cpu_store_f32(ro + (size_t)(j0 * so) * eo, o->dtype, so, m, t);
      }
    }
  }
  return LOOM_OK;
}
