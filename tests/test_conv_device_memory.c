/* test_conv_device_memory.c — on CUDA, after warm-up, training steps of a
 * small conv stack allocate nothing on the device: every cuDNN workspace and
 * tensor is a cache hit of loom's allocator (its counters), and nothing else
 * takes device memory (cudaMemGetInfo, device-wide). A binary of its own,
 * RUN_SERIAL in ctest (tests/CMakeLists.txt): the device-wide free memory
 * only means something while no other test process allocates on the same
 * GPU (issue 22, prediction 3: under parallel ctest it failed in
 * test_ops_conv). Skips visibly without a GPU. */
#include "support/testkit.h"

#ifdef LOOM_HAVE_CUDA
#include "ops/conv.h"

/* After warm-up, training steps of a small conv stack allocate nothing on
 * the device: every workspace and tensor is a cache hit of loom's allocator
 * (its counters), and nothing else takes device memory (cudaMemGetInfo). */
static void conv_steps(loom_device dev, loom_dtype dt, int steps) {
  int64_t sx[4] = {8, 16, 16, 16}, sw[4] = {32, 16, 3, 3}, sw2[4] = {32, 32, 3, 3}, sb = 32;
  for (int s = 0; s < steps; s++) {
    loom_scope_begin();
    loom_tensor *x = loom_to_memory_format(loom_randn(4, sx, dt, dev), LOOM_FORMAT_NHWC);
    loom_tensor *w1 = loom_randn(4, sw, dt, dev), *w2 = loom_randn(4, sw2, dt, dev), *b = loom_zeros(1, &sb, dt, dev);
    loom_set_requires_grad(w1, true), loom_set_requires_grad(w2, true), loom_set_requires_grad(b, true);
    loom_conv2d_options o;
    loom_conv2d_options_init(&o);
    o.padding[0] = o.padding[1] = 1;
    o.act = LOOM_ACT_RELU;
    loom_tensor *h = loom_conv2d(x, w1, b, &o);
    o.stride[0] = o.stride[1] = 2;
    o.act = LOOM_ACT_NONE;
    loom_tensor *y = loom_conv2d(h, w2, NULL, &o);
    cr_assert_eq(loom_backward(loom_sum_all(y)), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_device_synchronize(dev), LOOM_OK, "%s", loom_last_error());
    loom_scope_end();
  }
}

Test(conv2d_cuda, no_device_allocation_after_warmup) {
  tk_require_device(loom_cuda(0));
  loom_device dev = loom_cuda(0);
  for (int dt = 0; dt < 2; dt++) {
    loom_dtype t = dt ? LOOM_F16 : LOOM_F32;
    conv_steps(dev, t, 3);
    cr_assert_eq(loom_memory_reset_counters(dev), LOOM_OK, "%s", loom_last_error());
    size_t free0 = 0, free1 = 0;
    cr_assert_eq(loom_cuda_conv_mem_free(dev, &free0), LOOM_OK, "%s", loom_last_error());
    conv_steps(dev, t, 5);
    cr_assert_eq(loom_cuda_conv_mem_free(dev, &free1), LOOM_OK, "%s", loom_last_error());
    loom_memory_stats st = {.struct_size = sizeof st};
    cr_assert_eq(loom_memory_stats_get(dev, &st), LOOM_OK, "%s", loom_last_error());
    cr_assert_gt(st.num_allocs, 0, "nothing went through the allocator");
    cr_assert_eq(st.num_device_allocs, 0, "%s: %lld device allocations after warm-up", loom_dtype_name(t),
                 (long long)st.num_device_allocs);
    cr_assert_eq(free1, free0, "%s: device memory outside the allocator changed by %lld bytes", loom_dtype_name(t),
                 (long long)free0 - (long long)free1);
  }
  tk_leak_check();
}
#else
Test(conv2d_cuda, cudnn_tests_need_a_cuda_build) { tk_require_device(loom_cuda(0)); }
#endif
