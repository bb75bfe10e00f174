/* graph.c — whole-step graph capture (graph.h): the capture state machine
 * (capturing -> ready, or -> failed at the first capture-unsafe call), the
 * graph's private allocator pool (alloc.c routes this thread's allocations
 * to it while capturing), the record of unsafe calls (host waits are seen
 * through sync_stats.c, pinned allocations through alloc.c; the op running
 * at the time is named, dispatch.c tells which), and on real CUDA devices
 * cudaStreamBeginCapture / EndCapture / GraphInstantiate / GraphLaunch on
 * the device's compute stream (relaxed mode, so the private pool may still
 * cudaMalloc while capturing). The CPU runs everything but the CUDA calls.
 *
 * The CUDA calls here have never run (no GPU on the development machines). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "alloc/pool.h"
#include "device/device_internal.h"
#include "device/graph_capture.h"
#include "loom/alloc.h"
#include "loom/graph.h"

enum { G_CAPTURING = 1, G_READY = 2, G_FAILED = 3 };

struct loom_graph {
  loom_device dev;
  int state;
  struct loom_pool *pool;
  char why[320];  /* the first capture-unsafe call */
  int real;       /* a CUDA graph is captured (real CUDA device) */
#ifdef LOOM_HAVE_CUDA
  cudaStream_t stream;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
#endif
};

static _Thread_local loom_graph *tl_capture;
static atomic_llong g_replays;

int64_t loom_graph_replay_count(void) { return (int64_t)atomic_load(&g_replays); }
static _Thread_local const char *tl_op;

const char *loom_capture_set_op(const char *name) {
  const char *prev = tl_op;
  tl_op = name;
  return prev;
}

void loom_capture_note_unsafe(const char *what) {
  loom_graph *g = tl_capture;
  if (!g || g->why[0]) return;
  if (tl_op)
    snprintf(g->why, sizeof g->why, "%s made %s during graph capture", tl_op, what);
  else
    snprintf(g->why, sizeof g->why, "%s happened during graph capture (a direct API call, outside any op)", what);
}

bool loom_graph_capturing(void) { return tl_capture != NULL; }

loom_status loom_graph_capture_begin(loom_device dev, loom_graph **out) {
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "graph_capture_begin: out is NULL");
  *out = NULL;
  if (tl_capture)
    return loom_set_error(LOOM_ERR_STATE, "graph_capture_begin: a capture is already open on this thread; end it "
                          "first (loom_graph_capture_end)");
  LOOM_TRY(loom_device_check(dev));
  loom_graph *g = calloc(1, sizeof *g);
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
      free(g);
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
    free(g);
    return st;
  }
  g->state = G_CAPTURING;
  tl_capture = g;
  *out = g;
  return LOOM_OK;
}

loom_status loom_graph_capture_end(loom_graph *g) {
  if (!g) return loom_set_error(LOOM_ERR_INVALID_ARG, "graph_capture_end: graph is NULL");
  if (g->state != G_CAPTURING || tl_capture != g)
    return loom_set_error(LOOM_ERR_STATE, "graph_capture_end: this graph is not being captured on this thread%s",
                          g->state == G_CAPTURING ? " (it was begun on another)" : "");
  tl_capture = NULL;
  loom_alloc_private_end();
  loom_status st = LOOM_OK;
#ifdef LOOM_HAVE_CUDA
  if (g->real) {
    cudaError_t e = cudaStreamEndCapture(g->stream, &g->graph);
    if (e != cudaSuccess) st = loom_cuda_error(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    if (st == LOOM_OK && !g->why[0]) {
      e = cudaGraphInstantiate(&g->exec, g->graph, 0);
      if (e != cudaSuccess) st = loom_cuda_error(e, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
  }
#endif
  if (g->why[0]) {
    g->state = G_FAILED;
    return loom_set_error(LOOM_ERR_STATE, "graph_capture_end: the capture is invalid: %s; move it out of the "
                          "captured region (read values after replaying, allocate pinned buffers before capturing)",
                          g->why);
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
  atomic_fetch_add(&g_replays, 1);
#endif
  return LOOM_OK;
}

int64_t loom_graph_pool_reserved(const loom_graph *g) {
  if (!g || !g->pool) return 0;
  loom_memory_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  loom_pool_stats(g->pool, &st);
  return st.reserved_bytes[0].current;
}

void loom_graph_free(loom_graph *g) {
  if (!g) return;
  if (tl_capture == g) {  /* freed while capturing: abandon the capture */
    tl_capture = NULL;
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
  free(g);
}
