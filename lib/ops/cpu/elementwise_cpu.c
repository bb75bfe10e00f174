/* elementwise_cpu.c — CPU kernels for elementwise ops with broadcasting and
 * for strided copies/casts. f32 runs straight on the data; f16/bf16 are
 * converted in short runs to f32, computed, and rounded back (the same
 * arithmetic the GPU does), contiguous add/sub/mul/div in registers on AVX2
 * (ew16_x86.h). */
#include <omp.h>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/ew16_x86.h"
#include "ops/elementwise_math.h"

#define RUN 256  /* elements converted per run for non-f32 dtypes */

/* Tight loops per op so the compiler vectorizes the common stride cases. */
#define BIN_LOOP(EXPR)                                                                  \
  if (sa == 1 && sb == 1) { for (int64_t j = 0; j < n; j++) { float x = a[j], y = b[j]; o[j] = (EXPR); } } \
  else if (sa == 1 && sb == 0) { float y = b[0]; for (int64_t j = 0; j < n; j++) { float x = a[j]; o[j] = (EXPR); } } \
  else if (sa == 0 && sb == 1) { float x = a[0]; for (int64_t j = 0; j < n; j++) { float y = b[j]; o[j] = (EXPR); } } \
  else { for (int64_t j = 0; j < n; j++) { float x = a[j * sa], y = b[j * sb]; o[j] = (EXPR); } }

/* GELU and its gradient over contiguous f32, the one elementwise pair with
 * real arithmetic per element: the same C loop compiled for AVX-512 and
 * AVX2 too (8 or 16 lanes instead of baseline x86-64's 4), picked by the
 * ISA level the GEMMs use (cpu_isa.h). FMA may contract the polynomial
 * there: results move within the bound the dense-range test holds. */
#define GELU_LOOPS(SUFFIX, ATTR)                                                                         \
  ATTR static void gelu_fwd_##SUFFIX(const float *a, float *o, int64_t n) {                            \
    for (int64_t j = 0; j < n; j++) o[j] = loom_gelu_f(a[j]);                                          \
  }                                                                                                    \
  ATTR static void gelu_bwd_##SUFFIX(const float *dy, const float *x, float *o, int64_t n) {          \
    for (int64_t j = 0; j < n; j++) o[j] = dy[j] * loom_gelu_grad_f(x[j]);                             \
  }
GELU_LOOPS(base, )
#if defined(__x86_64__) && defined(__GNUC__)
GELU_LOOPS(avx2, __attribute__((target("avx2,fma"))))
GELU_LOOPS(avx512, __attribute__((target("avx512f"))))
#endif

static void gelu_fwd(const float *a, float *o, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  loom_cpu_isa_level l = loom_cpu_isa_level_now();
  if (l >= LOOM_CPU_ISA_AVX512) gelu_fwd_avx512(a, o, n);
  else if (l >= LOOM_CPU_ISA_AVX2) gelu_fwd_avx2(a, o, n);
  else
#endif
    gelu_fwd_base(a, o, n);
}

static void gelu_bwd(const float *dy, const float *x, float *o, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  loom_cpu_isa_level l = loom_cpu_isa_level_now();
  if (l >= LOOM_CPU_ISA_AVX512) gelu_bwd_avx512(dy, x, o, n);
  else if (l >= LOOM_CPU_ISA_AVX2) gelu_bwd_avx2(dy, x, o, n);
  else
#endif
    gelu_bwd_base(dy, x, o, n);
}

static void bin_f32(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *o, int64_t n) {
  switch (op) {
    case LOOM_EW_ADD: BIN_LOOP(x + y); break;
    case LOOM_EW_SUB: BIN_LOOP(x - y); break;
    case LOOM_EW_MUL: BIN_LOOP(x * y); break;
    case LOOM_EW_DIV: BIN_LOOP(x / y); break;
    case LOOM_EW_GELU_BW:
      if (sa == 1 && sb == 1) {
        gelu_bwd(a, b, o, n);
        break;
      }
      for (int64_t j = 0; j < n; j++) o[j] = loom_ew_binary(op, a[j * sa], b[j * sb]);
      break;
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
    case LOOM_EW_GELU:
      if (sa == 1) gelu_fwd(a, o, n);
      else UN_LOOP(loom_gelu_f(x));
      break;
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
  if (sa == 1 && sb == 1 && so == 1 && loom_ew16_avx2_ok(dt) &&
      loom_ew16_binary_avx2(op, (const uint16_t *)pa, (const uint16_t *)pb, (uint16_t *)po, n, dt))
    return;
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

/* One strided elementwise kernel: operands ops[0] (output) .. ops[nops-1],
 * visited as runs of `n` elements starting at element offsets off[k] with
 * inner strides st[k]. */
typedef struct ew_ctx {
  int op;
  float scalar;
  loom_tensor *const *ops;
} ew_ctx;
typedef void (*run_fn)(const ew_ctx *c, const int64_t *off, const int64_t *st, int64_t n);

/* Walk the iteration in runs, spread over the cores: rows of the coalesced
 * iteration, or chunks of one long row when there is a single row. */
static void for_each_run(int nops, loom_tensor *const *ops, run_fn fn, const ew_ctx *c) {
  loom_iter it;
  loom_iter_init(&it, nops, ops);
  int d = it.ndim - 1;
  int64_t st[3] = {0, 0, 0};
  for (int k = 0; k < nops; k++) st[k] = it.strides[k][d];
  if (it.rows * it.inner < LOOM_CPU_PAR_MIN) {
    /* Below the parallel threshold, stay out of OpenMP altogether: even an
     * `if (false)` region enters libgomp, which costs more than a small op. */
    for (int64_t r = 0; r < it.rows; r++) {
      int64_t off[3];
      loom_iter_row_offsets(&it, r, off);
      fn(c, off, st, it.inner);
    }
    return;
  }
  if (it.rows == 1) {
    int64_t n = it.inner, chunk = 16384, nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (n >= LOOM_CPU_PAR_MIN)
    for (int64_t ch = 0; ch < nchunks; ch++) {
      int64_t j0 = ch * chunk, off[3] = {0, 0, 0};
      for (int k = 0; k < nops; k++) off[k] = j0 * st[k];
      fn(c, off, st, n - j0 < chunk ? n - j0 : chunk);
    }
    return;
  }
#pragma omp parallel for schedule(static) if (it.rows * it.inner >= LOOM_CPU_PAR_MIN)
  for (int64_t r = 0; r < it.rows; r++) {
    int64_t off[3];
    loom_iter_row_offsets(&it, r, off);
    fn(c, off, st, it.inner);
  }
}

static char *at(const loom_tensor *t, int64_t off) {
  return (char *)loom_tensor_ptr(t) + (size_t)off * loom_dtype_size(t->dtype);
}

static void binary_run(const ew_ctx *c, const int64_t *off, const int64_t *st, int64_t n) {
  bin_row(c->op, c->ops[0]->dtype, at(c->ops[1], off[1]), st[1], at(c->ops[2], off[2]), st[2], at(c->ops[0], off[0]),
          st[0], n);
}

static void unary_run(const ew_ctx *c, const int64_t *off, const int64_t *st, int64_t n) {
  un_row(c->op, c->scalar, c->ops[0]->dtype, at(c->ops[1], off[1]), st[1], at(c->ops[0], off[0]), st[0], n);
}

static void copy_run(const ew_ctx *c, const int64_t *off, const int64_t *st, int64_t n) {
  const loom_tensor *o = c->ops[0], *x = c->ops[1];
  char *ro = at(o, off[0]);
  const char *rx = at(x, off[1]);
  size_t eo = loom_dtype_size(o->dtype), ex = loom_dtype_size(x->dtype);
  int64_t so = st[0], sx = st[1];
  if (o->dtype == x->dtype && so == 1 && sx == 1) {
    memcpy(ro, rx, (size_t)n * eo);
  } else if (!loom_dtype_is_float(o->dtype) || !loom_dtype_is_float(x->dtype)) {
    /* Integers travel through double: exact for |v| < 2^53. */
    for (int64_t j = 0; j < n; j++) loom_cpu_store_f64(ro, o->dtype, j * so, loom_cpu_load_f64(rx, x->dtype, j * sx));
  } else if (sx == 0) {
    /* One value broadcast (a sum's gradient, expanded): converted once,
       then stored in runs (element by element, this was a scalar loop). */
    float t[RUN];
    loom_cpu_load_f32(rx, x->dtype, 1, 1, t);
    for (int64_t j = 1; j < (n < RUN ? n : RUN); j++) t[j] = t[0];
    for (int64_t j0 = 0; j0 < n; j0 += RUN)
      loom_cpu_store_f32(ro + (size_t)(j0 * so) * eo, o->dtype, so, n - j0 < RUN ? n - j0 : RUN, t);
  } else {
    float t[RUN];
    for (int64_t j0 = 0; j0 < n; j0 += RUN) {
      int64_t m = n - j0 < RUN ? n - j0 : RUN;
      loom_cpu_load_f32(rx + (size_t)(j0 * sx) * ex, x->dtype, sx, m, t);
      loom_cpu_store_f32(ro + (size_t)(j0 * so) * eo, o->dtype, so, m, t);
    }
  }
}

loom_status loom_cpu_ew_binary(loom_op_args *a, int op) {
  loom_tensor *ops[3] = {a->out[0], a->in[0], a->in[1]};
  ew_ctx c = {op, 0.0f, ops};
  for_each_run(3, ops, binary_run, &c);
  return LOOM_OK;
}

loom_status loom_cpu_ew_unary(loom_op_args *a, int op) {
  loom_tensor *ops[2] = {a->out[0], a->in[0]};
  ew_ctx c = {op, (float)a->f[0], ops};
  for_each_run(2, ops, unary_run, &c);
  return LOOM_OK;
}

/* Strided copy with dtype conversion: out (contiguous or not) <- in. */
loom_status loom_cpu_copy(loom_op_args *a) {
  loom_tensor *ops[2] = {a->out[0], a->in[0]};
  ew_ctx c = {0, 0.0f, ops};
  for_each_run(2, ops, copy_run, &c);
  return LOOM_OK;
}
