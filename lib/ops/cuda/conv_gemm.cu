/* conv_gemm.cu — the device side of the convolution's GEMM path
 * (conv_gemm_cuda.c): im2col and its adjoint col2im over f32 tensors of any
 * element strides. col2im gathers — one thread per input element adds the
 * column entries that read it, in a fixed (kh, kw) order — so it needs no
 * atomics and gives the same bits at every run. Never run on a GPU yet. */
#include "ops/cuda/cuda_dtype.cuh"

static __global__ void k_im2col(const float *x, loom_cu_conv_geom g, int64_t n0, int64_t nimg, int64_t grp,
                                float *cols) {
  const int64_t K = g.Cg * g.KH * g.KW, P = g.OH * g.OW, total = nimg * P * K;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t k = i % K, r = i / K;
    const int64_t p = r % P, n = n0 + r / P;
    const int64_t kw = k % g.KW, t = k / g.KW;
    const int64_t kh = t % g.KH, c = grp * g.Cg + t / g.KH;
    const int64_t h = (p / g.OW) * g.sh - g.ph + kh * g.dh, w = (p % g.OW) * g.sw - g.pw + kw * g.dw;
    cols[i] = (h >= 0 && h < g.H && w >= 0 && w < g.W) ? x[n * g.xs[0] + c * g.xs[1] + h * g.xs[2] + w * g.xs[3]]
                                                        : 0.0f;
  }
}

static __global__ void k_col2im(const float *dcols, loom_cu_conv_geom g, int64_t n0, int64_t nimg, int64_t grp,
                                float *dx) {
  const int64_t K = g.Cg * g.KH * g.KW, P = g.OH * g.OW, total = nimg * g.Cg * g.H * g.W;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t w = i % g.W;
    int64_t t = i / g.W;
    const int64_t h = t % g.H;
    t /= g.H;
    const int64_t c = t % g.Cg, img = t / g.Cg;
    float acc = 0.0f;
    for (int64_t kh = 0; kh < g.KH; kh++) {
      const int64_t hh = h + g.ph - kh * g.dh;
      if (hh < 0 || hh % g.sh) continue;
      const int64_t oh = hh / g.sh;
      if (oh >= g.OH) continue;
      for (int64_t kw = 0; kw < g.KW; kw++) {
        const int64_t ww = w + g.pw - kw * g.dw;
        if (ww < 0 || ww % g.sw) continue;
        const int64_t ow = ww / g.sw;
        if (ow >= g.OW) continue;
        acc += dcols[(img * P + oh * g.OW + ow) * K + (c * g.KH + kh) * g.KW + kw];
      }
    }
    dx[(n0 + img) * g.xs[0] + (grp * g.Cg + c) * g.xs[1] + h * g.xs[2] + w * g.xs[3]] = acc;
  }
}

extern "C" cudaError_t loom_cu_conv_im2col(const float *x, const loom_cu_conv_geom *g, int64_t n0, int64_t nimg,
                                           int64_t grp, float *cols, cudaStream_t s) {
  const int64_t n = nimg * g->OH * g->OW * g->Cg * g->KH * g->KW;
  if (n == 0) return cudaSuccess;
  k_im2col<<<loom_grid_for(n), 256, 0, s>>>(x, *g, n0, nimg, grp, cols);
  return cudaGetLastError();
}

extern "C" cudaError_t loom_cu_conv_col2im(const float *dcols, const loom_cu_conv_geom *g, int64_t n0, int64_t nimg,
                                           int64_t grp, float *dx, cudaStream_t s) {
  const int64_t n = nimg * g->Cg * g->H * g->W;
  if (n == 0) return cudaSuccess;
  k_col2im<<<loom_grid_for(n), 256, 0, s>>>(dcols, *g, n0, nimg, grp, dx);
  return cudaGetLastError();
}
