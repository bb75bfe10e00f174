/* rng_replay.h (internal) — replaying the global generator on one thread,
 * for activation checkpointing: the recompute in backward must draw the
 * same numbers (dropout masks) as the forward pass did, without moving the
 * process-wide generator that other code draws from. Implemented in rng.c. */
#ifndef LOOM_CORE_RNG_REPLAY_H
#define LOOM_CORE_RNG_REPLAY_H

#include <stdint.h>

typedef struct loom_rng_replay {
  int active;
  uint64_t seed, offset;
} loom_rng_replay;

/* The (seed, offset) the next draw on this thread would use. */
void loom_rng_global_peek(uint64_t *seed, uint64_t *offset);
/* From here on this thread's draws (loom_rng_global_reserve) start at
 * (seed, offset) and advance a private copy; *saved restores the previous
 * state (replays nest). */
void loom_rng_replay_begin(uint64_t seed, uint64_t offset, loom_rng_replay *saved);
void loom_rng_replay_end(const loom_rng_replay *saved);

#endif
