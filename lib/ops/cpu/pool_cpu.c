/* pool_cpu.c — max, average and adaptive average pooling on the CPU, NCHW
 * and NHWC, forward and backward.
 *
 * NCHW works one [H, W] plane at a time (threads split the N*C planes);
 * NHWC works on rows of C values (threads split images or output rows), so
 * the inner loops run along the channels, contiguous in memory. f16/bf16
 * planes and rows are widened to f32 and the results rounded once.
 *
 * Max pooling keeps the argmax of every window (i32, an index into the
 * input plane: h * W + w), first on ties, a NaN winning like PyTorch.
 * Backward scatters into an f32 copy of each plane (image, for NHWC) in
 * output order: the CUDA kernels gather in that same order, so both add an
 * input's contributions identically. Global average pooling (adaptive 1x1)
 * has its own loops: one sum per plane, or one pass of C-wide adds per image. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cnn_math.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/shape_rules.h"
#include "core/sys.h"

typedef struct pool_p {
  int64_t N, C, H, W, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw;
  int adaptive, cip, nhwc;
  /* Per output row / column: clipped window [lo, hi) and the divisor's
   * extent (computed once per call: loom_pool_window does the math). */
  int64_t *hlo, *hhi, *hspan, *wlo, *whi, *wspan;
} pool_p;

/* x: the input-shaped tensor, y: the output-shaped one. */
static loom_status params(const char *op, const loom_op_args *a, const loom_tensor *x, const loom_tensor *y,
                          int format, pool_p *p) {
  pool_p q = {x->shape[0], x->shape[1], x->shape[2], x->shape[3], y->shape[2], y->shape[3],
              a->i[0],     a->i[1],     a->i[2],     a->i[3],     a->i[4],     a->i[5],
              (int)a->i[8], (int)a->i[7], format == LOOM_FORMAT_NHWC, NULL, NULL, NULL, NULL, NULL, NULL};
  *p = q;
  int64_t *t = loom_sys_malloc((size_t)(3 * (q.OH + q.OW) + 1) * sizeof(int64_t));
  if (!t) return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory", op);
  p->hlo = t, p->hhi = t + q.OH, p->hspan = t + 2 * q.OH;
  p->wlo = t + 3 * q.OH, p->whi = p->wlo + q.OW, p->wspan = p->wlo + 2 * q.OW;
  for (int64_t o = 0; o < q.OH; o++)
    loom_pool_window(o, q.H, q.OH, q.kh, q.sh, q.ph, q.adaptive, &p->hlo[o], &p->hhi[o], &p->hspan[o]);
  for (int64_t o = 0; o < q.OW; o++)
    loom_pool_window(o, q.W, q.OW, q.kw, q.sw, q.pw, q.adaptive, &p->wlo[o], &p->whi[o], &p->wspan[o]);
  return LOOM_OK;
}

static void params_free(pool_p *p) { loom_sys_free(p->hlo); }

static inline void window(const pool_p *p, int64_t oh, int64_t ow, int64_t *h0, int64_t *h1, int64_t *w0, int64_t *w1,
                          float *div) {
  *h0 = p->hlo[oh], *h1 = p->hhi[oh], *w0 = p->wlo[ow], *w1 = p->whi[ow];
  *div = (float)((p->adaptive || !p->cip) ? (*h1 - *h0) * (*w1 - *w0) : p->hspan[oh] * p->wspan[ow]);
}

static bool is_global(const pool_p *p) { return p->adaptive && p->OH == 1 && p->OW == 1; }

static int threads_for(int64_t work) { return work >= LOOM_CPU_PAR_MIN ? omp_get_max_threads() : 1; }

/* Per-thread f32 scratch of `each` floats (none needed: NULL). */
static loom_status scratch(const char *op, int nt, int64_t each, float **out) {
  *out = NULL;
  if (each == 0) return LOOM_OK;
  *out = loom_sys_malloc((size_t)nt * (size_t)each * sizeof(float));
  if (!*out) return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory (%lld floats per thread)", op, (long long)each);
  return LOOM_OK;
}

/* ---- max pooling ------------------------------------------------------------------------ */

/* One step of a window's running max / argmax (first on ties, a NaN wins),
 * with masks instead of branches: window maxima are unpredictable and a
 * mispredicted branch per element costs more than the whole step. */
static inline void max_step(float v, int32_t pos, float *m, int32_t *best) {
  uint32_t vb, mb;
  memcpy(&vb, &v, 4);
  memcpy(&mb, m, 4);
  uint32_t take = 0u - (uint32_t)((v > *m) | (v != v));
  mb = (vb & take) | (mb & ~take);
  memcpy(m, &mb, 4);
  *best = (int32_t)(((uint32_t)pos & take) | ((uint32_t)*best & ~take));
}

/* m, ib = the running max / argmax of C channels, updated with row r at
 * window position pos (a select per lane, vectorized). */
static void max_row(const float *restrict r, int32_t pos, int64_t C, float *restrict m, int32_t *restrict ib) {
  for (int64_t c = 0; c < C; c++) {
    float v = r[c], cur = m[c];
    int take = (v > cur) | (v != v);
    m[c] = take ? v : cur;
    ib[c] = take ? pos : ib[c];
  }
}

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

/* Outputs ow..ow+7 of row oh of one plane, all with unclipped columns
 * [ow*s - p, ow*s - p + k), as two 4-lane vectors (one output per lane, so
 * eight independent max chains). Each window is visited row-major, so ties
 * keep the first maximum; a NaN wins like in max_step. */
static void max_block8(const pool_p *p, const float *restrict xp, int64_t oh, int64_t ow, float *restrict yo,
                       int32_t *restrict io) {
  const int64_t h0 = p->hlo[oh], h1 = p->hhi[oh], c0 = ow * p->sw - p->pw, s = p->sw, W = p->W;
  v4f m[2];
  v4i best[2];
  for (int u = 0; u < 2; u++) {
    int32_t f = (int32_t)(h0 * W + c0 + 4 * u * s);
    m[u] = (v4f){-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    best[u] = (v4i){f, f + (int32_t)s, f + 2 * (int32_t)s, f + 3 * (int32_t)s};
  }
  for (int64_t h = h0; h < h1; h++)
    for (int64_t j = 0; j < p->kw; j++)
      for (int u = 0; u < 2; u++) {
        const float *r = xp + h * W + c0 + j + 4 * u * s;
        v4f v = {r[0], r[s], r[2 * s], r[3 * s]};
        int32_t pos = (int32_t)(h * W + c0 + j + 4 * u * s);
        v4i posv = {pos, pos + (int32_t)s, pos + 2 * (int32_t)s, pos + 3 * (int32_t)s};
        v4i take = (v > m[u]) | (v != v);
        m[u] = (v4f)(((v4i)v & take) | ((v4i)m[u] & ~take));
        best[u] = (posv & take) | (best[u] & ~take);
      }
  memcpy(yo, m, sizeof m);
  memcpy(io, best, sizeof best);
}

static loom_status max_fwd(const pool_p *p, const void *x, loom_dtype dt, void *y, int32_t *idx) {
  const int64_t HW = p->H * p->W, OHW = p->OH * p->OW, C = p->C;
  /* Outputs [ow_in0, ow_in1) have windows fully inside the columns. */
  int64_t ow_in0 = (p->pw + p->sw - 1) / p->sw, ow_in1 = p->W + p->pw >= p->kw ? (p->W + p->pw - p->kw) / p->sw + 1 : 0;
  if (ow_in1 > p->OW) ow_in1 = p->OW;
  int nt = threads_for(p->N * C * HW);
  float *buf;
  LOOM_TRY(scratch("max_pool2d", nt, p->nhwc ? 4 * C : (dt == LOOM_F32 ? 0 : HW + OHW), &buf));
#pragma omp parallel num_threads(nt)
  {
    float *mine = buf ? buf + (size_t)omp_get_thread_num() * (size_t)(p->nhwc ? 4 * C : HW + OHW) : NULL;
    if (!p->nhwc) {
#pragma omp for schedule(static)
      for (int64_t pl = 0; pl < p->N * C; pl++) {
        const float *xp = loom_cpu_span_f32(x, dt, pl * HW, HW, mine);
        float *yp = loom_cpu_out_f32(y, dt, pl * OHW, mine ? mine + HW : NULL);
        int32_t *ip = idx + pl * OHW;
        for (int64_t oh = 0; oh < p->OH; oh++) {
          int64_t ow = 0;
          while (ow < p->OW) {
            /* Full-width windows of 8 outputs at a time: 8 independent
             * max chains in flight instead of one latency-bound chain. */
            if (ow >= ow_in0 && ow + 8 <= ow_in1) {
              max_block8(p, xp, oh, ow, yp + oh * p->OW + ow, ip + oh * p->OW + ow);
              ow += 8;
              continue;
            }
            int64_t h0, h1, w0, w1;
            float div;
            window(p, oh, ow, &h0, &h1, &w0, &w1, &div);
            float m = -INFINITY;
            int32_t best = (int32_t)(h0 * p->W + w0);
            for (int64_t h = h0; h < h1; h++)
              for (int64_t w = w0; w < w1; w++)
                max_step(xp[h * p->W + w], (int32_t)(h * p->W + w), &m, &best);
            yp[oh * p->OW + ow] = m;
            ip[oh * p->OW + ow] = best;
            ow++;
          }
        }
        loom_cpu_out_commit(y, dt, pl * OHW, OHW, yp);
      }
    } else {
      float *m = mine, *rb = mine + C, *ob = mine + 2 * C;
      int32_t *ib = (int32_t *)(mine + 3 * C);
#pragma omp for schedule(static)
      for (int64_t row = 0; row < p->N * p->OH; row++) {
        int64_t n = row / p->OH, oh = row % p->OH;
        for (int64_t ow = 0; ow < p->OW; ow++) {
          int64_t h0, h1, w0, w1;
          float div;
          window(p, oh, ow, &h0, &h1, &w0, &w1, &div);
          for (int64_t c = 0; c < C; c++) m[c] = -INFINITY, ib[c] = (int32_t)(h0 * p->W + w0);
          for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) {
              const float *r = loom_cpu_span_f32(x, dt, ((n * p->H + h) * p->W + w) * C, C, rb);
              max_row(r, (int32_t)(h * p->W + w), C, m, ib);
            }
          int64_t off = ((n * p->OH + oh) * p->OW + ow) * C;
          float *q = loom_cpu_out_f32(y, dt, off, ob);
          memcpy(q, m, (size_t)C * sizeof(float));
          loom_cpu_out_commit(y, dt, off, C, q);
          memcpy(idx + off, ib, (size_t)C * sizeof(int32_t));
        }
      }
    }
  }
  loom_sys_free(buf);
  return LOOM_OK;
}

/* Scatter gy into dx at the saved argmax, one plane (NCHW) or one image
 * (NHWC) per iteration, accumulating in f32. */
static loom_status max_bwd(const pool_p *p, const void *gy, const int32_t *idx, loom_dtype dt, void *dx) {
  const int64_t HW = p->H * p->W, OHW = p->OH * p->OW, C = p->C;
  const int64_t unit = p->nhwc ? HW * C : HW, ounit = p->nhwc ? OHW * C : OHW, units = p->nhwc ? p->N : p->N * C;
  int nt = threads_for(p->N * C * HW);
  float *buf;
  LOOM_TRY(scratch("max_pool2d backward", nt, dt == LOOM_F32 ? 0 : unit + ounit, &buf));
#pragma omp parallel num_threads(nt)
  {
    float *mine = buf ? buf + (size_t)omp_get_thread_num() * (size_t)(unit + ounit) : NULL;
#pragma omp for schedule(static)
    for (int64_t u = 0; u < units; u++) {
      float *d = loom_cpu_out_f32(dx, dt, u * unit, mine);
      const float *g = loom_cpu_span_f32(gy, dt, u * ounit, ounit, mine ? mine + unit : NULL);
      const int32_t *ip = idx + u * ounit;
      memset(d, 0, (size_t)unit * sizeof(float));
      if (!p->nhwc) {
        for (int64_t j = 0; j < OHW; j++) d[ip[j]] += g[j];
      } else {
        for (int64_t j = 0; j < OHW; j++)
          for (int64_t c = 0; c < C; c++) d[(int64_t)ip[j * C + c] * C + c] += g[j * C + c];
      }
      loom_cpu_out_commit(dx, dt, u * unit, unit, d);
    }
  }
  loom_sys_free(buf);
  return LOOM_OK;
}

loom_status loom_cpu_max_pool2d(loom_op_args *a) {
  loom_tensor *x = a->in[0], *y = a->out[0];
  pool_p p;
  LOOM_TRY(params("max_pool2d", a, x, y, loom_cnn_format(x), &p));
  loom_status st = LOOM_OK;
  if (p.N * p.C * p.H * p.W > 0 && p.OH * p.OW > 0)
    st = max_fwd(&p, loom_tensor_ptr(x), x->dtype, loom_tensor_ptr(y), loom_tensor_ptr(a->out[1]));
  params_free(&p);
  return st;
}

loom_status loom_cpu_max_pool2d_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *dx = a->out[0];
  pool_p p;
  LOOM_TRY(params("max_pool2d backward", a, dx, gy, (int)a->i[11], &p));
  loom_status st = LOOM_OK;
  if (p.N * p.C * p.H * p.W > 0 && p.OH * p.OW > 0)
    st = max_bwd(&p, loom_tensor_ptr(gy), loom_tensor_ptr(a->in[1]), gy->dtype, loom_tensor_ptr(dx));
  params_free(&p);
  return st;
}

/* ---- average pooling ---------------------------------------------------------------------- */

static float plane_sum(const float *x, int64_t n) {
  float acc[16] = {0};
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    for (int l = 0; l < 16; l++) acc[l] += x[j + l];
  for (; j < n; j++) acc[0] += x[j];
  float s = 0;
  for (int l = 0; l < 16; l++) s += acc[l];
  return s;
}

static loom_status avg_fwd(const pool_p *p, const void *x, loom_dtype dt, void *y) {
  const int64_t HW = p->H * p->W, OHW = p->OH * p->OW, C = p->C;
  int nt = threads_for(p->N * C * HW);
  float *buf;
  if (p->nhwc) {
    /* Rows of C: threads split images (global pool) or output rows. */
    LOOM_TRY(scratch("avg_pool2d", nt, 3 * C, &buf));
    bool global = is_global(p);
#pragma omp parallel num_threads(nt)
    {
      float *acc = buf + (size_t)omp_get_thread_num() * (size_t)(3 * C), *rb = acc + C, *ob = rb + C;
#pragma omp for schedule(static)
      for (int64_t row = 0; row < p->N * (global ? 1 : p->OH); row++) {
        int64_t n = global ? row : row / p->OH, oh = global ? 0 : row % p->OH;
        for (int64_t ow = 0; ow < p->OW; ow++) {
          int64_t h0, h1, w0, w1;
          float div;
          window(p, oh, ow, &h0, &h1, &w0, &w1, &div);
          for (int64_t c = 0; c < C; c++) acc[c] = 0.0f;
          for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) {
              const float *r = loom_cpu_span_f32(x, dt, ((n * p->H + h) * p->W + w) * C, C, rb);
              for (int64_t c = 0; c < C; c++) acc[c] += r[c];
            }
          int64_t off = ((n * p->OH + oh) * p->OW + ow) * C;
          float *q = loom_cpu_out_f32(y, dt, off, ob);
          for (int64_t c = 0; c < C; c++) q[c] = acc[c] / div;
          loom_cpu_out_commit(y, dt, off, C, q);
        }
      }
    }
  } else {
    LOOM_TRY(scratch("avg_pool2d", nt, dt == LOOM_F32 ? 0 : HW + OHW, &buf));
#pragma omp parallel num_threads(nt)
    {
      float *mine = buf ? buf + (size_t)omp_get_thread_num() * (size_t)(HW + OHW) : NULL;
#pragma omp for schedule(static)
      for (int64_t pl = 0; pl < p->N * C; pl++) {
        const float *xp = loom_cpu_span_f32(x, dt, pl * HW, HW, mine);
        float *yp = loom_cpu_out_f32(y, dt, pl * OHW, mine ? mine + HW : NULL);
        if (is_global(p)) {
          yp[0] = plane_sum(xp, HW) / (float)HW;
        } else {
          for (int64_t oh = 0; oh < p->OH; oh++)
            for (int64_t ow = 0; ow < p->OW; ow++) {
              int64_t h0, h1, w0, w1;
              float div, s = 0.0f;
              window(p, oh, ow, &h0, &h1, &w0, &w1, &div);
              for (int64_t h = h0; h < h1; h++)
                for (int64_t w = w0; w < w1; w++) s += xp[h * p->W + w];
              yp[oh * p->OW + ow] = s / div;
            }
        }
        loom_cpu_out_commit(y, dt, pl * OHW, OHW, yp);
      }
    }
  }
  loom_sys_free(buf);
  return LOOM_OK;
}

static loom_status avg_bwd(const pool_p *p, const void *gy, loom_dtype dt, void *dx) {
  const int64_t HW = p->H * p->W, OHW = p->OH * p->OW, C = p->C;
  const int64_t unit = p->nhwc ? HW * C : HW, ounit = p->nhwc ? OHW * C : OHW, units = p->nhwc ? p->N : p->N * C;
  int nt = threads_for(p->N * C * HW);
  float *buf;
  const int64_t each = (dt == LOOM_F32 ? 0 : unit + ounit) + C;
  LOOM_TRY(scratch("avg_pool2d backward", nt, each, &buf));
  bool global = is_global(p);
#pragma omp parallel num_threads(nt)
  {
    float *mine = buf + (size_t)omp_get_thread_num() * (size_t)each;
    float *gv = mine, *conv = dt == LOOM_F32 ? NULL : mine + C;
#pragma omp for schedule(static)
    for (int64_t u = 0; u < units; u++) {
      float *d = loom_cpu_out_f32(dx, dt, u * unit, conv);
      const float *g = loom_cpu_span_f32(gy, dt, u * ounit, ounit, conv ? conv + unit : NULL);
      if (global) {
        /* Every input gets its plane's (its image's channel's) gy / HW. */
        if (!p->nhwc) {
          float v = g[0] / (float)HW;
          for (int64_t j = 0; j < HW; j++) d[j] = v;
        } else {
          for (int64_t c = 0; c < C; c++) gv[c] = g[c] / (float)HW;
          for (int64_t j = 0; j < HW; j++) memcpy(d + j * C, gv, (size_t)C * sizeof(float));
        }
      } else {
        memset(d, 0, (size_t)unit * sizeof(float));
        for (int64_t oh = 0; oh < p->OH; oh++)
          for (int64_t ow = 0; ow < p->OW; ow++) {
            int64_t h0, h1, w0, w1;
            float div;
            window(p, oh, ow, &h0, &h1, &w0, &w1, &div);
            if (!p->nhwc) {
              float v = g[oh * p->OW + ow] / div;
              for (int64_t h = h0; h < h1; h++)
                for (int64_t w = w0; w < w1; w++) d[h * p->W + w] += v;
            } else {
              const float *gr = g + (oh * p->OW + ow) * C;
              for (int64_t c = 0; c < C; c++) gv[c] = gr[c] / div;
              for (int64_t h = h0; h < h1; h++)
                for (int64_t w = w0; w < w1; w++) {
                  float *dr = d + (h * p->W + w) * C;
                  for (int64_t c = 0; c < C; c++) dr[c] += gv[c];
                }
            }
          }
      }
      loom_cpu_out_commit(dx, dt, u * unit, unit, d);
    }
  }
  loom_sys_free(buf);
  return LOOM_OK;
}

loom_status loom_cpu_avg_pool2d(loom_op_args *a) {
  loom_tensor *x = a->in[0], *y = a->out[0];
  pool_p p;
  LOOM_TRY(params("avg_pool2d", a, x, y, loom_cnn_format(x), &p));
  loom_status st = LOOM_OK;
  if (p.N * p.C * p.H * p.W > 0 && p.OH * p.OW > 0) st = avg_fwd(&p, loom_tensor_ptr(x), x->dtype, loom_tensor_ptr(y));
  params_free(&p);
  return st;
}

loom_status loom_cpu_avg_pool2d_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *dx = a->out[0];
  pool_p p;
  LOOM_TRY(params("avg_pool2d backward", a, dx, gy, (int)a->i[11], &p));
  loom_status st = LOOM_OK;
  if (p.N * p.C * p.H * p.W > 0 && p.OH * p.OW > 0) st = avg_bwd(&p, loom_tensor_ptr(gy), gy->dtype, loom_tensor_ptr(dx));
  params_free(&p);
  return st;
}
