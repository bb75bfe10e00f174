/* elementwise.cu — CUDA kernels of the elementwise ops (binary with
 * broadcasting via strides, unary/scalar, eq, relu_backward) and of strided
 * copies/casts between any two dtypes. The per-element math is
 * ops/elementwise_math.h, the same code the CPU kernels run; f16/bf16 are
 * widened to f32, computed and rounded once, as on the CPU.
 *
 * Three paths per kernel, picked by the launcher from the (coalesced)
 * iteration space:
 *  - vectorized: everything contiguous (an input may also be one broadcast
 *    scalar) and 16-byte aligned: each thread moves 16 bytes of each operand
 *    per access (4 f32, 8 f16/bf16), no index arithmetic;
 *  - contiguous: the same without the alignment (one element per access);
 *  - strided: N-d offsets by div/mod (broadcasts, transposed views). */
#include <string.h>

#include "ops/cuda/cuda_dtype.cuh"
#include "ops/elementwise_math.h"

#define EW_THREADS 256

/* Operand k of a 1-d iteration space: 1 contiguous, 0 broadcast scalar, -1 other. */
static int contig_kind(const loom_cu_iter *it, int k) {
  if (it->ndim != 1) return -1;
  return it->strides[k][0] == 1 ? 1 : it->strides[k][0] == 0 ? 0 : -1;
}

/* ---- binary ------------------------------------------------------------------- */

template <typename T>
static __global__ void k_binary(int op, loom_cu_iter it, T *out, const T *a, const T *b) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < it.numel; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[3];
    loom_iter_offsets(it, i, 3, off);
    out[off[0]] = loom_from_f<T>(loom_ew_binary(op, loom_to_f(a[off[1]]), loom_to_f(b[off[2]])));
  }
}

/* Contiguous out; a/b contiguous (sa/sb = 1) or one broadcast scalar (0). */
template <typename T>
static __global__ void k_binary_contig(int op, int64_t n, T *out, const T *a, int sa, const T *b, int sb) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = loom_from_f<T>(loom_ew_binary(op, loom_to_f(a[sa ? i : 0]), loom_to_f(b[sb ? i : 0])));
}

template <typename T>
static __global__ void k_binary_vec(int op, int64_t nvec, T *out, const T *a, int sa, const T *b, int sb) {
  constexpr int N = 16 / sizeof(T);
  const float as = sa ? 0.0f : loom_to_f(a[0]), bs = sb ? 0.0f : loom_to_f(b[0]);
  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nvec; v += (int64_t)gridDim.x * blockDim.x) {
    loom_vec<T, N> va, vb, vo;
    if (sa) loom_vload(va, a + v * N);
    if (sb) loom_vload(vb, b + v * N);
#pragma unroll
    for (int k = 0; k < N; k++)
      vo.e[k] = loom_from_f<T>(loom_ew_binary(op, sa ? loom_to_f(va.e[k]) : as, sb ? loom_to_f(vb.e[k]) : bs));
    loom_vstore(out + v * N, vo);
  }
}

template <typename T>
static void launch_binary(int op, const loom_cu_iter *it, T *out, const T *a, const T *b, cudaStream_t s) {
  const int ko = contig_kind(it, 0), ka = contig_kind(it, 1), kb = contig_kind(it, 2);
  if (ko != 1 || ka < 0 || kb < 0) {
    k_binary<T><<<loom_grid_for(it->numel), EW_THREADS, 0, s>>>(op, *it, out, a, b);
    return;
  }
  constexpr int N = 16 / sizeof(T);
  int64_t n = it->numel, nvec = 0;
  if (loom_aligned16(out) && (!ka || loom_aligned16(a)) && (!kb || loom_aligned16(b))) nvec = n / N;
  if (nvec > 0) k_binary_vec<T><<<loom_grid_for(nvec), EW_THREADS, 0, s>>>(op, nvec, out, a, ka, b, kb);
  int64_t done = nvec * N;
  if (done < n)
    k_binary_contig<T><<<loom_grid_for(n - done), EW_THREADS, 0, s>>>(op, n - done, out + done, ka ? a + done : a, ka,
                                                                      kb ? b + done : b, kb);
}

extern "C" cudaError_t loom_cu_binary(int ew_op, int dt, const loom_cu_iter *it, void *out, const void *a,
                                      const void *b, cudaStream_t s) {
  if (it->numel == 0) return cudaSuccess;
  switch (dt) {
    case 1: launch_binary(ew_op, it, (loom_h16 *)out, (const loom_h16 *)a, (const loom_h16 *)b, s); break;
    case 2: launch_binary(ew_op, it, (loom_b16 *)out, (const loom_b16 *)a, (const loom_b16 *)b, s); break;
    default: launch_binary(ew_op, it, (float *)out, (const float *)a, (const float *)b, s); break;
  }
  return cudaGetLastError();
}

/* ---- unary ---------------------------------------------------------------------- */

template <typename T>
static __global__ void k_unary(int op, float sc, loom_cu_iter it, T *out, const T *a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < it.numel; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[2];
    loom_iter_offsets(it, i, 2, off);
    out[off[0]] = loom_from_f<T>(loom_ew_unary(op, loom_to_f(a[off[1]]), sc));
  }
}

template <typename T>
static __global__ void k_unary_contig(int op, float sc, int64_t n, T *out, const T *a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = loom_from_f<T>(loom_ew_unary(op, loom_to_f(a[i]), sc));
}

template <typename T>
static __global__ void k_unary_vec(int op, float sc, int64_t nvec, T *out, const T *a) {
  constexpr int N = 16 / sizeof(T);
  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nvec; v += (int64_t)gridDim.x * blockDim.x) {
    loom_vec<T, N> va, vo;
    loom_vload(va, a + v * N);
#pragma unroll
    for (int k = 0; k < N; k++) vo.e[k] = loom_from_f<T>(loom_ew_unary(op, loom_to_f(va.e[k]), sc));
    loom_vstore(out + v * N, vo);
  }
}

template <typename T>
static void launch_unary(int op, float sc, const loom_cu_iter *it, T *out, const T *a, cudaStream_t s) {
  if (contig_kind(it, 0) != 1 || contig_kind(it, 1) != 1) {
    k_unary<T><<<loom_grid_for(it->numel), EW_THREADS, 0, s>>>(op, sc, *it, out, a);
    return;
  }
  constexpr int N = 16 / sizeof(T);
  int64_t n = it->numel, nvec = loom_aligned16(out) && loom_aligned16(a) ? n / N : 0;
  if (nvec > 0) k_unary_vec<T><<<loom_grid_for(nvec), EW_THREADS, 0, s>>>(op, sc, nvec, out, a);
  int64_t done = nvec * N;
  if (done < n) k_unary_contig<T><<<loom_grid_for(n - done), EW_THREADS, 0, s>>>(op, sc, n - done, out + done, a + done);
}

extern "C" cudaError_t loom_cu_unary(int ew_op, int dt, float scalar, const loom_cu_iter *it, void *out,
                                     const void *a, cudaStream_t s) {
  if (it->numel == 0) return cudaSuccess;
  switch (dt) {
    case 1: launch_unary(ew_op, scalar, it, (loom_h16 *)out, (const loom_h16 *)a, s); break;
    case 2: launch_unary(ew_op, scalar, it, (loom_b16 *)out, (const loom_b16 *)a, s); break;
    default: launch_unary(ew_op, scalar, it, (float *)out, (const float *)a, s); break;
  }
  return cudaGetLastError();
}

/* ---- copies and casts ---------------------------------------------------- */

/* Same dtype: move the bits (exact for every dtype, including i64). */
template <typename U>
static __global__ void k_copy_bits(loom_cu_iter it, U *out, const U *a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < it.numel; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[2];
    loom_iter_offsets(it, i, 2, off);
    out[off[0]] = a[off[1]];
  }
}

/* Contiguous runs of bytes (a contiguous copy of any dtype): 16 per access
 * when aligned, which is what fill_ (a broadcast scalar) is not. */
static __global__ void k_copy_words(int64_t nw, uint4 *out, const uint4 *a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nw; i += (int64_t)gridDim.x * blockDim.x)
    out[i] = a[i];
}

/* Float to float: through f32 (what the CPU does). */
static __global__ void k_copy_float(int odt, int idt, loom_cu_iter it, void *out, const void *a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < it.numel; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[2];
    loom_iter_offsets(it, i, 2, off);
    loom_store_f(out, odt, off[0], loom_load_f(a, idt, off[1]));
  }
}

/* Contiguous float casts (the mixed-precision weight/activation casts), 8
 * elements per thread: 16-byte accesses on the 16-bit side, two on the f32
 * side. */
template <typename O, typename I>
static __global__ void k_cast_vec(int64_t nvec, O *out, const I *a) {
  for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nvec; v += (int64_t)gridDim.x * blockDim.x) {
    loom_vec<I, 8> vi;
    loom_vec<O, 8> vo;
    loom_vload(vi, a + v * 8);
#pragma unroll
    for (int k = 0; k < 8; k++) vo.e[k] = loom_from_f<O>(loom_to_f(vi.e[k]));
    loom_vstore(out + v * 8, vo);
  }
}

template <typename O, typename I>
static void try_cast_vec(int64_t n, void *out, const void *a, int64_t *done, cudaStream_t s) {
  int64_t nvec = n / 8;
  if (nvec == 0 || !loom_aligned16(out) || !loom_aligned16(a)) return;
  k_cast_vec<O, I><<<loom_grid_for(nvec), EW_THREADS, 0, s>>>(nvec, (O *)out, (const I *)a);
  *done = nvec * 8;
}

/* Anything involving an integer dtype travels through double, exactly like
 * the CPU's loom_cpu_load_f64 / loom_cpu_store_f64. */
static __device__ double load_any(const void *p, int dt, int64_t i) {
  switch (dt) {
    case 0: return ((const float *)p)[i];
    case 1: return loom_cu_h2f(((const uint16_t *)p)[i]);
    case 2: return loom_cu_bf2f(((const uint16_t *)p)[i]);
    case 3: return ((const int32_t *)p)[i];
    case 4: return (double)((const int64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
  }
}

static __device__ void store_any(void *p, int dt, int64_t i, double v) {
  switch (dt) {
    case 0: ((float *)p)[i] = (float)v; break;
    case 1: ((uint16_t *)p)[i] = loom_cu_f2h((float)v); break;
    case 2: ((uint16_t *)p)[i] = loom_cu_f2bf((float)v); break;
    case 3: ((int32_t *)p)[i] = loom_to_i32(v); break;
    case 4: ((int64_t *)p)[i] = loom_to_i64(v); break;
    default: ((uint8_t *)p)[i] = loom_to_u8(v); break;
  }
}

static __global__ void k_copy_any(int odt, int idt, loom_cu_iter it, void *out, const void *a) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < it.numel; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t off[2];
    loom_iter_offsets(it, i, 2, off);
    store_any(out, odt, off[0], load_any(a, idt, off[1]));
  }
}

static int dt_size(int dt) { return dt == 0 || dt == 3 ? 4 : dt == 4 ? 8 : dt == 5 ? 1 : 2; }

/* The part [done, n) of a contiguous copy, by the strided kernels on a 1-d
 * space (no div/mod: ndim 1). */
static loom_cu_iter tail_iter(int64_t n) {
  loom_cu_iter t;
  memset(&t, 0, sizeof t);
  t.ndim = 1;
  t.numel = n;
  t.shape[0] = n;
  t.strides[0][0] = t.strides[1][0] = 1;
  return t;
}

extern "C" cudaError_t loom_cu_copy(int odt, int idt, const loom_cu_iter *it, void *out, const void *a,
                                    cudaStream_t s) {
  if (it->numel == 0) return cudaSuccess;
  const bool contig = contig_kind(it, 0) == 1 && contig_kind(it, 1) == 1;
  int64_t n = it->numel, done = 0;
  loom_cu_iter rest = *it;
  if (contig && odt == idt) {
    int64_t bytes = n * dt_size(odt);
    if (loom_aligned16(out) && loom_aligned16(a) && bytes >= 16) {
      k_copy_words<<<loom_grid_for(bytes / 16), EW_THREADS, 0, s>>>(bytes / 16, (uint4 *)out, (const uint4 *)a);
      done = (bytes / 16) * 16 / dt_size(odt);
    }
  } else if (contig && odt <= 2 && idt <= 2) {
    if (odt == 0 && idt == 1) try_cast_vec<float, loom_h16>(n, out, a, &done, s);
    else if (odt == 0 && idt == 2) try_cast_vec<float, loom_b16>(n, out, a, &done, s);
    else if (odt == 1 && idt == 0) try_cast_vec<loom_h16, float>(n, out, a, &done, s);
    else if (odt == 2 && idt == 0) try_cast_vec<loom_b16, float>(n, out, a, &done, s);
    else if (odt == 1 && idt == 2) try_cast_vec<loom_h16, loom_b16>(n, out, a, &done, s);
    else if (odt == 2 && idt == 1) try_cast_vec<loom_b16, loom_h16>(n, out, a, &done, s);
  }
  if (done >= n) return cudaGetLastError();
  if (done > 0) {
    rest = tail_iter(n - done);
    out = (char *)out + done * dt_size(odt);
    a = (const char *)a + done * dt_size(idt);
  }
  unsigned g = loom_grid_for(rest.numel);
  if (odt == idt) {
    switch (dt_size(odt)) {
      case 1: k_copy_bits<uint8_t><<<g, EW_THREADS, 0, s>>>(rest, (uint8_t *)out, (const uint8_t *)a); break;
      case 2: k_copy_bits<uint16_t><<<g, EW_THREADS, 0, s>>>(rest, (uint16_t *)out, (const uint16_t *)a); break;
      case 4: k_copy_bits<uint32_t><<<g, EW_THREADS, 0, s>>>(rest, (uint32_t *)out, (const uint32_t *)a); break;
      default: k_copy_bits<uint64_t><<<g, EW_THREADS, 0, s>>>(rest, (uint64_t *)out, (const uint64_t *)a); break;
    }
  } else if (odt <= 2 && idt <= 2) {
    k_copy_float<<<g, EW_THREADS, 0, s>>>(odt, idt, rest, out, a);
  } else {
    k_copy_any<<<g, EW_THREADS, 0, s>>>(odt, idt, rest, out, a);
  }
  return cudaGetLastError();
}
