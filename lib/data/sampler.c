/* sampler.c — which samples a rank sees in an epoch, and in what order.
 *
 * The permutation of an epoch is a Fisher–Yates shuffle driven by a
 * splitmix64 stream seeded from (seed, epoch), so every rank computes the same
 * permutation without talking to the others. Sharding then takes every
 * world-th position (as PyTorch's DistributedSampler does): shards have equal
 * sizes, either by dropping the tail that does not divide evenly (drop_last)
 * or by wrapping around to the permutation's start to pad it; a padded
 * sample never lands twice in the same shard (when n >= world). */
#include "data/data_internal.h"

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t loom_data_mix(uint64_t a, uint64_t b) {
  uint64_t s = a ^ (b * 0xD6E8FEB86659FD93ull);
  uint64_t r = splitmix64(&s);
  return r ^ splitmix64(&s);
}

/* Uniform in [0, bound) without modulo bias worth caring about (the 128-bit
 * multiply maps 64 random bits onto the range; bias < bound / 2^64). */
static int64_t below(uint64_t *state, int64_t bound) {
  return (int64_t)(((__uint128_t)splitmix64(state) * (uint64_t)bound) >> 64);
}

int64_t loom_data_shard_order(int64_t n, bool shuffle, uint64_t seed, int64_t epoch, int rank, int world,
                              bool drop_last, int64_t *order, int64_t *perm) {
  if (n <= 0 || world <= 0) return 0;
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  if (shuffle) {
    uint64_t st = loom_data_mix(seed ^ 0x53485546464C45ull /* "SHUFFLE" */, (uint64_t)epoch);
    for (int64_t i = n - 1; i > 0; i--) {
      int64_t j = below(&st, i + 1);
      int64_t t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
  }
  int64_t per = drop_last ? n / world : (n + world - 1) / world;
  for (int64_t k = 0; k < per; k++) {
    int64_t pos = (int64_t)rank + k * world;  /* < per*world <= n + world - 1 */
    order[k] = perm[pos % n];
  }
  return per;
}
