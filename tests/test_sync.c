/* test_sync.c — a training step never makes the host wait for the device
 * (issue 10): forward, cross-entropy, backward through the loss scaler, the
 * scaler's unscale/check/step (mixed fp16, AdamW) and the plain SGD path
 * are counted by loom's own sync counters (device/sync_stats.h: stream,
 * device and event synchronizations, device-to-host read-backs, and
 * cudaSetDevice calls) and must add none, on the CPU (where the counters
 * are bumped by the same wrappers) and on a GPU (LOOM_TEST_DEVICE=cuda).
 * The counters are shown to count: reading the loss afterwards is one
 * read-back, a stream and a device synchronize are one each. On a GPU the
 * step also re-uploads none of its kernel tables once warm. With expandable
 * segments the step still waits for nothing, and the device synchronization
 * each VMM unmap makes (vmm_cuda.c) is counted: one per unmap. */
#include <math.h>
#include <stdlib.h>

#include "device/sync_stats.h"
#include "optim/optim_internal.h"
#include "support/testkit.h"

typedef struct cfg {
  loom_precision prec;
  bool adamw, scaler;
} cfg;

static int64_t kind_delta(const loom_sync_counts *a, const loom_sync_counts *b, loom_sync_kind k) {
  return b->n[k] - a->n[k];
}

static void step_without_waits(loom_device dev, cfg c) {
  loom_manual_seed(3);
  int64_t hidden[2] = {64, 48};
  loom_module *m = loom_mlp_new(32, 2, hidden, 10, dev);
  cr_assert_not_null(m, "%s", loom_last_error());
  cr_assert_eq(loom_module_set_precision(m, c.prec, true), LOOM_OK, "%s", loom_last_error());
  int np = loom_module_num_params(m);
  loom_tensor *ps[8];
  for (int i = 0; i < np; i++) ps[i] = loom_module_param(m, i);
  loom_optimizer *o = c.adamw ? loom_adamw_new(ps, np, NULL) : loom_sgd_new(ps, np, NULL);
  cr_assert_not_null(o, "%s", loom_last_error());
  loom_scaler_options so;
  loom_scaler_options_init(&so);
  so.init_scale = 1024;
  so.enabled = c.scaler;
  loom_grad_scaler *s = loom_scaler_new(&so);
  cr_assert_not_null(s);
  int64_t xs[2] = {16, 32}, n = 16;
  loom_tensor *x = loom_randn(2, xs, LOOM_F32, dev);
  int64_t labs[16];
  for (int i = 0; i < 16; i++) labs[i] = i % 10;
  loom_tensor *y = loom_from_host(labs, 1, &n, LOOM_I64, dev);
  cr_assert(x && y, "%s", loom_last_error());

  loom_tensor *loss = NULL;
  loom_sync_counts before = {{0}}, after = {{0}};
  int64_t uploads = -1;
  for (int k = 0; k < 4; k++) {  /* three warm-up steps, then the measured one */
    if (k == 3) {
      before = loom_sync_counts_get();
#ifdef LOOM_HAVE_CUDA
      if (dev.kind == LOOM_CUDA) uploads = loom_cuda_opt_table_uploads(o->cuda);
#endif
    }
    loom_scope_begin();
    loom_tensor *l = loom_cross_entropy(loom_module_forward(m, x), y);
    cr_assert_not_null(l, "%s", loom_last_error());
    cr_assert_eq(loom_optimizer_zero_grad(o), LOOM_OK);
    cr_assert_eq(loom_backward(loom_scaler_scale(s, l)), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_scaler_step(s, o, NULL), LOOM_OK, "%s", loom_last_error());
    if (k == 3) loss = loom_keep(l);
    loom_scope_end();
  }
  after = loom_sync_counts_get();
  cr_assert_eq(loom_sync_waits_between(&before, &after), 0,
               "a %s step waited: %lld stream syncs, %lld device syncs, %lld event syncs, %lld read-backs",
               loom_precision_name(c.prec), (long long)kind_delta(&before, &after, LOOM_SYNC_STREAM),
               (long long)kind_delta(&before, &after, LOOM_SYNC_DEVICE),
               (long long)kind_delta(&before, &after, LOOM_SYNC_EVENT), (long long)kind_delta(&before, &after, LOOM_SYNC_D2H));
  cr_assert_eq(kind_delta(&before, &after, LOOM_SYNC_SET_DEVICE), 0, "cudaSetDevice inside a step");
#ifdef LOOM_HAVE_CUDA
  if (dev.kind == LOOM_CUDA)
    cr_assert_eq(loom_cuda_opt_table_uploads(o->cuda), uploads, "the optimizer table was uploaded again");
#endif
  (void)uploads;

  /* The counters count: one read-back, one stream and one device sync. */
  double v = NAN;
  cr_assert_eq(loom_item(loss, &v), LOOM_OK, "%s", loom_last_error());
  cr_assert(isfinite(v) && v > 0, "loss %g", v);
  loom_sync_counts later = loom_sync_counts_get();
  cr_assert_eq(kind_delta(&after, &later, LOOM_SYNC_D2H), 1);
  cr_assert_eq(loom_stream_synchronize(loom_stream_current(dev)), LOOM_OK);
  cr_assert_eq(loom_device_synchronize(dev), LOOM_OK);
  loom_sync_counts last = loom_sync_counts_get();
  cr_assert_eq(kind_delta(&later, &last, LOOM_SYNC_STREAM), 1);
  cr_assert_eq(kind_delta(&later, &last, LOOM_SYNC_DEVICE), 1);
  /* And the host learns what happened when it asks (a read-back on a GPU). */
  if (c.scaler) {
    cr_assert_eq(loom_scaler_steps(s), 4);
    cr_assert_eq(loom_scaler_steps_skipped(s), 0, "a clean step was skipped");
  }
  cr_assert_eq(loom_optimizer_steps(o), 4);
  loom_scaler_free(s);
  loom_optimizer_free(o);
  loom_module_free(m);
}

DEVICE_TEST(sync, mixed_fp16_adamw_scaler_step_never_waits) {
  step_without_waits(dev, (cfg){LOOM_PRECISION_MIXED_FP16, true, true});
}

DEVICE_TEST(sync, fp32_sgd_step_never_waits) { step_without_waits(dev, (cfg){LOOM_PRECISION_FP32, false, false}); }

DEVICE_TEST(sync, bf16_adamw_without_scaling_never_waits) {
  step_without_waits(dev, (cfg){LOOM_PRECISION_MIXED_BF16, true, false});
}

/* Expandable segments (issue 22, prediction 9): the warm step waits for
 * nothing with them either; then loom_empty_cache unmaps the free granules.
 * On a GPU each unmap first synchronizes the device (queued kernels may
 * still read the memory) and that wait must be counted, one device sync per
 * unmap (num_device_frees); on the CPU unmapping pages waits for nothing. */
DEVICE_TEST(sync, expandable_segments_step_never_waits_and_unmap_waits_are_counted) {
  loom_alloc_options o;
  loom_alloc_options_init(&o);
  o.expandable_segments = 1;
  cr_assert_eq(loom_alloc_set_device_config(dev, &o), LOOM_OK, "%s", loom_last_error());
  step_without_waits(dev, (cfg){LOOM_PRECISION_MIXED_FP16, true, true});
  /* This MLP's step fits the first 2 MiB granule of the small pool, which
   * also holds blocks that outlive it, and on a GPU the large pool's mapped
   * granules are the cuBLAS workspace (32 MiB, always allocated): the third
   * H200 run's snapshot showed nothing free to unmap. A freed 8 MiB
   * activation, as a real step leaves behind, gives empty_cache granules. */
  int64_t big = 2 * 1024 * 1024;
  loom_scope_begin();
  cr_assert_not_null(loom_zeros(1, &big, LOOM_F32, dev), "%s", loom_last_error());
  loom_scope_end();
  loom_memory_stats st = {.struct_size = sizeof st};
  cr_assert_eq(loom_memory_stats_get(dev, &st), LOOM_OK);
  cr_assert_gt(st.reserved_bytes[0].current, 0, "the step's memory is cached");
  int64_t frees = st.num_device_frees;
  loom_sync_counts before = loom_sync_counts_get();
  cr_assert_eq(loom_empty_cache(dev), LOOM_OK, "%s", loom_last_error());
  loom_sync_counts after = loom_sync_counts_get();
  cr_assert_eq(loom_memory_stats_get(dev, &st), LOOM_OK);
  int64_t unmaps = st.num_device_frees - frees;
  if (unmaps == 0) {
    /* The second GPU run failed here: say which blocks still hold the
     * granules (segments, live blocks and their sizes). */
    char *snap = loom_memory_snapshot_json(dev);
    fprintf(stderr, "sync: nothing unmapped; the allocator's state:\n%s\n", snap ? snap : loom_last_error());
    loom_free(snap);
  }
  cr_assert_gt(unmaps, 0, "empty_cache unmapped nothing");
  if (dev.kind == LOOM_CUDA)
    cr_assert_eq(kind_delta(&before, &after, LOOM_SYNC_DEVICE), unmaps,
                 "%lld unmaps, %lld device synchronizations counted", (long long)unmaps,
                 (long long)kind_delta(&before, &after, LOOM_SYNC_DEVICE));
  else
    cr_assert_eq(loom_sync_waits_between(&before, &after), 0, "unmapping CPU pages waited");
}

/* More parameters than one fused launch takes (the CUDA step passes the
 * gradients as kernel arguments, LOOM_CU_OPT_GRADS_PER_LAUNCH = 256 at a
 * time, optim_launch.h): every parameter of several sizes (one and two
 * chunks) gets exactly its own update, step after step with new gradient
 * tensors, and on a GPU the second step uploads no new optimizer table —
 * the gradients are not in it. SGD, lr 0.5, gradients 1..3: exact. */
DEVICE_TEST(sync, many_parameters_step_exactly_and_new_gradients_upload_no_table) {
  enum { NP = 300 };
  loom_tensor *ps[NP];
  for (int i = 0; i < NP; i++) {
    int64_t n = (int64_t)(i % 7) * 1000 + 1;
    ps[i] = loom_tensor_retain(loom_full(1, &n, (double)i, LOOM_F32, dev));
    cr_assert_not_null(ps[i], "%s", loom_last_error());
    cr_assert_eq(loom_set_requires_grad(ps[i], true), LOOM_OK);
  }
  loom_sgd_options so;
  loom_sgd_options_init(&so);
  so.lr = 0.5;
  loom_optimizer *o = loom_sgd_new(ps, NP, &so);
  cr_assert_not_null(o, "%s", loom_last_error());
  int64_t uploads = -1;
  for (int step = 1; step <= 2; step++) {
    cr_assert_eq(loom_optimizer_zero_grad(o), LOOM_OK);
    for (int i = 0; i < NP; i++) {
      loom_scope_begin();
      loom_tensor *g = loom_full(loom_tensor_ndim(ps[i]), loom_tensor_shape(ps[i]), (double)(i % 3 + 1), LOOM_F32, dev);
      cr_assert_eq(loom_backward_with(ps[i], g), LOOM_OK, "%s", loom_last_error());
      loom_scope_end();
    }
    cr_assert_eq(loom_optimizer_step(o), LOOM_OK, "step %d: %s", step, loom_last_error());
#ifdef LOOM_HAVE_CUDA
    if (dev.kind == LOOM_CUDA && step == 1) uploads = loom_cuda_opt_table_uploads(o->cuda);
#endif
  }
#ifdef LOOM_HAVE_CUDA
  if (dev.kind == LOOM_CUDA)
    cr_assert_eq(loom_cuda_opt_table_uploads(o->cuda), uploads, "new gradients made a new optimizer table");
#endif
  (void)uploads;
  for (int i = 0; i < NP; i++) {
    double *v = tk_read(ps[i]);
    double want = (double)i - (double)(i % 3 + 1);
    int64_t n = loom_tensor_numel(ps[i]);
    for (int64_t j = 0; j < n; j++)
      cr_assert_float_eq(v[j], want, 0, "parameter %d element %lld: %g, want %g", i, (long long)j, v[j], want);
    free(v);
  }
  cr_assert_eq(loom_optimizer_zero_grad(o), LOOM_OK);
  loom_optimizer_free(o);
  for (int i = 0; i < NP; i++) loom_tensor_release(ps[i]);
}
