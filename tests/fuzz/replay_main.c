/* replay_main.c — runs a libFuzzer target over files given on the command
 * line (a corpus), for builds without libFuzzer: ctest uses it so every
 * build exercises the targets on their seeds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  int ran = 0;
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (!f) { fprintf(stderr, "replay: cannot open %s\n", argv[i]); return 1; }
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0, r;
    unsigned char chunk[65536];
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) {
      if (n + r > cap) {
        cap = (n + r) * 2;
        unsigned char *nb = realloc(buf, cap);
        if (!nb) { free(buf); fclose(f); return 1; }
        buf = nb;
      }
      for (size_t k = 0; k < r; k++) buf[n + k] = chunk[k];
      n += r;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    ran++;
  }
  printf("replayed %d inputs\n", ran);
  return ran > 0 ? 0 : 1;
}
