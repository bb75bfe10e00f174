/* loom.h — the umbrella header: include this to use loom.
 *
 * Ownership, in one sentence: every tensor is reference counted; inside an
 * open scope, new tensors belong to the scope and die with it unless kept;
 * outside a scope, the caller owns what it gets. */
#ifndef LOOM_H
#define LOOM_H

#include "export.h"
#include "status.h"
#include "free.h"
#include "shutdown.h"
#include "log.h"
#include "dtype.h"
#include "rng.h"
#include "device.h"
#include "alloc.h"
#include "tensor.h"
#include "ops.h"
#include "autograd.h"
#include "nn.h"
#include "gpt.h"
#include "optim.h"
#include "data.h"
#include "amp.h"
#include "io.h"
#include "dist.h"
#include "batch.h"
#include "graph.h"
#include "prof.h"
#include "metrics.h"

#define LOOM_VERSION_MAJOR 0
#define LOOM_VERSION_MINOR 1
#define LOOM_VERSION_PATCH 0

#endif
