/* cli.c — the trainers' shared command-line and progress helpers (cli.h). */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double cli_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_parse_i64(const char *prog, const char *flag, const char *s, int64_t lo, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo) {
    fprintf(stderr, "%s: %s expects an integer >= %lld, got '%s'\n", prog, flag, (long long)lo, s);
    return 0;
  }
  *out = v;
  return 1;
}

void cli_progress(cli_progress_style st, int tty, int quiet, int epoch, int epochs, int64_t step, int64_t steps,
                  double loss, double sps) {
  if (quiet) return;
  if (tty) {
    int width = 30, filled = steps ? (int)(width * step / steps) : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
    bar[width] = '\0';
    printf("\repoch %d/%d [%s] %lld/%lld loss %.4f %*.*f samples/s", epoch, epochs, bar, (long long)step,
           (long long)steps, loss, st.width, st.decimals, sps);
  } else if (step % st.every == 0 || step == steps) {
    printf("epoch %d/%d step %lld/%lld loss %.4f samples/s %.*f\n", epoch, epochs, (long long)step, (long long)steps,
           loss, st.decimals, sps);
  }
  fflush(stdout);
}
