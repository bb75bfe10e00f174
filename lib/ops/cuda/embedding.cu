/* embedding.cu — the embedding lookup on CUDA.
 *
 * Forward: a gather, one thread per output element (rows copied as raw
 *   elements: no rounding).
 * Backward: a deterministic scatter-add. The (index, position) pairs are
 *   sorted stably by index (a parallel counting sort: an atomic histogram,
 *   a one-block scan, then one warp placing 32 positions per step, so
 *   positions stay ascending within an index; see "The sort" below), so
 *   the positions that add into one row of dweight sit together in order;
 *   then one block per such segment and column tile sums them, a thread
 *   per column, in f32, in position order (the CPU kernel's order) and
 *   writes the row once. No float atomics: the same bits on every run, in
 *   deterministic mode or not; rows no index names stay zero.
 * Bad indices (outside [0, V)) cannot stop the host: forward writes a zero
 *   row, backward skips the position, and the first bad position goes to
 *   the deferred error record (device/deferred.c), reported at the next call
 *   that waits for the GPU, as cross-entropy's labels are. */

#include "ops/cuda/cuda_dtype.cuh"
#include "ops/cuda/deferred.cuh"
#include "ops/cuda/row_reduce.cuh"
#include "ops/cuda/transformer_launch.h"

/* Kernel launches go through this macro so that tests/cuda_emu can run the
 * same kernels on the CPU (it defines its own before including this file). */
#ifndef LOOM_CU_LAUNCH
#define LOOM_CU_LAUNCH(kern, grid, block, stream, ...) kern<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif

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

/* One thread: publish the first bad position (deferred.cuh). */
static __global__ void k_publish(unsigned long long *bad, loom_cu_deferred_error *rec, int op, int idt,
                                 const void *idx, int64_t V) {
  loom_cu_publish_bad(bad, rec, op, V, [&](int64_t r) { return loom_index_at(idx, idt, r); });
}

extern "C" cudaError_t loom_cu_embedding_fwd(int dt, const void *w, int64_t V, int64_t D, int idt, const void *idx,
                                             int64_t n, void *out, unsigned long long *bad,
                                             loom_cu_deferred_error *rec, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  /* D = 0 copies nothing but still checks (the CPU does). */
  const unsigned g = loom_grid_for(D > 0 ? n * D : n);
  if (D == 0) LOOM_CU_LAUNCH(k_check, g, 256, s, idt, idx, n, V, bad);
  else if (dt == 0) LOOM_CU_LAUNCH(k_gather<uint32_t>, g, 256, s, (const uint32_t *)w, V, D, idt, idx, n, (uint32_t *)out, bad);
  else LOOM_CU_LAUNCH(k_gather<uint16_t>, g, 256, s, (const uint16_t *)w, V, D, idt, idx, n, (uint16_t *)out, bad);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  LOOM_CU_LAUNCH(k_publish, 1, 1, s, bad, rec, DEFERRED_EMBEDDING, idt, idx, V);
  return cudaGetLastError();
}

/* ---- backward ------------------------------------------------------------ */

/* Keys (the index; V for a bad one, sorted last and skipped), counted
 * into count[0..V] (zeroed before). */
static __global__ void k_keys(int idt, const void *idx, int64_t n, int64_t V, int32_t *key, int32_t *count,
                              unsigned long long *bad) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t v = loom_index_at(idx, idt, i);
    if (v < 0 || v >= V) {
      atomicMin(bad, (unsigned long long)i);
      v = V;
    }
    key[i] = (int32_t)v;
    atomicAdd(&count[v], 1);
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

/* The sort: a stable counting sort of the keys (0..V; V = bad) with their
 * positions, in three parallel steps instead of one GPU thread's O(n + V)
 * serial loop (CUB's radix sort, which it replaced, put C++ symbols into
 * libloom.a; abi_exports allows loom_* only).
 *   1. k_keys: count[key] += 1 by atomicAdd on int32 (integer sums: the
 *      same counts in any order).
 *   2. k_scan: count becomes its exclusive prefix sum (the first slot of
 *      each key), by one block.
 *   3. k_scatter: one warp walks the positions 32 at a time, in order. A
 *      lane's slot is count[key] + the number of lower lanes holding the
 *      same key; the highest lane of each key then advances count[key] by
 *      the group's size. Positions arrive in ascending order and each takes
 *      the next free slot of its key, so within a key they stay ascending:
 *      the order of the serial counting sort this replaced, bit for bit.
 *      n / 32 dependent steps (512 for 16 k tokens) instead of n + V.
 * tests/cuda_emu/embedding_emu.cpp runs these kernels on the CPU. */

#define SCAN_THREADS 1024

/* count[0..m) <- its exclusive prefix sum. One block: thread t sums a
 * contiguous chunk, the block scans the chunk sums in shared memory
 * (Hillis-Steele, double-buffered), then each thread rewrites its chunk. */
static __global__ void __launch_bounds__(SCAN_THREADS) k_scan(int32_t *count, int64_t m) {
  __shared__ int32_t part[2][SCAN_THREADS];
  const int t = (int)threadIdx.x;
  const int64_t chunk = (m + SCAN_THREADS - 1) / SCAN_THREADS;
  const int64_t lo = t * chunk < m ? t * chunk : m, hi = lo + chunk < m ? lo + chunk : m;
  int32_t s = 0;
  for (int64_t v = lo; v < hi; v++) s += count[v];
  int b = 0;
  part[0][t] = s;
  __syncthreads();
  for (int o = 1; o < SCAN_THREADS; o <<= 1) {
    part[b ^ 1][t] = part[b][t] + (t >= o ? part[b][t - o] : 0);
    b ^= 1;
    __syncthreads();
  }
  int32_t run = part[b][t] - s; /* inclusive minus own: the chunks before t */
  for (int64_t v = lo; v < hi; v++) {
    const int32_t c = count[v];
    count[v] = run;
    run += c;
  }
}

/* One warp (32 threads, one block). cursor: the first free slot of each key. */
static __global__ void k_scatter(const int32_t *key_in, int64_t n, int32_t *cursor, int32_t *key_out,
                                 int32_t *pos_out) {
  const unsigned lane = threadIdx.x;
  int32_t ahead = (int64_t)lane < n ? key_in[lane] : -1; /* -1: no real key (keys are 0..V) */
  for (int64_t base = 0; base < n; base += 32) {
    const int64_t i = base + lane;
    const bool live = i < n;
    const int32_t k = ahead;
    ahead = i + 32 < n ? key_in[i + 32] : -1; /* next round's key, off the cursor's dependent path */
    const unsigned same = __match_any_sync(0xffffffffu, k);
    if (live) {
      const int32_t at = cursor[k] + __popc(same & ((1u << lane) - 1u));
      key_out[at] = k;
      pos_out[at] = (int32_t)i;
    }
    __syncwarp(); /* every lane has read cursor[k] before it moves */
    if (live && (same >> lane) == 1u) cursor[k] += __popc(same);
    __syncwarp(); /* the moves are seen by the next round's reads */
  }
}

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* key_in, key_out, pos_out: n each; count: V + 1. */
extern "C" size_t loom_cu_embedding_bwd_scratch(int64_t n, int64_t V) {
  if (n == 0) return 0;
  return 3 * align256((size_t)n * sizeof(int32_t)) + align256((size_t)(V + 1) * sizeof(int32_t));
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
  int32_t *key_in = (int32_t *)p, *key_out = (int32_t *)(p + a), *pos_out = (int32_t *)(p + 2 * a);
  int32_t *count = (int32_t *)(p + 3 * a);
  cudaError_t e = cudaMemsetAsync(count, 0, (size_t)(V + 1) * sizeof(int32_t), s);
  if (e != cudaSuccess) return e;
  LOOM_CU_LAUNCH(k_keys, loom_grid_for(n), 256, s, idt, idx, n, V, key_in, count, bad);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  LOOM_CU_LAUNCH(k_scan, 1, SCAN_THREADS, s, count, V + 1);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  LOOM_CU_LAUNCH(k_scatter, 1, 32, s, key_in, n, count, key_out, pos_out);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  if (D > 0) {
    const unsigned gc = (unsigned)((D + 255) / 256);
    if (gc > 65535 || n > 0x7fffffff) return cudaErrorInvalidConfiguration;
    const dim3 grid((unsigned)n, gc);
    switch (dt) {
      case 1: LOOM_CU_LAUNCH(k_segment_sum<loom_h16>, grid, 256, s, (const loom_h16 *)gy, D, V, key_out, pos_out, n, (loom_h16 *)dw); break;
      case 2: LOOM_CU_LAUNCH(k_segment_sum<loom_b16>, grid, 256, s, (const loom_b16 *)gy, D, V, key_out, pos_out, n, (loom_b16 *)dw); break;
      default: LOOM_CU_LAUNCH(k_segment_sum<float>, grid, 256, s, (const float *)gy, D, V, key_out, pos_out, n, (float *)dw); break;
    }
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  LOOM_CU_LAUNCH(k_publish, 1, 1, s, bad, rec, DEFERRED_EMBEDDING_BACKWARD, idt, idx, V);
  return cudaGetLastError();
}
