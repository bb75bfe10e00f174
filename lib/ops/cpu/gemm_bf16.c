/* gemm_bf16.c — the blocked driver of the bf16 GEMM (gemm_bf16.h), in the
 * f32 GEMM's GotoBLAS/BLIS discipline (gemm.c): for each KC-deep slice each
 * thread packs the B slivers of its columns and MC-row blocks of A into the
 * pair-interleaved layout, then runs the 12 x 32 micro-kernel over its
 * tiles. A finished tile (its last K slice) goes through the epilogue while
 * it is still in L1: bias, ReLU, rounding to bf16.
 *
 * Threads split N (each packs only the B slivers it uses, no barrier), or
 * M as well when N is too narrow; every C element is produced by one
 * thread with one k order, so results do not depend on the thread count.
 * KC covers K <= 1024 in one slice, so a bf16-only result needs no f32
 * scratch; deeper K accumulates slices in f32 (the caller's c, or scratch).
 *
 * Under the instruction set amxbf16 the same loops run 32 x 32 blocks on
 * AMX tiles (slice_kernel K_AMX; gemm_amx_x86.c): A packed in rows, B in
 * the same slivers, each slice's pairs rounded up to the tiles' 16. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/gemm_bf16_internal.h"
#include "core/sys.h"

#ifdef _OPENMP
#include <omp.h>
#endif

enum { MR = LOOM_BF16_MR, NR = LOOM_BF16_NR };
/* Blocking, in k values (KC even) and rows: an A block of MC x KC bf16
 * (288 KiB at most) stays in L2 while one B sliver (KC x 32, 64 KiB) streams
 * from L2 under it; measured with bench/gemm on Zen 4. */
enum { KC_DEFAULT = 1024, MC = 144 };

/* AMX: 32-row A blocks of MC_AMX rows (256 KiB at KC = 1024). */
enum { AR = LOOM_AMX_MR, MC_AMX = 128 };

static atomic_llong g_kc = 0; /* tests: 0 = KC_DEFAULT */
static atomic_bool g_amx_model = false; /* tests: the AMX path with its plain-C kernel */

void loom_cpu_gemm_bf16_set_kc(int64_t kc) { atomic_store(&g_kc, kc >= 2 ? (long long)(kc & ~(int64_t)1) : 0); }

void loom_cpu_gemm_bf16_test_amx_model(bool on) { atomic_store(&g_amx_model, on); }

bool loom_cpu_gemm_bf16_runs(void) {
#if defined(__x86_64__)
  return loom_cpu_isa_level_now() >= LOOM_CPU_ISA_AVX512BF16;
#else
  return false;
#endif
}

#if defined(__x86_64__)
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

typedef struct bgemm {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, kc;
  const uint16_t *A, *B;
  float *acc; /* f32 sums across K slices: out->c, or scratch; NULL when one slice */
  int64_t ldacc;
  const loom_gemm_bf16_out *out;
} bgemm;

/* tm x tn threads over (row tiles, column slivers): the split with the
 * fewest tiles on the busiest thread, N-only preferred (see gemm.c). */
static void thread_grid(int nt, int64_t mtiles, int64_t ntiles, int *tm_out, int *tn_out) {
  int best_tm = 1, best_tn = nt;
  double best = 1e300;
  for (int tm = 1; tm <= nt; tm++) {
    if (nt % tm) continue;
    const int tn = nt / tm;
    const double cost = (double)(ceil_div(mtiles, tm) * ceil_div(ntiles, tn)) * (tm > 1 ? 1.15 : 1.0);
    if (cost < best) best = cost, best_tm = tm, best_tn = tn;
  }
  *tm_out = best_tm;
  *tn_out = best_tn;
}

/* The micro-kernel a call runs, and the blocking that goes with it. ukr
 * computes the mr x NR block c (leading dim ldc) over kpp pairs, adding to c
 * when acc; it is handed a C block in place (rows == mr, cols == NR) only
 * when in_place, else the tile buffer with ldc = NR and acc false. */
typedef struct slice_kernel {
  int mr, mc, kgroup; /* rows per tile, rows per packed A block, pairs per k step */
  bool in_place;
  void (*pack_a)(bool at, const uint16_t *A, int64_t lda, int64_t K, int64_t k0, int64_t kc, int64_t i0, int64_t m,
                 int64_t kpp, uint32_t *dst);
  void (*ukr)(int64_t kpp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc, bool acc);
} slice_kernel;

static void pack_a_12(bool at, const uint16_t *A, int64_t lda, int64_t K, int64_t k0, int64_t kc, int64_t i0, int64_t m,
                      int64_t kpp, uint32_t *dst) {
  (void)kpp; /* kgroup 1: kpp is ceil(kc / 2) */
  loom_gemm_bf16_pack_a(at, A, lda, K, k0, kc, i0, m, dst);
}

static void ukr_amx(int64_t kpp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc, bool acc) {
  (void)ldc, (void)acc; /* never in place: the tile buffer, overwritten */
  loom_gemm_amx_ukr_32x32(kpp, a, b, c);
}

static void ukr_amx_model(int64_t kpp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc, bool acc) {
  (void)ldc, (void)acc;
  loom_gemm_amx_ukr_model(kpp, a, b, c);
}

static const slice_kernel K_DPBF16 = {MR, MC, 1, true, pack_a_12, loom_gemm_bf16_ukr_12x32};
static const slice_kernel K_AMX = {AR, MC_AMX, 16, false, loom_gemm_amx_pack_a, ukr_amx};
static const slice_kernel K_AMX_MODEL = {AR, MC_AMX, 16, false, loom_gemm_amx_pack_a, ukr_amx_model};

/* Rows [m_lo, m_hi) x slivers [s_lo, s_hi) for the K slice at pc. Pairs
 * per slice are rounded up to k->kgroup (AMX tiles take 16), the B slivers'
 * extra groups zero. */
static void run_slice(const bgemm *g, const slice_kernel *k, int64_t pc, int64_t kc, int64_t m_lo, int64_t m_hi,
                      int64_t s_lo, int64_t s_hi, uint32_t *bpack, uint32_t *apack) {
  const int64_t kp = (kc + 1) / 2, kpp = ceil_div(kp, k->kgroup) * k->kgroup;
  const bool first = pc == 0, last = pc + kc >= g->K;
  for (int64_t s = s_lo; s < s_hi; s++) {
    uint32_t *b = bpack + (s - s_lo) * kpp * NR;
    loom_gemm_bf16_pack_b(g->tb, g->B, g->ldb, g->K, pc, kc, s * NR, min64(NR, g->N - s * NR), b);
    if (kpp > kp) memset(b + kp * NR, 0, (size_t)((kpp - kp) * NR) * sizeof(uint32_t));
  }
  float tile[AR * NR] __attribute__((aligned(64)));
  for (int64_t ic = m_lo; ic < m_hi; ic += k->mc) {
    const int64_t mc = min64(k->mc, m_hi - ic);
    for (int64_t ir = 0; ir < mc; ir += k->mr)
      k->pack_a(g->ta, g->A, g->lda, g->K, pc, kc, ic + ir, min64(k->mr, mc - ir), kpp, apack + (ir / k->mr) * kpp * k->mr);
    for (int64_t s = s_lo; s < s_hi; s++) {
      const int64_t j = s * NR, cols = min64(NR, g->N - j);
      const uint32_t *b = bpack + (s - s_lo) * kpp * NR;
      for (int64_t ir = 0; ir < mc; ir += k->mr) {
        const int64_t i = ic + ir, rows = min64(k->mr, mc - ir);
        const uint32_t *a = apack + (ir / k->mr) * kpp * k->mr;
        if (!g->acc) {
          /* One slice: sums in the tile buffer, straight to the epilogue. */
          k->ukr(kpp, a, b, tile, NR, false);
          loom_gemm_bf16_epilogue(tile, NR, rows, cols, i, j, g->out);
          continue;
        }
        float *c = g->acc + i * g->ldacc + j;
        if (k->in_place && rows == k->mr && cols == NR) {
          k->ukr(kpp, a, b, c, g->ldacc, !first);
        } else {
          k->ukr(kpp, a, b, tile, NR, false);
          for (int64_t r = 0; r < rows; r++)
            for (int64_t q = 0; q < cols; q++) c[r * g->ldacc + q] = (first ? 0.0f : c[r * g->ldacc + q]) + tile[r * NR + q];
        }
        if (last) loom_gemm_bf16_epilogue(c, g->ldacc, rows, cols, i, j, g->out);
      }
    }
  }
}

/* The kernel of this call: AMX tiles under the instruction set amxbf16
 * (whose check asked Linux for the tile state) or the tests' model of
 * them, else vdpbf16ps. */
static const slice_kernel *kernel_now(void) {
  if (atomic_load(&g_amx_model)) return &K_AMX_MODEL;
  return loom_cpu_isa_level_now() >= LOOM_CPU_ISA_AMXBF16 ? &K_AMX : &K_DPBF16;
}
#endif

loom_status loom_cpu_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda,
                               const uint16_t *B, int64_t ldb, const loom_gemm_bf16_out *out) {
#if defined(__x86_64__)
  if (M <= 0 || N <= 0 || K <= 0 || !out || (!out->c && !out->y))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "gemm_bf16: empty shape %lldx%lldx%lld or no output", (long long)M,
                          (long long)N, (long long)K);
  const int64_t kc_set = atomic_load(&g_kc);
  const slice_kernel *kern = kernel_now();
  bgemm g = {ta, tb, M, N, K, lda, ldb, kc_set ? kc_set : KC_DEFAULT, A, B, NULL, 0, out};
  /* Whole k steps of the kernel in every slice but the last. */
  g.kc = ceil_div(g.kc, 2 * kern->kgroup) * 2 * kern->kgroup;
  const int mr = kern->mr;
  const int64_t kc_max = min64(g.kc, K), kp_max = ceil_div((kc_max + 1) / 2, kern->kgroup) * kern->kgroup;
  const int64_t mtiles = ceil_div(M, mr), ntiles = ceil_div(N, NR);

  int nt = 1;
#ifdef _OPENMP
  nt = omp_in_parallel() ? 1 : omp_get_max_threads();
#endif
  /* Below ~2^22 multiply-adds (tens of microseconds) a fork/join costs more
     than it saves, and on a shared machine waking the second thread can
     cost a whole scheduler slice. */
  if ((double)M * (double)N * (double)K < 4194304.0) nt = 1;
  if (nt > mtiles * ntiles) nt = (int)(mtiles * ntiles);
  int tm, tn;
  thread_grid(nt, mtiles, ntiles, &tm, &tn);

  /* Per thread: its B slivers for one slice, one packed A block. */
  const int64_t bwords = ceil_div(ceil_div(ntiles, tn) * kp_max * NR, 16) * 16;
  const int64_t awords = ceil_div(ceil_div(kern->mc, mr) * kp_max * mr, 16) * 16;
  float *scratch = NULL;
  if (K > g.kc) {
    g.acc = out->c;
    g.ldacc = out->ldc;
    if (!g.acc) {
      scratch = loom_sys_malloc((size_t)M * (size_t)N * sizeof(float));
      if (!scratch) return loom_set_error(LOOM_ERR_OOM, "gemm_bf16: out of host memory for %lldx%lld f32 sums", (long long)M, (long long)N);
      g.acc = scratch;
      g.ldacc = N;
    }
  }
  uint32_t *buf = loom_sys_aligned_alloc(64, (size_t)nt * (size_t)(bwords + awords) * sizeof(uint32_t));
  if (!buf) {
    loom_sys_free(scratch);
    return loom_set_error(LOOM_ERR_OOM, "gemm_bf16: out of host memory for the packing buffers");
  }

#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
  {
    int tid = 0, team = 1;
#ifdef _OPENMP
    tid = omp_get_thread_num();
    team = omp_get_num_threads(); /* may be fewer than asked for */
#endif
    int tmt = tm, tnt = tn;
    if (team != nt) thread_grid(team, mtiles, ntiles, &tmt, &tnt);
    const int ti = tid / tnt, tj = tid % tnt;
    const int64_t m_lo = min64(M, (mtiles * ti / tmt) * mr), m_hi = min64(M, (mtiles * (ti + 1) / tmt) * mr);
    const int64_t s_lo = ntiles * tj / tnt, s_hi = ntiles * (tj + 1) / tnt;
    uint32_t *bpack = buf + (int64_t)tid * (bwords + awords), *apack = bpack + bwords;
    /* bpack holds cap slivers: all of this thread's unless the team came
       out smaller than asked for. */
    const int64_t cap = ceil_div(ntiles, tn);
    const bool tiles = kern == &K_AMX && m_lo < m_hi;
    if (tiles) loom_amx_tiles_begin(); /* the tile configuration is per thread */
    for (int64_t s0 = s_lo; m_lo < m_hi && s0 < s_hi; s0 += cap)
      for (int64_t pc = 0; pc < K; pc += g.kc)
        run_slice(&g, kern, pc, min64(g.kc, K - pc), m_lo, m_hi, s0, min64(s_hi, s0 + cap), bpack, apack);
    if (tiles) loom_amx_tiles_end();
  }
  loom_sys_free(buf);
  loom_sys_free(scratch);
  return LOOM_OK;
#else
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)out;
  return loom_set_error(LOOM_ERR_UNSUPPORTED, "gemm_bf16: no AVX512_BF16 kernel on this architecture");
#endif
}
