/* loader.c — the asynchronous prefetching loader, at the buffer level.
 *
 * Batches of an epoch are numbered 0..nb-1. Workers claim the next number
 * (in order, under the lock), assemble the whole batch into a host buffer
 * outside the lock, and park it in ring slot b % prefetch; the consumer takes
 * slot next_deliver % prefetch when it is filled. At most `prefetch` batches
 * are claimed ahead of the consumer, so the ring never overflows, and since
 * a batch's contents depend only on (seed, epoch, b), the sequence is the
 * same for any number of workers and any prefetch depth.
 *
 * Buffers are separate from ring slots: a delivered buffer belongs to the
 * consumer's tensors until they die, and workers take another one from a free
 * list (allocating only if the consumer holds on to many batches), so a
 * consumer that keeps old batches cannot deadlock the workers. prefetch + 1
 * buffers are allocated up front so the steady state allocates nothing.
 *
 * Errors: a failed batch parks its error in its slot; workers stop claiming;
 * the consumer gets every earlier batch, then the error (sticky until
 * start_epoch). All waits are condition variables: nothing spins.
 *
 * On a GPU each buffer is a pinned host block plus a device block. The worker
 * that filled the host block queues the H2D copy on the loader's copy stream
 * (after waiting, on that stream, for the compute stream to be done with the
 * device block's previous contents) and records copy_done; the consumer makes
 * the compute stream wait on copy_done. When the batch's tensors die,
 * compute_done is recorded on the compute stream. The only host-side wait is
 * a worker's, before it rewrites a pinned block whose previous copy could
 * still be in flight — off the consumer's path.
 *
 * loom_shutdown refuses while a loader is alive (its workers would read
 * memory the teardown frees): every loader is counted from loom_loader_new
 * until loom_loader_free. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/struct_size.h"
#include "data/data_internal.h"
#include "alloc/alloc.h"
#include "device/device_internal.h"
#include "device/sync_stats.h"
#include "prof/prof.h"
#include "core/sys.h"
#include "core/teardown.h"

enum { SLOT_EMPTY = 0, SLOT_READY = 1, SLOT_ERROR = 2 };

static atomic_int g_live_loaders;

/* loom_shutdown's busy check (core/teardown.h). */
static loom_status loaders_busy(void) {
  int n = atomic_load(&g_live_loaders);
  if (n == 0) return LOOM_OK;
  return loom_set_error(LOOM_ERR_STATE, "%d data loader%s (worker threads, batch buffers; free with loom_loader_free)",
                        n, n == 1 ? "" : "s");
}
LOOM_BUSY_CHECK(LOOM_LAYER_DATA, loaders_busy)

struct loom_batch_buf {
  loom_loader *owner;
  unsigned char *host;   /* x at 0, y at y_off */
  unsigned char *dev;    /* device copy (CUDA), else NULL */
  atomic_int holders;
  int64_t n, index;
  loom_batch_buf *next;  /* free-list link */
#ifdef LOOM_HAVE_CUDA
  cudaEvent_t copy_done, compute_done;
  bool copy_recorded, compute_recorded;
#endif
};

typedef struct slot {
  int state;
  loom_batch_buf *buf;
  loom_status err;
  char msg[1024];
} slot;

typedef struct worker {
  loom_loader *l;
  int id;
  pthread_t thread;
  unsigned char *sx, *sy;  /* one source sample */
} worker;

struct loom_loader {
  loom_dataset *ds;
  loom_loader_options o;
  loom_transform tf;
  size_t xo, yo;          /* bytes of one delivered x / y */
  size_t y_off, block;    /* layout of a buffer */
  bool on_gpu;
  /* epoch */
  int64_t epoch;
  int64_t *order, *perm;
  int64_t nsamples, nbatches;
  /* ring, guarded by mu */
  pthread_mutex_t mu;
  pthread_cond_t work_cv;   /* workers: a batch can be claimed, or stop */
  pthread_cond_t ready_cv;  /* consumer: a slot was filled */
  pthread_cond_t idle_cv;   /* start_epoch: no fill in progress */
  int64_t next_claim, next_deliver;
  slot *ring;
  int active_fills;
  bool failed;              /* a fill failed this epoch: claim nothing more */
  bool stopping;
  loom_status sticky;
  char sticky_msg[1024];
  loom_batch_buf *free_list;
  int held;                 /* delivered, not yet released */
  bool closed;              /* loom_loader_free was called */
  worker *workers;
  int nworkers;
  worker self;              /* scratch for workers == 0 */
  /* stats (under mu) */
  double t_start, wait_s;
  int64_t st_batches, st_samples, st_produced;
  /* CUDA */
  loom_stream *copy_stream;
  pthread_mutex_t copy_mu;  /* one thread at a time drives the copy stream */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool loom_loader_channels_last(const loom_loader *l) { return l->tf.hwc; }

void loom_loader_options_init(loom_loader_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->batch_size = 64;
  o->workers = 2;
  o->prefetch = 2;
  o->world_size = 1;
  o->device = loom_cpu();
  o->x_dtype = LOOM_F32;
  o->y_dtype = LOOM_I64;
  o->scale = 1.0f;
}

/* ---- buffers -------------------------------------------------------------- */
static void buf_destroy(loom_loader *l, loom_batch_buf *b) {
  if (!b) return;
#ifdef LOOM_HAVE_CUDA
  if (l->on_gpu) {
    if (b->copy_done) cudaEventDestroy(b->copy_done);
    if (b->compute_done) cudaEventDestroy(b->compute_done);
  }
#endif
  if (l->on_gpu) {
    loom_alloc_free(l->o.device, b->dev);
    loom_alloc_pinned_free(b->host);
  } else {
    loom_alloc_free(loom_cpu(), b->host);
  }
  loom_sys_free(b);
}

static loom_status buf_new(loom_loader *l, loom_batch_buf **out) {
  *out = NULL;
  loom_batch_buf *b = loom_sys_calloc(1, sizeof *b);
  if (!b) return loom_set_error(LOOM_ERR_OOM, "loader: out of host memory");
  b->owner = l;
  loom_status st;
  if (l->on_gpu) {
    st = loom_alloc_pinned_malloc(l->block, (void **)&b->host);
    if (st == LOOM_OK) st = loom_alloc_malloc(l->o.device, l->block, NULL, (void **)&b->dev);
#ifdef LOOM_HAVE_CUDA
    if (st == LOOM_OK) st = loom_cuda_set_device(l->o.device.index);
    if (st == LOOM_OK) {
      cudaError_t e = cudaEventCreateWithFlags(&b->copy_done, cudaEventDisableTiming);
      if (e == cudaSuccess) e = cudaEventCreateWithFlags(&b->compute_done, cudaEventDisableTiming);
      if (e != cudaSuccess) st = loom_cuda_error(e, "cudaEventCreateWithFlags", __FILE__, __LINE__);
    }
#endif
  } else {
    st = loom_alloc_malloc(loom_cpu(), l->block, NULL, (void **)&b->host);
  }
  if (st != LOOM_OK) {
    loom_error_prefix("loader: allocating a batch buffer of %zu bytes", l->block);
    buf_destroy(l, b);
    return st;
  }
  *out = b;
  return LOOM_OK;
}

/* ---- epochs ---------------------------------------------------------------- */
/* Under mu, with no fill in progress. */
static void epoch_begin(loom_loader *l, int64_t epoch) {
  l->epoch = epoch;
  l->nsamples = loom_data_shard_order(l->ds->length, l->o.shuffle, l->o.seed, epoch, l->o.rank, l->o.world_size,
                                      l->o.drop_last, l->order, l->perm);
  int64_t bs = l->o.batch_size;
  l->nbatches = l->o.drop_last ? l->nsamples / bs : (l->nsamples + bs - 1) / bs;
  for (int i = 0; i < l->o.prefetch; i++) {
    slot *s = &l->ring[i];
    if (s->buf) { s->buf->next = l->free_list; l->free_list = s->buf; }
    s->buf = NULL;
    s->state = SLOT_EMPTY;
  }
  l->next_claim = l->next_deliver = 0;
  l->failed = false;
  l->sticky = LOOM_OK;
  pthread_cond_broadcast(&l->work_cv);
}

/* ---- filling a batch ---------------------------------------------------------- */
/* Assemble batch b into buf (host, then the H2D copy on a GPU). Runs without
 * the lock: order/epoch are stable while a fill is active (start_epoch waits
 * for active fills to finish before touching them). */
static loom_status fill(loom_loader *l, worker *w, loom_batch_buf *buf, int64_t b) {
  loom_dataset *ds = l->ds;
  int64_t bs = l->o.batch_size;
  int64_t start = b * bs;
  int64_t n = l->nsamples - start < bs ? l->nsamples - start : bs;
#ifdef LOOM_HAVE_CUDA
  if (l->on_gpu) {
    LOOM_TRY(loom_cuda_set_device(l->o.device.index));
    /* The previous H2D copy out of this pinned block may still be running. */
    /* (Usually long done: only wait, and count a wait, when it is not.) */
    if (buf->copy_recorded && cudaEventQuery(buf->copy_done) != cudaSuccess) {
      (void)cudaGetLastError();
      loom_sync_count(LOOM_SYNC_EVENT);
      LOOM_CUDA_CHECK(cudaEventSynchronize(buf->copy_done));
    }
  }
#endif
  unsigned char *xo = buf->host, *yo = buf->host + l->y_off;
  for (int64_t j = 0; j < n; j++) {
    int64_t idx = l->order[start + j];
    void *xdst = l->tf.identity ? (void *)(xo + (size_t)j * l->xo) : (void *)w->sx;
    uint64_t key = loom_data_sample_key(l->o.seed, l->epoch, idx);
    loom_status st = loom_dataset_read_keyed(ds, idx, key, xdst, ds->has_y ? w->sy : NULL);
    if (st != LOOM_OK)
      return loom_error_prefix("loader: epoch %lld, batch %lld, sample %lld (worker %d)", (long long)l->epoch,
                               (long long)b, (long long)idx, w->id);
    if (!l->tf.identity) {
      loom_transform_apply(&l->tf, w->sx, xdst == w->sx ? xo + (size_t)j * l->xo : xdst, key);
    }
    if (ds->has_y) loom_label_convert(ds->y_dtype, w->sy, l->o.y_dtype, yo + (size_t)j * l->yo);
  }
  buf->n = n;
  buf->index = b;
#ifdef LOOM_HAVE_CUDA
  if (l->on_gpu) {
    cudaStream_t cs = (cudaStream_t)loom_stream_native(l->copy_stream);
    loom_status st = LOOM_OK;
    pthread_mutex_lock(&l->copy_mu);
    loom_prof_range pr = LOOM_PROF_RANGE_INIT;
    if (LOOM_PROF_ACTIVE()) loom_prof_begin(&pr, LOOM_PROF_CAT_H2D, "H2D batch copy", l->copy_stream);
    cudaError_t e = cudaSuccess;
    /* Do not overwrite the device block while compute may still read it. */
    if (buf->compute_recorded) e = cudaStreamWaitEvent(cs, buf->compute_done, 0);
    if (e == cudaSuccess) e = cudaMemcpyAsync(buf->dev, buf->host, (size_t)n * l->xo, cudaMemcpyHostToDevice, cs);
    if (e == cudaSuccess && ds->has_y)
      e = cudaMemcpyAsync(buf->dev + l->y_off, buf->host + l->y_off, (size_t)n * l->yo, cudaMemcpyHostToDevice, cs);
    if (e == cudaSuccess) e = cudaEventRecord(buf->copy_done, cs);
    loom_prof_end(&pr, 0.0, (int64_t)((size_t)n * (l->xo + l->yo)));
    pthread_mutex_unlock(&l->copy_mu);
    if (e != cudaSuccess) st = loom_cuda_error(e, "loader: host-to-device batch copy", __FILE__, __LINE__);
    LOOM_TRY(st);
    buf->copy_recorded = true;
  }
#endif
  return LOOM_OK;
}

/* Claim-fill-park, shared by workers and the inline (workers == 0) path.
 * Called and returns with mu held. */
static void claim_and_fill(loom_loader *l, worker *w) {
  int64_t b = l->next_claim++;
  l->active_fills++;
  loom_batch_buf *buf = l->free_list;
  if (buf) l->free_list = buf->next;
  pthread_mutex_unlock(&l->mu);

  loom_status st = LOOM_OK;
  loom_prof_range pr = LOOM_PROF_RANGE_INIT;
  if (LOOM_PROF_ACTIVE()) loom_prof_begin(&pr, LOOM_PROF_CAT_LOADER, "loader fill batch", NULL);
  if (!buf) st = buf_new(l, &buf);
  if (st == LOOM_OK) st = fill(l, w, buf, b);
  loom_prof_end(&pr, 0.0, 0);

  pthread_mutex_lock(&l->mu);
  slot *s = &l->ring[b % l->o.prefetch];
  if (st == LOOM_OK) {
    s->state = SLOT_READY;
    s->buf = buf;
    l->st_produced++;
  } else {
    s->state = SLOT_ERROR;
    s->err = st;
    snprintf(s->msg, sizeof s->msg, "%s", loom_last_error());
    l->failed = true;
    if (buf) { buf->next = l->free_list; l->free_list = buf; }
  }
  l->active_fills--;
  pthread_cond_broadcast(&l->ready_cv);
  if (l->active_fills == 0) pthread_cond_broadcast(&l->idle_cv);
}

static bool can_claim(const loom_loader *l) {
  return !l->failed && l->next_claim < l->nbatches && l->next_claim < l->next_deliver + l->o.prefetch;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  loom_loader *l = w->l;
  char name[32];
  snprintf(name, sizeof name, "loader worker %d", w->id);
  loom_prof_thread_name(name);
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->stopping && !can_claim(l)) pthread_cond_wait(&l->work_cv, &l->mu);
    if (l->stopping) break;
    claim_and_fill(l, w);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

/* ---- construction ------------------------------------------------------------- */
static loom_status check_options(const loom_dataset *ds, const loom_loader_options *o) {
  if (o->batch_size < 1 || o->batch_size > ((int64_t)1 << 24))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loader: batch_size is %lld; use 1..16777216", (long long)o->batch_size);
  if (o->workers < 0 || o->workers > 256)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loader: workers is %d; use 0 (consumer thread) to 256", o->workers);
  if (o->prefetch < 1 || o->prefetch > 1024)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loader: prefetch is %d; use 1..1024", o->prefetch);
  if (o->world_size < 1 || o->rank < 0 || o->rank >= o->world_size)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loader: rank %d of world_size %d; need 0 <= rank < world_size",
                          o->rank, o->world_size);
  if (ds->has_y) LOOM_TRY(loom_label_check(ds->y_dtype, o->y_dtype));
  LOOM_TRY(loom_device_check(o->device));
  return LOOM_OK;
}

static void loader_destroy_struct(loom_loader *l) {
  pthread_mutex_destroy(&l->mu);
  pthread_mutex_destroy(&l->copy_mu);
  pthread_cond_destroy(&l->work_cv);
  pthread_cond_destroy(&l->ready_cv);
  pthread_cond_destroy(&l->idle_cv);
  loom_sys_free(l);
}

static void free_worker_scratch(worker *w) {
  loom_sys_free(w->sx);
  loom_sys_free(w->sy);
  w->sx = w->sy = NULL;
}

static loom_status alloc_worker_scratch(loom_loader *l, worker *w, int id) {
  w->l = l;
  w->id = id;
  w->sx = loom_sys_malloc(l->ds->x_bytes ? l->ds->x_bytes : 1);
  w->sy = loom_sys_malloc(16);
  if (!w->sx || !w->sy) return loom_set_error(LOOM_ERR_OOM, "loader: out of host memory");
  return LOOM_OK;
}

/* Everything but the struct itself (which lives while batches are held). */
static void loader_teardown(loom_loader *l) {
  if (l->copy_stream) {
    /* Copies in flight read pinned blocks we are about to free. */
    loom_stream_synchronize(l->copy_stream);
    loom_stream_free(l->copy_stream);
    l->copy_stream = NULL;
  }
  if (l->ring) {
    for (int i = 0; i < l->o.prefetch; i++) buf_destroy(l, l->ring[i].buf);
    loom_sys_free(l->ring);
    l->ring = NULL;
  }
  while (l->free_list) {
    loom_batch_buf *b = l->free_list;
    l->free_list = b->next;
    buf_destroy(l, b);
  }
  if (l->workers) {
    for (int i = 0; i < l->nworkers; i++) free_worker_scratch(&l->workers[i]);
    loom_sys_free(l->workers);
    l->workers = NULL;
  }
  free_worker_scratch(&l->self);
  loom_sys_free(l->order);
  loom_sys_free(l->perm);
  l->order = l->perm = NULL;
  loom_transform_destroy(&l->tf);
  loom_dataset_release(l->ds);
  l->ds = NULL;
}

loom_loader *loom_loader_new(loom_dataset *ds, const loom_loader_options *opts) {
  if (!ds) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_loader_new: dataset is NULL");
    return NULL;
  }
  loom_loader_options o;
  loom_loader_options_init(&o);
  if (LOOM_STRUCT_IN("loom_loader_new", loom_loader_options, &o, opts) != LOOM_OK) return NULL;
  if (check_options(ds, &o) != LOOM_OK) return NULL;
  loom_loader *l = loom_sys_calloc(1, sizeof *l);
  if (!l) {
    loom_set_error(LOOM_ERR_OOM, "loom_loader_new: out of host memory");
    return NULL;
  }
  pthread_mutex_init(&l->mu, NULL);
  pthread_mutex_init(&l->copy_mu, NULL);
  pthread_cond_init(&l->work_cv, NULL);
  pthread_cond_init(&l->ready_cv, NULL);
  pthread_cond_init(&l->idle_cv, NULL);
  l->ds = loom_dataset_retain(ds);
  l->o = o;
  l->o.mean = l->o.std = NULL;  /* folded into tf; the caller's arrays are not kept */
  l->on_gpu = o.device.kind == LOOM_CUDA;
  loom_status st = loom_transform_init(&l->tf, ds, &o);
  if (st != LOOM_OK) goto fail;
  l->xo = l->tf.out_bytes;
  l->yo = ds->has_y ? loom_dtype_size(o.y_dtype) : 0;
  l->y_off = ((size_t)o.batch_size * l->xo + 255) / 256 * 256;
  l->block = l->y_off + (size_t)o.batch_size * l->yo;
  int64_t n = ds->length;
  l->order = loom_sys_malloc(sizeof(int64_t) * (size_t)(n / o.world_size + 2));
  l->perm = loom_sys_malloc(sizeof(int64_t) * (size_t)(n + 1));
  l->ring = loom_sys_calloc((size_t)o.prefetch, sizeof *l->ring);
  if (!l->order || !l->perm || !l->ring) {
    st = loom_set_error(LOOM_ERR_OOM, "loom_loader_new: out of host memory");
    goto fail;
  }
  if (l->on_gpu) {
#ifdef LOOM_HAVE_CUDA
    st = loom_stream_create(o.device, &l->copy_stream);
    if (st != LOOM_OK) goto fail;
#else
    st = loom_set_error(LOOM_ERR_DEVICE, "loader: built without CUDA");
    goto fail;
#endif
  }
  /* prefetch in flight + 1 held by the consumer: the steady state allocates nothing. */
  for (int i = 0; i < o.prefetch + 1; i++) {
    loom_batch_buf *b = NULL;
    if ((st = buf_new(l, &b)) != LOOM_OK) goto fail;
    b->next = l->free_list;
    l->free_list = b;
  }
  if ((st = alloc_worker_scratch(l, &l->self, -1)) != LOOM_OK) goto fail;
  if (o.workers > 0) {
    l->workers = loom_sys_calloc((size_t)o.workers, sizeof *l->workers);
    if (!l->workers) { st = loom_set_error(LOOM_ERR_OOM, "loom_loader_new: out of host memory"); goto fail; }
    for (int i = 0; i < o.workers; i++)
      if ((st = alloc_worker_scratch(l, &l->workers[i], i)) != LOOM_OK) { l->nworkers = i + 1; goto fail; }
    l->nworkers = o.workers;
  }
  pthread_mutex_lock(&l->mu);
  epoch_begin(l, 0);
  l->t_start = now_s();
  pthread_mutex_unlock(&l->mu);
  for (int i = 0; i < l->nworkers; i++) {
    if (pthread_create(&l->workers[i].thread, NULL, worker_main, &l->workers[i]) != 0) {
      /* Stop and join the ones already running. */
      pthread_mutex_lock(&l->mu);
      l->stopping = true;
      pthread_cond_broadcast(&l->work_cv);
      pthread_mutex_unlock(&l->mu);
      for (int k = 0; k < i; k++) pthread_join(l->workers[k].thread, NULL);
      st = loom_set_error(LOOM_ERR_OOM, "loom_loader_new: could not start worker thread %d of %d; use fewer workers", i,
                          l->nworkers);
      goto fail;
    }
  }
  atomic_fetch_add(&g_live_loaders, 1);
  return l;
fail:
  loader_teardown(l);
  loader_destroy_struct(l);
  (void)st;
  return NULL;
}

/* ---- the consumer ------------------------------------------------------------ */
static loom_status deliver_error(loom_loader *l) {
  return loom_set_error(l->sticky, "%s", l->sticky_msg);
}

loom_status loom_loader_fail(loom_loader *l) {
  loom_status st = loom_last_status();
  pthread_mutex_lock(&l->mu);
  if (l->sticky == LOOM_OK) {
    l->sticky = st;
    snprintf(l->sticky_msg, sizeof l->sticky_msg, "%s", loom_last_error());
  }
  pthread_mutex_unlock(&l->mu);
  return st;
}

loom_status loom_loader_next_raw(loom_loader *l, loom_raw_batch *out, int holders) {
  if (!out) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_loader_next: out is NULL");
  memset(out, 0, sizeof *out);
  if (!l) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_loader_next: loader is NULL");
  pthread_mutex_lock(&l->mu);
  if (l->sticky != LOOM_OK) {
    loom_status st = deliver_error(l);
    pthread_mutex_unlock(&l->mu);
    return st;
  }
  if (l->next_deliver >= l->nbatches) {
    /* End of epoch; all of its batches were delivered, so no fill is active:
     * start the next one now and let the workers get ahead. */
    if (l->ds->epoch_end) l->ds->epoch_end(l->ds, l->epoch);
    epoch_begin(l, l->epoch + 1);
    pthread_mutex_unlock(&l->mu);
    return LOOM_OK;
  }
  int64_t b = l->next_deliver;
  slot *s = &l->ring[b % l->o.prefetch];
  double t0 = now_s();
  loom_prof_range pr = LOOM_PROF_RANGE_INIT;
  if (LOOM_PROF_ACTIVE()) loom_prof_begin(&pr, LOOM_PROF_CAT_LOADER, "loader wait", NULL);
  if (l->nworkers == 0) {
    /* Inline: the consumer is the worker. Its time counts as data wait. */
    if (s->state == SLOT_EMPTY) claim_and_fill(l, &l->self);
  } else {
    while (s->state == SLOT_EMPTY) pthread_cond_wait(&l->ready_cv, &l->mu);
  }
  loom_prof_end(&pr, 0.0, 0);
  l->wait_s += now_s() - t0;
  if (s->state == SLOT_ERROR) {
    l->sticky = s->err;
    snprintf(l->sticky_msg, sizeof l->sticky_msg, "%s", s->msg);
    s->state = SLOT_EMPTY;
    loom_status st = deliver_error(l);
    pthread_mutex_unlock(&l->mu);
    return st;
  }
  loom_batch_buf *buf = s->buf;
  s->buf = NULL;
  s->state = SLOT_EMPTY;
  l->next_deliver++;
  l->held++;
  l->st_batches++;
  l->st_samples += buf->n;
  pthread_cond_broadcast(&l->work_cv);  /* the window moved: one more batch may be claimed */
  pthread_mutex_unlock(&l->mu);

  atomic_store(&buf->holders, holders < 1 ? 1 : holders);
  out->buf = buf;
  out->n = buf->n;
  out->index = buf->index;
  unsigned char *base = l->on_gpu ? buf->dev : buf->host;
  out->x = base;
  out->y = l->ds->has_y ? base + l->y_off : NULL;
#ifdef LOOM_HAVE_CUDA
  if (l->on_gpu) {
    /* Hand the batch to the compute stream: it waits for the copy, the host does not. */
    loom_stream *cs = loom_stream_current(l->o.device);
    loom_status st = cs ? LOOM_OK : LOOM_ERR_DEVICE;
    if (st == LOOM_OK) {
      cudaError_t e = cudaStreamWaitEvent((cudaStream_t)loom_stream_native(cs), buf->copy_done, 0);
      if (e != cudaSuccess) st = loom_cuda_error(e, "loader: cudaStreamWaitEvent", __FILE__, __LINE__);
    }
    if (st != LOOM_OK) {
      atomic_store(&buf->holders, 1);
      loom_loader_release_raw(buf);
      memset(out, 0, sizeof *out);
      return st;
    }
  }
#endif
  return LOOM_OK;
}

void loom_loader_release_raw(loom_batch_buf *b) {
  if (!b) return;
  if (atomic_fetch_sub(&b->holders, 1) != 1) return;
  loom_loader *l = b->owner;
#ifdef LOOM_HAVE_CUDA
  if (l->on_gpu && loom_cuda_set_device(l->o.device.index) == LOOM_OK) {
    /* Work already queued on the compute stream may still read the block:
     * the copy stream waits on this before refilling it. */
    loom_stream *cs = loom_stream_current(l->o.device);
    if (cs && cudaEventRecord(b->compute_done, (cudaStream_t)loom_stream_native(cs)) == cudaSuccess)
      b->compute_recorded = true;
    else {
      loom_sync_count(LOOM_SYNC_DEVICE);
      cudaDeviceSynchronize();  /* could not record: fall back to a full wait rather than a race */
    }
  }
#endif
  pthread_mutex_lock(&l->mu);
  l->held--;
  bool closed = l->closed, last = closed && l->held == 0;
  if (!closed) {
    b->next = l->free_list;
    l->free_list = b;
  }
  pthread_mutex_unlock(&l->mu);
  if (closed) buf_destroy(l, b);
  if (last) loader_destroy_struct(l);
}

loom_status loom_loader_start_epoch(loom_loader *l, int64_t epoch) {
  if (!l) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_loader_start_epoch: loader is NULL");
  if (epoch < 0) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_loader_start_epoch: epoch %lld is negative", (long long)epoch);
  pthread_mutex_lock(&l->mu);
  /* Let in-flight fills finish (they read the order we are about to change). */
  l->failed = true;
  while (l->active_fills > 0) pthread_cond_wait(&l->idle_cv, &l->mu);
  epoch_begin(l, epoch);
  pthread_mutex_unlock(&l->mu);
  return LOOM_OK;
}

loom_status loom_loader_seek(loom_loader *l, int64_t epoch, int64_t batch) {
  if (!l) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_loader_seek: loader is NULL");
  if (epoch < 0) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_loader_seek: epoch %lld is negative", (long long)epoch);
  pthread_mutex_lock(&l->mu);
  if (batch < 0 || batch > l->nbatches) {
    int64_t nb = l->nbatches;
    pthread_mutex_unlock(&l->mu);
    return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_loader_seek: batch %lld is outside 0..%lld (batches per epoch)",
                          (long long)batch, (long long)nb);
  }
  l->failed = true;
  while (l->active_fills > 0) pthread_cond_wait(&l->idle_cv, &l->mu);
  epoch_begin(l, epoch);
  /* A batch's contents depend only on (seed, epoch, batch number), so the
   * ring simply starts further in. */
  l->next_claim = l->next_deliver = batch;
  pthread_mutex_unlock(&l->mu);
  return LOOM_OK;
}

loom_status loom_loader_position(const loom_loader *l, int64_t *epoch, int64_t *batch) {
  if (!l) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_loader_position: loader is NULL");
  pthread_mutex_lock((pthread_mutex_t *)&l->mu);
  int64_t e = l->epoch, b = l->next_deliver;
  pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
  if (epoch) *epoch = e;
  if (batch) *batch = b;
  return LOOM_OK;
}

int64_t loom_loader_epoch(const loom_loader *l) {
  if (!l) return 0;
  pthread_mutex_lock((pthread_mutex_t *)&l->mu);
  int64_t e = l->epoch;
  pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
  return e;
}

int64_t loom_loader_num_batches(const loom_loader *l) {
  if (!l) return 0;
  pthread_mutex_lock((pthread_mutex_t *)&l->mu);
  int64_t n = l->nbatches;
  pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
  return n;
}

int64_t loom_loader_num_samples(const loom_loader *l) {
  if (!l) return 0;
  pthread_mutex_lock((pthread_mutex_t *)&l->mu);
  int64_t n = l->o.drop_last ? l->nbatches * l->o.batch_size : l->nsamples;
  pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
  return n;
}

const loom_loader_options *loom_loader_get_options(const loom_loader *l) { return &l->o; }

void loom_loader_out_info(const loom_loader *l, loom_dtype *x_dt, int *x_ndim, int64_t *x_shape, loom_dtype *y_dt,
                          bool *has_y, loom_device *dev) {
  *x_dt = l->o.x_dtype;
  *x_ndim = l->ds->x_ndim;
  for (int i = 0; i < l->ds->x_ndim; i++) x_shape[i] = l->ds->x_shape[i];
  *y_dt = l->o.y_dtype;
  *has_y = l->ds->has_y;
  *dev = l->o.device;
}

loom_status loom_loader_stats_get(loom_loader *l, loom_loader_stats *out) {
  if (!l || !out) return loom_set_error(LOOM_ERR_INVALID_ARG, "loom_loader_stats_get: NULL argument");
  loom_loader_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  pthread_mutex_lock(&l->mu);
  s.wait_seconds = l->wait_s;
  s.elapsed_seconds = now_s() - l->t_start;
  s.batches = l->st_batches;
  s.samples = l->st_samples;
  s.batches_produced = l->st_produced;
  pthread_mutex_unlock(&l->mu);
  s.wait_fraction = s.elapsed_seconds > 0 ? s.wait_seconds / s.elapsed_seconds : 0.0;
  s.samples_per_second = s.elapsed_seconds > 0 ? (double)s.samples / s.elapsed_seconds : 0.0;
  return LOOM_STRUCT_OUT("loom_loader_stats_get", loom_loader_stats, out, &s);
}

void loom_loader_stats_reset(loom_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->wait_s = 0;
  l->st_batches = l->st_samples = l->st_produced = 0;
  l->t_start = now_s();
  pthread_mutex_unlock(&l->mu);
}

void loom_loader_free(loom_loader *l) {
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stopping = true;
  pthread_cond_broadcast(&l->work_cv);
  pthread_mutex_unlock(&l->mu);
  /* Workers finish the batch in hand (bounded work), then exit. */
  for (int i = 0; i < l->nworkers; i++) pthread_join(l->workers[i].thread, NULL);
  pthread_mutex_lock(&l->mu);
  l->closed = true;
  l->held++;  /* our own hold: a concurrent release must not free the struct under us */
  pthread_mutex_unlock(&l->mu);
  /* No worker runs now and released buffers no longer enter the free list. */
  loader_teardown(l);
  pthread_mutex_lock(&l->mu);
  bool last = --l->held == 0;
  pthread_mutex_unlock(&l->mu);
  if (last) loader_destroy_struct(l);
  atomic_fetch_sub(&g_live_loaders, 1);
}
