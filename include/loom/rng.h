/* rng.h — counter-based random numbers (Philox4x32-10).
 *
 * The same (seed, offset) yields the same numbers on every device and with
 * any number of threads: element i of a fill at `offset` is computed from
 * counter block offset + i/4, lane i%4. A generator is a (seed, offset) pair;
 * each fill advances offset by ceil(n/4).
 *
 * Counter block b is Philox4x32-10 with ctr = (b low 32, b high 32, 0, 0)
 * and key = (seed low 32, seed high 32); x is the 32-bit word of lane i%4.
 *
 * uniform: u = ((x >> 9) + 0.5) * 2^-23, exact in float, so u is in
 *   [2^-24, 1 - 2^-24] — never 0 or 1. (24 bits plus a half step would not
 *   fit a float's significand: the top value would round to 1.) U(lo, hi) is
 *   lo + (hi - lo) u evaluated in double and rounded once to float, so it is
 *   in [lo, hi] (hi itself can appear only through that final rounding).
 * normal: Box–Muller on lanes (0,1) and (2,3) of the same block:
 *   r = sqrt(-2 ln u_a), z_a = r cos(2 pi u_b), z_b = r sin(2 pi u_b),
 *   evaluated in double; mean + std z is rounded once to float.
 * Uniforms are bit-identical on every device; normals are too unless two
 *   libms' double results straddle a float rounding boundary (vanishingly
 *   rare).
 *
 * loom_philox4x32_10 and the fill functions are thread-safe; the global
 * generator (loom_manual_seed / loom_rng_global_*) is guarded by a mutex. */
#ifndef LOOM_RNG_H
#define LOOM_RNG_H

#include <stddef.h>
#include <stdint.h>
#include "export.h"

LOOM_EXTERN_C_BEGIN

/* One Philox4x32-10 block: out = philox(ctr, key). */
LOOM_API void loom_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Fill out[0..n) with U(lo, hi) / N(mean, std) for (seed, offset). A fill
 * at offset + k equals elements 4k.. of a fill at offset. out == NULL with
 * n > 0 sets LOOM_ERR_INVALID_ARG (see loom_last_error) and writes nothing. */
LOOM_API void loom_rng_fill_uniform(uint64_t seed, uint64_t offset, float *out, size_t n,
                                    float lo, float hi);
LOOM_API void loom_rng_fill_normal(uint64_t seed, uint64_t offset, float *out, size_t n,
                                   float mean, float std);

/* The process-wide default generator used by loom_rand / loom_randn / init.
 * It starts at (LOOM_RNG_DEFAULT_SEED, offset 0) in every process, so runs
 * are reproducible without an explicit seed. loom_manual_seed sets the seed
 * and resets the offset to 0. */
#define LOOM_RNG_DEFAULT_SEED UINT64_C(0x10011)
LOOM_API void loom_manual_seed(uint64_t seed);
/* Reserve ceil(n/4) counter blocks: returns the seed and the offset to use. */
LOOM_API void loom_rng_global_reserve(size_t n, uint64_t *seed, uint64_t *offset);
/* The global generator's state (seed, next offset), for checkpoints:
 * set_state(get_state()) makes the following draws repeat exactly. */
LOOM_API void loom_rng_get_state(uint64_t *seed, uint64_t *offset);
LOOM_API void loom_rng_set_state(uint64_t seed, uint64_t offset);

LOOM_EXTERN_C_END
#endif
