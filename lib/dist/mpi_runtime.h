/* mpi_runtime.h (internal) — the MPI process runtime that mpi_runtime.c
 * keeps for the whole process, used by the MPI communicator back end
 * (mpi_comm.c) and the NCCL rendezvous (nccl_comm.c): MPI's initialization
 * and finalization, the one-call-at-a-time lock MPI_THREAD_SERIALIZED needs,
 * bounded waits on requests, the world's rank facts, communicators duplicated
 * from MPI_COMM_WORLD, the f16/bf16 reduction operations, and the counts
 * that decide whether MPI may be finalized. */
#ifndef LOOM_DIST_MPI_RUNTIME_H
#define LOOM_DIST_MPI_RUNTIME_H

#include "dist/dist_internal.h"

/* Process-level entries, with or without MPI (without: LOOM_ERR_UNSUPPORTED). */
/* MPI_COMM_WORLD facts for the NCCL rendezvous (initializes MPI). */
loom_status loom_mpi_world(int *rank, int *size, int *local_rank, int *local_size);
/* Blocking (bounded by timeout_s) byte broadcast / all-gather over
 * MPI_COMM_WORLD, on the calling thread. */
loom_status loom_mpi_bcast_bytes(void *buf, size_t n, int root, double timeout_s);
loom_status loom_mpi_allgather_bytes(const void *in, void *out, size_t n, double timeout_s);

#ifdef LOOM_HAVE_MPI
#include <mpi.h>

/* Initialize MPI once (unless the program did), check its thread level and
 * create the 16-bit reduction operations. what names the caller in errors. */
loom_status loom_mpi_ensure(const char *what);

/* Around every MPI call: a lock when MPI gave only MPI_THREAD_SERIALIZED. */
void loom_mpi_lock(void);
void loom_mpi_unlock(void);

/* MPI's text for an error code. */
void loom_mpi_errstr(int rc, char *buf, size_t n);

/* Poll requests until done, failed, aborted (*abort_flag, may be NULL) or
 * past the deadline (loom_dist_now seconds). Returns 0 done, 1 MPI error,
 * 2 timeout, 3 aborted; msg says which. */
int loom_mpi_wait_requests(MPI_Request *reqs, int n, double deadline, atomic_int *abort_flag, char *msg, size_t msgn);

/* A rank's place in comm: rank, size, its rank and count among the ranks on
 * its host, and the CPU threads it should use (exchanged with every rank,
 * bounded by timeout_s). */
typedef struct loom_mpi_facts {
  int rank, size, local_rank, local_size, threads;
} loom_mpi_facts;
loom_status loom_mpi_gather_facts(MPI_Comm comm, double timeout_s, const char *what, loom_mpi_facts *f);

/* A dup of MPI_COMM_WORLD with errors returned, bounded by the timeout. */
loom_status loom_mpi_dup_world(MPI_Comm *out, double timeout_s, const char *what);

/* The reduction of loom's f16 / bf16 (16-bit words combined through f32):
 * sum, or max when max is true. */
MPI_Op loom_mpi_half_op(bool bf16, bool max);

/* A failed collective was left pending in MPI: finalizing could then wait
 * for a dead rank, so loom_dist_finalize refuses. */
void loom_mpi_mark_abandoned(void);
/* MPI communicators alive (+1 when one is made, -1 when it is freed):
 * loom_dist_finalize refuses while any is. */
void loom_mpi_live_add(int delta);
#endif

#endif
