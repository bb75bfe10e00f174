/* test_shutdown.c — loom_shutdown (shutdown.h): safe with nothing made and
 * idempotent; it gives every cached segment back (of the CPU pool, the
 * pinned pool and simulated GPUs: the simulated devices end with no live
 * segment), the process heap returns to where it was before loom ran a
 * training step (measured by the allocator of the C library, or ASan's), a
 * running profiler is stopped, memory still allocated is freed and named in
 * the error, and loom works again afterwards. While a data loader or a
 * communicator is alive it refuses (LOOM_ERR_STATE naming them) and tears
 * nothing down: the loader's workers keep running on intact memory. On a GPU
 * (LOOM_TEST_DEVICE=cuda) the device's free memory comes back after a step
 * that made the CUDA context, cuBLASLt and cuDNN plans and handles. */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdlib.h>

#include "alloc/alloc.h"
#include "core/teardown.h"
#include "support/fake_gpus.h"
#include "support/testkit.h"

#if defined(__SANITIZE_ADDRESS__)
#define HEAP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HEAP_ASAN 1
#endif
#endif
#ifdef HEAP_ASAN
/* Declared here: GCC ships no sanitizer/allocator_interface.h (clang does),
 * but both runtimes export the call. */
size_t __sanitizer_get_current_allocated_bytes(void);
static size_t heap_bytes(void) { return __sanitizer_get_current_allocated_bytes(); }
#else
static size_t heap_bytes(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;  /* small chunks in use + mmapped chunks (big segments) */
}
#endif

#define MiB ((size_t)1 << 20)

static loom_memory_stats stats(loom_device d) {
  loom_memory_stats st = {.struct_size = sizeof st};
  cr_assert_eq(loom_memory_stats_get(d, &st), LOOM_OK, "%s", loom_last_error());
  return st;
}

Test(shutdown, with_nothing_made_and_twice_is_ok) {
  cr_assert_eq(loom_shutdown(), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_shutdown(), LOOM_OK, "%s", loom_last_error());
  void *p = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 100, NULL, &p), LOOM_OK, "loom works after it");
  loom_alloc_free(loom_cpu(), p);
  cr_assert_eq(loom_shutdown(), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_shutdown(), LOOM_OK, "%s", loom_last_error());
  cr_assert_gt(loom_teardown_count(), 0, "the allocator's hook is registered");
  cr_assert_lt(loom_teardown_count(), 64, "the hook table has room");
}

/* Segments of the CPU pool, the pinned pool and two simulated GPUs. */
Test(shutdown, gives_every_segment_back_and_loom_works_again) {
  cr_assert_eq(tk_fake_gpus(2, 256 * MiB), LOOM_OK, "%s", loom_last_error());
  for (int round = 0; round < 2; round++) {
    void *c = NULL, *g0 = NULL, *g1 = NULL, *big = NULL, *pin = NULL;
    cr_assert_eq(loom_alloc_malloc(loom_cpu(), 1000, NULL, &c), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_alloc_malloc(loom_cuda(0), 3 * MiB, NULL, &g0), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_alloc_malloc(loom_cuda(0), 100, NULL, &big), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_alloc_malloc(loom_cuda(1), 5000, NULL, &g1), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_alloc_pinned_malloc(4096, &pin), LOOM_OK, "%s", loom_last_error());
    loom_alloc_free(loom_cpu(), c);
    loom_alloc_free(loom_cuda(0), g0);
    loom_alloc_free(loom_cuda(0), big);
    loom_alloc_free(loom_cuda(1), g1);
    loom_alloc_pinned_free(pin);
    cr_assert_gt(stats(loom_cuda(0)).reserved_bytes[0].current, 0, "the freed blocks stay cached");
    cr_assert_eq(loom_fake_live_segments(tk_fake_gpu(0)), 2, "a small and a large segment on cuda:0");
    cr_assert_eq(loom_fake_live_segments(tk_fake_gpu(1)), 1);
    cr_assert_eq(loom_shutdown(), LOOM_OK, "%s", loom_last_error());
    for (int d = 0; d < 2; d++) {
      loom_fake *f = tk_fake_gpu(d);
      cr_assert_eq(loom_fake_live_segments(f), 0, "round %d: cuda:%d still holds segments after loom_shutdown", round, d);
      cr_assert_eq(loom_fake_live_bytes(f), 0);
      cr_assert_eq(loom_fake_seg_frees(f), loom_fake_seg_allocs(f));
      cr_assert_eq(stats(loom_cuda(d)).reserved_bytes[0].current, 0, "no allocator until the next allocation");
    }
    cr_assert_eq(stats(loom_cpu()).reserved_bytes[0].current, 0);
  }
  cr_assert_eq(loom_fake_seg_allocs(tk_fake_gpu(0)), 4, "the second round made its segments anew");
  tk_leak_check();
}

/* One training step's worth of loom state on the CPU (module, optimizer,
 * autograd, profiler, the allocator's caches), all released by the caller. */
static void train_step(void) {
  loom_manual_seed(3);
  int64_t hidden[2] = {64, 64};
  loom_module *m = loom_mlp_new(32, 2, hidden, 10, loom_cpu());
  cr_assert_not_null(m, "%s", loom_last_error());
  loom_adamw_options ao;
  loom_adamw_options_init(&ao);
  loom_optimizer *opt = loom_adamw_new_for_module(m, &ao);
  cr_assert_not_null(opt, "%s", loom_last_error());
  loom_profiler_options po;
  loom_profiler_options_init(&po);
  cr_assert_eq(loom_profiler_start(&po), LOOM_OK, "%s", loom_last_error());
  int64_t xs[2] = {256, 32}, ys[1] = {256};
  loom_scope_begin();
  loom_tensor *x = loom_randn(2, xs, LOOM_F32, loom_cpu());
  loom_tensor *yi = loom_cast(loom_mul_scalar(loom_rand(1, ys, LOOM_F32, loom_cpu()), 9.99), LOOM_I64);
  loom_tensor *loss = loom_cross_entropy(loom_module_forward(m, x), yi);
  cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
  loom_optimizer_free(opt);
  loom_module_free(m);
  /* The profiler is left running: loom_shutdown stops it. */
}

Test(shutdown, the_heap_comes_back_after_a_training_step) {
  train_step();  /* first use: what the C library, OpenMP and Criterion keep for good is made here */
  cr_assert(loom_profiler_is_running());
  cr_assert_eq(loom_shutdown(), LOOM_OK, "%s", loom_last_error());
  cr_assert_not(loom_profiler_is_running(), "loom_shutdown stops a running profiler");
  size_t base = heap_bytes();
  train_step();
  size_t during = heap_bytes();
  cr_assert_gt(during, base + 2 * MiB, "a step caches at least one 2 MiB segment (%zu -> %zu bytes)", base, during);
  cr_assert_eq(loom_shutdown(), LOOM_OK, "%s", loom_last_error());
  size_t after = heap_bytes();
  cr_assert_leq(after, base + 64 * 1024, "loom_shutdown left %zu bytes on the heap (%zu before the step, %zu during it)",
                after > base ? after - base : 0, base, during);
  tk_leak_check();
}

Test(shutdown, memory_still_allocated_is_freed_and_reported) {
  void *p = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 3000, NULL, &p), LOOM_OK);
  tk_assert_error(loom_shutdown(), LOOM_ERR_STATE, "loom_shutdown", "cpu: 3072 bytes in 1 blocks were still allocated");
  cr_assert_eq(stats(loom_cpu()).reserved_bytes[0].current, 0, "freed all the same");
  cr_assert_eq(loom_shutdown(), LOOM_OK, "nothing left the second time: %s", loom_last_error());
  tk_leak_check();  /* ASan builds: the segment was really freed, not dropped */
}

Test(shutdown, a_graph_left_alive_loses_its_pool) {
  loom_graph *g = NULL;
  cr_assert_eq(loom_graph_capture_begin(loom_cpu(), &g), LOOM_OK, "%s", loom_last_error());
  void *p = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 64, NULL, &p), LOOM_OK);
  cr_assert_eq(loom_graph_capture_end(g), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_alloc_private_count(), 1);
  cr_assert_eq(loom_shutdown(), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_alloc_private_count(), 0, "the private pool went with loom_shutdown");
  loom_graph_free(g);  /* invalid handle's memory: only its host struct is freed, not the pool a second time */
  tk_leak_check();
}

/* On a GPU: a conv (cuDNN handle and plans) -> linear (cuBLASLt handle,
 * workspace, plans) -> cross-entropy (the deferred-error word) step with
 * backward. What the first cycle leaves (the runtime's modules, loaded
 * once) is the baseline: every later step + loom_shutdown must give the
 * device back all it took. */
#ifdef LOOM_HAVE_CUDA
#include "ops/conv.h"

static void cuda_step(void) {
  loom_device dev = loom_cuda(0);
  loom_manual_seed(4);
  loom_scope_begin();
  int64_t xs[4] = {8, 3, 16, 16}, ws[4] = {4, 3, 3, 3}, ls[1] = {8}, fs[2] = {5, 4};
  loom_tensor *x = loom_randn(4, xs, LOOM_F32, dev), *w = loom_randn(4, ws, LOOM_F32, dev);
  loom_tensor *fc = loom_randn(2, fs, LOOM_F32, dev);
  cr_assert_eq(loom_set_requires_grad(w, true), LOOM_OK);
  cr_assert_eq(loom_set_requires_grad(fc, true), LOOM_OK);
  loom_conv2d_options co;
  loom_conv2d_options_init(&co);
  co.padding[0] = co.padding[1] = 1;
  loom_tensor *pooled = loom_mean(loom_conv2d(x, w, NULL, &co), 2, (const int[]){2, 3}, false);
  loom_tensor *loss = loom_cross_entropy(loom_linear(pooled, fc, NULL, LOOM_ACT_NONE), loom_zeros(1, ls, LOOM_I64, dev));
  cr_assert_not_null(loss, "%s", loom_last_error());
  cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_device_synchronize(dev), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
}

static size_t cuda_free(void) {
  size_t f = 0;
  cr_assert_eq(loom_cuda_conv_mem_free(loom_cuda(0), &f), LOOM_OK, "%s", loom_last_error());
  return f;
}

Test(shutdown_cuda, device_memory_comes_back) {
  tk_require_device(loom_cuda(0));
  cuda_step();
  cr_assert_eq(loom_shutdown(), LOOM_OK, "%s", loom_last_error());
  size_t base = cuda_free();
  for (int round = 0; round < 2; round++) {
    cuda_step();
    size_t during = cuda_free();
    cr_assert_lt(during, base, "round %d: the step took device memory (%zu -> %zu free)", round, base, during);
    cr_assert_eq(loom_shutdown(), LOOM_OK, "%s", loom_last_error());
    size_t after = cuda_free();
    cr_assert_geq(after + MiB, base, "round %d: loom_shutdown left %zu bytes of the device taken", round,
                  base > after ? base - after : 0);
  }
}
#else
Test(shutdown_cuda, device_memory_comes_back) { tk_require_device(loom_cuda(0)); }
#endif

static loom_dataset *index_ds(int64_t n) {
  int32_t *x = malloc(sizeof(int32_t) * (size_t)n), *y = malloc(sizeof(int32_t) * (size_t)n);
  for (int64_t i = 0; i < n; i++) x[i] = y[i] = (int32_t)i;
  loom_dataset *ds = loom_dataset_memory(x, LOOM_I32, 1, (int64_t[]){1}, y, LOOM_I32, n, true);
  free(x);
  free(y);
  cr_assert_not_null(ds, "%s", loom_last_error());
  return ds;
}

/* Checks every sample of the epoch arrives once, in order (no shuffle). */
static void read_epoch(loom_loader *l, int64_t n) {
  int64_t next = 0;
  loom_tensor *x = NULL, *y = NULL;
  while (next < n) {
    loom_scope_begin();
    cr_assert_eq(loom_loader_next(l, &x, &y), LOOM_OK, "batch at sample %lld: %s", (long long)next, loom_last_error());
    double *v = tk_read(x);
    int64_t b = loom_tensor_numel(x);
    for (int64_t i = 0; i < b; i++) cr_assert_eq(v[i], (double)(next + i), "sample %lld", (long long)(next + i));
    free(v);
    next += b;
    loom_scope_end();
  }
}

/* A loader whose worker threads are running (issue 22: loom_shutdown freed
 * the memory under them and they crashed): loom_shutdown refuses, names the
 * loader and frees nothing (the CPU pool keeps its segments); the loader
 * still delivers whole epochs; once it is freed loom_shutdown succeeds. The
 * same for a communicator. */
Test(shutdown, refused_while_a_loader_or_communicator_is_alive) {
  const int64_t n = 400;
  loom_dataset *ds = index_ds(n);
  loom_loader_options o;
  loom_loader_options_init(&o);
  o.batch_size = 16;
  o.workers = 2;
  o.prefetch = 4;
  loom_loader *l = loom_loader_new(ds, &o);
  cr_assert_not_null(l, "%s", loom_last_error());
  loom_dataset_release(ds);
  read_epoch(l, 64);  /* workers running, batches prefetched */
  int64_t reserved = stats(loom_cpu()).reserved_bytes[0].current;
  cr_assert_gt(reserved, 0);
  tk_assert_error(loom_shutdown(), LOOM_ERR_STATE, "refused", "1 data loader", "loom_loader_free");
  cr_assert_eq(stats(loom_cpu()).reserved_bytes[0].current, reserved, "the refused shutdown gave memory back");
  cr_assert_eq(loom_loader_start_epoch(l, 1), LOOM_OK, "%s", loom_last_error());
  read_epoch(l, n);  /* the loader still works, whole epoch */
  loom_comm *c = NULL;
  loom_comm_options co;
  loom_comm_options_init(&co);
  co.init = "single";
  cr_assert_eq(loom_comm_init(&co, &c), LOOM_OK, "%s", loom_last_error());
  tk_assert_error(loom_shutdown(), LOOM_ERR_STATE, "1 data loader", "1 communicator", "loom_comm_free");
  loom_loader_free(l);
  tk_assert_error(loom_shutdown(), LOOM_ERR_STATE, "1 communicator");
  cr_assert_not(strstr(loom_last_error(), "loader"), "%s", loom_last_error());
  loom_comm_free(c);
  cr_assert_eq(loom_shutdown(), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(stats(loom_cpu()).reserved_bytes[0].current, 0, "shutdown gave the CPU pool back");
  tk_leak_check();
}
