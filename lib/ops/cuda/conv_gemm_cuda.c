/* conv_gemm_cuda.c — conv2d's forward, backward-data and backward-filter
 * passes as im2col + GEMM on the GPU (conv_gemm_cuda.h says when and why).
 *
 * Per group and per chunk of images, with P = OH * OW output positions and
 * Kc = Cg * KH * KW (a contiguous weight row of the group), all in f32:
 *   forward          y[p, o]  = cols[p, :] · W[o, :]
 *   backward-data    dcols    = dy · W, then col2im (a gather) into dx
 *   backward-filter  dW[o, :] += dy[:, o]ᵀ · cols (accumulated over chunks)
 * In NHWC the rows of a chunk are contiguous with leading dimension O, so
 * each product is one GEMM over the chunk; in NCHW an image's outputs are
 * [O, P], so forward and backward-data are batched GEMMs over the images of
 * the chunk (the weight broadcast with a zero batch stride) and
 * backward-filter is one GEMM per image. Never run on a GPU yet. */
#ifdef LOOM_HAVE_CUDA
#include <string.h>

#include "ops/cuda/conv_gemm_cuda.h"
#include "ops/cuda/cuda_internal.h"

#define COLS_BUDGET ((int64_t)64 << 20)  /* bytes of column matrix per chunk */

/* t as f32 in the layout of x (channels-last when nhwc): t itself
 * (retained) when it already is, else a converted copy. */
static loom_tensor *f32_like_x(loom_tensor *t, bool nhwc) {
  bool ok = t->dtype == LOOM_F32 && (nhwc ? loom_tensor_is_channels_last(t) : loom_tensor_is_contiguous(t));
  if (ok) return loom_tensor_retain(t);
  loom_tensor *c = loom_tensor_alloc_raw(t->ndim, t->shape, LOOM_F32, t->storage->device);
  if (!c) return NULL;
  if (nhwc) loom_set_channels_last_strides(c);
  if (loom_cuda_copy_into(c, t) != LOOM_OK) {
    loom_tensor_release(c);
    return NULL;
  }
  return c;
}

/* An uninitialised f32 tensor shaped like t, in x's layout. */
static loom_tensor *f32_scratch(const loom_tensor *t, bool nhwc) {
  loom_tensor *c = loom_tensor_alloc_raw(t->ndim, t->shape, LOOM_F32, t->storage->device);
  if (c && nhwc) loom_set_channels_last_strides(c);
  return c;
}

static void cu_geom(const loom_conv_geom *g, const loom_tensor *x32, loom_cu_conv_geom *c) {
  memset(c, 0, sizeof *c);
  c->N = g->N, c->C = g->C, c->H = g->H, c->W = g->W, c->Cg = g->Cg, c->KH = g->KH, c->KW = g->KW;
  c->OH = g->OH, c->OW = g->OW, c->sh = g->sh, c->sw = g->sw, c->ph = g->ph, c->pw = g->pw, c->dh = g->dh,
  c->dw = g->dw;
  for (int d = 0; d < 4; d++) c->xs[d] = x32->strides[d];
}

/* Images per chunk: as many as fit the column budget, at least one. */
static int64_t chunk_of(const loom_conv_geom *g) {
  int64_t per = g->OH * g->OW * g->Cg * g->KH * g->KW * (int64_t)sizeof(float);
  int64_t n = per > 0 ? COLS_BUDGET / per : g->N;
  if (n < 1) n = 1;
  return n < g->N ? n : g->N;
}

static loom_tensor *cols_buffer(const loom_conv_geom *g, int64_t nimg, loom_device dev) {
  int64_t n = nimg * g->OH * g->OW * g->Cg * g->KH * g->KW;
  if (n < 1) n = 1;
  return loom_tensor_alloc_raw(1, &n, LOOM_F32, dev);
}

static loom_lt_gemm plain_gemm(void) {
  loom_lt_gemm m;
  memset(&m, 0, sizeof m);
  m.dt = LOOM_F32;
  m.batch = 1;
  m.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  return m;
}

loom_status loom_cuda_conv_gemm_forward(const loom_conv_geom *g, loom_tensor *x, loom_tensor *w, loom_tensor *y) {
  loom_cuda_ctx *ctx = loom_cuda_ctx_of(x);
  if (!ctx) return loom_last_status();
  const int64_t P = g->OH * g->OW, Kc = g->Cg * g->KH * g->KW, O = g->O, Og = g->Og;
  loom_tensor *x32 = f32_like_x(x, g->nhwc), *w32 = loom_cuda_contig(w, LOOM_F32);
  bool direct = y->dtype == LOOM_F32 && (g->nhwc ? loom_tensor_is_channels_last(y) : loom_tensor_is_contiguous(y));
  loom_tensor *y32 = direct ? loom_tensor_retain(y) : f32_scratch(y, g->nhwc);
  const int64_t chunk = chunk_of(g);
  loom_tensor *cols = x32 && w32 && y32 ? cols_buffer(g, chunk, x->storage->device) : NULL;
  loom_status st = cols ? LOOM_OK : loom_last_status();
  loom_cu_conv_geom cg;
  if (st == LOOM_OK) cu_geom(g, x32, &cg);
  const float *xp = st == LOOM_OK ? loom_tensor_ptr(x32) : NULL, *wp = st == LOOM_OK ? loom_tensor_ptr(w32) : NULL;
  float *yp = st == LOOM_OK ? loom_tensor_ptr(y32) : NULL, *cp = st == LOOM_OK ? loom_tensor_ptr(cols) : NULL;
  for (int64_t n0 = 0; st == LOOM_OK && n0 < g->N; n0 += chunk) {
    int64_t nimg = g->N - n0 < chunk ? g->N - n0 : chunk;
    for (int64_t grp = 0; st == LOOM_OK && grp < g->G; grp++) {
      cudaError_t e = loom_cu_conv_im2col(xp, &cg, n0, nimg, grp, cp, ctx->stream);
      if (e != cudaSuccess) {
        st = loom_cuda_error(e, "loom_cu_conv_im2col", __FILE__, __LINE__);
        break;
      }
      loom_lt_gemm m = plain_gemm();
      if (g->nhwc) {  /* y rows (n, p), leading dim O: [nimg P, Og] = cols · W_gᵀ */
        m.M = nimg * P, m.N = Og, m.K = Kc;
        m.A = cp, m.lda = Kc;
        m.B = wp + grp * Og * Kc, m.ldb = Kc, m.trans_b = true;
        m.C = yp + n0 * P * O + grp * Og, m.ldc = O;
      } else {  /* per image: [Og, P] = W_g · colsᵀ */
        m.M = Og, m.N = P, m.K = Kc, m.batch = nimg;
        m.A = wp + grp * Og * Kc, m.lda = Kc, m.sa = 0;
        m.B = cp, m.ldb = Kc, m.trans_b = true, m.sb = P * Kc;
        m.C = yp + n0 * O * P + grp * Og * P, m.ldc = P, m.sc = O * P;
      }
      st = loom_lt_gemm_run(ctx, &m);
    }
  }
  if (st == LOOM_OK && !direct) st = loom_cuda_copy_into(y, y32);
  loom_tensor_release(cols);
  loom_tensor_release(y32);
  loom_tensor_release(w32);
  loom_tensor_release(x32);
  return st;
}

loom_status loom_cuda_conv_gemm_backward_data(const loom_conv_geom *g, loom_tensor *dy, loom_tensor *w,
                                              loom_tensor *dx) {
  loom_cuda_ctx *ctx = loom_cuda_ctx_of(dy);
  if (!ctx) return loom_last_status();
  const int64_t P = g->OH * g->OW, Kc = g->Cg * g->KH * g->KW, O = g->O, Og = g->Og;
  loom_tensor *dy32 = f32_like_x(dy, g->nhwc), *w32 = loom_cuda_contig(w, LOOM_F32);
  bool direct = dx->dtype == LOOM_F32 && (g->nhwc ? loom_tensor_is_channels_last(dx) : loom_tensor_is_contiguous(dx));
  loom_tensor *dx32 = direct ? loom_tensor_retain(dx) : f32_scratch(dx, g->nhwc);
  const int64_t chunk = chunk_of(g);
  loom_tensor *dcols = dy32 && w32 && dx32 ? cols_buffer(g, chunk, dy->storage->device) : NULL;
  loom_status st = dcols ? LOOM_OK : loom_last_status();
  loom_cu_conv_geom cg;
  if (st == LOOM_OK) cu_geom(g, dx32, &cg);
  const float *dyp = st == LOOM_OK ? loom_tensor_ptr(dy32) : NULL, *wp = st == LOOM_OK ? loom_tensor_ptr(w32) : NULL;
  float *dxp = st == LOOM_OK ? loom_tensor_ptr(dx32) : NULL, *cp = st == LOOM_OK ? loom_tensor_ptr(dcols) : NULL;
  for (int64_t n0 = 0; st == LOOM_OK && n0 < g->N; n0 += chunk) {
    int64_t nimg = g->N - n0 < chunk ? g->N - n0 : chunk;
    for (int64_t grp = 0; st == LOOM_OK && grp < g->G; grp++) {
      loom_lt_gemm m = plain_gemm();
      if (g->nhwc) {  /* [nimg P, Kc] = dy_g · W_g */
        m.M = nimg * P, m.N = Kc, m.K = Og;
        m.A = dyp + n0 * P * O + grp * Og, m.lda = O;
        m.B = wp + grp * Og * Kc, m.ldb = Kc;
        m.C = cp, m.ldc = Kc;
      } else {  /* per image: [P, Kc] = dy_gᵀ · W_g */
        m.M = P, m.N = Kc, m.K = Og, m.batch = nimg;
        m.A = dyp + n0 * O * P + grp * Og * P, m.lda = P, m.trans_a = true, m.sa = O * P;
        m.B = wp + grp * Og * Kc, m.ldb = Kc, m.sb = 0;
        m.C = cp, m.ldc = Kc, m.sc = P * Kc;
      }
      st = loom_lt_gemm_run(ctx, &m);
      if (st != LOOM_OK) break;
      cudaError_t e = loom_cu_conv_col2im(cp, &cg, n0, nimg, grp, dxp, ctx->stream);
      if (e != cudaSuccess) st = loom_cuda_error(e, "loom_cu_conv_col2im", __FILE__, __LINE__);
    }
  }
  if (st == LOOM_OK && !direct) st = loom_cuda_copy_into(dx, dx32);
  loom_tensor_release(dcols);
  loom_tensor_release(dx32);
  loom_tensor_release(w32);
  loom_tensor_release(dy32);
  return st;
}

loom_status loom_cuda_conv_gemm_backward_filter(const loom_conv_geom *g, loom_tensor *dy, loom_tensor *x,
                                                loom_tensor *dw) {
  loom_cuda_ctx *ctx = loom_cuda_ctx_of(dy);
  if (!ctx) return loom_last_status();
  const int64_t P = g->OH * g->OW, Kc = g->Cg * g->KH * g->KW, O = g->O, Og = g->Og;
  loom_tensor *dy32 = f32_like_x(dy, g->nhwc), *x32 = f32_like_x(x, g->nhwc);
  bool direct = dw->dtype == LOOM_F32 && loom_tensor_is_contiguous(dw);
  loom_tensor *dw32 = direct ? loom_tensor_retain(dw) : loom_tensor_alloc_raw(dw->ndim, dw->shape, LOOM_F32, dw->storage->device);
  const int64_t chunk = chunk_of(g);
  loom_tensor *cols = dy32 && x32 && dw32 ? cols_buffer(g, chunk, dy->storage->device) : NULL;
  loom_status st = cols ? LOOM_OK : loom_last_status();
  loom_cu_conv_geom cg;
  if (st == LOOM_OK) cu_geom(g, x32, &cg);
  const float *dyp = st == LOOM_OK ? loom_tensor_ptr(dy32) : NULL, *xp = st == LOOM_OK ? loom_tensor_ptr(x32) : NULL;
  float *dwp = st == LOOM_OK ? loom_tensor_ptr(dw32) : NULL, *cp = st == LOOM_OK ? loom_tensor_ptr(cols) : NULL;
  for (int64_t n0 = 0; st == LOOM_OK && n0 < g->N; n0 += chunk) {
    int64_t nimg = g->N - n0 < chunk ? g->N - n0 : chunk;
    for (int64_t grp = 0; st == LOOM_OK && grp < g->G; grp++) {
      cudaError_t e = loom_cu_conv_im2col(xp, &cg, n0, nimg, grp, cp, ctx->stream);
      if (e != cudaSuccess) {
        st = loom_cuda_error(e, "loom_cu_conv_im2col", __FILE__, __LINE__);
        break;
      }
      for (int64_t img = 0; st == LOOM_OK && img < (g->nhwc ? 1 : nimg); img++) {
        loom_lt_gemm m = plain_gemm();
        m.beta = n0 == 0 && img == 0 ? 0.0f : 1.0f;  /* the first product overwrites, the rest accumulate */
        m.M = Og, m.N = Kc;
        m.C = dwp + grp * Og * Kc, m.ldc = Kc;
        if (g->nhwc) {  /* [Og, Kc] += dy_gᵀ · cols over the chunk's nimg P rows */
          m.K = nimg * P;
          m.A = dyp + n0 * P * O + grp * Og, m.lda = O, m.trans_a = true;
          m.B = cp, m.ldb = Kc;
        } else {  /* image by image: [Og, Kc] += dy_g [Og, P] · cols [P, Kc] */
          m.K = P;
          m.A = dyp + (n0 + img) * O * P + grp * Og * P, m.lda = P;
          m.B = cp + img * P * Kc, m.ldb = Kc;
        }
        st = loom_lt_gemm_run(ctx, &m);
      }
    }
  }
  if (st == LOOM_OK && !direct) st = loom_cuda_copy_into(dw, dw32);
  loom_tensor_release(cols);
  loom_tensor_release(dw32);
  loom_tensor_release(x32);
  loom_tensor_release(dy32);
  return st;
}
#endif
