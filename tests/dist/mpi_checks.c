/* mpi_checks.c — lib/dist checks that need several processes: run under
 * `mpirun -np 2` (ctest does, see tests/dist/CMakeLists.txt). Not a
 * Criterion binary: Criterion forks a worker per test, and MPI processes
 * must not fork. Each scenario (argv[1]) prints "rank R: ok NAME" per check
 * and exits non-zero on the first failure, naming it.
 *
 *   collectives  all-reduce (sum/avg/max) for every dtype, 1 element to
 *                > 25 MiB, broadcast, all-gather, barrier, argument errors
 *   ddp          2 ranks x batch 64 for 20 steps == 1 process x batch 128
 *                (fp32; with gradient accumulation; bucket boundaries;
 *                mixed bf16 buckets), parameters broadcast from rank 0
 *   amp          inf injected on one rank: both skip, both back off
 *   fail_input   bad input on rank 1 (it stops issuing collectives): rank 0
 *                gets LOOM_ERR_COMM within its timeout, not a hang
 *   killed       rank 1 is killed (SIGKILL) mid-run: the job must end (the
 *                launcher, or rank 0's timeout), never hang; run by
 *                check_killed.sh, which bounds and checks it */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loom/loom.h"

static int g_rank = -1;

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d: FAIL: ", g_rank);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (last error: %s)\n", loom_last_error());
  fflush(stderr);
  exit(1);
}

#define CHECK(cond, ...)         \
  do {                           \
    if (!(cond)) die(__VA_ARGS__); \
  } while (0)
#define OK(call) CHECK((call) == LOOM_OK, "%s", #call)

static void pass(const char *what) {
  printf("rank %d: ok %s\n", g_rank, what);
  fflush(stdout);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static loom_comm *make_comm(double timeout_s) {
  loom_comm_options o;
  loom_comm_options_init(&o);
  o.backend = LOOM_COMM_MPI;
  o.timeout_s = timeout_s;
  loom_comm *c = NULL;
  OK(loom_comm_init(&o, &c));
  g_rank = loom_comm_rank(c);
  CHECK(loom_comm_size(c) == 2, "world size %d; run with mpirun -np 2", loom_comm_size(c));
  CHECK(loom_comm_get_backend(c) == LOOM_COMM_MPI, "backend");
  return c;
}

/* ---- collectives ------------------------------------------------------------------- */

/* Value i of rank r, exactly representable in every dtype we test (small
 * integers, so sums are exact in f16/bf16 too). */
static double val(int r, int64_t i, loom_dtype dt) {
  int m = dt == LOOM_U8 ? 50 : 60;
  return (double)((i * 7 + r * 13 + 3) % m) - (dt == LOOM_U8 ? 0 : 20);
}

static void check_all_reduce(loom_comm *c, loom_dtype dt, int64_t n, loom_reduce_op op) {
  int r = loom_comm_rank(c), w = loom_comm_size(c);
  loom_scope_begin();
  float *h = malloc((size_t)n * sizeof *h);
  CHECK(h, "oom");
  for (int64_t i = 0; i < n; i++) h[i] = (float)val(r, i, dt);
  /* Small integers: exact in f32 and in every dtype tested. */
  loom_tensor *t = loom_from_host(h, 1, &n, LOOM_F32, loom_cpu());
  if (dt != LOOM_F32) t = loom_cast(t, dt);
  CHECK(t, "making a %s tensor", loom_dtype_name(dt));
  OK(loom_comm_all_reduce(c, t, op));
  OK(loom_comm_synchronize(c));
  OK(loom_to_host(t, h, (size_t)n * sizeof *h, LOOM_F32));
  bool is_float = loom_dtype_is_float(dt);
  for (int64_t i = 0; i < n; i++) {
    double want = 0;
    for (int k = 0; k < w; k++) {
      double v = val(k, i, dt);
      if (op == LOOM_REDUCE_MAX) want = k == 0 || v > want ? v : want;
      else want += v;
    }
    if (op == LOOM_REDUCE_AVG) want = is_float ? want / w : trunc(want / w);
    /* f16/bf16 average: each input is scaled by 1/w first and rounded. */
    double tol = dt == LOOM_BF16 ? 0.3 : dt == LOOM_F16 ? 0.05 : 1e-6;
    if (fabs(h[i] - want) > tol)
      die("all_reduce %s n=%lld op=%d: element %lld is %g, want %g", loom_dtype_name(dt), (long long)n, (int)op,
          (long long)i, h[i], want);
  }
  free(h);
  loom_scope_end();
}

static void scenario_collectives(void) {
  loom_comm *c = make_comm(60);
  int r = loom_comm_rank(c);
  const loom_dtype dts[] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I32, LOOM_I64, LOOM_U8};
  const int64_t sizes[] = {1, 2, 1000, 262144 + 1};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      check_all_reduce(c, dts[d], sizes[s], LOOM_REDUCE_SUM);
      check_all_reduce(c, dts[d], sizes[s], LOOM_REDUCE_MAX);
      check_all_reduce(c, dts[d], sizes[s], LOOM_REDUCE_AVG);
    }
    char what[64];
    snprintf(what, sizeof what, "all_reduce %s sum/avg/max, 1..262145 elements", loom_dtype_name(dts[d]));
    pass(what);
  }
  /* > 25 MiB (the default bucket) in one all-reduce, f32 and f16. */
  check_all_reduce(c, LOOM_F32, 6815744 + 3, LOOM_REDUCE_SUM);  /* 26 MiB + 12 B */
  check_all_reduce(c, LOOM_F16, 13631488 + 5, LOOM_REDUCE_AVG);
  pass("all_reduce > 25 MiB (f32 sum, f16 avg)");

  /* Several collectives in flight, then one wait: issued in order. */
  loom_scope_begin();
  loom_tensor *ts[8];
  for (int k = 0; k < 8; k++) {
    ts[k] = loom_full(1, (int64_t[]){1000 + k}, (double)(r + k), LOOM_F32, loom_cpu());
    OK(loom_comm_all_reduce(c, ts[k], LOOM_REDUCE_SUM));
  }
  OK(loom_comm_wait(c));
  for (int k = 0; k < 8; k++) {
    double v = 0;
    loom_tensor *e = loom_slice(ts[k], 0, 999 + k, 1000 + k, 1);
    OK(loom_item(e, &v));
    CHECK(v == (double)(2 * k + 1), "queued all_reduce %d: %g", k, v);
  }
  loom_scope_end();
  pass("8 all_reduces in flight, one wait");

  /* broadcast from each root, all-gather. */
  loom_scope_begin();
  for (int root = 0; root < 2; root++) {
    loom_tensor *t = loom_full(2, (int64_t[]){3, 5}, 10.0 * r + 1, LOOM_I64, loom_cpu());
    OK(loom_comm_broadcast(c, t, root));
    OK(loom_comm_synchronize(c));
    int64_t got[15];
    OK(loom_to_host(t, got, sizeof got, LOOM_I64));
    for (int i = 0; i < 15; i++) CHECK(got[i] == 10 * root + 1, "broadcast root %d: %lld", root, (long long)got[i]);
  }
  loom_tensor *in = loom_full(1, (int64_t[]){4}, (double)(r + 1), LOOM_BF16, loom_cpu());
  loom_tensor *out = loom_zeros(2, (int64_t[]){2, 4}, LOOM_BF16, loom_cpu());
  OK(loom_comm_all_gather(c, in, out));
  OK(loom_comm_synchronize(c));
  float g[8];
  OK(loom_to_host(out, g, sizeof g, LOOM_F32));
  for (int i = 0; i < 8; i++) CHECK(g[i] == (float)(i / 4 + 1), "all_gather [%d] = %g", i, g[i]);
  OK(loom_comm_barrier(c));
  loom_scope_end();
  pass("broadcast, all_gather, barrier");

  /* Argument errors fail the call, not the communicator. */
  loom_scope_begin();
  loom_tensor *a = loom_zeros(2, (int64_t[]){4, 4}, LOOM_F32, loom_cpu());
  loom_tensor *tr = loom_transpose(a, 0, 1);
  CHECK(loom_comm_all_reduce(c, tr, LOOM_REDUCE_SUM) == LOOM_ERR_INVALID_ARG && strstr(loom_last_error(), "contiguous"),
        "non-contiguous input accepted");
  CHECK(loom_comm_all_reduce(c, a, (loom_reduce_op)7) == LOOM_ERR_INVALID_ARG, "unknown op accepted");
  CHECK(loom_comm_broadcast(c, a, 2) == LOOM_ERR_INVALID_ARG, "root 2 accepted");
  CHECK(loom_comm_all_gather(c, a, a) != LOOM_OK, "all_gather with a too-small output accepted");
  CHECK(loom_comm_all_reduce(c, NULL, LOOM_REDUCE_SUM) != LOOM_OK, "NULL accepted");
  OK(loom_comm_check(c));
  OK(loom_comm_all_reduce(c, a, LOOM_REDUCE_SUM));
  OK(loom_comm_synchronize(c));
  loom_scope_end();
  pass("argument errors leave the communicator usable");

  loom_comm_free(c);
  OK(loom_dist_finalize());
}

/* ---- data-parallel equivalence ------------------------------------------------------ */

enum { IN = 24, OUT = 10, GLOBAL_BATCH = 128, STEPS = 20 };

/* Sample s of step k (deterministic, identical on every rank). */
static void sample(int k, int s, float *x, int32_t *y) {
  uint64_t z = (uint64_t)(k * 1000003 + s * 7919 + 17);
  for (int j = 0; j < IN; j++) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    x[j] = (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
  }
  *y = (int32_t)((z >> 33) % OUT);
}

static loom_module *make_model(uint64_t seed, loom_precision prec) {
  loom_manual_seed(seed);
  loom_module *m = loom_mlp_new(IN, 2, (int64_t[]){64, 32}, OUT, loom_cpu());
  CHECK(m, "mlp");
  if (prec != LOOM_PRECISION_FP32) OK(loom_module_set_precision(m, prec, true));
  return m;
}

static loom_optimizer *make_opt(loom_module *m) {
  loom_tensor *ps[16];
  int n = loom_module_num_params(m);
  for (int i = 0; i < n; i++) ps[i] = loom_module_param(m, i);
  loom_sgd_options o;
  loom_sgd_options_init(&o);
  o.lr = 0.1;
  o.momentum = 0.9;
  loom_optimizer *opt = loom_sgd_new(ps, n, &o);
  CHECK(opt, "sgd");
  return opt;
}

/* Forward + backward of samples [s0, s0+n) of step k, loss scaled by w. */
static void fwd_bwd(loom_module *m, int k, int s0, int n, double w) {
  loom_scope_begin();
  float *x = malloc((size_t)n * IN * sizeof *x);
  int32_t *y = malloc((size_t)n * sizeof *y);
  CHECK(x && y, "oom");
  for (int s = 0; s < n; s++) sample(k, s0 + s, x + (size_t)s * IN, y + s);
  loom_tensor *tx = loom_from_host(x, 2, (int64_t[]){n, IN}, LOOM_F32, loom_cpu());
  loom_tensor *ty = loom_from_host(y, 1, (int64_t[]){n}, LOOM_I32, loom_cpu());
  loom_tensor *loss = loom_cross_entropy(loom_module_forward(m, tx), ty);
  if (w != 1.0) loss = loom_mul_scalar(loss, w);
  OK(loom_backward(loss));
  free(x);
  free(y);
  loom_scope_end();
}

/* The reference: one process, the whole batch of 128. */
static loom_module *train_reference(loom_precision prec) {
  loom_module *m = make_model(1, prec);
  loom_optimizer *opt = make_opt(m);
  for (int k = 0; k < STEPS; k++) {
    OK(loom_optimizer_zero_grad(opt));
    fwd_bwd(m, k, 0, GLOBAL_BATCH, 1.0);
    OK(loom_optimizer_step(opt));
  }
  loom_optimizer_free(opt);
  return m;
}

/* Rank r trains on its half of each batch (64 samples), split into micro
 * micro-batches (no_sync for all but the last). The model starts from a
 * different seed on rank 1: loom_ddp_new must broadcast rank 0's. */
static loom_module *train_ddp(loom_comm *c, int micro, const loom_ddp_options *dopt, loom_precision prec, int *n_buckets) {
  int r = loom_comm_rank(c), w = loom_comm_size(c);
  loom_module *m = make_model(1 + (uint64_t)r * 100, prec);
  loom_ddp *d = loom_ddp_new(m, c, dopt);
  CHECK(d, "ddp_new");
  *n_buckets = loom_ddp_num_buckets(d);
  loom_optimizer *opt = make_opt(m);
  int per_rank = GLOBAL_BATCH / w, mb = per_rank / micro;
  for (int k = 0; k < STEPS; k++) {
    OK(loom_optimizer_zero_grad(opt));
    for (int j = 0; j < micro; j++) {
      OK(loom_ddp_set_sync(d, j == micro - 1));
      fwd_bwd(m, k, r * per_rank + j * mb, mb, 1.0 / micro);
    }
    OK(loom_ddp_sync(d));
    OK(loom_optimizer_step(opt));
  }
  loom_ddp_stats st = {.struct_size = sizeof st};
  OK(loom_ddp_stats_get(d, &st));
  CHECK(st.steps == STEPS, "ddp stats: %lld synchronizing steps, want %d", (long long)st.steps, STEPS);
  CHECK(st.buckets == (int64_t)STEPS * *n_buckets, "ddp stats: %lld bucket all-reduces", (long long)st.buckets);
  loom_optimizer_free(opt);
  loom_ddp_free(d);
  return m;
}

static double max_param_diff(loom_module *a, loom_module *b) {
  double worst = 0;
  for (int i = 0; i < loom_module_num_params(a); i++) {
    loom_tensor *pa = loom_module_param(a, i), *pb = loom_module_param(b, i);
    int64_t n = loom_module_num_param_elements(a);
    float *ha = malloc((size_t)n * sizeof(float)), *hb = malloc((size_t)n * sizeof(float));
    CHECK(ha && hb, "oom");
    size_t bytes = (size_t)loom_tensor_numel(pa) * sizeof(float);
    OK(loom_to_host(pa, ha, bytes, LOOM_F32));
    OK(loom_to_host(pb, hb, bytes, LOOM_F32));
    for (int64_t j = 0; j < loom_tensor_numel(pa); j++) {
      double dd = fabs((double)ha[j] - (double)hb[j]) / (1.0 + fabs((double)hb[j]));
      if (dd > worst || dd != dd) worst = dd != dd ? INFINITY : dd;
    }
    free(ha);
    free(hb);
  }
  return worst;
}

/* Every rank must hold bit-identical parameters: all-gather a checksum. */
static void check_ranks_identical(loom_comm *c, loom_module *m, const char *what) {
  double sum = 0, wsum = 0;
  for (int i = 0; i < loom_module_num_params(m); i++) {
    loom_tensor *p = loom_module_param(m, i);
    int64_t n = loom_tensor_numel(p);
    float *h = malloc((size_t)n * sizeof *h);
    CHECK(h, "oom");
    OK(loom_to_host(p, h, (size_t)n * sizeof *h, LOOM_F32));
    for (int64_t j = 0; j < n; j++) sum += h[j], wsum += h[j] * (double)(j % 97 + i);
    free(h);
  }
  loom_scope_begin();
  double mine[2] = {sum, wsum};
  int64_t bits[2];  /* compare the doubles' bits */
  memcpy(bits, mine, sizeof bits);
  loom_tensor *tb = loom_from_host(bits, 1, (int64_t[]){2}, LOOM_I64, loom_cpu());
  loom_tensor *all = loom_zeros(1, (int64_t[]){4}, LOOM_I64, loom_cpu());
  OK(loom_comm_all_gather(c, tb, all));
  OK(loom_comm_synchronize(c));
  int64_t got[4];
  OK(loom_to_host(all, got, sizeof got, LOOM_I64));
  CHECK(got[0] == got[2] && got[1] == got[3], "%s: ranks hold different parameters", what);
  loom_scope_end();
}

static void scenario_ddp(void) {
  loom_comm *c = make_comm(120);
  loom_module *ref = train_reference(LOOM_PRECISION_FP32);
  struct {
    const char *name;
    int micro;
    double first_mib, mib;
    int min_buckets;
  } cases[] = {
      {"2 ranks x 64 == 1 x 128 (fp32, 20 steps, one bucket)", 1, 1.0, 25.0, 1},
      {"2 ranks x (2 micro-batches of 32, no_sync) == 1 x 128", 2, 1.0, 25.0, 1},
      {"2 ranks x (4 micro-batches of 16) == 1 x 128", 4, 1.0, 25.0, 1},
      /* Parameters (reverse): b3 40 B, W3 1280 B, b2 128 B | W2 8 KiB (larger
       * than the cap: its own bucket) | b1 256 B, W1 6 KiB: a 2 KiB first
       * bucket, 7 KiB after, gives 3 buckets ending mid-model. */
      {"2 ranks x 64 == 1 x 128 with small buckets (bucket boundaries)", 1, 2.0 / 1024, 7.0 / 1024, 3},
      {"small buckets + 2 micro-batches", 2, 2.0 / 1024, 7.0 / 1024, 3},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    loom_ddp_options o;
    loom_ddp_options_init(&o);
    o.first_bucket_mib = cases[i].first_mib;
    o.bucket_mib = cases[i].mib;
    int nb = 0;
    loom_module *m = train_ddp(c, cases[i].micro, &o, LOOM_PRECISION_FP32, &nb);
    CHECK(nb >= cases[i].min_buckets, "%s: %d buckets, want >= %d", cases[i].name, nb, cases[i].min_buckets);
    double diff = max_param_diff(m, ref);
    CHECK(diff < 2e-5, "%s: parameters differ from the 1-process reference by %g (relative)", cases[i].name, diff);
    check_ranks_identical(c, m, cases[i].name);
    printf("rank %d: ok %s (%d bucket%s, max rel diff %.2g)\n", g_rank, cases[i].name, nb, nb == 1 ? "" : "s", diff);
    fflush(stdout);
    loom_module_free(m);
  }
  /* Without the all-reduce, each rank's model follows only its own half:
   * shows the comparison above can fail. */
  {
    loom_module *m = make_model(1, LOOM_PRECISION_FP32);
    loom_optimizer *opt = make_opt(m);
    for (int k = 0; k < STEPS; k++) {
      OK(loom_optimizer_zero_grad(opt));
      fwd_bwd(m, k, g_rank * 64, 64, 1.0);
      OK(loom_optimizer_step(opt));
    }
    double diff = max_param_diff(m, ref);
    CHECK(diff > 1e-3, "control: training on half the batch alone matched the reference (diff %g)", diff);
    loom_optimizer_free(opt);
    loom_module_free(m);
    pass("control: half the batch without all-reduce differs from the reference");
  }
  loom_module_free(ref);

  /* Bucket plan introspection: reverse registration order. */
  {
    loom_module *m = make_model(1, LOOM_PRECISION_FP32);
    loom_ddp_options o;
    loom_ddp_options_init(&o);
    o.first_bucket_mib = 2.0 / 1024;
    o.bucket_mib = 7.0 / 1024;
    loom_ddp *d = loom_ddp_new(m, c, &o);
    CHECK(d, "ddp_new");
    int n = loom_module_num_params(m), prev_lo = n;
    for (int b = 0; b < loom_ddp_num_buckets(d); b++) {
      loom_ddp_bucket_info bi = {.struct_size = sizeof bi};
      OK(loom_ddp_bucket_get(d, b, &bi));
      CHECK(bi.last_param <= bi.first_param && bi.first_param == prev_lo - 1, "bucket %d covers %d..%d after %d", b,
            bi.last_param, bi.first_param, prev_lo);
      CHECK(b == 0 ? bi.bytes <= 2048 : (bi.bytes <= 7168 || bi.n_params == 1), "bucket %d: %lld bytes", b,
            (long long)bi.bytes);
      prev_lo = bi.last_param;
    }
    CHECK(prev_lo == 0, "buckets do not cover parameter 0");
    loom_ddp_free(d);
    loom_module_free(m);
    pass("buckets in reverse registration order within their caps");
  }

  /* Mixed bf16: low-precision buckets by default, f32 optionally; both
   * close to the fp32 reference and identical across ranks. */
  {
    loom_module *mref = train_reference(LOOM_PRECISION_MIXED_BF16);
    for (int f32 = 0; f32 < 2; f32++) {
      loom_ddp_options o;
      loom_ddp_options_init(&o);
      o.reduce_in_fp32 = f32;
      int nb = 0;
      loom_module *m = make_model(1 + (uint64_t)g_rank * 100, LOOM_PRECISION_MIXED_BF16);
      loom_ddp *d = loom_ddp_new(m, c, &o);
      CHECK(d, "ddp_new bf16");
      nb = loom_ddp_num_buckets(d);
      loom_ddp_bucket_info bi = {.struct_size = sizeof bi};
      OK(loom_ddp_bucket_get(d, nb - 1, &bi));
      CHECK(bi.dtype == (f32 ? LOOM_F32 : LOOM_BF16), "bucket dtype %s", loom_dtype_name(bi.dtype));
      loom_optimizer *opt = make_opt(m);
      for (int k = 0; k < STEPS; k++) {
        OK(loom_optimizer_zero_grad(opt));
        fwd_bwd(m, k, g_rank * 64, 64, 1.0);
        OK(loom_ddp_sync(d));
        OK(loom_optimizer_step(opt));
      }
      double diff = max_param_diff(m, mref);
      CHECK(diff < 2e-2, "bf16 %s buckets: differ from the 1-process bf16 run by %g", f32 ? "f32" : "bf16", diff);
      check_ranks_identical(c, m, "bf16");
      printf("rank %d: ok mixed bf16, %s buckets: ranks identical, max rel diff vs 1 process %.2g\n", g_rank,
             f32 ? "f32" : "bf16", diff);
      fflush(stdout);
      loom_optimizer_free(opt);
      loom_ddp_free(d);
      loom_module_free(m);
    }
    loom_module_free(mref);
  }
  loom_comm_free(c);
  OK(loom_dist_finalize());
}

/* ---- AMP: skip agreed across ranks --------------------------------------------------- */

static void scenario_amp(void) {
  loom_comm *c = make_comm(60);
  for (int attach = 1; attach >= 0; attach--) {
    loom_module *m = make_model(1, LOOM_PRECISION_MIXED_FP16);
    loom_ddp *d = loom_ddp_new(m, c, NULL);
    CHECK(d, "ddp_new");
    loom_scaler_options so;
    loom_scaler_options_init(&so);
    so.init_scale = 1024;
    loom_grad_scaler *s = loom_scaler_new(&so);
    CHECK(s, "scaler");
    if (attach) OK(loom_ddp_attach_scaler(d, s));
    loom_optimizer *opt = make_opt(m);
    int skipped_steps = 0;
    for (int k = 0; k < 4; k++) {
      OK(loom_optimizer_zero_grad(opt));
      loom_scope_begin();
      float x[8 * IN];
      int32_t y[8];
      for (int i = 0; i < 8; i++) sample(k, g_rank * 8 + i, x + i * IN, y + i);
      loom_tensor *loss = loom_cross_entropy(loom_module_forward(m, loom_from_host(x, 2, (int64_t[]){8, IN}, LOOM_F32, loom_cpu())),
                                             loom_from_host(y, 1, (int64_t[]){8}, LOOM_I32, loom_cpu()));
      OK(loom_backward(loom_scaler_scale(s, loss)));
      OK(loom_ddp_sync(d));
      /* Step 2: an overflow on rank 1 only (after the all-reduce, as if its
       * own unscale had overflowed). */
      if (k == 2 && g_rank == 1) {
        loom_tensor *p0 = loom_module_param(m, 0);
        loom_tensor *g = loom_grad(loom_amp_lowp_copy(p0) ? loom_amp_lowp_copy(p0) : p0);
        CHECK(g, "no gradient to poison");
        OK(loom_fill_(loom_slice(loom_reshape(g, 1, (int64_t[]){-1}), 0, 0, 1, 1), INFINITY));
      }
      loom_scope_end();
      bool skipped = false;
      OK(loom_scaler_step(s, opt, &skipped));
      if (skipped) skipped_steps++;
      if (attach) {
        CHECK(skipped == (k == 2), "step %d: skipped=%d", k, (int)skipped);
      }
    }
    if (attach) {
      CHECK(loom_scaler_get_scale(s) == 512.0, "scale %g, want 512 (halved once)", loom_scaler_get_scale(s));
      check_ranks_identical(c, m, "amp");
      pass("inf on rank 1 only: both ranks skip step 2 and halve the scale; parameters identical");
    } else {
      /* Without the agreement rank 0 would step where rank 1 skips. */
      CHECK(skipped_steps == (g_rank == 1 ? 1 : 0), "control: rank %d skipped %d steps", g_rank, skipped_steps);
      pass("control: without the agreement only rank 1 skips");
    }
    loom_optimizer_free(opt);
    loom_ddp_free(d);
    loom_scaler_free(s);
    loom_module_free(m);
  }
  loom_comm_free(c);
  OK(loom_dist_finalize());
}

/* ---- failures ------------------------------------------------------------------------ */

/* Rank 1 gets bad input (a wrong-shaped batch), its step fails and it stops
 * issuing collectives (it aborts its communicator and waits before exiting,
 * as a trainer reporting the error would). Rank 0's next bucket all-reduce
 * must fail within the timeout. */
static void scenario_fail_input(void) {
  const double timeout = 3.0;
  loom_comm *c = make_comm(timeout);
  loom_module *m = make_model(1, LOOM_PRECISION_FP32);
  loom_ddp *d = loom_ddp_new(m, c, NULL);
  CHECK(d, "ddp_new");
  loom_optimizer *opt = make_opt(m);
  OK(loom_optimizer_zero_grad(opt));
  fwd_bwd(m, 0, g_rank * 64, 64, 1.0);
  OK(loom_ddp_sync(d));
  OK(loom_optimizer_step(opt));
  pass("one good step");
  OK(loom_optimizer_zero_grad(opt));
  if (g_rank == 1) {
    loom_scope_begin();
    loom_tensor *bad = loom_zeros(2, (int64_t[]){64, IN + 1}, LOOM_F32, loom_cpu());
    loom_tensor *out = loom_module_forward(m, bad);
    CHECK(!out, "a batch with %d features was accepted", IN + 1);
    printf("rank 1: ok bad input rejected: %s\n", loom_last_error());
    loom_scope_end();
    OK(loom_comm_abort(c));
    CHECK(loom_comm_check(c) == LOOM_ERR_COMM, "an aborted communicator reports no failure");
    sleep((unsigned)(timeout * 2 + 2));  /* stay alive: rank 0 must fail by its timeout, not by our exit */
  } else {
    double t0 = now();
    fwd_bwd(m, 1, 0, 64, 1.0);
    loom_status st = loom_ddp_sync(d);
    double took = now() - t0;
    CHECK(st == LOOM_ERR_COMM, "rank 0: ddp_sync returned %s, want LOOM_ERR_COMM", loom_status_name(st));
    CHECK(strstr(loom_last_error(), "timeout"), "the message does not say timeout: %s", loom_last_error());
    CHECK(took < timeout + 5, "rank 0 took %.1f s to fail (timeout %g s)", took, timeout);
    printf("rank 0: ok failed in %.2f s (timeout %g s): %s\n", took, timeout, loom_last_error());
    CHECK(loom_comm_all_reduce(c, loom_module_param(m, 0), LOOM_REDUCE_SUM) == LOOM_ERR_COMM,
          "a failed communicator accepted more work");
    pass("later collectives fail at once");
  }
  fflush(stdout);
  loom_optimizer_free(opt);
  loom_ddp_free(d);
  loom_module_free(m);
  loom_comm_free(c);
  /* A collective was abandoned: MPI cannot be finalized cleanly. */
  CHECK(loom_dist_finalize() == LOOM_ERR_COMM, "dist_finalize after a failure should refuse");
  pass("dist_finalize refuses after an abandoned collective");
  /* Exit without MPI_Finalize; the status tells the launcher it ended. */
  fflush(stdout);
  _exit(0);
}

/* Rank 1 kills itself in the middle of training. */
static void scenario_killed(void) {
  const double timeout = 5.0;
  loom_comm *c = make_comm(timeout);
  loom_module *m = make_model(1, LOOM_PRECISION_FP32);
  loom_ddp *d = loom_ddp_new(m, c, NULL);
  CHECK(d, "ddp_new");
  loom_optimizer *opt = make_opt(m);
  double t0 = now();
  for (int k = 0; k < 1000; k++) {
    if (k == 3 && g_rank == 1) {
      printf("rank 1: killing myself at step 3\n");
      fflush(stdout);
      raise(SIGKILL);
    }
    OK(loom_optimizer_zero_grad(opt));
    fwd_bwd(m, k, g_rank * 64, 64, 1.0);
    loom_status st = loom_ddp_sync(d);
    if (st != LOOM_OK) {
      printf("rank 0: ok step %d failed after %.2f s: %s\n", k, now() - t0, loom_last_error());
      fflush(stdout);
      _exit(3);  /* the expected outcome when the launcher lets us see it */
    }
    OK(loom_optimizer_step(opt));
  }
  die("rank %d trained 1000 steps with a dead peer", g_rank);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: mpirun -np 2 %s collectives|ddp|amp|fail_input|killed\n", argv[0]);
    return 2;
  }
  loom_log_set_level(LOOM_LOG_WARN);
  const char *s = argv[1];
  if (!strcmp(s, "collectives")) scenario_collectives();
  else if (!strcmp(s, "ddp")) scenario_ddp();
  else if (!strcmp(s, "amp")) scenario_amp();
  else if (!strcmp(s, "fail_input")) scenario_fail_input();
  else if (!strcmp(s, "killed")) scenario_killed();
  else {
    fprintf(stderr, "unknown scenario '%s'\n", s);
    return 2;
  }
  printf("rank %d: all %s checks passed\n", g_rank, s);
  return 0;
}
