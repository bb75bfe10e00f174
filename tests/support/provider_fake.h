/* provider_fake.h (test support) — a simulated device for testing the
 * allocator without a GPU: addresses are numbers in a made-up address space
 * (never dereference them), capacity is configurable, the Nth segment allocation
 * can be made to fail, and events complete only when the test says the
 * stream they were recorded on is done (loom_fake_complete).
 *
 * Segments are placed first-fit, 2 MiB aligned, with a 2 MiB hole between
 * neighbours, so a pool that merged across segments would be caught.
 * It also has virtual memory (expandable segments): address reservations
 * placed the same way, into which granules (2 MiB unless set) are mapped;
 * mapped bytes count against the capacity, reservations do not. Mapping
 * twice, unmapping what is not mapped and releasing a reservation with
 * memory still mapped are errors (LOOM_ERR_INTERNAL). Fault injection
 * (fail_nth) covers segment allocations, reservations and maps.
 * Streams are any distinct pointers the test makes up. Thread-safe. */
#ifndef LOOM_TESTS_PROVIDER_FAKE_H
#define LOOM_TESTS_PROVIDER_FAKE_H

#include <stddef.h>
#include <stdint.h>
#include "alloc/provider.h"

typedef struct loom_fake loom_fake;

loom_fake *loom_fake_create(size_t capacity);
void loom_fake_destroy(loom_fake *f);
const loom_provider *loom_fake_provider(loom_fake *f);

void loom_fake_set_capacity(loom_fake *f, size_t capacity);
/* The nth segment allocation from now (1 = the next) fails with
 * LOOM_ERR_OOM; 0 turns injection off. */
void loom_fake_fail_nth(loom_fake *f, long n);
/* Events recorded from now on complete immediately (like a CPU stream). */
void loom_fake_set_auto_complete(loom_fake *f, int on);
/* Every event recorded on s so far is complete. */
void loom_fake_complete(loom_fake *f, loom_stream *s);
void loom_fake_complete_all(loom_fake *f);
int loom_fake_pending_events(loom_fake *f);

size_t loom_fake_live_bytes(loom_fake *f);      /* segments + mapped bytes */
long loom_fake_live_segments(loom_fake *f);       /* segments + reservations */
long loom_fake_seg_allocs(loom_fake *f);  /* successful */
long loom_fake_seg_frees(loom_fake *f);
long loom_fake_waits(loom_fake *f);       /* stream_wait calls */
/* The waiter and the stream of the event of the last stream_wait. */
void loom_fake_last_wait(loom_fake *f, loom_stream **waiter, loom_stream **on);
/* The simulated address space is [base, base + span). */
uintptr_t loom_fake_base(loom_fake *f);
size_t loom_fake_span(loom_fake *f);
/* Move the (base, size) of segments freed since the last call into out
 * (up to max); returns how many were written. */
int loom_fake_drain_freed(loom_fake *f, uintptr_t *bases, size_t *sizes, int max);
/* Is there a live segment (or reservation) at exactly this base? */
int loom_fake_is_live(loom_fake *f, uintptr_t base);

/* ---- virtual memory ---- */
/* The mapping unit (a power of two, at least 512); set before use. */
void loom_fake_set_granularity(loom_fake *f, size_t granule);
long loom_fake_maps(loom_fake *f);    /* successful maps */
long loom_fake_unmaps(loom_fake *f);
/* Bytes of [addr, addr + n) (inside one reservation) that are mapped. */
size_t loom_fake_mapped_within(loom_fake *f, uintptr_t addr, size_t n);
/* Bytes mapped in the reservation at base (0 if none). */
size_t loom_fake_reservation_mapped(loom_fake *f, uintptr_t base);
/* Move the bases of reservations made, mapped or unmapped since the last call into
 * bases (up to max, repeats possible); returns how many. Released
 * reservations are reported by loom_fake_drain_freed like segments. */
int loom_fake_drain_remapped(loom_fake *f, uintptr_t *bases, int max);

#endif
