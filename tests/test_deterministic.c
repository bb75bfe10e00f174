/* test_deterministic.c — deterministic mode's switch (loom_set_deterministic,
 * loom/ops.h) and its environment variable LOOM_DETERMINISTIC, on the CPU:
 * off by default, the API sets and reads it, the variable has the same
 * effect, and a value that is not 1/0/on/off/true/false makes every op fail
 * naming it until the API replaces it (the project's rule for variables).
 * What the mode changes on the GPU (cuDNN engines marked non-deterministic
 * filtered out) is conv2d_cuda/deterministic_mode_repeats_bit_for_bit in
 * test_ops_conv.c. Each Test runs in its own process, so .init's setenv comes
 * before loom's first read. */
#include <stdlib.h>

#include "support/testkit.h"

static loom_tensor *small_sum(void) {
  int64_t n = 4;
  return loom_add(loom_ones(1, &n, LOOM_F32, loom_cpu()), loom_ones(1, &n, LOOM_F32, loom_cpu()));
}

Test(deterministic, off_by_default_and_the_api_sets_it) {
  cr_assert_not(loom_get_deterministic(), "on by default");
  loom_set_deterministic(true);
  cr_assert(loom_get_deterministic());
  loom_set_deterministic(false);
  cr_assert_not(loom_get_deterministic());
}

static void env_on(void) { setenv("LOOM_DETERMINISTIC", "on", 1); }
Test(deterministic, the_variable_turns_it_on, .init = env_on) {
  cr_assert(loom_get_deterministic(), "LOOM_DETERMINISTIC=on did not turn it on");
  loom_set_deterministic(false);  /* the API wins over the variable */
  cr_assert_not(loom_get_deterministic());
}

static void env_bad(void) { setenv("LOOM_DETERMINISTIC", "sometimes", 1); }
Test(deterministic, a_bad_value_fails_every_op_until_the_api_replaces_it, .init = env_bad) {
  loom_scope_begin();
  tk_assert_fails(small_sum(), LOOM_ERR_INVALID_ARG, "LOOM_DETERMINISTIC='sometimes'", "loom_set_deterministic");
  loom_set_deterministic(false);
  cr_assert_not_null(small_sum(), "still failing after loom_set_deterministic: %s", loom_last_error());
  loom_scope_end();
  tk_teardown();
}
