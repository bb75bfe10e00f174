/* datasets.h — dataset plumbing loom's trainers share: finding an IDX split
 * in a directory (raw or gzip), and cutting a dataset to its first samples
 * (--train-limit / --test-limit). */
#ifndef LOOM_EXAMPLES_DATASETS_H
#define LOOM_EXAMPLES_DATASETS_H

#include <stdint.h>

#include <loom/data.h>

/* DIR/{prefix}-images-idx3-ubyte(.gz) + DIR/{prefix}-labels-idx1-ubyte(.gz),
 * opened. NULL with *found = 0 when no such pair exists (the caller says
 * what it looked for), NULL with *found = 1 when opening failed (loom's
 * error says why). */
loom_dataset *datasets_idx_split(const char *dir, const char *prefix, int *found);

/* The first `limit` samples of ds as an in-memory copy, ds freed; ds itself
 * when limit <= 0 or covers it all. NULL on failure (ds freed). */
loom_dataset *datasets_head(loom_dataset *ds, int64_t limit);

#endif
