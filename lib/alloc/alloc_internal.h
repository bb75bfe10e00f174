/* alloc_internal.h (internal) — glue between the global per-device
 * allocators (alloc.c), option parsing (config.c), the allocation trace
 * (alloc_trace.c) and graph capture's private pools (capture_pools.c). */
#ifndef LOOM_ALLOC_INTERNAL_H
#define LOOM_ALLOC_INTERNAL_H

#include "loom/alloc.h"
#include "alloc/pool.h"
#include "alloc/provider.h"
#include "core/error.h"

/* Range checks shared by loom_alloc_set_config and the parser. */
loom_status loom_alloc_options_check(const loom_alloc_options *o);

/* ---- device slots (alloc.c) -------------------------------------------------- */
/* A slot's name for messages and traces: "cpu", "pinned", "cuda:N". */
void loom_alloc_slot_name(int slot, char *buf, int n);
/* What a graph capture's private pool on dev is made from: the device's
 * slot (whose own allocator this creates if needed; LOOM_ERR_UNSUPPORTED
 * when it is backend:cuda_async), its provider, and a pool configuration
 * named "<device>:graph" under the device's limit. */
loom_status loom_alloc_capture_config(loom_device dev, int *slot, const loom_provider **prov, loom_pool_config *cfg);
/* A graph capture opens (+1) or closes (-1) on slot: the pools of the slot
 * (its own and the private ones) give nothing back while any is open. */
void loom_alloc_capture_count(int slot, int delta);

/* ---- allocation trace (alloc_trace.c) ---------------------------------------- */
/* The hooks a device pool of slot calls; they write only while tracing. */
loom_pool_trace loom_alloc_trace_hooks(int slot);

#endif
