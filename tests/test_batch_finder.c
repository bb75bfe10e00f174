/* test_batch_finder.c — fitting the batch to memory under the CPU
 * allocator's hard limit: loom_find_batch_size finds the exact largest size
 * that fits (checked by probing it and the next size), applies the margin,
 * catches probes that leak and passes other errors on; and
 * loom_backward_micro_batches with shrink halves the micro-batch on OOM and
 * trains to the same parameters, bit for bit, as a run that used the
 * smaller micro-batch from the start. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/error.h"
#include "support/testkit.h"

#define MiB ((int64_t)1 << 20)

static int g_probes;

/* Two [b, 64 Ki] f32 tensors: 512 KiB per sample. */
static loom_status probe_two_buffers(void *ctx, int64_t b) {
  (void)ctx;
  g_probes++;
  loom_scope_begin();
  int64_t s[2] = {b, 65536};
  loom_tensor *x = loom_ones(2, s, LOOM_F32, loom_cpu());
  loom_tensor *y = loom_mul_scalar(x, 2.0);
  loom_status st = y ? LOOM_OK : loom_last_status();
  loom_scope_end();
  return st;
}

static int64_t allocated(void) {
  loom_memory_stats st = {.struct_size = sizeof st};
  cr_assert_eq(loom_memory_stats_get(loom_cpu(), &st), LOOM_OK);
  return st.allocated_bytes[0].current;
}

Test(batch_finder, finds_the_largest_fitting_size_under_the_limit_and_keeps_a_margin) {
  cr_assert_eq(loom_alloc_configure("expandable_segments:true,limit:100M"), LOOM_OK, "%s", loom_last_error());
  loom_batch_finder_options o;
  loom_batch_finder_options_init(&o);
  o.margin = 0.25;
  o.multiple_of = 4;
  int64_t b = 0, largest = 0, before = allocated();
  cr_assert_eq(loom_find_batch_size(probe_two_buffers, NULL, &o, &b, &largest), LOOM_OK, "%s", loom_last_error());
  cr_log_info("batch finder: largest %lld, answer %lld, %d probes", (long long)largest, (long long)b, g_probes);
  /* 100 MiB at 512 KiB per sample (two 256 KiB rows): just under 200. */
  cr_assert(largest >= 190 && largest <= 200, "largest %lld", (long long)largest);
  cr_assert_eq(probe_two_buffers(NULL, largest), LOOM_OK, "the answer fits");
  cr_assert_eq(probe_two_buffers(NULL, largest + 1), LOOM_ERR_OOM, "one more does not");
  loom_clear_error();
  cr_assert_eq(b, (int64_t)(largest * 0.75) / 4 * 4);
  cr_assert_lt(g_probes, 25, "doubling then bisecting, not a linear search");
  cr_assert_eq(allocated(), before, "nothing left allocated");
  tk_leak_check();
}

static loom_tensor *g_leak;
static loom_status probe_leaking(void *ctx, int64_t b) {
  (void)ctx;
  int64_t s[1] = {b * 1024};
  loom_tensor *t = loom_ones(1, s, LOOM_F32, loom_cpu());  /* outside any scope: the caller's */
  if (b >= 8) {
    g_leak = t;
    return LOOM_OK;
  }
  loom_tensor_release(t);
  return LOOM_OK;
}

static loom_status probe_broken(void *ctx, int64_t b) {
  (void)ctx;
  return b >= 4 ? loom_set_error(LOOM_ERR_SHAPE, "made-up failure") : LOOM_OK;
}

Test(batch_finder, leaking_probes_and_other_errors_stop_the_search) {
  int64_t b = 0;
  tk_assert_error(loom_find_batch_size(probe_leaking, NULL, NULL, &b, NULL), LOOM_ERR_STATE, "batch 8",
                  "left 32768 bytes");
  loom_tensor_release(g_leak);
  tk_assert_error(loom_find_batch_size(probe_broken, NULL, NULL, &b, NULL), LOOM_ERR_SHAPE, "probe at batch 4",
                  "made-up failure");
  loom_batch_finder_options o;
  loom_batch_finder_options_init(&o);
  o.start = 0;
  tk_assert_error(loom_find_batch_size(probe_two_buffers, NULL, &o, &b, NULL), LOOM_ERR_INVALID_ARG, "start");
  cr_assert_eq(loom_alloc_configure("limit:1M"), LOOM_OK);
  loom_batch_finder_options_init(&o);
  o.start = 8;
  tk_assert_error(loom_find_batch_size(probe_two_buffers, NULL, &o, &b, NULL), LOOM_ERR_OOM, "even batch 8");
  tk_leak_check();
}

/* ---- on-OOM shrink ------------------------------------------------------- */

#define NB 512
typedef struct run {
  loom_module *m;
  loom_tensor *x, *y;
} run;

static loom_tensor *micro_loss(void *ctx, int64_t start, int64_t n) {
  run *r = ctx;
  loom_tensor *xs = loom_slice(r->x, 0, start, start + n, 1), *ys = loom_slice(r->y, 0, start, start + n, 1);
  return loom_cross_entropy(loom_module_forward(r->m, xs), ys);
}

/* Three AdamW steps over a fixed global batch of 512 (an MLP whose
 * activations outweigh its weights); returns the final
 * parameters (malloc'd) and the micro-batch in use at the end. */
static double *train(int64_t micro0, bool shrink, int64_t *micro_out, int *nvals) {
  loom_manual_seed(5);
  int64_t hidden[2] = {512, 512};
  loom_module *m = loom_mlp_new(32, 2, hidden, 10, loom_cpu());
  cr_assert_not_null(m);
  int np = loom_module_num_params(m);
  loom_tensor *params[8];
  for (int i = 0; i < np; i++) params[i] = loom_module_param(m, i);
  loom_adamw_options ao;
  loom_adamw_options_init(&ao);
  loom_optimizer *opt = loom_adamw_new(params, np, &ao);
  cr_assert_not_null(opt, "%s", loom_last_error());
  int64_t xs[2] = {NB, 32}, ys[1] = {NB};
  run r = {m, loom_randn(2, xs, LOOM_F32, loom_cpu()), NULL};
  int64_t labels[NB];
  for (int i = 0; i < NB; i++) labels[i] = (i * 7) % 10;
  r.y = loom_from_host(labels, 1, ys, LOOM_I64, loom_cpu());
  cr_assert(r.x && r.y, "%s", loom_last_error());
  int64_t micro = micro0;
  for (int step = 0; step < 3; step++) {
    cr_assert_eq(loom_backward_micro_batches(opt, micro_loss, &r, NB, &micro, shrink, loom_cpu()), LOOM_OK, "%s",
                 loom_last_error());
    cr_assert_eq(loom_optimizer_step(opt), LOOM_OK, "%s", loom_last_error());
  }
  *micro_out = micro;
  int total = 0;
  double *all = NULL;
  for (int i = 0; i < np; i++) {
    double *v = tk_read(params[i]);
    int64_t n = loom_tensor_numel(params[i]);
    all = realloc(all, (size_t)(total + n) * sizeof *all);
    memcpy(all + total, v, (size_t)n * sizeof *v);
    total += (int)n;
    free(v);
  }
  *nvals = total;
  loom_tensor_release(r.x);
  loom_tensor_release(r.y);
  loom_optimizer_free(opt);
  loom_module_free(m);
  return all;
}

/* Peak allocated of one step at micro-batch mb (no limit). */
static int64_t step_peak(int64_t mb) {
  cr_assert_eq(loom_empty_cache(loom_cpu()), LOOM_OK);
  cr_assert_eq(loom_memory_reset_peaks(loom_cpu()), LOOM_OK);
  int64_t m = 0;
  int n = 0;
  free(train(mb, false, &m, &n));
  loom_memory_stats st = {.struct_size = sizeof st};
  loom_memory_stats_get(loom_cpu(), &st);
  return st.allocated_bytes[0].peak;
}

Test(batch_finder, on_oom_shrink_trains_like_the_smaller_micro_batch_from_the_start, .timeout = 300) {
  /* Page-granular expandable segments: reserved follows allocated, so the
   * limit lands between the two footprints. */
  cr_assert_eq(loom_alloc_configure("expandable_segments:true"), LOOM_OK, "%s", loom_last_error());
  int64_t p64 = step_peak(NB), p16 = step_peak(NB / 4);
  cr_log_info("shrink: peak allocated %lld at micro %d, %lld at micro %d", (long long)p64, NB, (long long)p16, NB / 4);
  cr_assert_lt(p16, p64);
  char conf[96];
  snprintf(conf, sizeof conf, "expandable_segments:true,limit:%lld", (long long)(p16 + (p64 - p16) / 4));
  cr_assert_eq(loom_alloc_configure(conf), LOOM_OK, "%s", loom_last_error());
  int64_t micro = 0, micro_ref = 0;
  int n = 0, nref = 0;
  tk_assert_error(loom_backward_micro_batches(NULL, micro_loss, NULL, NB, &micro, true, loom_cpu()),
                  LOOM_ERR_INVALID_ARG, "must not be NULL");
  double *shrunk = train(NB, true, &micro, &n);
  cr_assert(micro < NB && micro >= NB / 4, "micro-batch after shrinking: %lld", (long long)micro);
  cr_log_info("shrink: micro-batch %d -> %lld", NB, (long long)micro);
  cr_assert_eq(loom_alloc_configure("expandable_segments:true"), LOOM_OK, "%s", loom_last_error());
  double *ref = train(micro, false, &micro_ref, &nref);
  cr_assert_eq(micro_ref, micro);
  cr_assert_eq(n, nref);
  for (int i = 0; i < n; i++) cr_assert(shrunk[i] == ref[i], "parameter value %d: %.9g vs %.9g", i, shrunk[i], ref[i]);
  free(shrunk);
  free(ref);
  tk_leak_check();
}
