/* fuzz_mnist_flags.c — libFuzzer target for loom-mnist's command-line parser
 * (parse_args in examples/mnist/main.c, compiled in here with its main
 * renamed; the harness around it is flags_harness_pre.h / _post.h). */
#define LOOM_FUZZ_PROGRAM "loom-mnist"
#include "flags_harness_pre.h"
#define main loom_fuzz_mnist_main
#include "../../examples/mnist/main.c"
#include "flags_harness_post.h"
