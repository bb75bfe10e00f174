/* test_prof_nvtx.c — loom's ranges reach an NVTX tool. ctest runs this with
 * NVTX_INJECTION64_PATH pointing at tests/nvtx/nvtx_inject.c (a minimal
 * tool, as nsys is one), so it checks on the CPU what Nsight Systems would
 * receive: the "loom" domain, named categories, and balanced, nested pushes
 * and pops for ops, backward, the optimizer and user ranges. Skips visibly
 * in builds without NVTX (no CUDA toolkit). */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "loom/loom.h"
#include "support/testkit.h"

#define MAX_LOG 4096

#ifdef NVTX_INJECT_PATH
/* The tool's log so far: one line per NVTX call it received. */
static int read_log(const char *(*log)[MAX_LOG]) {
  void *h = dlopen(NVTX_INJECT_PATH, RTLD_NOW | RTLD_NOLOAD);
  cr_assert_not_null(h, "the NVTX tool %s was not loaded by NVTX", NVTX_INJECT_PATH);
  int (*fn)(const char *(*)[MAX_LOG]) = (int (*)(const char *(*)[MAX_LOG]))dlsym(h, "loom_test_nvtx_log");
  cr_assert_not_null(fn);
  int n = fn(log);
  dlclose(h);
  return n;
}

static int find(const char *(*log)[MAX_LOG], int n, const char *entry, int from) {
  for (int i = from; i < n; i++)
    if (!strcmp((*log)[i], entry)) return i;
  return -1;
}
#endif

Test(prof_nvtx, ranges_reach_the_tool) {
#ifndef NVTX_INJECT_PATH
  cr_skip_test("this build has no NVTX (built without the CUDA toolkit)");
#else
  cr_assert(getenv("NVTX_INJECTION64_PATH"), "run by ctest, which sets NVTX_INJECTION64_PATH");
  /* A tool is attached: loom turned NVTX on by itself at load. */
  cr_assert(loom_nvtx_enabled(), "NVTX_INJECTION64_PATH is set but loom's NVTX ranges are off");
  int64_t hidden[1] = {8};
  loom_module *mlp = loom_mlp_new(4, 1, hidden, 3, loom_cpu());
  loom_tensor *params[4];
  for (int i = 0; i < 4; i++) params[i] = loom_module_param(mlp, i);
  loom_optimizer *opt = loom_adamw_new(params, 4, NULL);
  int64_t xs[2] = {2, 4}, ys[1] = {2}, labels[2] = {0, 2};
  cr_assert_eq(loom_range_push("my step"), LOOM_OK);
  loom_scope_begin();
  loom_tensor *x = loom_randn(2, xs, LOOM_F32, loom_cpu());
  loom_tensor *y = loom_from_host(labels, 1, ys, LOOM_I64, loom_cpu());
  loom_tensor *loss = loom_cross_entropy(loom_module_forward(mlp, x), y);
  cr_assert_eq(loom_backward(loss), LOOM_OK);
  cr_assert_eq(loom_optimizer_step(opt), LOOM_OK);
  loom_scope_end();
  cr_assert_eq(loom_range_pop(), LOOM_OK);
  /* Off: nothing more reaches the tool. */
  const char *(*log)[MAX_LOG] = malloc(sizeof *log);
  int before = read_log(log);
  cr_assert_eq(loom_nvtx_set_enabled(false), LOOM_OK);
  loom_scope_begin();
  cr_assert_not_null(loom_exp(loom_randn(2, xs, LOOM_F32, loom_cpu())));
  loom_scope_end();
  cr_assert_eq(read_log(log), before, "NVTX ranges after loom_nvtx_set_enabled(false)");

  int n = before;
  cr_assert_geq(find(log, n, "domain loom", 0), 0, "no 'loom' domain");
  cr_assert_geq(find(log, n, "category loom op=1", 0), 0);
  cr_assert_geq(find(log, n, "category loom backward=2", 0), 0);
  int s = find(log, n, "push loom my step cat=7", 0);
  cr_assert_geq(s, 0, "user range missing");
  int lin = find(log, n, "push loom linear cat=1", s);
  int ce = find(log, n, "push loom cross_entropy cat=1", lin);
  int bw = find(log, n, "push loom backward cat=2", ce);
  int lbw = find(log, n, "push loom linear (backward) cat=2", bw);
  int lbwop = find(log, n, "push loom linear_backward cat=1", lbw);
  int adam = find(log, n, "push loom adamw step cat=3", lbwop);
  cr_assert(lin > s && ce > lin && bw > ce && lbw > bw && lbwop > lbw && adam > lbwop,
            "ranges out of order: %d %d %d %d %d %d %d", s, lin, ce, bw, lbw, lbwop, adam);
  /* Balanced and nested: depth never negative, zero at the end. */
  int depth = 0;
  for (int i = 0; i < n; i++) {
    if (!strncmp((*log)[i], "push ", 5)) depth++;
    if (!strncmp((*log)[i], "pop ", 4)) depth--;
    cr_assert_geq(depth, 0, "pop without push at %d", i);
  }
  cr_assert_eq(depth, 0, "%d ranges left open", depth);
  free((void *)log);
  loom_optimizer_free(opt);
  loom_module_free(mlp);
  tk_leak_check();
#endif
}
