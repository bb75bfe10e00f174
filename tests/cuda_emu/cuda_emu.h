/* cuda_emu.h — just enough of CUDA's execution model, on the CPU, to run
 * simple kernels of lib/ops/cuda (written for it: no dynamic shared
 * memory, every lane of a warp at every shuffle, match and __syncwarp)
 * without a GPU. Include it, define LOOM_CU_LAUNCH as below, then include
 * the .cu file.
 *
 * A launch runs its blocks one after another; a block's threads are
 * contexts (ucontext) on one host thread, each running until it reaches a
 * barrier, so __syncthreads is a real barrier and a missing one shows up as
 * a thread reading what another has not written yet. __shared__ variables
 * become function statics: one copy, shared by the threads of the block
 * that is running. __shfl_xor_sync, __shfl_sync and __match_any_sync
 * exchange through a buffer between two barriers of the 32 threads of a
 * warp; __syncwarp is that warp barrier. Atomics (atomicAdd, atomicMin on
 * int / unsigned long long) are plain read-modify-writes: threads switch
 * only at barriers, so none can come between. Grids may be 2-D or 3-D
 * (blockIdx, gridDim); blocks are 1-D (blockDim.x). Between barriers the
 * threads run one at a time in ascending order (the last to reach a
 * barrier going on first), or descending with emu_reverse set: a kernel
 * that is right in both orders does not lean on one of them for what
 * needs a barrier. What this does not model: memory ordering without
 * barriers beyond those two orders, warp divergence (a shuffle that some
 * lanes skip deadlocks, and the scheduler aborts saying so), launch
 * limits, and speed.
 *
 * Compiled by the host C++ compiler with the toolkit's headers on the
 * include path (for cuda_fp16.h / cuda_bf16.h, whose conversions are
 * host-callable, and the vector types); no CUDA library is linked. */
#ifndef LOOM_TESTS_CUDA_EMU_H
#define LOOM_TESTS_CUDA_EMU_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

struct emu_dim3 {
  unsigned x, y, z;
};
static emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
static bool emu_reverse; /* run a block's threads in descending order */

/* One block at a time: its threads are contexts switched on one host
 * thread (a thread runs until it reaches a barrier, then the next one
 * runs), so a run is deterministic and cheap. A barrier releases its
 * threads when all of them (the block, or the 32 of a warp) have arrived. */
struct emu_barrier {
  unsigned need, arrived, gen;
};
#define EMU_STACK (64 * 1024) /* bytes of stack per emulated thread */
struct emu_thread {
  ucontext_t ctx;
  char *stack; /* EMU_STACK bytes of emu_stacks, kept across launches */
  emu_barrier *wait;  /* NULL: runnable */
  unsigned gen;
  bool done;
  bool made = false; /* ctx has been through getcontext */
};
struct emu_block {
  ucontext_t sched;
  std::vector<emu_thread> th;
  unsigned cur;
  emu_barrier all;
  emu_barrier warp[32];
  uint64_t xbuf[32][32]; /* a warp's exchange buffer: each lane's value */
  const std::function<void()> *body;
};
static emu_block *g_emu;

static inline void emu_wait(emu_barrier *b) {
  emu_thread &t = g_emu->th[g_emu->cur];
  if (++b->arrived == b->need) {
    b->arrived = 0;
    b->gen++;
    return;  /* the last to arrive goes on; the others run when their turn comes */
  }
  t.wait = b;
  t.gen = b->gen;
  swapcontext(&t.ctx, &g_emu->sched);
}

static inline void emu_syncthreads() { emu_wait(&g_emu->all); }

static inline void emu_syncwarp() { emu_wait(&g_emu->warp[threadIdx.x / 32]); }

/* Publishes this lane's value, waits for the warp, reads lane `from`'s. */
template <typename T>
static inline T emu_exchange(T v, unsigned from) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "one buffer word");
  const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
  memcpy(&g_emu->xbuf[w][l], &v, sizeof v);
  emu_syncwarp();
  T r;
  memcpy(&r, &g_emu->xbuf[w][from % 32], sizeof r);
  emu_syncwarp(); /* the buffer is free again */
  return r;
}

/* Any type of up to 8 bytes, exchanged bit for bit (a double stays one). */
template <typename T>
static inline T emu_shfl_xor(T v, int o) { return emu_exchange(v, (threadIdx.x % 32) ^ (unsigned)o); }
template <typename T>
static inline T emu_shfl(T v, int src) { return emu_exchange(v, (unsigned)src); }

/* The lanes of this warp whose value has this lane's bits. */
template <typename T>
static inline unsigned emu_match_any(T v) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "one buffer word");
  const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
  memcpy(&g_emu->xbuf[w][l], &v, sizeof v);
  emu_syncwarp();
  unsigned m = 0;
  for (unsigned k = 0; k < 32; k++)
    if (!memcmp(&g_emu->xbuf[w][k], &v, sizeof v)) m |= 1u << k;
  emu_syncwarp();
  return m;
}

static void emu_trampoline() {
  (*g_emu->body)();
  g_emu->th[g_emu->cur].done = true;  /* uc_link returns to the scheduler */
}

/* A fresh context for t, starting at emu_trampoline (out of line: getcontext
 * returns twice, so the caller's loop variables stay out of its frame).
 * getcontext (a system call, for the signal mask) once per thread of a
 * launch; later blocks only re-make the context on the same stack. */
static void __attribute__((noinline)) emu_make_thread(emu_thread &t, emu_block &b) {
  t.wait = nullptr, t.done = false;
  if (!t.made) getcontext(&t.ctx);
  t.made = true;
  t.ctx.uc_stack.ss_sp = t.stack;
  t.ctx.uc_stack.ss_size = EMU_STACK;
  t.ctx.uc_link = &b.sched;
  makecontext(&t.ctx, emu_trampoline, 0);
}

/* Runs block (gx, gy, gz) of b's launch to its end. */
static void __attribute__((noinline)) emu_run_block(emu_block &b, unsigned gx, unsigned gy, unsigned gz) {
  const unsigned block = (unsigned)b.th.size();
  blockIdx = {gx, gy, gz};
  for (unsigned i = 0; i < block; i++) emu_make_thread(b.th[i], b);
  for (unsigned left = block; left > 0;) {
    bool progress = false;
    for (unsigned k = 0; k < block; k++) {
      const unsigned i = emu_reverse ? block - 1 - k : k;
      emu_thread &t = b.th[i];
      if (t.done || (t.wait && t.wait->gen == t.gen)) continue;
      t.wait = nullptr;
      b.cur = i;
      threadIdx = {i, 0, 0};
      swapcontext(&b.sched, &t.ctx);
      progress = true;
      if (t.done) left--;
    }
    if (!progress) {
      fprintf(stderr, "cuda_emu: block (%u, %u, %u) deadlocked (a barrier or shuffle some threads never reach)\n", gx,
              gy, gz);
      abort();
    }
  }
}

/* grid blocks of block threads (at most 1024; a multiple of 32 where warps
 * exchange or synchronize). */
static inline void emu_launch(dim3 grid, unsigned block, const std::function<void()> &body) {
  emu_block b;
  b.body = &body;
  b.all = {block, 0, 0};
  for (unsigned w = 0; w < 32; w++) b.warp[w] = {32, 0, 0};
  b.th.resize(block);
  /* Stacks come from a pool that outlives the launch: allocating (and
   * zeroing) 64 KiB per thread per launch cost more than the kernels. */
  static std::vector<std::vector<char>> emu_stacks;
  if (emu_stacks.size() < block) emu_stacks.resize(block);
  for (unsigned i = 0; i < block; i++) {
    if (emu_stacks[i].empty()) emu_stacks[i].resize(EMU_STACK);
    b.th[i].stack = emu_stacks[i].data();
  }
  g_emu = &b;
  blockDim = {block, 1, 1};
  gridDim = {grid.x, grid.y, grid.z};
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) emu_run_block(b, x, y, z);
  g_emu = nullptr;
}

/* Device-only intrinsics the kernels use. */
static inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline int atomicAdd(int *p, int v) {
  const int old = *p;
  *p = old + v;
  return old;
}
static inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
  const unsigned long long old = *p;
  if (v < old) *p = v;
  return old;
}
static inline void __threadfence_system() {} /* one host thread: nothing to order */

#undef __shared__
#define __shared__ static
#undef __global__
#define __global__
#undef __launch_bounds__
#define __launch_bounds__(...)
#define __syncthreads() emu_syncthreads()
#define __shfl_xor_sync(mask, v, o) emu_shfl_xor((v), (o))
#define __shfl_sync(mask, v, src) emu_shfl((v), (src))
#define __match_any_sync(mask, v) emu_match_any((v))
#define __syncwarp(...) emu_syncwarp()
/* Host memory stands for device memory; the stream is ignored. */
#define cudaMemsetAsync(p, v, bytes, stream) ((void)(stream), memset((p), (v), (bytes)), cudaSuccess)
#define cudaGetLastError() cudaSuccess
#define LOOM_CU_LAUNCH(kern, grid, block, stream, ...) \
  ((void)(stream), emu_launch((grid), (block), [&] { kern(__VA_ARGS__); }))

#endif
