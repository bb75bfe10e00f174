/* dev_table.h (internal, C and CUDA C++) — a small table of kernel
 * arguments (pointer lists, chunk maps) kept in device memory between
 * launches and re-uploaded only when its bytes change, instead of being
 * copied from pageable host memory before every launch. The multi-tensor
 * optimizer and the AMP unscale pass keep theirs in the object they belong
 * to (optimizer, scaler), so in a steady training loop — the caching
 * allocator hands back the same gradient addresses every step — the tables
 * are uploaded once. */
#ifndef LOOM_OPS_CUDA_DEV_TABLE_H
#define LOOM_OPS_CUDA_DEV_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include "loom/device.h"
#include "loom/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_dev_table loom_dev_table;

/* Make *t (created on first use) hold `bytes` bytes equal to host on dev,
 * and return its device address. An upload (when the bytes changed) is
 * enqueued on dev's current stream, ordered after the launches that read
 * the previous contents; the previous device buffer goes back to the
 * caching allocator stream-ordered. Never waits for the GPU.
 * Inside a graph capture the address returned is baked into the graph:
 * that buffer is never rewritten by a later eager upload and never freed
 * before the table (loom_dev_table_free), and when the bytes differ from
 * the eager table's the graph gets a buffer of its own, written by a
 * captured kernel at every replay; the eager table is left as it was. */
loom_status loom_dev_table_sync(loom_dev_table **t, loom_device dev, const void *host, size_t bytes, void **dptr);
/* How many uploads *t has made (tests). */
int64_t loom_dev_table_uploads(const loom_dev_table *t);
void loom_dev_table_free(loom_dev_table *t);

#ifdef __cplusplus
}
#endif
#endif
