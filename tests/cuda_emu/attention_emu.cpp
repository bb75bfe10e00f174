/* attention_emu.cpp — loom's CUDA attention kernels (lib/ops/cuda/attention.cu)
 * and the chunked path (attention_chunked.cu: its driver and row kernels,
 * with a CPU loop standing for cuBLASLt's batched GEMMs, f32 sums and the
 * result rounded to C's dtype; 16-row chunks and 2-head groups so that
 * partial chunks and groups occur) run on the CPU under cuda_emu.h,
 * against float64: every kernel path
 * (head dims padded to 32, 64, 128, 256 and the unpadded 64 and 128),
 * lengths ending inside a tile, causal and not, a scale of its own, and
 * f32 / f16 / bf16. It proves the kernels' index arithmetic, masking,
 * online softmax, shuffles and barriers, not the GPU: no GPU has run them.
 * Tolerances as tests/test_ops_transformer.c's (f32 atol 2e-5, rtol 1e-4
 * for out; 1e-4, 1e-3 for gradients; f16 / bf16 a few units of their last
 * place). Prints one line per case; exit status 1 on any mismatch.
 *
 * Usage: attention_emu [quick]  (quick: the f32 cases only) */
#include "cuda_emu.h"

#include "ops/cuda/attention.cu"
#include "ops/cuda/attention_chunked.cu"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/half.h"

static uint64_t g_rng = 0x2807;
static double urand() {  /* uniform in [-1, 1) */
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (double)(g_rng >> 11) * 0x1p-52 - 1.0;
}

/* Host storage of one dtype; values rounded to it. */
struct buf {
  int dt;
  std::vector<float> f;
  std::vector<uint16_t> h;
  buf(int dt_, size_t n) : dt(dt_), f(dt_ == 0 ? n : 0), h(dt_ == 0 ? 0 : n) {}
  void *ptr() { return dt == 0 ? (void *)f.data() : (void *)h.data(); }
  void set(size_t i, double v) {
    if (dt == 0) f[i] = (float)v;
    else h[i] = dt == 1 ? loom_half_from_f32((float)v) : loom_bfloat_from_f32((float)v);
  }
  double get(size_t i) const {
    if (dt == 0) return f[i];
    return dt == 1 ? loom_half_to_f32(h[i]) : loom_bits_f32((uint32_t)h[i] << 16);
  }
};

static void ref(const buf &q, const buf &k, const buf &v, const buf &gy, int64_t BH, int64_t T, int64_t D, bool causal,
                double scale, std::vector<double> &out, std::vector<double> &dq, std::vector<double> &dk,
                std::vector<double> &dv) {
  std::vector<double> p((size_t)T);
  for (int64_t h = 0; h < BH; h++)
    for (int64_t i = 0; i < T; i++) {
      const int64_t qi = (h * T + i) * D, nj = causal ? i + 1 : T;
      double m = -INFINITY, s = 0, rs = 0;
      for (int64_t j = 0; j < nj; j++) {
        double z = 0;
        for (int64_t d = 0; d < D; d++) z += q.get(qi + d) * k.get((h * T + j) * D + d);
        p[j] = z * scale;
        m = std::fmax(m, p[j]);
      }
      for (int64_t j = 0; j < nj; j++) s += (p[j] = std::exp(p[j] - m));
      for (int64_t j = 0; j < nj; j++) {
        p[j] /= s;
        for (int64_t d = 0; d < D; d++) out[qi + d] += p[j] * v.get((h * T + j) * D + d);
      }
      for (int64_t d = 0; d < D; d++) rs += gy.get(qi + d) * out[qi + d];
      for (int64_t j = 0; j < nj; j++) {
        const int64_t kj = (h * T + j) * D;
        double g = 0;
        for (int64_t d = 0; d < D; d++) g += gy.get(qi + d) * v.get(kj + d);
        const double ds = p[j] * (g - rs) * scale;
        for (int64_t d = 0; d < D; d++) {
          dv[kj + d] += p[j] * gy.get(qi + d);
          dk[kj + d] += ds * q.get(qi + d);
          dq[qi + d] += ds * k.get(kj + d);
        }
      }
    }
}

/* cuBLASLt's batched GEMM as attention_chunked.h states it: f32 sums, C
 * rounded to its dtype. */
static float elem(const void *p, int dt, int64_t i) {
  if (dt == 0) return ((const float *)p)[i];
  const uint16_t b = ((const uint16_t *)p)[i];
  return dt == 1 ? loom_half_to_f32(b) : loom_bits_f32((uint32_t)b << 16);
}

static int cpu_gemm(void *ctx, const loom_attn_gemm *g) {
  (void)ctx;
  const int cdt = g->c_f32 ? 0 : g->dt;
  for (int64_t b = 0; b < g->batch; b++)
    for (int64_t i = 0; i < g->M; i++)
      for (int64_t j = 0; j < g->N; j++) {
        float acc = 0;
        for (int64_t k = 0; k < g->K; k++)
          acc += elem(g->A, g->dt, b * g->sa + (g->ta ? k * g->lda + i : i * g->lda + k)) *
                 elem(g->B, g->dt, b * g->sb + (g->tb ? j * g->ldb + k : k * g->ldb + j));
        const int64_t c = b * g->sc + i * g->ldc + j;
        if (g->beta != 0) acc += elem(g->C, cdt, c);
        if (cdt == 0) ((float *)g->C)[c] = acc;
        else ((uint16_t *)g->C)[c] = cdt == 1 ? loom_half_from_f32(acc) : loom_bfloat_from_f32(acc);
      }
  return 0;
}

/* Worst |got - want| / (atol + rtol |want|): above 1 fails. */
static double worst(const buf &got, const std::vector<double> &want, double atol, double rtol) {
  double w = 0;
  for (size_t i = 0; i < want.size(); i++) {
    const double e = std::fabs(got.get(i) - want[i]) / (atol + rtol * std::fabs(want[i]));
    if (!(e <= w)) w = e;  /* NaN counts as the worst */
  }
  return w;
}

struct tcase {
  int64_t bh, T, D;
  bool causal;
  double scale;  /* 0: 1 / sqrt(D) */
};

/* path 0: the fused kernels; 1: the chunked driver. */
static int run(const tcase &c, int dt, int path) {
  const int64_t n = c.bh * c.T * c.D;
  const double scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt((double)c.D);
  buf q(dt, n), k(dt, n), v(dt, n), gy(dt, n), out(dt, n), dq(dt, n), dk(dt, n), dv(dt, n);
  for (int64_t i = 0; i < n; i++) q.set(i, urand()), k.set(i, urand()), v.set(i, urand()), gy.set(i, urand());
  std::vector<float> lse((size_t)(c.bh * c.T)), stats((size_t)(2 * c.bh * c.T));
  loom_cu_attn p;
  memset(&p, 0, sizeof p);
  p.dt = dt, p.bh = c.bh, p.T = c.T, p.D = c.D, p.scale = (float)scale, p.causal = c.causal;
  p.q = q.ptr(), p.k = k.ptr(), p.v = v.ptr(), p.out = out.ptr(), p.lse = lse.data();
  loom_attn_chunks ch;
  memset(&ch, 0, sizeof ch);
  ch.gemm = cpu_gemm, ch.tq = 16, ch.hb = 2;
  std::vector<float> S((size_t)(ch.hb * ch.tq * c.T + 1)), dkf((size_t)(n + 1)), dvf((size_t)(n + 1));
  buf P(dt, (size_t)(ch.hb * ch.tq * c.T + 1));
  ch.S = S.data(), ch.P = P.ptr(), ch.dkf = dkf.data(), ch.dvf = dvf.data();
  if (path ? loom_cu_attention_chunked_fwd(&p, &ch, nullptr) != 0 : loom_cu_attention_fwd(&p, nullptr) != cudaSuccess)
    return printf("FAIL launch fwd\n"), 1;
  /* The grad rule's statistics: lse, rowsum(gy * out) in f32 over the rounded out. */
  for (int64_t r = 0; r < c.bh * c.T; r++) {
    float s = 0;
    for (int64_t d = 0; d < c.D; d++) s += (float)gy.get(r * c.D + d) * (float)out.get(r * c.D + d);
    stats[2 * r] = lse[r], stats[2 * r + 1] = s;
  }
  p.gy = gy.ptr(), p.stats = stats.data(), p.dq = dq.ptr(), p.dk = dk.ptr(), p.dv = dv.ptr();
  if (path ? loom_cu_attention_chunked_bwd(&p, &ch, nullptr) != 0 : loom_cu_attention_bwd(&p, nullptr) != cudaSuccess)
    return printf("FAIL launch bwd\n"), 1;

  std::vector<double> ro(n), rq(n), rk(n), rv(n);
  ref(q, k, v, gy, c.bh, c.T, c.D, c.causal, scale, ro, rq, rk, rv);
  double ya = dt == 0 ? 2e-5 : dt == 1 ? 2e-3 : 1.5e-2, yr = dt == 0 ? 1e-4 : dt == 1 ? 4 * 0x1p-10 : 4 * 0x1p-7;
  double ga = dt == 0 ? 1e-4 : dt == 1 ? 5e-3 : 4e-2, gr = dt == 0 ? 1e-3 : dt == 1 ? 8 * 0x1p-10 : 8 * 0x1p-7;
  /* lse against float64 (recomputed from the same values). */
  double wl = 0;
  for (int64_t h = 0; h < c.bh; h++)
    for (int64_t i = 0; i < c.T; i++) {
      const int64_t nj = c.causal ? i + 1 : c.T;
      double m = -INFINITY, s = 0;
      std::vector<double> z((size_t)nj);
      for (int64_t j = 0; j < nj; j++) {
        z[j] = 0;
        for (int64_t d = 0; d < c.D; d++) z[j] += q.get((h * c.T + i) * c.D + d) * k.get((h * c.T + j) * c.D + d);
        z[j] *= scale;
        m = std::fmax(m, z[j]);
      }
      for (int64_t j = 0; j < nj; j++) s += std::exp(z[j] - m);
      const double want = m + std::log(s), e = std::fabs(lse[h * c.T + i] - want) / (1e-5 + 1e-5 * std::fabs(want));
      if (!(e <= wl)) wl = e;
    }
  const double w[5] = {worst(out, ro, ya, yr), wl, worst(dq, rq, ga, gr), worst(dk, rk, ga, gr), worst(dv, rv, ga, gr)};
  bool ok = true;
  for (double x : w) ok = ok && x <= 1;
  static const char *dn[3] = {"f32", "f16", "bf16"};
  printf("%s %s [%lld, %lld, %lld] %s scale %.4g %s: worst error / tolerance: out %.3f lse %.3f dq %.3f dk %.3f dv %.3f\n",
         ok ? "ok  " : "FAIL", path ? "chunked" : "fused", (long long)c.bh, (long long)c.T, (long long)c.D,
         c.causal ? "causal" : "full", scale, dn[dt], w[0], w[1], w[2], w[3], w[4]);
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  const bool quick = argc > 1 && !strcmp(argv[1], "quick");
  static const tcase cases[] = {
      {2, 1, 8, true, 0},    {1, 17, 16, false, 0},  {2, 65, 40, true, 0},  {1, 130, 64, false, 0},
      {1, 97, 128, true, 0}, {1, 33, 200, true, 0},  {1, 40, 256, false, 0}, {3, 50, 64, true, 0.3},
      {1, 70, 128, false, 0.05}, {1, 0, 64, true, 0},
  };
  int bad = 0;
  for (int path = 0; path < 2; path++) {
    for (const tcase &c : cases) bad += run(c, 0, path);
    if (!quick)
      for (int dt = 1; dt <= 2; dt++) {
        bad += run(cases[2], dt, path);
        bad += run(cases[4], dt, path);
        bad += run(cases[6], dt, path);
        if (path) bad += run(cases[7], dt, path); /* 3 heads: a partial group of 2 */
      }
  }
  printf("%s: %d failing case(s)\n", bad ? "FAIL" : "ok", bad);
  return bad ? 1 : 0;
}
