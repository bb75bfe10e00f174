/* fake_gpus.h (test support) — simulated GPUs for tests that need "CUDA"
 * devices without a GPU: lib/device pretends n physical GPUs exist
 * (loom_device_testing_fake_gpus: no CUDA call is made for them; their
 * streams and events behave like the CPU's) and the allocator takes their
 * memory from one simulated device (provider_fake.h) per physical GPU,
 * shared by its virtual devices, through the provider factory registered
 * here. */
#ifndef LOOM_TESTS_FAKE_GPUS_H
#define LOOM_TESTS_FAKE_GPUS_H

#include <stddef.h>
#include "loom/status.h"
#include "support/provider_fake.h"

/* n simulated physical GPUs of mem bytes each, before any device is used
 * (LOOM_ERR_STATE afterwards; LOOM_ERR_INVALID_ARG for bad n or mem). */
loom_status tk_fake_gpus(int n, size_t mem);
/* The simulated device behind physical GPU phys (NULL until a pool or graph
 * on it was created). */
loom_fake *tk_fake_gpu(int phys);

#endif
