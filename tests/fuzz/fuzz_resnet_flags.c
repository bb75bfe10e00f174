/* fuzz_resnet_flags.c — libFuzzer target for loom-resnet's command-line parser
 * (parse_args in examples/resnet/main.c, compiled in here with its main
 * renamed): the input is argv, NUL-separated. Any argv must be accepted or
 * refused with a message (return 0), never crash; what the parser prints
 * goes to /dev/null. --help exits by design and is skipped. */
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
#define main loom_fuzz_resnet_main
#define stderr fuzz_quiet()
#define stdout fuzz_quiet()
#include "../../examples/resnet/main.c"
#undef main
#undef stderr
#undef stdout

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096) return 0;
  char *buf = malloc(size + 1);
  memcpy(buf, data, size);
  buf[size] = '\0';
  char *argv[130];
  int argc = 0;
  argv[argc++] = "loom-resnet";
  for (char *p = buf; p < buf + size && argc < 129; p += strlen(p) + 1) {
    if (!strcmp(p, "-h") || !strcmp(p, "--help")) goto out;
    argv[argc++] = p;
  }
  argv[argc] = NULL;
  options o;
  (void)parse_args(argc, argv, &o);
out:
  free(buf);
  return 0;
}
