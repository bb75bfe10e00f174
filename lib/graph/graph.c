/* graph.c — whole-step graph capture (graph.h): the capture state machine
 * (capturing -> ready, or -> failed at the first capture-unsafe call), the
 * graph's private allocator pool (the allocator routes this thread's
 * allocations to it while capturing: alloc/alloc.h), the record of unsafe
 * calls (opened as this thread's capture record in core/capture.h, where
 * host waits, pinned allocations and random draws report them, naming the
 * op the dispatcher says is running), and on real CUDA devices
 * cudaStreamBeginCapture / EndCapture / GraphInstantiate / GraphLaunch on
 * the device's compute stream (relaxed mode, so the private pool may still
 * cudaMalloc while capturing). The CPU runs everything but the CUDA calls.
 *
 * The CUDA calls here have never run (no GPU on the development machines). */
#include <stdlib.h>

#include "alloc/alloc.h"
#include "core/capture.h"
#include "device/device_internal.h"
#include "loom/graph.h"
#include "core/sys.h"

enum { G_CAPTURING = 1, G_READY = 2, G_FAILED = 3 };

struct loom_graph {
  loom_device dev;
  int state;
  loom_allocator *pool;
  loom_capture_record rec;  /* rec.why: the first capture-unsafe call */
  int real;                 /* a CUDA graph is captured (real CUDA device) */
#ifdef LOOM_HAVE_CUDA
  cudaStream_t stream;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
#endif
};

/* Is g the capture open on this thread? */
static int open_here(const loom_graph *g) { return loom_capture_current() == &g->rec; }

bool loom_graph_capturing(void) { return loom_capture_current() != NULL; }

loom_status loom_graph_capture_begin(loom_device dev, loom_graph **out) {
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "graph_capture_begin: out is NULL");
  *out = NULL;
  if (loom_capture_current())
    return loom_set_error(LOOM_ERR_STATE, "graph_capture_begin: a capture is already open on this thread; end it "
                          "first (loom_graph_capture_end)");
  LOOM_TRY(loom_device_check(dev));
  loom_graph *g = loom_sys_calloc(1, sizeof *g);
  if (!g) return loom_set_error(LOOM_ERR_OOM, "graph_capture_begin: out of host memory");
  g->dev = dev;
#ifdef LOOM_HAVE_CUDA
  if (dev.kind == LOOM_CUDA && loom_device_is_real_cuda(dev)) {
    loom_stream *s = loom_stream_current(dev);
    loom_status st = s ? loom_cuda_set_device(dev.index) : loom_last_status();
    if (st == LOOM_OK) {
      g->stream = (cudaStream_t)loom_stream_native(s);
      cudaError_t e = cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeRelaxed);
      if (e != cudaSuccess) st = loom_cuda_error(e, "cudaStreamBeginCapture", __FILE__, __LINE__);
    }
    if (st != LOOM_OK) {
      loom_sys_free(g);
      return st;
    }
    g->real = 1;
  }
#endif
  loom_status st = loom_alloc_private_begin(dev, &g->pool);
  if (st != LOOM_OK) {
#ifdef LOOM_HAVE_CUDA
    if (g->real) {
      cudaGraph_t dropped = NULL;
      if (cudaStreamEndCapture(g->stream, &dropped) == cudaSuccess && dropped) cudaGraphDestroy(dropped);
    }
#endif
    loom_sys_free(g);
    return st;
  }
  g->state = G_CAPTURING;
  loom_capture_open(&g->rec);
  *out = g;
  return LOOM_OK;
}

loom_status loom_graph_capture_end(loom_graph *g) {
  if (!g) return loom_set_error(LOOM_ERR_INVALID_ARG, "graph_capture_end: graph is NULL");
  if (g->state != G_CAPTURING || !open_here(g))
    return loom_set_error(LOOM_ERR_STATE, "graph_capture_end: this graph is not being captured on this thread%s",
                          g->state == G_CAPTURING ? " (it was begun on another)" : "");
  loom_capture_open(NULL);
  loom_alloc_private_end();
  loom_status st = LOOM_OK;
#ifdef LOOM_HAVE_CUDA
  if (g->real) {
    cudaError_t e = cudaStreamEndCapture(g->stream, &g->graph);
    if (e != cudaSuccess) st = loom_cuda_error(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    if (st == LOOM_OK && !g->rec.why[0]) {
      e = cudaGraphInstantiate(&g->exec, g->graph, 0);
      if (e != cudaSuccess) st = loom_cuda_error(e, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
  }
#endif
  if (g->rec.why[0]) {
    g->state = G_FAILED;
    return loom_set_error(LOOM_ERR_STATE, "graph_capture_end: the capture is invalid: %s; move it out of the "
                          "captured region (read values after replaying, allocate pinned buffers before capturing)",
                          g->rec.why);
  }
  g->state = st == LOOM_OK ? G_READY : G_FAILED;
  return st;
}

loom_status loom_graph_replay(loom_graph *g) {
  if (!g) return loom_set_error(LOOM_ERR_INVALID_ARG, "graph_replay: graph is NULL");
  if (g->state != G_READY)
    return loom_set_error(LOOM_ERR_STATE, "graph_replay: the graph is %s", g->state == G_CAPTURING
                                                                              ? "still being captured (end it first)"
                                                                              : "invalid (its capture failed)");
  if (!g->real) {
    char dn[32];
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "graph_replay: %s has no graphs (CUDA devices only); on it a capture "
                          "only checks that the region is capture-safe", loom_device_str(g->dev, dn, sizeof dn));
  }
#ifdef LOOM_HAVE_CUDA
  LOOM_TRY(loom_cuda_set_device(g->dev.index));
  LOOM_CUDA_CHECK(cudaGraphLaunch(g->exec, g->stream));
  loom_capture_count_replay();
#endif
  return LOOM_OK;
}

int64_t loom_graph_pool_reserved(const loom_graph *g) {
  if (!g || !g->pool) return 0;
  return loom_alloc_private_reserved(g->pool);
}

void loom_graph_free(loom_graph *g) {
  if (!g) return;
  if (open_here(g)) {  /* freed while capturing: abandon the capture */
    loom_capture_open(NULL);
    loom_alloc_private_end();
#ifdef LOOM_HAVE_CUDA
    if (g->real && !g->graph) cudaStreamEndCapture(g->stream, &g->graph);
#endif
  }
#ifdef LOOM_HAVE_CUDA
  if (g->exec) cudaGraphExecDestroy(g->exec);
  if (g->graph) cudaGraphDestroy(g->graph);
#endif
  loom_alloc_private_destroy(g->pool);
  loom_sys_free(g);
}
