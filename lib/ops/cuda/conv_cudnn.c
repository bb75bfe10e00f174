/* conv_cudnn.c — conv2d on CUDA through cuDNN 9's graph (backend) API.
 *
 * Why the graph API and not the legacy one: the legacy cudnnConvolution*
 * calls are deprecated in cuDNN 9 and can only fuse conv+bias+activation
 * through cudnnConvolutionBiasActivationForward, which is limited to one
 * algorithm and needs an extra z operand. The graph API expresses every
 * pass the same way (an operation graph -> engine heuristics -> an
 * execution plan -> execute with a variant pack of pointers), fuses
 * conv -> +bias -> ReLU as one graph wherever an engine supports it, and
 * takes its workspace as a plain pointer, so nothing in it allocates device
 * memory behind the caching allocator's back. It is plain C (no
 * cudnn-frontend, which is C++).
 *
 * Plans: one per (device, pass, dtype, shapes, strides of x / w / y,
 * convolution parameters, TF32 setting, pointer alignment), built once,
 * kept for the life of the process, looked up under a lock. Building tries
 * the heuristics' engine configs in order (mode A, then the fallback list)
 * until one finalizes; for f32 without TF32 permission (loom_set_allow_tf32)
 * engines that use tensor cores or down-convert inputs are skipped, and in
 * deterministic mode (loom_set_deterministic) engines cuDNN marks
 * non-deterministic. The engine chosen is logged (info: its global index
 * and numerical/behaviour notes, e.g. tensor_core, runtime_compiled). A
 * graph no engine supports is remembered as such: the fused forward then
 * takes the fallback below, and a plain pass (forward, backward-data,
 * backward-filter) runs on loom's im2col + GEMM path (conv_gemm_cuda.c),
 * logged once per plan and counted (loom_cuda_conv_stats.gemm_runs).
 * Alignment: each tensor is described with the alignment its pointer really
 * has, and a pointer under 16-byte alignment goes through an aligned copy
 * (run_plan_aligned: an engine faulted on a 2-byte aligned f16 view anyway).
 * Precision: f16/bf16 tensors with f32 compute (tensor cores, f32
 * accumulation); the fused graph's intermediates are f32 virtual tensors.
 * Layouts: x, y, dy, dx in the tensor's own strides (NHWC preferred by the
 * engines); the weight is presented in x's layout (a channels-last copy for
 * NHWC x, made per call: weights are small), and the NHWC weight gradient
 * is produced channels-last and copied into the contiguous result.
 * Workspace: per call from loom's caching allocator on the compute stream,
 * freed (stream-ordered) right after the call is enqueued; after warm-up
 * every request is a cache hit.
 * Fallback for the fused forward: the plain convolution plan, then loom's
 * own bias-add and ReLU kernels (the op table's add/relu). Forced with
 * loom_cuda_conv_force_unfused (tests run both).
 * Backward: dZ = dY * (y > 0) with loom's relu_backward kernel (in place
 * when the engine owns dY), db = sum of dZ over N, H, W with loom's sum
 * kernel, then the backward-data and backward-filter plans.
 * Handles: one cudnnHandle_t per device, created once on first use; its
 * stream is set to the device's compute stream before each execution, all
 * under one lock (a handle is not to be used by two threads at once).
 *
 * Builds without cuDNN: both kernels fail with LOOM_ERR_UNSUPPORTED and say
 * how to get cuDNN. */
#ifdef LOOM_HAVE_CUDA
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/ops.h"
#include "ops/conv.h"
#include "core/sys.h"

static bool g_force_gemm = false;
void loom_cuda_conv_force_gemm(bool on) { __atomic_store_n(&g_force_gemm, on, __ATOMIC_RELAXED); }

#ifndef LOOM_HAVE_CUDNN
static loom_status no_cudnn(const char *op) {
  return loom_set_error(LOOM_ERR_UNSUPPORTED,
                        "%s: this build of loom has CUDA but not cuDNN; install cuDNN 9 (or point CUDNN_ROOT at it) "
                        "and rebuild, or run the convolution on the CPU",
                        op);
}
loom_status loom_cuda_conv2d(loom_op_args *a) {
  (void)a;
  return no_cudnn("conv2d");
}
loom_status loom_cuda_conv2d_backward(loom_op_args *a) {
  (void)a;
  return no_cudnn("conv2d backward");
}
void loom_cuda_conv_force_unfused(bool on) { (void)on; }
void loom_cuda_conv_stats_get(loom_cuda_conv_stats *out) { memset(out, 0, sizeof *out); }
loom_status loom_cuda_conv_mem_free(loom_device dev, size_t *free_bytes) {
  (void)dev;
  *free_bytes = 0;
  return no_cudnn("conv2d");
}
#else
#include <cudnn.h>

#include "alloc/alloc.h"
#include "core/teardown.h"
#include "loom/log.h"
#include "ops/cuda/conv_gemm_cuda.h"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_kernels.h"

/* ---- errors -------------------------------------------------------------------- */
static loom_status cudnn_error(cudnnStatus_t s, const char *call, const char *file, int line) {
  char detail[512];
  detail[0] = 0;
  cudnnGetLastErrorString(detail, sizeof detail);
  return loom_set_error(LOOM_ERR_CUDA, "%s failed at %s:%d: %s%s%s", call, file, line, cudnnGetErrorString(s),
                        detail[0] ? ": " : "", detail);
}
#define DNN(call)                                                                             \
  do {                                                                                        \
    cudnnStatus_t dnn_s_ = (call);                                                            \
    if (dnn_s_ != CUDNN_STATUS_SUCCESS) return cudnn_error(dnn_s_, #call, __FILE__, __LINE__); \
  } while (0)

/* ---- switches and counters ------------------------------------------------------- */
static bool g_force_unfused = false;
static int64_t g_stats[6];  /* plans_built, plan_hits, unsupported, fused_runs, fallback_runs, gemm_runs */

void loom_cuda_conv_force_unfused(bool on) { __atomic_store_n(&g_force_unfused, on, __ATOMIC_RELAXED); }

void loom_cuda_conv_stats_get(loom_cuda_conv_stats *out) {
  out->plans_built = __atomic_load_n(&g_stats[0], __ATOMIC_RELAXED);
  out->plan_hits = __atomic_load_n(&g_stats[1], __ATOMIC_RELAXED);
  out->unsupported = __atomic_load_n(&g_stats[2], __ATOMIC_RELAXED);
  out->fused_runs = __atomic_load_n(&g_stats[3], __ATOMIC_RELAXED);
  out->fallback_runs = __atomic_load_n(&g_stats[4], __ATOMIC_RELAXED);
  out->gemm_runs = __atomic_load_n(&g_stats[5], __ATOMIC_RELAXED);
}

static void count(int k) { __atomic_fetch_add(&g_stats[k], 1, __ATOMIC_RELAXED); }

loom_status loom_cuda_conv_mem_free(loom_device dev, size_t *free_bytes) {
  LOOM_TRY(loom_cuda_set_device(dev.index));
  size_t total = 0;
  LOOM_CUDA_CHECK(cudaMemGetInfo(free_bytes, &total));
  return LOOM_OK;
}

/* ---- handles --------------------------------------------------------------------- */
#define MAX_DEV 64
static cudnnHandle_t g_handle[MAX_DEV];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;  /* handles, plans, executions */

/* Call with g_lock held. */
static loom_status handle_of(loom_device dev, cudnnHandle_t *out) {
  if (dev.index < 0 || dev.index >= MAX_DEV)
    return loom_set_error(LOOM_ERR_DEVICE, "conv2d: CUDA device %d is out of range", dev.index);
  if (!g_handle[dev.index]) {
    LOOM_TRY(loom_cuda_set_device(dev.index));
    DNN(cudnnCreate(&g_handle[dev.index]));
    loom_log_msg(LOOM_LOG_INFO, "cuDNN %zu on cuda:%d", cudnnGetVersion(), dev.index);
  }
  *out = g_handle[dev.index];
  return LOOM_OK;
}

/* ---- plans ------------------------------------------------------------------------- */
enum { FWD = 0, FWD_BIAS = 1, FWD_RELU = 2, FWD_BIAS_RELU = 3, BWD_DATA = 4, BWD_FILTER = 5 };
static const char *pass_name(int kind) {
  static const char *const names[] = {"forward", "forward+bias", "forward+relu", "forward+bias+relu", "backward-data",
                                      "backward-filter"};
  return kind >= 0 && kind <= BWD_FILTER ? names[kind] : "?";
}
/* Unique ids of the tensors in the variant packs. */
enum { UID_X = 1, UID_W = 2, UID_Y = 3, UID_B = 4, UID_T1 = 5, UID_T2 = 6 };

typedef struct plan_key {
  int64_t dev, kind, dt, tf32, det;  /* det: deterministic mode */
  int64_t xs[4], xst[4], ws[4], wst[4], ys[4], yst[4];  /* x/dx, w/dw, y/dy: dims and strides */
  int64_t stride[2], pad[2], dil[2];
  int64_t align[4];                                     /* x, w, y, b pointers */
} plan_key;

#define MAX_DESC 24
typedef struct conv_plan {
  plan_key key;
  cudnnBackendDescriptor_t plan;   /* NULL: no engine supports this graph */
  int64_t workspace;
  cudnnBackendDescriptor_t keep[MAX_DESC];  /* what the plan was built from, alive with it */
  int nkeep;
  struct conv_plan *next;
} conv_plan;
static conv_plan *g_plans;

static int64_t align_class(const void *p) {
  uintptr_t u = (uintptr_t)p;
  if (!u) return 0;
  int64_t a = 1;
  while (a < 256 && (u % (uintptr_t)(a * 2)) == 0) a *= 2;
  return a;
}

static cudnnDataType_t dnn_type(loom_dtype dt) {
  return dt == LOOM_F16 ? CUDNN_DATA_HALF : dt == LOOM_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

static loom_status new_desc(conv_plan *p, cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t *out) {
  if (p->nkeep == MAX_DESC) return loom_set_error(LOOM_ERR_INTERNAL, "conv2d: too many cuDNN descriptors in one plan");
  DNN(cudnnBackendCreateDescriptor(type, out));
  p->keep[p->nkeep++] = *out;
  return LOOM_OK;
}

static loom_status tensor_desc(conv_plan *p, int64_t uid, cudnnDataType_t dt, const int64_t *dims,
                               const int64_t *strides, int64_t align, bool is_virtual, cudnnBackendDescriptor_t *out) {
  cudnnBackendDescriptor_t d;
  LOOM_TRY(new_desc(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &d));
  DNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  DNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  DNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
  DNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  if (align < 1) align = 1;  /* the real alignment (align_class), never raised */
  DNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  DNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual));
  DNN(cudnnBackendFinalize(d));
  *out = d;
  return LOOM_OK;
}

static loom_status conv_desc(conv_plan *p, const plan_key *k, cudnnBackendDescriptor_t *out) {
  cudnnBackendDescriptor_t d;
  LOOM_TRY(new_desc(p, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &d));
  cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int64_t nsd = 2;
  DNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
  DNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  DNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nsd));
  DNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, k->dil));
  DNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, k->stride));
  DNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, k->pad));
  DNN(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, k->pad));
  DNN(cudnnBackendFinalize(d));
  *out = d;
  return LOOM_OK;
}

static loom_status pointwise_op(conv_plan *p, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t *out) {
  cudnnBackendDescriptor_t pw, op;
  LOOM_TRY(new_desc(p, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw));
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  DNN(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  DNN(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
  DNN(cudnnBackendFinalize(pw));
  LOOM_TRY(new_desc(p, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &op));
  DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
  DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  if (b) DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  DNN(cudnnBackendFinalize(op));
  *out = op;
  return LOOM_OK;
}

/* The operation graph of k (its descriptors kept in p). */
static loom_status build_graph(conv_plan *p, cudnnHandle_t h, const plan_key *k, cudnnBackendDescriptor_t *graph) {
  cudnnDataType_t dt = dnn_type((loom_dtype)k->dt);
  const float one = 1.0f, zero = 0.0f;
  cudnnBackendDescriptor_t cd, ops[3];
  int nops = 0;
  LOOM_TRY(conv_desc(p, k, &cd));
  if (k->kind == BWD_DATA || k->kind == BWD_FILTER) {
    cudnnBackendDescriptor_t tx, tw, ty, op;
    LOOM_TRY(tensor_desc(p, UID_X, dt, k->xs, k->xst, k->align[0], false, &tx));
    LOOM_TRY(tensor_desc(p, UID_W, dt, k->ws, k->wst, k->align[1], false, &tw));
    LOOM_TRY(tensor_desc(p, UID_Y, dt, k->ys, k->yst, k->align[2], false, &ty));
    if (k->kind == BWD_DATA) {
      LOOM_TRY(new_desc(p, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, &op));
      DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx));
      DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw));
      DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty));
      DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd));
      DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &one));
      DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &zero));
    } else {
      LOOM_TRY(new_desc(p, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, &op));
      DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw));
      DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx));
      DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty));
      DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd));
      DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &one));
      DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &zero));
    }
    DNN(cudnnBackendFinalize(op));
    ops[nops++] = op;
  } else {
    bool bias = k->kind == FWD_BIAS || k->kind == FWD_BIAS_RELU, relu = k->kind == FWD_RELU || k->kind == FWD_BIAS_RELU;
    cudnnBackendDescriptor_t tx, tw, ty, tconv, op;
    LOOM_TRY(tensor_desc(p, UID_X, dt, k->xs, k->xst, k->align[0], false, &tx));
    LOOM_TRY(tensor_desc(p, UID_W, dt, k->ws, k->wst, k->align[1], false, &tw));
    LOOM_TRY(tensor_desc(p, UID_Y, dt, k->ys, k->yst, k->align[2], false, &ty));
    /* The convolution writes y directly, or an f32 virtual tensor that the
     * pointwise ops carry on to y. */
    if (bias || relu) LOOM_TRY(tensor_desc(p, UID_T1, CUDNN_DATA_FLOAT, k->ys, k->yst, 16, true, &tconv));
    else tconv = ty;
    LOOM_TRY(new_desc(p, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &op));
    DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx));
    DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw));
    DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tconv));
    DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd));
    DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &one));
    DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero));
    DNN(cudnnBackendFinalize(op));
    ops[nops++] = op;
    cudnnBackendDescriptor_t cur = tconv;
    if (bias) {
      int64_t bd[4] = {1, k->ys[1], 1, 1}, bs[4] = {k->ys[1], 1, 1, 1};
      cudnnBackendDescriptor_t tb, tout;
      LOOM_TRY(tensor_desc(p, UID_B, dt, bd, bs, k->align[3], false, &tb));
      if (relu) LOOM_TRY(tensor_desc(p, UID_T2, CUDNN_DATA_FLOAT, k->ys, k->yst, 16, true, &tout));
      else tout = ty;
      LOOM_TRY(pointwise_op(p, CUDNN_POINTWISE_ADD, cur, tb, tout, &ops[nops++]));
      cur = tout;
    }
    if (relu) LOOM_TRY(pointwise_op(p, CUDNN_POINTWISE_RELU_FWD, cur, NULL, ty, &ops[nops++]));
  }
  cudnnBackendDescriptor_t g;
  LOOM_TRY(new_desc(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
  DNN(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops));
  DNN(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  DNN(cudnnBackendFinalize(g));
  *graph = g;
  return LOOM_OK;
}

/* May this engine config run here? f32 without TF32 permission refuses
 * tensor-core and down-converting engines; deterministic mode refuses
 * engines marked non-deterministic. cls gets the engine's global index and
 * notes, for the log. */
static bool engine_ok(const plan_key *k, cudnnBackendDescriptor_t cfg, char *cls, size_t ncls) {
  static const char *const num_names[CUDNN_NUMERICAL_NOTE_TYPE_COUNT] = {
      "tensor_core", "down_convert", "reduced_precision_reduction", "fft", "nondeterministic",
      "winograd", "winograd_4x4", "winograd_6x6", "winograd_13x13", "strict_nan"};
  snprintf(cls, ncls, "?");
  cudnnBackendDescriptor_t eng;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) return false;
  int64_t n = 0;
  bool ok = false;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) ==
      CUDNN_STATUS_SUCCESS) {
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    cudnnBackendBehaviorNote_t beh[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    int64_t nn = 0, nb = 0, idx = -1;
    cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &idx);
    if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes) == CUDNN_STATUS_SUCCESS) {
      ok = true;
      bool strict = k->dt == LOOM_F32 && !k->tf32;
      size_t at = (size_t)snprintf(cls, ncls, "engine %lld", (long long)idx);
      for (int64_t i = 0; i < nn; i++) {
        if (strict && (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
          ok = false;
        if (k->det && notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) ok = false;
        if (at < ncls && (int)notes[i] >= 0 && notes[i] < CUDNN_NUMERICAL_NOTE_TYPE_COUNT)
          at += (size_t)snprintf(cls + at, ncls - at, " %s", num_names[notes[i]]);
      }
      if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                   CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &nb, beh) == CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < nb && at < ncls; i++)
          if (beh[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) at += (size_t)snprintf(cls + at, ncls - at, " runtime_compiled");
    }
  }
  cudnnBackendDestroyDescriptor(eng);
  return ok;
}

/* Try the configs of one heuristics mode; on success p->plan is set. */
static loom_status try_mode(conv_plan *p, cudnnHandle_t h, cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode) {
  cudnnBackendDescriptor_t heur;
  LOOM_TRY(new_desc(p, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
  DNN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
  DNN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) return LOOM_OK;  /* this mode has nothing for the graph */
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL) !=
          CUDNN_STATUS_SUCCESS || count <= 0)
    return LOOM_OK;
  if (count > 32) count = 32;
  cudnnBackendDescriptor_t cfgs[32];
  int made = 0;
  loom_status st = LOOM_OK;
  for (; made < count; made++)
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[made]) != CUDNN_STATUS_SUCCESS) break;
  int64_t got = 0;
  if (made == count &&
      cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs) ==
          CUDNN_STATUS_SUCCESS) {
    for (int64_t i = 0; i < got && !p->plan; i++) {
      char cls[160];
      if (!engine_ok(&p->key, cfgs[i], cls, sizeof cls)) continue;
      cudnnBackendDescriptor_t plan;
      if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) continue;
      int64_t ws = 0, n = 0;
      if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) == CUDNN_STATUS_SUCCESS &&
          cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                   &cfgs[i]) == CUDNN_STATUS_SUCCESS &&
          cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS &&
          cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws) ==
              CUDNN_STATUS_SUCCESS) {
        if (p->nkeep + 1 >= MAX_DESC) {
          cudnnBackendDestroyDescriptor(plan);
          st = loom_set_error(LOOM_ERR_INTERNAL, "conv2d: too many cuDNN descriptors in one plan");
          break;
        }
        p->keep[p->nkeep++] = cfgs[i];  /* the plan refers to its config */
        cfgs[i] = NULL;
        p->plan = plan;
        p->workspace = ws;
        loom_log_msg(LOOM_LOG_INFO, "conv2d: %s %s%s%s: cuDNN %s (heuristics mode %s), workspace %lld bytes",
                     pass_name((int)p->key.kind), loom_dtype_name((loom_dtype)p->key.dt), p->key.tf32 ? " tf32" : "",
                     p->key.det ? " deterministic" : "", cls, mode == CUDNN_HEUR_MODE_A ? "A" : "fallback",
                     (long long)ws);
      } else {
        cudnnBackendDestroyDescriptor(plan);
      }
    }
  }
  for (int i = 0; i < made; i++)
    if (cfgs[i]) cudnnBackendDestroyDescriptor(cfgs[i]);
  return st;
}

/* The cached plan for k (built on first use); call with g_lock held.
 * (*out)->plan is NULL when no engine supports the graph. */
static loom_status plan_for(cudnnHandle_t h, const plan_key *k, conv_plan **out) {
  for (conv_plan *p = g_plans; p; p = p->next)
    if (!memcmp(&p->key, k, sizeof *k)) {
      count(1);
      *out = p;
      return LOOM_OK;
    }
  conv_plan *p = loom_sys_calloc(1, sizeof *p);
  if (!p) return loom_set_error(LOOM_ERR_OOM, "conv2d: out of host memory for a cuDNN plan");
  p->key = *k;
  cudnnBackendDescriptor_t graph = NULL;
  loom_status st = build_graph(p, h, k, &graph);
  if (st == LOOM_OK) st = try_mode(p, h, graph, CUDNN_HEUR_MODE_A);
  if (st == LOOM_OK && !p->plan) st = try_mode(p, h, graph, CUDNN_HEUR_MODE_FALLBACK);
  if (st != LOOM_OK) {
    for (int i = 0; i < p->nkeep; i++) cudnnBackendDestroyDescriptor(p->keep[i]);
    loom_sys_free(p);
    return st;
  }
  if (!p->plan) {
    count(2);
    loom_log_msg(LOOM_LOG_INFO, "conv2d: %s %s%s%s: no cuDNN engine%s", pass_name((int)k->kind),
                 loom_dtype_name((loom_dtype)k->dt), k->tf32 ? " tf32" : "", k->det ? " deterministic" : "",
                 k->kind == FWD || k->kind >= BWD_DATA ? ": loom's im2col + GEMM path runs it"
                                                       : ": the plain convolution + loom's bias/ReLU kernels run it");
  }
  count(0);
  p->next = g_plans;
  g_plans = p;
  *out = p;
  return LOOM_OK;
}

/* loom_shutdown: plans (with the descriptors they were built from), then the
 * handles; both are made again at the next convolution. */
static loom_status cudnn_teardown(void) {
  pthread_mutex_lock(&g_lock);
  while (g_plans) {
    conv_plan *p = g_plans;
    g_plans = p->next;
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    for (int i = p->nkeep - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->keep[i]);
    loom_sys_free(p);
  }
  for (int i = 0; i < MAX_DEV; i++)
    if (g_handle[i]) {
      if (loom_cuda_set_device(i) == LOOM_OK) cudnnDestroy(g_handle[i]);
      g_handle[i] = NULL;
    }
  pthread_mutex_unlock(&g_lock);
  return LOOM_OK;
}
LOOM_TEARDOWN(LOOM_LAYER_OPS, cudnn_teardown)

/* ---- running a plan -------------------------------------------------------------------- */
typedef struct dnn_call {
  loom_device dev;
  int kind;
  const loom_conv_geom *g;
  loom_tensor *x, *w, *y, *b;  /* x/dx, w/dw, y/dy, bias */
} dnn_call;

static void fill_key(plan_key *k, const dnn_call *c) {
  memset(k, 0, sizeof *k);
  k->dev = c->dev.index;
  k->kind = c->kind;
  k->dt = c->x->dtype;
  k->tf32 = loom_cuda_tf32_allowed();
  k->det = loom_get_deterministic();
  for (int d = 0; d < 4; d++) {
    k->xs[d] = c->x->shape[d];
    k->xst[d] = c->x->strides[d];
    k->ws[d] = c->w->shape[d];
    k->wst[d] = c->w->strides[d];
    k->ys[d] = c->y->shape[d];
    k->yst[d] = c->y->strides[d];
  }
  k->stride[0] = c->g->sh, k->stride[1] = c->g->sw;
  k->pad[0] = c->g->ph, k->pad[1] = c->g->pw;
  k->dil[0] = c->g->dh, k->dil[1] = c->g->dw;
  k->align[0] = align_class(loom_tensor_ptr(c->x));
  k->align[1] = align_class(loom_tensor_ptr(c->w));
  k->align[2] = align_class(loom_tensor_ptr(c->y));
  k->align[3] = c->b ? align_class(loom_tensor_ptr(c->b)) : 0;
}

/* Run c's graph: LOOM_OK, an error, or LOOM_ERR_UNSUPPORTED without a
 * message when no engine supports it (the caller decides). */
static loom_status run_plan(const dnn_call *c) {
  loom_cuda_ctx *ctx = loom_cuda_ctx_get(c->dev);
  if (!ctx) return loom_last_status();
  if ((c->kind == FWD || c->kind >= BWD_DATA) && __atomic_load_n(&g_force_gemm, __ATOMIC_RELAXED))
    return LOOM_ERR_UNSUPPORTED;  /* tests: the GEMM path, as if cuDNN had no engine */
  plan_key k;
  fill_key(&k, c);
  pthread_mutex_lock(&g_lock);
  cudnnHandle_t h = NULL;
  conv_plan *p = NULL;
  loom_status st = handle_of(c->dev, &h);
  if (st == LOOM_OK) st = plan_for(h, &k, &p);
  if (st == LOOM_OK && !p->plan) st = LOOM_ERR_UNSUPPORTED;
  void *ws = NULL;
  if (st == LOOM_OK && p->workspace > 0) st = loom_alloc_malloc(c->dev, (size_t)p->workspace, NULL, &ws);
  cudnnBackendDescriptor_t vp = NULL;
  if (st == LOOM_OK) {
    int64_t uids[4] = {UID_X, UID_W, UID_Y, UID_B};
    void *ptrs[4] = {loom_tensor_ptr(c->x), loom_tensor_ptr(c->w), loom_tensor_ptr(c->y), c->b ? loom_tensor_ptr(c->b) : NULL};
    int64_t n = c->b ? 4 : 3;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (s == CUDNN_STATUS_SUCCESS)
      s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(vp);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetStream(h, ctx->stream);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendExecute(h, p->plan, vp);
    if (s != CUDNN_STATUS_SUCCESS) st = cudnn_error(s, "cudnnBackendExecute (conv2d)", __FILE__, __LINE__);
  }
  if (vp) cudnnBackendDestroyDescriptor(vp);
  /* Stream-ordered: the block is reused only by work enqueued after this. */
  loom_alloc_free(c->dev, ws);
  pthread_mutex_unlock(&g_lock);
  return st;
}

/* ---- tensors in the layout the engines get -------------------------------------------- */
/* An uninitialised device tensor shaped like t, channels-last when cl. */
static loom_tensor *scratch(const loom_tensor *t, loom_dtype dt, bool cl) {
  loom_tensor *s = loom_tensor_alloc_raw(t->ndim, t->shape, dt, t->storage->device);
  if (s && cl && t->ndim == 4) {
    int64_t C = t->shape[1], H = t->shape[2], W = t->shape[3];
    s->strides[1] = 1;
    s->strides[3] = C;
    s->strides[2] = W * C;
    s->strides[0] = H * W * C;
  }
  return s;
}

/* run_plan with every pointer 16-byte aligned. The engines are told each
 * pointer's real alignment, yet on the H200 (2026-11-28) an f16 conv2d and
 * its backward on 2-byte aligned views (the op sweep's sliced layout) still
 * faulted with "misaligned address", which poisons the whole CUDA context.
 * So a misaligned tensor reaches cuDNN through a fresh copy (the
 * allocator's blocks are 512-byte aligned) and an output is copied back;
 * views at an aligned offset, all that training makes, pass as they are. */
static loom_status run_plan_aligned(dnn_call c) {
  loom_tensor **slot[4] = {&c.x, &c.w, &c.y, &c.b};
  const bool out[4] = {c.kind == BWD_DATA, c.kind == BWD_FILTER, c.kind < BWD_DATA, false};
  loom_tensor *orig[4] = {c.x, c.w, c.y, c.b}, *tmp[4] = {NULL, NULL, NULL, NULL};
  loom_status st = LOOM_OK;
  for (int i = 0; i < 4 && st == LOOM_OK; i++) {
    loom_tensor *t = orig[i];
    if (!t || align_class(loom_tensor_ptr(t)) >= 16) continue;
    tmp[i] = scratch(t, t->dtype, c.g->nhwc);
    if (!tmp[i]) st = loom_last_status();
    else if (!out[i]) st = loom_cuda_copy_into(tmp[i], t);  /* outputs are written whole */
    if (tmp[i]) *slot[i] = tmp[i];
  }
  if (st == LOOM_OK) st = run_plan(&c);
  for (int i = 0; i < 4; i++) {
    if (!tmp[i]) continue;
    if (st == LOOM_OK && out[i]) st = loom_cuda_copy_into(orig[i], tmp[i]);
    loom_tensor_release(tmp[i]);
  }
  return st;
}

/* w in the layout matching x (channels-last for NHWC x), retained or copied. */
static loom_tensor *weight_for(loom_tensor *w, bool nhwc) {
  bool ok = nhwc ? loom_tensor_is_channels_last(w) : loom_cuda_dense(w);
  if (ok) return loom_tensor_retain(w);
  loom_tensor *c = scratch(w, w->dtype, nhwc);
  if (c && loom_cuda_copy_into(c, w) != LOOM_OK) {
    loom_tensor_release(c);
    return NULL;
  }
  return c;
}

static loom_status zero_fill(loom_tensor *t) {
  size_t n = (size_t)loom_shape_numel(t->ndim, t->shape) * loom_dtype_size(t->dtype);
  if (!n) return LOOM_OK;
  loom_cuda_ctx *ctx = loom_cuda_ctx_of(t);
  if (!ctx) return loom_last_status();
  LOOM_CUDA_CHECK(cudaMemsetAsync(loom_tensor_ptr(t), 0, n, ctx->stream));
  return LOOM_OK;
}

/* ---- the kernels ------------------------------------------------------------------------- */
loom_status loom_cuda_conv2d(loom_op_args *a) {
  loom_tensor *x = a->in[0], *w = a->in[1], *b = a->n_in > 2 ? a->in[2] : NULL, *y = a->out[0];
  loom_conv_geom g;
  LOOM_TRY(loom_conv_geom_make("conv2d", x, w, b, a->i, &g));
  if (loom_shape_numel(4, y->shape) == 0) return LOOM_OK;
  if (g.C == 0) {
    /* Nothing to convolve: y = act(bias) (or zeros). */
    LOOM_TRY(zero_fill(y));
  }
  bool relu = g.act == LOOM_ACT_RELU;
  loom_tensor *wc = weight_for(w, g.nhwc);
  if (!wc) return loom_last_status();
  dnn_call c = {.dev = y->storage->device, .g = &g, .x = x, .w = wc, .y = y, .b = b};
  loom_status st = LOOM_ERR_UNSUPPORTED;
  if (g.C > 0 && (b || relu) && !__atomic_load_n(&g_force_unfused, __ATOMIC_RELAXED)) {
    c.kind = b && relu ? FWD_BIAS_RELU : b ? FWD_BIAS : FWD_RELU;
    st = run_plan_aligned(c);
    if (st == LOOM_OK) count(3);
  }
  if (st == LOOM_ERR_UNSUPPORTED) {
    /* The plain convolution, then loom's own bias and ReLU kernels. */
    c.kind = FWD;
    c.b = NULL;
    st = g.C > 0 ? run_plan_aligned(c) : LOOM_OK;
    if (st == LOOM_ERR_UNSUPPORTED) {
      st = loom_cuda_conv_gemm_forward(&g, x, w, y);
      if (st == LOOM_OK) count(5);
    }
    if (st == LOOM_OK && b) {
      int64_t bs[4] = {1, g.O, 1, 1}, bst[4] = {0, b->strides[0], 0, 0};
      loom_tensor *bv = loom_tensor_new_header(b->storage, b->offset, b->dtype, 4, bs, bst);
      if (!bv) st = loom_last_status();
      else {
        loom_op_args ad = {.in = {y, bv}, .n_in = 2, .out = {y}, .n_out = 1};
        st = loom_op_run_into(LOOM_OP_ADD, &ad);
        loom_tensor_release(bv);
      }
    }
    if (st == LOOM_OK && relu) {
      loom_op_args ar = {.in = {y}, .n_in = 1, .out = {y}, .n_out = 1};
      st = loom_op_run_into(LOOM_OP_RELU, &ar);
    }
    if (st == LOOM_OK && (b || relu)) count(4);
  }
  loom_tensor_release(wc);
  return st;
}

loom_status loom_cuda_conv2d_backward(loom_op_args *a) {
  loom_tensor *gy = a->in[0], *x = a->in[1], *w = a->in[2], *y = a->n_in > 3 ? a->in[3] : NULL;
  loom_tensor *dx = a->out[0], *dw = a->out[1], *db = a->out[2];
  loom_conv_geom g;
  LOOM_TRY(loom_conv_geom_make("conv2d backward", x, w, NULL, a->i, &g));
  if (loom_shape_numel(4, gy->shape) == 0 || g.C == 0) {
    for (int k = 0; k < 3; k++)
      if (a->out[k]) LOOM_TRY(zero_fill(a->out[k]));
    return LOOM_OK;
  }
  loom_status st = LOOM_OK;
  /* dZ = dY * (y > 0): over dY when the engine owns it, else a scratch. */
  loom_tensor *dz = loom_tensor_retain(gy);
  if (g.act == LOOM_ACT_RELU) {
    loom_tensor *t = a->i[LOOM_CONV_I_GY_OWNED] ? loom_tensor_retain(gy) : scratch(gy, gy->dtype, g.nhwc);
    if (!t) st = loom_last_status();
    else {
      loom_op_args ar = {.in = {gy, y}, .n_in = 2, .out = {t}, .n_out = 1};
      st = loom_op_run_into(LOOM_OP_RELU_BACKWARD, &ar);
      if (t == gy) loom_tensor_bump_version(gy);
      loom_tensor_release(dz);
      dz = t;
    }
  }
  if (st == LOOM_OK && db) {
    loom_op_args as = {.in = {dz}, .n_in = 1, .out = {db}, .n_out = 1};
    as.i[0] = (1 << 0) | (1 << 2) | (1 << 3);
    as.i[1] = 0;
    st = loom_op_run_into(LOOM_OP_SUM, &as);
  }
  loom_tensor *wc = NULL;
  if (st == LOOM_OK && dx) {
    wc = weight_for(w, g.nhwc);
    if (!wc) st = loom_last_status();
    else {
      dnn_call c = {.dev = x->storage->device, .kind = BWD_DATA, .g = &g, .x = dx, .w = wc, .y = dz};
      st = run_plan_aligned(c);
      if (st == LOOM_ERR_UNSUPPORTED) {
        st = loom_cuda_conv_gemm_backward_data(&g, dz, w, dx);
        if (st == LOOM_OK) count(5);
      }
    }
  }
  if (st == LOOM_OK && dw) {
    /* NHWC: the engines want the weight gradient channels-last too. */
    loom_tensor *dwc = g.nhwc ? scratch(dw, dw->dtype, true) : loom_tensor_retain(dw);
    if (!dwc) st = loom_last_status();
    else {
      dnn_call c = {.dev = x->storage->device, .kind = BWD_FILTER, .g = &g, .x = x, .w = dwc, .y = dz};
      st = run_plan_aligned(c);
      if (st == LOOM_ERR_UNSUPPORTED) {
        st = loom_cuda_conv_gemm_backward_filter(&g, dz, x, dw);  /* dw: contiguous, written directly */
        if (st == LOOM_OK) count(5);
      } else if (st == LOOM_OK && dwc != dw) {
        st = loom_cuda_copy_into(dw, dwc);
      }
      loom_tensor_release(dwc);
    }
  }
  loom_tensor_release(wc);
  loom_tensor_release(dz);
  return st;
}
#endif
#endif
