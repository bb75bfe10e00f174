/* matmul_lt.c — GEMMs on cuBLASLt: the plan cache and loom_cuda_matmul.
 *
 * loom's tensors are row-major; cuBLASLt is column-major. A row-major
 * C[M,N] = op(A)·op(B) is the column-major Cᵀ[N,M] = op(B)ᵀ·op(A)ᵀ, so every
 * call swaps the operands: cuBLASLt's m = N, n = M, its A is our B and its
 * B is our A, with the transpose flags carried over. cuBLASLt's epilogue
 * "bias per row of D" is then loom's bias per output feature, and its
 * BGRADB (a reduction over k of its B) is the column sum of our dZ.
 *
 * Plans (matmul descriptor, three layouts, the heuristic's algorithm or the
 * fact that there is none) are cached by everything that shapes them:
 * device, dtype, transposes, M/N/K, leading dims, batch count and strides,
 * epilogue, aux leading dim, TF32, and the alignment class of each pointer.
 * The heuristic is told those real alignments (PREF_MIN_ALIGNMENT_*; its
 * default assumes 256-byte operands, which a sliced view is not), so every
 * plan's algorithm is valid for the pointers it is used with.
 *
 * The cache is a hash table whose chains only grow: a lookup takes no lock
 * (acquire loads of published, immutable keys); building a missing plan
 * takes the insert lock. Only plans whose epilogue reads bias/aux pointers
 * are mutated per call (the pointers go on the cached descriptor right
 * before cublasLtMatmul is enqueued): those take their own plan's lock.
 *
 * "No algorithm" is a property of one plan key, never of the process: a
 * fused epilogue without one makes the caller fall back for that shape only
 * (LOOM_ERR_UNSUPPORTED, no message), and a plain GEMM without one runs on
 * cublasGemmStridedBatchedEx instead. */
#ifdef LOOM_HAVE_CUDA
#include <cublas_v2.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/teardown.h"
#include "loom/log.h"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_kernels.h"
#include "core/sys.h"

typedef struct plan_key {
  int64_t dev, dt, c_f32, ta, tb, M, N, K, lda, ldb, ldc, sa, sb, sc, batch, epilogue, aux_ld, tf32, refuse;
  int64_t align[5];  /* A, B, C, bias, aux: largest power of two <= 256 dividing the address */
} plan_key;

typedef struct plan {
  plan_key key;
  uint64_t hash;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  int has_algo;              /* atomic: cleared if cublasLtMatmul refuses the heuristic's choice */
  pthread_mutex_t lock;      /* per-call pointer attributes of bias/aux epilogues */
  struct plan *next;         /* chain; written before publication, never changed */
} plan;

#define PLAN_BUCKETS 256
static plan *g_buckets[PLAN_BUCKETS];  /* heads, published with release stores */
static pthread_mutex_t g_plan_insert = PTHREAD_MUTEX_INITIALIZER;
static bool g_allow_tf32 = false;
static bool g_refuse_algos = false;
static pthread_mutex_t g_blas_lock = PTHREAD_MUTEX_INITIALIZER;

bool loom_cuda_tf32_allowed(void) { return __atomic_load_n(&g_allow_tf32, __ATOMIC_RELAXED); }
/* Called by loom_set_allow_tf32 (cuda_switches.c). */
void loom_cuda_set_tf32(bool on);
void loom_cuda_set_tf32(bool on) { __atomic_store_n(&g_allow_tf32, on, __ATOMIC_RELAXED); }

void loom_cuda_lt_testing_refuse(bool on) { __atomic_store_n(&g_refuse_algos, on, __ATOMIC_RELAXED); }

static int64_t align_class(const void *p) {
  uintptr_t u = (uintptr_t)p;
  if (!u) return 256;
  int64_t a = 1;
  while (a < 256 && (u % (uintptr_t)(a * 2)) == 0) a *= 2;
  return a;
}

static bool uses_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DRELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}

static bool uses_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_RELU_AUX || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DRELU ||
         e == CUBLASLT_EPILOGUE_DRELU_BGRAD;
}

static cudaDataType_t cuda_type(loom_dtype dt) {
  return dt == LOOM_F16 ? CUDA_R_16F : dt == LOOM_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static void plan_destroy(plan *p) {
  if (p->desc) cublasLtMatmulDescDestroy(p->desc);
  if (p->la) cublasLtMatrixLayoutDestroy(p->la);
  if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
  if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
  pthread_mutex_destroy(&p->lock);
  loom_sys_free(p);
}

/* loom_shutdown: every cached plan (descriptors and layouts) is destroyed;
 * the next GEMM of each shape builds its plan again. */
static loom_status plans_teardown(void) {
  pthread_mutex_lock(&g_plan_insert);
  for (int b = 0; b < PLAN_BUCKETS; b++) {
    plan *p = g_buckets[b];
    g_buckets[b] = NULL;
    while (p) {
      plan *nx = p->next;
      plan_destroy(p);
      p = nx;
    }
  }
  pthread_mutex_unlock(&g_plan_insert);
  return LOOM_OK;
}
LOOM_TEARDOWN(LOOM_LAYER_OPS, plans_teardown)

/* FNV-1a over the key's bytes (the key is all int64, no padding). */
static uint64_t key_hash(const plan_key *k) {
  const unsigned char *b = (const unsigned char *)k;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static plan *lookup(const plan_key *k, uint64_t h) {
  plan *p = __atomic_load_n(&g_buckets[h % PLAN_BUCKETS], __ATOMIC_ACQUIRE);
  while (p && (p->hash != h || memcmp(&p->key, k, sizeof *k) != 0)) p = p->next;
  return p;
}

/* Column-major layout of rows x cols with leading dim ld, batched. */
static loom_status make_layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                               int64_t batch, int64_t stride) {
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
  if (batch > 1) {
    int32_t bc = (int32_t)batch;
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
    LOOM_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return LOOM_OK;
}

static loom_status set_pointers(plan *p, const loom_lt_gemm *g) {
  cublasLtEpilogue_t e = g->epilogue;
  if (uses_bias(e)) {
    void *b = g->bias;
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b));
  }
  if (uses_aux(e)) {
    void *x = g->aux;
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &x, sizeof x));
  }
  return LOOM_OK;
}

static loom_status plan_build(loom_cuda_ctx *ctx, const loom_lt_gemm *g, const plan_key *key, plan **out) {
  *out = NULL;
  plan *p = loom_sys_calloc(1, sizeof *p);
  if (!p) return loom_set_error(LOOM_ERR_OOM, "matmul: out of host memory for a cuBLASLt plan");
  p->key = *key;
  pthread_mutex_init(&p->lock, NULL);
  loom_status st = LOOM_OK;
  cudaDataType_t t = cuda_type(g->dt), tc = g->c_f32 ? CUDA_R_32F : t;
  cublasComputeType_t ct =
      (g->dt == LOOM_F32 && key->tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  /* Column-major problem: m = N, n = M; cuBLASLt's A is our B and vice versa. */
  cublasOperation_t opa = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opb = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtEpilogue_t epi = g->epilogue;
  cublasStatus_t cs;
#define TRYCB(call)                                                                          \
  do {                                                                                       \
    if (st == LOOM_OK && (cs = (call)) != CUBLAS_STATUS_SUCCESS) st = loom_cublas_error(cs, #call, __FILE__, __LINE__); \
  } while (0)
  TRYCB(cublasLtMatmulDescCreate(&p->desc, ct, CUDA_R_32F));
  TRYCB(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  TRYCB(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  TRYCB(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (st == LOOM_OK && uses_aux(epi)) {
    int64_t ld = g->aux_ld;
    TRYCB(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
  }
  /* The pointers go in before the heuristic: it reads their alignment. */
  if (st == LOOM_OK) st = set_pointers(p, g);
  if (st == LOOM_OK)
    st = make_layout(&p->la, t, g->trans_b ? g->K : g->N, g->trans_b ? g->N : g->K, g->ldb, g->batch, g->sb);
  if (st == LOOM_OK)
    st = make_layout(&p->lb, t, g->trans_a ? g->M : g->K, g->trans_a ? g->K : g->M, g->lda, g->batch, g->sa);
  if (st == LOOM_OK) st = make_layout(&p->lc, tc, g->N, g->M, g->ldc, g->batch, g->sc);
  if (st == LOOM_OK && key->refuse) {
    loom_log_msg(LOOM_LOG_INFO, "cuBLASLt: refusing algorithms (testing switch) for epilogue %d", (int)epi);
  } else if (st == LOOM_OK) {
    cublasLtMatmulPreference_t pref = NULL;
    TRYCB(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = ctx->workspace_bytes;
    TRYCB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    /* The operands' real alignments (cuBLASLt's A is our B; C and D are
     * our C): without them the heuristic assumes 256 bytes and may pick a
     * kernel that faults or is refused on a sliced view. */
    uint32_t al[4] = {(uint32_t)key->align[1], (uint32_t)key->align[0], (uint32_t)key->align[2],
                      (uint32_t)key->align[2]};
    TRYCB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]));
    TRYCB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]));
    TRYCB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]));
    TRYCB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]));
    /* Split-K partial sums stay in f32: the INPLACE and OUTPUT_TYPE schemes
     * add them in the output type, and for f16/bf16 that rounds every
     * partial (the second GPU run: a bf16 product over 2048 terms 1.5 of its
     * tolerance off, against one rounding of an f32 sum). */
    uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    if (tc != CUDA_R_32F)
      TRYCB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red));
    if (st == LOOM_OK) {
      cublasLtMatmulHeuristicResult_t res;
      int count = 0;
      memset(&res, 0, sizeof res);
      cs = cublasLtMatmulAlgoGetHeuristic(ctx->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &count);
      if (cs == CUBLAS_STATUS_SUCCESS && count > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
        p->algo = res.algo;
        p->has_algo = 1;
      } else if (cs != CUBLAS_STATUS_SUCCESS && cs != CUBLAS_STATUS_NOT_SUPPORTED && cs != CUBLAS_STATUS_INVALID_VALUE) {
        st = loom_cublas_error(cs, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
      } else {
        /* No algorithm for this key (an epilogue may reject a layout with
         * INVALID_VALUE): cached as such; the caller falls back. */
        loom_log_msg(LOOM_LOG_INFO,
                     "cuBLASLt: no algorithm for epilogue %d, %lld x %lld x %lld %s (%s); %s",
                     (int)epi, (long long)g->M, (long long)g->N, (long long)g->K, loom_dtype_name(g->dt),
                     cublasLtGetStatusName(cs),
                     epi == CUBLASLT_EPILOGUE_DEFAULT ? "using cublasGemmEx" : "using the unfused path for this shape");
      }
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
#undef TRYCB
  if (st != LOOM_OK) {
    plan_destroy(p);
    return st;
  }
  *out = p;
  return LOOM_OK;
}

/* A plain GEMM on cuBLAS's classic API (cuBLASLt offered no algorithm): the
 * same column-major swap, on the context's stream and workspace. */
static loom_status gemm_ex(loom_cuda_ctx *ctx, const loom_lt_gemm *g) {
  pthread_mutex_lock(&g_blas_lock);
  loom_status st = LOOM_OK;
  if (!ctx->blas) {
    cublasStatus_t cs = cublasCreate(&ctx->blas);
    if (cs == CUBLAS_STATUS_SUCCESS) cs = cublasSetWorkspace(ctx->blas, ctx->workspace, ctx->workspace_bytes);
    /* As the cuBLASLt plans: no split-K partials rounded to f16/bf16. */
    if (cs == CUBLAS_STATUS_SUCCESS) cs = cublasSetMathMode(ctx->blas, CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    if (cs != CUBLAS_STATUS_SUCCESS) {
      if (ctx->blas) cublasDestroy(ctx->blas);
      ctx->blas = NULL;
      st = loom_cublas_error(cs, "cublasCreate (fallback GEMM)", __FILE__, __LINE__);
    }
  }
  if (st == LOOM_OK) {
    cublasStatus_t cs = cublasSetStream(ctx->blas, ctx->stream);
    cudaDataType_t t = cuda_type(g->dt);
    cublasComputeType_t ct =
        (g->dt == LOOM_F32 && loom_cuda_tf32_allowed()) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const float alpha = 1.0f, beta = g->beta;
    if (cs == CUBLAS_STATUS_SUCCESS)
      cs = cublasGemmStridedBatchedEx_64(ctx->blas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g->N, g->M, g->K, &alpha, g->B, t,
                                         g->ldb, g->batch > 1 ? g->sb : 0, g->A, t, g->lda, g->batch > 1 ? g->sa : 0,
                                         &beta, g->C, g->c_f32 ? CUDA_R_32F : t, g->ldc, g->batch > 1 ? g->sc : 0,
                                         g->batch, ct,
                                         CUBLAS_GEMM_DEFAULT);
    if (cs != CUBLAS_STATUS_SUCCESS) st = loom_cublas_error(cs, "cublasGemmStridedBatchedEx", __FILE__, __LINE__);
  }
  pthread_mutex_unlock(&g_blas_lock);
  return st;
}

loom_status loom_lt_gemm_run(loom_cuda_ctx *ctx, const loom_lt_gemm *g) {
  if (g->c_f32 && g->epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    return loom_set_error(LOOM_ERR_INTERNAL, "matmul: an f32 C from 16-bit operands takes no epilogue");
  plan_key key;
  memset(&key, 0, sizeof key);
  key.dev = ctx->dev.index;
  key.dt = g->dt;
  key.c_f32 = g->c_f32 && g->dt != LOOM_F32;
  key.ta = g->trans_a;
  key.tb = g->trans_b;
  key.M = g->M;
  key.N = g->N;
  key.K = g->K;
  key.lda = g->lda;
  key.ldb = g->ldb;
  key.ldc = g->ldc;
  key.batch = g->batch;
  key.sa = g->batch > 1 ? g->sa : 0;
  key.sb = g->batch > 1 ? g->sb : 0;
  key.sc = g->batch > 1 ? g->sc : 0;
  key.epilogue = g->epilogue;
  key.aux_ld = uses_aux(g->epilogue) ? g->aux_ld : 0;
  key.tf32 = g->dt == LOOM_F32 && loom_cuda_tf32_allowed();
  key.refuse = __atomic_load_n(&g_refuse_algos, __ATOMIC_RELAXED);
  key.align[0] = align_class(g->A);
  key.align[1] = align_class(g->B);
  key.align[2] = align_class(g->C);
  key.align[3] = uses_bias(g->epilogue) ? align_class(g->bias) : 0;
  key.align[4] = uses_aux(g->epilogue) ? align_class(g->aux) : 0;
  uint64_t h = key_hash(&key);

  plan *p = lookup(&key, h);
  if (!p) {
    pthread_mutex_lock(&g_plan_insert);
    p = lookup(&key, h);
    loom_status st = LOOM_OK;
    if (!p) {
      st = plan_build(ctx, g, &key, &p);
      if (st == LOOM_OK) {
        p->hash = h;
        p->next = g_buckets[h % PLAN_BUCKETS];
        __atomic_store_n(&g_buckets[h % PLAN_BUCKETS], p, __ATOMIC_RELEASE);
      }
    }
    pthread_mutex_unlock(&g_plan_insert);
    LOOM_TRY(st);
  }
  if (!__atomic_load_n(&p->has_algo, __ATOMIC_ACQUIRE)) {
    if (g->epilogue == CUBLASLT_EPILOGUE_DEFAULT) return gemm_ex(ctx, g);
    return LOOM_ERR_UNSUPPORTED;  /* the caller falls back; no message */
  }
  bool per_call = uses_bias(g->epilogue) || uses_aux(g->epilogue);
  if (per_call) pthread_mutex_lock(&p->lock);
  loom_status st = per_call ? set_pointers(p, g) : LOOM_OK;
  bool refused = false;
  if (st == LOOM_OK) {
    const float alpha = 1.0f, beta = g->beta;
    /* cuBLASLt's A is our B (see the top of this file). */
    cublasStatus_t cs = cublasLtMatmul(ctx->lt, p->desc, &alpha, g->B, p->la, g->A, p->lb, &beta, g->C, p->lc, g->C,
                                       p->lc, &p->algo, ctx->workspace, ctx->workspace_bytes, ctx->stream);
    if (cs == CUBLAS_STATUS_NOT_SUPPORTED) {
      /* The heuristic offered an algorithm the call then refused: remember
       * that for this key (nothing was enqueued) and fall back. */
      __atomic_store_n(&p->has_algo, 0, __ATOMIC_RELEASE);
      refused = true;
    } else if (cs != CUBLAS_STATUS_SUCCESS) {
      st = loom_cublas_error(cs, "cublasLtMatmul", __FILE__, __LINE__);
    }
  }
  if (per_call) pthread_mutex_unlock(&p->lock);
  if (refused) return g->epilogue == CUBLASLT_EPILOGUE_DEFAULT ? gemm_ex(ctx, g) : LOOM_ERR_UNSUPPORTED;
  return st;
}

/* ---- loom_cuda_matmul ---------------------------------------------------- */

typedef struct operand {
  loom_tensor *t;    /* what the pointers refer to (owned reference) */
  int64_t ld;
  bool flip;         /* stored transposed relative to its logical layout */
} operand;

static loom_status prepare(loom_tensor *t, operand *g) {
  int nd = t->ndim;
  int64_t r = t->shape[nd - 2], c = t->shape[nd - 1];
  int64_t s0 = t->strides[nd - 2], s1 = t->strides[nd - 1];
  if ((s1 == 1 || c == 1) && (s0 >= c || r == 1) && s0 > 0) {
    g->t = loom_tensor_retain(t);
    g->ld = r == 1 ? (c > 0 ? c : 1) : s0;
    if (g->ld < c) g->ld = c;
    g->flip = false;
  } else if ((s0 == 1 || r == 1) && (s1 >= r || c == 1) && s1 > 0) {
    g->t = loom_tensor_retain(t);
    g->ld = c == 1 ? (r > 0 ? r : 1) : s1;
    if (g->ld < r) g->ld = r;
    g->flip = true;
  } else {
    g->t = loom_cuda_contig(t, t->dtype);
    if (!g->t) return loom_last_status();
    g->ld = c > 0 ? c : 1;
    g->flip = false;
  }
  return LOOM_OK;
}


/* One stride for all batches, or false. */
static bool affine_batches(const loom_tensor *t, const loom_tensor *out, int64_t batches, int64_t *stride) {
  *stride = batches > 1 ? loom_matmul_batch_offset(t, out, 1) : 0;
  for (int64_t b = 2; b < batches; b++)
    if (loom_matmul_batch_offset(t, out, b) != b * *stride) return false;
  return true;
}

/* Materialize t broadcast to out's batch dims, contiguous. */
static loom_tensor *expand_batches(loom_tensor *t, const loom_tensor *out) {
  int nd = out->ndim;
  int64_t shape[LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS];
  for (int d = 0; d < nd - 2; d++) {
    int td = d - (nd - t->ndim);
    shape[d] = out->shape[d];
    strides[d] = (td >= 0 && t->shape[td] != 1) ? t->strides[td] : 0;
  }
  shape[nd - 2] = t->shape[t->ndim - 2];
  shape[nd - 1] = t->shape[t->ndim - 1];
  strides[nd - 2] = t->strides[t->ndim - 2];
  strides[nd - 1] = t->strides[t->ndim - 1];
  loom_tensor *view = loom_tensor_new_header(t->storage, t->offset, t->dtype, nd, shape, strides);
  if (!view) return NULL;
  loom_tensor *c = loom_cuda_contig(view, t->dtype);
  loom_tensor_release(view);
  return c;
}

/* Give operand g one batch stride: as it is when its batches are affine,
 * else through a contiguous copy broadcast to out's batch dims. */
static loom_status batch_layout(operand *g, const loom_tensor *out, int64_t batches, int64_t *stride) {
  if (affine_batches(g->t, out, batches, stride)) return LOOM_OK;
  loom_tensor *e = expand_batches(g->t, out);
  if (!e) return loom_last_status();
  loom_tensor_release(g->t);
  g->t = e;
  g->ld = e->shape[e->ndim - 1] > 0 ? e->shape[e->ndim - 1] : 1;
  g->flip = false;
  if (!affine_batches(e, out, batches, stride))
    return loom_set_error(LOOM_ERR_INTERNAL, "matmul: could not lay out the batch dims");
  return LOOM_OK;
}

loom_status loom_cuda_matmul(loom_op_args *a) {
  loom_tensor *x = a->in[0], *y = a->in[1], *o = a->out[0];
  bool ta = a->i[0] != 0, tb = a->i[1] != 0;
  loom_cuda_ctx *ctx = loom_cuda_ctx_of(o);
  if (!ctx) return loom_last_status();
  int nd = o->ndim;
  int64_t M = o->shape[nd - 2], N = o->shape[nd - 1];
  int64_t K = ta ? x->shape[x->ndim - 2] : x->shape[x->ndim - 1];
  int64_t batches = loom_shape_numel(nd - 2, o->shape);
  if (M == 0 || N == 0 || batches == 0) return LOOM_OK;
  if (K == 0) {
    LOOM_CUDA_CHECK(cudaMemsetAsync(loom_tensor_ptr(o), 0,
                                    (size_t)loom_shape_numel(nd, o->shape) * loom_dtype_size(o->dtype), ctx->stream));
    return LOOM_OK;
  }
  operand gx = {0}, gy = {0};
  int64_t sx = 0, sy = 0;
  loom_status st = prepare(x, &gx);
  if (st == LOOM_OK) st = prepare(y, &gy);
  if (st == LOOM_OK) st = batch_layout(&gx, o, batches, &sx);
  if (st == LOOM_OK) st = batch_layout(&gy, o, batches, &sy);
  if (st == LOOM_OK) {
    loom_lt_gemm g = {.dt = o->dtype, .trans_a = ta != gx.flip, .trans_b = tb != gy.flip, .M = M, .N = N, .K = K,
                      .A = loom_tensor_ptr(gx.t), .lda = gx.ld, .sa = sx,
                      .B = loom_tensor_ptr(gy.t), .ldb = gy.ld, .sb = sy,
                      .C = loom_tensor_ptr(o), .ldc = N, .sc = M * N, .batch = batches,
                      .epilogue = CUBLASLT_EPILOGUE_DEFAULT};
    st = loom_lt_gemm_run(ctx, &g);  /* a DEFAULT epilogue always runs (cublasGemmEx when cuBLASLt has none) */
  }
  loom_tensor_release(gx.t);
  loom_tensor_release(gy.t);
  return st;
}
#endif
