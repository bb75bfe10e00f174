/* comm.c — the communicator API: options and environment (LOOM_DIST_*),
 * choosing a back end, argument checks shared by every back end, the
 * failure state, and dispatch to single.c / mpi_comm.c / nccl_comm.c. */
#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/struct_size.h"
#include "device/device_internal.h"
#include "dist/dist_internal.h"
#include "prof/prof.h"
#include "core/sys.h"
#include "core/teardown.h"

/* ---- communicators alive (loom_shutdown refuses while any is) --------------------- */

static atomic_int g_live_comms;

static void count_alive(loom_comm *c) {
  c->counted = true;
  atomic_fetch_add(&g_live_comms, 1);
}

/* loom_shutdown's busy check (core/teardown.h): an MPI communicator's thread
 * and an NCCL communicator's streams would outlive what teardown frees. */
static loom_status comms_busy(void) {
  int n = atomic_load(&g_live_comms);
  if (n == 0) return LOOM_OK;
  return loom_set_error(LOOM_ERR_STATE, "%d communicator%s (free with loom_comm_free)", n, n == 1 ? "" : "s");
}
LOOM_BUSY_CHECK(LOOM_LAYER_DIST, comms_busy)

/* ---- failure state ------------------------------------------------------------ */

loom_comm *loom_comm_alloc(loom_comm_backend b, loom_device dev, double timeout_s) {
  loom_comm *c = loom_sys_calloc(1, sizeof *c);
  if (!c) {
    loom_set_error(LOOM_ERR_OOM, "comm_init: out of host memory (%zu bytes for the communicator)", sizeof *c);
    return NULL;
  }
  c->backend = b;
  c->device = dev;
  c->timeout_s = timeout_s;
  c->size = 1;
  c->local_size = 1;
  c->default_threads = 1;
  pthread_mutex_init(&c->fail_mu, NULL);
  return c;
}

loom_status loom_comm_fail(loom_comm *c, loom_status code, const char *fmt, ...) {
  char msg[sizeof c->fail_msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&c->fail_mu);
  if (!atomic_load(&c->failed)) {
    memcpy(c->fail_msg, msg, sizeof msg);
    c->fail_code = code;
    atomic_store(&c->failed, 1);
  }
  pthread_mutex_unlock(&c->fail_mu);
  return loom_set_error(code, "%s", msg);
}

loom_status loom_comm_failed_error(loom_comm *c, const char *what) {
  if (!atomic_load(&c->failed)) return LOOM_OK;
  pthread_mutex_lock(&c->fail_mu);
  loom_status code = c->fail_code;
  loom_set_error(code, "%s: the communicator (rank %d of %d, %s) has failed: %s", what, c->rank, c->size,
                 loom_comm_backend_name(c->backend), c->fail_msg);
  pthread_mutex_unlock(&c->fail_mu);
  return code;
}

/* ---- options and environment ------------------------------------------------- */

void loom_comm_options_init(loom_comm_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->backend = LOOM_COMM_AUTO;
  o->device = loom_cpu();
  o->init = NULL;
  o->rank = -1;
  o->world_size = -1;
  o->timeout_s = 0;
  o->set_threads = true;
}

const char *loom_comm_backend_name(loom_comm_backend b) {
  switch (b) {
    case LOOM_COMM_AUTO: return "auto";
    case LOOM_COMM_SINGLE: return "single";
    case LOOM_COMM_MPI: return "mpi";
    case LOOM_COMM_NCCL: return "nccl";
  }
  return "?";
}

/* A whole non-negative decimal integer, or -1. */
static long long parse_nonneg(const char *s) {
  if (!s || !*s) return -1;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || v < 0) return -1;
  return v;
}

/* The leading integer of e.g. Slurm's "2(x3)". */
static long long parse_leading(const char *s) {
  if (!s || !*s) return -1;
  char *end = NULL;
  long long v = strtoll(s, &end, 10);
  return end == s || v < 0 ? -1 : v;
}

static int env_int(const char *name) {
  long long v = parse_nonneg(getenv(name));
  return v > (long long)INT32_MAX ? -1 : (int)v;
}

loom_status loom_dist_env_get(loom_dist_env *out) {
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "dist_env_get: out is NULL");
  loom_dist_env e = {sizeof e, false, 0, 1, 0, 1, "none"};
  struct {
    const char *name, *rank, *size, *lrank, *lsize;
  } launchers[] = {
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"loom", "LOOM_DIST_RANK", "LOOM_DIST_WORLD_SIZE", "LOOM_DIST_LOCAL_RANK", NULL},
  };
  for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
    int r = env_int(launchers[i].rank), n = env_int(launchers[i].size);
    if (r < 0 || n < 1) continue;
    e.launched = true;
    e.launcher = launchers[i].name;
    e.rank = r;
    e.world_size = n;
    int lr = env_int(launchers[i].lrank), ls = launchers[i].lsize ? env_int(launchers[i].lsize) : -1;
    e.local_rank = lr >= 0 ? lr : 0;
    e.local_size = ls >= 1 ? ls : 1;
    goto done;
  }
  /* srun sets SLURM_STEP_ID for the tasks of a step (an allocation's batch
   * script has SLURM_PROCID too, but is not a parallel launch). */
  if (getenv("SLURM_STEP_ID") && env_int("SLURM_PROCID") >= 0 && env_int("SLURM_NTASKS") >= 1) {
    e.launched = true;
    e.launcher = "slurm";
    e.rank = env_int("SLURM_PROCID");
    e.world_size = env_int("SLURM_NTASKS");
    e.local_rank = env_int("SLURM_LOCALID") >= 0 ? env_int("SLURM_LOCALID") : 0;
    long long ls = parse_leading(getenv("SLURM_STEP_TASKS_PER_NODE"));
    e.local_size = ls >= 1 && ls <= INT32_MAX ? (int)ls : 1;
    goto done;
  }
  if (env_int("PMIX_RANK") >= 0) {  /* a PMIx launcher that exports no size: MPI will tell */
    e.launched = true;
    e.launcher = "pmix";
    e.rank = env_int("PMIX_RANK");
    e.world_size = -1;
    goto done;
  }
  if (getenv("LOOM_DIST_INIT")) {
    e.launched = true;
    e.launcher = "loom";
  }
done:
  return LOOM_STRUCT_OUT("dist_env_get", loom_dist_env, out, &e);
}

bool loom_dist_have_mpi(void) {
#ifdef LOOM_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool loom_dist_have_nccl(void) {
#ifdef LOOM_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

loom_status loom_dist_resolve_timeout(double o_timeout, double *out) {
  if (o_timeout < 0 || o_timeout != o_timeout)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "comm: timeout_s is %g; use seconds > 0 (0: LOOM_DIST_TIMEOUT or %g)",
                          o_timeout, LOOM_DIST_DEFAULT_TIMEOUT_S);
  if (o_timeout > 0) {
    *out = o_timeout;
    return LOOM_OK;
  }
  const char *env = getenv("LOOM_DIST_TIMEOUT");
  if (env && *env) {
    char *end = NULL;
    double v = strtod(env, &end);
    if (end == env || *end || !(v > 0) || v > 1e9)
      return loom_set_error(LOOM_ERR_INVALID_ARG, "LOOM_DIST_TIMEOUT='%s': expected seconds > 0, e.g. 600", env);
    *out = v;
    return LOOM_OK;
  }
  *out = LOOM_DIST_DEFAULT_TIMEOUT_S;
  return LOOM_OK;
}

typedef struct init_spec {
  enum { INIT_SINGLE, INIT_MPI, INIT_FILE } kind;
  const char *path;  /* INIT_FILE */
} init_spec;

static loom_status parse_init(const char *text, const char *origin, init_spec *s) {
  if (!strcmp(text, "single")) s->kind = INIT_SINGLE;
  else if (!strcmp(text, "mpi")) s->kind = INIT_MPI;
  else if (!strncmp(text, "file:", 5) && text[5]) {
    s->kind = INIT_FILE;
    s->path = text + 5;
  } else
    return loom_set_error(LOOM_ERR_INVALID_ARG, "comm_init: %s '%s': use mpi, single or file:/shared/path", origin, text);
  return LOOM_OK;
}

static loom_status resolve_rank(int32_t opt, const char *env_name, const char *field, int *out) {
  if (opt >= 0) {
    *out = opt;
    return LOOM_OK;
  }
  const char *env = getenv(env_name);
  long long v = parse_nonneg(env);
  if (v < 0 || v > INT32_MAX)
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "comm_init: the file rendezvous needs options.%s or %s (got %s%s%s); mpirun/srun launches "
                          "need neither (use init \"mpi\")",
                          field, env_name, env ? "'" : "nothing", env ? env : "", env ? "'" : "");
  *out = (int)v;
  return LOOM_OK;
}

/* {LOOM_CUDA, -1}: the GPU numbered by this process's local rank. */
static loom_status resolve_device(loom_device in, loom_device *out) {
  *out = in;
  if (in.kind == LOOM_CUDA && in.index == -1) {
    loom_dist_env e = {.struct_size = sizeof e};
    LOOM_TRY(loom_dist_env_get(&e));
    int n = loom_device_count(LOOM_CUDA);
    if (n == 0) {
      const char *why = loom_cuda_unavailable_reason();
      return loom_set_error(LOOM_ERR_DEVICE, "comm_init: a GPU per rank was asked for, but CUDA is unavailable: %s",
                            why ? why : "no device");
    }
    if (e.local_rank >= n)
      return loom_set_error(LOOM_ERR_DEVICE,
                            "comm_init: this process is local rank %d but the machine has %d GPU%s; NCCL needs one GPU per "
                            "rank (two ranks cannot share a GPU): start at most %d ranks per machine",
                            e.local_rank, n, n == 1 ? "" : "s", n);
    *out = loom_cuda(e.local_rank);
  }
  return loom_device_check(*out);
}

loom_status loom_comm_init(const loom_comm_options *opt, loom_comm **out) {
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "comm_init: out is NULL");
  *out = NULL;
  loom_comm_options o;
  loom_comm_options_init(&o);
  LOOM_TRY(LOOM_STRUCT_IN("comm_init", loom_comm_options, &o, opt));
  if (o.backend < LOOM_COMM_AUTO || o.backend > LOOM_COMM_NCCL)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "comm_init: unknown backend %d; use a loom_comm_backend value", (int)o.backend);
  double timeout;
  LOOM_TRY(loom_dist_resolve_timeout(o.timeout_s, &timeout));

  /* Which rendezvous. */
  init_spec spec = {INIT_SINGLE, NULL};
  const char *init = o.init;
  const char *origin = "options.init";
  if (!init) {
    init = getenv("LOOM_DIST_INIT");
    origin = "LOOM_DIST_INIT";
  }
  if (init && *init) {
    LOOM_TRY(parse_init(init, origin, &spec));
  } else {
    loom_dist_env e = {.struct_size = sizeof e};
    LOOM_TRY(loom_dist_env_get(&e));
    spec.kind = e.launched ? INIT_MPI : INIT_SINGLE;
    if (o.backend == LOOM_COMM_MPI) spec.kind = INIT_MPI;
  }

  loom_device dev;
  LOOM_TRY(resolve_device(o.device, &dev));

  /* Which back end. */
  loom_comm_backend b = (loom_comm_backend)o.backend;
  if (b == LOOM_COMM_AUTO) {
    if (spec.kind == INIT_SINGLE) b = LOOM_COMM_SINGLE;
    else b = dev.kind == LOOM_CUDA ? LOOM_COMM_NCCL : LOOM_COMM_MPI;
  }
  loom_comm *c = NULL;
  loom_status st;
  switch (b) {
    case LOOM_COMM_SINGLE:
      st = loom_single_comm_init(dev, timeout, &c);
      break;
    case LOOM_COMM_MPI:
      if (dev.kind != LOOM_CPU)
        return loom_set_error(LOOM_ERR_DEVICE,
                              "comm_init: the MPI back end moves CPU tensors; for cuda:%d use the NCCL back end "
                              "(backend auto or nccl)", dev.index);
      if (spec.kind == INIT_FILE)
        return loom_set_error(LOOM_ERR_INVALID_ARG,
                              "comm_init: the file rendezvous (%s) hands out NCCL ids for GPUs; CPU ranks talk over MPI: "
                              "launch with mpirun/srun (init \"mpi\")", init);
      st = loom_mpi_comm_init(dev, timeout, &c);
      break;
    case LOOM_COMM_NCCL: {
      if (dev.kind != LOOM_CUDA)
        return loom_set_error(LOOM_ERR_DEVICE,
                              "comm_init: the NCCL back end needs a CUDA device (options.device); CPU tensors use MPI");
      loom_nccl_rendezvous rv = {"self", NULL, 0, 1};
      if (spec.kind == INIT_MPI) rv.method = "mpi";
      else if (spec.kind == INIT_FILE) {
        rv.method = "file";
        rv.path = spec.path;
        LOOM_TRY(resolve_rank(o.rank, "LOOM_DIST_RANK", "rank", &rv.rank));
        LOOM_TRY(resolve_rank(o.world_size, "LOOM_DIST_WORLD_SIZE", "world_size", &rv.size));
        if (rv.size < 1 || rv.rank >= rv.size)
          return loom_set_error(LOOM_ERR_INVALID_ARG, "comm_init: rank %d of world size %d; need 0 <= rank < world size",
                                rv.rank, rv.size);
      }
      st = loom_nccl_comm_init(dev, &rv, timeout, &c);
      break;
    }
    default:
      return loom_set_error(LOOM_ERR_INTERNAL, "comm_init: no back end chosen");
  }
  if (st != LOOM_OK) return st;
  if (o.set_threads) loom_dist_apply_threads(c);
  count_alive(c);
  *out = c;
  return LOOM_OK;
}

loom_status loom_comm_init_all(int n, const int *cuda_indices, const loom_comm_options *opt, loom_comm **comms) {
  if (!comms || n < 1)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "comm_init_all: need n >= 1 (got %d) and a comms array of n entries", n);
  for (int i = 0; i < n; i++) comms[i] = NULL;
  loom_comm_options o;
  loom_comm_options_init(&o);
  LOOM_TRY(LOOM_STRUCT_IN("comm_init_all", loom_comm_options, &o, opt));
  double timeout;
  LOOM_TRY(loom_dist_resolve_timeout(o.timeout_s, &timeout));
  /* One GPU per rank: NCCL cannot put two ranks on one physical GPU (it
   * refuses or hangs), so virtual devices of one GPU are refused here. */
  for (int i = 0; i < n; i++) {
    int idx = cuda_indices ? cuda_indices[i] : i;
    LOOM_TRY(loom_device_check(loom_cuda(idx)));
    for (int j = 0; j < i; j++) {
      int jdx = cuda_indices ? cuda_indices[j] : j;
      if (loom_device_physical(idx) == loom_device_physical(jdx))
        return loom_set_error(LOOM_ERR_DEVICE,
                              "comm_init_all: cuda:%d and cuda:%d are the same physical GPU (%d)%s; NCCL needs one "
                              "physical GPU per rank: list each GPU once", jdx, idx, loom_device_physical(idx),
                              idx == jdx ? "" : " (virtual devices)");
    }
  }
  LOOM_TRY(loom_nccl_comm_init_all(n, cuda_indices, timeout, comms));
  for (int i = 0; i < n; i++) count_alive(comms[i]);
  return LOOM_OK;
}

void loom_comm_free(loom_comm *c) {
  if (!c) return;
  if (c->counted) atomic_fetch_sub(&g_live_comms, 1);
  c->ops->destroy(c);
  pthread_mutex_destroy(&c->fail_mu);
  loom_sys_free(c);
}

int loom_comm_rank(const loom_comm *c) { return c ? c->rank : -1; }
int loom_comm_size(const loom_comm *c) { return c ? c->size : 0; }
int loom_comm_local_rank(const loom_comm *c) { return c ? c->local_rank : -1; }
int loom_comm_local_size(const loom_comm *c) { return c ? c->local_size : 0; }
loom_device loom_comm_device(const loom_comm *c) { return c ? c->device : loom_cpu(); }
loom_comm_backend loom_comm_get_backend(const loom_comm *c) { return c ? c->backend : LOOM_COMM_AUTO; }
int loom_dist_default_threads(const loom_comm *c) { return c ? c->default_threads : 1; }

loom_status loom_comm_set_timeout(loom_comm *c, double seconds) {
  if (!c) return loom_set_error(LOOM_ERR_INVALID_ARG, "comm_set_timeout: communicator is NULL");
  if (!(seconds > 0) || seconds > 1e9)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "comm_set_timeout: %g s; use seconds > 0", seconds);
  c->timeout_s = seconds;
  return LOOM_OK;
}

double loom_comm_get_timeout(const loom_comm *c) { return c ? c->timeout_s : 0.0; }

/* ---- collectives: shared checks ------------------------------------------------- */

/* The profiler's range around a collective call (host track: the call
 * enqueues the collective on the communication thread or stream). */
static int64_t tensor_bytes(const loom_tensor *t) {
  return loom_shape_numel(t->ndim, t->shape) * (int64_t)loom_dtype_size(t->dtype);
}
#define PROF_COLLECTIVE(name, bytes, call)                                      \
  do {                                                                          \
    if (!LOOM_PROF_ACTIVE()) return (call);                                     \
    loom_prof_range pr_ = LOOM_PROF_RANGE_INIT;                                 \
    loom_prof_begin(&pr_, LOOM_PROF_CAT_COLLECTIVE, name, NULL);                \
    loom_status st_ = (call);                                                   \
    loom_prof_end(&pr_, 0.0, (bytes));                                          \
    return st_;                                                                 \
  } while (0)

static loom_status check_comm(loom_comm *c, const char *what) {
  if (!c) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: communicator is NULL", what);
  return loom_comm_failed_error(c, what);
}

static loom_status check_tensor(loom_comm *c, loom_tensor *t, const char *what, const char *role) {
  if (!t) {
    if (loom_last_status() != LOOM_OK) return loom_error_prefix("%s", what);
    return loom_set_error(LOOM_ERR_NULL_INPUT, "%s: the %s tensor is NULL", what, role);
  }
  if (!loom_tensor_is_contiguous(t))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: the %s tensor must be contiguous (use loom_contiguous)", what, role);
  if (!loom_device_eq(t->storage->device, c->device)) {
    char b1[32], b2[32];
    return loom_set_error(LOOM_ERR_DEVICE, "%s: the %s tensor is on %s but the communicator (%s back end) drives %s", what,
                          role, loom_device_str(t->storage->device, b1, 32), loom_comm_backend_name(c->backend),
                          loom_device_str(c->device, b2, 32));
  }
  return LOOM_OK;
}

loom_status loom_comm_all_reduce_timed(loom_comm *c, loom_tensor *t, loom_reduce_op op, loom_comm_times *times) {
  LOOM_TRY(check_comm(c, "all_reduce"));
  LOOM_TRY(check_tensor(c, t, "all_reduce", "input"));
  if (op != LOOM_REDUCE_SUM && op != LOOM_REDUCE_AVG && op != LOOM_REDUCE_MAX)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "all_reduce: unknown op %d; use LOOM_REDUCE_SUM, AVG or MAX", (int)op);
  if (times) times->start = times->end = 0;
  PROF_COLLECTIVE("all_reduce", tensor_bytes(t), c->ops->all_reduce(c, t, op, times));
}

loom_status loom_comm_all_reduce(loom_comm *c, loom_tensor *t, loom_reduce_op op) {
  return loom_comm_all_reduce_timed(c, t, op, NULL);
}

loom_status loom_comm_broadcast(loom_comm *c, loom_tensor *t, int root) {
  LOOM_TRY(check_comm(c, "broadcast"));
  LOOM_TRY(check_tensor(c, t, "broadcast", "input"));
  if (root < 0 || root >= c->size)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "broadcast: root %d is not a rank (world size %d)", root, c->size);
  PROF_COLLECTIVE("broadcast", tensor_bytes(t), c->ops->broadcast(c, t, root));
}

loom_status loom_comm_all_gather(loom_comm *c, loom_tensor *in, loom_tensor *out) {
  LOOM_TRY(check_comm(c, "all_gather"));
  LOOM_TRY(check_tensor(c, in, "all_gather", "input"));
  LOOM_TRY(check_tensor(c, out, "all_gather", "output"));
  if (in->dtype != out->dtype)
    return loom_set_error(LOOM_ERR_DTYPE, "all_gather: input is %s but output is %s", loom_dtype_name(in->dtype),
                          loom_dtype_name(out->dtype));
  int64_t n = loom_shape_numel(in->ndim, in->shape), m = loom_shape_numel(out->ndim, out->shape);
  if (m != n * c->size)
    return loom_set_error(LOOM_ERR_SHAPE,
                          "all_gather: the output has %lld elements but needs world size %d x %lld input elements = %lld",
                          (long long)m, c->size, (long long)n, (long long)(n * c->size));
  if (loom_tensor_ptr(in) == loom_tensor_ptr(out) && c->size > 1)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "all_gather: input and output must not be the same memory");
  PROF_COLLECTIVE("all_gather", tensor_bytes(out), c->ops->all_gather(c, in, out));
}

loom_status loom_comm_barrier(loom_comm *c) {
  LOOM_TRY(check_comm(c, "barrier"));
  PROF_COLLECTIVE("barrier", 0, c->ops->barrier(c));
}

loom_status loom_comm_wait(loom_comm *c) {
  LOOM_TRY(check_comm(c, "comm_wait"));
  return c->ops->wait(c);
}

/* Declared in dist.h from the start but never defined until issue 22's
 * NCCL timeout test needed it. */
loom_stream *loom_comm_stream(loom_comm *c) {
  if (!c) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "comm_stream: communicator is NULL");
    return NULL;
  }
  if (c->ops->stream && c->impl) return c->ops->stream(c);
  return loom_stream_current(c->device);
}

loom_status loom_comm_synchronize(loom_comm *c) {
  LOOM_TRY(check_comm(c, "comm_synchronize"));
  return c->ops->synchronize(c);
}

loom_status loom_comm_check(loom_comm *c) {
  LOOM_TRY(check_comm(c, "comm_check"));
  if (c->ops->check) return c->ops->check(c);
  return LOOM_OK;
}

loom_status loom_comm_abort(loom_comm *c) {
  if (!c) return loom_set_error(LOOM_ERR_INVALID_ARG, "comm_abort: communicator is NULL");
  c->ops->abort(c);
  if (!atomic_load(&c->failed)) loom_comm_fail(c, LOOM_ERR_COMM, "aborted by loom_comm_abort");
  loom_clear_error();
  return LOOM_OK;
}

loom_status loom_comm_group_begin(void) { return loom_nccl_group_begin(); }
loom_status loom_comm_group_end(void) { return loom_nccl_group_end(); }
