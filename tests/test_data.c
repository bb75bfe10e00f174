/* test_data.c — datasets: the IDX and CIFAR-10 parsers (valid files, raw and
 * gzip, and malformed ones generated here: truncated, bad magic, absurd
 * dims, wrong sizes, bad gzip), in-memory and callback datasets, the sampler,
 * and the real Fashion-MNIST files when the system has them. */
#include <math.h>
#include "support/criterion_or_tsan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "loom/data.h"
#include "data/data_internal.h"

static char g_dir[256];

static void make_dir(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/loom_test_data_XXXXXX");
  cr_assert_not_null(mkdtemp(g_dir));
}

static void remove_dir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  cr_assert_eq(system(cmd), 0);
}

static const char *path_of(const char *name) {
  static char p[8][400];
  static int k = 0;
  k = (k + 1) % 8;
  snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
  return p[k];
}

static void write_raw(const char *name, const void *data, size_t n) {
  FILE *f = fopen(path_of(name), "wb");
  cr_assert_not_null(f);
  if (n) cr_assert_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

static void write_gz(const char *name, const void *data, size_t n) {
  gzFile f = gzopen(path_of(name), "wb");
  cr_assert_not_null(f);
  if (n) cr_assert_eq(gzwrite(f, data, (unsigned)n), (int)n);
  cr_assert_eq(gzclose(f), Z_OK);
}

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

/* An idx3 u8 image file with n images of h x w, pixel = (i*7 + k) & 255. */
static size_t make_idx3(unsigned char *buf, uint32_t n, uint32_t h, uint32_t w) {
  buf[0] = 0; buf[1] = 0; buf[2] = 0x08; buf[3] = 3;
  put_be32(buf + 4, n); put_be32(buf + 8, h); put_be32(buf + 12, w);
  size_t px = (size_t)n * h * w;
  for (size_t i = 0; i < px; i++) buf[16 + i] = (unsigned char)((i / (h * w)) * 7 + i % (h * w));
  return 16 + px;
}

static size_t make_idx1(unsigned char *buf, uint32_t n) {
  buf[0] = 0; buf[1] = 0; buf[2] = 0x08; buf[3] = 1;
  put_be32(buf + 4, n);
  for (uint32_t i = 0; i < n; i++) buf[8 + i] = (unsigned char)(i % 10);
  return 8 + n;
}

TestSuite(idx, .init = make_dir, .fini = remove_dir);

Test(idx, raw_and_gzip_read_the_same) {
  unsigned char img[16 + 5 * 4 * 3], lab[8 + 5];
  size_t ni = make_idx3(img, 5, 4, 3), nl = make_idx1(lab, 5);
  write_raw("i.raw", img, ni);
  write_raw("l.raw", lab, nl);
  write_gz("i.gz", img, ni);
  write_gz("l.gz", lab, nl);
  const char *pairs[2][2] = {{"i.raw", "l.raw"}, {"i.gz", "l.gz"}};
  for (int k = 0; k < 2; k++) {
    loom_dataset *ds = loom_dataset_idx_open(path_of(pairs[k][0]), path_of(pairs[k][1]));
    cr_assert_not_null(ds, "%s", loom_last_error());
    cr_assert_eq(loom_dataset_length(ds), 5);
    loom_dtype dt;
    int nd;
    int64_t shape[LOOM_MAX_DIMS];
    cr_assert_eq(loom_dataset_x_info(ds, &dt, &nd, shape), LOOM_OK);
    cr_assert_eq(dt, LOOM_U8);
    cr_assert_eq(nd, 2);
    cr_assert_eq(shape[0], 4);
    cr_assert_eq(shape[1], 3);
    bool has_y;
    cr_assert_eq(loom_dataset_y_info(ds, &has_y, &dt), LOOM_OK);
    cr_assert(has_y);
    for (int i = 0; i < 5; i++) {
      unsigned char x[12], y = 255;
      cr_assert_eq(loom_dataset_read(ds, i, x, &y), LOOM_OK);
      cr_assert_eq(memcmp(x, img + 16 + i * 12, 12), 0);
      cr_assert_eq(y, i % 10);
    }
    cr_assert_eq(loom_dataset_read(ds, 5, NULL, NULL), LOOM_ERR_INVALID_ARG);
    cr_assert_eq(loom_dataset_read(ds, -1, NULL, NULL), LOOM_ERR_INVALID_ARG);
    loom_dataset_release(ds);
  }
}

Test(idx, load_i32_and_f32_to_host_order) {
  unsigned char buf[8 + 12];
  buf[0] = 0; buf[1] = 0; buf[2] = 0x0C; buf[3] = 1;
  put_be32(buf + 4, 3);
  put_be32(buf + 8, 1); put_be32(buf + 12, 0xFFFFFFFEu); put_be32(buf + 16, 70000);
  write_raw("a.idx", buf, sizeof buf);
  void *data;
  loom_dtype dt;
  int nd;
  int64_t shape[LOOM_MAX_DIMS];
  cr_assert_eq(loom_idx_load(path_of("a.idx"), &data, &dt, &nd, shape), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(dt, LOOM_I32);
  cr_assert_eq(nd, 1);
  cr_assert_eq(shape[0], 3);
  int32_t *v = data;
  cr_assert_eq(v[0], 1);
  cr_assert_eq(v[1], -2);
  cr_assert_eq(v[2], 70000);
  loom_free(data);
  float f = 1.5f;
  uint32_t bits;
  memcpy(&bits, &f, 4);
  buf[2] = 0x0D;
  put_be32(buf + 4, 1);
  put_be32(buf + 8, bits);
  write_gz("f.idx.gz", buf, 12);
  cr_assert_eq(loom_idx_load(path_of("f.idx.gz"), &data, &dt, &nd, shape), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(dt, LOOM_F32);
  cr_assert_float_eq(((float *)data)[0], 1.5f, 0.0f);
  loom_free(data);
}

/* Expect code and a message that mentions `needle` (and the file name). */
static void expect_idx_fail(const char *name, loom_status code, const char *needle) {
  void *data = (void *)1;
  loom_dtype dt;
  int nd;
  int64_t shape[LOOM_MAX_DIMS];
  loom_status s = loom_idx_load(path_of(name), &data, &dt, &nd, shape);
  cr_assert_eq(s, code, "%s: got %s: %s", name, loom_status_name(s), loom_last_error());
  cr_assert_null(data);
  cr_assert_not_null(strstr(loom_last_error(), needle), "%s: message '%s' lacks '%s'", name, loom_last_error(), needle);
  cr_assert_not_null(strstr(loom_last_error(), name), "message '%s' does not name the file", loom_last_error());
}

Test(idx, malformed_files_are_format_errors) {
  unsigned char img[16 + 4 * 8 * 8];
  size_t n = make_idx3(img, 4, 8, 8);
  for (int gz = 0; gz < 2; gz++) {
    void (*w)(const char *, const void *, size_t) = gz ? write_gz : write_raw;
    char nm[64];
#define NAME(s) (snprintf(nm, sizeof nm, "%s%s", s, gz ? ".gz" : ""), nm)
    /* truncated payload, truncated header, empty file */
    w(NAME("trunc"), img, n - 10);
    expect_idx_fail(nm, LOOM_ERR_FORMAT, "truncated");
    w(NAME("trunc_hdr"), img, 10);
    expect_idx_fail(nm, LOOM_ERR_FORMAT, "truncated");
    w(NAME("empty"), img, 0);
    expect_idx_fail(nm, LOOM_ERR_FORMAT, "truncated");
    /* bad magic */
    unsigned char bad[sizeof img];
    memcpy(bad, img, n);
    bad[0] = 0x50; bad[1] = 0x4B;
    w(NAME("magic"), bad, n);
    expect_idx_fail(nm, LOOM_ERR_FORMAT, "not an IDX file");
    memcpy(bad, img, n);
    bad[2] = 0x42;
    w(NAME("type"), bad, n);
    expect_idx_fail(nm, LOOM_ERR_FORMAT, "element type");
    memcpy(bad, img, n);
    bad[2] = 0x0E;
    w(NAME("f64"), bad, n);
    expect_idx_fail(nm, LOOM_ERR_UNSUPPORTED, "not supported");
    /* ndim 0 and 200 */
    memcpy(bad, img, n);
    bad[3] = 0;
    w(NAME("nd0"), bad, n);
    expect_idx_fail(nm, LOOM_ERR_FORMAT, "dimensions");
    bad[3] = 200;
    w(NAME("nd200"), bad, n);
    expect_idx_fail(nm, LOOM_ERR_FORMAT, "dimensions");
    /* absurd dims: 4e9 x 4e9 x 4e9 must not allocate, and a zero dim */
    memcpy(bad, img, n);
    put_be32(bad + 4, 0xFFFFFFFFu); put_be32(bad + 8, 0xFFFFFFFFu); put_be32(bad + 12, 0xFFFFFFFFu);
    w(NAME("huge"), bad, n);
    expect_idx_fail(nm, LOOM_ERR_FORMAT, "corrupt");
    /* huge count with small images: passes the caps, must fail on the data, not malloc it */
    memcpy(bad, img, n);
    put_be32(bad + 4, 100000000u);
    w(NAME("count"), bad, n);
    expect_idx_fail(nm, LOOM_ERR_FORMAT, "truncated");
    memcpy(bad, img, n);
    put_be32(bad + 8, 0);
    w(NAME("zero"), bad, n);
    expect_idx_fail(nm, LOOM_ERR_FORMAT, "is 0");
    /* wrong size: more data than the header declares */
    memcpy(bad, img, n);
    put_be32(bad + 4, 3);
    w(NAME("extra"), bad, n);
    expect_idx_fail(nm, LOOM_ERR_FORMAT, "after the");
#undef NAME
  }
}

Test(idx, bad_gzip_streams) {
  unsigned char img[16 + 4 * 8 * 8];
  size_t n = make_idx3(img, 4, 8, 8);
  write_gz("good.gz", img, n);
  FILE *f = fopen(path_of("good.gz"), "rb");
  cr_assert_not_null(f);
  unsigned char gz[4096];
  size_t gn = fread(gz, 1, sizeof gz, f);
  fclose(f);
  cr_assert_gt(gn, 20u);
  /* cut the compressed stream in half */
  write_raw("cut.gz", gz, gn / 2);
  expect_idx_fail("cut.gz", LOOM_ERR_FORMAT, "cut.gz");
  /* garbage deflate data after a valid gzip header */
  unsigned char bad[4096];
  memcpy(bad, gz, gn);
  for (size_t i = 10; i < gn; i++) bad[i] ^= 0xA5;
  write_raw("garbage.gz", bad, gn);
  expect_idx_fail("garbage.gz", LOOM_ERR_FORMAT, "garbage.gz");
  /* corrupt CRC trailer */
  memcpy(bad, gz, gn);
  bad[gn - 6] ^= 0xFF;
  write_raw("crc.gz", bad, gn);
  expect_idx_fail("crc.gz", LOOM_ERR_FORMAT, "gzip");
}

Test(idx, missing_file_is_io_error) {
  cr_assert_null(loom_dataset_idx_open(path_of("nope"), NULL));
  cr_assert_eq(loom_last_status(), LOOM_ERR_IO);
  cr_assert_not_null(strstr(loom_last_error(), "nope"));
  cr_assert_null(loom_dataset_idx_open(g_dir, NULL));
  cr_assert_eq(loom_last_status(), LOOM_ERR_IO);
}

Test(idx, images_and_labels_must_agree) {
  unsigned char img[16 + 5 * 4], lab[8 + 6];
  write_raw("i", img, make_idx3(img, 5, 2, 2));
  write_raw("l", lab, make_idx1(lab, 6));
  cr_assert_null(loom_dataset_idx_open(path_of("i"), path_of("l")));
  cr_assert_eq(loom_last_status(), LOOM_ERR_FORMAT);
  cr_assert_not_null(strstr(loom_last_error(), "5 images"), "%s", loom_last_error());
  /* labels file with 3 dims */
  cr_assert_null(loom_dataset_idx_open(path_of("i"), path_of("i")));
  cr_assert_eq(loom_last_status(), LOOM_ERR_FORMAT);
  /* no labels is fine */
  loom_dataset *ds = loom_dataset_idx_open(path_of("i"), NULL);
  cr_assert_not_null(ds);
  bool has_y = true;
  loom_dataset_y_info(ds, &has_y, NULL);
  cr_assert(!has_y);
  loom_dataset_release(ds);
}

/* ---- CIFAR-10 ----------------------------------------------------------- */
static size_t make_cifar(unsigned char *buf, int n, int label_base) {
  for (int r = 0; r < n; r++) {
    unsigned char *rec = buf + (size_t)r * 3073;
    rec[0] = (unsigned char)((r + label_base) % 10);
    for (int k = 0; k < 3072; k++) rec[1 + k] = (unsigned char)(r * 31 + k);
  }
  return (size_t)n * 3073;
}

TestSuite(cifar, .init = make_dir, .fini = remove_dir);

Test(cifar, reads_and_concatenates_files) {
  static unsigned char a[3 * 3073], b[2 * 3073];
  write_raw("data_batch_1.bin", a, make_cifar(a, 3, 0));
  write_gz("data_batch_2.bin.gz", b, make_cifar(b, 2, 5));
  const char *files[2] = {path_of("data_batch_1.bin"), path_of("data_batch_2.bin.gz")};
  loom_dataset *ds = loom_dataset_cifar10_open(files, 2);
  cr_assert_not_null(ds, "%s", loom_last_error());
  cr_assert_eq(loom_dataset_length(ds), 5);
  loom_dtype dt;
  int nd;
  int64_t shape[LOOM_MAX_DIMS];
  loom_dataset_x_info(ds, &dt, &nd, shape);
  cr_assert_eq(nd, 3);
  cr_assert_eq(shape[0], 3);
  cr_assert_eq(shape[1], 32);
  cr_assert_eq(shape[2], 32);
  unsigned char x[3072], y;
  cr_assert_eq(loom_dataset_read(ds, 4, x, &y), LOOM_OK);
  cr_assert_eq(y, 6);
  cr_assert_eq(memcmp(x, b + 3073 + 1, 3072), 0);
  cr_assert_eq(loom_dataset_read(ds, 2, x, &y), LOOM_OK);
  cr_assert_eq(y, 2);
  cr_assert_eq(memcmp(x, a + 2 * 3073 + 1, 3072), 0);
  loom_dataset_release(ds);
}

static void expect_cifar_fail(const char *name, loom_status code, const char *needle) {
  const char *files[1] = {path_of(name)};
  cr_assert_null(loom_dataset_cifar10_open(files, 1));
  cr_assert_eq(loom_last_status(), code, "%s: %s", name, loom_last_error());
  cr_assert_not_null(strstr(loom_last_error(), needle), "%s: '%s' lacks '%s'", name, loom_last_error(), needle);
}

Test(cifar, malformed_files) {
  static unsigned char a[3 * 3073];
  size_t n = make_cifar(a, 3, 0);
  write_raw("trunc.bin", a, n - 1);
  expect_cifar_fail("trunc.bin", LOOM_ERR_FORMAT, "whole number");
  write_raw("empty.bin", a, 0);
  expect_cifar_fail("empty.bin", LOOM_ERR_FORMAT, "whole number");
  a[3073] = 200;  /* record 1 has label 200 */
  write_raw("label.bin", a, n);
  expect_cifar_fail("label.bin", LOOM_ERR_FORMAT, "record 1 has label 200");
  a[3073] = 1;
  write_gz("ok.gz", a, n);
  FILE *f = fopen(path_of("ok.gz"), "rb");
  static unsigned char gz[20000];
  size_t gn = fread(gz, 1, sizeof gz, f);
  fclose(f);
  write_raw("cut.gz", gz, gn - 12);
  expect_cifar_fail("cut.gz", LOOM_ERR_FORMAT, "cut.gz");
  expect_cifar_fail("missing.bin", LOOM_ERR_IO, "missing.bin");
  cr_assert_null(loom_dataset_cifar10_open(NULL, 1));
  cr_assert_eq(loom_last_status(), LOOM_ERR_INVALID_ARG);
}

/* ---- memory and callback datasets --------------------------------------------- */
Test(memory, copy_and_borrow) {
  float x[6 * 2];
  int64_t y[6];
  for (int i = 0; i < 12; i++) x[i] = (float)i;
  for (int i = 0; i < 6; i++) y[i] = 100 + i;
  int64_t shape[1] = {2};
  loom_dataset *copy = loom_dataset_memory(x, LOOM_F32, 1, shape, y, LOOM_I64, 6, true);
  loom_dataset *borrow = loom_dataset_memory(x, LOOM_F32, 1, shape, y, LOOM_I64, 6, false);
  cr_assert_not_null(copy);
  cr_assert_not_null(borrow);
  x[4] = -1.0f;  /* visible through the borrowed one only */
  float s[2];
  int64_t l;
  cr_assert_eq(loom_dataset_read(copy, 2, s, &l), LOOM_OK);
  cr_assert_float_eq(s[0], 4.0f, 0.0f);
  cr_assert_eq(l, 102);
  cr_assert_eq(loom_dataset_read(borrow, 2, s, &l), LOOM_OK);
  cr_assert_float_eq(s[0], -1.0f, 0.0f);
  loom_dataset_release(copy);
  loom_dataset_release(borrow);
  /* invalid shapes */
  int64_t bad[1] = {0};
  cr_assert_null(loom_dataset_memory(x, LOOM_F32, 1, bad, NULL, LOOM_U8, 6, false));
  cr_assert_eq(loom_last_status(), LOOM_ERR_SHAPE);
  cr_assert_null(loom_dataset_memory(x, (loom_dtype)42, 1, shape, NULL, LOOM_U8, 6, false));
  cr_assert_eq(loom_last_status(), LOOM_ERR_DTYPE);
  cr_assert_null(loom_dataset_memory(NULL, LOOM_F32, 1, shape, NULL, LOOM_U8, 6, false));
}

static int g_destroyed;
static loom_status cb_read(void *user, int64_t i, void *x, void *y) {
  int *base = user;
  ((int32_t *)x)[0] = *base + (int32_t)i;
  ((int32_t *)x)[1] = -(int32_t)i;
  *(uint8_t *)y = (uint8_t)(i & 7);
  if (i == 3) return loom_dataset_fail(LOOM_ERR_IO, "sample 3 is on a bad sector");
  return LOOM_OK;
}
static void cb_destroy(void *user) { (void)user; g_destroyed++; }

Test(callback, reads_fails_and_destroys) {
  static int base = 1000;
  loom_dataset_callbacks cb;
  memset(&cb, 0, sizeof cb);
  cb.struct_size = sizeof cb;
  cb.length = 5;
  cb.x_dtype = LOOM_I32;
  cb.x_ndim = 1;
  cb.x_shape[0] = 2;
  cb.has_y = true;
  cb.y_dtype = LOOM_U8;
  cb.read = cb_read;
  cb.destroy = cb_destroy;
  cb.user = &base;
  loom_dataset *ds = loom_dataset_callback(&cb);
  cr_assert_not_null(ds, "%s", loom_last_error());
  int32_t x[2];
  uint8_t y;
  cr_assert_eq(loom_dataset_read(ds, 2, x, &y), LOOM_OK);
  cr_assert_eq(x[0], 1002);
  cr_assert_eq(x[1], -2);
  cr_assert_eq(y, 2);
  cr_assert_eq(loom_dataset_read(ds, 4, x, NULL), LOOM_OK);  /* NULL y: scratch is given */
  cr_assert_eq(loom_dataset_read(ds, 3, x, &y), LOOM_ERR_IO);
  cr_assert_str_eq(loom_last_error(), "sample 3 is on a bad sector");
  g_destroyed = 0;
  loom_dataset_release(ds);
  cr_assert_eq(g_destroyed, 1);
  cb.read = NULL;
  cr_assert_null(loom_dataset_callback(&cb));
  cb.read = cb_read;
  cb.struct_size = 3;
  cr_assert_null(loom_dataset_callback(&cb));
  cr_assert_eq(loom_last_status(), LOOM_ERR_INVALID_ARG);
}

/* ---- sampler ------------------------------------------------------------ */
Test(sampler, permutation_is_seeded_and_sharded) {
  enum { N = 103 };
  int64_t perm[N + 1], a[N + 2], b[N + 2];
  /* sequential */
  cr_assert_eq(loom_data_shard_order(N, false, 0, 0, 0, 1, false, a, perm), N);
  for (int i = 0; i < N; i++) cr_assert_eq(a[i], i);
  /* shuffled: a permutation, same for the same (seed, epoch), else different */
  cr_assert_eq(loom_data_shard_order(N, true, 7, 3, 0, 1, false, a, perm), N);
  cr_assert_eq(loom_data_shard_order(N, true, 7, 3, 0, 1, false, b, perm), N);
  cr_assert_eq(memcmp(a, b, sizeof(int64_t) * N), 0);
  int seen[N] = {0};
  for (int i = 0; i < N; i++) seen[a[i]]++;
  for (int i = 0; i < N; i++) cr_assert_eq(seen[i], 1);
  loom_data_shard_order(N, true, 7, 4, 0, 1, false, b, perm);
  cr_assert_neq(memcmp(a, b, sizeof(int64_t) * N), 0, "epochs 3 and 4 shuffled identically");
  loom_data_shard_order(N, true, 8, 3, 0, 1, false, b, perm);
  cr_assert_neq(memcmp(a, b, sizeof(int64_t) * N), 0, "seeds 7 and 8 shuffled identically");
  /* 4 shards of 103: padded to 26 each (one sample twice in total, never twice in a shard) */
  int count[N] = {0};
  for (int r = 0; r < 4; r++) {
    int64_t k = loom_data_shard_order(N, true, 7, 3, r, 4, false, a, perm);
    cr_assert_eq(k, 26);
    int in_shard[N] = {0};
    for (int i = 0; i < k; i++) { count[a[i]]++; cr_assert_eq(++in_shard[a[i]], 1); }
  }
  int twice = 0;
  for (int i = 0; i < N; i++) { cr_assert_geq(count[i], 1); cr_assert_leq(count[i], 2); twice += count[i] == 2; }
  cr_assert_eq(twice, 1);
  /* drop_last: 25 each, disjoint */
  memset(count, 0, sizeof count);
  for (int r = 0; r < 4; r++) {
    int64_t k = loom_data_shard_order(N, true, 7, 3, r, 4, true, a, perm);
    cr_assert_eq(k, 25);
    for (int i = 0; i < k; i++) count[a[i]]++;
  }
  int total = 0;
  for (int i = 0; i < N; i++) { cr_assert_leq(count[i], 1); total += count[i]; }
  cr_assert_eq(total, 100);
}

/* ---- the real thing ------------------------------------------------------------ */
Test(fashion_mnist, opens_with_60000_and_10000_samples) {
  const char *dir = getenv("LOOM_FASHION_MNIST") ? getenv("LOOM_FASHION_MNIST") : "/usr/share/datasets/fashion-mnist";
  char ti[256], tl[256], vi[256], vl[256];
  snprintf(ti, sizeof ti, "%s/train-images-idx3-ubyte.gz", dir);
  snprintf(tl, sizeof tl, "%s/train-labels-idx1-ubyte.gz", dir);
  snprintf(vi, sizeof vi, "%s/t10k-images-idx3-ubyte.gz", dir);
  snprintf(vl, sizeof vl, "%s/t10k-labels-idx1-ubyte.gz", dir);
  if (access(ti, R_OK) != 0 || access(tl, R_OK) != 0 || access(vi, R_OK) != 0 || access(vl, R_OK) != 0)
    cr_skip_test("Fashion-MNIST not installed at %s (apt install dataset-fashion-mnist)", dir);
  const char *imgs[2] = {ti, vi}, *labs[2] = {tl, vl};
  const int64_t want[2] = {60000, 10000};
  for (int k = 0; k < 2; k++) {
    loom_dataset *ds = loom_dataset_idx_open(imgs[k], labs[k]);
    cr_assert_not_null(ds, "%s", loom_last_error());
    cr_assert_eq(loom_dataset_length(ds), want[k]);
    loom_dtype dt;
    int nd;
    int64_t shape[LOOM_MAX_DIMS];
    loom_dataset_x_info(ds, &dt, &nd, shape);
    cr_assert_eq(dt, LOOM_U8);
    cr_assert_eq(nd, 2);
    cr_assert_eq(shape[0], 28);
    cr_assert_eq(shape[1], 28);
    int hist[10] = {0};
    long nonzero = 0;
    unsigned char x[784], y;
    for (int64_t i = 0; i < want[k]; i++) {
      cr_assert_eq(loom_dataset_read(ds, i, x, &y), LOOM_OK);
      cr_assert_leq(y, 9);
      hist[y]++;
      if (i < 100) for (int p = 0; p < 784; p++) nonzero += x[p] != 0;
    }
    /* Fashion-MNIST is balanced: 6000 / 1000 of each class. */
    for (int c = 0; c < 10; c++) cr_assert_eq(hist[c], want[k] / 10);
    cr_assert_gt(nonzero, 100 * 784 / 4, "images look empty");
    loom_dataset_release(ds);
  }
}
