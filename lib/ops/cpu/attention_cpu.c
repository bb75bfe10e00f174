/* attention_cpu.c — fused scaled-dot-product attention on the CPU, in the
 * manner of FlashAttention: the T x T score matrix is never stored. Forward
 * walks each tile of query rows over the tiles of keys with an online
 * softmax (running max and sum per row), so each thread holds a few tiles
 * and one row of statistics per query; it keeps the logsumexp of each row
 * for backward. Backward recomputes the scores tile by tile from q, k and
 * that logsumexp: one pass over (key tile, query tiles) for dk and dv, one
 * over (query tile, key tiles) for dq, so every output tile has one writer
 * (no atomics; the same sums for any thread count). Memory beyond q, k, v,
 * out and their gradients: O(T) per head (the statistics) plus a few tiles
 * per thread.
 *
 * Causal: query i attends to keys j <= i. Computed in f32 whatever the
 * float dtype (tiles are widened on load and rounded once on store). */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/sys.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/gemm.h"
#include "ops/elementwise_math.h" /* loom_exp_host_f: a vectorizable expf */

#define BR 64 /* query rows per tile */
/* The inner loops below update independent elements (no sums across
 * them): vectorizing them changes no result, and -O2 alone leaves them
 * scalar. */
#define LOOM_SIMD _Pragma("omp simd")
#define BC 64 /* key rows per tile */

typedef struct attn_shape {
  int64_t bh, T, D; /* heads (all leading dims), sequence, head dim */
  float scale;
  bool causal;
  loom_dtype dt;
  size_t es;
} attn_shape;

static attn_shape shape_of(const loom_op_args *a, const loom_tensor *q) {
  attn_shape s;
  s.T = q->shape[q->ndim - 2];
  s.D = q->shape[q->ndim - 1];
  s.bh = loom_shape_numel(q->ndim - 2, q->shape);
  s.scale = (float)a->f[0];
  s.causal = a->i[0] != 0;
  s.dt = q->dtype;
  s.es = loom_dtype_size(q->dtype);
  return s;
}

/* Rows [r0, r0 + n) of head h of a [bh, T, D] tensor as f32 (row-major):
 * the data itself for f32, else widened into buf. */
static const float *rows_f32(const attn_shape *s, const loom_tensor *t, int64_t h, int64_t r0, int64_t n, float *buf) {
  return loom_cpu_span_f32(loom_tensor_ptr(t), t->dtype, (h * s->T + r0) * s->D, n * s->D, buf);
}

/* out[i * BC + j] = alpha * sum_d a[i * D + d] * b[j * D + d] for i < m,
 * j < n (a · bᵀ of two row tiles): a GEMM of one tile, run by loom's packed
 * kernels, which read b transposed while packing (single-threaded: the
 * tiles are below the GEMM's threading threshold, and each thread owns its
 * tiles). The rank-1 loop it replaced spent 44% of a step on loads and
 * stores of the output row. */
static void tile_dot(const float *a, int64_t m, const float *b, int64_t n, int64_t D, float alpha, float *out) {
  loom_cpu_sgemm(false, true, m, n, D, alpha, a, D, b, D, 0.0f, out, BC);
}

/* Number of key columns of tile k0 that row i sees (all n, or up to i). */
static inline int64_t visible(const attn_shape *s, int64_t i, int64_t k0, int64_t n) {
  if (!s->causal) return n;
  int64_t v = i - k0 + 1;
  return v < 0 ? 0 : (v < n ? v : n);
}

/* Last key tile (exclusive end row) a query tile ending at q_end sees. */
static inline int64_t key_end(const attn_shape *s, int64_t q_end) { return s->causal ? q_end : s->T; }

/* ---- forward ------------------------------------------------------------------------- */

loom_status loom_cpu_attention(loom_op_args *a) {
  loom_tensor *q = a->in[0], *k = a->in[1], *v = a->in[2], *o = a->out[0], *lse = a->out[1];
  attn_shape s = shape_of(a, q);
  int64_t D = s.D, nqt = (s.T + BR - 1) / BR, tasks = s.bh * nqt;
  float *plse = loom_tensor_ptr(lse);
  char *po = loom_tensor_ptr(o);
  size_t per = (size_t)(BR * D + 2 * BC * D + BR * BC + BR * D + 2 * BR);
  loom_status st = LOOM_OK;
  int nt = s.bh * s.T * s.T * D >= LOOM_CPU_PAR_MIN ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(nt)
  {
    float *buf = tasks ? loom_sys_malloc(per * sizeof(float)) : NULL;
    if (tasks && !buf) {
#pragma omp atomic write
      st = LOOM_ERR_OOM;
    } else if (buf) {
      float *qb = buf, *kb = qb + BR * D, *vb = kb + BC * D, *sc = vb + BC * D;
      float *acc = sc + BR * BC, *m = acc + BR * D, *l = m + BR;
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < tasks; t++) {
        int64_t h = t / nqt, q0 = (t % nqt) * BR, mq = s.T - q0 < BR ? s.T - q0 : BR;
        const float *Q = rows_f32(&s, q, h, q0, mq, qb);
        for (int64_t i = 0; i < mq; i++) m[i] = -INFINITY, l[i] = 0.0f;
        memset(acc, 0, (size_t)(mq * D) * sizeof(float));
        int64_t kend = key_end(&s, q0 + mq);
        for (int64_t k0 = 0; k0 < kend; k0 += BC) {
          int64_t nk = kend - k0 < BC ? kend - k0 : BC;
          const float *K = rows_f32(&s, k, h, k0, nk, kb), *V = rows_f32(&s, v, h, k0, nk, vb);
          tile_dot(Q, mq, K, nk, D, s.scale, sc);
          /* Each row's online-softmax update, then acc += P · V for the
           * whole tile (P is 0 where a row sees no key). */
          for (int64_t i = 0; i < mq; i++) {
            int64_t nv = visible(&s, q0 + i, k0, nk);
            float *srow = sc + i * BC;
            for (int64_t j = nv; j < nk; j++) srow[j] = 0.0f;
            if (nv == 0) continue;
            float mx = m[i];
            for (int64_t j = 0; j < nv; j++) mx = srow[j] > mx ? srow[j] : mx;
            float corr = expf(m[i] - mx), sum = 0.0f;  /* m[i] = -inf at first: corr 0 */
            for (int64_t j = 0; j < nv; j++) srow[j] = loom_exp_host_f(srow[j] - mx);
            for (int64_t j = 0; j < nv; j++) sum += srow[j];
            l[i] = l[i] * corr + sum;
            m[i] = mx;
            float *ar = acc + i * D;
            for (int64_t d = 0; d < D; d++) ar[d] *= corr;
          }
          loom_cpu_sgemm(false, false, mq, D, nk, 1.0f, sc, BC, V, D, 1.0f, acc, D);
        }
        for (int64_t i = 0; i < mq; i++) {
          float inv = 1.0f / l[i];
          for (int64_t d = 0; d < D; d++) acc[i * D + d] *= inv;
          plse[h * s.T + q0 + i] = m[i] + logf(l[i]);
        }
        loom_cpu_store_f32(po + (size_t)((h * s.T + q0) * D) * s.es, o->dtype, 1, mq * D, acc);
      }
    }
    loom_sys_free(buf);
  }
  if (st != LOOM_OK) return loom_set_error(st, "attention: out of host memory for its tiles");
  return LOOM_OK;
}

/* ---- backward -------------------------------------------------------------------------- */

/* For query tile rows [q0, q0 + mq) against key tile [k0, k0 + nk): P (into
 * p) and dS = P (dP - Dstat) (into ds), dP = dO · Vᵀ. K, V: the key and
 * value tiles; st: (lse, Dstat) per query row of this head. */
static void tile_grads(const attn_shape *s, const float *Q, const float *dO, const float *K, const float *V,
                       const float *st, int64_t q0, int64_t mq, int64_t k0, int64_t nk, float *p, float *ds) {
  tile_dot(Q, mq, K, nk, s->D, s->scale, p);
  tile_dot(dO, mq, V, nk, s->D, 1.0f, ds);
  for (int64_t i = 0; i < mq; i++) {
    int64_t nv = visible(s, q0 + i, k0, nk);
    float lse = st[2 * (q0 + i)], dst = st[2 * (q0 + i) + 1];
    float *pr = p + i * BC, *dr = ds + i * BC;
    for (int64_t j = 0; j < nv; j++) {
      pr[j] = loom_exp_host_f(pr[j] - lse);
      dr[j] = pr[j] * (dr[j] - dst);
    }
    for (int64_t j = nv; j < nk; j++) pr[j] = dr[j] = 0.0f;
  }
}

loom_status loom_cpu_attention_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *q = a->in[1], *k = a->in[2], *v = a->in[3], *stats = a->in[4];
  attn_shape s = shape_of(a, q);
  int64_t D = s.D, nqt = (s.T + BR - 1) / BR, nkt = (s.T + BC - 1) / BC;
  const float *pst = loom_tensor_ptr(stats);
  /* per thread: q, dO, k, v tiles, P, dS, two accumulators */
  size_t per = (size_t)(BR * D * 2 + BC * D * 2 + BR * BC * 2 + 2 * (BR > BC ? BR : BC) * D);
  loom_status st = LOOM_OK;
  int nt = s.bh * s.T * s.T * D >= LOOM_CPU_PAR_MIN ? omp_get_max_threads() : 1;
#pragma omp parallel num_threads(nt)
  {
    bool work = s.bh > 0 && s.T > 0;
    float *buf = work ? loom_sys_malloc(per * sizeof(float)) : NULL;
    if (work && !buf) {
#pragma omp atomic write
      st = LOOM_ERR_OOM;
    } else if (buf) {
      float *qb = buf, *gb = qb + BR * D, *kb = gb + BR * D, *vb = kb + BC * D;
      float *p = vb + BC * D, *ds = p + BR * BC, *acc0 = ds + BR * BC;
      float *acc1 = acc0 + (BR > BC ? BR : BC) * D;
      /* dk, dv: one task per key tile, over the query tiles that see it. */
      if (a->out[1] || a->out[2]) {
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < s.bh * nkt; t++) {
          int64_t h = t / nkt, k0 = (t % nkt) * BC, nk = s.T - k0 < BC ? s.T - k0 : BC;
          const float *K = rows_f32(&s, k, h, k0, nk, kb), *V = rows_f32(&s, v, h, k0, nk, vb);
          float *dk = acc0, *dv = acc1;
          memset(dk, 0, (size_t)(nk * D) * sizeof(float));
          memset(dv, 0, (size_t)(nk * D) * sizeof(float));
          for (int64_t q0 = s.causal ? k0 / BR * BR : 0; q0 < s.T; q0 += BR) {
            int64_t mq = s.T - q0 < BR ? s.T - q0 : BR;
            const float *Q = rows_f32(&s, q, h, q0, mq, qb), *dO = rows_f32(&s, gy, h, q0, mq, gb);
            tile_grads(&s, Q, dO, K, V, pst + 2 * h * s.T, q0, mq, k0, nk, p, ds);
            /* dv += Pᵀ · dO, dk += scale · dSᵀ · Q (P and dS are 0 where unseen). */
            loom_cpu_sgemm(true, false, nk, D, mq, 1.0f, p, BC, dO, D, 1.0f, dv, D);
            loom_cpu_sgemm(true, false, nk, D, mq, s.scale, ds, BC, Q, D, 1.0f, dk, D);
          }
          size_t off = (size_t)((h * s.T + k0) * D) * s.es;
          if (a->out[1]) loom_cpu_store_f32((char *)loom_tensor_ptr(a->out[1]) + off, s.dt, 1, nk * D, dk);
          if (a->out[2]) loom_cpu_store_f32((char *)loom_tensor_ptr(a->out[2]) + off, s.dt, 1, nk * D, dv);
        }
      }
      /* dq: one task per query tile, over the key tiles it sees. */
      if (a->out[0]) {
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < s.bh * nqt; t++) {
          int64_t h = t / nqt, q0 = (t % nqt) * BR, mq = s.T - q0 < BR ? s.T - q0 : BR;
          const float *Q = rows_f32(&s, q, h, q0, mq, qb), *dO = rows_f32(&s, gy, h, q0, mq, gb);
          float *dq = acc0;
          memset(dq, 0, (size_t)(mq * D) * sizeof(float));
          int64_t kend = key_end(&s, q0 + mq);
          for (int64_t k0 = 0; k0 < kend; k0 += BC) {
            int64_t nk = kend - k0 < BC ? kend - k0 : BC;
            const float *K = rows_f32(&s, k, h, k0, nk, kb), *V = rows_f32(&s, v, h, k0, nk, vb);
            tile_grads(&s, Q, dO, K, V, pst + 2 * h * s.T, q0, mq, k0, nk, p, ds);
            /* dq += scale · dS · K */
            loom_cpu_sgemm(false, false, mq, D, nk, s.scale, ds, BC, K, D, 1.0f, dq, D);
          }
          loom_cpu_store_f32((char *)loom_tensor_ptr(a->out[0]) + (size_t)((h * s.T + q0) * D) * s.es, s.dt, 1,
                             mq * D, dq);
        }
      }
    }
    loom_sys_free(buf);
  }
  if (st != LOOM_OK) return loom_set_error(st, "attention backward: out of host memory for its tiles");
  return LOOM_OK;
}
