/* mpi_comm.c — the MPI communicator back end (CPU tensors): the
 * loom_comm_ops of a communicator whose bytes move through MPI. The
 * process-wide side of MPI (initialization, finalization, the call lock,
 * bounded waits, rank facts) is mpi_runtime.c.
 *
 * Each communicator owns an MPI_Comm (a dup of MPI_COMM_WORLD, errors
 * returned, not fatal) and a communication thread: collectives are queued to
 * it and return at once, so an all-reduce overlaps the rest of backward on
 * the caller's thread. The thread issues the non-blocking MPI collective and
 * polls it (MPI_Testall: that is also what drives MPI's progress) against a
 * deadline: a peer that died or stopped issuing collectives fails the
 * communicator after its timeout instead of hanging. Nothing is sent by loom
 * itself: all bytes move through MPI. */
#include "dist/mpi_runtime.h"
#include "core/sys.h"

#ifndef LOOM_HAVE_MPI

loom_status loom_mpi_comm_init(loom_device dev, double timeout_s, loom_comm **out) {
  (void)dev, (void)timeout_s, (void)out;
  return loom_set_error(LOOM_ERR_UNSUPPORTED,
                        "comm_init (MPI back end): this loom was built without MPI (install libopenmpi-dev or "
                        "libmpich-dev and rebuild; scripts/setup.sh does)");
}

#else

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "loom/log.h"

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
    case LOOM_F16: *mdt = MPI_UINT16_T; *mop = loom_mpi_half_op(false, max); break;
    case LOOM_BF16: *mdt = MPI_UINT16_T; *mop = loom_mpi_half_op(true, max); break;
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
      if (chunks > 1) reqs = loom_sys_malloc((size_t)chunks * sizeof *reqs);
      if (!reqs) {
        loom_comm_fail(c, LOOM_ERR_OOM, "all_reduce: out of host memory");
        return;
      }
      char *p = loom_tensor_ptr(w->t);
      size_t es = loom_dtype_size(w->t->dtype);
      loom_mpi_lock();
      for (int64_t off = 0; off < n && rc == MPI_SUCCESS; off += CHUNK_ELEMS) {
        int cnt = (int)(n - off < CHUNK_ELEMS ? n - off : CHUNK_ELEMS);
        rc = MPI_Iallreduce(MPI_IN_PLACE, p + (size_t)off * es, cnt, dt, op, m->comm, &reqs[nreq]);
        if (rc == MPI_SUCCESS) nreq++;
      }
      loom_mpi_unlock();
      break;
    }
    case W_BCAST: {
      int64_t chunks = (bytes + CHUNK_ELEMS - 1) / CHUNK_ELEMS;
      if (chunks > 1) reqs = loom_sys_malloc((size_t)chunks * sizeof *reqs);
      if (!reqs) {
        loom_comm_fail(c, LOOM_ERR_OOM, "broadcast: out of host memory");
        return;
      }
      char *p = loom_tensor_ptr(w->t);
      loom_mpi_lock();
      for (int64_t off = 0; off < bytes && rc == MPI_SUCCESS; off += CHUNK_ELEMS) {
        int cnt = (int)(bytes - off < CHUNK_ELEMS ? bytes - off : CHUNK_ELEMS);
        rc = MPI_Ibcast(p + off, cnt, MPI_BYTE, w->root, m->comm, &reqs[nreq]);
        if (rc == MPI_SUCCESS) nreq++;
      }
      loom_mpi_unlock();
      break;
    }
    case W_ALLGATHER:
      if (bytes > INT32_MAX) {
        loom_comm_fail(c, LOOM_ERR_UNSUPPORTED, "all_gather: %lld bytes per rank; the MPI back end takes at most 2 GiB",
                       (long long)bytes);
        return;
      }
      loom_mpi_lock();
      rc = MPI_Iallgather(loom_tensor_ptr(w->t), (int)bytes, MPI_BYTE, loom_tensor_ptr(w->out), (int)bytes, MPI_BYTE,
                          m->comm, &reqs[0]);
      loom_mpi_unlock();
      nreq = rc == MPI_SUCCESS;
      break;
    default:
      loom_mpi_lock();
      rc = MPI_Ibarrier(m->comm, &reqs[0]);
      loom_mpi_unlock();
      nreq = rc == MPI_SUCCESS;
      break;
  }
  char msg[MPI_MAX_ERROR_STRING + 64] = "";
  int r = 0;
  if (nreq > 0) r = loom_mpi_wait_requests(reqs, nreq, t0 + w->timeout_s, &m->abort_req, msg, sizeof msg);
  if (rc != MPI_SUCCESS) {
    loom_mpi_errstr(rc, msg, sizeof msg);
    r = 1;
  }
  if (reqs != &one) loom_sys_free(reqs);
  char what[96];
  if (w->t)
    snprintf(what, sizeof what, "%s of %lld %s elements", kind_name(w->kind), (long long)loom_shape_numel(w->t->ndim, w->t->shape),
             loom_dtype_name(w->t->dtype));
  else
    snprintf(what, sizeof what, "%s", kind_name(w->kind));
  if (r != 0) {
    if (nreq > 0) {
      atomic_store(&m->abandoned, 1);
      loom_mpi_mark_abandoned();
    }
    if (r == 2)
      loom_comm_fail(c, LOOM_ERR_COMM,
                     "%s did not complete within the %g s timeout (rank %d of %d): another rank failed or was killed, "
                     "the network between the ranks is down, or a rank stopped issuing the same collectives in the same "
                     "order",
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
    loom_sys_free(w);
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
  mpi_work *w = loom_sys_calloc(1, sizeof *w);
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
    loom_mpi_lock();
    MPI_Comm_free(&m->comm);
    loom_mpi_unlock();
  }
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->work_cv);
  pthread_cond_destroy(&m->done_cv);
  loom_sys_free(m);
  c->impl = NULL;
  loom_mpi_live_add(-1);
}

static const loom_comm_ops mpi_ops = {m_all_reduce, m_broadcast, m_all_gather, m_barrier, m_synchronize,
                                      m_synchronize, NULL, m_abort, m_destroy, NULL};

loom_status loom_mpi_comm_init(loom_device dev, double timeout_s, loom_comm **out) {
  LOOM_TRY(loom_mpi_ensure("comm_init"));
  loom_comm *c = loom_comm_alloc(LOOM_COMM_MPI, dev, timeout_s);
  if (!c) return loom_last_status();
  mpi_impl *m = loom_sys_calloc(1, sizeof *m);
  if (!m) {
    loom_sys_free(c);
    return loom_set_error(LOOM_ERR_OOM, "comm_init: out of host memory (%zu bytes for the MPI back end's state)", sizeof *m);
  }
  m->comm = MPI_COMM_NULL;
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->work_cv, NULL);
  pthread_cond_init(&m->done_cv, NULL);
  c->impl = m;
  c->ops = &mpi_ops;
  loom_mpi_live_add(1);
  loom_mpi_facts f;
  loom_status st = loom_mpi_dup_world(&m->comm, timeout_s, "comm_init");
  if (st == LOOM_OK) st = loom_mpi_gather_facts(m->comm, timeout_s, "comm_init", &f);
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
    loom_sys_free(c);
    return st;
  }
  loom_log_msg(LOOM_LOG_INFO, "dist: MPI rank %d of %d (local %d of %d), timeout %g s", c->rank, c->size, c->local_rank,
               c->local_size, timeout_s);
  *out = c;
  return LOOM_OK;
}

#endif
