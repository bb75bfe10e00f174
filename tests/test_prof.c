/* test_prof.c — the profiler (include/loom/prof.h) end to end: the Chrome
 * trace of an MLP training step parses as JSON (jansson), its ranges nest
 * on every track, every op of the step is there (and inside its backward
 * range), device time lands on per-stream tracks with a flow arrow from each
 * launch (CPU streams timed through the same event machinery CUDA uses),
 * the memory counters equal loom_memory_stats_get at the same instants, the
 * summary's totals equal the trace's, allocations carry the op that made
 * them (trace and memory snapshot), loader threads get their own tracks,
 * and errors are reported, not ignored. On a GPU (LOOM_TEST_DEVICE=cuda;
 * skipped visibly without one) an op's device time comes from CUDA events
 * and lies between zero and the host wall time around it. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loom/loom.h"
#include "support/testkit.h"

/* ---- trace helpers ------------------------------------------------------------ */

static char *tmp_path(const char *tag) {
  char *p = malloc(128);
  snprintf(p, 128, "/tmp/loom_prof_%s_%d.json", tag, (int)getpid());
  return p;
}

static json_t *load_trace(const char *path) {
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  cr_assert_not_null(root, "trace %s is not valid JSON: %s (line %d)", path, err.text, err.line);
  cr_assert(json_is_array(json_object_get(root, "traceEvents")), "no traceEvents array");
  return root;
}

static json_t *events(json_t *root) { return json_object_get(root, "traceEvents"); }
static const char *sget(json_t *e, const char *k) {
  json_t *v = json_object_get(e, k);
  return json_is_string(v) ? json_string_value(v) : "";
}
static double nget(json_t *e, const char *k) { return json_number_value(json_object_get(e, k)); }
static int64_t iget(json_t *e, const char *k) { return (int64_t)json_integer_value(json_object_get(e, k)); }
/* Trace timestamps are microseconds with nanosecond decimals: back to ns exactly. */
static int64_t ns(json_t *e, const char *k) { return llround(nget(e, k) * 1000.0); }
static bool is(json_t *e, const char *ph) { return !strcmp(sget(e, "ph"), ph); }

/* pid of the process named name (-1 if none). */
static int pid_of(json_t *root, const char *name) {
  size_t i;
  json_t *e;
  json_array_foreach(events(root), i, e) {
    if (is(e, "M") && !strcmp(sget(e, "name"), "process_name") &&
        !strcmp(sget(json_object_get(e, "args"), "name"), name))
      return (int)iget(e, "pid");
  }
  return -1;
}

/* tid of the thread named name in pid (-1 if none). */
static int tid_of(json_t *root, int pid, const char *name) {
  size_t i;
  json_t *e;
  json_array_foreach(events(root), i, e) {
    if (is(e, "M") && !strcmp(sget(e, "name"), "thread_name") && iget(e, "pid") == pid &&
        !strcmp(sget(json_object_get(e, "args"), "name"), name))
      return (int)iget(e, "tid");
  }
  return -1;
}

/* X events of a pid (and category, when cat != NULL) named name. */
static int count_x(json_t *root, int pid, const char *cat, const char *name) {
  int n = 0;
  size_t i;
  json_t *e;
  json_array_foreach(events(root), i, e) {
    if (is(e, "X") && iget(e, "pid") == pid && (!cat || !strcmp(sget(e, "cat"), cat)) && !strcmp(sget(e, "name"), name))
      n++;
  }
  return n;
}

typedef struct span { int64_t t0, t1; int pid, tid; } span;
static int by_track_time(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->pid != y->pid) return x->pid - y->pid;
  if (x->tid != y->tid) return x->tid - y->tid;
  if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
  return x->t1 > y->t1 ? -1 : x->t1 < y->t1;
}

/* Every track's ranges are well nested: any two are disjoint or one holds the other. */
static void assert_balanced(json_t *root) {
  json_t *ev = events(root);
  span *sp = malloc(json_array_size(ev) * sizeof *sp + 1);
  size_t n = 0, i;
  json_t *e;
  json_array_foreach(ev, i, e) {
    if (!is(e, "X")) continue;
    cr_assert(nget(e, "dur") >= 0, "negative duration in %s", sget(e, "name"));
    sp[n++] = (span){ns(e, "ts"), ns(e, "ts") + ns(e, "dur"), (int)iget(e, "pid"), (int)iget(e, "tid")};
  }
  qsort(sp, n, sizeof *sp, by_track_time);
  span *stack[256];
  int depth = 0;
  for (size_t k = 0; k < n; k++) {
    while (depth > 0 && (stack[depth - 1]->pid != sp[k].pid || stack[depth - 1]->tid != sp[k].tid ||
                         sp[k].t0 >= stack[depth - 1]->t1))
      depth--;
    if (depth > 0)
      cr_assert(sp[k].t1 <= stack[depth - 1]->t1,
                "range [%lld, %lld] on pid %d tid %d overlaps its enclosing range [%lld, %lld] without nesting",
                (long long)sp[k].t0, (long long)sp[k].t1, sp[k].pid, sp[k].tid, (long long)stack[depth - 1]->t0,
                (long long)stack[depth - 1]->t1);
    cr_assert(depth < 256);
    stack[depth++] = &sp[k];
  }
  free(sp);
}

/* ---- an MLP training step ------------------------------------------------------ */

typedef struct mlp_fixture {
  loom_module *model;
  loom_optimizer *opt;
  loom_tensor *params[8];
  int np;
} mlp_fixture;

enum { B = 6, IN = 8, H1 = 32, H2 = 16, OUT = 4 };

static void mlp_setup(mlp_fixture *f) {
  const int64_t hidden[2] = {H1, H2};
  loom_manual_seed(7);
  f->model = loom_mlp_new(IN, 2, hidden, OUT, loom_cpu());
  cr_assert_not_null(f->model, "%s", loom_last_error());
  f->np = loom_module_num_params(f->model);
  cr_assert_eq(f->np, 6);
  for (int i = 0; i < f->np; i++) f->params[i] = loom_module_param(f->model, i);
  f->opt = loom_adamw_new(f->params, f->np, NULL);
  cr_assert_not_null(f->opt, "%s", loom_last_error());
}

static void mlp_step(mlp_fixture *f) {
  const int64_t xs[2] = {B, IN}, ys[1] = {B};
  const int64_t labels[B] = {0, 1, 2, 3, 0, 1};
  loom_scope_begin();
  loom_tensor *x = loom_randn(2, xs, LOOM_F32, loom_cpu());
  loom_tensor *y = loom_from_host(labels, 1, ys, LOOM_I64, loom_cpu());
  cr_assert_eq(loom_range_push("forward"), LOOM_OK);
  loom_tensor *loss = loom_cross_entropy(loom_module_forward(f->model, x), y);
  cr_assert_eq(loom_range_pop(), LOOM_OK);
  cr_assert_eq(loom_optimizer_zero_grad(f->opt), LOOM_OK);
  cr_assert_eq(loom_backward(loss), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_optimizer_step(f->opt), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
}

static void mlp_teardown(mlp_fixture *f) {
  loom_optimizer_free(f->opt);
  loom_module_free(f->model);
}

/* The ops one step of that MLP runs: three fused linears and the loss
 * forward; their backward ops; and one copy (the gradient clone autograd
 * makes when it accumulates into a parameter's .grad). */
static const struct { const char *name; int per_step; } k_step_ops[] = {
    {"linear", 3}, {"cross_entropy", 1}, {"cross_entropy_backward", 1}, {"linear_backward", 3}, {"copy", 1},
};

Test(prof, mlp_step_trace) {
  mlp_fixture f;
  mlp_setup(&f);
  mlp_step(&f);  /* warm-up: optimizer state and caches exist before recording */
  char *path = tmp_path("mlp");
  loom_profiler_options o;
  loom_profiler_options_init(&o);
  o.trace_path = path;
  o.device_timing = LOOM_PROFILER_DEVICE_TIME_ALL;  /* the CPU stream through the device-timing path */
  cr_assert_eq(loom_profiler_start(&o), LOOM_OK, "%s", loom_last_error());
  cr_assert(loom_profiler_is_running());
  const int steps = 2;
  for (int s = 0; s < steps; s++) {
    mlp_step(&f);
    loom_profiler_step();
  }
  cr_assert_eq(loom_profiler_stop(), LOOM_OK, "%s", loom_last_error());
  cr_assert(!loom_profiler_is_running());

  json_t *root = load_trace(path);
  assert_balanced(root);
  int host = pid_of(root, "loom host"), cpu = pid_of(root, "cpu");
  cr_assert(host >= 0 && cpu >= 0, "host %d cpu %d processes", host, cpu);
  cr_assert(tid_of(root, host, "main thread") >= 0);
  int stream = tid_of(root, cpu, "compute stream");
  cr_assert(stream >= 0, "no compute stream track on the cpu process");

  /* Every op of the step, the right number of times, on the host... */
  int nops = 0;
  for (size_t k = 0; k < sizeof k_step_ops / sizeof k_step_ops[0]; k++) {
    int got = count_x(root, host, "op", k_step_ops[k].name);
    cr_assert_eq(got, steps * k_step_ops[k].per_step, "op %s: %d events, want %d", k_step_ops[k].name, got,
                 steps * k_step_ops[k].per_step);
    nops += got;
  }
  size_t i;
  json_t *e;
  int host_ops = 0;
  json_array_foreach(events(root), i, e) {
    if (is(e, "X") && iget(e, "pid") == host && !strcmp(sget(e, "cat"), "op")) host_ops++;
  }
  cr_assert_eq(host_ops, nops, "the step ran ops the test does not expect (%d op events, %d expected)", host_ops, nops);
  /* ...with the other ranges of the step. */
  cr_assert_eq(count_x(root, host, "backward", "backward"), steps);
  cr_assert_eq(count_x(root, host, "backward", "linear (backward)"), 3 * steps);
  cr_assert_eq(count_x(root, host, "backward", "cross_entropy (backward)"), steps);
  cr_assert_eq(count_x(root, host, "optimizer", "adamw step"), steps);
  cr_assert_eq(count_x(root, host, "user", "forward"), steps);
  cr_assert_eq(count_x(root, host, "step", "step"), steps);

  /* Each op's device slice sits on the stream track, joined by a flow. */
  int flows_s = 0, flows_f = 0, slices = 0;
  json_array_foreach(events(root), i, e) {
    if (is(e, "s")) flows_s++;
    if (is(e, "f")) {
      flows_f++;
      cr_assert_eq(iget(e, "pid"), cpu);
      cr_assert_eq(iget(e, "tid"), stream);
      cr_assert_str_eq(sget(e, "bp"), "e");
    }
    if (is(e, "X") && iget(e, "pid") == cpu) {
      cr_assert_eq(iget(e, "tid"), stream);
      slices++;
    }
  }
  /* ops + optimizer steps are timed on the device */
  cr_assert_eq(slices, nops + steps, "%d device slices for %d ops and %d optimizer steps", slices, nops, steps);
  cr_assert_eq(flows_s, slices);
  cr_assert_eq(flows_f, slices);
  json_array_foreach(events(root), i, e) {
    if (!is(e, "s")) continue;
    int64_t id = iget(e, "id");
    int matched = 0;
    size_t j;
    json_t *g;
    json_array_foreach(events(root), j, g) {
      if (is(g, "f") && iget(g, "id") == id) matched++;
    }
    cr_assert_eq(matched, 1, "flow %lld has %d ends", (long long)id, matched);
  }

  /* Memory counters on the cpu process, with allocated <= active <= reserved. */
  int counters = 0;
  json_array_foreach(events(root), i, e) {
    if (!is(e, "C")) continue;
    cr_assert_eq(iget(e, "pid"), cpu);
    json_t *a = json_object_get(e, "args");
    int64_t al = iget(a, "allocated"), ac = iget(a, "active"), re = iget(a, "reserved");
    cr_assert(al >= 0 && al <= ac && ac <= re, "counter %lld %lld %lld", (long long)al, (long long)ac, (long long)re);
    counters++;
  }
  cr_assert_gt(counters, 0);

  /* The summary's totals are the trace's totals. */
  loom_profiler_row rows[64];
  int nrows = loom_profiler_summary_rows(rows, sizeof rows[0], 64);
  cr_assert(nrows > 0 && nrows <= 64, "%d rows: %s", nrows, loom_last_error());
  for (int r = 0; r < nrows; r++) {
    int64_t calls = 0, host_ns = 0, dev_ns = 0;
    json_array_foreach(events(root), i, e) {
      if (!is(e, "X") || strcmp(sget(e, "name"), rows[r].name) || strcmp(sget(e, "cat"), rows[r].category)) continue;
      if (iget(e, "pid") == host) {
        calls++;
        host_ns += ns(e, "dur");
      } else {
        dev_ns += ns(e, "dur");
      }
    }
    cr_assert_eq(rows[r].calls, calls, "%s: summary %lld calls, trace %lld", rows[r].name, (long long)rows[r].calls,
                 (long long)calls);
    cr_assert(fabs(rows[r].host_total_us * 1e3 - (double)host_ns) < 0.5, "%s: summary %.3f us, trace %lld ns",
              rows[r].name, rows[r].host_total_us, (long long)host_ns);
    cr_assert(fabs(rows[r].device_total_us * 1e3 - (double)dev_ns) < 0.5, "%s: device %.3f us, trace %lld ns",
              rows[r].name, rows[r].device_total_us, (long long)dev_ns);
    cr_assert(rows[r].host_self_us <= rows[r].host_total_us + 1e-9);
  }
  /* FLOPs of the fused linears: 2*B*N*K + bias + ReLU (the last has no ReLU), per step. */
  double want = steps * ((2.0 * B * H1 * IN + 2.0 * B * H1) + (2.0 * B * H2 * H1 + 2.0 * B * H2) + (2.0 * B * OUT * H2 + B * OUT));
  int found = 0;
  for (int r = 0; r < nrows; r++) {
    if (!strcmp(rows[r].name, "linear")) {
      found = 1;
      cr_assert_float_eq(rows[r].flops, want, 1e-9, "linear flops %g, want %g", rows[r].flops, want);
      cr_assert_gt(rows[r].gflops_per_s, 0);
    }
  }
  cr_assert(found);
  char *table = loom_profiler_summary(0);
  cr_assert_not_null(table, "%s", loom_last_error());
  cr_assert(strstr(table, "linear_backward") && strstr(table, "GFLOP/s") && strstr(table, "2 steps"), "%s", table);
  loom_free(table);

  /* The recording can be written again elsewhere, identically parseable. */
  char *again = tmp_path("again");
  cr_assert_eq(loom_profiler_write_trace(again), LOOM_OK, "%s", loom_last_error());
  json_t *r2 = load_trace(again);
  cr_assert_eq(json_array_size(events(r2)), json_array_size(events(root)));
  json_decref(r2);
  unlink(again);
  free(again);

  json_decref(root);
  unlink(path);
  free(path);
  mlp_teardown(&f);
  tk_leak_check();
}

/* After each allocation or free, a marker range; the last counter sample
 * before each marker must equal the allocator's statistics read there. */
Test(prof, memory_counters_match_stats) {
  char *path = tmp_path("mem");
  loom_profiler_options o;
  loom_profiler_options_init(&o);
  o.trace_path = path;
  cr_assert_eq(loom_profiler_start(&o), LOOM_OK, "%s", loom_last_error());
  enum { N = 24 };
  loom_memory_stats want[N];
  char name[N][16];
  loom_tensor *live[N] = {0};
  for (int k = 0; k < N; k++) {
    if (k % 3 == 2) {
      loom_tensor_release(live[k - 1]);  /* free one */
      live[k - 1] = NULL;
    } else {
      int64_t shape[1] = {(int64_t)(100 + 7000 * k)};
      cr_assert_eq(loom_range_push(k == 4 ? "my alloc" : "alloc step"), LOOM_OK);
      live[k] = loom_zeros(1, shape, LOOM_F32, loom_cpu());
      cr_assert_eq(loom_range_pop(), LOOM_OK);
      cr_assert_not_null(live[k]);
    }
    want[k].struct_size = sizeof want[k];
    cr_assert_eq(loom_memory_stats_get(loom_cpu(), &want[k]), LOOM_OK);
    snprintf(name[k], sizeof name[k], "mark %d", k);
    cr_assert_eq(loom_range_push(name[k]), LOOM_OK);
    cr_assert_eq(loom_range_pop(), LOOM_OK);
  }
  cr_assert_eq(loom_profiler_stop(), LOOM_OK, "%s", loom_last_error());
  for (int k = 0; k < N; k++) loom_tensor_release(live[k]);

  json_t *root = load_trace(path);
  int cpu = pid_of(root, "cpu");
  cr_assert(cpu >= 0);
  size_t i;
  json_t *e;
  int64_t last_ts = -1;
  json_array_foreach(events(root), i, e) {
    if (!is(e, "C")) continue;
    cr_assert_gt(ns(e, "ts"), last_ts, "counter samples are not strictly increasing in time");
    last_ts = ns(e, "ts");
  }
  for (int k = 0; k < N; k++) {
    int64_t mark = -1;
    json_array_foreach(events(root), i, e) {
      if (is(e, "X") && !strcmp(sget(e, "name"), name[k])) mark = ns(e, "ts");
    }
    cr_assert(mark >= 0, "marker %s missing", name[k]);
    json_t *best = NULL;
    int64_t best_ts = -1;
    json_array_foreach(events(root), i, e) {
      if (is(e, "C") && iget(e, "pid") == cpu && ns(e, "ts") <= mark && ns(e, "ts") > best_ts) {
        best = e;
        best_ts = ns(e, "ts");
      }
    }
    cr_assert_not_null(best, "no counter sample before %s", name[k]);
    json_t *a = json_object_get(best, "args");
    cr_assert_eq(iget(a, "allocated"), want[k].allocated_bytes[LOOM_MEM_ALL].current, "%s: allocated", name[k]);
    cr_assert_eq(iget(a, "reserved"), want[k].reserved_bytes[LOOM_MEM_ALL].current, "%s: reserved", name[k]);
    cr_assert_eq(iget(a, "active"), want[k].active_bytes[LOOM_MEM_ALL].current, "%s: active", name[k]);
  }
  /* Allocation events name the range they happened in: exactly those inside
   * the "my alloc" range (the tensor and fill's scalar) carry its name. */
  int64_t r0 = -1, r1 = -1;
  json_array_foreach(events(root), i, e) {
    if (is(e, "X") && !strcmp(sget(e, "name"), "my alloc")) {
      r0 = ns(e, "ts");
      r1 = r0 + ns(e, "dur");
    }
  }
  cr_assert(r0 >= 0, "no 'my alloc' range");
  int in_my = 0;
  json_array_foreach(events(root), i, e) {
    if (!is(e, "i") || strcmp(sget(e, "name"), "alloc")) continue;
    int inside = ns(e, "ts") >= r0 && ns(e, "ts") <= r1;
    int named = !strcmp(sget(json_object_get(e, "args"), "site"), "my alloc");
    cr_assert_eq(inside, named, "allocation at %lld: inside the range %d, attributed to it %d", (long long)ns(e, "ts"),
                 inside, named);
    in_my += named;
  }
  cr_assert_geq(in_my, 1);
  json_decref(root);
  unlink(path);
  free(path);
  tk_leak_check();
}

/* More timed ranges than one batch of events: the pool recycles resolved
 * pairs and grows, and every op still gets exactly one slice. */
Test(prof, device_timing_batches) {
  loom_profiler_options o;
  loom_profiler_options_init(&o);
  o.device_timing = LOOM_PROFILER_DEVICE_TIME_ALL;
  const int64_t shape[1] = {16};
  loom_tensor *a = loom_ones(1, shape, LOOM_F32, loom_cpu());
  cr_assert_eq(loom_profiler_start(&o), LOOM_OK);
  const int n = 300;
  for (int k = 0; k < n; k++) {
    loom_scope_begin();
    loom_tensor *c = loom_add(a, a);
    cr_assert_not_null(c);
    loom_scope_end();
  }
  cr_assert_eq(loom_profiler_stop(), LOOM_OK, "%s", loom_last_error());
  loom_profiler_row rows[8];
  int nr = loom_profiler_summary_rows(rows, sizeof rows[0], 8);
  cr_assert_eq(nr, 1, "%d rows", nr);
  cr_assert_str_eq(rows[0].name, "add");
  cr_assert_eq(rows[0].calls, n);
  cr_assert_gt(rows[0].device_total_us, 0);
  cr_assert_eq(rows[0].flops, 16.0 * n);
  cr_assert_eq(loom_profiler_dropped_events(), 0);
  /* With device timing off, no device slices. */
  o.device_timing = LOOM_PROFILER_DEVICE_TIME_OFF;
  cr_assert_eq(loom_profiler_start(&o), LOOM_OK);
  loom_scope_begin();
  cr_assert_not_null(loom_add(a, a));
  loom_scope_end();
  cr_assert_eq(loom_profiler_stop(), LOOM_OK);
  nr = loom_profiler_summary_rows(rows, sizeof rows[0], 8);
  cr_assert_eq(nr, 1);
  cr_assert_eq(rows[0].device_total_us, 0);
  loom_tensor_release(a);
  tk_leak_check();
}

Test(prof, loader_threads_get_tracks) {
  enum { NS = 64 };
  float x[NS * 4];
  int32_t y[NS];
  for (int k = 0; k < NS * 4; k++) x[k] = (float)k;
  for (int k = 0; k < NS; k++) y[k] = k % 3;
  const int64_t xs[1] = {4};
  loom_dataset *ds = loom_dataset_memory(x, LOOM_F32, 1, xs, y, LOOM_I32, NS, true);
  cr_assert_not_null(ds);
  loom_loader_options lo;
  loom_loader_options_init(&lo);
  lo.batch_size = 8;
  lo.workers = 2;
  char *path = tmp_path("loader");
  loom_profiler_options o;
  loom_profiler_options_init(&o);
  o.trace_path = path;
  cr_assert_eq(loom_profiler_start(&o), LOOM_OK);
  loom_loader *l = loom_loader_new(ds, &lo);
  cr_assert_not_null(l, "%s", loom_last_error());
  int batches = 0;
  for (;;) {
    loom_scope_begin();
    loom_tensor *bx, *by;
    cr_assert_eq(loom_loader_next(l, &bx, &by), LOOM_OK, "%s", loom_last_error());
    loom_scope_end();
    if (!bx) break;
    batches++;
  }
  loom_loader_free(l);  /* joins the workers: their buffers are complete */
  cr_assert_eq(loom_profiler_stop(), LOOM_OK);
  loom_dataset_release(ds);
  cr_assert_eq(batches, NS / 8);
  json_t *root = load_trace(path);
  assert_balanced(root);
  int host = pid_of(root, "loom host");
  int w0 = tid_of(root, host, "loader worker 0"), w1 = tid_of(root, host, "loader worker 1");
  int fills = 0, waits = 0;
  size_t i;
  json_t *e;
  json_array_foreach(events(root), i, e) {
    if (!is(e, "X")) continue;
    if (!strcmp(sget(e, "name"), "loader fill batch")) {
      cr_assert(iget(e, "tid") == w0 || iget(e, "tid") == w1, "a fill ran outside the worker threads");
      fills++;
    }
    if (!strcmp(sget(e, "name"), "loader wait")) {
      cr_assert_eq(iget(e, "tid"), tid_of(root, host, "main thread"));
      waits++;
    }
  }
  cr_assert(w0 >= 0 || w1 >= 0, "no loader worker tracks");
  cr_assert_geq(fills, batches);  /* workers may prefetch the next epoch */
  cr_assert_eq(waits, batches);
  json_decref(root);
  unlink(path);
  free(path);
  tk_leak_check();
}

/* With allocation history on, live blocks in the memory snapshot name the op
 * that allocated them and history entries carry timestamps (no profiler). */
Test(prof, snapshot_names_allocation_sites) {
  cr_assert_eq(loom_alloc_configure("history:64"), LOOM_OK, "%s", loom_last_error());
  const int64_t shape[1] = {1000};
  loom_tensor *a = loom_ones(1, shape, LOOM_F32, loom_cpu());
  loom_tensor *c = loom_mul(a, a);
  cr_assert_eq(loom_range_push("user block"), LOOM_OK);
  loom_tensor *u = loom_zeros(1, shape, LOOM_F32, loom_cpu());
  cr_assert_eq(loom_range_pop(), LOOM_OK);
  cr_assert(c && u);
  char *snap = loom_memory_snapshot_json(loom_cpu());
  cr_assert_not_null(snap, "%s", loom_last_error());
  json_error_t err;
  json_t *root = json_loads(snap, 0, &err);
  cr_assert_not_null(root, "snapshot is not JSON: %s", err.text);
  int mul = 0, user = 0;
  size_t i, j;
  json_t *sg, *b;
  json_array_foreach(json_object_get(root, "segments"), i, sg) {
    json_array_foreach(json_object_get(sg, "blocks"), j, b) {
      const char *state = sget(b, "state");
      json_t *site = json_object_get(b, "site");
      if (!strcmp(state, "inactive")) cr_assert(json_is_null(site), "a free block has a site");
      if (json_is_string(site) && !strcmp(json_string_value(site), "mul")) mul++;
      if (json_is_string(site) && !strcmp(json_string_value(site), "user block")) user++;
    }
  }
  cr_assert_eq(mul, 1, "%d live blocks from mul", mul);
  cr_assert_eq(user, 1, "%d live blocks from the user range", user);
  int64_t prev = 0;
  json_array_foreach(json_object_get(root, "history"), i, b) {
    int64_t ts = iget(b, "ts_ns");
    cr_assert_gt(ts, 0);
    cr_assert_geq(ts, prev, "history timestamps go backwards");
    prev = ts;
  }
  cr_assert_gt(json_array_size(json_object_get(root, "history")), 0);
  json_decref(root);
  loom_free(snap);
  loom_tensor_release(a);
  loom_tensor_release(c);
  loom_tensor_release(u);
  cr_assert_eq(loom_alloc_configure("history:0"), LOOM_OK);
  tk_leak_check();
}

Test(prof, user_ranges_unclosed_and_clipped) {
  char *path = tmp_path("ranges");
  cr_assert_eq(loom_range_push("outer"), LOOM_OK);  /* before start: clipped to the start */
  loom_profiler_options o;
  loom_profiler_options_init(&o);
  o.trace_path = path;
  cr_assert_eq(loom_profiler_start(&o), LOOM_OK);
  cr_assert_eq(loom_range_push("inner"), LOOM_OK);
  cr_assert_eq(loom_range_pop(), LOOM_OK);
  cr_assert_eq(loom_range_push("left open"), LOOM_OK);
  cr_assert_eq(loom_profiler_stop(), LOOM_OK);
  json_t *root = load_trace(path);
  assert_balanced(root);
  size_t i;
  json_t *e;
  int seen = 0;
  json_array_foreach(events(root), i, e) {
    if (!is(e, "X")) continue;
    const char *n = sget(e, "name");
    json_t *unclosed = json_object_get(json_object_get(e, "args"), "unclosed");
    if (!strcmp(n, "inner")) {
      cr_assert(!json_is_true(unclosed));
      seen |= 1;
    }
    if (!strcmp(n, "outer")) {
      cr_assert(json_is_true(unclosed));
      cr_assert_geq(ns(e, "ts"), 0, "outer was not clipped to the start");
      seen |= 2;
    }
    if (!strcmp(n, "left open")) {
      cr_assert(json_is_true(unclosed));
      seen |= 4;
    }
  }
  cr_assert_eq(seen, 7);
  cr_assert_eq(loom_range_pop(), LOOM_OK);
  cr_assert_eq(loom_range_pop(), LOOM_OK);
  json_decref(root);
  unlink(path);
  free(path);
  tk_leak_check();
}

Test(prof, max_events_drops_and_stays_valid) {
  char *path = tmp_path("drop");
  loom_profiler_options o;
  loom_profiler_options_init(&o);
  o.trace_path = path;
  o.max_events = 10;
  const int64_t shape[1] = {8};
  loom_tensor *a = loom_ones(1, shape, LOOM_F32, loom_cpu());
  cr_assert_eq(loom_profiler_start(&o), LOOM_OK);
  for (int k = 0; k < 50; k++) {
    loom_scope_begin();
    cr_assert_not_null(loom_neg(a));
    loom_scope_end();
  }
  cr_assert_eq(loom_profiler_stop(), LOOM_OK);
  cr_assert_gt(loom_profiler_dropped_events(), 0);
  json_t *root = load_trace(path);
  cr_assert_gt(iget(json_object_get(root, "otherData"), "dropped_events"), 0);
  size_t n = 0, i;
  json_t *e;
  json_array_foreach(events(root), i, e) {
    if (is(e, "X") || is(e, "i")) n++;
  }
  cr_assert_eq(n, 10, "%zu events kept, max_events 10", n);
  json_decref(root);
  unlink(path);
  free(path);
  loom_tensor_release(a);
  tk_leak_check();
}

Test(prof, errors) {
  tk_assert_error(loom_profiler_stop(), LOOM_ERR_STATE, "not running");
  cr_assert_null(loom_profiler_summary(0));
  tk_assert_error(loom_last_status(), LOOM_ERR_STATE, "nothing recorded");
  tk_assert_error(loom_profiler_write_trace("/tmp/x.json"), LOOM_ERR_STATE, "nothing recorded");
  loom_profiler_options o;
  loom_profiler_options_init(&o);
  o.trace_path = "/nonexistent-dir/trace.json";
  tk_assert_error(loom_profiler_start(&o), LOOM_ERR_IO, "/nonexistent-dir/trace.json", "cannot create");
  cr_assert(!loom_profiler_is_running());
  loom_profiler_options bad;
  memset(&bad, 0, sizeof bad);
  tk_assert_error(loom_profiler_start(&bad), LOOM_ERR_INVALID_ARG, "struct_size", "loom_profiler_options_init");
  loom_profiler_options_init(&o);
  o.device_timing = 7;
  tk_assert_error(loom_profiler_start(&o), LOOM_ERR_INVALID_ARG, "device_timing");
  loom_profiler_options_init(&o);
  o.max_events = -1;
  tk_assert_error(loom_profiler_start(&o), LOOM_ERR_INVALID_ARG, "max_events");
  cr_assert_eq(loom_profiler_start(NULL), LOOM_OK);
  tk_assert_error(loom_profiler_start(NULL), LOOM_ERR_STATE, "already running");
  cr_assert_eq(loom_profiler_stop(), LOOM_OK);
  tk_assert_error(loom_profiler_write_trace("/nonexistent-dir/t.json"), LOOM_ERR_IO, "cannot create");
  tk_assert_error(loom_profiler_write_trace(NULL), LOOM_ERR_INVALID_ARG, "NULL");
  cr_assert_eq(loom_profiler_summary_rows(NULL, 0, 4), -1);
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "row_size");
  cr_assert_eq(loom_profiler_summary_rows(NULL, 0, 0), 0);  /* only the count: that recording ran no op */

  tk_assert_error(loom_range_pop(), LOOM_ERR_STATE, "no open range");
  tk_assert_error(loom_range_push(NULL), LOOM_ERR_INVALID_ARG, "NULL");
  for (int k = 0; k < 64; k++) cr_assert_eq(loom_range_push("deep"), LOOM_OK);
  tk_assert_error(loom_range_push("deep"), LOOM_ERR_STATE, "64", "pop");
  for (int k = 0; k < 64; k++) cr_assert_eq(loom_range_pop(), LOOM_OK);
  tk_assert_error(loom_range_pop(), LOOM_ERR_STATE, "no open range");
#ifndef LOOM_HAVE_CUDA
  tk_assert_error(loom_nvtx_set_enabled(true), LOOM_ERR_UNSUPPORTED, "NVTX");
#endif
  cr_assert_eq(loom_nvtx_set_enabled(false), LOOM_OK);
  cr_assert(!loom_nvtx_enabled());
  tk_leak_check();
}

/* Row structs of an older, smaller layout are filled as far as they go. */
Test(prof, summary_rows_older_struct) {
  const int64_t shape[1] = {4};
  loom_tensor *a = loom_ones(1, shape, LOOM_F32, loom_cpu());
  cr_assert_eq(loom_profiler_start(NULL), LOOM_OK);
  loom_tensor *b = loom_exp(a);
  cr_assert_eq(loom_profiler_stop(), LOOM_OK);
  size_t small = offsetof(loom_profiler_row, host_total_us);
  unsigned char buf[2 * sizeof(loom_profiler_row)];
  memset(buf, 0xAB, sizeof buf);
  cr_assert_eq(loom_profiler_summary_rows((loom_profiler_row *)buf, small, 1), 1);
  loom_profiler_row r;
  memcpy(&r, buf, small);
  cr_assert_str_eq(r.name, "exp");
  cr_assert_eq(r.calls, 1);
  cr_assert_eq(buf[small], 0xAB, "wrote past the caller's row size");
  loom_tensor_release(a);
  loom_tensor_release(b);
  tk_leak_check();
}

/* The convolution's GFLOP/s column counts 2 * products per output (+ bias)
 * forward, and the same products for each of dX and dW (+ db) backward. */
Test(prof, conv2d_flops) {
  const int64_t xs[4] = {2, 3, 8, 8}, ws[4] = {4, 3, 3, 3}, bs[1] = {4};
  loom_manual_seed(7);
  loom_tensor *x = loom_rand(4, xs, LOOM_F32, loom_cpu()), *w = loom_rand(4, ws, LOOM_F32, loom_cpu());
  loom_tensor *b = loom_rand(1, bs, LOOM_F32, loom_cpu());
  cr_assert(x && w && b);
  cr_assert_eq(loom_set_requires_grad(x, true), LOOM_OK);
  cr_assert_eq(loom_set_requires_grad(w, true), LOOM_OK);
  cr_assert_eq(loom_set_requires_grad(b, true), LOOM_OK);
  loom_conv2d_options co;
  loom_conv2d_options_init(&co);
  co.padding[0] = co.padding[1] = 1;
  cr_assert_eq(loom_profiler_start(NULL), LOOM_OK, "%s", loom_last_error());
  loom_scope_begin();
  loom_tensor *y = loom_conv2d(x, w, b, &co);  /* [2, 4, 8, 8] */
  cr_assert_not_null(y, "%s", loom_last_error());
  cr_assert_eq(loom_backward(loom_sum_all(y)), LOOM_OK, "%s", loom_last_error());
  loom_scope_end();
  cr_assert_eq(loom_profiler_stop(), LOOM_OK);
  const double outs = 2 * 4 * 8 * 8, taps = 3 * 3 * 3;
  loom_profiler_row rows[64];
  int n = loom_profiler_summary_rows(rows, sizeof rows[0], 64);
  cr_assert(n > 0 && n <= 64, "%d rows", n);
  int seen = 0;
  for (int r = 0; r < n; r++) {
    if (!strcmp(rows[r].name, "conv2d")) {
      cr_assert_float_eq(rows[r].flops, 2 * outs * taps + outs, 1e-9, "conv2d: %g flops", rows[r].flops);
      seen++;
    } else if (!strcmp(rows[r].name, "conv2d_backward")) {
      cr_assert_float_eq(rows[r].flops, 2 * (2 * outs * taps) + outs, 1e-9, "conv2d_backward: %g flops", rows[r].flops);
      seen++;
    }
  }
  cr_assert_eq(seen, 2, "conv2d and conv2d_backward rows: %d of 2", seen);
  loom_tensor_release(x);
  loom_tensor_release(w);
  loom_tensor_release(b);
  tk_leak_check();
}

/* CUDA-event device time (issue 22): five 1024x1024 matmuls on cuda:0 get a
 * device time from the events recorded around each launch, and it is
 * positive and no longer than the host wall time from before the first
 * launch to after the device synchronize (device work cannot take longer
 * than the interval that contains it). */
static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

Test(prof_cuda, cuda_event_device_time_is_positive_and_within_the_wall_time) {
  tk_require_device(loom_cuda(0));
  loom_device dev = loom_cuda(0);
  const int64_t s[2] = {1024, 1024};
  loom_manual_seed(5);
  loom_tensor *a = loom_randn(2, s, LOOM_F32, dev), *b = loom_randn(2, s, LOOM_F32, dev);
  cr_assert(a && b, "%s", loom_last_error());
  loom_scope_begin();
  cr_assert_not_null(loom_matmul(a, b), "%s", loom_last_error());  /* cuBLAS handles and plans made outside the timing */
  loom_scope_end();
  cr_assert_eq(loom_device_synchronize(dev), LOOM_OK, "%s", loom_last_error());
  loom_profiler_options o;
  loom_profiler_options_init(&o);
  o.device_timing = LOOM_PROFILER_DEVICE_TIME_AUTO;
  o.record_memory = false;
  cr_assert_eq(loom_profiler_start(&o), LOOM_OK, "%s", loom_last_error());
  double t0 = now_us();
  loom_scope_begin();
  for (int k = 0; k < 5; k++) cr_assert_not_null(loom_matmul(a, b), "%s", loom_last_error());
  loom_scope_end();
  cr_assert_eq(loom_device_synchronize(dev), LOOM_OK, "%s", loom_last_error());
  double wall = now_us() - t0;
  cr_assert_eq(loom_profiler_stop(), LOOM_OK, "%s", loom_last_error());
  loom_profiler_row rows[16];
  int n = loom_profiler_summary_rows(rows, sizeof rows[0], 16);
  cr_assert(n > 0 && n <= 16, "%d rows", n);
  int seen = 0;
  for (int r = 0; r < n; r++) {
    if (strcmp(rows[r].name, "matmul")) continue;
    seen = 1;
    cr_assert_eq(rows[r].calls, 5);
    cr_assert_gt(rows[r].device_total_us, 0, "no device time from the CUDA events");
    cr_assert_leq(rows[r].device_total_us, wall, "device time %.1f us exceeds the %.1f us wall time around it",
                  rows[r].device_total_us, wall);
  }
  cr_assert(seen, "no matmul row");
  cr_assert_eq(loom_profiler_dropped_events(), 0);
  loom_tensor_release(a);
  loom_tensor_release(b);
  tk_leak_check();
}
