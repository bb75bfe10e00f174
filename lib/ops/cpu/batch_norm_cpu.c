/* batch_norm_cpu.c — batch norm forward and backward on the CPU, NCHW and
 * NHWC, f32/f16/bf16 data with f32 statistics.
 *
 * Memory is seen as [outer, C, inner]: NCHW (and any [N, C, ...]) is
 * "planar" (outer N, runs of `inner` values of one channel); NHWC, and
 * planar tensors whose inner is 1, are "interleaved" (rows of C values, the
 * per-channel vectors in the innermost dim).
 *
 * Passes over memory:
 *  - forward (training): statistics, then the apply pass y = x*scale + shift
 *    (+ ReLU). Planar: one channel at a time per thread, so the apply pass
 *    re-reads the channel from cache (one pass over DRAM when a channel fits
 *    in L2). Interleaved: the rows are cut into a fixed number of tiles;
 *    each thread reduces its tiles, the per-channel results are combined, and
 *    the same thread applies the same tiles (same static schedule).
 *  - backward: one reduction pass (sum dy', sum dy'(x - mean), dy' = dy
 *    masked by the fused ReLU, the mask recomputed from x), then one pass for
 *    dx; dweight and dbias come from the reduction.
 * Statistics use shifted sums (x - x0 per channel, x0 the channel's first
 * value) accumulated in f32 lanes over short blocks and in double across
 * blocks: one read of x, no cancellation when |mean| >> std. Blocks and
 * tiles do not depend on the thread count, so results are the same with
 * any number of threads. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ops/cnn_math.h"
#include "ops/cpu/batch_norm_x86.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/shape_rules.h"
#include "core/sys.h"

#define LANES 16
#define CHUNK 1024      /* values converted at a time (planar runs) */
#define BLOCK 4096      /* values per row block (interleaved) */
#define MAX_TILES 64

typedef struct geom {
  int64_t outer, C, inner;  /* memory [outer][C][inner]; inner == 1: interleaved */
} geom;

static geom geom_of(const loom_tensor *x) {
  geom g;
  int64_t n = loom_shape_numel(x->ndim, x->shape);
  g.C = x->shape[1];
  if (loom_cnn_format(x) == LOOM_FORMAT_NHWC) {
    g.inner = 1;
    g.outer = g.C ? n / g.C : 0;
  } else {
    g.outer = x->shape[0];
    g.inner = (g.outer > 0 && g.C > 0) ? n / (g.outer * g.C) : 0;  /* 1 ([N, C], [N, C, 1, 1]): interleaved */
  }
  return g;
}

#define span_f32 loom_cpu_span_f32
#define out_f32 loom_cpu_out_f32
#define out_commit loom_cpu_out_commit

/* Per-channel vector of t (f32 copy), or `dflt` everywhere when t is NULL. */
static void channel_vec(const loom_tensor *t, int64_t C, float dflt, float *out) {
  if (!t) {
    for (int64_t c = 0; c < C; c++) out[c] = dflt;
    return;
  }
  loom_cpu_load_f32(loom_tensor_ptr(t), t->dtype, t->strides[0], C, out);
}

static int threads_for(int64_t work) { return work >= LOOM_CPU_PAR_MIN ? omp_get_max_threads() : 1; }

/* ---- inner loops (lanes the compiler vectorizes) ------------------------------------ */

/* Reductions along a run use 4 x 4-wide accumulators (GCC vector
 * extensions: SSE on baseline x86-64) so they vectorize without -ffast-math
 * and keep independent add chains in flight. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f ld4(const float *p) {
  v4f v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline float hsum(const v4f *a) {
  v4f t = a[0] + a[1] + a[2] + a[3];
  return (t[0] + t[1]) + (t[2] + t[3]);
}

static void acc_shifted(const float *restrict p, int64_t m, float K, double *s1, double *s2) {
  v4f a1[4] = {{0}}, a2[4] = {{0}}, k4 = {K, K, K, K};
  int64_t j = 0;
  for (; j + 16 <= m; j += 16)
    for (int u = 0; u < 4; u++) {
      v4f d = ld4(p + j + 4 * u) - k4;
      a1[u] += d;
      a2[u] += d * d;
    }
  float t1 = hsum(a1), t2 = hsum(a2);
  for (; j < m; j++) {
    float d = p[j] - K;
    t1 += d;
    t2 += d * d;
  }
  *s1 += t1;
  *s2 += t2;
}

static void acc_rows_shifted(const float *restrict p, int64_t rows, int64_t C, const float *restrict K,
                             float *restrict a1, float *restrict a2) {
  for (int64_t r = 0; r < rows; r++) {
    const float *row = p + r * C;
    for (int64_t c = 0; c < C; c++) {
      float d = row[c] - K[c];
      a1[c] += d;
      a2[c] += d * d;
    }
  }
}

static void apply_run(const float *restrict p, float *restrict q, int64_t m, float sc, float sh, int relu) {
  if (relu)
    for (int64_t j = 0; j < m; j++) { float v = loom_bn_pre(p[j], sc, sh); q[j] = v > 0.0f ? v : 0.0f; }
  else
    for (int64_t j = 0; j < m; j++) q[j] = loom_bn_pre(p[j], sc, sh);
}

static void apply_rows(const float *restrict p, float *restrict q, int64_t rows, int64_t C, const float *restrict sc,
                       const float *restrict sh, int relu) {
  for (int64_t r = 0; r < rows; r++) {
    const float *a = p + r * C;
    float *b = q + r * C;
    if (relu)
      for (int64_t c = 0; c < C; c++) { float v = loom_bn_pre(a[c], sc[c], sh[c]); b[c] = v > 0.0f ? v : 0.0f; }
    else
      for (int64_t c = 0; c < C; c++) b[c] = loom_bn_pre(a[c], sc[c], sh[c]);
  }
}

/* Backward reduction: s1 += sum g', s2 += sum g' (x - mean). */
static void acc_grad_run(const float *restrict g, const float *restrict x, int64_t m, float mean, float sc, float sh,
                         int relu, double *s1, double *s2) {
  v4f a1[4] = {{0}}, a2[4] = {{0}}, mean4 = {mean, mean, mean, mean}, sc4 = {sc, sc, sc, sc}, sh4 = {sh, sh, sh, sh};
  v4f zero = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 16 <= m; j += 16)
    for (int u = 0; u < 4; u++) {
      v4f xv = ld4(x + j + 4 * u), gv = ld4(g + j + 4 * u);
      if (relu) gv = (v4f)((v4i)gv & (xv * sc4 + sh4 > zero));  /* loom_bn_pre(x) > 0 */
      a1[u] += gv;
      a2[u] += gv * (xv - mean4);
    }
  float t1 = hsum(a1), t2 = hsum(a2);
  for (; j < m; j++) {
    float xv = x[j], gv = g[j];
    if (relu) gv = loom_bn_pre(xv, sc, sh) > 0.0f ? gv : 0.0f;
    t1 += gv;
    t2 += gv * (xv - mean);
  }
  *s1 += t1;
  *s2 += t2;
}

static void acc_grad_rows(const float *restrict g, const float *restrict x, int64_t rows, int64_t C,
                          const float *restrict mean, const float *restrict sc, const float *restrict sh, int relu,
                          float *restrict a1, float *restrict a2) {
  for (int64_t r = 0; r < rows; r++) {
    const float *gr = g + r * C, *xr = x + r * C;
    for (int64_t c = 0; c < C; c++) {
      float xv = xr[c], gv = gr[c];
      if (relu) gv = loom_bn_pre(xv, sc[c], sh[c]) > 0.0f ? gv : 0.0f;
      a1[c] += gv;
      a2[c] += gv * (xv - mean[c]);
    }
  }
}

/* dx = k g' - q (x - mean) - r (training; q = r = 0 in eval mode). */
static void dx_run(const float *restrict g, const float *restrict x, float *restrict dx, int64_t m, float mean, float sc,
                   float sh, int relu, float k, float q, float r) {
  for (int64_t j = 0; j < m; j++) {
    float xv = x[j], gv = g[j];
    if (relu) gv = loom_bn_pre(xv, sc, sh) > 0.0f ? gv : 0.0f;
    dx[j] = k * gv - q * (xv - mean) - r;
  }
}

static void dx_rows(const float *restrict g, const float *restrict x, float *restrict dx, int64_t rows, int64_t C,
                    const float *restrict mean, const float *restrict sc, const float *restrict sh, int relu,
                    const float *restrict k, const float *restrict q, const float *restrict r) {
  for (int64_t i = 0; i < rows; i++) {
    const float *gr = g + i * C, *xr = x + i * C;
    float *dr = dx + i * C;
    for (int64_t c = 0; c < C; c++) {
      float xv = xr[c], gv = gr[c];
      if (relu) gv = loom_bn_pre(xv, sc[c], sh[c]) > 0.0f ? gv : 0.0f;
      dr[c] = k[c] * gv - q[c] * (xv - mean[c]) - r[c];
    }
  }
}

/* ---- forward ------------------------------------------------------------------------------- */

typedef struct bn_fwd {
  const void *x;
  void *y;
  loom_dtype dt;
  geom g;
  int relu;
  double momentum, eps;
  float *mean_out, *invstd_out;   /* stats [2, C] */
  float *rmean, *rvar;            /* running statistics or NULL */
  const float *w, *b;             /* [C] */
  float *sc, *sh;                 /* [C] apply coefficients (scratch) */
} bn_fwd;

/* Batch statistics of channel c from shifted sums; stores mean / invstd,
 * updates the running statistics and the apply coefficients. */
static void finish_channel(const bn_fwd *f, int64_t c, float K, double s1, double s2) {
  double M = (double)(f->g.outer * f->g.inner);
  double d1 = s1 / M, var = s2 / M - d1 * d1;
  if (var < 0) var = 0;
  double mean = (double)K + d1;
  float meanf = (float)mean, invstdf = (float)(1.0 / sqrt(var + f->eps));
  f->mean_out[c] = meanf;
  f->invstd_out[c] = invstdf;
  if (f->rmean) {
    double m = f->momentum;
    f->rmean[c] = (float)((1.0 - m) * f->rmean[c] + m * mean);
    f->rvar[c] = (float)((1.0 - m) * f->rvar[c] + m * var * M / (M - 1.0));
  }
  loom_bn_coef(f->w[c], f->b[c], meanf, invstdf, &f->sc[c], &f->sh[c]);
}

static void apply_planar_channel(const bn_fwd *f, int64_t o, int64_t c, float *buf, float *obuf) {
  int64_t base = (o * f->g.C + c) * f->g.inner;
  for (int64_t j0 = 0; j0 < f->g.inner; j0 += CHUNK) {
    int64_t m = f->g.inner - j0 < CHUNK ? f->g.inner - j0 : CHUNK;
    const float *p = span_f32(f->x, f->dt, base + j0, m, buf);
    float *q = out_f32(f->y, f->dt, base + j0, obuf);
    apply_run(p, q, m, f->sc[c], f->sh[c], f->relu);
    out_commit(f->y, f->dt, base + j0, m, q);
  }
}

static void forward_planar_train(const bn_fwd *f) {
  const geom g = f->g;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_for(g.outer * g.C * g.inner))
  for (int64_t c = 0; c < g.C; c++) {
    float buf[CHUNK], obuf[CHUNK];
    float K = span_f32(f->x, f->dt, c * g.inner, 1, buf)[0];
    double s1 = 0, s2 = 0;
    for (int64_t o = 0; o < g.outer; o++) {
      int64_t base = (o * g.C + c) * g.inner;
      for (int64_t j0 = 0; j0 < g.inner; j0 += CHUNK) {
        int64_t m = g.inner - j0 < CHUNK ? g.inner - j0 : CHUNK;
        acc_shifted(span_f32(f->x, f->dt, base + j0, m, buf), m, K, &s1, &s2);
      }
    }
    finish_channel(f, c, K, s1, s2);
    /* The channel was just read: the apply pass finds it in cache. */
    for (int64_t o = 0; o < g.outer; o++) apply_planar_channel(f, o, c, buf, obuf);
  }
}

static void forward_planar_apply(const bn_fwd *f) {
  const geom g = f->g;
#pragma omp parallel for schedule(static) num_threads(threads_for(g.outer * g.C * g.inner))
  for (int64_t oc = 0; oc < g.outer * g.C; oc++) {
    float buf[CHUNK], obuf[CHUNK];
    apply_planar_channel(f, oc / g.C, oc % g.C, buf, obuf);
  }
}

/* Element i of data of dtype dt. */
static void *elem(const void *p, loom_dtype dt, int64_t i) {
  return (char *)p + (size_t)i * loom_dtype_size(dt);
}

/* Row block [r0, r1) of an interleaved tensor in blocks of at most BLOCK values. */
static int64_t rows_per_block(int64_t C) { return C >= BLOCK ? 1 : BLOCK / C; }

static void tile_rows(int64_t rows, int ntiles, int t, int64_t *r0, int64_t *r1) {
  *r0 = rows * t / ntiles;
  *r1 = rows * (t + 1) / ntiles;
}

static loom_status forward_interleaved(const bn_fwd *f, bool training) {
  const geom g = f->g;
  const int64_t rows = g.outer, C = g.C, RB = rows_per_block(C);
  const int ntiles = rows < MAX_TILES ? (int)rows : MAX_TILES;
  const int nt = threads_for(rows * C);
  /* Per thread: lane accumulators (2C) and a conversion buffer in and out. */
  const int64_t per_thread = 2 * C + 2 * RB * C;
  float *scratch = loom_sys_malloc((size_t)(nt * per_thread + C) * sizeof(float));
  double *part = training ? loom_sys_calloc((size_t)ntiles * 2 * C, sizeof(double)) : NULL;
  if (!scratch || (training && !part)) {
    loom_sys_free(scratch);
    loom_sys_free(part);
    return loom_set_error(LOOM_ERR_OOM, "batch_norm: out of host memory for %lld channels", (long long)C);
  }
  float *K = scratch + nt * per_thread;
  /* On AVX2 the row loops of batch_norm_x86.c (the same bits). */
  const bool vx = loom_bn_avx2_ok(f->dt, C);
  if (training) {
    const float *x0 = span_f32(f->x, f->dt, 0, C, scratch);
    for (int64_t c = 0; c < C; c++) K[c] = x0[c];
  }
#pragma omp parallel num_threads(nt)
  {
    float *mine = scratch + omp_get_thread_num() * per_thread;
    float *a1 = mine, *a2 = mine + C, *buf = mine + 2 * C, *obuf = buf + RB * C;
    if (training) {
#pragma omp for schedule(static)
      for (int t = 0; t < ntiles; t++) {
        int64_t r0, r1;
        tile_rows(rows, ntiles, t, &r0, &r1);
        double *p1 = part + (size_t)t * 2 * C, *p2 = p1 + C;
        for (int64_t rb = r0; rb < r1; rb += RB) {
          int64_t nr = r1 - rb < RB ? r1 - rb : RB;
          for (int64_t c = 0; c < C; c++) a1[c] = a2[c] = 0.0f;
          if (vx) loom_bn_acc_rows_shifted_avx2(elem(f->x, f->dt, rb * C), nr, C, K, a1, a2, f->dt);
          else acc_rows_shifted(span_f32(f->x, f->dt, rb * C, nr * C, buf), nr, C, K, a1, a2);
          for (int64_t c = 0; c < C; c++) p1[c] += a1[c], p2[c] += a2[c];
        }
      }
#pragma omp for schedule(static)
      for (int64_t c = 0; c < C; c++) {
        double s1 = 0, s2 = 0;
        for (int t = 0; t < ntiles; t++) s1 += part[(size_t)t * 2 * C + c], s2 += part[(size_t)t * 2 * C + C + c];
        finish_channel(f, c, K[c], s1, s2);
      }
    }
    /* Same tiles, same threads as the reduction: the rows are still cached. */
#pragma omp for schedule(static)
    for (int t = 0; t < ntiles; t++) {
      int64_t r0, r1;
      tile_rows(rows, ntiles, t, &r0, &r1);
      for (int64_t rb = r0; rb < r1; rb += RB) {
        int64_t nr = r1 - rb < RB ? r1 - rb : RB;
        if (vx) {
          loom_bn_apply_rows_avx2(elem(f->x, f->dt, rb * C), elem(f->y, f->dt, rb * C), nr, C, f->sc, f->sh, f->relu,
                                  f->dt);
          continue;
        }
        const float *p = span_f32(f->x, f->dt, rb * C, nr * C, buf);
        float *q = out_f32(f->y, f->dt, rb * C, obuf);
        apply_rows(p, q, nr, C, f->sc, f->sh, f->relu);
        out_commit(f->y, f->dt, rb * C, nr * C, q);
      }
    }
  }
  loom_sys_free(scratch);
  loom_sys_free(part);
  return LOOM_OK;
}

/* in: x, weight, bias, running_mean, running_var; out: y, stats [2, C]. */
loom_status loom_cpu_batch_norm(loom_op_args *a) {
  loom_tensor *x = a->in[0], *rm = a->in[3], *rv = a->in[4], *st = a->out[1];
  bool training = a->i[0] != 0;
  bn_fwd f = {.x = loom_tensor_ptr(x), .y = loom_tensor_ptr(a->out[0]), .dt = x->dtype, .g = geom_of(x),
              .relu = a->i[1] == LOOM_ACT_RELU, .momentum = a->f[0], .eps = a->f[1]};
  int64_t C = f.g.C;
  float *pst = loom_tensor_ptr(st);
  f.mean_out = pst;
  f.invstd_out = pst + C;
  float *vec = loom_sys_malloc((size_t)(4 * C + 1) * sizeof(float));
  if (!vec) return loom_set_error(LOOM_ERR_OOM, "batch_norm: out of host memory for %lld channels", (long long)C);
  float *w = vec, *b = vec + C;
  f.sc = vec + 2 * C;
  f.sh = vec + 3 * C;
  channel_vec(a->in[1], C, 1.0f, w);
  channel_vec(a->in[2], C, 0.0f, b);
  f.w = w;
  f.b = b;
  if (training) {
    f.rmean = rm ? loom_tensor_ptr(rm) : NULL;
    f.rvar = rv ? loom_tensor_ptr(rv) : NULL;
  } else {
    /* Eval: the running statistics are the statistics. */
    const float *pm = loom_tensor_ptr(rm), *pv = loom_tensor_ptr(rv);
    for (int64_t c = 0; c < C; c++) {
      f.mean_out[c] = pm[c];
      f.invstd_out[c] = (float)(1.0 / sqrt((double)pv[c] + f.eps));
      loom_bn_coef(w[c], b[c], f.mean_out[c], f.invstd_out[c], &f.sc[c], &f.sh[c]);
    }
  }
  loom_status s = LOOM_OK;
  if (f.g.outer * C * f.g.inner > 0) {
    if (f.g.inner > 1) {
      if (training) forward_planar_train(&f);
      else forward_planar_apply(&f);
    } else {
      s = forward_interleaved(&f, training);
    }
  }
  loom_sys_free(vec);
  return s;
}

/* ---- backward ------------------------------------------------------------------------------- */

typedef struct bn_bwd {
  const void *gy, *x;
  void *dx;
  loom_dtype dt;
  geom g;
  int relu;
  bool training;
  const float *mean, *invstd, *w, *sc, *sh;  /* [C] */
  float *k, *q, *r;                          /* [C] dx coefficients (scratch) */
  float *dw, *db;                            /* [C] results (scratch) */
} bn_bwd;

/* From the channel's sums: dweight, dbias, and the dx coefficients. */
static void grad_channel(const bn_bwd *b, int64_t c, double s1, double s2) {
  double M = (double)(b->g.outer * b->g.inner);
  double invstd = b->invstd[c], k = (double)b->w[c] * invstd;
  b->dw[c] = (float)(s2 * invstd);
  b->db[c] = (float)s1;
  b->k[c] = (float)k;
  b->q[c] = b->training ? (float)(k * invstd * invstd * s2 / M) : 0.0f;
  b->r[c] = b->training ? (float)(k * s1 / M) : 0.0f;
}

static void backward_planar(const bn_bwd *b, bool reduce) {
  const geom g = b->g;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_for(g.outer * g.C * g.inner))
  for (int64_t c = 0; c < g.C; c++) {
    float gbuf[CHUNK], xbuf[CHUNK], obuf[CHUNK];
    if (reduce) {
      double s1 = 0, s2 = 0;
      for (int64_t o = 0; o < g.outer; o++) {
        int64_t base = (o * g.C + c) * g.inner;
        for (int64_t j0 = 0; j0 < g.inner; j0 += CHUNK) {
          int64_t m = g.inner - j0 < CHUNK ? g.inner - j0 : CHUNK;
          acc_grad_run(span_f32(b->gy, b->dt, base + j0, m, gbuf), span_f32(b->x, b->dt, base + j0, m, xbuf), m,
                       b->mean[c], b->sc[c], b->sh[c], b->relu, &s1, &s2);
        }
      }
      grad_channel(b, c, s1, s2);
    }
    if (!b->dx) continue;
    for (int64_t o = 0; o < g.outer; o++) {
      int64_t base = (o * g.C + c) * g.inner;
      for (int64_t j0 = 0; j0 < g.inner; j0 += CHUNK) {
        int64_t m = g.inner - j0 < CHUNK ? g.inner - j0 : CHUNK;
        float *d = out_f32(b->dx, b->dt, base + j0, obuf);
        dx_run(span_f32(b->gy, b->dt, base + j0, m, gbuf), span_f32(b->x, b->dt, base + j0, m, xbuf), d, m, b->mean[c],
               b->sc[c], b->sh[c], b->relu, b->k[c], b->q[c], b->r[c]);
        out_commit(b->dx, b->dt, base + j0, m, d);
      }
    }
  }
}

static loom_status backward_interleaved(const bn_bwd *b, bool reduce) {
  const geom g = b->g;
  const int64_t rows = g.outer, C = g.C, RB = rows_per_block(C);
  const int ntiles = rows < MAX_TILES ? (int)rows : MAX_TILES;
  const int nt = threads_for(rows * C);
  const int64_t per_thread = 2 * C + 3 * RB * C;
  float *scratch = loom_sys_malloc((size_t)(nt * per_thread) * sizeof(float));
  double *part = reduce ? loom_sys_calloc((size_t)ntiles * 2 * C, sizeof(double)) : NULL;
  if (!scratch || (reduce && !part)) {
    loom_sys_free(scratch);
    loom_sys_free(part);
    return loom_set_error(LOOM_ERR_OOM, "batch_norm backward: out of host memory for %lld channels", (long long)C);
  }
  const bool vx = loom_bn_avx2_ok(b->dt, C); /* as in forward_interleaved */
#pragma omp parallel num_threads(nt)
  {
    float *mine = scratch + omp_get_thread_num() * per_thread;
    float *a1 = mine, *a2 = mine + C, *gbuf = mine + 2 * C, *xbuf = gbuf + RB * C, *obuf = xbuf + RB * C;
    if (reduce) {
#pragma omp for schedule(static)
      for (int t = 0; t < ntiles; t++) {
        int64_t r0, r1;
        tile_rows(rows, ntiles, t, &r0, &r1);
        double *p1 = part + (size_t)t * 2 * C, *p2 = p1 + C;
        for (int64_t rb = r0; rb < r1; rb += RB) {
          int64_t nr = r1 - rb < RB ? r1 - rb : RB;
          for (int64_t c = 0; c < C; c++) a1[c] = a2[c] = 0.0f;
          if (vx)
            loom_bn_acc_grad_rows_avx2(elem(b->gy, b->dt, rb * C), elem(b->x, b->dt, rb * C), nr, C, b->mean, b->sc,
                                       b->sh, b->relu, a1, a2, b->dt);
          else
            acc_grad_rows(span_f32(b->gy, b->dt, rb * C, nr * C, gbuf), span_f32(b->x, b->dt, rb * C, nr * C, xbuf),
                          nr, C, b->mean, b->sc, b->sh, b->relu, a1, a2);
          for (int64_t c = 0; c < C; c++) p1[c] += a1[c], p2[c] += a2[c];
        }
      }
#pragma omp for schedule(static)
      for (int64_t c = 0; c < C; c++) {
        double s1 = 0, s2 = 0;
        for (int t = 0; t < ntiles; t++) s1 += part[(size_t)t * 2 * C + c], s2 += part[(size_t)t * 2 * C + C + c];
        grad_channel(b, c, s1, s2);
      }
    }
    if (b->dx) {
#pragma omp for schedule(static)
      for (int t = 0; t < ntiles; t++) {
        int64_t r0, r1;
        tile_rows(rows, ntiles, t, &r0, &r1);
        for (int64_t rb = r0; rb < r1; rb += RB) {
          int64_t nr = r1 - rb < RB ? r1 - rb : RB;
          if (vx) {
            loom_bn_dx_rows_avx2(elem(b->gy, b->dt, rb * C), elem(b->x, b->dt, rb * C), elem(b->dx, b->dt, rb * C), nr,
                                 C, b->mean, b->sc, b->sh, b->relu, b->k, b->q, b->r, b->dt);
            continue;
          }
          float *d = out_f32(b->dx, b->dt, rb * C, obuf);
          dx_rows(span_f32(b->gy, b->dt, rb * C, nr * C, gbuf), span_f32(b->x, b->dt, rb * C, nr * C, xbuf), d, nr, C,
                  b->mean, b->sc, b->sh, b->relu, b->k, b->q, b->r);
          out_commit(b->dx, b->dt, rb * C, nr * C, d);
        }
      }
    }
  }
  loom_sys_free(scratch);
  loom_sys_free(part);
  return LOOM_OK;
}

/* in: gy, x, weight, bias, stats; out: dx, dweight, dbias (each optional). */
loom_status loom_cpu_batch_norm_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *x = a->in[1], *st = a->in[4];
  loom_tensor *dx = a->out[0], *dw = a->out[1], *db = a->out[2];
  bn_bwd b = {.gy = loom_tensor_ptr(gy), .x = loom_tensor_ptr(x), .dx = dx ? loom_tensor_ptr(dx) : NULL,
              .dt = x->dtype, .g = geom_of(x), .relu = a->i[1] == LOOM_ACT_RELU, .training = a->i[0] != 0};
  int64_t C = b.g.C;
  const float *pst = loom_tensor_ptr(st);
  b.mean = pst;
  b.invstd = pst + C;
  float *vec = loom_sys_malloc((size_t)(9 * C + 1) * sizeof(float));
  if (!vec) return loom_set_error(LOOM_ERR_OOM, "batch_norm backward: out of host memory for %lld channels", (long long)C);
  float *w = vec, *bias = vec + C, *sc = vec + 2 * C, *sh = vec + 3 * C;
  b.k = vec + 4 * C;
  b.q = vec + 5 * C;
  b.r = vec + 6 * C;
  b.dw = vec + 7 * C;
  b.db = vec + 8 * C;
  channel_vec(a->in[2], C, 1.0f, w);
  channel_vec(a->in[3], C, 0.0f, bias);
  for (int64_t c = 0; c < C; c++) {
    loom_bn_coef(w[c], bias[c], b.mean[c], b.invstd[c], &sc[c], &sh[c]);
    b.dw[c] = b.db[c] = 0.0f;
    b.k[c] = w[c] * b.invstd[c];
    b.q[c] = b.r[c] = 0.0f;
  }
  b.w = w;
  b.sc = sc;
  b.sh = sh;
  /* The sums are needed for dx in training, and for dweight / dbias. */
  bool reduce = b.training || dw || db;
  loom_status s = LOOM_OK;
  if (b.g.outer * C * b.g.inner > 0) {
    if (b.g.inner > 1) backward_planar(&b, reduce);
    else s = backward_interleaved(&b, reduce);
  }
  if (s == LOOM_OK && dw) loom_cpu_store_f32(loom_tensor_ptr(dw), dw->dtype, 1, C, b.dw);
  if (s == LOOM_OK && db) loom_cpu_store_f32(loom_tensor_ptr(db), db->dtype, 1, C, b.db);
  loom_sys_free(vec);
  return s;
}
