/* graph_capture.h (internal) — kept only for files of higher layers that
 * still include it by this name (ops/api_*.c, optim, amp): the capture
 * state lives in core now (core/capture.h). Include that instead. */
#ifndef LOOM_DEVICE_GRAPH_CAPTURE_H
#define LOOM_DEVICE_GRAPH_CAPTURE_H

#include "core/capture.h"

#endif
