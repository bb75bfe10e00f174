/* dist.h — data parallelism (docs/design.md §10): communicators and data-parallel
 * training.
 *
 * Communicators. A loom_comm is one rank of a group of ranks that run
 * collectives together: all-reduce (sum, average, max), broadcast,
 * all-gather and barrier, in place on dense tensors. Two real back ends, never
 * a home-made transport:
 *   - NCCL for CUDA tensors: one process per GPU (loom_comm_init; the NCCL
 *     unique id travels over MPI when launched by mpirun/srun, or through a
 *     file in a shared directory, LOOM_DIST_INIT=file:/path), or one process
 *     driving all local GPUs (loom_comm_init_all, ncclCommInitAll).
 *   - MPI (OpenMPI or MPICH) for CPU tensors: rank and world size come from
 *     the launcher (mpirun, mpiexec, srun); nothing of loom's own is needed.
 * A third, SINGLE, is a world of one process (collectives are local), so the
 * same training code runs unlaunched.
 *
 * Streams. A collective is ordered after the work already queued on its
 * tensor's device (the current compute stream) and runs on the
 * communicator's own communication stream: it returns at once (NCCL: queued
 * on the GPU; MPI: handed to the communicator's communication thread).
 * Do not touch the tensor until loom_comm_wait (the compute stream waits for
 * every collective issued so far; on a GPU without a host sync) or
 * loom_comm_synchronize (the host waits). The communicator keeps the tensor
 * alive until then.
 *
 * Failure. Nothing waits forever: every wait is bounded by the
 * communicator's timeout (options.timeout_s, LOOM_DIST_TIMEOUT, default 300 s).
 * A collective that does not complete in time (another rank failed, was
 * killed, or stopped calling collectives), an MPI or NCCL error, or an NCCL
 * asynchronous error (ncclCommGetAsyncError, polled while waiting) fails the
 * communicator: that call and every later one return LOOM_ERR_COMM with a
 * message naming the collective; NCCL communicators are aborted
 * (ncclCommAbort, which does not hang). Free it; a new one may be created.
 * Collectives must be issued in the same order, with the same sizes and
 * dtypes, on every rank (as in MPI and NCCL).
 *
 * Environment variables and the options fields that do the same:
 *   LOOM_DIST_INIT=mpi|file:/path|single   options.init
 *   LOOM_DIST_RANK, LOOM_DIST_WORLD_SIZE    options.rank, options.world_size
 *                                           (file rendezvous without MPI)
 *   LOOM_DIST_LOCAL_RANK                    options.device (which local GPU a
 *                                           file-rendezvous rank drives)
 *   LOOM_DIST_TIMEOUT=seconds               options.timeout_s, loom_comm_set_timeout
 * Unknown values are errors.
 *
 * Threads: a communicator is driven by one thread at a time. Creating and
 * freeing communicators may happen on several threads. loom_dist_finalize is
 * called once, after every communicator is freed. */
#ifndef LOOM_DIST_H
#define LOOM_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "export.h"
#include "status.h"
#include "device.h"
#include "tensor.h"
#include "nn.h"
#include "optim.h"
#include "amp.h"

LOOM_EXTERN_C_BEGIN

/* ---- launch environment ----------------------------------------------------- */

/* What the launcher says about this process, read from its environment
 * (OpenMPI, MPICH/Hydra, PMIx, Slurm, or LOOM_DIST_*), before any
 * communicator exists: lets a trainer pick its device and shard early. */
typedef struct loom_dist_env {
  size_t struct_size;    /* sizeof(loom_dist_env), set by the caller */
  bool launched;         /* started by a launcher (or LOOM_DIST_INIT is set) */
  int32_t rank;          /* 0 when not launched */
  int32_t world_size;    /* 1 when not launched */
  int32_t local_rank;    /* rank among the processes on this machine (0) */
  int32_t local_size;    /* processes on this machine (1) */
  const char *launcher;  /* "openmpi", "mpich", "pmix", "slurm", "loom" or "none" */
} loom_dist_env;

LOOM_API loom_status loom_dist_env_get(loom_dist_env *out);
/* Whether this build has the MPI / NCCL back ends. */
LOOM_API bool loom_dist_have_mpi(void);
LOOM_API bool loom_dist_have_nccl(void);

/* ---- communicators ------------------------------------------------------------ */

typedef struct loom_comm loom_comm;

/* Append-only. */
typedef enum loom_comm_backend {
  LOOM_COMM_AUTO = 0,    /* NCCL for a CUDA device; MPI for the CPU when launched; else SINGLE */
  LOOM_COMM_SINGLE = 1,  /* a world of one process: collectives are local */
  LOOM_COMM_MPI = 2,     /* CPU tensors over MPI */
  LOOM_COMM_NCCL = 3,    /* CUDA tensors over NCCL */
} loom_comm_backend;

/* Append-only. */
typedef enum loom_reduce_op {
  LOOM_REDUCE_SUM = 0,
  LOOM_REDUCE_AVG = 1,   /* sum / world size (floats: each input is scaled by 1/world first,
                            as NCCL does; integers: the sum divided, truncating) */
  LOOM_REDUCE_MAX = 2,
} loom_reduce_op;

typedef struct loom_comm_options {
  size_t struct_size;     /* sizeof(loom_comm_options) */
  int32_t backend;        /* loom_comm_backend (AUTO) */
  loom_device device;     /* the device this rank drives (cpu); {LOOM_CUDA, -1}: the GPU
                             numbered by this process's local rank */
  const char *init;       /* rendezvous (NULL: LOOM_DIST_INIT, else "mpi" when launched by
                             MPI, else "single"): "mpi", "file:/shared/dir/file", "single" */
  int32_t rank;           /* file rendezvous: this rank (-1: LOOM_DIST_RANK) */
  int32_t world_size;     /* file rendezvous: ranks in all (-1: LOOM_DIST_WORLD_SIZE) */
  double timeout_s;       /* bound on every wait (0: LOOM_DIST_TIMEOUT, else 300) */
  bool set_threads;       /* true: unless threads were set explicitly (loom_set_num_threads,
                             OMP_NUM_THREADS), CPU threads := the cores this process may
                             use / the ranks sharing them (loom_dist_default_threads) */
} loom_comm_options;

/* Sets struct_size and every default (noted beside each field). */
LOOM_API void loom_comm_options_init(loom_comm_options *o);
/* One rank of a group of processes (or the SINGLE world). Collective across
 * the group: every rank calls it; bounded by the timeout. o NULL: the
 * defaults. */
LOOM_API loom_status loom_comm_init(const loom_comm_options *o, loom_comm **out);
/* One process driving n local GPUs (ncclCommInitAll): comms[i] is rank i,
 * on cuda:cuda_indices[i] (NULL: cuda:0..n-1). Each comm is then driven by
 * its own thread (loom_dist_run does that), or by one thread inside
 * loom_comm_group_begin/end. Two indices on one physical GPU (virtual
 * devices) are refused: NCCL needs one GPU per rank. o may be NULL. */
LOOM_API loom_status loom_comm_init_all(int n, const int *cuda_indices, const loom_comm_options *o,
                                        loom_comm **comms);
/* Waits (bounded) for outstanding collectives, then frees. NULL is a no-op. */
LOOM_API void loom_comm_free(loom_comm *c);

LOOM_API int loom_comm_rank(const loom_comm *c);
LOOM_API int loom_comm_size(const loom_comm *c);
LOOM_API int loom_comm_local_rank(const loom_comm *c);
LOOM_API int loom_comm_local_size(const loom_comm *c);
LOOM_API loom_device loom_comm_device(const loom_comm *c);
LOOM_API loom_comm_backend loom_comm_get_backend(const loom_comm *c);
/* "auto", "single", "mpi", "nccl" ("?" if invalid). */
LOOM_API const char *loom_comm_backend_name(loom_comm_backend b);
/* The communication stream (a CUDA stream for NCCL; the CPU stream otherwise). */
LOOM_API loom_stream *loom_comm_stream(loom_comm *c);
LOOM_API loom_status loom_comm_set_timeout(loom_comm *c, double seconds);
LOOM_API double loom_comm_get_timeout(const loom_comm *c);

/* In place on a dense (contiguous) tensor of any dtype on the comm's device. */
LOOM_API loom_status loom_comm_all_reduce(loom_comm *c, loom_tensor *t, loom_reduce_op op);
/* t <- root's t. */
LOOM_API loom_status loom_comm_broadcast(loom_comm *c, loom_tensor *t, int root);
/* out (world_size * numel(in) elements, same dtype) <- every rank's in, in rank order. */
LOOM_API loom_status loom_comm_all_gather(loom_comm *c, loom_tensor *in, loom_tensor *out);
/* Returns when every rank has reached it (host-blocking, bounded). */
LOOM_API loom_status loom_comm_barrier(loom_comm *c);
/* The device's compute stream waits for every collective issued so far (a
 * GPU: an event, no host sync; the CPU: the host waits, bounded). */
LOOM_API loom_status loom_comm_wait(loom_comm *c);
/* The host waits for every collective issued so far (bounded by the timeout,
 * polling NCCL's asynchronous errors). */
LOOM_API loom_status loom_comm_synchronize(loom_comm *c);
/* LOOM_OK, or the error that failed the communicator (polls NCCL's
 * asynchronous error without waiting). */
LOOM_API loom_status loom_comm_check(loom_comm *c);
/* Fail the communicator now (e.g. this rank hit an error and will stop
 * issuing collectives): NCCL: ncclCommAbort, outstanding work is dropped;
 * MPI: outstanding collectives are abandoned, later calls fail. Never hangs. */
LOOM_API loom_status loom_comm_abort(loom_comm *c);
/* Group the collectives issued on several NCCL communicators by one thread
 * (ncclGroupStart/End); no-ops for the other back ends. Per thread. */
LOOM_API loom_status loom_comm_group_begin(void);
LOOM_API loom_status loom_comm_group_end(void);

/* CPU threads for one rank: the cores this process may use (its affinity
 * mask) divided by the ranks on this machine whose masks overlap it, at
 * least 1. */
LOOM_API int loom_dist_default_threads(const loom_comm *c);

/* Finalize MPI if loom initialized it (also done at exit). After a failed
 * MPI communicator MPI cannot always be finalized cleanly: returns
 * LOOM_ERR_COMM and leaves it; exit with a non-zero status then. */
LOOM_API loom_status loom_dist_finalize(void);

/* ---- running replicas ------------------------------------------------------------ */

typedef struct loom_dist_run_options {
  size_t struct_size;       /* sizeof(loom_dist_run_options) */
  int32_t gpus;             /* 0: one replica in this process, the comm from
                               loom_comm_init(&comm); -1: every local GPU; N: N
                               local GPUs (one process, one thread per GPU,
                               loom_comm_init_all) */
  loom_comm_options comm;   /* loom_comm_options_init's defaults */
} loom_dist_run_options;

/* Sets struct_size and every default (gpus 0, comm initialized too). */
LOOM_API void loom_dist_run_options_init(loom_dist_run_options *o);
/* The trainer's body, run once per replica with that replica's communicator
 * (borrowed; freed after fn returns). Rank 0 is the one that prints. */
typedef loom_status (*loom_dist_worker)(loom_comm *comm, void *user);
/* Create the communicator(s), run fn for each replica (on the calling thread
 * for one replica, on one thread per GPU for --gpus), free them. Returns the
 * first failure (the other replicas' communicators are aborted so they stop
 * waiting). */
LOOM_API loom_status loom_dist_run(const loom_dist_run_options *o, loom_dist_worker fn, void *user);

/* ---- data-parallel training ------------------------------------------------------- */

typedef struct loom_ddp loom_ddp;

typedef struct loom_ddp_options {
  size_t struct_size;       /* sizeof(loom_ddp_options) */
  double first_bucket_mib;  /* the first bucket (the last layers' gradients) (1) */
  double bucket_mib;        /* the following buckets (25) */
  bool reduce_in_fp32;      /* under a mixed policy, cast the f16/bf16 gradients to f32 and
                               all-reduce those (false: all-reduce the low-precision
                               gradients, half the bytes) */
  bool broadcast_buffers;   /* broadcast buffers (BatchNorm statistics) from rank 0 at start (true) */
} loom_ddp_options;

/* Sets struct_size and every default (noted beside each field). */
LOOM_API void loom_ddp_options_init(loom_ddp_options *o);

/* Data parallelism for model m over communicator c (both borrowed; they
 * outlive the ddp). Collective: checks that every rank has the same model,
 * broadcasts parameters and buffers from rank 0, plans the gradient buckets
 * (reverse registration order; a bucket never mixes dtypes; a parameter
 * larger than a bucket gets one to itself) and installs a grad-ready hook on
 * each parameter (on its low-precision copy under a mixed policy: set the
 * policy first). The hooks replace any hook the user had set.
 *
 * The step:
 *     loss = ...forward...;
 *     loom_optimizer_zero_grad(opt);
 *     loom_backward(loss);           // each full bucket is all-reduced (average) as soon as
 *                                     // its last gradient is ready, while backward goes on
 *     loom_ddp_sync(ddp);            // the rest; the compute stream waits on the last bucket
 *     loom_optimizer_step(opt);      // or loom_scaler_step(scaler, opt, &skipped)
 * Gradients end up as views of the buckets (averaged over the ranks). */
LOOM_API loom_ddp *loom_ddp_new(loom_module *m, loom_comm *c, const loom_ddp_options *o);
/* Waits (bounded) for in-flight buckets, removes the hooks, detaches the
 * scaler. NULL is a no-op. */
LOOM_API void loom_ddp_free(loom_ddp *d);
/* false: backward accumulates gradients locally without communicating
 * (no_sync; for all but the last micro-batch of an accumulated step); true
 * (the default): backward all-reduces. */
LOOM_API loom_status loom_ddp_set_sync(loom_ddp *d, bool sync);
LOOM_API bool loom_ddp_get_sync(const loom_ddp *d);
/* After a synchronizing backward, before the optimizer: all-reduces the
 * buckets not launched yet (a parameter that got no gradient on this rank
 * contributes zeros and then holds the average), makes the compute stream
 * wait for the last bucket, and returns the first error of the step's hooks
 * or collectives. No-op while sync is false. */
LOOM_API loom_status loom_ddp_sync(loom_ddp *d);
/* Agree the scaler's found-inf flag across ranks (max): every rank then
 * skips the same steps and backs off the same way. NULL detaches. Free the
 * ddp (or detach) before the scaler. */
LOOM_API loom_status loom_ddp_attach_scaler(loom_ddp *d, loom_grad_scaler *s);
/* Broadcast the model's buffers from rank 0 now (e.g. before evaluating or
 * saving, as BatchNorm statistics drift apart per rank). */
LOOM_API loom_status loom_ddp_broadcast_buffers(loom_ddp *d);

typedef struct loom_ddp_bucket_info {
  size_t struct_size;       /* sizeof(loom_ddp_bucket_info), set by the caller */
  int32_t n_params;
  int32_t first_param;      /* index (loom_module_param order) of its last-registered parameter */
  int32_t last_param;       /* index of its first-registered parameter */
  int64_t numel;
  int64_t bytes;
  loom_dtype dtype;         /* the dtype it is all-reduced in */
} loom_ddp_bucket_info;

LOOM_API int loom_ddp_num_buckets(const loom_ddp *d);
/* Bucket i in launch order (0 is launched first). */
LOOM_API loom_status loom_ddp_bucket_get(const loom_ddp *d, int i, loom_ddp_bucket_info *out);

typedef struct loom_ddp_stats {
  size_t struct_size;        /* sizeof(loom_ddp_stats), set by the caller */
  int64_t steps;             /* loom_ddp_sync calls that communicated */
  int64_t buckets;           /* bucket all-reduces */
  int64_t bytes;             /* bytes all-reduced (per rank) */
  double exposed_seconds;    /* host time spent in loom_ddp_sync waiting for buckets */
  /* Measured on the CPU (MPI) back end, where the communication thread time-
   * stamps each bucket; 0 elsewhere. */
  double comm_seconds;       /* sum of the bucket all-reduce times */
  double hidden_seconds;     /* the part of comm_seconds before loom_ddp_sync was called */
  double comm_seconds_but_last;    /* the same, leaving out the bucket launched last */
  double hidden_seconds_but_last;  /* (it cannot start before backward ends) */
} loom_ddp_stats;

LOOM_API loom_status loom_ddp_stats_get(const loom_ddp *d, loom_ddp_stats *out);
LOOM_API void loom_ddp_stats_reset(loom_ddp *d);

/* The linear scaling rule (Goyal et al. 2017, as TensorFlow's
 * MirroredStrategy guide applies it): the schedule's base_lr and min_lr
 * times world_size, reached by a linear warm-up over at least warmup_steps
 * (a longer warm-up already in s is kept). */
LOOM_API loom_lr_schedule loom_lr_scale_for_world(loom_lr_schedule s, int world_size, int64_t warmup_steps);

LOOM_EXTERN_C_END
#endif
