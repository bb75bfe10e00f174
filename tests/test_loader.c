/* test_loader.c — the prefetching loader at the buffer level: identical
 * batches for any workers/prefetch, exactly-once epochs (with drop_last and
 * sharding), transforms, worker errors reaching the consumer without a hang,
 * teardown mid-epoch (run it under ASan and TSan), batches released from
 * other threads and after the loader is gone, metrics and option checks;
 * loom_loader_next_into (the same stream as loom_loader_next, copied into the
 * caller's tensors; argument checks that take no batch; on a GPU, feeding a
 * captured graph). */
#include <math.h>
#include "support/criterion_or_tsan.h"
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "loom/data.h"
#include "data/data_internal.h"
#include "loom/tensor.h"
#include "loom/prof.h"
#include "loom/ops.h"
#include "loom/graph.h"
#include "loom/shutdown.h"
#include "device/sync_stats.h"

/* ---- fixtures ------------------------------------------------------------------ */
enum { C = 3, H = 8, W = 8, PIX = C * H * W };

/* n u8 images whose pixels encode their index, labels i % 10. */
static loom_dataset *image_ds(int64_t n) {
  unsigned char *x = malloc((size_t)n * PIX);
  unsigned char *y = malloc((size_t)n);
  cr_assert(x && y);
  for (int64_t i = 0; i < n; i++) {
    for (int k = 0; k < PIX; k++) x[i * PIX + k] = (unsigned char)(i * 13 + k * 7 + 1);
    y[i] = (unsigned char)(i % 10);
  }
  const int64_t shape[3] = {C, H, W};
  loom_dataset *ds = loom_dataset_memory(x, LOOM_U8, 3, shape, y, LOOM_U8, n, true);
  free(x);
  free(y);
  cr_assert_not_null(ds, "%s", loom_last_error());
  return ds;
}

/* n samples whose single i32 element is the sample index: to count samples. */
static loom_dataset *index_ds(int64_t n) {
  int32_t *x = malloc(sizeof(int32_t) * (size_t)n);
  int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
  for (int64_t i = 0; i < n; i++) { x[i] = (int32_t)i; y[i] = (int32_t)(i * 2); }
  const int64_t shape[1] = {1};
  loom_dataset *ds = loom_dataset_memory(x, LOOM_I32, 1, shape, y, LOOM_I32, n, true);
  free(x);
  free(y);
  cr_assert_not_null(ds, "%s", loom_last_error());
  return ds;
}

static const float k_mean[3] = {0.5f, 0.4f, 0.3f};
static const float k_std[3] = {0.25f, 0.2f, 0.5f};

static loom_loader_options aug_options(int workers, int prefetch) {
  loom_loader_options o;
  loom_loader_options_init(&o);
  o.batch_size = 10;
  o.shuffle = true;
  o.seed = 1234;
  o.workers = workers;
  o.prefetch = prefetch;
  o.crop_padding = 2;
  o.hflip = true;
  o.scale = 1.0f / 255.0f;
  o.mean = k_mean;
  o.std = k_std;
  o.norm_channels = 3;
  return o;
}

/* Everything delivered over `epochs` epochs, flattened: per batch its n, x
 * bytes and y bytes, so runs can be compared with memcmp. */
typedef struct run {
  unsigned char *bytes;
  size_t len, cap;
  int batches;
} run;

static void run_put(run *r, const void *p, size_t n) {
  if (r->len + n > r->cap) {
    r->cap = (r->len + n) * 2;
    r->bytes = realloc(r->bytes, r->cap);
    cr_assert_not_null(r->bytes);
  }
  memcpy(r->bytes + r->len, p, n);
  r->len += n;
}

static run collect(loom_dataset *ds, const loom_loader_options *o, int epochs, size_t xs, size_t ys) {
  run r = {0};
  loom_loader *l = loom_loader_new(ds, o);
  cr_assert_not_null(l, "%s", loom_last_error());
  for (int e = 0; e < epochs; e++) {
    cr_assert_eq(loom_loader_epoch(l), e);
    for (;;) {
      loom_raw_batch b;
      cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_OK, "%s", loom_last_error());
      if (b.n == 0) break;
      run_put(&r, &b.n, sizeof b.n);
      run_put(&r, b.x, (size_t)b.n * xs);
      run_put(&r, b.y, (size_t)b.n * ys);
      r.batches++;
      loom_loader_release_raw(b.buf);
    }
  }
  loom_loader_free(l);
  return r;
}

/* ---- determinism ----------------------------------------------------------------- */
Test(loader, same_batches_for_any_workers_and_prefetch, .timeout = 120) {
  loom_dataset *ds = image_ds(103);
  loom_loader_options o = aug_options(0, 1);
  run ref = collect(ds, &o, 2, PIX * sizeof(float), sizeof(int64_t));
  cr_assert_eq(ref.batches, 2 * 11);
  const int workers[] = {1, 2, 8};
  for (int wi = 0; wi < 3; wi++)
    for (int p = 1; p <= 8; p++) {
      o = aug_options(workers[wi], p);
      run r = collect(ds, &o, 2, PIX * sizeof(float), sizeof(int64_t));
      cr_assert_eq(r.len, ref.len, "workers %d prefetch %d", workers[wi], p);
      cr_assert_eq(memcmp(r.bytes, ref.bytes, r.len), 0, "workers %d prefetch %d: batches differ", workers[wi], p);
      free(r.bytes);
    }
  /* And the seed matters. */
  o = aug_options(2, 2);
  o.seed = 99;
  run other = collect(ds, &o, 2, PIX * sizeof(float), sizeof(int64_t));
  cr_assert_eq(other.len, ref.len);
  cr_assert_neq(memcmp(other.bytes, ref.bytes, ref.len), 0);
  free(other.bytes);
  free(ref.bytes);
  loom_dataset_release(ds);
}

/* ---- exactly once ------------------------------------------------------------------ */
static void check_epochs(int64_t n, int64_t bs, bool drop_last, int world, bool shuffle, int workers) {
  loom_dataset *ds = index_ds(n);
  int *count = calloc((size_t)n, sizeof(int));
  for (int epoch = 0; epoch < 2; epoch++) {
    memset(count, 0, sizeof(int) * (size_t)n);
    int64_t per_rank = drop_last ? n / world : (n + world - 1) / world;
    for (int rank = 0; rank < world; rank++) {
      loom_loader_options o;
      loom_loader_options_init(&o);
      o.batch_size = bs;
      o.drop_last = drop_last;
      o.shuffle = shuffle;
      o.seed = 5;
      o.workers = workers;
      o.prefetch = 3;
      o.rank = rank;
      o.world_size = world;
      o.x_dtype = LOOM_I32;
      o.y_dtype = LOOM_I64;
      loom_loader *l = loom_loader_new(ds, &o);
      cr_assert_not_null(l, "%s", loom_last_error());
      cr_assert_eq(loom_loader_start_epoch(l, epoch), LOOM_OK);
      int64_t want_batches = drop_last ? per_rank / bs : (per_rank + bs - 1) / bs;
      cr_assert_eq(loom_loader_num_batches(l), want_batches);
      int in_shard_max = 0;
      int *in_shard = calloc((size_t)n, sizeof(int));
      int64_t got_batches = 0, got = 0;
      for (;;) {
        loom_raw_batch b;
        cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_OK, "%s", loom_last_error());
        if (b.n == 0) break;
        cr_assert_eq(b.index, got_batches);
        bool last = got_batches == want_batches - 1;
        if (!last || drop_last || per_rank % bs == 0) cr_assert_eq(b.n, bs);
        else cr_assert_eq(b.n, per_rank % bs, "short last batch");
        const int32_t *xi = b.x;
        const int64_t *yi = b.y;
        for (int64_t j = 0; j < b.n; j++) {
          cr_assert(xi[j] >= 0 && xi[j] < n);
          cr_assert_eq(yi[j], 2 * (int64_t)xi[j], "label does not travel with its sample");
          count[xi[j]]++;
          if (++in_shard[xi[j]] > in_shard_max) in_shard_max = in_shard[xi[j]];
        }
        got += b.n;
        got_batches++;
        loom_loader_release_raw(b.buf);
      }
      free(in_shard);
      cr_assert_eq(got_batches, want_batches);
      cr_assert_eq(in_shard_max <= 1, true, "a sample came twice within one rank's epoch");
      cr_assert_eq(got, drop_last ? want_batches * bs : per_rank);
      loom_loader_free(l);
    }
    int64_t total = 0, dups = 0;
    for (int64_t i = 0; i < n; i++) {
      total += count[i];
      if (count[i] > 1) dups += count[i] - 1;
      if (!drop_last) cr_assert_geq(count[i], 1, "sample %lld never delivered", (long long)i);
      cr_assert_leq(count[i], 2);
    }
    if (!drop_last) {
      /* Every sample once; shards padded to equal size by at most world-1 repeats. */
      cr_assert_eq(dups, per_rank * world - n);
      if (n % world == 0) cr_assert_eq(dups, 0);
    } else {
      cr_assert_eq(dups, 0);
    }
    (void)total;
  }
  free(count);
  loom_dataset_release(ds);
}

Test(loader, exactly_once_per_epoch, .timeout = 60) {
  for (int shuffle = 0; shuffle < 2; shuffle++)
    for (int drop = 0; drop < 2; drop++) {
      check_epochs(97, 8, drop, 1, shuffle, 2);
      check_epochs(97, 8, drop, 1, shuffle, 0);
      check_epochs(96, 8, drop, 1, shuffle, 3);
      check_epochs(97, 5, drop, 3, shuffle, 2);   /* sharded, uneven */
      check_epochs(96, 8, drop, 4, shuffle, 1);   /* sharded, even */
    }
}

Test(loader, epochs_follow_each_other_and_differ) {
  loom_dataset *ds = index_ds(50);
  loom_loader_options o;
  loom_loader_options_init(&o);
  o.batch_size = 50;
  o.shuffle = true;
  o.x_dtype = LOOM_I32;
  loom_loader *l = loom_loader_new(ds, &o);
  int32_t first[2][50];
  for (int e = 0; e < 2; e++) {
    loom_raw_batch b;
    cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_OK);
    cr_assert_eq(b.n, 50);
    memcpy(first[e], b.x, sizeof first[e]);
    loom_loader_release_raw(b.buf);
    cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_OK);
    cr_assert_eq(b.n, 0, "end of epoch expected");
    cr_assert_eq(loom_loader_epoch(l), e + 1);
  }
  cr_assert_neq(memcmp(first[0], first[1], sizeof first[0]), 0);
  /* Restarting epoch 0 replays it. */
  cr_assert_eq(loom_loader_start_epoch(l, 0), LOOM_OK);
  loom_raw_batch b;
  cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_OK);
  cr_assert_eq(memcmp(b.x, first[0], sizeof first[0]), 0);
  loom_loader_release_raw(b.buf);
  loom_loader_free(l);
  loom_dataset_release(ds);
}

/* ---- transforms -------------------------------------------------------------------- */
Test(loader, transforms_crop_flip_normalize) {
  enum { N = 40, PAD = 2 };
  loom_dataset *ds = image_ds(N);
  loom_loader_options o = aug_options(2, 2);
  o.batch_size = N;
  o.shuffle = false;
  loom_loader *l = loom_loader_new(ds, &o);
  cr_assert_not_null(l, "%s", loom_last_error());
  loom_raw_batch b;
  cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_OK);
  cr_assert_eq(b.n, N);
  const float *x = b.x;
  int flips = 0, offsets_seen = 0;
  bool off_seen[2 * PAD + 1][2 * PAD + 1] = {{false}};
  unsigned char src[PIX];
  for (int i = 0; i < N; i++) {
    loom_dataset_read(ds, i, src, NULL);
    /* Find the (dy, dx, flip) that explains the output: exactly the reference formula. */
    bool found = false;
    for (int f = 0; f < 2 && !found; f++)
      for (int dy = 0; dy <= 2 * PAD && !found; dy++)
        for (int dx = 0; dx <= 2 * PAD && !found; dx++) {
          bool ok = true;
          for (int c = 0; c < C && ok; c++)
            for (int yy = 0; yy < H && ok; yy++)
              for (int xx = 0; xx < W && ok; xx++) {
                int sy = yy + dy - PAD, sx = (f ? W - 1 - xx : xx) + dx - PAD;
                float v = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? src[c * H * W + sy * W + sx] : 0.0f;
                float want = (v / 255.0f - k_mean[c]) / k_std[c];
                if (fabsf(x[(size_t)i * PIX + c * H * W + yy * W + xx] - want) > 1e-5f) ok = false;
              }
          if (ok) {
            found = true;
            flips += f;
            if (!off_seen[dy][dx]) { off_seen[dy][dx] = true; offsets_seen++; }
          }
        }
    cr_assert(found, "sample %d is not a crop/flip of its source", i);
    cr_assert_eq(((const int64_t *)b.y)[i], i % 10);
  }
  /* 40 samples: both flip states and several offsets must occur. */
  cr_assert(flips > 5 && flips < 35, "flips %d of %d", flips, N);
  cr_assert_geq(offsets_seen, 8);
  loom_loader_release_raw(b.buf);
  loom_loader_free(l);

  /* u8 passthrough keeps bytes (crop/flip still apply; here off). */
  loom_loader_options_init(&o);
  o.batch_size = 4;
  o.x_dtype = LOOM_U8;
  o.y_dtype = LOOM_U8;
  l = loom_loader_new(ds, &o);
  cr_assert_not_null(l, "%s", loom_last_error());
  cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_OK);
  for (int i = 0; i < 4; i++) {
    loom_dataset_read(ds, i, src, NULL);
    cr_assert_eq(memcmp((unsigned char *)b.x + i * PIX, src, PIX), 0);
  }
  loom_loader_release_raw(b.buf);
  loom_loader_free(l);
  loom_dataset_release(ds);
}

Test(loader, bad_options_are_rejected_with_a_message) {
  loom_dataset *img = image_ds(10), *idx = index_ds(10);
  loom_loader_options o;
  loom_loader_options_init(&o);
  o.batch_size = 0;
  cr_assert_null(loom_loader_new(img, &o));
  cr_assert_not_null(strstr(loom_last_error(), "batch_size"));
  loom_loader_options_init(&o);
  o.rank = 2;
  o.world_size = 2;
  cr_assert_null(loom_loader_new(img, &o));
  cr_assert_not_null(strstr(loom_last_error(), "rank"));
  loom_loader_options_init(&o);
  o.crop_padding = 4;
  cr_assert_null(loom_loader_new(idx, &o));
  cr_assert_eq(loom_last_status(), LOOM_ERR_SHAPE);
  loom_loader_options_init(&o);
  o.x_dtype = LOOM_U8;
  o.scale = 1.0f / 255.0f;
  cr_assert_null(loom_loader_new(img, &o));
  loom_loader_options_init(&o);
  o.norm_channels = 2;
  o.mean = k_mean;
  o.std = k_std;
  cr_assert_null(loom_loader_new(img, &o));
  cr_assert_not_null(strstr(loom_last_error(), "channels"));
  loom_loader_options_init(&o);
  o.device = loom_cuda(0);
  if (loom_device_count(LOOM_CUDA) == 0) {
    cr_assert_null(loom_loader_new(img, &o));
    cr_assert_eq(loom_last_status(), LOOM_ERR_DEVICE);
  }
  loom_loader_options_init(&o);
  o.struct_size = 2;
  cr_assert_null(loom_loader_new(img, &o));
  cr_assert_null(loom_loader_new(NULL, NULL));
  /* NULL options: defaults. */
  loom_loader *l = loom_loader_new(img, NULL);
  cr_assert_not_null(l, "%s", loom_last_error());
  loom_loader_free(l);
  loom_dataset_release(img);
  loom_dataset_release(idx);
}

/* ---- errors ------------------------------------------------------------------------ */
typedef struct fail_ctx {
  int64_t fail_at;
  atomic_int reads;
} fail_ctx;

static loom_status failing_read(void *user, int64_t i, void *x, void *y) {
  fail_ctx *c = user;
  atomic_fetch_add(&c->reads, 1);
  if (i == c->fail_at) return loom_dataset_fail(LOOM_ERR_IO, "disk on fire at this sample");
  ((float *)x)[0] = (float)i;
  ((float *)x)[1] = 0.5f;
  *(int32_t *)y = (int32_t)i;
  return LOOM_OK;
}

static loom_dataset *failing_ds(fail_ctx *c, int64_t n, bool thread_safe) {
  loom_dataset_callbacks cb;
  memset(&cb, 0, sizeof cb);
  cb.struct_size = sizeof cb;
  cb.length = n;
  cb.x_dtype = LOOM_F32;
  cb.x_ndim = 1;
  cb.x_shape[0] = 2;
  cb.has_y = true;
  cb.y_dtype = LOOM_I32;
  cb.read = failing_read;
  cb.user = c;
  cb.thread_safe = thread_safe;
  loom_dataset *ds = loom_dataset_callback(&cb);
  cr_assert_not_null(ds, "%s", loom_last_error());
  return ds;
}

Test(loader, worker_error_reaches_the_consumer, .timeout = 30) {
  const int workers[] = {0, 1, 2, 8};
  for (int wi = 0; wi < 4; wi++)
    for (int p = 1; p <= 8; p *= 2) {
      fail_ctx c = {.fail_at = 57};
      loom_dataset *ds = failing_ds(&c, 200, wi % 2 == 0);
      loom_loader_options o;
      loom_loader_options_init(&o);
      o.batch_size = 10;
      o.workers = workers[wi];
      o.prefetch = p;
      loom_loader *l = loom_loader_new(ds, &o);
      cr_assert_not_null(l, "%s", loom_last_error());
      /* Batches 0..4 arrive intact; batch 5 (samples 50..59) carries the error. */
      for (int k = 0; k < 5; k++) {
        loom_raw_batch b;
        cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_OK, "batch %d: %s", k, loom_last_error());
        cr_assert_eq(b.n, 10);
        cr_assert_float_eq(((float *)b.x)[0], (float)(k * 10), 0.0f);
        loom_loader_release_raw(b.buf);
      }
      loom_raw_batch b;
      cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_ERR_IO);
      cr_assert_null(b.buf);
      cr_assert_not_null(strstr(loom_last_error(), "disk on fire"), "%s", loom_last_error());
      cr_assert_not_null(strstr(loom_last_error(), "sample 57"), "%s", loom_last_error());
      /* Sticky until the epoch restarts. */
      cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_ERR_IO);
      cr_assert_eq(loom_loader_start_epoch(l, 1), LOOM_OK);
      loom_loader_free(l);
      loom_dataset_release(ds);
    }
}

Test(loader, error_then_restart_recovers, .timeout = 30) {
  fail_ctx c = {.fail_at = 5};
  loom_dataset *ds = failing_ds(&c, 20, false);
  loom_loader_options o;
  loom_loader_options_init(&o);
  o.batch_size = 4;
  o.workers = 2;
  o.prefetch = 4;
  loom_loader *l = loom_loader_new(ds, &o);
  loom_raw_batch b;
  cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_OK);
  loom_loader_release_raw(b.buf);
  cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_ERR_IO);
  /* Restarting replays the same failure; fix the "disk" with no loader
   * running (workers read fail_at), then a new loader gets everything. */
  cr_assert_eq(loom_loader_start_epoch(l, 0), LOOM_OK);
  cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_OK);
  loom_loader_release_raw(b.buf);
  cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_ERR_IO);
  loom_loader_free(l);
  c.fail_at = -1;
  l = loom_loader_new(ds, &o);
  int64_t got = 0;
  for (;;) {
    cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_OK, "%s", loom_last_error());
    if (b.n == 0) break;
    got += b.n;
    loom_loader_release_raw(b.buf);
  }
  cr_assert_eq(got, 20);
  loom_loader_free(l);
  loom_dataset_release(ds);
}

/* ---- teardown and buffer ownership --------------------------------------------------- */
Test(loader, destroy_mid_epoch, .timeout = 30) {
  loom_dataset *ds = image_ds(500);
  for (int w = 0; w <= 8; w += 2)
    for (int take = 0; take < 4; take++) {
      loom_loader_options o = aug_options(w, 1 + take * 2);
      loom_loader *l = loom_loader_new(ds, &o);
      cr_assert_not_null(l);
      loom_raw_batch kept = {0};
      for (int k = 0; k < take; k++) {
        loom_raw_batch b;
        cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_OK);
        if (k == 0) kept = b;
        else loom_loader_release_raw(b.buf);
      }
      loom_loader_free(l);  /* workers are mid-fill; one batch is still held */
      if (kept.buf) {
        /* The held batch stays readable after the loader is gone. */
        float v = ((float *)kept.x)[PIX - 1];
        cr_assert(isfinite(v));
        loom_loader_release_raw(kept.buf);
      }
    }
  loom_dataset_release(ds);
}

/* The dataset outlives the caller's reference while a loader uses it. */
Test(loader, loader_keeps_its_dataset_alive) {
  loom_dataset *ds = index_ds(30);
  loom_loader_options o;
  loom_loader_options_init(&o);
  o.x_dtype = LOOM_I32;
  o.batch_size = 7;
  loom_loader *l = loom_loader_new(ds, &o);
  loom_dataset_release(ds);
  int64_t got = 0;
  loom_raw_batch b;
  while (loom_loader_next_raw(l, &b, 1) == LOOM_OK && b.n) { got += b.n; loom_loader_release_raw(b.buf); }
  cr_assert_eq(got, 30);
  loom_loader_free(l);
}

typedef struct releaser {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  loom_batch_buf *q[64];
  int head, tail;
  bool done;
  double checksum;
} releaser;

static void *release_thread(void *arg) {
  releaser *r = arg;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (r->head == r->tail && !r->done) pthread_cond_wait(&r->cv, &r->mu);
    if (r->head == r->tail && r->done) break;
    loom_batch_buf *b = r->q[r->head++ % 64];
    pthread_mutex_unlock(&r->mu);
    loom_loader_release_raw(b);
    pthread_mutex_lock(&r->mu);
  }
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

Test(loader, batches_released_from_another_thread_and_held_many, .timeout = 30) {
  loom_dataset *ds = image_ds(300);
  loom_loader_options o = aug_options(4, 2);
  loom_loader *l = loom_loader_new(ds, &o);
  releaser r = {.head = 0, .tail = 0};
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.cv, NULL);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, release_thread, &r), 0);
  for (int e = 0; e < 3; e++)
    for (;;) {
      loom_raw_batch b;
      cr_assert_eq(loom_loader_next_raw(l, &b, 2), LOOM_OK);  /* two holders: like x and y tensors */
      if (b.n == 0) break;
      loom_loader_release_raw(b.buf);  /* one here ... */
      pthread_mutex_lock(&r.mu);
      r.q[r.tail++ % 64] = b.buf;       /* ... one over there */
      pthread_cond_signal(&r.cv);
      pthread_mutex_unlock(&r.mu);
    }
  pthread_mutex_lock(&r.mu);
  r.done = true;
  pthread_cond_signal(&r.cv);
  pthread_mutex_unlock(&r.mu);
  pthread_join(t, NULL);

  /* A consumer that holds a whole epoch of batches must not deadlock the ring. */
  loom_raw_batch held[30];
  int nh = 0;
  cr_assert_eq(loom_loader_start_epoch(l, 7), LOOM_OK);
  for (;;) {
    loom_raw_batch b;
    cr_assert_eq(loom_loader_next_raw(l, &b, 1), LOOM_OK);
    if (b.n == 0) break;
    cr_assert_lt(nh, 30);
    held[nh++] = b;
  }
  cr_assert_eq(nh, 30);
  /* Distinct buffers, and release half after the loader is gone. */
  for (int i = 1; i < nh; i++) cr_assert_neq(held[i].x, held[0].x);
  for (int i = 0; i < nh / 2; i++) loom_loader_release_raw(held[i].buf);
  loom_loader_free(l);
  for (int i = nh / 2; i < nh; i++) loom_loader_release_raw(held[i].buf);
  pthread_mutex_destroy(&r.mu);
  pthread_cond_destroy(&r.cv);
  loom_dataset_release(ds);
}

/* ---- metrics -------------------------------------------------------------------- */
Test(loader, stats_count_batches_samples_and_wait) {
  loom_dataset *ds = image_ds(95);
  loom_loader_options o = aug_options(2, 2);
  loom_loader *l = loom_loader_new(ds, &o);
  loom_raw_batch b;
  int64_t n = 0;
  while (loom_loader_next_raw(l, &b, 1) == LOOM_OK && b.n) { n += b.n; loom_loader_release_raw(b.buf); }
  cr_assert_eq(n, 95);
  loom_loader_stats s;
  s.struct_size = sizeof s;
  cr_assert_eq(loom_loader_stats_get(l, &s), LOOM_OK);
  cr_assert_eq(s.struct_size, sizeof s);
  cr_assert_eq(s.batches, 10);
  cr_assert_eq(s.samples, 95);
  cr_assert_geq(s.batches_produced, 10);
  cr_assert_geq(s.wait_seconds, 0.0);
  cr_assert_gt(s.elapsed_seconds, 0.0);
  cr_assert_leq(s.wait_seconds, s.elapsed_seconds);
  cr_assert(s.wait_fraction >= 0.0 && s.wait_fraction <= 1.0);
  cr_assert_gt(s.samples_per_second, 0.0);
  loom_loader_stats_reset(l);
  cr_assert_eq(loom_loader_stats_get(l, &s), LOOM_OK);
  cr_assert_eq(s.batches, 0);
  cr_assert_eq(s.samples, 0);
  /* A caller built against an older, shorter struct gets only its part. */
  struct { size_t size; double wait; double tail_guard; } small = {offsetof(loom_loader_stats, elapsed_seconds), -1.0, 42.0};
  cr_assert_eq(loom_loader_stats_get(l, (loom_loader_stats *)&small), LOOM_OK);
  cr_assert_geq(small.wait, 0.0);
  cr_assert_float_eq(small.tail_guard, 42.0, 0.0);
  loom_loader_free(l);
  loom_dataset_release(ds);
}

/* ---- tensors ------------------------------------------------------------------- */
Test(loader_tensor, next_gives_zero_copy_batch_tensors) {
  loom_dataset *ds = image_ds(25);
  loom_loader_options o = aug_options(2, 3);
  o.shuffle = false;
  loom_loader *l = loom_loader_new(ds, &o);
  cr_assert_not_null(l, "%s", loom_last_error());
  int64_t seen = 0;
  int batches = 0;
  for (;;) {
    loom_scope_begin();
    loom_tensor *x = NULL, *y = NULL;
    cr_assert_eq(loom_loader_next(l, &x, &y), LOOM_OK, "%s", loom_last_error());
    if (!x) {
      cr_assert_null(y);
      loom_scope_end();
      break;
    }
    int64_t n = batches < 2 ? 10 : 5;
    cr_assert_eq(loom_tensor_ndim(x), 4);
    cr_assert_eq(loom_tensor_dim(x, 0), n);
    cr_assert_eq(loom_tensor_dim(x, 1), C);
    cr_assert_eq(loom_tensor_dim(x, 2), H);
    cr_assert_eq(loom_tensor_dim(x, 3), W);
    cr_assert_eq(loom_tensor_dtype(x), LOOM_F32);
    cr_assert_eq(loom_tensor_ndim(y), 1);
    cr_assert_eq(loom_tensor_dim(y, 0), n);
    cr_assert_eq(loom_tensor_dtype(y), LOOM_I64);
    cr_assert(loom_device_eq(loom_tensor_device(x), loom_cpu()));
    const int64_t *yl = loom_tensor_data(y);
    for (int64_t j = 0; j < n; j++) cr_assert_eq(yl[j], (seen + j) % 10);
    seen += n;
    batches++;
    loom_scope_end();  /* both tensors die: the buffer goes back to the ring */
  }
  cr_assert_eq(seen, 25);
  cr_assert_eq(batches, 3);
  /* Outside a scope the caller owns the tensors; they may outlive the loader. */
  loom_tensor *x = NULL, *y = NULL;
  cr_assert_eq(loom_loader_next(l, &x, &y), LOOM_OK);
  cr_assert_not_null(x);
  loom_tensor_release(y);
  loom_loader_free(l);
  cr_assert_eq(loom_tensor_dim(x, 0), 10);
  loom_tensor_release(x);
  /* y may be NULL: labels are not wrapped. */
  l = loom_loader_new(ds, &o);
  cr_assert_eq(loom_loader_next(l, &x, NULL), LOOM_OK);
  cr_assert_not_null(x);
  loom_tensor_release(x);
  loom_loader_free(l);
  loom_dataset_release(ds);
}

/* The profiler records the workers' fills on their own threads while the
 * consumer runs, and stop collects while they are still prefetching the next
 * epoch (under TSan: per-thread buffers, thread names, stop's collection). */
Test(loader, profiled_epoch_records_worker_fills, .timeout = 60) {
  loom_dataset *ds = image_ds(120);
  loom_loader_options o = aug_options(3, 4);
  loom_profiler_options po;
  loom_profiler_options_init(&po);
  cr_assert_eq(loom_profiler_start(&po), LOOM_OK, "%s", loom_last_error());
  loom_loader *l = loom_loader_new(ds, &o);
  cr_assert_not_null(l, "%s", loom_last_error());
  int batches = 0;
  for (;;) {
    loom_scope_begin();
    loom_tensor *x = NULL, *y = NULL;
    cr_assert_eq(loom_loader_next(l, &x, &y), LOOM_OK, "%s", loom_last_error());
    loom_scope_end();
    if (!x) break;
    batches++;
  }
  cr_assert_eq(loom_profiler_stop(), LOOM_OK, "%s", loom_last_error());
  loom_loader_free(l);
  loom_profiler_row rows[16];
  int n = loom_profiler_summary_rows(rows, sizeof rows[0], 16);
  cr_assert(n > 0 && n <= 16, "%d rows", n);
  int64_t fills = 0, waits = 0;
  for (int i = 0; i < n; i++) {
    if (!strcmp(rows[i].name, "loader fill batch")) fills = rows[i].calls;
    if (!strcmp(rows[i].name, "loader wait")) waits = rows[i].calls;
  }
  cr_assert_eq(batches, 12);
  cr_assert_eq(waits, batches);
  cr_assert_geq(fills, batches);  /* and maybe some of the next epoch */
  loom_dataset_release(ds);
}

/* ---- next_into: batches copied into the caller's tensors ------------------------- */
/* Skip (or fail, when LOOM_TEST_DEVICE=cuda insists) without a usable GPU,
 * like testkit's tk_require_device. A macro, not testkit: this file also
 * runs under the TSan shim, where skipping is a return from the test body. */
#define REQUIRE_CUDA0()                                                                                    \
  do {                                                                                                     \
    if (loom_device_count(LOOM_CUDA) < 1) {                                                                \
      const char *env_ = getenv("LOOM_TEST_DEVICE"), *why_ = loom_cuda_unavailable_reason();              \
      if (!why_) why_ = "no CUDA device";                                                                  \
      cr_assert(!(env_ && strncmp(env_, "cuda", 4) == 0), "LOOM_TEST_DEVICE=cuda insists on a GPU: %s", why_); \
      cr_skip_test("CUDA unavailable: %s", why_);                                                          \
    }                                                                                                      \
  } while (0)

enum { BS = 10 };  /* aug_options' batch size: image_ds(25) gives batches 10, 10, 5 */
static const float k_sentinel_x = -7.0f;
static const int64_t k_sentinel_y = -3;

/* Append a delivered batch to r: n, then rows 0..n of x and y read back to
 * the host (logical order, whatever the layout). */
static void put_tensors(run *r, int64_t n, loom_tensor *x, loom_tensor *y) {
  run_put(r, &n, sizeof n);
  if (n == 0) return;
  size_t xn = (size_t)loom_tensor_numel(x), yn = (size_t)loom_tensor_numel(y), row = xn / (size_t)loom_tensor_dim(x, 0);
  float *hx = malloc(xn * sizeof *hx);
  int64_t *hy = malloc(yn * sizeof *hy);
  cr_assert(hx && hy);
  cr_assert_eq(loom_to_host(x, hx, xn * sizeof *hx, LOOM_F32), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_to_host(y, hy, yn * sizeof *hy, LOOM_I64), LOOM_OK, "%s", loom_last_error());
  run_put(r, hx, (size_t)n * row * sizeof *hx);
  run_put(r, hy, (size_t)n * sizeof *hy);
  /* Rows past n are the caller's: they must still hold the sentinel. */
  for (size_t i = (size_t)n * row; i < xn; i++) cr_assert_eq(hx[i], k_sentinel_x, "x element %zu (n %lld)", i, (long long)n);
  for (size_t i = (size_t)n; i < yn; i++) cr_assert_eq(hy[i], k_sentinel_y, "y row %zu (n %lld)", i, (long long)n);
  free(hx);
  free(hy);
}

/* One loom_loader_next call, recorded (n 0 at the end of the epoch). */
static int64_t step_next(loom_loader *l, run *r) {
  loom_scope_begin();
  loom_tensor *x = NULL, *y = NULL;
  cr_assert_eq(loom_loader_next(l, &x, &y), LOOM_OK, "%s", loom_last_error());
  int64_t n = x ? loom_tensor_dim(x, 0) : 0;
  if (x) {
    /* put_tensors checks rows past n: the batch has none. */
    put_tensors(r, n, x, y);
  } else {
    run_put(r, &n, sizeof n);
  }
  loom_scope_end();
  return n;
}

/* One loom_loader_next_into call into x, y (refilled with the sentinel
 * first), recorded; it must not make the host wait for the device. */
static int64_t step_into(loom_loader *l, loom_tensor *x, loom_tensor *y, run *r) {
  cr_assert_eq(loom_fill_(x, k_sentinel_x), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_fill_(y, (double)k_sentinel_y), LOOM_OK, "%s", loom_last_error());
  int64_t n = -1;
  loom_sync_counts before = loom_sync_counts_get();
  cr_assert_eq(loom_loader_next_into(l, x, y, &n), LOOM_OK, "%s", loom_last_error());
  loom_sync_counts after = loom_sync_counts_get();
  cr_assert_eq(loom_sync_waits_between(&before, &after), 0, "next_into made the host wait for the device");
  cr_assert(n >= 0 && n <= BS, "n = %lld", (long long)n);
  if (n) put_tensors(r, n, x, y);
  else run_put(r, &n, sizeof n);
  return n;
}

static void assert_same_runs(const run *a, const run *b, const char *what) {
  cr_assert_eq(a->len, b->len, "%s: %zu vs %zu bytes", what, a->len, b->len);
  cr_assert_eq(memcmp(a->bytes, b->bytes, a->len), 0, "%s: batches differ", what);
}

static void assert_same_position(loom_loader *a, loom_loader *b, int k) {
  int64_t ea, ba, eb, bb;
  cr_assert_eq(loom_loader_position(a, &ea, &ba), LOOM_OK);
  cr_assert_eq(loom_loader_position(b, &eb, &bb), LOOM_OK);
  cr_assert(ea == eb && ba == bb, "call %d: position (%lld, %lld) vs (%lld, %lld)", k, (long long)ea, (long long)ba,
            (long long)eb, (long long)bb);
}

/* x and y shaped like the loader's full batches (x channels-last if asked). */
static void into_buffers(loom_device dev, bool channels_last, loom_tensor **x, loom_tensor **y) {
  const int64_t xs[4] = {BS, C, H, W}, ys[1] = {BS};
  *x = loom_zeros(4, xs, LOOM_F32, dev);
  if (channels_last && *x) *x = loom_to_memory_format(*x, LOOM_FORMAT_NHWC);
  *y = loom_empty(1, ys, LOOM_I64, dev);
  cr_assert(*x && *y, "%s", loom_last_error());
  if (channels_last) cr_assert(loom_tensor_is_channels_last(*x));
}

/* Two identical loaders (shuffle, 2 workers, crop/flip/normalize, short last
 * batch): next on one, next_into on the other, over two epochs, their ends
 * and the start of a third: same bytes, same n, same positions and stats. */
static void into_matches_next(loom_device dev, bool channels_last) {
  loom_dataset *ds = image_ds(25);
  loom_loader_options o = aug_options(2, 3);
  o.device = dev;
  o.channels_last = channels_last;
  loom_loader *a = loom_loader_new(ds, &o), *b = loom_loader_new(ds, &o);
  cr_assert(a && b, "%s", loom_last_error());
  loom_scope_begin();
  loom_tensor *x, *y;
  into_buffers(dev, channels_last, &x, &y);
  run ra = {0}, rb = {0};
  const int64_t want[9] = {10, 10, 5, 0, 10, 10, 5, 0, 10};
  for (int k = 0; k < 9; k++) {
    cr_assert_eq(step_next(a, &ra), want[k], "call %d", k);
    cr_assert_eq(step_into(b, x, y, &rb), want[k], "call %d", k);
    assert_same_position(a, b, k);
  }
  cr_assert_eq(loom_loader_epoch(b), 2);
  assert_same_runs(&ra, &rb, "next vs next_into");
  loom_loader_stats sa = {.struct_size = sizeof sa}, sb = {.struct_size = sizeof sb};
  cr_assert_eq(loom_loader_stats_get(a, &sa), LOOM_OK);
  cr_assert_eq(loom_loader_stats_get(b, &sb), LOOM_OK);
  cr_assert(sa.batches == sb.batches && sa.samples == sb.samples && sb.batches == 7 && sb.samples == 60,
            "stats: %lld/%lld batches, %lld/%lld samples", (long long)sa.batches, (long long)sb.batches,
            (long long)sa.samples, (long long)sb.samples);
  loom_scope_end();
  free(ra.bytes);
  free(rb.bytes);
  loom_loader_free(a);
  loom_loader_free(b);
  loom_dataset_release(ds);
}

/* next and next_into interleaved on one loader = next alone on another. */
static void interleaved_equals_next_only(loom_device dev) {
  loom_dataset *ds = image_ds(25);
  loom_loader_options o = aug_options(2, 3);
  o.device = dev;
  loom_loader *a = loom_loader_new(ds, &o), *b = loom_loader_new(ds, &o);
  cr_assert(a && b, "%s", loom_last_error());
  loom_scope_begin();
  loom_tensor *x, *y;
  into_buffers(dev, false, &x, &y);
  run ra = {0}, rb = {0};
  for (int k = 0; k < 12; k++) {
    int64_t na = step_next(a, &ra);
    int64_t nb = k % 3 == 1 ? step_next(b, &rb) : step_into(b, x, y, &rb);
    cr_assert_eq(na, nb, "call %d", k);
    assert_same_position(a, b, k);
  }
  assert_same_runs(&ra, &rb, "interleaved vs next only");
  loom_scope_end();
  free(ra.bytes);
  free(rb.bytes);
  loom_loader_free(a);
  loom_loader_free(b);
  loom_dataset_release(ds);
}

Test(loader_into, matches_next_over_epochs_with_a_short_last_batch, .timeout = 60) {
  into_matches_next(loom_cpu(), false);
}
Test(loader_into, matches_next_with_channels_last_batches, .timeout = 60) {
  into_matches_next(loom_cpu(), true);
}
Test(loader_into, interleaved_with_next_gives_the_same_stream, .timeout = 60) {
  interleaved_equals_next_only(loom_cpu());
}

/* Each malformed call fails with INVALID_ARG naming the argument and takes
 * no batch: the following good call delivers the batch that was due. */
Test(loader_into, malformed_arguments_are_rejected_and_take_no_batch, .timeout = 60) {
  loom_dataset *ds = image_ds(25);
  loom_loader_options o = aug_options(2, 3);
  loom_loader *a = loom_loader_new(ds, &o), *b = loom_loader_new(ds, &o);
  cr_assert(a && b, "%s", loom_last_error());
  loom_scope_begin();
  loom_tensor *x, *y;
  into_buffers(loom_cpu(), false, &x, &y);
  const int64_t s_w[4] = {BS, C, H, W - 1}, s_b[4] = {BS - 1, C, H, W}, s_x[4] = {BS, C, H, W}, s_3[3] = {BS, C, H * W};
  const int64_t s_y9[1] = {BS - 1}, s_y2[2] = {BS, 1};
  loom_tensor *x_shape = loom_empty(4, s_w, LOOM_F32, loom_cpu());
  loom_tensor *x_batch = loom_empty(4, s_b, LOOM_F32, loom_cpu());
  loom_tensor *x_rank = loom_empty(3, s_3, LOOM_F32, loom_cpu());
  loom_tensor *x_dtype = loom_empty(4, s_x, LOOM_U8, loom_cpu());
  loom_tensor *x_nhwc = loom_to_memory_format(loom_zeros(4, s_x, LOOM_F32, loom_cpu()), LOOM_FORMAT_NHWC);
  loom_tensor *y_i32 = loom_empty(1, (const int64_t[1]){BS}, LOOM_I32, loom_cpu());
  loom_tensor *y_short = loom_empty(1, s_y9, LOOM_I64, loom_cpu());
  loom_tensor *y_rank = loom_empty(2, s_y2, LOOM_I64, loom_cpu());
  cr_assert(x_shape && x_batch && x_rank && x_dtype && x_nhwc && y_i32 && y_short && y_rank, "%s", loom_last_error());
  struct {
    loom_tensor *x, *y;
    bool null_n;
    const char *frag1, *frag2;
  } bad[] = {
      {x_shape, y, false, "x has shape [10, 3, 8, 7]", "[10, 3, 8, 8]"},
      {x_batch, y, false, "x has shape [9, 3, 8, 8]", "[10, 3, 8, 8]"},
      {x_rank, y, false, "x has shape", "[10, 3, 8, 8]"},
      {x_dtype, y, false, "x has dtype u8", "f32"},
      {x_nhwc, y, false, "x must be contiguous", "strides"},
      {x, y_i32, false, "y has dtype i32", "i64"},
      {x, y_short, false, "y has shape [9]", "[10]"},
      {x, y_rank, false, "y has shape [10, 1]", "[10]"},
      {x, y, true, "n is NULL", "loom_loader_next_into"},
      {NULL, y, false, "x is NULL", "loom_loader_next_into"},
  };
  run ra = {0}, rb = {0};
  int nbad = (int)(sizeof bad / sizeof bad[0]);
  for (int k = 0; k < nbad; k++) {
    int64_t n = 99;
    loom_status st = loom_loader_next_into(b, bad[k].x, bad[k].y, bad[k].null_n ? NULL : &n);
    cr_assert_eq(st, LOOM_ERR_INVALID_ARG, "case %d: %s", k, loom_status_name(st));
    cr_assert_not_null(strstr(loom_last_error(), bad[k].frag1), "case %d: '%s' lacks '%s'", k, loom_last_error(),
                       bad[k].frag1);
    cr_assert_not_null(strstr(loom_last_error(), bad[k].frag2), "case %d: '%s' lacks '%s'", k, loom_last_error(),
                       bad[k].frag2);
    if (!bad[k].null_n) cr_assert_eq(n, 0, "case %d", k);
    /* The batch that was due, on both loaders. */
    cr_assert_eq(step_next(a, &ra), step_into(b, x, y, &rb), "after case %d", k);
    assert_same_position(a, b, k);
  }
  int64_t n = 99;
  cr_assert_eq(loom_loader_next_into(NULL, x, y, &n), LOOM_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(loom_last_error(), "loader is NULL"), "%s", loom_last_error());
  cr_assert_eq(n, 0);
  assert_same_runs(&ra, &rb, "next vs next_into after rejected calls");
  loom_scope_end();
  free(ra.bytes);
  free(rb.bytes);
  loom_loader_free(a);
  loom_loader_free(b);
  loom_dataset_release(ds);
}

/* A channels-last loader wants a channels-last x; labels are optional. */
Test(loader_into, channels_last_loader_wants_nhwc_x_and_y_may_be_null) {
  loom_dataset *ds = image_ds(25);
  loom_loader_options o = aug_options(2, 3);
  o.channels_last = true;
  loom_loader *l = loom_loader_new(ds, &o);
  cr_assert_not_null(l, "%s", loom_last_error());
  loom_scope_begin();
  loom_tensor *xc, *xl, *y;
  into_buffers(loom_cpu(), false, &xc, &y);
  into_buffers(loom_cpu(), true, &xl, &y);
  int64_t n = 99;
  cr_assert_eq(loom_loader_next_into(l, xc, y, &n), LOOM_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(loom_last_error(), "x must be channels-last"), "%s", loom_last_error());
  /* y NULL: labels skipped, the batch still counts. */
  cr_assert_eq(loom_loader_next_into(l, xl, NULL, &n), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(n, BS);
  int64_t e, bt;
  cr_assert_eq(loom_loader_position(l, &e, &bt), LOOM_OK);
  cr_assert(e == 0 && bt == 1);
  loom_scope_end();
  loom_loader_free(l);
  loom_dataset_release(ds);
}

/* A loader in error returns its error to next_into too, every call. */
Test(loader_into, loader_error_reaches_next_into, .timeout = 30) {
  fail_ctx c = {.fail_at = 57};
  loom_dataset *ds = failing_ds(&c, 200, true);
  loom_loader_options o;
  loom_loader_options_init(&o);
  o.batch_size = BS;
  o.workers = 2;
  loom_loader *l = loom_loader_new(ds, &o);
  cr_assert_not_null(l, "%s", loom_last_error());
  loom_scope_begin();
  const int64_t xs[2] = {BS, 2}, ys[1] = {BS};
  loom_tensor *x = loom_empty(2, xs, LOOM_F32, loom_cpu()), *y = loom_empty(1, ys, LOOM_I64, loom_cpu());
  int64_t n;
  for (int k = 0; k < 5; k++) {
    cr_assert_eq(loom_loader_next_into(l, x, y, &n), LOOM_OK, "batch %d: %s", k, loom_last_error());
    cr_assert_eq(n, BS);
    cr_assert_float_eq(((float *)loom_tensor_data(x))[0], (float)(k * BS), 0.0f);
    cr_assert_eq(((int64_t *)loom_tensor_data(y))[BS - 1], k * BS + BS - 1);
  }
  for (int k = 0; k < 2; k++) {
    n = 99;
    cr_assert_eq(loom_loader_next_into(l, x, y, &n), LOOM_ERR_IO);
    cr_assert_not_null(strstr(loom_last_error(), "disk on fire"), "%s", loom_last_error());
    cr_assert_eq(n, 0);
  }
  loom_scope_end();
  loom_loader_free(l);
  loom_dataset_release(ds);
}

/* ---- the same on a GPU (skipped without one) ------------------------------------ */
/* Each ends with loom_shutdown (as testkit's tk_teardown does), so that
 * compute-sanitizer --leak-check sees only what a test itself leaked, never
 * loom's caches (the allocator's segments, the pinned pool, the CUDA
 * context), which loom keeps for the life of the process unless shut down. */
static void cuda_fini(void) {
  loom_status st = loom_shutdown();
  cr_assert_eq(st, LOOM_OK, "loom_shutdown at the end of the test: %s", loom_last_error());
}
TestSuite(loader_cuda, .fini = cuda_fini);

Test(loader_cuda, next_into_matches_next, .timeout = 120) {
  REQUIRE_CUDA0();
  into_matches_next(loom_cuda(0), false);
  into_matches_next(loom_cuda(0), true);
  interleaved_equals_next_only(loom_cuda(0));
}

Test(loader_cuda, next_into_rejects_a_tensor_on_another_device, .timeout = 60) {
  REQUIRE_CUDA0();
  loom_dataset *ds = image_ds(25);
  loom_loader_options o = aug_options(2, 3);
  o.device = loom_cuda(0);
  loom_loader *l = loom_loader_new(ds, &o);
  cr_assert_not_null(l, "%s", loom_last_error());
  loom_scope_begin();
  loom_tensor *xh, *yh, *xd, *yd;
  into_buffers(loom_cpu(), false, &xh, &yh);
  into_buffers(loom_cuda(0), false, &xd, &yd);
  int64_t n = 99;
  cr_assert_eq(loom_loader_next_into(l, xh, yd, &n), LOOM_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(loom_last_error(), "x is on cpu"), "%s", loom_last_error());
  cr_assert_eq(loom_loader_next_into(l, xd, yh, &n), LOOM_ERR_INVALID_ARG);
  cr_assert_not_null(strstr(loom_last_error(), "y is on cpu"), "%s", loom_last_error());
  cr_assert_eq(loom_loader_next_into(l, xd, yd, &n), LOOM_OK, "%s", loom_last_error());
  int64_t e, bt;
  cr_assert_eq(loom_loader_position(l, &e, &bt), LOOM_OK);
  cr_assert(e == 0 && bt == 1 && n == BS);
  loom_scope_end();
  loom_loader_free(l);
  loom_dataset_release(ds);
}

/* What next_into is for: a captured graph reads x; each step writes the next
 * batch into x and replays. z = 2x must follow the batches of next exactly
 * (the copy is ordered after the previous replay and before the next). */
Test(loader_cuda, next_into_feeds_a_captured_graph, .timeout = 120) {
  REQUIRE_CUDA0();
  loom_device dev = loom_cuda(0);
  const int64_t xs[4] = {BS, C, H, W};
  loom_tensor *x = loom_zeros(4, xs, LOOM_F32, dev);
  cr_assert_not_null(x, "%s", loom_last_error());
  loom_graph *g = NULL;
  cr_assert_eq(loom_graph_capture_begin(dev, &g), LOOM_OK, "%s", loom_last_error());
  loom_tensor *z = loom_mul_scalar(x, 2.0);
  cr_assert_eq(loom_graph_capture_end(g), LOOM_OK, "%s", loom_last_error());
  cr_assert_not_null(z);
  /* Loaders made after the capture: their pinned allocations stay out of it. */
  loom_dataset *ds = image_ds(25);
  loom_loader_options o = aug_options(2, 3);
  o.device = dev;
  loom_loader *a = loom_loader_new(ds, &o), *b = loom_loader_new(ds, &o);
  cr_assert(a && b, "%s", loom_last_error());
  size_t xn = (size_t)BS * PIX;
  float *got = malloc(xn * sizeof *got), *want = malloc(xn * sizeof *want);
  cr_assert(got && want);
  for (int k = 0; k < 8; k++) {
    int64_t n = -1;
    cr_assert_eq(loom_loader_next_into(b, x, NULL, &n), LOOM_OK, "%s", loom_last_error());
    loom_scope_begin();
    loom_tensor *xa = NULL;
    cr_assert_eq(loom_loader_next(a, &xa, NULL), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(n, xa ? loom_tensor_dim(xa, 0) : 0, "call %d", k);
    if (n) {
      cr_assert_eq(loom_graph_replay(g), LOOM_OK, "%s", loom_last_error());
      cr_assert_eq(loom_to_host(z, got, xn * sizeof *got, LOOM_F32), LOOM_OK, "%s", loom_last_error());
      cr_assert_eq(loom_to_host(xa, want, (size_t)n * PIX * sizeof *want, LOOM_F32), LOOM_OK, "%s", loom_last_error());
      for (size_t i = 0; i < (size_t)n * PIX; i++)
        cr_assert_eq(got[i], 2.0f * want[i], "call %d, element %zu: %g vs %g", k, i, got[i], 2.0f * want[i]);
    }
    loom_scope_end();
  }
  free(got);
  free(want);
  loom_loader_free(a);
  loom_loader_free(b);
  loom_dataset_release(ds);
  loom_tensor_release(z);
  loom_graph_free(g);
  loom_tensor_release(x);
}
