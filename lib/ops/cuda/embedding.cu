/* embedding.cu — the embedding lookup on CUDA.
 *
 * Forward: a gather, one thread per output element (rows copied as raw
 *   elements: no rounding).
 * Backward: a deterministic scatter-add. The (index, position) pairs are
 *   sorted stably by index (a counting sort, k_counting_sort: positions stay ascending
 *   within an index), so the positions that add into one row of dweight
 *   sit together in order; then one block per such segment and column tile
 *   sums them, a thread per column, in f32, in position order (the CPU
 *   kernel's order) and writes the row once. No atomics: the same bits on
 *   every run, in deterministic mode or not; rows no index names stay zero.
 * Bad indices (outside [0, V)) cannot stop the host: forward writes a zero
 *   row, backward skips the position, and the first bad position goes to
 *   the deferred error record (device/deferred.c), reported at the next call
 *   that waits for the GPU, as cross-entropy's labels are. */

#include "ops/cuda/cuda_dtype.cuh"
#include "ops/cuda/row_reduce.cuh"
#include "ops/cuda/transformer_launch.h"

#define DEFERRED_EMBEDDING 1          /* LOOM_DEFERRED_EMBEDDING (device_internal.h) */
#define DEFERRED_EMBEDDING_BACKWARD 2 /* LOOM_DEFERRED_EMBEDDING_BACKWARD */

template <typename E>
static __global__ void k_gather(const E *w, int64_t V, int64_t D, int idt, const void *idx, int64_t n, E *out,
                                unsigned long long *bad) {
  const int64_t total = n * D;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e / D, j = e % D, v = loom_index_at(idx, idt, i);
    if (v < 0 || v >= V) {
      out[e] = (E)0;
      if (j == 0) atomicMin(bad, (unsigned long long)i);
    } else {
      out[e] = w[v * D + j];
    }
  }
}

static __global__ void k_check(int idt, const void *idx, int64_t n, int64_t V, unsigned long long *bad) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t v = loom_index_at(idx, idt, i);
    if (v < 0 || v >= V) atomicMin(bad, (unsigned long long)i);
  }
}

/* One thread: publish the first bad position (if the record is free) and
 * clear the device word for the next launch. */
static __global__ void k_publish(unsigned long long *bad, loom_cu_deferred_error *rec, int op, int idt,
                                 const void *idx, int64_t V) {
  const unsigned long long r = *bad;
  if (r == ~0ull) return;
  if (rec->row == ~0ull) {
    rec->label = loom_index_at(idx, idt, (int64_t)r);
    rec->classes = V;
    rec->op = op;
    __threadfence_system(); /* the fields before row, as the host reads them */
    rec->row = r;
  }
  *bad = ~0ull;
}

extern "C" cudaError_t loom_cu_embedding_fwd(int dt, const void *w, int64_t V, int64_t D, int idt, const void *idx,
                                             int64_t n, void *out, unsigned long long *bad,
                                             loom_cu_deferred_error *rec, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  /* D = 0 copies nothing but still checks (the CPU does). */
  const unsigned g = loom_grid_for(D > 0 ? n * D : n);
  if (D == 0) k_check<<<g, 256, 0, s>>>(idt, idx, n, V, bad);
  else if (dt == 0) k_gather<uint32_t><<<g, 256, 0, s>>>((const uint32_t *)w, V, D, idt, idx, n, (uint32_t *)out, bad);
  else k_gather<uint16_t><<<g, 256, 0, s>>>((const uint16_t *)w, V, D, idt, idx, n, (uint16_t *)out, bad);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  k_publish<<<1, 1, 0, s>>>(bad, rec, DEFERRED_EMBEDDING, idt, idx, V);
  return cudaGetLastError();
}

/* ---- backward ------------------------------------------------------------ */

/* Keys (the index; V for a bad one, sorted last and skipped) and positions. */
static __global__ void k_keys(int idt, const void *idx, int64_t n, int64_t V, int32_t *key, int32_t *pos,
                              unsigned long long *bad) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t v = loom_index_at(idx, idt, i);
    if (v < 0 || v >= V) {
      atomicMin(bad, (unsigned long long)i);
      v = V;
    }
    key[i] = (int32_t)v;
    pos[i] = (int32_t)i;
  }
}

/* Block (k, column tile): if sorted entry k starts a segment of one index
 * v < V, dw[v, j] = the f32 sum of gy[pos, j] over the segment in order. */
template <typename T>
static __global__ void k_segment_sum(const T *gy, int64_t D, int64_t V, const int32_t *key, const int32_t *pos,
                                     int64_t n, T *dw) {
  const int64_t k = blockIdx.x;
  const int32_t v = key[k];
  if (v >= V || (k > 0 && key[k - 1] == v)) return;
  const int64_t j = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
  if (j >= D) return;
  float acc = 0;
  for (int64_t t = k; t < n && key[t] == v; t++) acc += loom_to_f(gy[(int64_t)pos[t] * D + j]);
  dw[(int64_t)v * D + j] = loom_from_f<T>(acc);
}

/* A stable counting sort of the keys (0..V, V = bad) with their positions,
 * by one GPU thread: O(n + V) serial steps (about 60 k for a GPT-2 step's
 * 8 k tokens and 50 k vocabulary). Written instead of CUB's radix sort,
 * whose header-only templates put C++ symbols (cub::, cuda::std::, NVTX)
 * into libloom.a, which must define loom_* symbols only (abi_exports).
 * Simple first; to be replaced by a parallel sort once a GPU can time it. */
static __global__ void k_counting_sort(const int32_t *key_in, int64_t n, int64_t V, int32_t *count,
                                       int32_t *key_out, int32_t *pos_out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (int64_t v = 0; v <= V; v++) count[v] = 0;
  for (int64_t i = 0; i < n; i++) count[key_in[i]]++;
  int32_t run = 0;
  for (int64_t v = 0; v <= V; v++) {
    int32_t c = count[v];
    count[v] = run;
    run += c;
  }
  for (int64_t i = 0; i < n; i++) {
    int32_t at = count[key_in[i]]++;
    key_out[at] = key_in[i];
    pos_out[at] = (int32_t)i;
  }
}

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

extern "C" size_t loom_cu_embedding_bwd_scratch(int64_t n, int64_t V) {
  if (n == 0) return 0;
  return 4 * align256((size_t)n * sizeof(int32_t)) + align256((size_t)(V + 1) * sizeof(int32_t));
}

extern "C" cudaError_t loom_cu_embedding_bwd(int dt, const void *gy, int64_t V, int64_t D, int idt, const void *idx,
                                             int64_t n, void *dw, void *scratch, size_t scratch_bytes,
                                             unsigned long long *bad, loom_cu_deferred_error *rec, cudaStream_t s) {
  const size_t es = dt == 0 ? 4 : 2;
  if (V * D > 0) {
    cudaError_t e = cudaMemsetAsync(dw, 0, (size_t)(V * D) * es, s);
    if (e != cudaSuccess) return e;
  }
  if (n == 0) return cudaSuccess;
  if (scratch_bytes < loom_cu_embedding_bwd_scratch(n, V)) return cudaErrorInvalidValue;
  const size_t a = align256((size_t)n * sizeof(int32_t));
  char *p = (char *)scratch;
  int32_t *key_in = (int32_t *)p, *key_out = (int32_t *)(p + a), *pos_in = (int32_t *)(p + 2 * a),
          *pos_out = (int32_t *)(p + 3 * a);
  int32_t *count = (int32_t *)(p + 4 * a);
  k_keys<<<loom_grid_for(n), 256, 0, s>>>(idt, idx, n, V, key_in, pos_in, bad);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  k_counting_sort<<<1, 1, 0, s>>>(key_in, n, V, count, key_out, pos_out);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  if (D > 0) {
    const unsigned gc = (unsigned)((D + 255) / 256);
    if (gc > 65535 || n > 0x7fffffff) return cudaErrorInvalidConfiguration;
    const dim3 grid((unsigned)n, gc);
    switch (dt) {
      case 1: k_segment_sum<loom_h16><<<grid, 256, 0, s>>>((const loom_h16 *)gy, D, V, key_out, pos_out, n, (loom_h16 *)dw); break;
      case 2: k_segment_sum<loom_b16><<<grid, 256, 0, s>>>((const loom_b16 *)gy, D, V, key_out, pos_out, n, (loom_b16 *)dw); break;
      default: k_segment_sum<float><<<grid, 256, 0, s>>>((const float *)gy, D, V, key_out, pos_out, n, (float *)dw); break;
    }
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  k_publish<<<1, 1, 0, s>>>(bad, rec, DEFERRED_EMBEDDING_BACKWARD, idt, idx, V);
  return cudaGetLastError();
}
