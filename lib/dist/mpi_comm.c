/* mpi_comm.c — the MPI back end (CPU tensors), and the MPI helpers the NCCL
 * rendezvous uses.
 *
 * MPI is initialized by loom at first use (MPI_THREAD_MULTIPLE asked for;
 * SERIALIZED is enough, then every MPI call is made under one lock) unless
 * the program did it, and finalized by loom_dist_finalize or at exit.
 *
 * Each communicator owns an MPI_Comm (a dup of MPI_COMM_WORLD, errors
 * returned, not fatal) and a communication thread: collectives are queued to
 * it and return at once, so an all-reduce overlaps the rest of backward on
 * the caller's thread. The thread issues the non-blocking MPI collective and
 * polls it (MPI_Testall: that is also what drives MPI's progress) against a
 * deadline: a peer that died or stopped issuing collectives fails the
 * communicator after its timeout instead of hanging. Nothing is sent by loom
 * itself: all bytes move through MPI. */
#include "dist/dist_internal.h"

#ifndef LOOM_HAVE_MPI

static loom_status no_mpi(const char *what) {
  return loom_set_error(LOOM_ERR_UNSUPPORTED,
                        "%s: this loom was built without MPI (install libopenmpi-dev or libmpich-dev and rebuild; "
                        "scripts/setup.sh does)", what);
}
loom_status loom_mpi_comm_init(loom_device dev, double timeout_s, loom_comm **out) {
  (void)dev, (void)timeout_s, (void)out;
  return no_mpi("comm_init (MPI back end)");
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

#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static void mpi_lock(void) {
  if (g_need_lock) pthread_mutex_lock(&g_mpi_mu);
}
static void mpi_unlock(void) {
  if (g_need_lock) pthread_mutex_unlock(&g_mpi_mu);
}

static void mpi_errstr(int rc, char *buf, size_t n) {
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

static loom_status ensure_mpi(const char *what) {
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
static int wait_requests(MPI_Request *reqs, int n, double deadline, atomic_int *abort_flag, char *msg, size_t msgn) {
  double t0 = loom_dist_now();
  int slow = 0;  /* polls since the yield window ended */
  for (int it = 0;; it++) {
    int flag = 0;
    mpi_lock();
    int rc = MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
    mpi_unlock();
    if (rc != MPI_SUCCESS) {
      mpi_errstr(rc, msg, msgn);
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

typedef struct world_facts {
  int rank, size, local_rank, local_size, threads;
} world_facts;

static loom_status gather_facts(MPI_Comm comm, double timeout_s, const char *what, world_facts *f) {
  MPI_Comm_rank(comm, &f->rank);
  MPI_Comm_size(comm, &f->size);
  rank_card me;
  memset(&me, 0, sizeof me);
  int len = 0;
  MPI_Get_processor_name(me.host, &len);
  int cpus = loom_dist_affinity(me.mask, sizeof me.mask);
  rank_card *all = calloc((size_t)f->size, sizeof *all);
  if (!all) return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory", what);
  MPI_Request req;
  mpi_lock();
  int rc = MPI_Iallgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, comm, &req);
  mpi_unlock();
  char msg[MPI_MAX_ERROR_STRING + 64] = "";
  int r = rc == MPI_SUCCESS ? wait_requests(&req, 1, loom_dist_now() + timeout_s, NULL, msg, sizeof msg) : 1;
  if (rc != MPI_SUCCESS) mpi_errstr(rc, msg, sizeof msg);
  if (r != 0) {
    free(all);
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
  free(all);
  return LOOM_OK;
}

/* ---- the communicator ------------------------------------------------------------- */

enum { W_ALLREDUCE, W_BCAST, W_ALLGATHER, W_BARRIER };

typedef struct mpi_work {
  int kind;
  loom_tensor *t, *out;   /* retained until done */
  loom_reduce_op op;
  int root;
  double timeout_s;       /* the communicator's timeout when it was issued */
  loom_comm_times *times;
  struct mpi_work *next;
} mpi_work;

typedef struct mpi_impl {
  MPI_Comm comm;
  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t work_cv, done_cv;
  mpi_work *head, *tail;
  uint64_t submitted, completed;
  double last_progress;   /* when the thread last started or finished a collective */
  bool stop;
  atomic_int abort_req;
  atomic_int abandoned;   /* a request of this comm may still be pending in MPI */
} mpi_impl;

static const char *kind_name(int k) {
  switch (k) {
    case W_ALLREDUCE: return "all_reduce";
    case W_BCAST: return "broadcast";
    case W_ALLGATHER: return "all_gather";
    default: return "barrier";
  }
}

static void premultiply(loom_tensor *t, double f) {
  int64_t n = loom_shape_numel(t->ndim, t->shape);
  void *p = loom_tensor_ptr(t);
  if (t->dtype == LOOM_F32) {
    float *x = p, s = (float)f;
    for (int64_t i = 0; i < n; i++) x[i] *= s;
  } else if (t->dtype == LOOM_F16) {
    uint16_t *x = p;
    for (int64_t i = 0; i < n; i++) x[i] = loom_half_from_f32(loom_half_to_f32(x[i]) * (float)f);
  } else if (t->dtype == LOOM_BF16) {
    uint16_t *x = p;
    for (int64_t i = 0; i < n; i++) x[i] = loom_bfloat_from_f32(loom_bfloat_to_f32(x[i]) * (float)f);
  }
}

static void postdivide(loom_tensor *t, int size) {
  int64_t n = loom_shape_numel(t->ndim, t->shape);
  void *p = loom_tensor_ptr(t);
  if (t->dtype == LOOM_I32) {
    int32_t *x = p;
    for (int64_t i = 0; i < n; i++) x[i] /= size;
  } else if (t->dtype == LOOM_I64) {
    int64_t *x = p;
    for (int64_t i = 0; i < n; i++) x[i] /= size;
  } else if (t->dtype == LOOM_U8) {
    uint8_t *x = p;
    for (int64_t i = 0; i < n; i++) x[i] = (uint8_t)(x[i] / size);
  }
}

static void type_and_op(loom_dtype dt, loom_reduce_op op, MPI_Datatype *mdt, MPI_Op *mop) {
  bool max = op == LOOM_REDUCE_MAX;
  switch (dt) {
    case LOOM_F32: *mdt = MPI_FLOAT; *mop = max ? MPI_MAX : MPI_SUM; break;
    case LOOM_F16: *mdt = MPI_UINT16_T; *mop = max ? g_f16_max : g_f16_sum; break;
    case LOOM_BF16: *mdt = MPI_UINT16_T; *mop = max ? g_bf16_max : g_bf16_sum; break;
    case LOOM_I32: *mdt = MPI_INT32_T; *mop = max ? MPI_MAX : MPI_SUM; break;
    case LOOM_I64: *mdt = MPI_INT64_T; *mop = max ? MPI_MAX : MPI_SUM; break;
    default: *mdt = MPI_UINT8_T; *mop = max ? MPI_MAX : MPI_SUM; break;
  }
}

#define CHUNK_ELEMS ((int64_t)1 << 30)  /* MPI counts are int */

/* Runs one collective on the communication thread. */
static void run_work(loom_comm *c, mpi_work *w) {
  mpi_impl *m = c->impl;
  double t0 = loom_dist_now();
  if (w->times) w->times->start = t0;
  MPI_Request one, *reqs = &one;
  int nreq = 0, rc = MPI_SUCCESS;
  int64_t bytes = w->t ? loom_shape_numel(w->t->ndim, w->t->shape) * (int64_t)loom_dtype_size(w->t->dtype) : 0;
  switch (w->kind) {
    case W_ALLREDUCE: {
      int64_t n = loom_shape_numel(w->t->ndim, w->t->shape);
      if (w->op == LOOM_REDUCE_AVG && loom_dtype_is_float(w->t->dtype) && c->size > 1)
        premultiply(w->t, 1.0 / c->size);
      MPI_Datatype dt;
      MPI_Op op;
      type_and_op(w->t->dtype, w->op, &dt, &op);
      int64_t chunks = (n + CHUNK_ELEMS - 1) / CHUNK_ELEMS;
      if (chunks > 1) reqs = malloc((size_t)chunks * sizeof *reqs);
      if (!reqs) {
        loom_comm_fail(c, LOOM_ERR_OOM, "all_reduce: out of host memory");
        return;
      }
      char *p = loom_tensor_ptr(w->t);
      size_t es = loom_dtype_size(w->t->dtype);
      mpi_lock();
      for (int64_t off = 0; off < n && rc == MPI_SUCCESS; off += CHUNK_ELEMS) {
        int cnt = (int)(n - off < CHUNK_ELEMS ? n - off : CHUNK_ELEMS);
        rc = MPI_Iallreduce(MPI_IN_PLACE, p + (size_t)off * es, cnt, dt, op, m->comm, &reqs[nreq]);
        if (rc == MPI_SUCCESS) nreq++;
      }
      mpi_unlock();
      break;
    }
    case W_BCAST: {
      int64_t chunks = (bytes + CHUNK_ELEMS - 1) / CHUNK_ELEMS;
      if (chunks > 1) reqs = malloc((size_t)chunks * sizeof *reqs);
      if (!reqs) {
        loom_comm_fail(c, LOOM_ERR_OOM, "broadcast: out of host memory");
        return;
      }
      char *p = loom_tensor_ptr(w->t);
      mpi_lock();
      for (int64_t off = 0; off < bytes && rc == MPI_SUCCESS; off += CHUNK_ELEMS) {
        int cnt = (int)(bytes - off < CHUNK_ELEMS ? bytes - off : CHUNK_ELEMS);
        rc = MPI_Ibcast(p + off, cnt, MPI_BYTE, w->root, m->comm, &reqs[nreq]);
        if (rc == MPI_SUCCESS) nreq++;
      }
      mpi_unlock();
      break;
    }
    case W_ALLGATHER:
      if (bytes > INT32_MAX) {
        loom_comm_fail(c, LOOM_ERR_UNSUPPORTED, "all_gather: %lld bytes per rank; the MPI back end takes at most 2 GiB",
                       (long long)bytes);
        return;
      }
      mpi_lock();
      rc = MPI_Iallgather(loom_tensor_ptr(w->t), (int)bytes, MPI_BYTE, loom_tensor_ptr(w->out), (int)bytes, MPI_BYTE,
                          m->comm, &reqs[0]);
      mpi_unlock();
      nreq = rc == MPI_SUCCESS;
      break;
    default:
      mpi_lock();
      rc = MPI_Ibarrier(m->comm, &reqs[0]);
      mpi_unlock();
      nreq = rc == MPI_SUCCESS;
      break;
  }
  char msg[MPI_MAX_ERROR_STRING + 64] = "";
  int r = 0;
  if (nreq > 0) r = wait_requests(reqs, nreq, t0 + w->timeout_s, &m->abort_req, msg, sizeof msg);
  if (rc != MPI_SUCCESS) {
    mpi_errstr(rc, msg, sizeof msg);
    r = 1;
  }
  if (reqs != &one) free(reqs);
  char what[96];
  if (w->t)
    snprintf(what, sizeof what, "%s of %lld %s elements", kind_name(w->kind), (long long)loom_shape_numel(w->t->ndim, w->t->shape),
             loom_dtype_name(w->t->dtype));
  else
    snprintf(what, sizeof what, "%s", kind_name(w->kind));
  if (r != 0) {
    if (nreq > 0) {
      atomic_store(&m->abandoned, 1);
      atomic_store(&g_abandoned, 1);
    }
    if (r == 2)
      loom_comm_fail(c, LOOM_ERR_COMM,
                     "%s did not complete within the %g s timeout (rank %d of %d): another rank failed, was killed, or "
                     "stopped issuing the same collectives in the same order",
                     what, w->timeout_s, c->rank, c->size);
    else if (r == 3)
      loom_comm_fail(c, LOOM_ERR_COMM, "%s was abandoned: the communicator was aborted (loom_comm_abort)", what);
    else
      loom_comm_fail(c, LOOM_ERR_COMM, "%s failed in MPI (rank %d of %d): %s", what, c->rank, c->size, msg);
    return;
  }
  if (w->kind == W_ALLREDUCE && w->op == LOOM_REDUCE_AVG && !loom_dtype_is_float(w->t->dtype)) postdivide(w->t, c->size);
  if (w->t && w->kind != W_ALLGATHER) loom_tensor_bump_version(w->t);
  if (w->out) loom_tensor_bump_version(w->out);
  if (w->times) w->times->end = loom_dist_now();
}

static void *comm_thread(void *arg) {
  loom_comm *c = arg;
  mpi_impl *m = c->impl;
  for (;;) {
    pthread_mutex_lock(&m->mu);
    while (!m->head && !m->stop) pthread_cond_wait(&m->work_cv, &m->mu);
    mpi_work *w = m->head;
    if (!w) {
      pthread_mutex_unlock(&m->mu);
      break;
    }
    m->head = w->next;
    if (!m->head) m->tail = NULL;
    m->last_progress = loom_dist_now();
    pthread_mutex_unlock(&m->mu);
    if (!atomic_load(&c->failed) && !atomic_load(&m->abort_req)) run_work(c, w);
    loom_tensor_release(w->t);
    loom_tensor_release(w->out);
    free(w);
    pthread_mutex_lock(&m->mu);
    m->completed++;
    m->last_progress = loom_dist_now();
    pthread_cond_broadcast(&m->done_cv);
    pthread_mutex_unlock(&m->mu);
  }
  return NULL;
}

static loom_status submit(loom_comm *c, int kind, loom_tensor *t, loom_tensor *out, loom_reduce_op op, int root,
                          loom_comm_times *times) {
  mpi_impl *m = c->impl;
  mpi_work *w = calloc(1, sizeof *w);
  if (!w) return loom_set_error(LOOM_ERR_OOM, "%s: out of host memory", kind_name(kind));
  w->kind = kind;
  w->t = loom_tensor_retain(t);
  w->out = loom_tensor_retain(out);
  w->op = op;
  w->root = root;
  w->times = times;
  w->timeout_s = c->timeout_s;
  pthread_mutex_lock(&m->mu);
  if (m->tail) m->tail->next = w;
  else m->head = w;
  m->tail = w;
  m->submitted++;
  pthread_cond_signal(&m->work_cv);
  pthread_mutex_unlock(&m->mu);
  return LOOM_OK;
}

static loom_status m_all_reduce(loom_comm *c, loom_tensor *t, loom_reduce_op op, loom_comm_times *times) {
  return submit(c, W_ALLREDUCE, t, NULL, op, 0, times);
}
static loom_status m_broadcast(loom_comm *c, loom_tensor *t, int root) {
  return submit(c, W_BCAST, t, NULL, LOOM_REDUCE_SUM, root, NULL);
}
static loom_status m_all_gather(loom_comm *c, loom_tensor *in, loom_tensor *out) {
  return submit(c, W_ALLGATHER, in, out, LOOM_REDUCE_SUM, 0, NULL);
}

/* Wait for the queue to drain. The communication thread bounds each
 * collective by the timeout; the watchdog here only catches a thread that
 * stopped making progress altogether. */
static loom_status m_synchronize(loom_comm *c) {
  mpi_impl *m = c->impl;
  pthread_mutex_lock(&m->mu);
  while (m->completed < m->submitted) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&m->done_cv, &m->mu, &ts);
    if (m->completed < m->submitted && loom_dist_now() - m->last_progress > c->timeout_s + 30) {
      pthread_mutex_unlock(&m->mu);
      atomic_store(&m->abort_req, 1);
      return loom_comm_fail(c, LOOM_ERR_COMM,
                            "the MPI communication thread made no progress for %g s (an MPI call does not return)",
                            c->timeout_s + 30);
    }
  }
  pthread_mutex_unlock(&m->mu);
  return loom_comm_failed_error(c, "comm_synchronize");
}

static loom_status m_barrier(loom_comm *c) {
  LOOM_TRY(submit(c, W_BARRIER, NULL, NULL, LOOM_REDUCE_SUM, 0, NULL));
  return m_synchronize(c);
}

static void m_abort(loom_comm *c) {
  mpi_impl *m = c->impl;
  atomic_store(&m->abort_req, 1);
}

static void m_destroy(loom_comm *c) {
  mpi_impl *m = c->impl;
  if (!m) return;
  if (m->thread_started) {
    if (!atomic_load(&c->failed)) m_synchronize(c);
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    if (atomic_load(&c->failed)) atomic_store(&m->abort_req, 1);
    pthread_cond_broadcast(&m->work_cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->thread, NULL);
  }
  /* A communicator with an abandoned request cannot be freed (MPI would
   * wait for it); it is left to the process's end. */
  if (m->comm != MPI_COMM_NULL && !atomic_load(&m->abandoned)) {
    mpi_lock();
    MPI_Comm_free(&m->comm);
    mpi_unlock();
  }
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->work_cv);
  pthread_cond_destroy(&m->done_cv);
  free(m);
  c->impl = NULL;
  atomic_fetch_sub(&g_live, 1);
}

static const loom_comm_ops mpi_ops = {m_all_reduce, m_broadcast, m_all_gather, m_barrier, m_synchronize,
                                      m_synchronize, NULL, m_abort, m_destroy};

/* A dup of MPI_COMM_WORLD with errors returned, bounded by the timeout. */
static loom_status dup_world(MPI_Comm *out, double timeout_s, const char *what) {
  MPI_Request req;
  mpi_lock();
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, out, &req);
  mpi_unlock();
  char msg[MPI_MAX_ERROR_STRING + 64] = "";
  int r = rc == MPI_SUCCESS ? wait_requests(&req, 1, loom_dist_now() + timeout_s, NULL, msg, sizeof msg) : 1;
  if (rc != MPI_SUCCESS) mpi_errstr(rc, msg, sizeof msg);
  if (r != 0) {
    if (r == 2) atomic_store(&g_abandoned, 1);
    *out = MPI_COMM_NULL;
    return loom_set_error(LOOM_ERR_COMM, "%s: creating the MPI communicator %s%s (timeout %g s)", what,
                          r == 2 ? "timed out: not every rank called it" : "failed: ", r == 2 ? "" : msg, timeout_s);
  }
  mpi_lock();
  MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
  mpi_unlock();
  return LOOM_OK;
}

loom_status loom_mpi_comm_init(loom_device dev, double timeout_s, loom_comm **out) {
  LOOM_TRY(ensure_mpi("comm_init"));
  loom_comm *c = loom_comm_alloc(LOOM_COMM_MPI, dev, timeout_s);
  if (!c) return loom_last_status();
  mpi_impl *m = calloc(1, sizeof *m);
  if (!m) {
    free(c);
    return loom_set_error(LOOM_ERR_OOM, "comm_init: out of host memory");
  }
  m->comm = MPI_COMM_NULL;
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->work_cv, NULL);
  pthread_cond_init(&m->done_cv, NULL);
  c->impl = m;
  c->ops = &mpi_ops;
  atomic_fetch_add(&g_live, 1);
  world_facts f;
  loom_status st = dup_world(&m->comm, timeout_s, "comm_init");
  if (st == LOOM_OK) st = gather_facts(m->comm, timeout_s, "comm_init", &f);
  if (st == LOOM_OK) {
    c->rank = f.rank;
    c->size = f.size;
    c->local_rank = f.local_rank;
    c->local_size = f.local_size;
    c->default_threads = f.threads;
    m->last_progress = loom_dist_now();
    if (pthread_create(&m->thread, NULL, comm_thread, c) != 0)
      st = loom_set_error(LOOM_ERR_OOM, "comm_init: could not start the MPI communication thread");
    else
      m->thread_started = true;
  }
  if (st != LOOM_OK) {
    m_destroy(c);
    pthread_mutex_destroy(&c->fail_mu);
    free(c);
    return st;
  }
  loom_log_msg(LOOM_LOG_INFO, "dist: MPI rank %d of %d (local %d of %d), timeout %g s", c->rank, c->size, c->local_rank,
               c->local_size, timeout_s);
  *out = c;
  return LOOM_OK;
}

/* ---- helpers for the NCCL rendezvous (on the calling thread) ----------------------- */

static loom_status ensure_boot(double timeout_s) {
  LOOM_TRY(ensure_mpi("comm_init"));
  if (g_boot != MPI_COMM_NULL) return LOOM_OK;
  return dup_world(&g_boot, timeout_s, "comm_init (MPI rendezvous)");
}

loom_status loom_mpi_world(int *rank, int *size, int *local_rank, int *local_size) {
  LOOM_TRY(ensure_boot(LOOM_DIST_DEFAULT_TIMEOUT_S));
  world_facts f;
  LOOM_TRY(gather_facts(g_boot, LOOM_DIST_DEFAULT_TIMEOUT_S, "comm_init (MPI rendezvous)", &f));
  *rank = f.rank;
  *size = f.size;
  *local_rank = f.local_rank;
  *local_size = f.local_size;
  return LOOM_OK;
}

static loom_status boot_wait(MPI_Request *req, int rc, double timeout_s, const char *what) {
  char msg[MPI_MAX_ERROR_STRING + 64] = "";
  int r = rc == MPI_SUCCESS ? wait_requests(req, 1, loom_dist_now() + timeout_s, NULL, msg, sizeof msg) : 1;
  if (rc != MPI_SUCCESS) mpi_errstr(rc, msg, sizeof msg);
  if (r == 0) return LOOM_OK;
  if (r == 2) atomic_store(&g_abandoned, 1);
  return loom_set_error(LOOM_ERR_COMM, "%s over MPI %s%s (timeout %g s)", what,
                        r == 2 ? "timed out: a rank did not join" : "failed: ", r == 2 ? "" : msg, timeout_s);
}

loom_status loom_mpi_bcast_bytes(void *buf, size_t n, int root, double timeout_s) {
  LOOM_TRY(ensure_boot(timeout_s));
  MPI_Request req;
  mpi_lock();
  int rc = MPI_Ibcast(buf, (int)n, MPI_BYTE, root, g_boot, &req);
  mpi_unlock();
  return boot_wait(&req, rc, timeout_s, "broadcasting the NCCL id");
}

loom_status loom_mpi_allgather_bytes(const void *in, void *out, size_t n, double timeout_s) {
  LOOM_TRY(ensure_boot(timeout_s));
  MPI_Request req;
  mpi_lock();
  int rc = MPI_Iallgather(in, (int)n, MPI_BYTE, out, (int)n, MPI_BYTE, g_boot, &req);
  mpi_unlock();
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
