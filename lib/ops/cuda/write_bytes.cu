/* write_bytes.cu — host bytes into device memory as kernel arguments: what a
 * small table upload does while a CUDA graph is being captured. A copy from
 * pageable host memory cannot be captured safely (the graph would re-read
 * the host buffer at every replay, after the host reused it); bytes passed
 * by value are baked into the graph's kernel nodes, so every replay writes
 * the same table. Chunks of 1 KiB, one launch each (tables are small). */
#include <string.h>
#include "ops/cuda/cuda_launch.h"

#define CHUNK 1024

typedef struct payload {
  unsigned char b[CHUNK];
} payload;

static __global__ void k_write_bytes(unsigned char *dst, payload p, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = p.b[i];
}

extern "C" cudaError_t loom_cu_write_bytes(void *dst, const void *src, size_t n, cudaStream_t s) {
  const unsigned char *from = (const unsigned char *)src;
  for (size_t off = 0; off < n; off += CHUNK) {
    int len = (int)(n - off < CHUNK ? n - off : CHUNK);
    payload p;
    memcpy(p.b, from + off, (size_t)len);
    k_write_bytes<<<1, 256, 0, s>>>((unsigned char *)dst + off, p, len);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
