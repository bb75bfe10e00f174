/* test_safetensors.c — safetensors files (lib/io): round trips of every
 * dtype on every device, the file layout loom writes (alignment, order,
 * metadata), zero-copy loading from the map, atomic replacement, the
 * staged (O_DIRECT past 8 MiB) writer at every size edge, and one
 * malformed file per validation rule, each refused with LOOM_ERR_FORMAT and
 * a message naming the rule. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT */
#endif
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/atomic_file.h"
#include "support/testkit.h"

/* ---- helpers ----------------------------------------------------------------- */

static char g_dir[256];

static void make_dir(void) { tk_tmpdir(g_dir, sizeof g_dir, "loom-st"); }

static void remove_dir(void) { tk_tmpdir_remove(g_dir); }

static const char *path_in(const char *name) {
  static char p[512];
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  return p;
}

/* A file of: 8-byte length (hlen_override if >= 0, else strlen(header)),
 * the header, then n data bytes. */
static const char *write_raw(const char *name, const char *header, long long hlen_override, const void *data, size_t n) {
  const char *p = path_in(name);
  FILE *f = fopen(p, "wb");
  cr_assert_not_null(f);
  unsigned long long h = hlen_override >= 0 ? (unsigned long long)hlen_override : strlen(header);
  unsigned char lenb[8];
  for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)(h >> (8 * i));
  fwrite(lenb, 1, 8, f);
  fwrite(header, 1, strlen(header), f);
  if (n) fwrite(data, 1, n, f);
  fclose(f);
  return p;
}

static unsigned char *read_file(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  cr_assert_not_null(f);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  cr_assert_eq(fread(b, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  b[len] = 0;
  *n = (size_t)len;
  return b;
}

/* Opening p must fail with LOOM_ERR_FORMAT mentioning frag. */
static void expect_bad(const char *p, const char *frag) {
  loom_safetensors *f = loom_safetensors_open(p);
  cr_assert_null(f, "a malformed file opened (expected: %s)", frag);
  tk_assert_error(loom_last_status(), LOOM_ERR_FORMAT, frag, "safetensors '");
}

/* ---- round trips ------------------------------------------------------------------ */

static loom_tensor *ramp(int ndim, const int64_t *shape, loom_dtype dt, loom_device dev, double base) {
  int64_t n = tk_numel(ndim, shape);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = tk_round(base + (double)i * (dt == LOOM_U8 ? 1 : 0.5) - (dt == LOOM_U8 ? 0 : 3), dt);
  loom_tensor *t = tk_tensor(v, ndim, shape, dt, dev);
  free(v);
  return t;
}

static void assert_same(loom_tensor *got, loom_tensor *want, const char *what) {
  cr_assert_not_null(got, "%s: %s", what, loom_last_error());
  cr_assert_eq(loom_tensor_dtype(got), loom_tensor_dtype(want), "%s: dtype", what);
  cr_assert_eq(loom_tensor_ndim(got), loom_tensor_ndim(want), "%s: ndim", what);
  for (int d = 0; d < loom_tensor_ndim(want); d++)
    cr_assert_eq(loom_tensor_dim(got, d), loom_tensor_dim(want, d), "%s: dim %d", what, d);
  int64_t n = loom_tensor_numel(want);
  size_t bytes = (size_t)n * loom_dtype_size(loom_tensor_dtype(want));
  unsigned char *a = malloc(bytes + 1), *b = malloc(bytes + 1);
  cr_assert_eq(loom_to_host(got, a, bytes, loom_tensor_dtype(want)), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_to_host(want, b, bytes, loom_tensor_dtype(want)), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(memcmp(a, b, bytes), 0, "%s: bytes differ", what);
  free(a);
  free(b);
}

DEVICE_TEST(safetensors, round_trip_every_dtype) {
  make_dir();
  int64_t s23[2] = {2, 3}, s5[1] = {5}, s7[1] = {7}, s0[2] = {0, 4}, s34[2] = {3, 4};
  loom_tensor *t[9];
  t[0] = ramp(2, s23, LOOM_F32, dev, 1);
  t[1] = ramp(1, s5, LOOM_F16, dev, 2);      /* odd counts of 2-byte and */
  t[2] = ramp(1, s7, LOOM_BF16, dev, 3);     /* 1-byte elements ahead of 8-byte ones */
  t[3] = ramp(2, s23, LOOM_I32, dev, 4);
  t[4] = ramp(1, s5, LOOM_I64, dev, 5);
  t[5] = ramp(1, s7, LOOM_U8, dev, 6);
  t[6] = ramp(0, NULL, LOOM_F32, dev, 7);    /* a scalar */
  t[7] = ramp(2, s0, LOOM_F32, dev, 0);      /* empty */
  t[8] = loom_transpose(ramp(2, s34, LOOM_F32, dev, 8), 0, 1);  /* a strided view */
  const char *names[9] = {"w.f32", "h.f16", "b.bf16", "i.i32", "l.i64", "u.u8", "scalar", "empty", "transposed"};
  const char *keys[2] = {"format", "note"}, *values[2] = {"pt", "ünïcode ok"};
  const char *p = path_in("all.safetensors");
  cr_assert_eq(loom_safetensors_save(p, 9, names, t, 2, keys, values), LOOM_OK, "%s", loom_last_error());

  loom_safetensors *f = loom_safetensors_open(p);
  cr_assert_not_null(f, "%s", loom_last_error());
  cr_assert_eq(loom_safetensors_num_tensors(f), 9);
  cr_assert_str_eq(loom_safetensors_metadata(f, "note"), "ünïcode ok");
  cr_assert_str_eq(loom_safetensors_metadata(f, "format"), "pt");
  cr_assert_null(loom_safetensors_metadata(f, "absent"));
  cr_assert_eq(loom_safetensors_num_metadata(f), 2);
  for (int i = 0; i < 9; i++) {
    int k = loom_safetensors_find(f, names[i]);
    cr_assert_geq(k, 0, "%s not found", names[i]);
    loom_dtype dt;
    int nd;
    int64_t shape[LOOM_MAX_DIMS];
    cr_assert_eq(loom_safetensors_info(f, k, &dt, &nd, shape), LOOM_OK, "%s", loom_last_error());
    cr_assert_eq(dt, loom_tensor_dtype(t[i]));
    cr_assert_eq(nd, loom_tensor_ndim(t[i]));
    assert_same(loom_safetensors_get(f, names[i], dev), t[i], names[i]);
  }
  /* File order is by element size, largest first: the i64 tensor leads. */
  cr_assert_str_eq(loom_safetensors_name(f, 0), "l.i64");
  cr_assert_str_eq(loom_safetensors_dtype_name(f, 0), "I64");
  loom_safetensors_close(f);
  remove_dir();
}

Test(safetensors, layout_is_aligned_and_readable) {
  make_dir();
  loom_scope_begin();
  int64_t s3[1] = {3}, s2[1] = {2};
  loom_tensor *t[3] = {ramp(1, s3, LOOM_U8, loom_cpu(), 1), ramp(1, s3, LOOM_F16, loom_cpu(), 1),
                       ramp(1, s2, LOOM_F32, loom_cpu(), 1)};
  const char *names[3] = {"a", "b", "c"};
  const char *keys[1] = {"k"}, *values[1] = {"v"};
  const char *p = path_in("layout.safetensors");
  cr_assert_eq(loom_safetensors_save(p, 3, names, t, 1, keys, values), LOOM_OK, "%s", loom_last_error());
  size_t n;
  unsigned char *b = read_file(p, &n);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | b[i];
  cr_assert_eq((8 + hlen) % 64, 0, "data starts at %llu", (unsigned long long)(8 + hlen));
  cr_assert_eq(n, 8 + hlen + 8 + 6 + 3, "file size %zu", n);
  /* Compact JSON, metadata first, then by element size; space padding. */
  const char *want = "{\"__metadata__\":{\"k\":\"v\"},\"c\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[8,14]},"
                     "\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[14,17]}}";
  cr_assert_eq(memcmp(b + 8, want, strlen(want)), 0, "header: %.*s", (int)hlen, (char *)b + 8);
  for (size_t i = 8 + strlen(want); i < 8 + hlen; i++) cr_assert_eq(b[i], ' ', "padding byte %zu", i);
  free(b);
  loom_scope_end();
  remove_dir();
  tk_leak_check();
}

Test(safetensors, cpu_loads_are_zero_copy_private_views) {
  make_dir();
  loom_scope_begin();
  int64_t s[1] = {64};
  loom_tensor *t = ramp(1, s, LOOM_F32, loom_cpu(), 0);
  const char *name = "x";
  const char *p = path_in("zc.safetensors");
  cr_assert_eq(loom_safetensors_save(p, 1, &name, &t, 0, NULL, NULL), LOOM_OK, "%s", loom_last_error());
  loom_safetensors *f = loom_safetensors_open(p);
  cr_assert_not_null(f, "%s", loom_last_error());
  loom_tensor *a = loom_keep(loom_safetensors_get(f, "x", loom_cpu()));
  loom_tensor *b = loom_safetensors_get(f, "x", loom_cpu());
  cr_assert_not_null(a);
  cr_assert_eq(loom_tensor_data(a), loom_tensor_data(b), "two loads of one tensor share the map");
  cr_assert_eq((uintptr_t)loom_tensor_data(a) % 64, 0, "the first tensor sits at the 64-byte aligned data start");
  loom_safetensors_close(f);  /* tensors outlive the handle */
  loom_scope_end();
  float *v = loom_tensor_data(a);
  cr_assert_eq(v[5], -0.5f);
  v[5] = 123.0f;  /* copy-on-write: the file keeps its bytes */
  loom_tensor_release(a);
  f = loom_safetensors_open(p);
  loom_scope_begin();
  double got;
  loom_tensor *c = loom_safetensors_get(f, "x", loom_cpu());
  cr_assert_eq(loom_item(loom_slice(c, 0, 5, 6, 1), &got), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(got, -0.5);
  loom_scope_end();
  loom_safetensors_close(f);
  remove_dir();
  tk_leak_check();
}

Test(safetensors, save_replaces_atomically_and_leaves_no_temporaries) {
  make_dir();
  loom_scope_begin();
  int64_t s[1] = {4};
  const char *name = "v";
  const char *p = path_in("ckpt.safetensors");
  for (int round = 0; round < 3; round++) {
    loom_tensor *t = loom_full(1, s, round, LOOM_F32, loom_cpu());
    cr_assert_eq(loom_safetensors_save(p, 1, &name, &t, 0, NULL, NULL), LOOM_OK, "%s", loom_last_error());
    loom_safetensors *f = loom_safetensors_open(p);
    double got;
    cr_assert_eq(loom_item(loom_sum_all(loom_safetensors_get(f, "v", loom_cpu())), &got), LOOM_OK);
    cr_assert_eq(got, 4.0 * round);
    loom_safetensors_close(f);
  }
  DIR *d = opendir(g_dir);
  struct dirent *e;
  int files = 0;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      files++;
      cr_assert_str_eq(e->d_name, "ckpt.safetensors", "stray file %s", e->d_name);
    }
  closedir(d);
  cr_assert_eq(files, 1);
  loom_scope_end();
  remove_dir();
  tk_leak_check();
}

/* ---- the staged writer (atomic_file.c) ------------------------------------- */

/* Does dir's file system take O_DIRECT? (tmpfs does not.) */
static bool direct_works(const char *dir) {
  char p[512];
  snprintf(p, sizeof p, "%s/.probe-direct", dir);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return false;
  int fl = fcntl(fd, F_GETFL);
  bool ok = fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0;
  close(fd);
  unlink(p);
  return ok;
}

/* Files of every size around the alignment (4 KiB) and the stage (8 MiB),
 * appended in uneven pieces, read back byte for byte with the exact size;
 * O_DIRECT is used past the first stage exactly where the file system takes
 * it and LOOM_CHECKPOINT_DIRECT is not 0 (a file of exactly one stage
 * writes it out direct when it fills). */
static void staged_round_trips(const char *dir, bool allow) {
  const size_t M8 = (size_t)8 << 20;
  const size_t sizes[] = {0, 1, 4095, 4096, 4097, M8 - 1, M8, M8 + 1, M8 + 4096, 2 * M8 + 12345};
  const size_t pieces[] = {1, 7, 4093, (1 << 20) + 3, 3 << 20};
  size_t biggest = sizes[sizeof sizes / sizeof *sizes - 1];
  unsigned char *src = malloc(biggest);
  for (size_t i = 0; i < biggest; i++) src[i] = (unsigned char)(i * 2654435761u >> 11);
  bool want_direct = allow && direct_works(dir);
  char p[512];
  snprintf(p, sizeof p, "%s/staged.bin", dir);
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    size_t n = sizes[k], off = 0;
    loom_atomic_file af;
    cr_assert_eq(loom_atomic_open(&af, p), LOOM_OK, "%s", loom_last_error());
    for (int j = 0; off < n; j++) {
      size_t c = pieces[j % 5] < n - off ? pieces[j % 5] : n - off;
      cr_assert_eq(loom_atomic_write(&af, src + off, c), LOOM_OK, "%s", loom_last_error());
      off += c;
    }
    cr_assert_eq(af.direct, want_direct && n >= M8, "%s, %zu bytes: O_DIRECT %s", dir, n, af.direct ? "on" : "off");
    cr_assert_eq(loom_atomic_commit(&af), LOOM_OK, "%s", loom_last_error());
    size_t got_n = 0;
    unsigned char *got = read_file(p, &got_n);
    cr_assert_eq(got_n, n, "%s: wrote %zu bytes, the file has %zu", dir, n, got_n);
    cr_assert(n == 0 || memcmp(got, src, n) == 0, "%s, %zu bytes: contents differ", dir, n);
    free(got);
  }
  unlink(p);
  free(src);
}

Test(atomic_file, staged_writes_keep_every_byte_at_every_size) {
  make_dir();
  staged_round_trips(g_dir, true);
  if (access("/dev/shm", W_OK) == 0) staged_round_trips("/dev/shm", true);  /* tmpfs: no O_DIRECT, buffered */
  loom_set_checkpoint_direct(false);
  staged_round_trips(g_dir, false);
  loom_set_checkpoint_direct(true);
  remove_dir();
}

Test(safetensors, save_rejects_bad_arguments) {
  make_dir();
  loom_scope_begin();
  int64_t s[1] = {2};
  loom_tensor *t[2] = {loom_zeros(1, s, LOOM_F32, loom_cpu()), loom_zeros(1, s, LOOM_F32, loom_cpu())};
  const char *dup[2] = {"a", "a"};
  tk_assert_error(loom_safetensors_save(path_in("x"), 2, dup, t, 0, NULL, NULL), LOOM_ERR_INVALID_ARG, "'a'", "twice");
  const char *reserved[1] = {"__metadata__"};
  tk_assert_error(loom_safetensors_save(path_in("x"), 1, reserved, t, 0, NULL, NULL), LOOM_ERR_INVALID_ARG, "reserved");
  loom_tensor *null_t[1] = {NULL};
  loom_clear_error();
  tk_assert_error(loom_safetensors_save(path_in("x"), 1, dup, null_t, 0, NULL, NULL), LOOM_ERR_NULL_INPUT, "'a'");
  const char *k[2] = {"k", "k"}, *v[2] = {"1", "2"};
  tk_assert_error(loom_safetensors_save(path_in("x"), 1, dup, t, 2, k, v), LOOM_ERR_INVALID_ARG, "metadata key 'k'");
  const char *bad_utf8[1] = {"\xff\xfe"};
  tk_assert_error(loom_safetensors_save(path_in("x"), 1, bad_utf8, t, 0, NULL, NULL), LOOM_ERR_INVALID_ARG, "UTF-8");
  tk_assert_error(loom_safetensors_save("/nonexistent-dir/x.safetensors", 1, dup, t, 0, NULL, NULL), LOOM_ERR_IO,
                  "cannot create", "/nonexistent-dir/");
  tk_assert_error(loom_safetensors_save(path_in("dir/"), 1, dup, t, 0, NULL, NULL), LOOM_ERR_INVALID_ARG, "directory");
  loom_scope_end();
  /* Nothing was written by the failed calls. */
  cr_assert_neq(access(path_in("x"), F_OK), 0);
  remove_dir();
  tk_leak_check();
}

/* ---- reading what other writers produce --------------------------------------------- */

Test(safetensors, foreign_files_misaligned_bool_and_unsupported_dtypes) {
  make_dir();
  /* Unpadded header: the F32 tensor starts misaligned. */
  char h[256] = "{\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[8,11]},"
                "\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[11,19]}}";
  if ((8 + strlen(h)) % 4 == 0) strcat(h, " ");  /* padding is legal; keep the data misaligned */
  unsigned char data[19];
  float fv[2] = {1.5f, -2.25f};
  double dv = 3.0;
  memcpy(data, fv, 8);
  data[8] = 1, data[9] = 0, data[10] = 1;
  memcpy(data + 11, &dv, 8);
  cr_assert_neq((8 + strlen(h)) % 4, 0, "the header must leave the F32 tensor misaligned");
  const char *p = write_raw("foreign.safetensors", h, -1, data, sizeof data);
  loom_safetensors *f = loom_safetensors_open(p);
  cr_assert_not_null(f, "%s", loom_last_error());
  loom_scope_begin();
  loom_tensor *ft = loom_safetensors_get(f, "f", loom_cpu());
  cr_assert_not_null(ft, "%s", loom_last_error());
  cr_assert_eq((uintptr_t)loom_tensor_data(ft) % 4, 0, "a misaligned tensor is copied to aligned memory");
  double *vals = tk_read(ft);
  cr_assert_eq(vals[0], 1.5);
  cr_assert_eq(vals[1], -2.25);
  free(vals);
  loom_tensor *bt = loom_safetensors_get(f, "b", loom_cpu());
  cr_assert_eq(loom_tensor_dtype(bt), LOOM_U8, "BOOL loads as U8");
  vals = tk_read(bt);
  cr_assert(vals[0] == 1 && vals[1] == 0 && vals[2] == 1);
  free(vals);
  int di = loom_safetensors_find(f, "d");
  cr_assert_str_eq(loom_safetensors_dtype_name(f, di), "F64");
  loom_dtype dt;
  tk_assert_error(loom_safetensors_info(f, di, &dt, NULL, NULL), LOOM_ERR_UNSUPPORTED, "'d'", "F64");
  tk_assert_fails(loom_safetensors_get(f, "d", loom_cpu()), LOOM_ERR_UNSUPPORTED, "F64");
  tk_assert_fails(loom_safetensors_get(f, "nope", loom_cpu()), LOOM_ERR_INVALID_ARG, "no tensor 'nope'");
  loom_scope_end();
  loom_safetensors_close(f);
  /* An empty file (just "{}") is valid. */
  f = loom_safetensors_open(write_raw("empty.safetensors", "{}", -1, NULL, 0));
  cr_assert_not_null(f, "%s", loom_last_error());
  cr_assert_eq(loom_safetensors_num_tensors(f), 0);
  loom_safetensors_close(f);
  remove_dir();
  tk_leak_check();
}

Test(safetensors, missing_file_is_an_io_error) {
  cr_assert_null(loom_safetensors_open("/nonexistent/file.safetensors"));
  tk_assert_error(loom_last_status(), LOOM_ERR_IO, "cannot open", "/nonexistent/file.safetensors");
  cr_assert_null(loom_safetensors_open("/tmp"));
  tk_assert_error(loom_last_status(), LOOM_ERR_IO, "not a regular file");
  tk_leak_check();
}

/* ---- malformed files: one per rule --------------------------------------------------- */

#define ENTRY(name, dt, shape, b, e) "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static unsigned char zeros[64];

Test(safetensors_malformed, shorter_than_the_length_field) {
  make_dir();
  const char *p = path_in("short");
  FILE *f = fopen(p, "wb");
  fwrite("\x02\0\0", 1, 3, f);
  fclose(f);
  expect_bad(p, "shorter than the 8-byte header length");
  remove_dir();
  tk_leak_check();
}

Test(safetensors_malformed, header_length_past_the_end) {
  make_dir();
  expect_bad(write_raw("h", "{}", 1000, NULL, 0), "runs past the end of the file");
  remove_dir();
  tk_leak_check();
}

Test(safetensors_malformed, header_length_over_the_limit) {
  make_dir();
  expect_bad(write_raw("h", "{}", 200000000, NULL, 0), "exceeds the format's limit");
  /* 2^64 - 1: no overflow when adding 8. */
  expect_bad(write_raw("h2", "{}", 0x7fffffffffffffffLL, NULL, 0), "exceeds");
  remove_dir();
  tk_leak_check();
}

Test(safetensors_malformed, header_is_not_json) {
  make_dir();
  expect_bad(write_raw("h", "{\"a\":", -1, NULL, 0), "not valid JSON");
  expect_bad(write_raw("h2", "{} trailing", -1, NULL, 0), "not valid JSON");
  expect_bad(write_raw("h3", "{\"\xff\":1}", -1, NULL, 0), "not valid JSON");  /* invalid UTF-8 */
  remove_dir();
  tk_leak_check();
}

Test(safetensors_malformed, header_is_not_an_object) {
  make_dir();
  expect_bad(write_raw("h", "[1,2]", -1, NULL, 0), "not a JSON object");
  expect_bad(write_raw("h2", "{\"a\":[]}", -1, NULL, 0), "entry 'a' is not an object");
  remove_dir();
  tk_leak_check();
}

Test(safetensors_malformed, duplicate_names) {
  make_dir();
  expect_bad(write_raw("h", "{" ENTRY("a", "U8", "[1]", 0, 1) "," ENTRY("a", "U8", "[1]", 1, 2) "}", -1, zeros, 2),
             "appears twice");
  remove_dir();
  tk_leak_check();
}

Test(safetensors_malformed, entry_fields) {
  make_dir();
  expect_bad(write_raw("a", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", -1, zeros, 4), "lacks its data_offsets");
  expect_bad(write_raw("b", "{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", -1, zeros, 4), "lacks its shape");
  expect_bad(write_raw("c", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", -1, zeros, 4),
             "unknown field 'x'");
  expect_bad(write_raw("d", "{" ENTRY("t", "F33", "[1]", 0, 4) "}", -1, zeros, 4), "unknown dtype 'F33'");
  expect_bad(write_raw("e", "{\"t\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", -1, zeros, 4),
             "dtype is not a string");
  remove_dir();
  tk_leak_check();
}

Test(safetensors_malformed, bad_shapes) {
  make_dir();
  expect_bad(write_raw("a", "{" ENTRY("t", "F32", "[-1]", 0, 4) "}", -1, zeros, 4), "shape[0] is not a non-negative");
  expect_bad(write_raw("b", "{" ENTRY("t", "F32", "[1.0]", 0, 4) "}", -1, zeros, 4), "shape[0] is not a non-negative");
  expect_bad(write_raw("c", "{" ENTRY("t", "F32", "7", 0, 4) "}", -1, zeros, 4), "shape is not an array");
  /* Dimensions whose product overflows 64 bits. */
  expect_bad(write_raw("d", "{" ENTRY("t", "F32", "[4294967296,4294967296,16]", 0, 4) "}", -1, zeros, 4),
             "overflows 64 bits");
  remove_dir();
  tk_leak_check();
}

Test(safetensors_malformed, bad_offsets) {
  make_dir();
  expect_bad(write_raw("a", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", -1, zeros, 1),
             "not [begin, end]");
  expect_bad(write_raw("b", "{" ENTRY("t", "U8", "[1]", -1, 0) "}", -1, zeros, 1), "not [begin, end]");
  expect_bad(write_raw("c", "{" ENTRY("t", "U8", "[0]", 4, 2) "}", -1, zeros, 4), "end before they begin");
  expect_bad(write_raw("d", "{" ENTRY("t", "U8", "[8]", 0, 8) "}", -1, zeros, 4), "run past the data section");
  remove_dir();
  tk_leak_check();
}

Test(safetensors_malformed, byte_count_disagrees_with_dtype_and_shape) {
  make_dir();
  expect_bad(write_raw("a", "{" ENTRY("t", "F32", "[2,2]", 0, 12) "}", -1, zeros, 12), "span 12 bytes");
  expect_bad(write_raw("b", "{" ENTRY("t", "BF16", "[3]", 0, 3) "}", -1, zeros, 3), "of 6 bytes");
  remove_dir();
  tk_leak_check();
}

Test(safetensors_malformed, overlap_gap_and_trailing_bytes) {
  make_dir();
  expect_bad(write_raw("a", "{" ENTRY("x", "U8", "[4]", 0, 4) "," ENTRY("y", "U8", "[4]", 2, 6) "}", -1, zeros, 6),
             "overlaps");
  expect_bad(write_raw("b", "{" ENTRY("x", "U8", "[2]", 0, 2) "," ENTRY("y", "U8", "[2]", 3, 5) "}", -1, zeros, 5),
             "belong to no tensor");
  expect_bad(write_raw("c", "{" ENTRY("x", "U8", "[2]", 2, 4) "}", -1, zeros, 4), "belong to no tensor");
  expect_bad(write_raw("d", "{" ENTRY("x", "U8", "[2]", 0, 2) "}", -1, zeros, 5), "3 trailing bytes");
  expect_bad(write_raw("e", "{}", -1, zeros, 1), "1 trailing bytes");
  remove_dir();
  tk_leak_check();
}

Test(safetensors_malformed, metadata_must_be_strings) {
  make_dir();
  expect_bad(write_raw("a", "{\"__metadata__\":{\"k\":1}}", -1, NULL, 0), "'k' is not a string");
  expect_bad(write_raw("b", "{\"__metadata__\":[]}", -1, NULL, 0), "__metadata__ is not an object");
  remove_dir();
  tk_leak_check();
}
