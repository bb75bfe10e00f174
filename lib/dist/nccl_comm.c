/* nccl_comm.c — the NCCL back end (CUDA tensors).
 *
 * One process per GPU: ncclCommInitRank with the unique id handed out by
 * rank 0 over MPI (mpirun/srun launches) or through a shared file
 * (LOOM_DIST_INIT=file:/path); the communicator is created non-blocking
 * (config.blocking = 0) so that its creation, like every later wait, is
 * polled against the timeout and aborted (ncclCommAbort) instead of hanging
 * when a rank does not show up. One process driving all local GPUs:
 * ncclCommInitAll.
 *
 * Each communicator has its own communication stream. A collective first
 * makes that stream wait on an event recorded on the device's compute stream
 * (so it sees the finished gradients), runs there, and tells the allocator
 * the tensor is in use on it (loom_tensor_record_stream); loom_comm_wait
 * makes the compute stream wait on the communication stream's latest event,
 * without a host sync. Host waits poll the event and ncclCommGetAsyncError.
 *
 * NOTE: no GPU has run this file yet (the development machines have none);
 * it compiles and links against NCCL 2.28. */
#include "dist/dist_internal.h"
#include "dist/mpi_runtime.h"  /* the NCCL id rendezvous over MPI */
#include "core/sys.h"

#ifndef LOOM_HAVE_NCCL

static loom_status no_nccl(const char *what) {
  return loom_set_error(LOOM_ERR_UNSUPPORTED,
                        "%s: this loom was built without NCCL (needs the CUDA toolkit and NCCL; see cmake/FindNCCL.cmake)",
                        what);
}
loom_status loom_nccl_comm_init(loom_device dev, const loom_nccl_rendezvous *rv, double timeout_s, loom_comm **out) {
  (void)dev, (void)rv, (void)timeout_s, (void)out;
  return no_nccl("comm_init (NCCL back end)");
}
loom_status loom_nccl_comm_init_all(int n, const int *cuda_indices, double timeout_s, loom_comm **comms) {
  (void)n, (void)cuda_indices, (void)timeout_s, (void)comms;
  return no_nccl("comm_init_all");
}
loom_status loom_nccl_group_begin(void) { return LOOM_OK; }
loom_status loom_nccl_group_end(void) { return LOOM_OK; }

#else

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_internal.h"
#include "loom/alloc.h"
#include "loom/log.h"

typedef struct nccl_impl {
  ncclComm_t comm;
  bool nonblocking;       /* created with config.blocking = 0 */
  bool aborted;
  loom_stream *stream;    /* the communication stream (owned) */
  loom_event *ready;      /* compute -> communication */
  loom_event *done;       /* communication -> compute / host */
  loom_tensor *barrier_word;  /* one int32 on the device, for barrier() */
  loom_tensor **inflight; /* retained until the next wait/synchronize */
  int n_inflight, cap_inflight;
} nccl_impl;

/* Collectives issued inside loom_comm_group_begin/end on this thread, to
 * wait for their communicators after ncclGroupEnd (non-blocking comms). */
#define MAX_GROUP_COMMS 64
static _Thread_local int tl_group_depth;
static _Thread_local loom_comm *tl_group_comms[MAX_GROUP_COMMS];
static _Thread_local int tl_group_n;

static bool dtype_of(loom_dtype dt, ncclDataType_t *out) {
  switch (dt) {
    case LOOM_F32: *out = ncclFloat32; return true;
    case LOOM_F16: *out = ncclFloat16; return true;
    case LOOM_BF16: *out = ncclBfloat16; return true;
    case LOOM_I32: *out = ncclInt32; return true;
    case LOOM_I64: *out = ncclInt64; return true;
    case LOOM_U8: *out = ncclUint8; return true;
  }
  return false;
}

static ncclRedOp_t op_of(loom_reduce_op op) {
  return op == LOOM_REDUCE_MAX ? ncclMax : op == LOOM_REDUCE_AVG ? ncclAvg : ncclSum;
}

static void do_abort(nccl_impl *n) {
  if (n->comm && !n->aborted) {
    ncclCommAbort(n->comm);  /* with a non-blocking comm, returns without waiting for peers */
    n->aborted = true;
  }
}

/* Fail the communicator with NCCL's words, abort it. */
static loom_status nccl_fail(loom_comm *c, ncclResult_t r, const char *what) {
  nccl_impl *n = c->impl;
  const char *last = n && n->comm ? ncclGetLastError(n->comm) : NULL;
  loom_status st = loom_comm_fail(c, LOOM_ERR_COMM, "%s failed on rank %d of %d (cuda:%d): NCCL %s%s%s%s", what, c->rank,
                                  c->size, c->device.index, ncclGetErrorString(r), last && *last ? " (" : "",
                                  last ? last : "", last && *last ? ")" : "");
  if (n) do_abort(n);
  return st;
}

/* Until a non-blocking communicator leaves ncclInProgress; bounded. */
static ncclResult_t wait_ready(ncclComm_t comm, double deadline) {
  for (int it = 0;; it++) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (loom_dist_now() > deadline) return ncclInProgress;
    loom_dist_pause(it, 1000);
  }
}

static loom_status finish_call(loom_comm *c, ncclResult_t r, const char *what) {
  nccl_impl *n = c->impl;
  if (r == ncclInProgress && tl_group_depth == 0) r = wait_ready(n->comm, loom_dist_now() + c->timeout_s);
  if (r == ncclInProgress && tl_group_depth == 0) {
    do_abort(n);
    return loom_comm_fail(c, LOOM_ERR_COMM, "%s did not start within the %g s timeout on rank %d of %d (cuda:%d): a rank "
                          "is missing; the communicator was aborted", what, c->timeout_s, c->rank, c->size, c->device.index);
  }
  if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(c, r, what);
  if (tl_group_depth > 0 && tl_group_n < MAX_GROUP_COMMS) {
    bool seen = false;
    for (int i = 0; i < tl_group_n; i++) seen = seen || tl_group_comms[i] == c;
    if (!seen) tl_group_comms[tl_group_n++] = c;
  }
  return LOOM_OK;
}

/* Order the communication stream after the compute stream and keep the
 * tensors alive (and their blocks reserved) until the collective is done. */
static loom_status prepare(loom_comm *c, loom_tensor *t, loom_tensor *t2) {
  nccl_impl *n = c->impl;
  LOOM_TRY(loom_cuda_set_device(c->device.index));
  loom_stream *compute = loom_stream_current(c->device);
  if (!compute) return loom_last_status();
  LOOM_TRY(loom_event_record(n->ready, compute));
  LOOM_TRY(loom_stream_wait_event(n->stream, n->ready));
  loom_tensor *ts[2] = {t, t2};
  for (int k = 0; k < 2; k++) {
    if (!ts[k]) continue;
    LOOM_TRY(loom_tensor_record_stream(ts[k], n->stream));
    if (n->n_inflight == n->cap_inflight) {
      int nc = n->cap_inflight ? 2 * n->cap_inflight : 16;
      loom_tensor **p = loom_sys_realloc(n->inflight, (size_t)nc * sizeof *p);
      if (!p) return loom_set_error(LOOM_ERR_OOM, "NCCL: out of host memory");
      n->inflight = p;
      n->cap_inflight = nc;
    }
    n->inflight[n->n_inflight++] = loom_tensor_retain(ts[k]);
  }
  return LOOM_OK;
}

static void release_inflight(nccl_impl *n) {
  for (int i = 0; i < n->n_inflight; i++) loom_tensor_release(n->inflight[i]);
  n->n_inflight = 0;
}

static cudaStream_t native(nccl_impl *n) { return (cudaStream_t)loom_stream_native(n->stream); }

static loom_status n_all_reduce(loom_comm *c, loom_tensor *t, loom_reduce_op op, loom_comm_times *times) {
  (void)times;
  nccl_impl *n = c->impl;
  ncclDataType_t dt;
  if (!dtype_of(t->dtype, &dt)) return loom_set_error(LOOM_ERR_DTYPE, "all_reduce: NCCL has no %s", loom_dtype_name(t->dtype));
  LOOM_TRY(prepare(c, t, NULL));
  void *p = loom_tensor_ptr(t);
  size_t count = (size_t)loom_shape_numel(t->ndim, t->shape);
  loom_status st = finish_call(c, ncclAllReduce(p, p, count, dt, op_of(op), n->comm, native(n)), "ncclAllReduce");
  if (st == LOOM_OK) loom_tensor_bump_version(t);
  return st;
}

static loom_status n_broadcast(loom_comm *c, loom_tensor *t, int root) {
  nccl_impl *n = c->impl;
  ncclDataType_t dt;
  if (!dtype_of(t->dtype, &dt)) return loom_set_error(LOOM_ERR_DTYPE, "broadcast: NCCL has no %s", loom_dtype_name(t->dtype));
  LOOM_TRY(prepare(c, t, NULL));
  void *p = loom_tensor_ptr(t);
  size_t count = (size_t)loom_shape_numel(t->ndim, t->shape);
  loom_status st = finish_call(c, ncclBroadcast(p, p, count, dt, root, n->comm, native(n)), "ncclBroadcast");
  if (st == LOOM_OK) loom_tensor_bump_version(t);
  return st;
}

static loom_status n_all_gather(loom_comm *c, loom_tensor *in, loom_tensor *out) {
  nccl_impl *n = c->impl;
  ncclDataType_t dt;
  if (!dtype_of(in->dtype, &dt)) return loom_set_error(LOOM_ERR_DTYPE, "all_gather: NCCL has no %s", loom_dtype_name(in->dtype));
  LOOM_TRY(prepare(c, in, out));
  size_t count = (size_t)loom_shape_numel(in->ndim, in->shape);
  loom_status st = finish_call(c, ncclAllGather(loom_tensor_ptr(in), loom_tensor_ptr(out), count, dt, n->comm, native(n)),
                               "ncclAllGather");
  if (st == LOOM_OK) loom_tensor_bump_version(out);
  return st;
}

static loom_status n_wait(loom_comm *c) {
  nccl_impl *n = c->impl;
  LOOM_TRY(loom_cuda_set_device(c->device.index));
  loom_stream *compute = loom_stream_current(c->device);
  if (!compute) return loom_last_status();
  LOOM_TRY(loom_event_record(n->done, n->stream));
  LOOM_TRY(loom_stream_wait_event(compute, n->done));
  /* Safe now: the allocator holds the blocks for the communication stream
   * (record_stream), and later compute work is ordered after it. */
  release_inflight(n);
  return loom_comm_failed_error(c, "comm_wait");
}

static loom_status n_check(loom_comm *c) {
  nccl_impl *n = c->impl;
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(n->comm, &state);
  if (r != ncclSuccess) return nccl_fail(c, r, "ncclCommGetAsyncError");
  if (state != ncclSuccess && state != ncclInProgress) return nccl_fail(c, state, "a collective (asynchronous error)");
  return LOOM_OK;
}

static loom_status n_synchronize(loom_comm *c) {
  nccl_impl *n = c->impl;
  LOOM_TRY(loom_cuda_set_device(c->device.index));
  LOOM_TRY(loom_event_record(n->done, n->stream));
  double deadline = loom_dist_now() + c->timeout_s;
  for (int it = 0;; it++) {
    int q = loom_event_query(n->done);
    if (q < 0) {
      do_abort(n);
      return loom_comm_fail(c, LOOM_ERR_COMM, "waiting for the communication stream failed: %s", loom_last_error());
    }
    if (q == 1) break;
    LOOM_TRY(n_check(c));
    if (loom_dist_now() > deadline) {
      do_abort(n);
      return loom_comm_fail(c, LOOM_ERR_COMM,
                            "collectives did not complete within the %g s timeout on rank %d of %d (cuda:%d): another "
                            "rank failed, was killed, or stopped issuing the same collectives; the communicator was "
                            "aborted", c->timeout_s, c->rank, c->size, c->device.index);
    }
    loom_dist_pause(it, 500);
  }
  release_inflight(n);
  LOOM_TRY(n_check(c));
  return loom_comm_failed_error(c, "comm_synchronize");
}

static loom_status n_barrier(loom_comm *c) {
  nccl_impl *n = c->impl;
  /* NCCL has no barrier: a one-word all-reduce, waited for by the host. */
  LOOM_TRY(n_all_reduce(c, n->barrier_word, LOOM_REDUCE_SUM, NULL));
  return n_synchronize(c);
}

static void n_abort(loom_comm *c) { do_abort(c->impl); }

static void n_destroy(loom_comm *c) {
  nccl_impl *n = c->impl;
  if (!n) return;
  if (n->comm && !n->aborted) {
    if (atomic_load(&c->failed) || n_synchronize(c) != LOOM_OK) {
      do_abort(n);
    } else {
      ncclResult_t r = ncclCommFinalize(n->comm);
      if (r == ncclInProgress || (r == ncclSuccess && n->nonblocking))
        r = wait_ready(n->comm, loom_dist_now() + c->timeout_s);
      if (r != ncclSuccess) do_abort(n);
      else ncclCommDestroy(n->comm);
    }
  }
  release_inflight(n);
  loom_sys_free(n->inflight);
  loom_tensor_release(n->barrier_word);
  loom_event_free(n->ready);
  loom_event_free(n->done);
  loom_stream_free(n->stream);
  loom_sys_free(n);
  c->impl = NULL;
}

static loom_stream *n_stream(loom_comm *c) { return ((nccl_impl *)c->impl)->stream; }

static const loom_comm_ops nccl_ops = {n_all_reduce, n_broadcast, n_all_gather, n_barrier, n_wait,
                                       n_synchronize, n_check, n_abort, n_destroy, n_stream};

/* The communicator's stream, events and barrier word (comm already set). */
static loom_status attach(loom_comm *c, nccl_impl *n) {
  c->impl = n;
  c->ops = &nccl_ops;
  LOOM_TRY(loom_stream_create(c->device, &n->stream));
  LOOM_TRY(loom_event_create(c->device, &n->ready));
  LOOM_TRY(loom_event_create(c->device, &n->done));
  int64_t one = 1;
  n->barrier_word = loom_tensor_alloc_raw(1, &one, LOOM_I32, c->device);
  if (!n->barrier_word) return loom_last_status();
  return loom_fill_(n->barrier_word, 0.0);
}

static loom_status gpu_uuid(int index, unsigned char uuid[16]) {
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, loom_device_physical(index));
  if (e != cudaSuccess) return loom_cuda_error(e, "cudaGetDeviceProperties", __FILE__, __LINE__);
  memcpy(uuid, prop.uuid.bytes, 16);
  return LOOM_OK;
}

loom_status loom_nccl_comm_init(loom_device dev, const loom_nccl_rendezvous *rv, double timeout_s, loom_comm **out) {
  if (!loom_device_is_real_cuda(dev))
    return loom_set_error(LOOM_ERR_DEVICE, "comm_init: cuda:%d is not a CUDA device NCCL can use", dev.index);
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  bool mpi = !strcmp(rv->method, "mpi"), file = !strcmp(rv->method, "file");
  if (mpi) {
    LOOM_TRY(loom_mpi_world(&rank, &size, &local_rank, &local_size));
  } else if (file) {
    rank = rv->rank;
    size = rv->size;
    loom_dist_env e = {.struct_size = sizeof e};
    if (loom_dist_env_get(&e) == LOOM_OK) {
      local_rank = e.local_rank;
      local_size = e.local_size;
    }
  }
  /* Two ranks on one GPU cannot work in NCCL; with MPI every rank can
   * compare GPU UUIDs first and refuse with a clear message. */
  if (mpi && size > 1) {
    unsigned char me[16], *all = loom_sys_malloc((size_t)size * 16);
    if (!all) return loom_set_error(LOOM_ERR_OOM, "comm_init: out of host memory");
    loom_status st = gpu_uuid(dev.index, me);
    if (st == LOOM_OK) st = loom_mpi_allgather_bytes(me, all, 16, timeout_s);
    for (int j = 0; j < size && st == LOOM_OK; j++) {
      if (j != rank && !memcmp(all + 16 * j, me, 16))
        st = loom_set_error(LOOM_ERR_DEVICE,
                            "comm_init: ranks %d and %d both drive the same physical GPU (this rank: cuda:%d); NCCL "
                            "needs one GPU per rank: start one rank per GPU, or give each rank its own GPU with "
                            "LOOM_VISIBLE_DEVICES", rank < j ? rank : j, rank < j ? j : rank, dev.index);
    }
    loom_sys_free(all);
    LOOM_TRY(st);
  }
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return loom_set_error(LOOM_ERR_COMM, "comm_init: ncclGetUniqueId: %s", ncclGetErrorString(r));
  }
  if (mpi && size > 1) LOOM_TRY(loom_mpi_bcast_bytes(&id, sizeof id, 0, timeout_s));
  if (file) {
    if (rank == 0) LOOM_TRY(loom_rendezvous_file_publish(rv->path, &id, sizeof id, size));
    else LOOM_TRY(loom_rendezvous_file_read(rv->path, &id, sizeof id, size, timeout_s));
  }
  LOOM_TRY(loom_cuda_set_device(dev.index));
  loom_comm *c = loom_comm_alloc(LOOM_COMM_NCCL, dev, timeout_s);
  if (!c) return loom_last_status();
  c->rank = rank;
  c->size = size;
  c->local_rank = local_rank;
  c->local_size = local_size;
  unsigned char mask[LOOM_DIST_MASK_BYTES];
  c->default_threads = loom_dist_threads_for(loom_dist_affinity(mask, sizeof mask), local_size);
  nccl_impl *n = loom_sys_calloc(1, sizeof *n);
  if (!n) {
    loom_sys_free(c);
    return loom_set_error(LOOM_ERR_OOM, "comm_init: out of host memory");
  }
  n->nonblocking = true;
  c->impl = n;
  c->ops = &nccl_ops;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&n->comm, size, id, rank, &cfg);
  if (r == ncclSuccess || r == ncclInProgress) r = wait_ready(n->comm, loom_dist_now() + timeout_s);
  loom_status st = LOOM_OK;
  if (r == ncclInProgress) {
    do_abort(n);
    st = loom_set_error(LOOM_ERR_COMM,
                        "comm_init: ncclCommInitRank (rank %d of %d, cuda:%d) did not complete within %g s: not every "
                        "rank joined (a stale rendezvous file, a rank that failed to start?); aborted",
                        rank, size, dev.index, timeout_s);
  } else if (r != ncclSuccess) {
    const char *last = n->comm ? ncclGetLastError(n->comm) : "";
    st = loom_set_error(LOOM_ERR_COMM, "comm_init: ncclCommInitRank (rank %d of %d, cuda:%d) failed: %s%s%s%s", rank, size,
                        dev.index, ncclGetErrorString(r), last && *last ? " (" : "", last ? last : "",
                        r == ncclInvalidUsage ? "; two ranks on one GPU? NCCL needs one GPU per rank)" : (last && *last ? ")" : ""));
    do_abort(n);
  }
  if (st == LOOM_OK) st = attach(c, n);
  if (st != LOOM_OK) {
    loom_status keep = st;
    n_destroy(c);
    pthread_mutex_destroy(&c->fail_mu);
    loom_sys_free(c);
    return keep;
  }
  if (file && rank == 0) loom_rendezvous_file_remove(rv->path);  /* every rank has joined */
  loom_log_msg(LOOM_LOG_INFO, "dist: NCCL rank %d of %d on cuda:%d (%s rendezvous)", rank, size, dev.index, rv->method);
  *out = c;
  return LOOM_OK;
}

loom_status loom_nccl_comm_init_all(int n, const int *cuda_indices, double timeout_s, loom_comm **comms) {
  int *phys = loom_sys_calloc((size_t)n, sizeof *phys);
  ncclComm_t *nc = loom_sys_calloc((size_t)n, sizeof *nc);
  if (!phys || !nc) {
    loom_sys_free(phys);
    loom_sys_free(nc);
    return loom_set_error(LOOM_ERR_OOM, "comm_init_all: out of host memory");
  }
  loom_status st = LOOM_OK;
  for (int i = 0; i < n && st == LOOM_OK; i++) {
    int idx = cuda_indices ? cuda_indices[i] : i;
    if (!loom_device_is_real_cuda(loom_cuda(idx)))
      st = loom_set_error(LOOM_ERR_DEVICE, "comm_init_all: cuda:%d is not a CUDA device NCCL can use", idx);
    phys[i] = loom_device_physical(idx);
  }
  if (st == LOOM_OK) {
    ncclResult_t r = ncclCommInitAll(nc, n, phys);
    if (r != ncclSuccess) st = loom_set_error(LOOM_ERR_COMM, "comm_init_all: ncclCommInitAll over %d GPUs failed: %s", n,
                                              ncclGetErrorString(r));
  }
  for (int i = 0; i < n && st == LOOM_OK; i++) {
    int idx = cuda_indices ? cuda_indices[i] : i;
    loom_comm *c = loom_comm_alloc(LOOM_COMM_NCCL, loom_cuda(idx), timeout_s);
    nccl_impl *ni = c ? loom_sys_calloc(1, sizeof *ni) : NULL;
    if (!ni) {
      loom_sys_free(c);
      st = loom_set_error(LOOM_ERR_OOM, "comm_init_all: out of host memory");
      break;
    }
    ni->comm = nc[i];
    nc[i] = NULL;
    c->rank = i;
    c->size = n;
    c->local_rank = i;
    c->local_size = n;
    unsigned char mask[LOOM_DIST_MASK_BYTES];
    c->default_threads = loom_dist_threads_for(loom_dist_affinity(mask, sizeof mask), n);
    comms[i] = c;
    st = loom_cuda_set_device(idx);
    if (st == LOOM_OK) st = attach(c, ni);
    else c->impl = ni, c->ops = &nccl_ops;
  }
  if (st != LOOM_OK) {
    for (int i = 0; i < n; i++) {
      if (nc[i]) ncclCommDestroy(nc[i]);
      if (comms[i]) {
        if (comms[i]->impl) do_abort(comms[i]->impl);
        loom_comm_free(comms[i]);
        comms[i] = NULL;
      }
    }
  }
  loom_sys_free(phys);
  loom_sys_free(nc);
  return st;
}

loom_status loom_nccl_group_begin(void) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return loom_set_error(LOOM_ERR_COMM, "comm_group_begin: ncclGroupStart: %s", ncclGetErrorString(r));
  if (tl_group_depth++ == 0) tl_group_n = 0;
  return LOOM_OK;
}

loom_status loom_nccl_group_end(void) {
  if (tl_group_depth == 0)
    return loom_set_error(LOOM_ERR_STATE, "comm_group_end: no loom_comm_group_begin is open on this thread");
  ncclResult_t r = ncclGroupEnd();
  tl_group_depth--;
  loom_status st = LOOM_OK;
  if (tl_group_depth == 0) {
    for (int i = 0; i < tl_group_n; i++) {
      loom_comm *c = tl_group_comms[i];
      nccl_impl *n = c->impl;
      ncclResult_t ri = r;
      if (ri == ncclInProgress || (ri == ncclSuccess && n->nonblocking))
        ri = wait_ready(n->comm, loom_dist_now() + c->timeout_s);
      if (ri != ncclSuccess && st == LOOM_OK) st = nccl_fail(c, ri, "ncclGroupEnd");
    }
    tl_group_n = 0;
  }
  if (st == LOOM_OK && r != ncclSuccess && r != ncclInProgress)
    st = loom_set_error(LOOM_ERR_COMM, "comm_group_end: ncclGroupEnd: %s", ncclGetErrorString(r));
  return st;
}

#endif
