/* test_cnn_math.c — the host side of arithmetic that lib/ops/cnn_math.h
 * shares with the CUDA kernels, run where CI runs (no GPU): here the channel
 * walk of batch norm's channels-last apply and dx passes, against the
 * modulo it replaces, for every thread of small grids and sampled threads
 * of the grids the kernels launch. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "ops/cnn_math.h"

/* One thread of a grid-stride loop over nv vectors of V elements: the
 * walked channel is (i·V) mod C at every step. Returns the steps taken. */
static int64_t walk_thread(int64_t i0, int64_t S, int64_t V, int64_t C, int64_t nv) {
  loom_bn_walk w = loom_bn_walk_start(i0, S, V, C);
  int64_t steps = 0;
  for (int64_t i = i0; i < nv; i += S, loom_bn_walk_next(&w), steps++) {
    cr_assert_eq(w.c, (i * V) % C, "C=%lld V=%lld S=%lld: vector %lld walked to channel %lld, not %lld", (long long)C,
                 (long long)V, (long long)S, (long long)i, (long long)w.c, (long long)((i * V) % C));
    cr_assert(w.c + V <= C, "a vector crosses a row end");
  }
  return steps;
}

Test(cnn_math, bn_channel_walk_matches_the_modulo) {
  static const int64_t Cs[] = {1, 3, 8, 16, 24, 64, 96, 256, 1000, 2048};
  static const int64_t Vs[] = {1, 4, 8};
  int64_t total = 0;
  for (size_t a = 0; a < sizeof Cs / sizeof Cs[0]; a++)
    for (size_t b = 0; b < sizeof Vs / sizeof Vs[0]; b++) {
      const int64_t C = Cs[a], V = Vs[b];
      if (C % V) continue;
      /* Small grids, every thread; rows so that every thread steps often. */
      for (int64_t S = 1; S <= 300; S += 37) {
        const int64_t nv = (C / V) * 97;
        for (int64_t i0 = 0; i0 < S; i0++) total += walk_thread(i0, S, V, C, nv);
      }
      /* The kernels' grids: 256 threads times up to 65536 blocks, over a
         ResNet-50 activation (256 x 56 x 56 rows). */
      const int64_t S = 256 * 65536, nv = 256 * 56 * 56 * (C / V);
      for (int64_t i0 = 0; i0 < S; i0 += 999983) total += walk_thread(i0, S, V, C, nv);
      total += walk_thread(S - 1, S, V, C, nv);
    }
  cr_assert_gt(total, 1000000, "the walks took %lld steps", (long long)total);
}
