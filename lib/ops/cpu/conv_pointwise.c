/* conv_pointwise.c — 1x1 convolutions (groups 1, no padding, any stride:
 * ResNet's projection shortcuts, bottleneck 1x1s) as plain GEMMs over the
 * output pixels, without im2col's per-tap bookkeeping or the direct kernels'
 * padded copies.
 *
 * With a 1x1 kernel an output pixel (n, oh, ow) reads exactly one input
 * pixel (n, oh*sh, ow*sw), so with P = OH*OW output pixels:
 *   NHWC: xg [pixels][C] (the strided input pixels, gathered; x itself when
 *         the stride is 1) and y [pixels][O] = xg · wᵀ (w is [O][C]);
 *   NCHW: per image, xg [C][P] (a strided gather of each plane; x's planes
 *         themselves when the stride is 1) and y_n [O][P] = w · xg.
 * Backward-data computes dxg = dy · w (NHWC) or wᵀ · dy_n (NCHW) and
 * scatters it to the strided positions of dx, writing zeros everywhere else
 * (one pass over dx, no memset first); backward-filter computes dwᵀ [C][O]
 * = xgᵀ · dy (NHWC) or xg · dy_nᵀ (NCHW), summed over pixels, and
 * transposes it once at the end.
 *
 * conv_cpu.c runs this path where no direct kernel does (CPUs without AVX2,
 * or loom_conv_cpu_select_isa("none")); it replaces im2col + GEMM there. The
 * AVX-512 direct kernels are as fast or faster on the 1x1 shapes measured:
 * the GEMM's 12 x 32 register tile is poorly filled by K or N of 16-64
 * channels, and the gather/scatter is one more pass over memory
 * (bench/results/conv-pointwise-cpu-2026-11-23.md).
 *
 * Work is cut into chunks of whole output rows (n, oh): a chunk's gather,
 * GEMM and epilogue (bias/ReLU, or the scatter) run back to back on one
 * thread while its buffer is in L2. Chunks are spread over the OpenMP
 * threads, each GEMM then single-threaded; with fewer chunks than threads
 * they run in turn on the multithreaded GEMM. The weight gradient sums the
 * chunks into a fixed number of partials (the chunking depends only on the
 * geometry), added in order at the end: every result is the same for any
 * number of threads. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "loom/ops.h"
#include "ops/cpu/conv_cpu.h"
#include "ops/cpu/gemm.h"
#include "core/sys.h"

bool loom_conv_pointwise_applies(const loom_conv_geom *g) {
  if (loom_conv_cpu_gemm_forced()) return false;
  return g->KH == 1 && g->KW == 1 && g->G == 1 && g->ph == 0 && g->pw == 0;
}

/* ---- chunks -------------------------------------------------------------------- */
/* Floats of gathered input plus output a chunk aims for (128 KiB, well inside
 * L2; the weight gradient, whose GEMMs sum over the chunk's pixels, takes 4x). */
enum { CHUNK_FLOATS = 32768, MIN_CHUNK_PX = 384, MAX_PARTS = 8 };

typedef struct chunking {
  int64_t rows;    /* output rows (oh) per chunk */
  int64_t per_img; /* NCHW: chunks per image (chunks never span images) */
  int64_t count;
} chunking;

static bool strided(const loom_conv_geom *g) { return g->sh != 1 || g->sw != 1; }

/* Chunks of about `floats` floats of gathered input plus output; rows_cap > 0:
 * at most that many rows per chunk (to make enough chunks). */
static chunking make_chunks(const loom_conv_geom *g, int64_t floats, int64_t rows_cap) {
  int64_t px = floats / (g->C + g->O);
  /* Wide layers: keep enough pixels per GEMM to amortise packing the weight
   * (more without a gather buffer to keep in L2). */
  int64_t min_px = strided(g) ? MIN_CHUNK_PX : 4 * MIN_CHUNK_PX;
  if (px < min_px) px = min_px;
  int64_t rows = px / g->OW;
  if (rows < 1) rows = 1;
  if (rows > g->OH && !g->nhwc) rows = g->OH;
  if (rows_cap > 0 && rows > rows_cap) rows = rows_cap;
  chunking k = {rows, 0, 0};
  if (g->nhwc) {
    k.count = (g->N * g->OH + rows - 1) / rows;
  } else {
    k.per_img = (g->OH + rows - 1) / rows;
    k.count = g->N * k.per_img;
  }
  return k;
}

/* Chunks for the forward and backward-data passes (whose results do not
 * depend on the chunking): L2-sized, but at least 4 per thread when the
 * tensor allows. */
static chunking chunks_for_threads(const loom_conv_geom *g, int nt) {
  int64_t total_rows = g->N * g->OH, want = 4 * (int64_t)nt;
  int64_t cap = (total_rows + want - 1) / want;
  if (!g->nhwc) {
    /* Per image: the cap only matters once images alone are too few. */
    cap = g->N >= want ? 0 : (g->OH * g->N + want - 1) / want;
  }
  return make_chunks(g, CHUNK_FLOATS, nt > 1 ? cap : 0);
}

/* Chunk k: image n (NCHW only), output rows [r0, r1): for NHWC flat rows
 * q = n*OH + oh across images, for NCHW oh within image n. */
static void chunk_range(const loom_conv_geom *g, const chunking *k, int64_t c, int64_t *n, int64_t *r0, int64_t *r1) {
  if (g->nhwc) {
    *n = 0;
    *r0 = c * k->rows;
    *r1 = *r0 + k->rows < g->N * g->OH ? *r0 + k->rows : g->N * g->OH;
  } else {
    *n = c / k->per_img;
    *r0 = (c % k->per_img) * k->rows;
    *r1 = *r0 + k->rows < g->OH ? *r0 + k->rows : g->OH;
  }
}

static int threads(void) {
  int nt = loom_get_num_threads();
  return nt < 1 ? 1 : nt;
}

/* ---- gather / scatter ------------------------------------------------------------ */
/* NHWC: buf [(q1-q0)*OW][C] = input pixels (n, oh*sh, ow*sw) of flat output
 * rows q in [q0, q1). */
static void gather_nhwc(const loom_conv_geom *g, const float *x, int64_t q0, int64_t q1, float *buf) {
  const int64_t C = g->C;
  for (int64_t q = q0; q < q1; q++) {
    int64_t n = q / g->OH, oh = q % g->OH;
    const float *src = x + ((n * g->H + oh * g->sh) * g->W) * C;
    float *dst = buf + (q - q0) * g->OW * C;
    if (g->sw == 1) {
      memcpy(dst, src, (size_t)(g->OW * C) * sizeof(float));
      continue;
    }
    for (int64_t ow = 0; ow < g->OW; ow++) memcpy(dst + ow * C, src + ow * g->sw * C, (size_t)C * sizeof(float));
  }
}

/* Offset in an NHWC dx of the first input row of flat output row q, and
 * (q == N*OH) its end. Input row ih belongs to output row ih / sh (padding 0
 * and a 1x1 kernel: OH = (H-1)/sh + 1, the last one taking the rest), so
 * consecutive output rows own consecutive runs of dx. */
static int64_t nhwc_row_start(const loom_conv_geom *g, int64_t q) {
  int64_t n = q / g->OH, oh = q % g->OH;
  return (n * g->H + oh * g->sh) * g->W * g->C;
}

/* NHWC: the input rows of flat output rows [q0, q1) in dx: zeroed (one
 * contiguous run), then the strided pixels copied in from buf
 * [(q1-q0)*OW][C]. */
static void scatter_nhwc(const loom_conv_geom *g, const float *buf, int64_t q0, int64_t q1, float *dx) {
  const int64_t C = g->C, step = g->sw * C;
  int64_t lo = nhwc_row_start(g, q0), hi = nhwc_row_start(g, q1);
  memset(dx + lo, 0, (size_t)(hi - lo) * sizeof(float));
  for (int64_t q = q0; q < q1; q++) {
    float *d = dx + nhwc_row_start(g, q);
    const float *src = buf + (q - q0) * g->OW * C;
    for (int64_t ow = 0; ow < g->OW; ow++, d += step, src += C)
      for (int64_t c = 0; c < C; c++) d[c] = src[c];
  }
}

/* NCHW: buf [C][(r1-r0)*OW] = plane c's pixels (oh*sh, ow*sw), oh in [r0, r1),
 * of image xn. */
static void gather_nchw(const loom_conv_geom *g, const float *xn, int64_t r0, int64_t r1, float *buf) {
  const int64_t HW = g->H * g->W, OW = g->OW, pc = (r1 - r0) * OW, sw = g->sw;
  for (int64_t c = 0; c < g->C; c++)
    for (int64_t oh = r0; oh < r1; oh++) {
      const float *src = xn + c * HW + oh * g->sh * g->W;
      float *dst = buf + c * pc + (oh - r0) * OW;
      if (sw == 1) memcpy(dst, src, (size_t)OW * sizeof(float));
      else if (sw == 2) for (int64_t ow = 0; ow < OW; ow++) dst[ow] = src[2 * ow];
      else for (int64_t ow = 0; ow < OW; ow++) dst[ow] = src[ow * sw];
    }
}

/* NCHW: the input rows of output rows [r0, r1) of image dxn, every plane:
 * strided pixels from buf [C][(r1-r0)*OW], zeros elsewhere. */
static void scatter_nchw(const loom_conv_geom *g, const float *buf, int64_t r0, int64_t r1, float *dxn) {
  const int64_t HW = g->H * g->W, W = g->W, OW = g->OW, pc = (r1 - r0) * OW, sw = g->sw;
  for (int64_t c = 0; c < g->C; c++)
    for (int64_t oh = r0; oh < r1; oh++) {
      int64_t ih0 = oh * g->sh, ih1 = ih0 + g->sh < g->H ? ih0 + g->sh : g->H;
      float *d = dxn + c * HW + ih0 * W;
      const float *src = buf + c * pc + (oh - r0) * OW;
      if (sw == 1) {
        memcpy(d, src, (size_t)W * sizeof(float));
      } else {
        for (int64_t iw = 0; iw < W; iw++) d[iw] = 0.0f;
        if (sw == 2) for (int64_t ow = 0; ow < OW; ow++) d[2 * ow] = src[ow];
        else for (int64_t ow = 0; ow < OW; ow++) d[ow * sw] = src[ow];
      }
      if (ih1 > ih0 + 1) memset(d + W, 0, (size_t)((ih1 - ih0 - 1) * W) * sizeof(float));
    }
}

/* ---- forward ---------------------------------------------------------------------- */
static void fwd_chunk(const loom_conv_geom *g, const float *x, const float *w, const float *b, float *y, float *buf,
                      const chunking *k, int64_t c) {
  const int64_t C = g->C, O = g->O, OW = g->OW, P = g->OH * OW;
  const bool relu = g->act == LOOM_ACT_RELU;
  int64_t n, r0, r1;
  chunk_range(g, k, c, &n, &r0, &r1);
  const int64_t pc = (r1 - r0) * OW;
  if (g->nhwc) {
    const float *a = x + r0 * OW * C;
    if (strided(g)) {
      gather_nhwc(g, x, r0, r1, buf);
      a = buf;
    }
    float *yc = y + r0 * OW * O;
    loom_cpu_sgemm(false, true, pc, O, C, 1.0f, a, C, w, C, 0.0f, yc, O);
    if (b || relu) loom_conv_bias_act_rows(yc, pc, O, b, relu);
  } else {
    const float *xn = x + n * C * g->H * g->W;
    const float *bm = xn + r0 * OW;
    int64_t ldb = g->H * g->W;
    if (strided(g)) {
      gather_nchw(g, xn, r0, r1, buf);
      bm = buf;
      ldb = pc;
    }
    float *yc = y + n * O * P + r0 * OW;
    loom_cpu_sgemm(false, false, O, pc, C, 1.0f, w, C, bm, ldb, 0.0f, yc, P);
    if (b || relu)
      for (int64_t o = 0; o < O; o++) loom_conv_bias_act_plane(yc + o * P, pc, b ? b[o] : 0.0f, relu);
  }
}

/* ---- backward-data ------------------------------------------------------------------ */
static void bwd_data_chunk(const loom_conv_geom *g, const float *dy, const float *w, float *dx, float *buf,
                           const chunking *k, int64_t c) {
  const int64_t C = g->C, O = g->O, OW = g->OW, P = g->OH * OW;
  int64_t n, r0, r1;
  chunk_range(g, k, c, &n, &r0, &r1);
  const int64_t pc = (r1 - r0) * OW;
  if (g->nhwc) {
    const float *dyc = dy + r0 * OW * O;
    if (!strided(g)) {
      loom_cpu_sgemm(false, false, pc, C, O, 1.0f, dyc, O, w, C, 0.0f, dx + r0 * OW * C, C);
      return;
    }
    loom_cpu_sgemm(false, false, pc, C, O, 1.0f, dyc, O, w, C, 0.0f, buf, C);
    scatter_nhwc(g, buf, r0, r1, dx);
  } else {
    const float *dyc = dy + n * O * P + r0 * OW;
    float *dxn = dx + n * C * g->H * g->W;
    if (!strided(g)) {
      loom_cpu_sgemm(true, false, C, pc, O, 1.0f, w, C, dyc, P, 0.0f, dxn + r0 * OW, g->H * g->W);
      return;
    }
    loom_cpu_sgemm(true, false, C, pc, O, 1.0f, w, C, dyc, P, 0.0f, buf, pc);
    scatter_nchw(g, buf, r0, r1, dxn);
  }
}

/* The row chunks of a forward (dy == NULL) or backward-data (x == NULL)
 * pass, on nt threads when there are enough chunks to share, each thread
 * with its own gather/scatter buffer. */
static loom_status run_row_chunks(const loom_conv_geom *g, const float *x, const float *dy, const float *w,
                                  const float *b, float *out, const char *oom_what) {
  int nt = threads();
  chunking k = chunks_for_threads(g, nt);
  bool split = nt > 1 && k.count >= nt;
  const int64_t bufn = strided(g) ? k.rows * g->OW * g->C : 0;
  float *bufs = bufn ? loom_conv_alloc_f((split ? nt : 1) * bufn) : NULL;
  if (bufn && !bufs) return loom_set_error(LOOM_ERR_OOM, "%s", oom_what);
#pragma omp parallel for schedule(static) num_threads(nt) if (split)
  for (int64_t c = 0; c < k.count; c++) {
    float *buf = bufs ? bufs + omp_get_thread_num() * bufn : NULL;
    if (dy) bwd_data_chunk(g, dy, w, out, buf, &k, c);
    else fwd_chunk(g, x, w, b, out, buf, &k, c);
  }
  loom_sys_free(bufs);
  return LOOM_OK;
}

loom_status loom_conv_pointwise_forward(const loom_conv_geom *g, const float *x, const float *w, const float *b,
                                        float *y) {
  return run_row_chunks(g, x, NULL, w, b, y, "conv2d: out of host memory for the 1x1 gather buffer");
}

loom_status loom_conv_pointwise_backward_data(const loom_conv_geom *g, const float *dy, const float *w, float *dx) {
  return run_row_chunks(g, NULL, dy, w, NULL, dx, "conv2d backward: out of host memory for the 1x1 scatter buffer");
}

/* ---- backward-filter ----------------------------------------------------------------- */
/* part [C][O] (= beta * part) + this chunk's xgᵀ · dy, i.e. its dwᵀ: C x O
 * rather than O x C, because the GEMM's 12 x 32 register tile then wastes
 * less on the usual C < O (a 16-wide N is half a tile). */
static void bwd_filter_chunk(const loom_conv_geom *g, const float *x, const float *dy, float *part, float beta,
                             float *buf, const chunking *k, int64_t c) {
  const int64_t C = g->C, O = g->O, OW = g->OW, P = g->OH * OW;
  int64_t n, r0, r1;
  chunk_range(g, k, c, &n, &r0, &r1);
  const int64_t pc = (r1 - r0) * OW;
  if (g->nhwc) {
    const float *bm = x + r0 * OW * C;
    if (strided(g)) {
      gather_nhwc(g, x, r0, r1, buf);
      bm = buf;
    }
    loom_cpu_sgemm(true, false, C, O, pc, 1.0f, bm, C, dy + r0 * OW * O, O, beta, part, O);
  } else {
    const float *xn = x + n * C * g->H * g->W;
    const float *bm = xn + r0 * OW;
    int64_t ldb = g->H * g->W;
    if (strided(g)) {
      gather_nchw(g, xn, r0, r1, buf);
      bm = buf;
      ldb = pc;
    }
    loom_cpu_sgemm(false, true, C, O, pc, 1.0f, bm, ldb, dy + n * O * P + r0 * OW, P, beta, part, O);
  }
}

loom_status loom_conv_pointwise_backward_filter(const loom_conv_geom *g, const float *x, const float *dy, float *dw) {
  const int64_t WN = g->O * g->C;
  /* Geometry-only chunks and partials: dW does not depend on the threads. */
  chunking k = make_chunks(g, 4 * CHUNK_FLOATS, 0);
  const int64_t nparts = k.count < MAX_PARTS ? k.count : MAX_PARTS;
  int nt = threads();
  if (nt > nparts) nt = (int)nparts;
  const int64_t bufn = strided(g) ? k.rows * g->OW * g->C : 0;
  float *mem = loom_conv_alloc_f(nt * bufn + nparts * WN);
  if (!mem) return loom_set_error(LOOM_ERR_OOM, "conv2d backward: out of host memory for the 1x1 weight gradient");
  float *parts = mem + nt * bufn;
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t p = 0; p < nparts; p++)
    for (int64_t c = p * k.count / nparts; c < (p + 1) * k.count / nparts; c++)
      bwd_filter_chunk(g, x, dy, parts + p * WN, c == p * k.count / nparts ? 0.0f : 1.0f,
                       bufn ? mem + omp_get_thread_num() * bufn : NULL, &k, c);
  /* Sum the partials in order (contiguous), then dw [O][C] = the sum
   * transposed, in 32 x 32 blocks. */
  for (int64_t p = 1; p < nparts; p++)
    for (int64_t i = 0; i < WN; i++) parts[i] += parts[p * WN + i];
  const int64_t B = 32;
  for (int64_t c0 = 0; c0 < g->C; c0 += B)
    for (int64_t o0 = 0; o0 < g->O; o0 += B)
      for (int64_t o = o0; o < o0 + B && o < g->O; o++)
        for (int64_t c = c0; c < c0 + B && c < g->C; c++) dw[o * g->C + c] = parts[c * g->O + o];
  loom_sys_free(mem);
  return LOOM_OK;
}
