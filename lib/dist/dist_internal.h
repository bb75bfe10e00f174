/* dist_internal.h (internal) — the communicator object shared by the back
 * ends (single.c, mpi_comm.c, nccl_comm.c), its failure state, and the
 * helpers the back ends and the DDP share. */
#ifndef LOOM_DIST_INTERNAL_H
#define LOOM_DIST_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "loom/dist.h"
#include "tensor/tensor_internal.h"

/* When a collective ran on the communication thread (CLOCK_MONOTONIC
 * seconds; MPI back end only, the others leave them 0). */
typedef struct loom_comm_times {
  double start, end;
} loom_comm_times;

typedef struct loom_comm_ops {
  /* Tensors are validated by comm.c (dense, on the comm's device, matching
   * sizes); the back end may retain them until the work is done. */
  loom_status (*all_reduce)(loom_comm *c, loom_tensor *t, loom_reduce_op op, loom_comm_times *times);
  loom_status (*broadcast)(loom_comm *c, loom_tensor *t, int root);
  loom_status (*all_gather)(loom_comm *c, loom_tensor *in, loom_tensor *out);
  loom_status (*barrier)(loom_comm *c);
  loom_status (*wait)(loom_comm *c);
  loom_status (*synchronize)(loom_comm *c);
  loom_status (*check)(loom_comm *c);   /* may be NULL */
  void (*abort)(loom_comm *c);
  void (*destroy)(loom_comm *c);        /* frees impl (not c) */
  loom_stream *(*stream)(loom_comm *c); /* the communication stream; NULL: the device's current one */
} loom_comm_ops;

struct loom_comm {
  const loom_comm_ops *ops;
  loom_comm_backend backend;
  int rank, size, local_rank, local_size;
  int default_threads;      /* loom_dist_default_threads */
  loom_device device;
  double timeout_s;
  /* The first failure; once set, every call fails with it. Written by any
   * thread (the MPI communication thread too), under fail_mu. */
  pthread_mutex_t fail_mu;
  atomic_int failed;
  loom_status fail_code;
  char fail_msg[768];
  void *impl;
  bool counted;             /* handed to the caller: counted alive until loom_comm_free */
};

#define LOOM_DIST_DEFAULT_TIMEOUT_S 300.0

/* A zeroed communicator with its failure state ready (NULL + error on OOM). */
loom_comm *loom_comm_alloc(loom_comm_backend b, loom_device dev, double timeout_s);
/* Record the communicator's first failure (later ones are ignored) and set
 * this thread's error to it. Returns LOOM_ERR_COMM (or code). */
loom_status loom_comm_fail(loom_comm *c, loom_status code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* If the communicator has failed: set this thread's error to its failure
 * (prefixed with what) and return its code; else LOOM_OK. */
loom_status loom_comm_failed_error(loom_comm *c, const char *what);

/* The all-reduce, with the times it ran at (for the DDP's overlap stats). */
loom_status loom_comm_all_reduce_timed(loom_comm *c, loom_tensor *t, loom_reduce_op op, loom_comm_times *times);

/* Seconds on CLOCK_MONOTONIC. */
double loom_dist_now(void);
/* Sleep a little while polling: yields first, then sleeps longer, at most
 * max_us. iter counts the polls so far. */
void loom_dist_pause(int iter, int max_us);

/* The timeout to use: o_timeout if > 0, else LOOM_DIST_TIMEOUT, else the
 * default. Error on a malformed LOOM_DIST_TIMEOUT. */
loom_status loom_dist_resolve_timeout(double o_timeout, double *out);

/* CPU threads for a process whose ranks on this machine are given by the
 * back end: cpus in this process's affinity mask / sharing ranks (>= 1). */
int loom_dist_threads_for(int cpus_in_mask, int ranks_sharing);
/* CPUs in this process's affinity mask, and the mask itself (CPU_SETSIZE
 * bits as bytes, for exchanging with the other local ranks). */
int loom_dist_affinity(unsigned char *mask, int mask_bytes);
#define LOOM_DIST_MASK_BYTES 128
/* Apply the default thread count unless the user chose one. */
void loom_dist_apply_threads(loom_comm *c);

/* ---- back ends ------------------------------------------------------------ */
loom_status loom_single_comm_init(loom_device dev, double timeout_s, loom_comm **out);

/* MPI (mpi_comm.c; without LOOM_HAVE_MPI it returns LOOM_ERR_UNSUPPORTED).
 * The process-wide MPI runtime it stands on is dist/mpi_runtime.h. */
loom_status loom_mpi_comm_init(loom_device dev, double timeout_s, loom_comm **out);

/* NCCL (nccl_comm.c; without LOOM_HAVE_NCCL they return LOOM_ERR_UNSUPPORTED). */
typedef struct loom_nccl_rendezvous {
  const char *method;   /* "mpi" or "file" */
  const char *path;     /* file: the shared file */
  int rank, size;
} loom_nccl_rendezvous;
loom_status loom_nccl_comm_init(loom_device dev, const loom_nccl_rendezvous *rv, double timeout_s, loom_comm **out);
loom_status loom_nccl_comm_init_all(int n, const int *cuda_indices, double timeout_s, loom_comm **comms);
loom_status loom_nccl_group_begin(void);
loom_status loom_nccl_group_end(void);

/* ---- DDP bucket plan (ddp_plan.c) ---------------------------------------------- */
/* Walk parameters 0..n-1 in reverse (the order backward finishes them) and
 * pack them into buckets: a bucket holds consecutive parameters of one
 * dtype; the first holds up to first_cap bytes, later ones up to cap; a
 * parameter is added while it fits, or when the bucket is empty (so one
 * larger than the cap gets a bucket to itself). bucket_of[i] is parameter
 * i's bucket (0 = launched first), offset_of[i] its element offset there.
 * Returns the number of buckets. */
int loom_ddp_plan(int n, const int64_t *numel, const loom_dtype *dtype, size_t first_cap, size_t cap, int *bucket_of,
                  int64_t *offset_of);

/* ---- file rendezvous (rendezvous.c) ----------------------------------------- */
/* Rank 0 publishes blob (n bytes) at path atomically (write temp, fsync,
 * rename); other ranks wait for it, bounded by timeout_s, and read it. The
 * file also carries world_size, which must agree. */
loom_status loom_rendezvous_file_publish(const char *path, const void *blob, size_t n, int world_size);
loom_status loom_rendezvous_file_read(const char *path, void *blob, size_t n, int world_size, double timeout_s);
/* Rank 0 removes the file once every rank has joined. */
void loom_rendezvous_file_remove(const char *path);

#endif
