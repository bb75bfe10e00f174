/* test_dist.c — lib/dist in one process: the bucket plan (boundaries,
 * dtypes, oversized parameters), the launcher environment, option and
 * environment errors, the SINGLE communicator, loom_ddp over a world of one
 * (bit-identical to plain training, no_sync accumulation, hooks removed on
 * free), the LR scaling rule, the CPU thread default, the file rendezvous,
 * and the NCCL back end with one rank on cuda:0 (skips visibly without a
 * GPU), including a collective that cannot complete failing within its
 * timeout instead of hanging. The multi-process checks (MPI, 2 ranks) are tests/dist/mpi_checks.c,
 * run by ctest under mpirun. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/dist_internal.h"
#include "loom/loom.h"
#include "support/testkit.h"
#ifdef LOOM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- bucket plan ------------------------------------------------------------------ */

Test(dist_plan, reverse_order_caps_and_boundaries) {
  /* 4-byte params; first cap 16 B, then 32 B. Reverse walk: p5 (2 el = 8 B),
   * p4 (2 el: 16 B, fits exactly), p3 (1 el: would be 20 B > 16: new), ... */
  int64_t numel[6] = {3, 5, 2, 1, 2, 2};
  loom_dtype dt[6] = {LOOM_F32, LOOM_F32, LOOM_F32, LOOM_F32, LOOM_F32, LOOM_F32};
  int b[6];
  int64_t off[6];
  int nb = loom_ddp_plan(6, numel, dt, 16, 32, b, off);
  /* bucket 0: p5, p4 (16 B); bucket 1: p3, p2, p1 (4+8+20 = 32 B, exactly the cap); bucket 2: p0. */
  int want_b[6] = {2, 1, 1, 1, 0, 0};
  int64_t want_off[6] = {0, 3, 1, 0, 2, 0};
  cr_assert_eq(nb, 3);
  for (int i = 0; i < 6; i++) {
    cr_assert_eq(b[i], want_b[i], "param %d in bucket %d, want %d", i, b[i], want_b[i]);
    cr_assert_eq(off[i], want_off[i], "param %d at offset %lld, want %lld", i, (long long)off[i], (long long)want_off[i]);
  }
}

Test(dist_plan, oversized_param_gets_its_own_bucket_and_dtypes_split) {
  int64_t numel[5] = {4, 100, 4, 4, 4};
  loom_dtype dt[5] = {LOOM_F32, LOOM_F32, LOOM_F16, LOOM_F16, LOOM_F32};
  int b[5];
  int64_t off[5];
  int nb = loom_ddp_plan(5, numel, dt, 64, 64, b, off);
  /* p4 f32 | p3, p2 f16 (a dtype change closes the bucket) | p1 400 B alone | p0 */
  cr_assert_eq(nb, 4);
  int want[5] = {3, 2, 1, 1, 0};
  for (int i = 0; i < 5; i++) cr_assert_eq(b[i], want[i], "param %d in bucket %d, want %d", i, b[i], want[i]);
  cr_assert_eq(off[2], 4);
  cr_assert_eq(off[3], 0);
}

Test(dist_plan, one_bucket_when_everything_fits) {
  int64_t numel[3] = {10, 20, 30};
  loom_dtype dt[3] = {LOOM_BF16, LOOM_BF16, LOOM_BF16};
  int b[3];
  int64_t off[3];
  cr_assert_eq(loom_ddp_plan(3, numel, dt, 1 << 20, 25 << 20, b, off), 1);
  cr_assert_eq(off[0], 50);
  cr_assert_eq(off[1], 30);
  cr_assert_eq(off[2], 0);
}

/* ---- environment and options ------------------------------------------------------ */

Test(dist_env, reads_openmpi_slurm_and_nothing) {
  loom_dist_env e = {.struct_size = sizeof e};
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("PMI_RANK");
  unsetenv("SLURM_STEP_ID");
  unsetenv("PMIX_RANK");
  unsetenv("LOOM_DIST_INIT");
  unsetenv("LOOM_DIST_RANK");
  cr_assert_eq(loom_dist_env_get(&e), LOOM_OK);
  cr_assert(!e.launched);
  cr_assert_eq(e.world_size, 1);
  cr_assert_str_eq(e.launcher, "none");

  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  cr_assert_eq(loom_dist_env_get(&e), LOOM_OK);
  cr_assert(e.launched);
  cr_assert_str_eq(e.launcher, "openmpi");
  cr_assert_eq(e.rank, 3);
  cr_assert_eq(e.world_size, 8);
  cr_assert_eq(e.local_rank, 1);
  cr_assert_eq(e.local_size, 4);
  unsetenv("OMPI_COMM_WORLD_RANK");

  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "6", 1);
  setenv("SLURM_LOCALID", "2", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "3(x2)", 1);
  cr_assert_eq(loom_dist_env_get(&e), LOOM_OK);
  cr_assert_str_eq(e.launcher, "slurm");
  cr_assert_eq(e.rank, 5);
  cr_assert_eq(e.world_size, 6);
  cr_assert_eq(e.local_rank, 2);
  cr_assert_eq(e.local_size, 3);

  loom_dist_env bad = {.struct_size = 2};
  tk_assert_error(loom_dist_env_get(&bad), LOOM_ERR_INVALID_ARG, "sizeof(loom_dist_env)");
}

Test(dist_options, errors_say_what_to_do) {
  loom_comm *c = (loom_comm *)0x1;
  loom_comm_options o;
  loom_comm_options_init(&o);
  o.struct_size = 3;
  tk_assert_error(loom_comm_init(&o, &c), LOOM_ERR_INVALID_ARG, "loom_comm_options_init");
  cr_assert_null(c);
  loom_comm_options_init(&o);
  o.backend = 9;
  tk_assert_error(loom_comm_init(&o, &c), LOOM_ERR_INVALID_ARG, "unknown backend");
  loom_comm_options_init(&o);
  o.init = "tcp://x";
  tk_assert_error(loom_comm_init(&o, &c), LOOM_ERR_INVALID_ARG, "options.init", "file:/shared/path");
  o.init = NULL;
  setenv("LOOM_DIST_INIT", "bogus", 1);
  tk_assert_error(loom_comm_init(&o, &c), LOOM_ERR_INVALID_ARG, "LOOM_DIST_INIT", "bogus");
  setenv("LOOM_DIST_INIT", "single", 1);
  setenv("LOOM_DIST_TIMEOUT", "soon", 1);
  tk_assert_error(loom_comm_init(&o, &c), LOOM_ERR_INVALID_ARG, "LOOM_DIST_TIMEOUT", "seconds");
  setenv("LOOM_DIST_TIMEOUT", "7.5", 1);
  cr_assert_eq(loom_comm_init(&o, &c), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_comm_get_timeout(c), 7.5, "LOOM_DIST_TIMEOUT ignored");
  loom_comm_free(c);
  o.timeout_s = 2;  /* the option wins over the environment */
  cr_assert_eq(loom_comm_init(&o, &c), LOOM_OK);
  cr_assert_eq(loom_comm_get_timeout(c), 2.0);
  tk_assert_error(loom_comm_set_timeout(c, -1), LOOM_ERR_INVALID_ARG, "seconds > 0");
  cr_assert_eq(loom_comm_set_timeout(c, 11), LOOM_OK);
  cr_assert_eq(loom_comm_get_timeout(c), 11.0);
  loom_comm_free(c);
  unsetenv("LOOM_DIST_TIMEOUT");
  loom_comm_options_init(&o);
  o.init = "file:/tmp/x";
  o.backend = LOOM_COMM_MPI;
  loom_status st = loom_comm_init(&o, &c);
  cr_assert_neq(st, LOOM_OK);
  cr_assert(strstr(loom_last_error(), "mpirun") || strstr(loom_last_error(), "without MPI"), "%s", loom_last_error());
  loom_comm_options_init(&o);
  o.backend = LOOM_COMM_NCCL;
  o.init = "single";
  tk_assert_error(loom_comm_init(&o, &c), LOOM_ERR_DEVICE, "CUDA device");
  tk_leak_check();
}

Test(dist_options, gpus_without_cuda_and_bad_run_options) {
  if (loom_device_count(LOOM_CUDA) > 0) cr_skip_test("a GPU is present: this checks the message without one");
  loom_dist_run_options o;
  loom_dist_run_options_init(&o);
  o.gpus = -1;
  tk_assert_error(loom_dist_run(&o, (loom_dist_worker)0x1, NULL), LOOM_ERR_DEVICE, "--gpus", "CUDA");
  tk_assert_error(loom_dist_run(&o, NULL, NULL), LOOM_ERR_INVALID_ARG, "fn is NULL");
  o.struct_size = 1;
  tk_assert_error(loom_dist_run(&o, (loom_dist_worker)0x1, NULL), LOOM_ERR_INVALID_ARG, "loom_dist_run_options_init");
  loom_comm *cs[2];
  tk_assert_error(loom_comm_init_all(0, NULL, NULL, cs), LOOM_ERR_INVALID_ARG, "n >= 1");
  cr_assert_neq(loom_comm_init_all(2, NULL, NULL, cs), LOOM_OK);
  cr_assert_null(cs[0]);
  tk_leak_check();
}

/* ---- the SINGLE communicator ------------------------------------------------------- */

static loom_comm *single_comm(void) {
  loom_comm_options o;
  loom_comm_options_init(&o);
  o.init = "single";
  o.set_threads = false;
  loom_comm *c = NULL;
  cr_assert_eq(loom_comm_init(&o, &c), LOOM_OK, "%s", loom_last_error());
  return c;
}

/* Collective calls appear in the profiler's summary (category "collective")
 * with their call counts. */
Test(dist_single, collectives_are_profiled) {
  loom_comm *c = single_comm();
  loom_profiler_options po;
  loom_profiler_options_init(&po);
  cr_assert_eq(loom_profiler_start(&po), LOOM_OK, "%s", loom_last_error());
  loom_scope_begin();
  loom_tensor *t = loom_zeros(1, (int64_t[]){3}, LOOM_F32, loom_cpu());
  loom_tensor *out = loom_zeros(1, (int64_t[]){3}, LOOM_F32, loom_cpu());
  for (int k = 0; k < 2; k++) cr_assert_eq(loom_comm_all_reduce(c, t, LOOM_REDUCE_SUM), LOOM_OK);
  cr_assert_eq(loom_comm_broadcast(c, t, 0), LOOM_OK);
  cr_assert_eq(loom_comm_all_gather(c, t, out), LOOM_OK);
  cr_assert_eq(loom_comm_barrier(c), LOOM_OK);
  cr_assert_eq(loom_comm_wait(c), LOOM_OK);
  loom_scope_end();
  cr_assert_eq(loom_profiler_stop(), LOOM_OK, "%s", loom_last_error());
  loom_profiler_row rows[64];
  int n = loom_profiler_summary_rows(rows, sizeof rows[0], 64);
  cr_assert(n > 0 && n <= 64, "%d rows", n);
  const char *names[] = {"all_reduce", "broadcast", "all_gather", "barrier"};
  const int64_t calls[] = {2, 1, 1, 1};
  for (int k = 0; k < 4; k++) {
    int found = 0;
    for (int r = 0; r < n; r++)
      if (!strcmp(rows[r].name, names[k]) && !strcmp(rows[r].category, "collective")) {
        found = 1;
        cr_assert_eq(rows[r].calls, calls[k], "%s: %lld calls", names[k], (long long)rows[r].calls);
      }
    cr_assert(found, "no collective row for %s", names[k]);
  }
  loom_comm_free(c);
  tk_leak_check();
}

Test(dist_single, collectives_are_local) {
  loom_comm *c = single_comm();
  cr_assert_eq(loom_comm_get_backend(c), LOOM_COMM_SINGLE);
  cr_assert_str_eq(loom_comm_backend_name(loom_comm_get_backend(c)), "single");
  cr_assert_eq(loom_comm_size(c), 1);
  cr_assert_eq(loom_comm_rank(c), 0);
  /* The communication stream of a CPU communicator is the CPU's stream. */
  cr_assert_eq(loom_comm_stream(c), loom_stream_current(loom_cpu()));
  cr_assert_null(loom_comm_stream(NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "comm_stream");
  loom_scope_begin();
  float v[3] = {1.5f, -2, 4};
  loom_tensor *t = loom_from_host(v, 1, (int64_t[]){3}, LOOM_F32, loom_cpu());
  for (int op = 0; op < 3; op++) cr_assert_eq(loom_comm_all_reduce(c, t, (loom_reduce_op)op), LOOM_OK);
  cr_assert_eq(loom_comm_broadcast(c, t, 0), LOOM_OK);
  cr_assert_eq(loom_comm_wait(c), LOOM_OK);
  float got[3];
  cr_assert_eq(loom_to_host(t, got, sizeof got, LOOM_F32), LOOM_OK);
  cr_assert(got[0] == 1.5f && got[1] == -2 && got[2] == 4);
  loom_tensor *out = loom_zeros(2, (int64_t[]){1, 3}, LOOM_F32, loom_cpu());
  cr_assert_eq(loom_comm_all_gather(c, t, out), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_to_host(out, got, sizeof got, LOOM_F32), LOOM_OK);
  cr_assert(got[0] == 1.5f && got[1] == -2 && got[2] == 4, "all_gather copied %g %g %g", got[0], got[1], got[2]);
  cr_assert_eq(loom_comm_barrier(c), LOOM_OK);
  tk_assert_error(loom_comm_broadcast(c, t, 1), LOOM_ERR_INVALID_ARG, "root 1");
  loom_tensor *wrong = loom_zeros(1, (int64_t[]){4}, LOOM_F32, loom_cpu());
  tk_assert_error(loom_comm_all_gather(c, t, wrong), LOOM_ERR_SHAPE, "world size 1");
  loom_tensor *i32 = loom_zeros(1, (int64_t[]){3}, LOOM_I32, loom_cpu());
  tk_assert_error(loom_comm_all_gather(c, t, i32), LOOM_ERR_DTYPE, "f32", "i32");
  /* abort fails the communicator; every later call says so. */
  cr_assert_eq(loom_comm_abort(c), LOOM_OK);
  tk_assert_error(loom_comm_all_reduce(c, t, LOOM_REDUCE_SUM), LOOM_ERR_COMM, "has failed", "aborted");
  tk_assert_error(loom_comm_check(c), LOOM_ERR_COMM, "aborted");
  loom_scope_end();
  loom_comm_free(c);
  loom_comm_free(NULL);
  tk_leak_check();
}

/* ---- loom_ddp over a world of one ----------------------------------------------------- */

static loom_module *model(void) {
  loom_manual_seed(7);
  loom_module *m = loom_mlp_new(12, 1, (int64_t[]){16}, 5, loom_cpu());
  cr_assert_not_null(m);
  return m;
}

static loom_optimizer *sgd(loom_module *m) {
  loom_tensor *ps[8];
  int n = loom_module_num_params(m);
  for (int i = 0; i < n; i++) ps[i] = loom_module_param(m, i);
  loom_sgd_options o;
  loom_sgd_options_init(&o);
  o.lr = 0.05;
  o.momentum = 0.9;
  return loom_sgd_new(ps, n, &o);
}

static void step_data(int k, int s0, int n, float *x, int32_t *y) {
  for (int s = 0; s < n; s++) {
    for (int j = 0; j < 12; j++) x[s * 12 + j] = sinf((float)(k * 31 + (s0 + s) * 7 + j));
    y[s] = (k + s0 + s) % 5;
  }
}

static void fwd_bwd(loom_module *m, int k, int s0, int n, double w) {
  loom_scope_begin();
  float x[64 * 12];
  int32_t y[64];
  step_data(k, s0, n, x, y);
  loom_tensor *loss = loom_cross_entropy(loom_module_forward(m, loom_from_host(x, 2, (int64_t[]){n, 12}, LOOM_F32, loom_cpu())),
                                         loom_from_host(y, 1, (int64_t[]){n}, LOOM_I32, loom_cpu()));
  if (w != 1) loss = loom_mul_scalar(loss, w);
  cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
}

static void params_of(loom_module *m, float *out) {
  int64_t off = 0;
  for (int i = 0; i < loom_module_num_params(m); i++) {
    loom_tensor *p = loom_module_param(m, i);
    int64_t n = loom_tensor_numel(p);
    cr_assert_eq(loom_to_host(p, out + off, (size_t)n * sizeof(float), LOOM_F32), LOOM_OK);
    off += n;
  }
}

Test(dist_ddp, world_of_one_matches_plain_training_bit_for_bit) {
  enum { P = 12 * 16 + 16 + 16 * 5 + 5 };
  float plain[P], dp[P];
  for (int variant = 0; variant < 2; variant++) {
    loom_module *m = model();
    loom_optimizer *o = sgd(m);
    loom_comm *c = NULL;
    loom_ddp *d = NULL;
    if (variant == 1) {
      c = single_comm();
      loom_ddp_options opt;
      loom_ddp_options_init(&opt);
      opt.first_bucket_mib = 64.0 / 1048576;  /* tiny buckets: several launches per step */
      opt.bucket_mib = 300.0 / 1048576;
      d = loom_ddp_new(m, c, &opt);
      cr_assert_not_null(d, "%s", loom_last_error());
      cr_assert_geq(loom_ddp_num_buckets(d), 3);
    }
    for (int k = 0; k < 5; k++) {
      cr_assert_eq(loom_optimizer_zero_grad(o), LOOM_OK);
      fwd_bwd(m, k, 0, 32, 1.0);
      if (d) cr_assert_eq(loom_ddp_sync(d), LOOM_OK, "%s", loom_last_error());
      cr_assert_eq(loom_optimizer_step(o), LOOM_OK);
    }
    params_of(m, variant ? dp : plain);
    if (d) {
      loom_ddp_stats s = {.struct_size = sizeof s};
      cr_assert_eq(loom_ddp_stats_get(d, &s), LOOM_OK);
      cr_assert_eq(s.steps, 5);
      cr_assert_eq(s.buckets, 5 * loom_ddp_num_buckets(d));
      cr_assert_eq(s.bytes, 5 * (int64_t)P * 4);
      loom_ddp_stats_reset(d);
      cr_assert_eq(loom_ddp_stats_get(d, &s), LOOM_OK);
      cr_assert_eq(s.steps, 0);
    }
    loom_ddp_free(d);
    loom_comm_free(c);
    loom_optimizer_free(o);
    loom_module_free(m);
  }
  for (int i = 0; i < P; i++) cr_assert_eq(dp[i], plain[i], "param element %d: %g vs %g", i, dp[i], plain[i]);
  tk_leak_check();
}

/* no_sync accumulation over 2 micro-batches == one batch of twice the size. */
Test(dist_ddp, no_sync_accumulation) {
  enum { P = 12 * 16 + 16 + 16 * 5 + 5 };
  float one[P], acc[P];
  for (int variant = 0; variant < 2; variant++) {
    loom_module *m = model();
    loom_optimizer *o = sgd(m);
    loom_comm *c = single_comm();
    loom_ddp *d = loom_ddp_new(m, c, NULL);
    cr_assert_not_null(d);
    for (int k = 0; k < 4; k++) {
      cr_assert_eq(loom_optimizer_zero_grad(o), LOOM_OK);
      if (variant == 0) {
        fwd_bwd(m, k, 0, 32, 1.0);
      } else {
        cr_assert_eq(loom_ddp_set_sync(d, false), LOOM_OK);
        cr_assert(!loom_ddp_get_sync(d));
        fwd_bwd(m, k, 0, 16, 0.5);
        cr_assert_eq(loom_ddp_sync(d), LOOM_OK);  /* no-op while not syncing */
        cr_assert_eq(loom_ddp_set_sync(d, true), LOOM_OK);
        fwd_bwd(m, k, 16, 16, 0.5);
      }
      cr_assert_eq(loom_ddp_sync(d), LOOM_OK, "%s", loom_last_error());
      cr_assert_eq(loom_optimizer_step(o), LOOM_OK);
    }
    params_of(m, variant ? acc : one);
    loom_ddp_stats s = {.struct_size = sizeof s};
    cr_assert_eq(loom_ddp_stats_get(d, &s), LOOM_OK);
    cr_assert_eq(s.steps, 4, "%lld synchronizing steps", (long long)s.steps);
    loom_ddp_free(d);
    loom_comm_free(c);
    loom_optimizer_free(o);
    loom_module_free(m);
  }
  for (int i = 0; i < P; i++) cr_assert_float_eq(acc[i], one[i], 1e-5, "element %d: %g vs %g", i, acc[i], one[i]);
  tk_leak_check();
}

Test(dist_ddp, misuse_is_reported) {
  loom_module *m = model();
  loom_optimizer *o = sgd(m);
  loom_comm *c = single_comm();
  cr_assert_null(loom_ddp_new(NULL, c, NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "must not be NULL");
  loom_ddp_options bad;
  loom_ddp_options_init(&bad);
  bad.bucket_mib = 0;
  cr_assert_null(loom_ddp_new(m, c, &bad));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "bucket sizes");
  loom_ddp_options_init(&bad);
  bad.struct_size = 2;
  cr_assert_null(loom_ddp_new(m, c, &bad));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "loom_ddp_options_init");
  loom_ddp *d = loom_ddp_new(m, c, NULL);
  cr_assert_not_null(d);
  /* Two backward passes without loom_ddp_sync in between. */
  fwd_bwd(m, 0, 0, 8, 1.0);
  tk_assert_error(loom_ddp_set_sync(d, false), LOOM_ERR_STATE, "loom_ddp_sync");
  tk_assert_error(loom_ddp_broadcast_buffers(d), LOOM_ERR_STATE, "loom_ddp_sync");
  fwd_bwd(m, 1, 0, 8, 1.0);
  tk_assert_error(loom_ddp_sync(d), LOOM_ERR_STATE, "ready twice");
  /* A bucket was already launched: the other ranks cannot know, so the
   * communicator is failed rather than left out of step. */
  tk_assert_error(loom_comm_check(c), LOOM_ERR_COMM, "aborted");
  loom_ddp_free(d);
  loom_comm_free(c);
  c = single_comm();
  d = loom_ddp_new(m, c, NULL);
  cr_assert_not_null(d);
  cr_assert_eq(loom_optimizer_zero_grad(o), LOOM_OK);
  fwd_bwd(m, 2, 0, 8, 1.0);
  cr_assert_eq(loom_ddp_sync(d), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_ddp_broadcast_buffers(d), LOOM_OK);
  loom_ddp_bucket_info bi = {.struct_size = sizeof bi};
  tk_assert_error(loom_ddp_bucket_get(d, 5, &bi), LOOM_ERR_INVALID_ARG, "bucket 5 of 1");
  cr_assert_eq(loom_ddp_bucket_get(d, 0, &bi), LOOM_OK);
  cr_assert_eq(bi.n_params, 4);
  cr_assert_eq(bi.first_param, 3);
  cr_assert_eq(bi.last_param, 0);
  cr_assert_eq(bi.dtype, LOOM_F32);
  loom_ddp_free(d);
  /* Freed: the hooks are gone, plain training works again. */
  cr_assert_eq(loom_optimizer_zero_grad(o), LOOM_OK);
  fwd_bwd(m, 3, 0, 8, 1.0);
  fwd_bwd(m, 4, 0, 8, 1.0);
  cr_assert_eq(loom_optimizer_step(o), LOOM_OK);
  loom_comm_free(c);
  loom_optimizer_free(o);
  loom_module_free(m);
  tk_leak_check();
}

Test(dist_ddp, mixed_policy_hooks_the_low_precision_copies) {
  for (int f32 = 0; f32 < 2; f32++) {
    loom_module *m = model();
    cr_assert_eq(loom_module_set_precision(m, LOOM_PRECISION_MIXED_BF16, false), LOOM_OK);
    loom_optimizer *o = sgd(m);
    loom_comm *c = single_comm();
    loom_ddp_options opt;
    loom_ddp_options_init(&opt);
    opt.reduce_in_fp32 = f32;
    loom_ddp *d = loom_ddp_new(m, c, &opt);
    cr_assert_not_null(d, "%s", loom_last_error());
    loom_ddp_bucket_info bi = {.struct_size = sizeof bi};
    cr_assert_eq(loom_ddp_bucket_get(d, 0, &bi), LOOM_OK);
    cr_assert_eq(bi.dtype, f32 ? LOOM_F32 : LOOM_BF16, "bucket dtype %s", loom_dtype_name(bi.dtype));
    cr_assert_eq(bi.bytes, bi.numel * (f32 ? 4 : 2));
    float before[5];
    cr_assert_eq(loom_to_host(loom_module_param(m, 3), before, sizeof before, LOOM_F32), LOOM_OK);
    for (int k = 0; k < 3; k++) {
      cr_assert_eq(loom_optimizer_zero_grad(o), LOOM_OK);
      fwd_bwd(m, k, 0, 16, 1.0);
      cr_assert_eq(loom_ddp_sync(d), LOOM_OK, "%s", loom_last_error());
      cr_assert_eq(loom_optimizer_step(o), LOOM_OK, "%s", loom_last_error());
    }
    float after[5];
    cr_assert_eq(loom_to_host(loom_module_param(m, 3), after, sizeof after, LOOM_F32), LOOM_OK);
    bool moved = false;
    for (int i = 0; i < 5; i++) moved = moved || after[i] != before[i];
    cr_assert(moved, "the masters did not train (%s buckets)", f32 ? "f32" : "bf16");
    loom_ddp_free(d);
    loom_comm_free(c);
    loom_optimizer_free(o);
    loom_module_free(m);
  }
  tk_leak_check();
}

/* ---- LR scaling, threads, rendezvous -------------------------------------------------- */

Test(dist_misc, lr_scaling_rule) {
  loom_lr_schedule s = loom_lr_cosine(0.1, 10, 1000, 0.001);
  loom_lr_schedule t = loom_lr_scale_for_world(s, 4, 100);
  cr_assert_float_eq(t.base_lr, 0.4, 1e-12);
  cr_assert_float_eq(t.min_lr, 0.004, 1e-12);
  cr_assert_eq(t.warmup_steps, 100);
  cr_assert_float_eq(loom_lr_at(&t, 50), 0.4 * 51 / 100, 0.4 * 0.02);  /* warming up */
  cr_assert_float_eq(loom_lr_at(&t, 100), 0.4, 0.01);
  loom_lr_schedule u = loom_lr_scale_for_world(loom_lr_cosine(0.1, 500, 1000, 0), 1, 100);
  cr_assert_float_eq(u.base_lr, 0.1, 1e-12);
  cr_assert_eq(u.warmup_steps, 500, "a longer warm-up is kept");
}

Test(dist_misc, thread_default_is_cores_over_ranks) {
  cr_assert_eq(loom_dist_threads_for(16, 4), 4);
  cr_assert_eq(loom_dist_threads_for(2, 2), 1);
  cr_assert_eq(loom_dist_threads_for(2, 8), 1);
  cr_assert_eq(loom_dist_threads_for(0, 0), 1);
  unsigned char mask[LOOM_DIST_MASK_BYTES];
  int cpus = loom_dist_affinity(mask, sizeof mask);
  cr_assert_geq(cpus, 1);
  int bits = 0;
  for (int i = 0; i < LOOM_DIST_MASK_BYTES; i++) bits += __builtin_popcount(mask[i]);
  cr_assert_eq(bits, cpus);
}

Test(dist_misc, file_rendezvous) {
  char path[] = "/tmp/loom_rdv_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  unlink(path);
  char blob[128], got[128];
  for (int i = 0; i < 128; i++) blob[i] = (char)(i * 3);
  double t0 = loom_dist_now();
  tk_assert_error(loom_rendezvous_file_read(path, got, sizeof got, 2, 0.2), LOOM_ERR_COMM, path, "shared");
  cr_assert_lt(loom_dist_now() - t0, 5.0, "the read waited far past its 0.2 s timeout");
  cr_assert_eq(loom_rendezvous_file_publish(path, blob, sizeof blob, 2), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_rendezvous_file_read(path, got, sizeof got, 2, 1.0), LOOM_OK, "%s", loom_last_error());
  cr_assert(!memcmp(blob, got, sizeof blob));
  tk_assert_error(loom_rendezvous_file_read(path, got, sizeof got, 3, 1.0), LOOM_ERR_STATE, "world of 2");
  loom_rendezvous_file_remove(path);
  cr_assert_neq(access(path, F_OK), 0);
}

/* ---- NCCL, one rank (needs a GPU) ---------------------------------------------------- */

static loom_comm *nccl_one(void) {
  tk_require_device(loom_cuda(0));
  if (!loom_dist_have_nccl()) {
    if (getenv("LOOM_TEST_DEVICE") && !strcmp(getenv("LOOM_TEST_DEVICE"), "cuda"))
      cr_assert_fail("LOOM_TEST_DEVICE=cuda but this loom was built without NCCL");
    cr_skip_test("built without NCCL");
  }
  loom_comm_options o;
  loom_comm_options_init(&o);
  o.backend = LOOM_COMM_NCCL;
  o.device = loom_cuda(0);
  o.init = "single";
  o.timeout_s = 60;
  loom_comm *c = NULL;
  cr_assert_eq(loom_comm_init(&o, &c), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_comm_get_backend(c), LOOM_COMM_NCCL);
  cr_assert_eq(loom_comm_size(c), 1);
  return c;
}

Test(dist_nccl_cuda, one_rank_collectives_every_dtype) {
  loom_comm *c = nccl_one();
  loom_scope_begin();
  const loom_dtype dts[] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I32, LOOM_I64, LOOM_U8};
  const int64_t sizes[] = {1, 1000, 6815744 + 3};  /* up to > 25 MiB of f32 */
  for (size_t d = 0; d < 6; d++) {
    for (size_t s = 0; s < 3; s++) {
      int64_t n = sizes[s];
      /* Values in [0, 100): every dtype holds them (u8 truncates). */
      loom_tensor *t = loom_cast(loom_mul_scalar(loom_rand(1, &n, LOOM_F32, loom_cuda(0)), 100.0), dts[d]);
      cr_assert_not_null(t, "%s", loom_last_error());
      double *b = tk_read(t);
      for (int op = 0; op < 3; op++) cr_assert_eq(loom_comm_all_reduce(c, t, (loom_reduce_op)op), LOOM_OK, "%s", loom_last_error());
      cr_assert_eq(loom_comm_broadcast(c, t, 0), LOOM_OK);
      cr_assert_eq(loom_comm_synchronize(c), LOOM_OK, "%s", loom_last_error());
      double *a = tk_read(t);
      tk_assert_close(a, b, n, 0, 0, "one-rank all_reduce is the identity");
      free(a);
      free(b);
    }
  }
  loom_tensor *in = loom_full(1, (int64_t[]){8}, 3.0, LOOM_F32, loom_cuda(0));
  loom_tensor *out = loom_zeros(1, (int64_t[]){8}, LOOM_F32, loom_cuda(0));
  cr_assert_eq(loom_comm_all_gather(c, in, out), LOOM_OK);
  cr_assert_eq(loom_comm_wait(c), LOOM_OK);
  double *g = tk_read(out);
  for (int i = 0; i < 8; i++) cr_assert_eq(g[i], 3.0);
  free(g);
  cr_assert_eq(loom_comm_barrier(c), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_comm_check(c), LOOM_OK);
  loom_tensor *host = loom_zeros(1, (int64_t[]){8}, LOOM_F32, loom_cpu());
  tk_assert_error(loom_comm_all_reduce(c, host, LOOM_REDUCE_SUM), LOOM_ERR_DEVICE, "cpu", "cuda:0");
  loom_scope_end();
  cr_assert_eq(loom_comm_abort(c), LOOM_OK);
  tk_assert_error(loom_comm_barrier(c), LOOM_ERR_COMM, "aborted");
  loom_comm_free(c);
  tk_leak_check();
}

Test(dist_nccl_cuda, one_rank_ddp_trains) {
  loom_comm *c = nccl_one();
  loom_manual_seed(7);
  loom_module *m = loom_mlp_new(12, 1, (int64_t[]){16}, 5, loom_cuda(0));
  cr_assert_not_null(m);
  loom_tensor *ps[4];
  for (int i = 0; i < 4; i++) ps[i] = loom_module_param(m, i);
  loom_optimizer *o = loom_sgd_new(ps, 4, NULL);
  loom_ddp *d = loom_ddp_new(m, c, NULL);
  cr_assert_not_null(d, "%s", loom_last_error());
  double first = 0, last = 0;
  for (int k = 0; k < 20; k++) {
    loom_scope_begin();
    float x[32 * 12];
    int32_t y[32];
    step_data(0, 0, 32, x, y);
    loom_tensor *loss = loom_cross_entropy(
        loom_module_forward(m, loom_from_host(x, 2, (int64_t[]){32, 12}, LOOM_F32, loom_cuda(0))),
        loom_from_host(y, 1, (int64_t[]){32}, LOOM_I32, loom_cuda(0)));
    cr_assert_eq(loom_optimizer_zero_grad(o), LOOM_OK);
    cr_assert_eq(loom_backward(loss), LOOM_OK);
    cr_assert_eq(loom_ddp_sync(d), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(loom_optimizer_step(o), LOOM_OK);
    double v = 0;
    cr_assert_eq(loom_item(loss, &v), LOOM_OK);
    if (k == 0) first = v;
    last = v;
    loom_scope_end();
  }
  cr_assert_lt(last, first, "loss did not fall: %g -> %g", first, last);
  loom_ddp_free(d);
  loom_optimizer_free(o);
  loom_module_free(m);
  loom_comm_free(c);
  tk_leak_check();
}

/* loom_dist_run with --gpus 1: one replica on its own thread, an NCCL
 * communicator from ncclCommInitAll over one GPU (issue 22: the path the
 * trainers' --gpus takes, never run). The worker's all-reduce is the
 * identity and it runs on cuda:0. */
static loom_status gpus1_worker(loom_comm *c, void *user) {
  int *calls = user;
  (*calls)++;
  if (loom_comm_size(c) != 1 || loom_comm_rank(c) != 0 || loom_comm_get_backend(c) != LOOM_COMM_NCCL)
    return loom_set_error(LOOM_ERR_STATE, "gpus1 worker: size %d rank %d", loom_comm_size(c), loom_comm_rank(c));
  loom_scope_begin();
  loom_tensor *t = loom_full(1, (int64_t[]){1000}, 2.5, LOOM_F32, loom_cuda(0));
  loom_status st = t ? loom_comm_all_reduce(c, t, LOOM_REDUCE_SUM) : loom_last_status();
  if (st == LOOM_OK) st = loom_comm_synchronize(c);
  double v = 0;
  if (st == LOOM_OK) st = loom_item(loom_sum_all(t), &v);
  loom_scope_end();
  if (st == LOOM_OK && v != 2500.0) st = loom_set_error(LOOM_ERR_STATE, "gpus1 worker: sum %g, want 2500", v);
  return st;
}

Test(dist_nccl_cuda, dist_run_with_one_gpu) {
  tk_require_device(loom_cuda(0));
  if (!loom_dist_have_nccl()) cr_skip_test("built without NCCL");
  loom_dist_run_options ro;
  loom_dist_run_options_init(&ro);
  ro.gpus = 1;
  ro.comm.device = loom_cuda(0);
  int calls = 0;
  cr_assert_eq(loom_dist_run(&ro, gpus1_worker, &calls), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(calls, 1, "the worker ran %d times", calls);
  tk_leak_check();
}

Test(dist_nccl_cuda, two_ranks_on_one_gpu_refused) {
  tk_require_device(loom_cuda(0));
  if (!loom_dist_have_nccl()) cr_skip_test("built without NCCL");
  loom_comm *cs[2] = {NULL, NULL};
  int same[2] = {0, 0};
  tk_assert_error(loom_comm_init_all(2, same, NULL, cs), LOOM_ERR_DEVICE, "same physical GPU", "one");
  cr_assert_null(cs[0]);
  tk_leak_check();
}

#ifdef LOOM_HAVE_CUDA
/* Holds its stream until released or 1.5 s have passed (a bound, so that a
 * broken timeout shows as a wrong status instead of a hung test). */
static atomic_int g_nccl_release;

static void CUDART_CB hold_comm_stream(void *ud) {
  (void)ud;
  double t0 = loom_dist_now();
  while (!atomic_load(&g_nccl_release) && loom_dist_now() - t0 < 1.5) {
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
  }
}
#endif

/* NCCL timeout on one rank (issue 22): the communication stream is held by
 * a host function, so an all-reduce queued behind it cannot complete.
 * loom_comm_synchronize with a 0.5 s timeout must return LOOM_ERR_COMM
 * saying so after at least 0.5 s (had it waited for the stream instead, the
 * hold would end at 1.5 s and it would return LOOM_OK), abort the
 * communicator without hanging (5 s bound: ncclCommAbort may wait for the
 * held stream), and every later call must fail the same way. */
Test(dist_nccl_cuda, a_collective_that_cannot_complete_times_out_and_aborts) {
  loom_comm *c = nccl_one();
#ifdef LOOM_HAVE_CUDA
  cr_assert_eq(loom_comm_set_timeout(c, 0.5), LOOM_OK, "%s", loom_last_error());
  loom_scope_begin();
  loom_tensor *t = loom_ones(1, (int64_t[]){1024}, LOOM_F32, loom_cuda(0));
  cr_assert_not_null(t, "%s", loom_last_error());
  cr_assert_eq(loom_device_synchronize(loom_cuda(0)), LOOM_OK);
  atomic_store(&g_nccl_release, 0);
  cr_assert_eq(cudaLaunchHostFunc((cudaStream_t)loom_stream_native(loom_comm_stream(c)), hold_comm_stream, NULL),
               cudaSuccess);
  cr_assert_eq(loom_comm_all_reduce(c, t, LOOM_REDUCE_SUM), LOOM_OK, "enqueueing does not wait: %s", loom_last_error());
  double t0 = loom_dist_now();
  loom_status st = loom_comm_synchronize(c);
  double took = loom_dist_now() - t0;
  atomic_store(&g_nccl_release, 1);
  tk_assert_error(st, LOOM_ERR_COMM, "within the 0.5 s timeout", "aborted");
  cr_assert_geq(took, 0.45, "gave up after %.3f s, before its timeout", took);
  cr_assert_lt(took, 5.0, "took %.3f s to time out and abort", took);
  tk_assert_error(loom_comm_check(c), LOOM_ERR_COMM, "has failed", "timeout");
  tk_assert_error(loom_comm_all_reduce(c, t, LOOM_REDUCE_SUM), LOOM_ERR_COMM, "has failed");
  loom_scope_end();
  loom_comm_free(c);
  cr_assert_eq(loom_device_synchronize(loom_cuda(0)), LOOM_OK, "the device after the abort: %s", loom_last_error());
  tk_leak_check();
#else
  loom_comm_free(c);
#endif
}
