/* flags_harness_pre.h — the first half of the trainers' flag-parser fuzz
 * targets (fuzz_*_flags.c): included before the trainer's main.c, it sends
 * what the parser prints to /dev/null. flags_harness_post.h follows it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FILE *fuzz_quiet(void) {
  static FILE *null;
  if (!null) null = fopen("/dev/null", "w");
  return null;
}

#undef stderr
#undef stdout
#define stderr fuzz_quiet()
#define stdout fuzz_quiet()
