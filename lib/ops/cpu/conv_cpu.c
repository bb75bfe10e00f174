/* conv_cpu.c — the conv2d CPU kernels the op table points at: bf16 handed
 * to conv_bf16.c where the CPU has AVX512_BF16, else operand
 * preparation (f16/bf16 widened to f32, the weight gathered from any strides,
 * the fused ReLU's mask applied to dy, the bias gradient), then one of the
 * convolution paths of conv_cpu.h, then one rounding of each result to its
 * dtype (f32 accumulation, as tensor cores do). The direct and Winograd
 * paths take f16/bf16 activations as they are and widen / round them as
 * they go (loom_conv_buf): the same values without full-size f32 copies,
 * which cost a mixed-precision ResNet-20 step a third of its time. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "core/sys.h"

/* t's elements as f32 in t's own memory order (t is dense: NCHW or NHWC):
 * borrowed when t already is f32, else a malloc'd copy (*owned). */
static loom_status dense_f32(const loom_tensor *t, float **out, bool *owned) {
  int64_t n = loom_shape_numel(t->ndim, t->shape);
  *owned = false;
  if (t->dtype == LOOM_F32) {
    *out = loom_tensor_ptr(t);
    return LOOM_OK;
  }
  float *p = loom_sys_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p)
    return loom_set_error(LOOM_ERR_OOM, "conv2d: out of host memory widening a %s operand", loom_dtype_name(t->dtype));
  const char *src = loom_tensor_ptr(t);
  size_t es = loom_dtype_size(t->dtype);
  const int64_t RUN = 1 << 16;
#pragma omp parallel for schedule(static) if (n >= LOOM_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i += RUN) loom_cpu_load_f32(src + (size_t)i * es, t->dtype, 1, n - i < RUN ? n - i : RUN, p + i);
  *out = p;
  *owned = true;
  return LOOM_OK;
}

/* The weight as f32 [O][Cg][KH][KW], gathered through its strides (always a
 * copy: it is small, and the kernels may reorder it further). */
static float *weight_f32(const loom_tensor *w) {
  int64_t O = w->shape[0], C = w->shape[1], KH = w->shape[2], KW = w->shape[3];
  int64_t n = O * C * KH * KW;
  float *p = loom_sys_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p) {
    loom_set_error(LOOM_ERR_OOM, "conv2d: out of host memory for the weight");
    return NULL;
  }
  const char *base = loom_tensor_ptr(w);
  size_t es = loom_dtype_size(w->dtype);
  float *d = p;
  for (int64_t o = 0; o < O; o++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t kh = 0; kh < KH; kh++) {
        int64_t off = o * w->strides[0] + c * w->strides[1] + kh * w->strides[2];
        loom_cpu_load_f32(base + (size_t)off * es, w->dtype, w->strides[3], KW, d);
        d += KW;
      }
  return p;
}

/* Store f32 src (n elements, dense) into t (dense, same memory order). */
static void store_dense(loom_tensor *t, const float *src, int64_t n) {
  char *dst = loom_tensor_ptr(t);
  if ((const void *)dst == (const void *)src) return;
  size_t es = loom_dtype_size(t->dtype);
  const int64_t RUN = 1 << 16;
#pragma omp parallel for schedule(static) if (n >= LOOM_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i += RUN) loom_cpu_store_f32(dst + (size_t)i * es, t->dtype, 1, n - i < RUN ? n - i : RUN, src + i);
}

/* f32 buffer for output t: t's own memory when f32, else scratch. */
static float *out_f32(loom_tensor *t) {
  if (t->dtype == LOOM_F32) return loom_tensor_ptr(t);
  int64_t n = loom_shape_numel(t->ndim, t->shape);
  float *p = loom_sys_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p) loom_set_error(LOOM_ERR_OOM, "conv2d: out of host memory for a %s result", loom_dtype_name(t->dtype));
  return p;
}

static void out_done(loom_tensor *t, float *p) {
  if (!p) return;
  store_dense(t, p, loom_shape_numel(t->ndim, t->shape));
  if (p != loom_tensor_ptr(t)) loom_sys_free(p);
}

/* The fastest path that handles g: Winograd (3x3 stride 1, NHWC; f32, or f16/bf16
 * activations widened as read), depthwise kernels, the direct kernels,
 * 1x1 GEMMs (where no direct kernel runs: they lose to the AVX-512 ones), or
 * im2col + GEMM (everything). */
loom_conv_path loom_conv_cpu_choose(const loom_conv_geom *g) {
  if (loom_conv_winograd_applies(g)) return LOOM_CONV_PATH_WINOGRAD;
  if (loom_conv_depthwise_applies(g)) return LOOM_CONV_PATH_DEPTHWISE;
  if (loom_conv_direct_applies(g)) return LOOM_CONV_PATH_DIRECT;
  if (loom_conv_pointwise_applies(g)) return LOOM_CONV_PATH_POINTWISE;
  return LOOM_CONV_PATH_GEMM;
}

const char *loom_conv_path_name(loom_conv_path p) {
  switch (p) {
    case LOOM_CONV_PATH_WINOGRAD: return "winograd";
    case LOOM_CONV_PATH_DEPTHWISE: return "depthwise";
    case LOOM_CONV_PATH_DIRECT: return "direct";
    case LOOM_CONV_PATH_POINTWISE: return "pointwise";
    case LOOM_CONV_PATH_GEMM: return "gemm";
  }
  return "?";
}

static loom_status run_forward(loom_conv_path path, const loom_conv_geom *g, const float *x, const float *w,
                               const float *b, float *y) {
  switch (path) {
    case LOOM_CONV_PATH_WINOGRAD:
      return loom_conv_winograd_forward(g, loom_conv_buf_f32(x), w, b, loom_conv_buf_f32(y));
    case LOOM_CONV_PATH_DEPTHWISE: return loom_conv_depthwise_forward(g, x, w, b, y);
    case LOOM_CONV_PATH_DIRECT:
      return loom_conv_direct_forward(g, loom_conv_buf_f32(x), w, b, loom_conv_buf_f32(y));
    case LOOM_CONV_PATH_POINTWISE: return loom_conv_pointwise_forward(g, x, w, b, y);
    case LOOM_CONV_PATH_GEMM: break;
  }
  return loom_conv_gemm_forward(g, x, w, b, y);
}

static loom_status run_backward_data(loom_conv_path path, const loom_conv_geom *g, const float *dy, const float *w,
                                     float *dx) {
  switch (path) {
    case LOOM_CONV_PATH_WINOGRAD:
      return loom_conv_winograd_backward_data(g, loom_conv_buf_f32(dy), w, loom_conv_buf_f32(dx));
    case LOOM_CONV_PATH_DEPTHWISE: return loom_conv_depthwise_backward_data(g, dy, w, dx);
    case LOOM_CONV_PATH_DIRECT:
      return loom_conv_direct_backward_data(g, loom_conv_buf_f32(dy), w, loom_conv_buf_f32(dx));
    case LOOM_CONV_PATH_POINTWISE: return loom_conv_pointwise_backward_data(g, dy, w, dx);
    case LOOM_CONV_PATH_GEMM: break;
  }
  return loom_conv_gemm_backward_data(g, dy, w, dx);
}

static loom_status run_backward_filter(loom_conv_path path, const loom_conv_geom *g, const float *x, const float *dy,
                                       float *dw) {
  switch (path) {
    case LOOM_CONV_PATH_WINOGRAD:
      return loom_conv_winograd_backward_filter(g, loom_conv_buf_f32(x), loom_conv_buf_f32(dy), dw);
    case LOOM_CONV_PATH_DEPTHWISE: return loom_conv_depthwise_backward_filter(g, x, dy, dw);
    case LOOM_CONV_PATH_DIRECT:
      return loom_conv_direct_backward_filter(g, loom_conv_buf_f32(x), loom_conv_buf_f32(dy), dw);
    case LOOM_CONV_PATH_POINTWISE: return loom_conv_pointwise_backward_filter(g, x, dy, dw);
    case LOOM_CONV_PATH_GEMM: break;
  }
  return loom_conv_gemm_backward_filter(g, x, dy, dw);
}

static loom_status geom_of(const loom_op_args *a, loom_tensor *x, loom_tensor *w, loom_tensor *b,
                           loom_conv_geom *g) {
  return loom_conv_geom_make("conv2d", x, w, b, a->i, g);
}

loom_status loom_cpu_conv2d(loom_op_args *a) {
  LOOM_TRY(loom_cpu_isa_check());
  loom_tensor *x = a->in[0], *w = a->in[1], *b = a->n_in > 2 ? a->in[2] : NULL, *y = a->out[0];
  loom_conv_geom g;
  LOOM_TRY(geom_of(a, x, w, b, &g));
  if (loom_shape_numel(4, y->shape) == 0) return LOOM_OK;
  if (loom_conv_bf16_applies(&g, a, false)) return loom_conv_bf16_forward(&g, a);
  const loom_conv_path path = loom_conv_cpu_choose(&g);
  /* The direct and Winograd kernels read and write activations of any
     float dtype as they are (widened and rounded as they go). */
  const bool direct = path == LOOM_CONV_PATH_DIRECT || path == LOOM_CONV_PATH_WINOGRAD;
  bool xo = false;
  float *xf = NULL, *wf = NULL, *bf = NULL;
  loom_status st = direct ? LOOM_OK : dense_f32(x, &xf, &xo);
  if (st == LOOM_OK && !(wf = weight_f32(w))) st = loom_last_status();
  if (st == LOOM_OK && b) {
    bf = loom_sys_malloc((size_t)g.O * sizeof(float));
    if (!bf) st = loom_set_error(LOOM_ERR_OOM, "conv2d: out of host memory for the bias");
    else loom_cpu_load_f32(loom_tensor_ptr(b), b->dtype, b->strides[0], g.O, bf);
  }
  if (st == LOOM_OK && direct) {
    const loom_conv_buf xb = {loom_tensor_ptr(x), x->dtype}, yb = {loom_tensor_ptr(y), y->dtype};
    st = path == LOOM_CONV_PATH_WINOGRAD ? loom_conv_winograd_forward(&g, xb, wf, bf, yb)
                                         : loom_conv_direct_forward(&g, xb, wf, bf, yb);
    loom_sys_free(wf);
    loom_sys_free(bf);
    return st;
  }
  float *yf = st == LOOM_OK ? out_f32(y) : NULL;
  if (st == LOOM_OK && !yf) st = loom_last_status();
  if (st == LOOM_OK)
    st = run_forward(path, &g, xf, wf, bf, yf);
  if (st == LOOM_OK) out_done(y, yf);
  else if (yf != loom_tensor_ptr(y)) loom_sys_free(yf);
  if (xo) loom_sys_free(xf);
  loom_sys_free(wf);
  loom_sys_free(bf);
  return st;
}

/* dz = dy masked by y > 0 (the fused ReLU), in place over dy's f32 buffer
 * when allowed; db[o] = sums of dz per channel (in double). */
static void relu_mask(float *dz, const float *dy, const loom_tensor *y, int64_t n) {
  if (y->dtype == LOOM_F32) {
    const float *yp = loom_tensor_ptr(y);
#pragma omp parallel for schedule(static) if (n >= LOOM_CPU_PAR_MIN)
    for (int64_t i = 0; i < n; i++) dz[i] = yp[i] > 0.0f ? dy[i] : 0.0f;
    return;
  }
  const char *yp = loom_tensor_ptr(y);
  size_t es = loom_dtype_size(y->dtype);
  const int64_t RUN = 4096;
#pragma omp parallel for schedule(static) if (n >= LOOM_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i += RUN) {
    float t[4096];
    int64_t m = n - i < RUN ? n - i : RUN;
    loom_cpu_load_f32(yp + (size_t)i * es, y->dtype, 1, m, t);
    for (int64_t j = 0; j < m; j++) dz[i + j] = t[j] > 0.0f ? dy[i + j] : 0.0f;
  }
}

static void bias_grad(const loom_conv_geom *g, const float *dz, float *db) {
  const int64_t P = g->OH * g->OW, O = g->O;
  double *acc = loom_sys_calloc((size_t)O, sizeof(double));
  if (!acc) {
    /* No memory for the accumulators: sum in f32 directly. */
    for (int64_t o = 0; o < O; o++) db[o] = 0.0f;
    for (int64_t n = 0; n < g->N; n++)
      for (int64_t p = 0; p < P; p++)
        for (int64_t o = 0; o < O; o++)
          db[o] += g->nhwc ? dz[(n * P + p) * O + o] : dz[(n * O + o) * P + p];
    return;
  }
  if (g->nhwc) {
    /* Rows of O channels: f32 partial sums per block of rows, then double. */
    const int64_t rows = g->N * P, BLK = 256;
    float *part = loom_sys_malloc((size_t)O * sizeof(float));
    for (int64_t r0 = 0; r0 < rows; r0 += BLK) {
      int64_t r1 = r0 + BLK < rows ? r0 + BLK : rows;
      if (part) {
        memset(part, 0, (size_t)O * sizeof(float));
        for (int64_t r = r0; r < r1; r++)
          for (int64_t o = 0; o < O; o++) part[o] += dz[r * O + o];
        for (int64_t o = 0; o < O; o++) acc[o] += part[o];
      } else {
        for (int64_t r = r0; r < r1; r++)
          for (int64_t o = 0; o < O; o++) acc[o] += dz[r * O + o];
      }
    }
    loom_sys_free(part);
  } else {
#pragma omp parallel for schedule(static) if (g->N * O * P >= LOOM_CPU_PAR_MIN)
    for (int64_t o = 0; o < O; o++) {
      double s = 0;
      for (int64_t n = 0; n < g->N; n++) {
        const float *pl = dz + (n * O + o) * P;
        float f = 0.0f;
        for (int64_t p = 0; p < P; p++) f += pl[p];
        s += f;
      }
      acc[o] = s;
    }
  }
  for (int64_t o = 0; o < O; o++) db[o] = (float)acc[o];
  loom_sys_free(acc);
}

loom_status loom_cpu_conv2d_backward(loom_op_args *a) {
  LOOM_TRY(loom_cpu_isa_check());
  loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2], *y = a->n_in > 3 ? a->in[3] : NULL;
  loom_tensor *dx = a->out[0], *dw = a->out[1], *db = a->out[2];
  loom_conv_geom g;
  LOOM_TRY(geom_of(a, x, w, NULL, &g));
  bool relu = g.act == LOOM_ACT_RELU;
  int64_t ny = loom_shape_numel(4, gy->shape);
  loom_status st = LOOM_OK;

  /* dz: gy as f32, masked by the ReLU; over gy itself when it is f32 and ours. */
  if (ny == 0) {
    /* No output elements: every gradient is zero. */
    for (int k = 0; k < 3; k++) {
      loom_tensor *t = a->out[k];
      size_t bytes = t ? (size_t)loom_shape_numel(t->ndim, t->shape) * loom_dtype_size(t->dtype) : 0;
      if (bytes) memset(loom_tensor_ptr(t), 0, bytes);
    }
    return LOOM_OK;
  }
  if (loom_conv_bf16_applies(&g, a, true)) return loom_conv_bf16_backward(&g, a);
  /* The direct and Winograd paths read gy as it is (widened as they go)
     unless the ReLU mask changes it or the bias gradient sums it: then, as
     the other paths, they read dz, gy widened whole. */
  const loom_conv_path path = loom_conv_cpu_choose(&g);
  const bool winograd = path == LOOM_CONV_PATH_WINOGRAD, direct = path == LOOM_CONV_PATH_DIRECT || winograd;
  const bool whole_dz = !direct || relu || db;
  bool dzo = false;
  float *dz = NULL;
  if (whole_dz) LOOM_TRY(dense_f32(gy, &dz, &dzo));
  if (relu) {
    if (!dzo && !a->i[LOOM_CONV_I_GY_OWNED]) {
      float *c = loom_sys_malloc((size_t)(ny > 0 ? ny : 1) * sizeof(float));
      if (!c) return loom_set_error(LOOM_ERR_OOM, "conv2d backward: out of host memory for dZ");
      relu_mask(c, dz, y, ny);
      dz = c;
      dzo = true;
    } else {
      relu_mask(dz, dz, y, ny);
      if (!dzo) loom_tensor_bump_version(gy);
    }
  }
  const loom_conv_buf dyb = whole_dz ? loom_conv_buf_f32(dz) : (loom_conv_buf){loom_tensor_ptr(gy), gy->dtype};
  float *wf = NULL, *xf = NULL;
  bool xo = false;
  if (db) {
    float *p = out_f32(db);
    if (!p) st = loom_last_status();
    else {
      bias_grad(&g, dz, p);
      out_done(db, p);
    }
  }
  if (st == LOOM_OK && dx && loom_shape_numel(4, dx->shape) > 0) {
    wf = weight_f32(w);
    float *p = wf && !direct ? out_f32(dx) : NULL;
    const loom_conv_buf dxb = {loom_tensor_ptr(dx), dx->dtype};
    if (wf && direct)
      st = winograd ? loom_conv_winograd_backward_data(&g, dyb, wf, dxb) : loom_conv_direct_backward_data(&g, dyb, wf, dxb);
    else if (!p) st = loom_last_status();
    else {
      st = run_backward_data(path, &g, dz, wf, p);
      if (st == LOOM_OK) out_done(dx, p);
      else if (p != loom_tensor_ptr(dx)) loom_sys_free(p);
    }
  }
  if (st == LOOM_OK && dw) {
    st = direct ? LOOM_OK : dense_f32(x, &xf, &xo);
    float *p = st == LOOM_OK ? out_f32(dw) : NULL;
    if (!p) st = loom_last_status();
    else {
      const loom_conv_buf xb = {loom_tensor_ptr(x), x->dtype};
      st = winograd ? loom_conv_winograd_backward_filter(&g, xb, dyb, p)
           : direct ? loom_conv_direct_backward_filter(&g, xb, dyb, p)
                    : run_backward_filter(path, &g, xf, dz, p);
      if (st == LOOM_OK) out_done(dw, p);
      else if (p != loom_tensor_ptr(dw)) loom_sys_free(p);
    }
  }
  loom_sys_free(wf);
  if (xo) loom_sys_free(xf);
  if (dzo) loom_sys_free(dz);
  return st;
}
