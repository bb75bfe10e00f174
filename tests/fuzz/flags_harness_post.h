/* flags_harness_post.h — the second half of the trainers' flag-parser fuzz
 * targets: after the trainer's main.c (whose main the target renamed), the
 * input is argv, NUL-separated, handed to its parse_args. Any argv must be
 * accepted or refused with a message, never crash; --help exits by design
 * and is skipped. The target defines LOOM_FUZZ_PROGRAM (argv[0]). */
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
  argv[argc++] = LOOM_FUZZ_PROGRAM;
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
