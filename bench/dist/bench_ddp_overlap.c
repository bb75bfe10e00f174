/* bench_ddp_overlap.c — how much of data parallelism's communication hides
 * behind backward (loom_ddp on the CPU over MPI).
 *
 *   mpirun -np 2 --oversubscribe build/bench/bench_ddp_overlap [hidden=1024,1024,1024,1024] [batch=64]
 *          [steps=20] [first_mib=1] [mib=4] [threads=0]
 *
 * An MLP (784 -> hidden... -> 10, SGD) at the same per-rank batch, in one run:
 *   1. the anchor: rank 0 trains alone (plain, no ddp) while the others wait;
 *   2. every rank trains data-parallel (loom_ddp, buckets first_mib then mib).
 * Rank 0 prints one line:
 *   bench=ddp_overlap ranks=N batch=B params=P buckets=K single_step_ms=... dp_step_ms=...
 *     dp_vs_single=... comm_ms=... exposed_ms=... hidden=... hidden_but_last=...
 * dp_vs_single = dp step time / single step time (1.0 = perfect weak
 * scaling); comm_ms = the buckets' all-reduce time per step (as the
 * communication thread measured it); hidden = the fraction of that time
 * that ran before backward ended (before loom_ddp_sync was called);
 * hidden_but_last the same without the bucket launched last, which cannot
 * start before backward ends. exposed_ms = the wait in loom_ddp_sync. Both
 * phases take the best of 3 rounds of `steps` steps (the machine may be
 * shared). threads=0: lib/dist's default (cores / ranks on the machine),
 * used in both phases. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loom/loom.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
  fprintf(stderr, "bench_ddp_overlap: %s: %s\n", what, loom_last_error());
  return 1;
}

typedef struct run {
  loom_module *m;
  loom_optimizer *o;
  loom_ddp *d;
  loom_tensor *x, *y;
} run;

static int step(run *r) {
  loom_scope_begin();
  loom_tensor *loss = loom_cross_entropy(loom_module_forward(r->m, r->x), r->y);
  int ok = loom_optimizer_zero_grad(r->o) == LOOM_OK && loom_backward(loss) == LOOM_OK &&
           (!r->d || loom_ddp_sync(r->d) == LOOM_OK) && loom_optimizer_step(r->o) == LOOM_OK;
  loom_scope_end();
  return ok;
}

/* Best of 3 rounds: seconds per step. */
static double timed(run *r, int steps, int *ok) {
  double best = 1e30;
  for (int round = 0; round < 3 && *ok; round++) {
    if (r->d) loom_ddp_stats_reset(r->d);
    double t0 = now_s();
    for (int s = 0; s < steps && *ok; s++) *ok = step(r);
    double t = (now_s() - t0) / steps;
    if (t < best) best = t;
  }
  return best;
}

int main(int argc, char **argv) {
  int64_t hidden[8] = {1024, 1024, 1024, 1024}, batch = 64;
  int n_hidden = 4, steps = 20, threads = 0;
  double first_mib = 1, mib = 4;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strncmp(a, "hidden=", 7)) {
      n_hidden = 0;
      for (char *p = (char *)a + 7; *p && n_hidden < 8;) {
        hidden[n_hidden++] = strtoll(p, &p, 10);
        if (*p == ',') p++;
      }
    } else if (!strncmp(a, "batch=", 6)) batch = atoll(a + 6);
    else if (!strncmp(a, "steps=", 6)) steps = atoi(a + 6);
    else if (!strncmp(a, "first_mib=", 10)) first_mib = atof(a + 10);
    else if (!strncmp(a, "mib=", 4)) mib = atof(a + 4);
    else if (!strncmp(a, "threads=", 8)) threads = atoi(a + 8);
    else {
      fprintf(stderr, "usage: mpirun -np N bench_ddp_overlap [hidden=1024,...] [batch=64] [steps=20] [first_mib=1] "
                      "[mib=4] [threads=0]\n");
      return 2;
    }
  }
  if (threads > 0) loom_set_num_threads(threads);
  loom_comm *c = NULL;
  if (loom_comm_init(NULL, &c) != LOOM_OK) return fail("comm_init");
  int rank = loom_comm_rank(c), n = loom_comm_size(c);

  run r = {0};
  loom_manual_seed(1 + (uint64_t)rank);
  r.m = loom_mlp_new(784, n_hidden, hidden, 10, loom_cpu());
  if (!r.m) return fail("model");
  int np = loom_module_num_params(r.m);
  loom_tensor *ps[32];
  for (int i = 0; i < np && i < 32; i++) ps[i] = loom_module_param(r.m, i);
  r.o = loom_sgd_new(ps, np, NULL);
  r.x = loom_randn(2, (int64_t[]){batch, 784}, LOOM_F32, loom_cpu());
  float *yl = malloc((size_t)batch * sizeof *yl);
  for (int64_t i = 0; i < batch; i++) yl[i] = (float)((i * 7 + rank) % 10);
  r.y = loom_cast(loom_from_host(yl, 1, &batch, LOOM_F32, loom_cpu()), LOOM_I64);
  free(yl);
  if (!r.o || !r.x || !r.y) return fail("setup");

  /* 1. The anchor: rank 0 alone. */
  int ok = 1;
  double single = 0;
  if (rank == 0) {
    for (int w = 0; w < 3 && ok; w++) ok = step(&r);
    single = timed(&r, steps, &ok);
    if (!ok) return fail("single-rank step");
  }
  if (loom_comm_barrier(c) != LOOM_OK) return fail("barrier");

  /* 2. Data parallel. */
  loom_ddp_options o;
  loom_ddp_options_init(&o);
  o.first_bucket_mib = first_mib;
  o.bucket_mib = mib;
  r.d = loom_ddp_new(r.m, c, &o);
  if (!r.d) return fail("ddp_new");
  for (int w = 0; w < 3 && ok; w++) ok = step(&r);
  /* The stats kept are those of the last round, the timing the best. */
  double dp = timed(&r, steps, &ok);
  if (!ok) return fail("data-parallel step");
  loom_ddp_stats st = {.struct_size = sizeof st};
  loom_ddp_stats_get(r.d, &st);
  if (rank == 0) {
    double k = st.steps > 0 ? 1.0 / (double)st.steps : 0;
    printf("bench=ddp_overlap ranks=%d batch=%lld params=%lld buckets=%d threads=%d single_step_ms=%.3f "
           "dp_step_ms=%.3f dp_vs_single=%.3f comm_ms=%.3f exposed_ms=%.3f hidden=%.3f hidden_but_last=%.3f\n",
           n, (long long)batch, (long long)loom_module_num_param_elements(r.m), loom_ddp_num_buckets(r.d),
           loom_get_num_threads(), 1e3 * single, 1e3 * dp, dp / single, 1e3 * st.comm_seconds * k,
           1e3 * st.exposed_seconds * k, st.comm_seconds > 0 ? st.hidden_seconds / st.comm_seconds : 0.0,
           st.comm_seconds_but_last > 0 ? st.hidden_seconds_but_last / st.comm_seconds_but_last : 0.0);
    fflush(stdout);
  }
  loom_ddp_free(r.d);
  loom_optimizer_free(r.o);
  loom_module_free(r.m);
  loom_tensor_release(r.x);
  loom_tensor_release(r.y);
  loom_comm_free(c);
  return loom_dist_finalize() == LOOM_OK ? 0 : fail("finalize");
}
