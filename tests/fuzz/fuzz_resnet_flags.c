/* fuzz_resnet_flags.c — libFuzzer target for loom-resnet's command-line parser
 * (parse_args in examples/resnet/main.c, compiled in here with its main
 * renamed; the harness around it is flags_harness_pre.h / _post.h). */
#define LOOM_FUZZ_PROGRAM "loom-resnet"
#include "flags_harness_pre.h"
#define main loom_fuzz_resnet_main
#include "../../examples/resnet/main.c"
#include "flags_harness_post.h"
