/* gemm.c — the CPU SGEMM behind matmul/linear/conv: dispatch to OpenBLAS when
 * it is linked, otherwise (or when forced) loom's own cache-blocked, packed
 * GEMM in the GotoBLAS/BLIS style.
 *
 * Built-in algorithm, for each (NC-wide column panel, KC-deep slice):
 *   1. all threads cooperatively pack the KC x NC slice of op(B) into NR-wide
 *      slivers (contiguous, zero-padded, aligned) — shared, lives in L2/L3;
 *   2. each thread packs its own MC x KC block of op(A) into MR-tall slivers
 *      (lives in L2) and runs the MR x NR micro-kernel over its tiles, with the
 *      B sliver staying in L1 across the MR slivers of A.
 * Transposes are absorbed by the packing routines, so one micro-kernel serves
 * all four combinations. Each C element is always produced by the same
 * micro-kernel with the same k order, whichever thread computes it, so results
 * are bit-identical for any thread count.
 *
 * The micro-kernel is chosen at run time (AVX-512, AVX2+FMA, or portable C)
 * by the CPU kernels' instruction set (cpu_isa.h), because the library is
 * compiled for baseline x86-64 and must run anywhere.
 *
 * 16-bit operands (loom_cpu_sgemm_widen: f16/bf16 A or B) are widened to f32
 * by the packing routines as they copy, so the kernels, the blocking and the
 * k order are those of f32 and C is bit-identical to loom_cpu_sgemm on
 * widened copies, without making the copies. */
#include "ops/cpu/gemm.h"
#include "loom/log.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/gemm_internal.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "core/sys.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef LOOM_HAVE_CBLAS
#include <cblas.h>
#endif

/* ------------------------------------------------------------------------ */
/* Portable micro-kernel: plain C that compilers vectorize for whatever the
 * baseline ISA is (SSE2 on x86-64, NEON on AArch64). 4 x 8 keeps the tile in
 * 8 SSE registers, so it does not spill on the smallest register file. */
enum { GEN_MR = 4, GEN_NR = 8 };

static void ukr_generic_4x8(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c,
                            int64_t ldc, float alpha, float beta)
{
  float acc[GEN_MR][GEN_NR] = {{0}};
  for (int64_t k = 0; k < kc; k++) {
#pragma GCC unroll 4
    for (int i = 0; i < GEN_MR; i++) {
      const float av = a[i];
#pragma GCC unroll 8
      for (int j = 0; j < GEN_NR; j++) acc[i][j] += av * b[j];
    }
    a += GEN_MR;
    b += GEN_NR;
  }
  for (int i = 0; i < GEN_MR; i++) {
    float *r = c + i * ldc;
    if (beta == 0.0f) {
      for (int j = 0; j < GEN_NR; j++) r[j] = alpha * acc[i][j];
    } else {
      for (int j = 0; j < GEN_NR; j++) r[j] = alpha * acc[i][j] + beta * r[j];
    }
  }
}

/* Blocking: MC x KC of A (floats) should sit in half of L2, a KC x NR sliver
 * of B in L1, the KC x NC panel of B in L3. MC is a multiple of MR and NC of
 * NR so only the true matrix edges produce partial tiles. */
static const loom_gemm_kernel k_generic = {"generic", GEN_MR, GEN_NR, 128, 256, 4096, ukr_generic_4x8};
#if defined(__x86_64__)
static const loom_gemm_kernel k_avx2 = {"avx2", 6, 16, 144, 256, 4096, loom_gemm_ukr_avx2_6x16};
static const loom_gemm_kernel k_avx512 = {"avx512", 12, 32, 192, 256, 4096, loom_gemm_ukr_avx512_12x32};
#endif
/* Not a kernel: selects the unpacked fallback loop, so tests can cover the
   path normally taken only when the packing buffers cannot be allocated. */
static const loom_gemm_kernel k_unpacked = {"unpacked", 1, 1, 1, 1, 1, NULL};
enum { MAX_MR = 12, MAX_NR = 32, MAX_MC = 192, MAX_KC = 256, MAX_NC = 4096 }; /* the largest mr, nr, mc, kc, nc above */

/* ------------------------------------------------------------------------ */
/* Global switches. Atomics: ops may run GEMMs from several threads.
 * g_kernel: a kernel forced by loom_cpu_gemm_select_builtin (tests,
 * benchmarks); NULL: the one of the current instruction set. */
static _Atomic(const loom_gemm_kernel *) g_kernel = NULL;
static atomic_bool g_force_builtin = false;
static atomic_int g_policy_set = 0;  /* 0: auto not decided yet */
static atomic_int g_threads = 0;

/* The kernel of instruction-set level l. */
static const loom_gemm_kernel *kernel_of(loom_cpu_isa_level l)
{
#if defined(__x86_64__)
  if (l >= LOOM_CPU_ISA_AVX512) return &k_avx512;
  if (l == LOOM_CPU_ISA_AVX2) return &k_avx2;
#endif
  (void)l;
  return &k_generic;
}

static const loom_gemm_kernel *current_kernel(void)
{
  const loom_gemm_kernel *k = atomic_load_explicit(&g_kernel, memory_order_acquire);
  return k ? k : kernel_of(loom_cpu_isa_level_now());
}

bool loom_cpu_gemm_select_builtin(const char *name)
{
  const loom_gemm_kernel *k = NULL;
  if (!name) {
    atomic_store_explicit(&g_kernel, NULL, memory_order_release);
    return true;
  } else if (strcmp(name, "generic") == 0) {
    k = &k_generic;
  } else if (strcmp(name, "unpacked") == 0) {
    k = &k_unpacked;
  }
#if defined(__x86_64__)
  else if (strcmp(name, "avx2") == 0) {
    if (loom_cpu_isa_runs(LOOM_CPU_ISA_AVX2)) k = &k_avx2;
  } else if (strcmp(name, "avx512") == 0) {
    if (loom_cpu_isa_runs(LOOM_CPU_ISA_AVX512)) k = &k_avx512;
  }
#endif
  if (!k) return false;
  atomic_store_explicit(&g_kernel, k, memory_order_release);
  return true;
}

void loom_cpu_gemm_force_builtin(bool on) {
  atomic_store(&g_policy_set, 1);
  atomic_store(&g_force_builtin, on);
}

/* "auto": loom's own kernels where the CPU has AVX2/AVX-512, OpenBLAS
 * otherwise. Measured on the 2-core Xeon we develop on: Debian's OpenBLAS
 * 0.3.21 does not recognise the CPU and runs its SSE3 "Prescott" kernels
 * (30-40 GFLOP/s vs 200+ for the built-in AVX-512 kernel), and its thread
 * pool competes with OpenMP's spinning workers for the cores. */
static bool auto_prefers_builtin(void) {
  /* The CPU's widest, not the forced level: LOOM_CPU_ISA=scalar means loom's
   * portable kernels, not OpenBLAS's. */
  return loom_cpu_isa_best() >= LOOM_CPU_ISA_AVX2;
}

#ifdef LOOM_HAVE_CBLAS /* (only the OpenBLAS build has a policy to decide: unused without it) */
static void decide_policy(void) {
  if (atomic_load(&g_policy_set)) return;
  const char *env = getenv("LOOM_CPU_GEMM");
  if (env && loom_cpu_gemm_set_policy(env) != 0)
    loom_log_msg(LOOM_LOG_WARN, "LOOM_CPU_GEMM='%s' is not auto, builtin or openblas (available in this build); using auto",
                 env);
  if (!env || !atomic_load(&g_policy_set)) loom_cpu_gemm_set_policy("auto");
  loom_log_msg(LOOM_LOG_INFO, "CPU GEMM: %s", loom_cpu_gemm_impl());
}
#endif

int loom_cpu_gemm_set_policy(const char *name) {
  bool builtin;
  if (!name || strcmp(name, "auto") == 0) builtin = auto_prefers_builtin();
  else if (strcmp(name, "builtin") == 0) builtin = true;
  else if (strcmp(name, "openblas") == 0) {
#ifdef LOOM_HAVE_CBLAS
    builtin = false;
#else
    return -2;
#endif
  } else return -1;
#ifndef LOOM_HAVE_CBLAS
  builtin = true;
#endif
  atomic_store(&g_force_builtin, builtin);
  atomic_store(&g_policy_set, 1);
  return 0;
}

void loom_cpu_gemm_set_threads(int n)
{
  atomic_store(&g_threads, n > 0 ? n : 0);
#if defined(LOOM_HAVE_CBLAS) && defined(OPENBLAS_VERSION)
  /* OpenBLAS keeps its own pool; keep it in step so the two paths use the
     same number of cores. */
  openblas_set_num_threads(n > 0 ? n : openblas_get_num_procs());
#endif
}

const char *loom_cpu_gemm_impl(void)
{
#ifdef LOOM_HAVE_CBLAS
  decide_policy();
  if (!atomic_load(&g_force_builtin)) return "openblas";
#endif
  const loom_gemm_kernel *k = current_kernel();
#if defined(__x86_64__)
  if (k == &k_avx512) return "builtin-avx512";
  if (k == &k_avx2) return "builtin-avx2";
#endif
  if (k == &k_unpacked) return "builtin-unpacked";
  return "builtin-generic";
}

/* ------------------------------------------------------------------------ */
typedef struct gemm_args {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  const void *A, *B; /* of dtype adt / bdt */
  float *C;
  int64_t lda, ldb, ldc;
  loom_dtype adt, bdt; /* LOOM_F32, LOOM_F16 or LOOM_BF16 */
  /* A 16-bit C (cdt f16/bf16; C is then NULL): each finished tile is
     rounded into C16 (leading dim ldc). Only with beta == 0 and K within one
     KC slice (gemm_run checks), so a tile is final when the kernel ends. */
  void *C16;
  loom_dtype cdt;
  /* adt's / bdt's run widening, resolved once per call (gemm_run): the
     packing widens many short runs. */
  loom_cpu_widen_fn wa, wb;
  bool c16_avx2; /* the 16-bit C's tiles round through loom_gemm_store16_avx2 */
} gemm_args;

/* n elements of 16-bit A / B from element index i on, as f32 into d (exact),
   through the converter resolved for this call. */
static inline void widen_a(const gemm_args *g, int64_t i, int64_t n, float *restrict d)
{
  g->wa((const uint16_t *)g->A + i, d, n);
}
static inline void widen_b(const gemm_args *g, int64_t i, int64_t n, float *restrict d)
{
  g->wb((const uint16_t *)g->B + i, d, n);
}
static inline float elem(const void *p, loom_dtype dt, int64_t i)
{
  return dt == LOOM_F32 ? ((const float *)p)[i] : (float)loom_cpu_load_f64(p, dt, i);
}

/* C = beta * C, where beta == 0 writes zeros without reading (NaN-safe). */
static void scale_c(const gemm_args *g)
{
  for (int64_t i = 0; i < g->M; i++) {
    float *r = g->C + i * g->ldc;
    if (g->beta == 0.0f) {
      memset(r, 0, (size_t)g->N * sizeof(float));
    } else if (g->beta != 1.0f) {
      for (int64_t j = 0; j < g->N; j++) r[j] *= g->beta;
    }
  }
}

/* Last resort when the packing buffers cannot be allocated: slow but correct,
   needs no memory. i-k-j order keeps the innermost loop unit-stride in C. */
static void gemm_unpacked(const gemm_args *g)
{
  scale_c(g);
  for (int64_t i = 0; i < g->M; i++) {
    float *r = g->C + i * g->ldc;
    for (int64_t k = 0; k < g->K; k++) {
      const float a = g->alpha * elem(g->A, g->adt, g->ta ? k * g->lda + i : i * g->lda + k);
      for (int64_t j = 0; j < g->N; j++) r[j] += a * elem(g->B, g->bdt, g->tb ? j * g->ldb + k : k * g->ldb + j);
    }
  }
}

#if defined(__x86_64__)
static int has_avx2(void) { return loom_cpu_isa_level_now() >= LOOM_CPU_ISA_AVX2; }
#endif

/* Pack rows [i0, i0+m) x cols [k0, k0+kc) of op(A) into MR-row slivers:
   sliver s holds, for each k, MR consecutive floats (rows past m are 0). */
static void pack_a(const gemm_args *g, int mr, int64_t i0, int64_t m, int64_t k0, int64_t kc, float *restrict dst)
{
  const bool f32 = g->adt == LOOM_F32;
#if defined(__x86_64__)
  if (mr == 6 && m <= LOOM_GEMM_PACK_A6_MAX_M && has_avx2() && (g->adt != LOOM_F16 || loom_cpu_f16c())) {
    loom_gemm_pack_a6_avx2(g->A, g->adt, g->ta, g->lda, i0, m, k0, kc, dst);
    return;
  }
#endif
  if (g->ta && !f32 && m <= MAX_MC) {
    /* 16-bit A is [K,M]: widen each k's run of m values in one call (not
       one call per MR values), then split it over the slivers. */
    float run[MAX_MC];
    for (int64_t k = 0; k < kc; k++) {
      widen_a(g, (k0 + k) * g->lda + i0, m, run);
      for (int64_t s = 0; s < m; s += mr) {
        const int64_t rows = m - s < mr ? m - s : mr;
        float *d = dst + (s / mr) * (int64_t)mr * kc + k * mr;
        int64_t r = 0;
        for (; r < rows; r++) d[r] = run[s + r];
        for (; r < mr; r++) d[r] = 0.0f;
      }
    }
    return;
  }
  float wide[MAX_MR * MAX_KC]; /* 16-bit A: the sliver's rows widened */
  for (int64_t s = 0; s < m; s += mr, dst += (int64_t)mr * kc) {
    const int64_t rows = m - s < mr ? m - s : mr;
    if (!g->ta) {
      /* A is [M,K]: each row of the sliver is contiguous in k. Going k-outer
         over up to MAX_MR row pointers writes dst sequentially (one MR group
         per k) instead of scattering each row at stride MR. */
      const float *src[MAX_MR];
      for (int64_t r = 0; r < rows; r++) {
        const int64_t at = (i0 + s + r) * g->lda + k0;
        if (f32) {
          src[r] = (const float *)g->A + at;
        } else {
          widen_a(g, at, kc, wide + r * kc);
          src[r] = wide + r * kc;
        }
      }
      for (int64_t k = 0; k < kc; k++) {
        float *d = dst + k * mr;
        int64_t r = 0;
        for (; r < rows; r++) d[r] = src[r][k];
        for (; r < mr; r++) d[r] = 0.0f;
      }
    } else {
      /* A is [K,M]: the MR values for one k are contiguous. */
      for (int64_t k = 0; k < kc; k++) {
        const int64_t at = (k0 + k) * g->lda + i0 + s;
        float *d = dst + k * mr;
        int64_t r = 0;
        if (f32) {
          const float *src = (const float *)g->A + at;
          for (; r < rows; r++) d[r] = src[r];
        } else {
          widen_a(g, at, rows, d);
          r = rows;
        }
        for (; r < mr; r++) d[r] = 0.0f;
      }
    }
  }
}

/* Pack one NR-column sliver: cols [j0, j0+n) x rows [k0, k0+kc) of op(B),
   as kc groups of NR floats (cols past n are 0). */
static void pack_b_sliver(const gemm_args *g, int nr, int64_t k0, int64_t kc, int64_t j0, int64_t n,
                          float *restrict dst)
{
  const bool f32 = g->bdt == LOOM_F32;
  if (!g->tb) {
    /* B is [K,N]: the NR values for one k are contiguous. */
    for (int64_t k = 0; k < kc; k++) {
      const int64_t at = (k0 + k) * g->ldb + j0;
      float *d = dst + k * nr;
      int64_t c = 0;
      if (f32) {
        /* memcpy: the element loop stays scalar at -O2 and costs ~15 % of
           a 128-row GEMM's time (each packed B value feeds only M FMAs). */
        memcpy(d, (const float *)g->B + at, (size_t)n * sizeof(float));
        c = n;
      } else {
        widen_b(g, at, n, d);
        c = n;
      }
      for (; c < nr; c++) d[c] = 0.0f;
    }
  } else {
#if defined(__x86_64__)
    if (nr % 8 == 0 && has_avx2()) {
      if (f32) {
        loom_gemm_pack_bt_avx2(g->B, g->ldb, k0, kc, j0, n, nr, dst);
        return;
      }
      if (g->bdt == LOOM_BF16 || loom_cpu_f16c()) {
        loom_gemm_pack_bt16_avx2(g->B, g->bdt == LOOM_F16, g->ldb, k0, kc, j0, n, nr, dst);
        return;
      }
    }
#endif
    /* B is [N,K]: each column of the sliver is contiguous in k. Walk k in
       short blocks so the NR source rows and the destination stay in L1. */
    float wide[64]; /* 16-bit B: one column's block widened */
    for (int64_t kb = 0; kb < kc; kb += 64) {
      const int64_t ke = kb + 64 < kc ? kb + 64 : kc;
      for (int64_t c = 0; c < n; c++) {
        const int64_t at = (j0 + c) * g->ldb + k0;
        const float *src = (const float *)g->B + at;
        if (!f32) {
          widen_b(g, at + kb, ke - kb, wide);
          src = wide - kb;
        }
        for (int64_t k = kb; k < ke; k++) dst[k * nr + c] = src[k];
      }
      for (int64_t c = n; c < nr; c++)
        for (int64_t k = kb; k < ke; k++) dst[k * nr + c] = 0.0f;
    }
  }
}

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Slivers [s_lo, s_hi) of the panel at column jc (nc wide) of rows
   [k0, k0+kc); sliver s at dst + s * bstride. A [K,N] f32 B is read row by
   row across all the slivers: going sliver by sliver reads kc rows ldb apart
   for each 128 bytes, which on a 4 KiB row pitch all fall in one L1 set. */
static void pack_b_range(const gemm_args *g, int nr, int64_t k0, int64_t kc, int64_t jc, int64_t nc, int64_t s_lo,
                         int64_t s_hi, float *restrict dst, int64_t bstride)
{
  if (g->tb || s_hi <= s_lo) {
    for (int64_t s = s_lo; s < s_hi; s++)
      pack_b_sliver(g, nr, k0, kc, jc + s * nr, nc - s * nr < nr ? nc - s * nr : nr, dst + s * bstride);
    return;
  }
#if defined(__x86_64__)
  if (nr % 8 == 0 && has_avx2() && (g->bdt != LOOM_F16 || loom_cpu_f16c())) {
    loom_gemm_pack_b_avx2(g->B, g->bdt, g->ldb, k0, kc, jc, nc, s_lo, s_hi, nr, dst, bstride);
    return;
  }
#endif
  /* 16-bit B: each row's run is widened in one call, then split. */
  float wide[MAX_NC];
  const int64_t j_lo = s_lo * nr, j_hi = s_hi * nr < nc ? s_hi * nr : nc;
  for (int64_t k = 0; k < kc; k++) {
    const int64_t at = (k0 + k) * g->ldb + jc;
    const float *src = (const float *)g->B + at;
    if (g->bdt != LOOM_F32) {
      widen_b(g, at + j_lo, j_hi - j_lo, wide);
      src = wide - j_lo;
    }
    for (int64_t s = s_lo; s < s_hi; s++) {
      const int64_t n = nc - s * nr < nr ? nc - s * nr : nr;
      float *d = dst + s * bstride + k * nr;
      memcpy(d, src + s * nr, (size_t)n * sizeof(float));
      for (int64_t c = n; c < nr; c++) d[c] = 0.0f;
    }
  }
}
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Split nt threads into a tm x tn grid over (row tiles, column slivers) that
   minimizes the largest per-thread tile count. Splitting only N (tm == 1) is
   preferred unless it is clearly worse: then every thread packs just the B
   slivers it uses and the threads never wait for each other, which matters
   when the cores are shared and a barrier can cost a whole scheduler slice.
   Splitting M instead shares one packed B panel and needs a barrier per KC
   slice. */
static void thread_grid(int nt, int64_t mtiles, int64_t ntiles, int *tm_out, int *tn_out)
{
  int best_tm = 1, best_tn = nt;
  double best = 1e300;
  for (int tm = 1; tm <= nt; tm++) {
    if (nt % tm) continue;
    const int tn = nt / tm;
    const double cost = (double)(ceil_div(mtiles, tm) * ceil_div(ntiles, tn)) * (tm > 1 ? 1.15 : 1.0);
    if (cost < best) {
      best = cost;
      best_tm = tm;
      best_tn = tn;
    }
  }
  *tm_out = best_tm;
  *tn_out = best_tn;
}

/* Write an edge tile (rows x cols of the MR x NR result in tmp) into C. */
static void merge_edge(float *c, int64_t ldc, const float *tmp, int nr, int64_t rows, int64_t cols, float alpha,
                       float beta)
{
  for (int64_t i = 0; i < rows; i++) {
    float *r = c + i * ldc;
    const float *t = tmp + i * nr;
    if (beta == 0.0f) {
      for (int64_t j = 0; j < cols; j++) r[j] = alpha * t[j];
    } else {
      for (int64_t j = 0; j < cols; j++) r[j] = alpha * t[j] + beta * r[j];
    }
  }
}

/* The MR x NR tiles of rows [ic, ic+mc) (A packed at apack) against one
   packed B sliver b, columns [j, j+cols) of C. */
static void sliver_tiles(const loom_gemm_kernel *kn, const gemm_args *g, const float *b, const float *apack,
                         int64_t ic, int64_t mc, int64_t j, int64_t cols, int64_t kc, float beta)
{
  const int mr = kn->mr, nr = kn->nr;
  float tmp[MAX_MR * MAX_NR] __attribute__((aligned(64)));
  for (int64_t ir = 0; ir < mc; ir += mr) {
    const int64_t rows = min64(mr, mc - ir);
    const float *a = apack + (ir / mr) * kc * mr;
    if (g->C16) {
      /* As below, into tmp, then rounded: the same f32 values. */
      const bool full = rows == mr && cols == nr;
      kn->ukr(kc, a, b, tmp, nr, full ? g->alpha : 1.0f, 0.0f);
      if (!full) merge_edge(tmp, nr, tmp, nr, rows, cols, g->alpha, 0.0f);
      void *c16 = (char *)g->C16 + ((ic + ir) * g->ldc + j) * 2;
#if defined(__x86_64__)
      if (g->c16_avx2) loom_gemm_store16_avx2(tmp, nr, rows, cols, c16, g->ldc, g->cdt == LOOM_F16);
      else
#endif
        loom_gemm_store16(tmp, nr, rows, cols, c16, g->ldc, g->cdt);
      continue;
    }
    float *c = g->C + (ic + ir) * g->ldc + j;
    if (rows == mr && cols == nr) {
      kn->ukr(kc, a, b, c, g->ldc, g->alpha, beta);
    } else {
      kn->ukr(kc, a, b, tmp, nr, 1.0f, 0.0f);
      merge_edge(c, g->ldc, tmp, nr, rows, cols, g->alpha, beta);
    }
  }
}

/* One thread's share of one (jc, pc) step: rows [m_lo, m_hi) of C, slivers
   [s_lo, s_hi) of the packed B panel starting at column jc; sliver s starts
   at bpack + s * bstride. */
static void compute_block(const loom_gemm_kernel *kn, const gemm_args *g, const float *bpack, int64_t bstride,
                          float *apack, int64_t jc, int64_t nc, int64_t pc, int64_t kc, float beta, int64_t m_lo,
                          int64_t m_hi, int64_t s_lo, int64_t s_hi)
{
  for (int64_t ic = m_lo; ic < m_hi; ic += kn->mc) {
    const int64_t mc = min64(kn->mc, m_hi - ic);
    pack_a(g, kn->mr, ic, mc, pc, kc, apack);
    for (int64_t s = s_lo; s < s_hi; s++) {
      const int64_t j = jc + s * kn->nr;
      sliver_tiles(kn, g, bpack + s * bstride, apack, ic, mc, j, min64(kn->nr, jc + nc - j), kc, beta);
    }
  }
}

/* compute_block when the thread's rows fit one MC block and it packs its
   own B: each B sliver is packed just before the tiles that use it, into
   bsliv (one sliver, stays in L1). Packing the whole range first writes a
   kc x (its columns) panel — 512 KiB for a 128 x 1024 x 1024 GEMM on 2
   threads — out through L2 and reads it back, evicting the packed A. */
static void compute_block_sliverwise(const loom_gemm_kernel *kn, const gemm_args *g, float *bsliv, float *apack,
                                     int64_t jc, int64_t nc, int64_t pc, int64_t kc, float beta, int64_t m_lo,
                                     int64_t m_hi, int64_t s_lo, int64_t s_hi)
{
  pack_a(g, kn->mr, m_lo, m_hi - m_lo, pc, kc, apack);
  for (int64_t s = s_lo; s < s_hi; s++) {
    const int64_t j = jc + s * kn->nr;
    pack_b_range(g, kn->nr, pc, kc, jc, nc, s, s + 1, bsliv, 0); /* bstride 0: sliver s lands at bsliv */
    sliver_tiles(kn, g, bsliv, apack, m_lo, m_hi - m_lo, j, min64(kn->nr, jc + nc - j), kc, beta);
  }
}

/* false only for a 16-bit C when the packing buffers cannot be allocated
   (the unpacked fallback writes f32). */
static bool gemm_builtin(const gemm_args *g)
{
  const loom_gemm_kernel *kn = current_kernel();
  if (!kn->ukr) {
    if (g->C16) return false;
    gemm_unpacked(g);
    return true;
  }
  const int mr = kn->mr, nr = kn->nr;
  const int64_t M = g->M, N = g->N, K = g->K;

  /* Buffers only as large as this problem needs. */
  const int64_t kc_max = min64(kn->kc, K);
  const int64_t nc_max = ceil_div(min64(kn->nc, N), nr) * nr;
  const int64_t mc_max = min64(kn->mc, ceil_div(M, mr) * mr);
  const int64_t mtiles = ceil_div(M, mr);
  const int64_t ntiles = ceil_div(min64(kn->nc, N), nr);

  int nt = atomic_load(&g_threads);
#ifdef _OPENMP
  if (nt <= 0) nt = omp_get_max_threads();
  if (omp_in_parallel()) nt = 1; /* caller already parallel: do not oversubscribe */
#else
  nt = 1;
#endif
  /* Below 2^21 multiply-adds (~40 us on one AVX-512 core) the fork/join
     costs more than it saves: it was 64^3, but on a shared machine a
     fork/join can wait a scheduler slice (bench/results/cpu-tune-2026-11-26.md:
     the MLP's 1.3M multiply-add fc3 GEMMs ran at 1-6 GFLOP/s on 2 threads
     vs 50-65 on one, AMD EPYC, load ~15). */
  if ((double)M * (double)N * (double)K < 2097152.0) nt = 1;
  if (nt > mtiles * ntiles) nt = (int)(mtiles * ntiles);
  if (nt < 1) nt = 1;
  int grid_tm = 1, grid_tn = nt;
  if (nt > 1) {
    /* A grid that shares B synchronizes once per KC slice; only worth it when
       each slice carries enough work (~1M multiply-adds) to hide a barrier. */
    thread_grid(nt, mtiles, ntiles, &grid_tm, &grid_tn);
    if (grid_tm > 1 && (double)M * (double)min64(N, kn->nc) * (double)kc_max < 1048576.0) nt = grid_tm = 1;
  }

  /* Rows within one MC block and B packed privately (no M split): each
     thread packs B sliver by sliver into its own L1-sized buffer
     (compute_block_sliverwise) and needs no B panel. */
  const bool sliverwise = M <= kn->mc && grid_tm == 1;

  /* 16 floats = 64 bytes: keep every buffer cache-line aligned. Two B panels
     when threaded (double buffering: slice p+1 is packed while a slow thread
     may still read slice p), one A block per thread (and one B sliver when
     sliverwise). */
  const int64_t b_floats = sliverwise ? 0 : ceil_div(kc_max * nc_max, 16) * 16;
  const int64_t a_block = ceil_div(kc_max * mc_max, 16) * 16;
  const int64_t a_floats = a_block + (sliverwise ? ceil_div(kc_max * nr, 16) * 16 : 0);
  const int nbbuf = nt > 1 ? 2 : 1;
  const size_t bytes = (size_t)(nbbuf * b_floats + (int64_t)nt * a_floats) * sizeof(float);
  float *buf = loom_sys_aligned_alloc(64, bytes); /* bytes is a multiple of 64 */
  if (!buf) {
    if (g->C16) return false;
    gemm_unpacked(g);
    return true;
  }
  float *apack_all = buf + nbbuf * b_floats;

#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
  {
    int tid = 0, team = 1;
#ifdef _OPENMP
    tid = omp_get_thread_num();
    team = omp_get_num_threads(); /* may be fewer than asked for */
#endif
    float *apack = apack_all + (int64_t)tid * a_floats;
    float *bsliv = apack + a_block; /* sliverwise only */
    int tm = 1, tn = team;
    /* Without a B panel (sliverwise), a smaller team than asked for keeps
       private packing: a 1 x team grid is always valid. */
    if (!sliverwise) thread_grid(team, mtiles, ntiles, &tm, &tn);
    const bool shared_b = tm > 1; /* same decision in every thread of the team */
    const int ti = tid / tn, tj = tid % tn;
    const int64_t m_lo = min64(M, (mtiles * ti / tm) * mr);
    const int64_t m_hi = min64(M, (mtiles * (ti + 1) / tm) * mr);

    int64_t slice = 0; /* counts (jc, pc) steps: selects the B buffer */
    for (int64_t jc = 0; jc < N; jc += kn->nc) {
      const int64_t nc = min64(kn->nc, N - jc);
      const int64_t nslv = ceil_div(nc, nr);
      /* Each thread's slivers are cut from the full panel's count (ntiles),
         not this panel's: a short last panel then gives every thread a part
         of its usual range. Cut from nslv, the last panel's ranges shifted,
         and with private packing (no barrier) a thread that reached it
         could overwrite slivers of the other buffer that a slower thread
         was still reading two panels back (N > 2 * NC with a remainder,
         e.g. GPT-2's 50257-word vocabulary: wrong, run-to-run different
         products). */
      const int64_t s_lo = min64(nslv, ntiles * tj / tn), s_hi = min64(nslv, ntiles * (tj + 1) / tn);
      for (int64_t pc = 0; pc < K; pc += kn->kc, slice++) {
        const int64_t kc = min64(kn->kc, K - pc);
        float *bpack = buf + (slice % nbbuf) * b_floats;
        /* Sliver stride from kc_max, not kc: with private packing, threads
           may be on different slices (different kc) in the same buffer, and
           their slivers must never overlap. */
        const int64_t bstride = kc_max * nr;
        /* The caller's beta applies once; later k slices accumulate. */
        const float beta = pc == 0 ? g->beta : 1.0f;
        if (shared_b) {
          /* All threads pack the panel together; the implicit barrier at the
             end of the loop publishes it. With two buffers, this barrier also
             proves everyone finished slice-1 before slice+1 overwrites it. */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
          for (int64_t s = 0; s < nslv; s++)
            pack_b_sliver(g, nr, pc, kc, jc + s * nr, min64(nr, nc - s * nr), bpack + s * bstride);
        } else {
          /* Only this thread reads slivers [s_lo, s_hi): no barrier needed. */
          if (sliverwise) {
            compute_block_sliverwise(kn, g, bsliv, apack, jc, nc, pc, kc, beta, m_lo, m_hi, s_lo, s_hi);
            continue;
          }
          pack_b_range(g, nr, pc, kc, jc, nc, s_lo, s_hi, bpack, bstride);
        }
        compute_block(kn, g, bpack, bstride, apack, jc, nc, pc, kc, beta, m_lo, m_hi, s_lo, s_hi);
      }
    }
  }
  loom_sys_free(buf);
  return true;
}

/* ------------------------------------------------------------------------ */
#ifdef LOOM_HAVE_CBLAS
/* OpenBLAS takes f32 only: a widened, packed copy of a rows x cols operand. */
static float *widened_copy(const uint16_t *p, loom_cpu_widen_fn widen, int64_t rows, int64_t cols, int64_t ld)
{
  float *w = loom_sys_malloc((size_t)(rows * cols > 0 ? rows * cols : 1) * sizeof(float));
  if (w)
    for (int64_t r = 0; r < rows; r++) widen(p + r * ld, w + r * cols, cols);
  return w;
}
#endif

static void gemm_run(const gemm_args *gp)
{
  gemm_args g = *gp;
  g.wa = loom_cpu_widen_fn_for(g.adt);
  g.wb = loom_cpu_widen_fn_for(g.bdt);
  if (g.M <= 0 || g.N <= 0) return;
  /* Nothing to multiply: only the beta part, never touching A or B (which
     may be NULL or have degenerate leading dims when K == 0). */
  if (g.K <= 0 || g.alpha == 0.0f) {
    scale_c(&g);
    return;
  }
#ifdef LOOM_HAVE_CBLAS
  /* CBLAS takes int; anything larger goes to the built-in kernel. */
  const bool fits = g.M <= INT_MAX && g.N <= INT_MAX && g.K <= INT_MAX && g.lda <= INT_MAX && g.ldb <= INT_MAX &&
                    g.ldc <= INT_MAX;
  decide_policy();
  if (fits && !atomic_load(&g_force_builtin)) {
    /* 16-bit operands: widened copies, as before the packing widened. */
    float *wa = NULL, *wb = NULL;
    const float *A = g.A, *B = g.B;
    int64_t la = g.lda, lb = g.ldb;
    if (g.adt != LOOM_F32) {
      la = g.ta ? g.M : g.K;
      A = wa = widened_copy(g.A, g.wa, g.ta ? g.K : g.M, la, g.lda);
    }
    if (g.bdt != LOOM_F32) {
      lb = g.tb ? g.K : g.N;
      B = wb = widened_copy(g.B, g.wb, g.tb ? g.N : g.K, lb, g.ldb);
    }
    if (A && B)
      cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, (int)g.M,
                  (int)g.N, (int)g.K, g.alpha, A, (int)la, B, (int)lb, g.beta, g.C, (int)g.ldc);
    loom_sys_free(wa);
    loom_sys_free(wb);
    if (A && B) return;
  }
#endif
  gemm_builtin(&g);
}

void loom_cpu_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                    int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
  const gemm_args g = {.ta = trans_a, .tb = trans_b, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta,
                       .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb, .ldc = ldc, .adt = LOOM_F32,
                       .bdt = LOOM_F32, .cdt = LOOM_F32};
  gemm_run(&g);
}

void loom_cpu_sgemm_widen(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void *A,
                          loom_dtype a_dt, int64_t lda, const void *B, loom_dtype b_dt, int64_t ldb, float beta,
                          float *C, int64_t ldc)
{
  const gemm_args g = {.ta = trans_a, .tb = trans_b, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta,
                       .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb, .ldc = ldc, .adt = a_dt, .bdt = b_dt,
                       .cdt = LOOM_F32};
  gemm_run(&g);
}

bool loom_cpu_sgemm_widen_to16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                               const void *A, loom_dtype a_dt, int64_t lda, const void *B, loom_dtype b_dt,
                               int64_t ldb, void *C, loom_dtype c_dt, int64_t ldc)
{
  if (M <= 0 || N <= 0) return true;
  gemm_args g = {.ta = trans_a, .tb = trans_b, .M = M, .N = N, .K = K, .alpha = alpha, .beta = 0.0f,
                 .A = A, .B = B, .lda = lda, .ldb = ldb, .ldc = ldc, .adt = a_dt, .bdt = b_dt, .C16 = C,
                 .cdt = c_dt, .wa = loom_cpu_widen_fn_for(a_dt), .wb = loom_cpu_widen_fn_for(b_dt)};
#if defined(__x86_64__)
  g.c16_avx2 = loom_cpu_isa_level_now() >= LOOM_CPU_ISA_AVX2 && (c_dt == LOOM_BF16 || loom_cpu_f16c());
#endif
  const loom_gemm_kernel *kn = current_kernel();
  bool builtin = true;
#ifdef LOOM_HAVE_CBLAS
  decide_policy();
  builtin = atomic_load(&g_force_builtin);
#endif
  return builtin && kn->ukr && K > 0 && K <= kn->kc && alpha != 0.0f && gemm_builtin(&g);
}

/* Rows x cols of an f32 tile (leading dim ldt) rounded into a 16-bit
   matrix (leading dim ldd). */
void loom_gemm_store16(const float *t, int ldt, int64_t rows, int64_t cols, void *dst, int64_t ldd, loom_dtype dt)
{
  for (int64_t i = 0; i < rows; i++) loom_cpu_store_f32((uint16_t *)dst + i * ldd, dt, 1, cols, t + i * ldt);
}
