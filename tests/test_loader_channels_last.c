/* test_loader_channels_last.c — channels-last batches from the loader: for
 * CIFAR-shaped u8 samples with random crop, flip and per-channel normalize,
 * the NHWC batches hold exactly the values of the NCHW ones (same seed, so
 * same crops and flips), carry NHWC strides, and are identical for any
 * number of workers; also a CIFAR-10 file read through the loader, and the
 * option's error for samples that are not [C,H,W]. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "support/testkit.h"

enum { N = 37, C = 3, H = 6, W = 5, B = 8 };

static loom_dataset *cifar_like(void) {
  static unsigned char x[N * C * H * W];
  static uint8_t y[N];
  for (int i = 0; i < N * C * H * W; i++) x[i] = (unsigned char)((i * 37 + 11) % 251);
  for (int i = 0; i < N; i++) y[i] = (uint8_t)(i % 10);
  int64_t shape[3] = {C, H, W};
  loom_dataset *ds = loom_dataset_memory(x, LOOM_U8, 3, shape, y, LOOM_U8, N, true);
  cr_assert_not_null(ds, "%s", loom_last_error());
  return ds;
}

static loom_loader_options opts(int workers, bool cl) {
  static const float mean[3] = {0.49f, 0.48f, 0.45f}, stdv[3] = {0.25f, 0.24f, 0.26f};
  loom_loader_options o;
  loom_loader_options_init(&o);
  o.batch_size = B;
  o.shuffle = true;
  o.seed = 5;
  o.workers = workers;
  o.crop_padding = 2;
  o.hflip = true;
  o.scale = 1.0f / 255.0f;
  o.mean = mean;
  o.std = stdv;
  o.norm_channels = 3;
  o.channels_last = cl;
  return o;
}

/* Every batch of two epochs, read in logical [n, C, H, W] order (host). */
static double *all_batches(loom_dataset *ds, loom_loader_options o, bool expect_cl, int64_t *count) {
  loom_loader *l = loom_loader_new(ds, &o);
  cr_assert_not_null(l, "%s", loom_last_error());
  double *out = malloc(sizeof(double) * 2 * N * C * H * W);
  int64_t at = 0;
  for (int e = 0; e < 2; e++) {
    for (;;) {
      loom_scope_begin();
      loom_tensor *x, *y;
      cr_assert_eq(loom_loader_next(l, &x, &y), LOOM_OK, "%s", loom_last_error());
      if (!x) {
        loom_scope_end();
        break;
      }
      cr_assert_eq(loom_tensor_ndim(x), 4);
      if (expect_cl) {
        cr_assert(loom_tensor_is_channels_last(x), "batch is channels-last");
        cr_assert_eq(loom_tensor_strides(x)[1], 1);
        cr_assert_eq(loom_tensor_strides(x)[3], C);
      } else {
        cr_assert(loom_tensor_is_contiguous(x));
      }
      double *v = tk_read(x); /* logical order whatever the strides */
      int64_t n = loom_tensor_numel(x);
      memcpy(out + at, v, (size_t)n * sizeof(double));
      at += n;
      free(v);
      loom_scope_end();
    }
  }
  loom_loader_free(l);
  *count = at;
  return out;
}

Test(loader_channels_last, same_values_nhwc_strides_any_workers, .timeout = 60) {
  loom_dataset *ds = cifar_like();
  int64_t n_ref, n;
  double *ref = all_batches(ds, opts(0, false), false, &n_ref);
  cr_assert_eq(n_ref, 2 * N * C * H * W);
  int workers[3] = {0, 1, 3};
  for (int k = 0; k < 3; k++) {
    double *got = all_batches(ds, opts(workers[k], true), true, &n);
    cr_assert_eq(n, n_ref);
    for (int64_t i = 0; i < n; i++)
      cr_assert_eq(got[i], ref[i], "workers %d: element %lld: %g vs %g", workers[k], (long long)i, got[i], ref[i]);
    free(got);
  }
  free(ref);
  loom_dataset_release(ds);
  tk_leak_check();
}

Test(loader_channels_last, needs_chw_samples) {
  float x[4 * 6] = {0};
  int64_t shape[2] = {4, 6};
  loom_dataset *ds = loom_dataset_memory(x, LOOM_F32, 2, shape, NULL, LOOM_U8, 1, true);
  cr_assert_not_null(ds);
  loom_loader_options o;
  loom_loader_options_init(&o);
  o.channels_last = true;
  cr_assert_null(loom_loader_new(ds, &o));
  tk_assert_error(loom_last_status(), LOOM_ERR_SHAPE, "channels_last needs [C,H,W] samples");
  loom_dataset_release(ds);
  tk_leak_check();
}

/* A CIFAR-10 binary file through the loader into channels-last batches:
 * pixel (c, y, x) of record r lands at x[r, c, y, x]. */
Test(loader_channels_last, cifar_file_to_nhwc_batch) {
  char dir[] = "/tmp/loom_cl_XXXXXX", path[64];
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/data_batch_1.bin", dir);
  enum { R = 3, REC = 1 + 3 * 32 * 32 };
  static unsigned char buf[R * REC];
  for (int r = 0; r < R; r++) {
    buf[r * REC] = (unsigned char)(r + 4);
    for (int i = 0; i < 3 * 32 * 32; i++) buf[r * REC + 1 + i] = (unsigned char)((i * 7 + r * 13) & 0xFF);
  }
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(buf, 1, sizeof buf, f), sizeof buf);
  fclose(f);
  const char *files[1] = {path};
  loom_dataset *ds = loom_dataset_cifar10_open(files, 1);
  cr_assert_not_null(ds, "%s", loom_last_error());
  loom_loader_options o;
  loom_loader_options_init(&o);
  o.batch_size = R;
  o.workers = 1;
  o.channels_last = true;
  loom_loader *l = loom_loader_new(ds, &o);
  cr_assert_not_null(l, "%s", loom_last_error());
  loom_scope_begin();
  loom_tensor *x, *y;
  cr_assert_eq(loom_loader_next(l, &x, &y), LOOM_OK, "%s", loom_last_error());
  cr_assert(loom_tensor_is_channels_last(x));
  double *v = tk_read(x), *lab = tk_read(y);
  for (int r = 0; r < R; r++) {
    cr_assert_eq(lab[r], r + 4);
    for (int i = 0; i < 3 * 32 * 32; i++) cr_assert_eq(v[r * 3 * 32 * 32 + i], buf[r * REC + 1 + i], "r %d i %d", r, i);
  }
  /* The memory itself is HWC: element (r, c=1, y=0, x=0) sits right after (r, 0, 0, 0). */
  const float *raw = loom_tensor_data(x);
  cr_assert_eq(raw[1], (float)buf[1 + 1024]);
  free(v);
  free(lab);
  loom_scope_end();
  loom_loader_free(l);
  loom_dataset_release(ds);
  unlink(path);
  rmdir(dir);
  tk_leak_check();
}
