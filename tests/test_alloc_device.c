/* test_alloc_device.c — the per-device allocators behind lib/alloc/alloc.h
 * and the public controls of loom/alloc.h: CPU and pinned memory, stats,
 * summary, snapshot, empty_cache, LOOM_ALLOC_CONF and loom_alloc_configure,
 * the allocation trace, visible / virtual devices on fake GPUs (simulated
 * by tests/support/fake_gpus.c: no GPU is needed), and graph capture's
 * private pools. Criterion runs each test in its own process, so each
 * starts with fresh global state. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "device/device_internal.h"
#include "loom/alloc.h"
#include "loom/graph.h"
#include "loom/ops.h"
#include "support/fake_gpus.h"

#define MiB ((size_t)1 << 20)

static loom_memory_stats stats(loom_device d) {
  loom_memory_stats s;
  s.struct_size = sizeof s;
  cr_assert_eq(loom_memory_stats_get(d, &s), LOOM_OK, "%s", loom_last_error());
  return s;
}

Test(alloc_device, cpu_memory_is_cached_and_usable) {
  void *a = NULL, *b = NULL;
  cr_assert_eq(loom_memory_stats_get(loom_cpu(), &(loom_memory_stats){.struct_size = sizeof(loom_memory_stats)}), LOOM_OK,
               "stats before any allocation are zeros, not an error");
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 1000, NULL, &a), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq((uintptr_t)a % 64, 0, "64-byte aligned");
  memset(a, 0xab, 1000);
  loom_alloc_free(loom_cpu(), a);
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 1000, NULL, &b), LOOM_OK);
  cr_assert_eq(a, b, "a freed block is reused");
  loom_memory_stats s = stats(loom_cpu());
  cr_assert_eq(s.num_allocs, 2);
  cr_assert_eq(s.num_cache_hits, 1);
  cr_assert_eq(s.allocated_bytes[0].current, 1024);
  cr_assert_eq(s.reserved_bytes[0].current, (int64_t)(2 * MiB));
  void *z1 = NULL, *z2 = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 0, NULL, &z1), LOOM_OK);
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 0, NULL, &z2), LOOM_OK);
  cr_assert(z1 && z2 && z1 != z2, "zero-byte allocations are valid and unique");
  loom_alloc_free(loom_cpu(), z1);
  loom_alloc_free(loom_cpu(), z2);
  loom_alloc_free(loom_cpu(), b);
  cr_assert_eq(loom_empty_cache(loom_cpu()), LOOM_OK);
  s = stats(loom_cpu());
  cr_assert_eq(s.reserved_bytes[0].current, 0);
  cr_assert_eq(s.num_device_frees, 1);
}

Test(alloc_device, summary_and_snapshot) {
  char *sum = loom_memory_summary(loom_cpu());
  cr_assert(sum && strstr(sum, "no allocations yet"), "%s", sum);
  loom_free(sum);
  cr_assert_eq(loom_alloc_configure("history:16"), LOOM_OK);
  void *a = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 5000, NULL, &a), LOOM_OK);
  sum = loom_memory_summary(loom_cpu());
  cr_assert(sum && strstr(sum, "loom memory summary: cpu") && strstr(sum, "allocated") && strstr(sum, "5.00 KiB"), "%s", sum);
  loom_free(sum);
  char *js = loom_memory_snapshot_json(loom_cpu());
  cr_assert(js && strstr(js, "\"device\":\"cpu\"") && strstr(js, "\"requested\":5000") &&
            strstr(js, "\"action\":\"alloc\""), "%s", js);
  loom_free(js);
  loom_alloc_free(loom_cpu(), a);
  cr_assert_null(loom_memory_summary(loom_cuda(7)), "no such device");
  cr_assert_eq(loom_last_status(), LOOM_ERR_DEVICE);
}

Test(alloc_device, pinned_memory_falls_back_to_host_memory_without_a_gpu) {
  void *p = NULL;
  cr_assert_eq(loom_alloc_pinned_malloc(3 * MiB, &p), LOOM_OK, "%s", loom_last_error());
  memset(p, 1, 3 * MiB);
  loom_memory_stats s = stats(loom_pinned_host());
  cr_assert_eq(s.allocated_bytes[LOOM_MEM_LARGE_POOL].current, (int64_t)(3 * MiB));
  loom_alloc_pinned_free(p);
  cr_assert_eq(stats(loom_pinned_host()).allocated_bytes[0].current, 0);
  cr_assert_eq(stats(loom_cpu()).num_allocs, 0, "pinned memory has its own pool");
  cr_assert_eq(loom_empty_cache(loom_pinned_host()), LOOM_OK);
  cr_assert_eq(stats(loom_pinned_host()).reserved_bytes[0].current, 0);
}

Test(alloc_device, record_stream_on_the_cpu_completes_at_once) {
  loom_stream *side = NULL;
  cr_assert_eq(loom_stream_create(loom_cpu(), &side), LOOM_OK);
  void *a = NULL, *b = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 4096, NULL, &a), LOOM_OK);
  cr_assert_eq(loom_alloc_record_stream(loom_cpu(), a, side), LOOM_OK, "%s", loom_last_error());
  loom_alloc_free(loom_cpu(), a);
  cr_assert_eq(stats(loom_cpu()).active_bytes[0].current, 4096, "pending until the next poll");
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 4096, NULL, &b), LOOM_OK);
  cr_assert_eq(b, a, "CPU streams are synchronous: the event is complete at the next allocation");
  cr_assert_eq(loom_alloc_record_stream(loom_cpu(), (char *)b + 64, side), LOOM_ERR_INVALID_ARG);
  loom_alloc_free(loom_cpu(), b);
  loom_stream_free(side);
}

Test(alloc_device, stream_of_another_device_is_refused) {
  cr_assert_eq(tk_fake_gpus(1, 256 * MiB), LOOM_OK);
  void *a = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 64, loom_stream_current(loom_cuda(0)), &a), LOOM_ERR_DEVICE);
  cr_assert(strstr(loom_last_error(), "stream belongs to cuda:0"), "%s", loom_last_error());
  cr_assert_null(a);
}

Test(alloc_device, configure_limit_applies_to_live_pools) {
  void *a = NULL, *b = NULL, *b2 = NULL, *c = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), MiB, NULL, &a), LOOM_OK);
  cr_assert_eq(loom_alloc_configure("limit:4MiB"), LOOM_OK);
  cr_assert_eq(stats(loom_cpu()).limit_bytes, (int64_t)(4 * MiB));
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), MiB, NULL, &b), LOOM_OK);
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), MiB, NULL, &b2), LOOM_OK, "a second 2 MiB segment: 4 MiB reserved");
  cr_assert_eq(stats(loom_cpu()).reserved_bytes[0].current, (int64_t)(4 * MiB));
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 2 * MiB, NULL, &c), LOOM_ERR_OOM, "a new 20 MiB segment is over the limit");
  cr_assert(strstr(loom_last_error(), "cpu: out of memory") && strstr(loom_last_error(), "limit 4.00 MiB"), "%s",
            loom_last_error());
  cr_assert_eq(stats(loom_cpu()).num_ooms, 1);
  loom_alloc_free(loom_cpu(), a);
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), MiB, NULL, &c), LOOM_OK, "carries on after freeing");
  cr_assert_eq(loom_alloc_configure("preallocate:0.5"), LOOM_ERR_STATE, "preallocation is fixed at first use");
  cr_assert(strstr(loom_last_error(), "first allocation"), "%s", loom_last_error());
  cr_assert_eq(loom_alloc_configure("nonsense:1"), LOOM_ERR_INVALID_ARG);
  loom_alloc_free(loom_cpu(), b);
  loom_alloc_free(loom_cpu(), b2);
  loom_alloc_free(loom_cpu(), c);
}

Test(alloc_device, bad_LOOM_ALLOC_CONF_fails_allocations_until_replaced) {
  setenv("LOOM_ALLOC_CONF", "limit:4MiB,colour:blue", 1);
  void *a = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 64, NULL, &a), LOOM_ERR_INVALID_ARG);
  cr_assert(strstr(loom_last_error(), "LOOM_ALLOC_CONF") && strstr(loom_last_error(), "unknown key 'colour'"), "%s",
            loom_last_error());
  cr_assert_eq(loom_alloc_configure("limit:4MiB"), LOOM_OK);
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 64, NULL, &a), LOOM_OK, "%s", loom_last_error());
  loom_alloc_free(loom_cpu(), a);
}

Test(alloc_device, LOOM_ALLOC_CONF_preallocates_the_cpu_pool) {
  setenv("LOOM_ALLOC_CONF", "limit:64MiB,preallocate:0.5", 1);
  void *a = NULL, *b = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 100, NULL, &a), LOOM_OK, "%s", loom_last_error());
  loom_memory_stats s = stats(loom_cpu());
  cr_assert_eq(s.reserved_bytes[0].current, (int64_t)(32 * MiB));
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 20 * MiB, NULL, &b), LOOM_OK);
  memset(b, 7, 20 * MiB);
  cr_assert_eq(stats(loom_cpu()).num_device_allocs, 1, "one arena, no growth");
  void *c = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 20 * MiB, NULL, &c), LOOM_ERR_OOM);
  cr_assert(strstr(loom_last_error(), "preallocated"), "%s", loom_last_error());
  loom_alloc_free(loom_cpu(), a);
  loom_alloc_free(loom_cpu(), b);
}

Test(alloc_device, per_device_options_override_the_global_ones) {
  loom_alloc_options o;
  loom_alloc_options_init(&o);
  o.limit_bytes = 2 * MiB;
  cr_assert_eq(loom_alloc_set_device_config(loom_pinned_host(), &o), LOOM_OK);
  void *a = NULL, *b = NULL;
  cr_assert_eq(loom_alloc_pinned_malloc(3 * MiB, &a), LOOM_ERR_OOM, "pinned pool limited to 2 MiB");
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 3 * MiB, NULL, &b), LOOM_OK, "the CPU pool is not");
  loom_alloc_free(loom_cpu(), b);
  o.struct_size = 0;
  cr_assert_eq(loom_alloc_set_config(&o), LOOM_ERR_INVALID_ARG, "uninitialized options are refused");
  loom_alloc_options_init(&o);
  o.gc_threshold = 2.0;
  cr_assert_eq(loom_alloc_set_config(&o), LOOM_ERR_INVALID_ARG);
  cr_assert(strstr(loom_last_error(), "garbage_collection_threshold"), "%s", loom_last_error());
}

Test(alloc_device, trace_records_allocations_frees_and_epochs) {
  char path[] = "/tmp/loom_trace_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  cr_assert_eq(loom_alloc_trace_start(path), LOOM_OK);
  void *a = NULL, *b = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 1000, NULL, &a), LOOM_OK);
  loom_alloc_trace_epoch(1);
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 3 * MiB, NULL, &b), LOOM_OK);
  loom_alloc_free(loom_cpu(), a);
  loom_alloc_free(loom_cpu(), b);
  loom_alloc_trace_stop();
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  unlink(path);
  const char *want = "# stream 0 cpu\nalloc 1 1000 0\nepoch 1\nalloc 2 3145728 0\nfree 1\nfree 2\n";
  cr_assert(strstr(buf, want), "trace:\n%s", buf);
  cr_assert_eq(loom_alloc_trace_start("/nonexistent-dir/x"), LOOM_ERR_IO);
}

/* ---- visible and virtual devices on fake GPUs ------------------------------- */

Test(alloc_device, virtual_devices_are_isolated_by_their_limits) {
  cr_assert_eq(tk_fake_gpus(2, 1024 * MiB), LOOM_OK);
  cr_assert_eq(loom_set_visible_devices("1"), LOOM_OK, "%s", loom_last_error());
  size_t limits[2] = {64 * MiB, 128 * MiB};
  cr_assert_eq(loom_set_virtual_devices(0, 2, limits), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_device_count(LOOM_CUDA), 2);
  cr_assert_eq(loom_device_physical(0), 1);
  cr_assert_eq(loom_device_physical(1), 1, "both are physical GPU 1");
  cr_assert_neq(loom_stream_current(loom_cuda(0)), loom_stream_current(loom_cuda(1)), "each has its own stream");
  void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cuda(0), 40 * MiB, NULL, &a), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_alloc_malloc(loom_cuda(0), 40 * MiB, NULL, &b), LOOM_ERR_OOM, "over cuda:0's 64 MiB");
  cr_assert(strstr(loom_last_error(), "cuda:0: out of memory") && strstr(loom_last_error(), "limit 64.00 MiB"), "%s",
            loom_last_error());
  cr_assert_eq(loom_alloc_malloc(loom_cuda(1), 100 * MiB, NULL, &c), LOOM_OK, "cuda:1 is not affected");
  cr_assert_eq(stats(loom_cuda(0)).limit_bytes, (int64_t)(64 * MiB));
  cr_assert_eq(stats(loom_cuda(1)).limit_bytes, (int64_t)(128 * MiB));
  cr_assert_eq(stats(loom_cuda(1)).allocated_bytes[0].current, (int64_t)(100 * MiB));
  cr_assert_eq(stats(loom_cuda(0)).allocated_bytes[0].current, (int64_t)(40 * MiB));
  loom_alloc_free(loom_cuda(0), a);
  cr_assert_eq(loom_alloc_malloc(loom_cuda(0), 40 * MiB, NULL, &d), LOOM_OK);
  cr_assert_eq(d, a);
  loom_alloc_free(loom_cuda(1), d);
  cr_assert_eq(loom_last_status(), LOOM_ERR_INVALID_ARG, "freeing on the wrong device is caught");
  cr_assert_eq(stats(loom_cuda(0)).allocated_bytes[0].current, (int64_t)(40 * MiB), "and changes nothing");
  cr_assert_eq(loom_set_visible_devices("0"), LOOM_ERR_STATE);
  cr_assert(strstr(loom_last_error(), "already initialized"), "%s", loom_last_error());
  cr_assert_eq(loom_set_virtual_devices(0, 2, limits), LOOM_ERR_STATE);
  loom_alloc_free(loom_cuda(0), d);
  loom_alloc_free(loom_cuda(1), c);
}

Test(alloc_device, visible_devices_renumber_gpus) {
  cr_assert_eq(tk_fake_gpus(3, 256 * MiB), LOOM_OK);
  cr_assert_eq(loom_set_visible_devices("2, 0"), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_device_count(LOOM_CUDA), 2);
  cr_assert_eq(loom_device_physical(0), 2);
  cr_assert_eq(loom_device_physical(1), 0);
  cr_assert_eq(loom_device_check(loom_cuda(2)), LOOM_ERR_DEVICE);
}

Test(alloc_device, visible_devices_errors) {
  cr_assert_eq(tk_fake_gpus(2, 256 * MiB), LOOM_OK);
  cr_assert_eq(loom_set_visible_devices("0,0"), LOOM_ERR_INVALID_ARG);
  cr_assert(strstr(loom_last_error(), "listed twice"), "%s", loom_last_error());
  cr_assert_eq(loom_set_visible_devices("5"), LOOM_ERR_DEVICE);
  cr_assert(strstr(loom_last_error(), "GPU 5 does not exist (2 physical GPUs)"), "%s", loom_last_error());
  cr_assert_eq(loom_set_visible_devices("a"), LOOM_ERR_INVALID_ARG);
  size_t big[2] = {200 * MiB, 100 * MiB};
  cr_assert_eq(loom_set_virtual_devices(0, 2, big), LOOM_ERR_INVALID_ARG);
  cr_assert(strstr(loom_last_error(), "add up to"), "%s", loom_last_error());
  size_t zero[1] = {0};
  cr_assert_eq(loom_set_virtual_devices(0, 1, zero), LOOM_ERR_INVALID_ARG);
  size_t ok[1] = {10 * MiB};
  cr_assert_eq(loom_set_virtual_devices(2, 1, ok), LOOM_ERR_DEVICE, "only 2 visible GPUs");
  cr_assert_eq(loom_set_visible_devices(""), LOOM_OK);
  cr_assert_eq(loom_device_count(LOOM_CUDA), 0);
  cr_assert(strstr(loom_cuda_unavailable_reason(), "hides all 2"), "%s", loom_cuda_unavailable_reason());
}

Test(alloc_device, bad_LOOM_VISIBLE_DEVICES_is_the_reason_for_no_gpu) {
  cr_assert_eq(tk_fake_gpus(2, 256 * MiB), LOOM_OK);
  setenv("LOOM_VISIBLE_DEVICES", "3", 1);
  cr_assert_eq(loom_device_count(LOOM_CUDA), 0);
  cr_assert(strstr(loom_cuda_unavailable_reason(), "LOOM_VISIBLE_DEVICES='3': GPU 3 does not exist"), "%s",
            loom_cuda_unavailable_reason());
  cr_assert_eq(tk_fake_gpus(2, 256 * MiB), LOOM_ERR_STATE, "too late");
}

Test(alloc_device, LOOM_VISIBLE_DEVICES_env_is_honoured) {
  cr_assert_eq(tk_fake_gpus(2, 256 * MiB), LOOM_OK);
  setenv("LOOM_VISIBLE_DEVICES", "1", 1);
  cr_assert_eq(loom_device_count(LOOM_CUDA), 1);
  cr_assert_eq(loom_device_physical(0), 1);
}

/* ---- graph capture's private pools ------------------------------------------ */

/* A block allocated inside a capture (in the graph's private pool) and used
 * on a side stream: recording the stream finds the private pool, and the
 * freed block is not handed out again until the side stream's work is done
 * (the fake GPU's events complete only when told). */
Test(alloc_device, record_stream_on_a_capture_block_delays_its_reuse) {
  cr_assert_eq(tk_fake_gpus(1, 256 * MiB), LOOM_OK);
  loom_device dev = loom_cuda(0);
  loom_stream *side = NULL;
  cr_assert_eq(loom_stream_create(dev, &side), LOOM_OK, "%s", loom_last_error());
  loom_graph *g = NULL;
  cr_assert_eq(loom_graph_capture_begin(dev, &g), LOOM_OK, "%s", loom_last_error());
  void *a = NULL, *b = NULL;
  cr_assert_eq(loom_alloc_malloc(dev, MiB, NULL, &a), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_alloc_record_stream(dev, a, side), LOOM_OK, "%s", loom_last_error());
  loom_alloc_free(dev, a);
  cr_assert_eq(loom_alloc_malloc(dev, MiB, NULL, &b), LOOM_OK, "%s", loom_last_error());
  cr_assert_neq(b, a, "the side stream may still use a: its block waits");
  cr_assert_eq(stats(dev).allocated_bytes[0].current, 0, "the device pool is untouched");
  loom_alloc_free(dev, b);
  loom_fake_complete(tk_fake_gpu(0), side);
  void *c = NULL;
  cr_assert_eq(loom_alloc_malloc(dev, MiB, NULL, &c), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(c, a, "the side stream is done: the block is reused");
  loom_alloc_free(dev, c);
  cr_assert_eq(loom_graph_capture_end(g), LOOM_OK, "%s", loom_last_error());
  loom_graph_free(g);
  loom_stream_free(side);
}

/* ---- AddressSanitizer sees through the cache --------------------------------
 * Cached blocks are poisoned while free and beyond the requested size, so a
 * use after free or an overflow is reported even though the memory never
 * went back to malloc. ASan reports and exits with status 1. */
#if defined(__SANITIZE_ADDRESS__)
Test(alloc_device, asan_catches_use_of_a_freed_cached_block, .exit_code = 1) {
  volatile char *p = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 100, NULL, (void **)&p), LOOM_OK);
  loom_alloc_free(loom_cpu(), (void *)p);
  p[0] = 1;
}

Test(alloc_device, asan_catches_overflow_past_the_requested_size, .exit_code = 1) {
  volatile char *p = NULL;
  cr_assert_eq(loom_alloc_malloc(loom_cpu(), 100, NULL, (void **)&p), LOOM_OK);
  p[99] = 1;  /* fine */
  p[100] = 1; /* inside the 512-byte block, past the request */
}
#else
Test(alloc_device, asan_poisoning_checks) { cr_skip_test("needs an AddressSanitizer build (LOOM_SANITIZE=address)"); }
#endif

/* Issue 10, part 7: a malformed LOOM_VISIBLE_DEVICES is an error on every
 * machine, also one without a GPU (it used to be ignored there). */
Test(alloc_device, malformed_LOOM_VISIBLE_DEVICES_is_an_error_on_any_machine) {
  setenv("LOOM_VISIBLE_DEVICES", "abc", 1);
  cr_assert_eq(loom_device_count(LOOM_CUDA), 0);
  const char *why = loom_cuda_unavailable_reason();
  cr_assert(why && strstr(why, "LOOM_VISIBLE_DEVICES='abc'") && strstr(why, "comma-separated GPU indices"), "%s", why);
  int64_t s = 1;
  cr_assert_null(loom_zeros(1, &s, LOOM_F32, loom_cuda(0)));
  cr_assert(strstr(loom_last_error(), "LOOM_VISIBLE_DEVICES='abc'"), "%s", loom_last_error());
  loom_tensor *c = loom_zeros(1, &s, LOOM_F32, loom_cpu());
  cr_assert_not_null(c, "the CPU is unaffected: %s", loom_last_error());
  loom_tensor_release(c);
}
