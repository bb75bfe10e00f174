/* mpi_runtime.c — the MPI process runtime: what loom keeps of MPI for the
 * whole process, whichever communicators come and go.
 *
 * MPI is initialized by loom at first use (MPI_THREAD_MULTIPLE asked for;
 * SERIALIZED is enough, then every MPI call is made under one lock) unless
 * the program did it, and finalized by loom_dist_finalize or at exit —
 * unless a communicator is alive or a failed collective was left pending.
 * Here too: the bounded wait on MPI requests, the world's rank facts (rank,
 * size, ranks per host, threads per rank), communicators duplicated from
 * MPI_COMM_WORLD, the f16/bf16 reduction operations, and the byte exchanges
 * over MPI_COMM_WORLD that rendezvous a NCCL id. The communicator back end
 * itself is mpi_comm.c. */
#include "dist/mpi_runtime.h"
#include "core/sys.h"

#ifndef LOOM_HAVE_MPI

static loom_status no_mpi(const char *what) {
  return loom_set_error(LOOM_ERR_UNSUPPORTED,
                        "%s: this loom was built without MPI (install libopenmpi-dev or libmpich-dev and rebuild; "
                        "scripts/setup.sh does)", what);
}
loom_status loom_mpi_world(int *rank, int *size, int *local_rank, int *local_size) {
  (void)rank, (void)size, (void)local_rank, (void)local_size;
  return no_mpi("comm_init (NCCL id over MPI)");
}
loom_status loom_mpi_bcast_bytes(void *buf, size_t n, int root, double timeout_s) {
  (void)buf, (void)n, (void)root, (void)timeout_s;
  return no_mpi("rendezvous");
}
loom_status loom_mpi_allgather_bytes(const void *in, void *out, size_t n, double timeout_s) {
  (void)in, (void)out, (void)n, (void)timeout_s;
  return no_mpi("rendezvous");
}
loom_status loom_dist_finalize(void) { return LOOM_OK; }

#else

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "loom/log.h"

/* ---- MPI itself ------------------------------------------------------------------ */

static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_ready, g_inited_by_loom, g_finalized, g_provided;
static bool g_need_lock;                          /* SERIALIZED: one MPI call at a time */
static pthread_mutex_t g_mpi_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_abandoned;                    /* a failed collective was left pending */
static atomic_int g_live;                         /* MPI communicators alive */
static MPI_Comm g_boot = MPI_COMM_NULL;           /* for the NCCL rendezvous helpers */
static MPI_Op g_f16_sum, g_f16_max, g_bf16_sum, g_bf16_max;

void loom_mpi_lock(void) {
  if (g_need_lock) pthread_mutex_lock(&g_mpi_mu);
}
void loom_mpi_unlock(void) {
  if (g_need_lock) pthread_mutex_unlock(&g_mpi_mu);
}

void loom_mpi_errstr(int rc, char *buf, size_t n) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
  snprintf(buf, n, "%s", s);
}

/* f16 / bf16 have no MPI datatype: they travel as 16-bit words and are
 * combined by these user operations (through f32, rounded back to nearest
 * even, as the GPU's half arithmetic does). */
static void f16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++) b[i] = loom_half_from_f32(loom_half_to_f32(a[i]) + loom_half_to_f32(b[i]));
}
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++) b[i] = loom_bfloat_from_f32(loom_bfloat_to_f32(a[i]) + loom_bfloat_to_f32(b[i]));
}
/* max; a NaN on either side wins (so a NaN is never hidden). */
static bool takes_a(float fa, float fb) { return fa != fa || (fb == fb && fa > fb); }
static void f16_max(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++)
    if (takes_a(loom_half_to_f32(a[i]), loom_half_to_f32(b[i]))) b[i] = a[i];
}
static void bf16_max(void *in, void *inout, int *len, MPI_Datatype *dt) {
  (void)dt;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int i = 0; i < *len; i++)
    if (takes_a(loom_bfloat_to_f32(a[i]), loom_bfloat_to_f32(b[i]))) b[i] = a[i];
}

static void at_exit_finalize(void) {
  if (!g_inited_by_loom || g_finalized) return;
  if (atomic_load(&g_live) > 0 || atomic_load(&g_abandoned)) return;  /* see loom_dist_finalize */
  loom_dist_finalize();
}

loom_status loom_mpi_ensure(const char *what) {
  pthread_mutex_lock(&g_init_mu);
  loom_status st = LOOM_OK;
  if (g_ready) goto out;
  int inited = 0, finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || g_finalized) {
    st = loom_set_error(LOOM_ERR_STATE, "%s: MPI was already finalized in this process; it cannot be used again", what);
    goto out;
  }
  MPI_Initialized(&inited);
  if (!inited) {
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &g_provided) != MPI_SUCCESS) {
      st = loom_set_error(LOOM_ERR_COMM, "%s: MPI_Init_thread failed", what);
      goto out;
    }
    g_inited_by_loom = 1;
    atexit(at_exit_finalize);
  } else {
    MPI_Query_thread(&g_provided);
  }
  if (g_provided < MPI_THREAD_SERIALIZED) {
    st = loom_set_error(LOOM_ERR_UNSUPPORTED,
                        "%s: MPI was initialized with thread level %d, but loom's communication thread needs "
                        "MPI_THREAD_SERIALIZED or more: initialize MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE) "
                        "or let loom initialize it", what, g_provided);
    goto out;
  }
  g_need_lock = g_provided < MPI_THREAD_MULTIPLE;
  MPI_Op_create(f16_sum, 1, &g_f16_sum);
  MPI_Op_create(f16_max, 1, &g_f16_max);
  MPI_Op_create(bf16_sum, 1, &g_bf16_sum);
  MPI_Op_create(bf16_max, 1, &g_bf16_max);
  g_ready = 1;
  loom_log_msg(LOOM_LOG_DEBUG, "dist: MPI ready (%s, thread level %d)", g_inited_by_loom ? "initialized by loom" : "initialized by the program",
               g_provided);
out:
  pthread_mutex_unlock(&g_init_mu);
  return st;
}

#define LOOM_MPI_YIELD_S 0.010

/* Poll requests until done, failed, aborted or past the deadline. The MPI
 * calls happen here (under the lock when SERIALIZED); the pause in between
 * lets the rank's compute threads have the cores. Returns 0 done, 1 MPI
 * error, 2 timeout, 3 aborted; msg says which. */
int loom_mpi_wait_requests(MPI_Request *reqs, int n, double deadline, atomic_int *abort_flag, char *msg, size_t msgn) {
  double t0 = loom_dist_now();
  int slow = 0;  /* polls since the yield window ended */
  for (int it = 0;; it++) {
    int flag = 0;
    loom_mpi_lock();
    int rc = MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
    loom_mpi_unlock();
    if (rc != MPI_SUCCESS) {
      loom_mpi_errstr(rc, msg, msgn);
      return 1;
    }
    if (flag) return 0;
    if (abort_flag && atomic_load(abort_flag)) {
      snprintf(msg, msgn, "aborted while waiting");
      return 3;
    }
    if (loom_dist_now() > deadline) return 2;
    /* MPI progresses only inside MPI_Testall: for the first LOOM_MPI_YIELD_S
     * of a collective poll after a yield (the peer usually joins within
     * milliseconds, and a sleeping poller waits for a core to wake up on),
     * then back off to sleeps so a rank waiting long for its peer does not
     * take a core from the others (bench_ddp_overlap, side by side on
     * 2 shared cores: DP step 22.7-23.1 ms vs 24.5-25.1 ms sleeping at once). */
    if (loom_dist_now() - t0 < LOOM_MPI_YIELD_S) sched_yield();
    else loom_dist_pause(slow++, 200);
  }
}

/* ---- per-rank facts: host and CPU mask, gathered from every rank ---------------- */

typedef struct rank_card {
  char host[MPI_MAX_PROCESSOR_NAME + 1];
  unsigned char mask[LOOM_DIST_MASK_BYTES];
} rank_card;

loom_status loom_mpi_gather_facts(MPI_Comm comm, double timeout_s, const char *what, loom_mpi_facts *f) {
  MPI_Comm_rank(comm, &f->rank);
  MPI_Comm_size(comm, &f->size);
  rank_card me;
  memset(&me, 0, sizeof me);
  int len = 0;
  MPI_Get_processor_name(me.host, &len);
  int cpus = loom_dist_affinity(me.mask, sizeof me.mask);
  rank_card *all = loom_sys_calloc((size_t)f->size, sizeof *all);
  if (!all)
    return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory (%zu bytes for the %d ranks' host names and CPU masks)", what,
                          (size_t)f->size * sizeof *all, f->size);
  MPI_Request req;
  loom_mpi_lock();
  int rc = MPI_Iallgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, comm, &req);
  loom_mpi_unlock();
  char msg[MPI_MAX_ERROR_STRING + 64] = "";
  int r = rc == MPI_SUCCESS ? loom_mpi_wait_requests(&req, 1, loom_dist_now() + timeout_s, NULL, msg, sizeof msg) : 1;
  if (rc != MPI_SUCCESS) loom_mpi_errstr(rc, msg, sizeof msg);
  if (r != 0) {
    loom_sys_free(all);
    if (r == 2) atomic_store(&g_abandoned, 1);
    return loom_set_error(LOOM_ERR_COMM, "%s: exchanging host names over MPI %s%s (%d ranks, timeout %g s)", what,
                          r == 2 ? "timed out: a rank did not join" : "failed: ", r == 2 ? "" : msg, f->size, timeout_s);
  }
  f->local_rank = 0;
  f->local_size = 0;
  int sharing = 0;
  for (int i = 0; i < f->size; i++) {
    if (strcmp(all[i].host, me.host)) continue;
    if (i < f->rank) f->local_rank++;
    f->local_size++;
    bool overlap = false;
    for (int b = 0; b < LOOM_DIST_MASK_BYTES && !overlap; b++) overlap = (all[i].mask[b] & me.mask[b]) != 0;
    sharing += overlap;
  }
  f->threads = loom_dist_threads_for(cpus, sharing);
  loom_sys_free(all);
  return LOOM_OK;
}

MPI_Op loom_mpi_half_op(bool bf16, bool max) {
  return bf16 ? (max ? g_bf16_max : g_bf16_sum) : (max ? g_f16_max : g_f16_sum);
}

void loom_mpi_mark_abandoned(void) { atomic_store(&g_abandoned, 1); }

void loom_mpi_live_add(int delta) { atomic_fetch_add(&g_live, delta); }

/* ---- communicators from MPI_COMM_WORLD ------------------------------------------- */

/* A dup of MPI_COMM_WORLD with errors returned, bounded by the timeout. */
loom_status loom_mpi_dup_world(MPI_Comm *out, double timeout_s, const char *what) {
  MPI_Request req;
  loom_mpi_lock();
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, out, &req);
  loom_mpi_unlock();
  char msg[MPI_MAX_ERROR_STRING + 64] = "";
  int r = rc == MPI_SUCCESS ? loom_mpi_wait_requests(&req, 1, loom_dist_now() + timeout_s, NULL, msg, sizeof msg) : 1;
  if (rc != MPI_SUCCESS) loom_mpi_errstr(rc, msg, sizeof msg);
  if (r != 0) {
    if (r == 2) atomic_store(&g_abandoned, 1);
    *out = MPI_COMM_NULL;
    return loom_set_error(LOOM_ERR_COMM, "%s: creating the MPI communicator %s%s (timeout %g s)", what,
                          r == 2 ? "timed out: not every rank called it" : "failed: ", r == 2 ? "" : msg, timeout_s);
  }
  loom_mpi_lock();
  MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
  loom_mpi_unlock();
  return LOOM_OK;
}

/* ---- helpers for the NCCL rendezvous (on the calling thread) ----------------------- */

static loom_status ensure_boot(double timeout_s) {
  LOOM_TRY(loom_mpi_ensure("comm_init"));
  if (g_boot != MPI_COMM_NULL) return LOOM_OK;
  return loom_mpi_dup_world(&g_boot, timeout_s, "comm_init (MPI rendezvous)");
}

loom_status loom_mpi_world(int *rank, int *size, int *local_rank, int *local_size) {
  LOOM_TRY(ensure_boot(LOOM_DIST_DEFAULT_TIMEOUT_S));
  loom_mpi_facts f;
  LOOM_TRY(loom_mpi_gather_facts(g_boot, LOOM_DIST_DEFAULT_TIMEOUT_S, "comm_init (MPI rendezvous)", &f));
  *rank = f.rank;
  *size = f.size;
  *local_rank = f.local_rank;
  *local_size = f.local_size;
  return LOOM_OK;
}

static loom_status boot_wait(MPI_Request *req, int rc, double timeout_s, const char *what) {
  char msg[MPI_MAX_ERROR_STRING + 64] = "";
  int r = rc == MPI_SUCCESS ? loom_mpi_wait_requests(req, 1, loom_dist_now() + timeout_s, NULL, msg, sizeof msg) : 1;
  if (rc != MPI_SUCCESS) loom_mpi_errstr(rc, msg, sizeof msg);
  if (r == 0) return LOOM_OK;
  if (r == 2) atomic_store(&g_abandoned, 1);
  return loom_set_error(LOOM_ERR_COMM, "%s over MPI %s%s (timeout %g s)", what,
                        r == 2 ? "timed out: a rank did not join" : "failed: ", r == 2 ? "" : msg, timeout_s);
}

loom_status loom_mpi_bcast_bytes(void *buf, size_t n, int root, double timeout_s) {
  LOOM_TRY(ensure_boot(timeout_s));
  MPI_Request req;
  loom_mpi_lock();
  int rc = MPI_Ibcast(buf, (int)n, MPI_BYTE, root, g_boot, &req);
  loom_mpi_unlock();
  return boot_wait(&req, rc, timeout_s, "broadcasting the NCCL id");
}

loom_status loom_mpi_allgather_bytes(const void *in, void *out, size_t n, double timeout_s) {
  LOOM_TRY(ensure_boot(timeout_s));
  MPI_Request req;
  loom_mpi_lock();
  int rc = MPI_Iallgather(in, (int)n, MPI_BYTE, out, (int)n, MPI_BYTE, g_boot, &req);
  loom_mpi_unlock();
  return boot_wait(&req, rc, timeout_s, "exchanging GPU ids");
}

loom_status loom_dist_finalize(void) {
  pthread_mutex_lock(&g_init_mu);
  loom_status st = LOOM_OK;
  if (!g_inited_by_loom || g_finalized) goto out;
  if (atomic_load(&g_live) > 0) {
    st = loom_set_error(LOOM_ERR_STATE, "dist_finalize: %d MPI communicator%s still alive; free them first",
                        atomic_load(&g_live), atomic_load(&g_live) == 1 ? " is" : "s are");
    goto out;
  }
  if (atomic_load(&g_abandoned)) {
    st = loom_set_error(LOOM_ERR_COMM,
                        "dist_finalize: a collective failed and was left pending, so MPI is not finalized (it could "
                        "wait for a dead rank); exit with a non-zero status, and the launcher ends the job");
    goto out;
  }
  if (g_boot != MPI_COMM_NULL) MPI_Comm_free(&g_boot);
  MPI_Op_free(&g_f16_sum);
  MPI_Op_free(&g_f16_max);
  MPI_Op_free(&g_bf16_sum);
  MPI_Op_free(&g_bf16_max);
  MPI_Finalize();
  g_finalized = 1;
  g_ready = 0;
out:
  pthread_mutex_unlock(&g_init_mu);
  return st;
}

#endif
