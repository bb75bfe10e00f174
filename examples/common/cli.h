/* cli.h — what loom's trainers share on the command line and the terminal:
 * a monotonic clock, integer flag parsing with one message style, and the
 * per-step progress line (a bar on a terminal, a plain line every few steps
 * otherwise). */
#ifndef LOOM_EXAMPLES_CLI_H
#define LOOM_EXAMPLES_CLI_H

#include <stdint.h>

/* Seconds on a monotonic clock. */
double cli_now_s(void);

/* s as an integer >= lo into *out: 1, or 0 after printing
 * "PROG: FLAG expects an integer >= LO, got 'S'". */
int cli_parse_i64(const char *prog, const char *flag, const char *s, int64_t lo, int64_t *out);

/* How a trainer prints progress: a plain line every `every` steps (and at
 * the last) when not on a terminal; samples/s with `decimals` digits after
 * the point, `width` wide in the bar. */
typedef struct cli_progress_style {
  int every, width, decimals;
} cli_progress_style;

void cli_progress(cli_progress_style st, int tty, int quiet, int epoch, int epochs, int64_t step, int64_t steps,
                  double loss, double sps);

#endif
