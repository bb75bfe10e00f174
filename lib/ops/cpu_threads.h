/* cpu_threads.h (internal) — whether the CPU thread count was chosen
 * explicitly (loom_set_num_threads), so that defaults computed elsewhere
 * (lib/dist: cores / ranks on the machine) do not override a user's choice. */
#ifndef LOOM_OPS_CPU_THREADS_H
#define LOOM_OPS_CPU_THREADS_H

#include <stdbool.h>

bool loom_cpu_threads_explicit(void);

#endif
