/* test_metrics.c — TensorBoard event files and CSV from loom_metrics: CRC-32C
 * against published check values, the TFRecord framing and the protobuf
 * messages decoded field by field by an independent reader here, the CSV,
 * and the errors. (TensorBoard itself reads the files in
 * scripts/check-observability.sh.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/tfrecord.h"
#include "loom/loom.h"
#include "support/testkit.h"

Test(metrics, crc32c_check_values) {
  /* RFC 3720 (iSCSI) B.4 and the usual "123456789" check value. */
  cr_assert_eq(loom_crc32c("123456789", 9), 0xE3069283u);
  uint8_t zeros[32] = {0}, ones[32], inc[32];
  memset(ones, 0xFF, sizeof ones);
  for (int i = 0; i < 32; i++) inc[i] = (uint8_t)i;
  cr_assert_eq(loom_crc32c(zeros, 32), 0x8A9136AAu);
  cr_assert_eq(loom_crc32c(ones, 32), 0x62A8AB43u);
  cr_assert_eq(loom_crc32c(inc, 32), 0x46DD794Eu);
  cr_assert_eq(loom_crc32c("", 0), 0u);
  uint32_t c = 0xE3069283u;
  cr_assert_eq(loom_crc32c_masked("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

/* ---- an independent reader ------------------------------------------------------ */
typedef struct rec { uint8_t *data; size_t n; } rec;

static uint64_t rd64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint32_t rd32(const uint8_t *p) { return (uint32_t)rd64((const uint8_t[8]){p[0], p[1], p[2], p[3], 0, 0, 0, 0}); }

/* All records of a file; asserts both CRCs of each. */
static int read_records(const char *path, rec *out, int max) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  int n = 0;
  uint8_t head[12];
  while (fread(head, 1, 12, f) == 12) {
    cr_assert_eq(rd32(head + 8), loom_crc32c_masked(head, 8), "record %d: bad length crc", n);
    size_t len = (size_t)rd64(head);
    cr_assert(len < 4096 && n < max);
    out[n].data = malloc(len + 1);
    out[n].n = len;
    uint8_t tail[4];
    cr_assert_eq(fread(out[n].data, 1, len, f), len);
    cr_assert_eq(fread(tail, 1, 4, f), 4u);
    cr_assert_eq(rd32(tail), loom_crc32c_masked(out[n].data, len), "record %d: bad data crc", n);
    n++;
  }
  cr_assert(feof(f), "trailing bytes");
  fclose(f);
  return n;
}

static uint64_t varint(const uint8_t **p, const uint8_t *end) {
  uint64_t v = 0;
  for (int s = 0; *p < end && s < 70; s += 7) {
    uint8_t b = *(*p)++;
    v |= (uint64_t)(b & 0x7F) << s;
    if (!(b & 0x80)) return v;
  }
  cr_assert_fail("bad varint");
  return 0;
}

typedef struct event { double wall; int64_t step; char version[32]; char tag[128]; float value; int has_summary; } event;

static void decode_value(const uint8_t *p, const uint8_t *end, event *e) {
  while (p < end) {
    uint64_t k = varint(&p, end);
    if (k == (1 << 3 | 2)) {
      size_t n = (size_t)varint(&p, end);
      cr_assert(n < sizeof e->tag && p + n <= end);
      memcpy(e->tag, p, n);
      e->tag[n] = 0;
      p += n;
    } else if (k == (2 << 3 | 5)) {
      uint32_t u = rd32(p);
      memcpy(&e->value, &u, 4);
      p += 4;
    } else {
      cr_assert_fail("unexpected Value field key %llu", (unsigned long long)k);
    }
  }
}

static event decode_event(const rec *r) {
  event e;
  memset(&e, 0, sizeof e);
  const uint8_t *p = r->data, *end = r->data + r->n;
  while (p < end) {
    uint64_t k = varint(&p, end);
    if (k == (1 << 3 | 1)) {
      uint64_t u = rd64(p);
      memcpy(&e.wall, &u, 8);
      p += 8;
    } else if (k == (2 << 3 | 0)) {
      e.step = (int64_t)varint(&p, end);
    } else if (k == (3 << 3 | 2)) {
      size_t n = (size_t)varint(&p, end);
      cr_assert(n < sizeof e.version);
      memcpy(e.version, p, n);
      p += n;
    } else if (k == (5 << 3 | 2)) {
      size_t n = (size_t)varint(&p, end);
      const uint8_t *s = p, *se = p + n;
      cr_assert(se <= end);
      cr_assert_eq(varint(&s, se), (uint64_t)(1 << 3 | 2), "Summary.value expected");
      size_t vn = (size_t)varint(&s, se);
      cr_assert_eq(s + vn, se, "one Value per Summary");
      decode_value(s, se, &e);
      e.has_summary = 1;
      p = se;
    } else {
      cr_assert_fail("unexpected Event field key %llu", (unsigned long long)k);
    }
  }
  return e;
}

static char *tmp_dir(const char *tag) {
  char *d = malloc(128);
  snprintf(d, 128, "/tmp/loom_metrics_%s_%d", tag, (int)getpid());
  return d;
}

static void rm_dir(const char *d) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
  cr_assert_eq(system(cmd), 0);
}

Test(metrics, event_file_and_csv) {
  char *dir = tmp_dir("ok");
  char sub[256];
  snprintf(sub, sizeof sub, "%s/nested/run1", dir);  /* parents are created */
  loom_metrics *m = loom_metrics_open(sub, NULL);
  cr_assert_not_null(m, "%s", loom_last_error());
  const char *path = loom_metrics_event_path(m);
  cr_assert(path && strstr(path, "/events.out.tfevents."), "%s", path ? path : "(null)");
  char *evpath = strdup(path);
  struct { const char *tag; int64_t step; double v; } want[] = {
      {"train/loss", 0, 2.302585092994046}, {"train/loss", 20, 0.731}, {"train/lr", 20, 1e-3},
      {"epoch/test_accuracy", 469, 0.8512}, {"weird, \"tag\"", -5, -1.5e30}, {"train/loss", 1LL << 40, 0.0},
  };
  int nw = (int)(sizeof want / sizeof want[0]);
  for (int k = 0; k < nw; k++) cr_assert_eq(loom_metrics_scalar(m, want[k].tag, want[k].step, want[k].v), LOOM_OK);
  cr_assert_eq(loom_metrics_scalar(m, "nan", 1, NAN), LOOM_OK);
  cr_assert_eq(loom_metrics_close(m), LOOM_OK, "%s", loom_last_error());

  rec r[32];
  int n = read_records(evpath, r, 32);
  cr_assert_eq(n, nw + 2, "%d records", n);
  event first = decode_event(&r[0]);
  cr_assert_str_eq(first.version, "brain.Event:2");
  cr_assert(first.wall > 1.5e9, "wall_time %f", first.wall);
  for (int k = 0; k < nw; k++) {
    event e = decode_event(&r[k + 1]);
    cr_assert(e.has_summary);
    cr_assert_str_eq(e.tag, want[k].tag);
    cr_assert_eq(e.step, want[k].step);
    cr_assert_eq(e.value, (float)want[k].v, "%s: %g vs %g", e.tag, (double)e.value, want[k].v);
    cr_assert_geq(e.wall, first.wall);
  }
  event last = decode_event(&r[nw + 1]);
  cr_assert(isnan(last.value));
  for (int k = 0; k < n; k++) free(r[k].data);

  char csvp[300], line[512];
  snprintf(csvp, sizeof csvp, "%s/metrics.csv", sub);
  FILE *f = fopen(csvp, "r");
  cr_assert_not_null(f);
  cr_assert_not_null(fgets(line, sizeof line, f));
  cr_assert_str_eq(line, "wall_time,step,tag,value\n");
  for (int k = 0; k < nw; k++) {
    cr_assert_not_null(fgets(line, sizeof line, f));
    double wall;
    long long step;
    int off = 0;
    cr_assert_eq(sscanf(line, "%lf,%lld,%n", &wall, &step, &off), 2, "%s", line);
    cr_assert_eq(step, want[k].step);
    const char *rest = line + off, *comma = strrchr(rest, ',');
    cr_assert_not_null(comma);
    cr_assert_eq(strtod(comma + 1, NULL), want[k].v, "csv value %s", comma + 1);  /* %.17g round-trips */
    if (k == 4) cr_assert(!strncmp(rest, "\"weird, \"\"tag\"\"\"", 16), "quoted tag: %s", rest);
    else cr_assert(!strncmp(rest, want[k].tag, strlen(want[k].tag)));
  }
  cr_assert_not_null(fgets(line, sizeof line, f));
  cr_assert(strstr(line, ",nan\n"));
  fclose(f);

  /* Reopening appends to the CSV without a second header, in a new event file. */
  m = loom_metrics_open(sub, NULL);
  cr_assert_not_null(m);
  cr_assert_str_neq(loom_metrics_event_path(m), evpath);
  cr_assert_eq(loom_metrics_scalar(m, "train/loss", 21, 0.5), LOOM_OK);
  cr_assert_eq(loom_metrics_close(m), LOOM_OK);
  f = fopen(csvp, "r");
  int headers = 0, rows = 0;
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "wall_time", 9)) headers++;
    else rows++;
  }
  fclose(f);
  cr_assert_eq(headers, 1);
  cr_assert_eq(rows, nw + 2);
  free(evpath);
  rm_dir(dir);
  free(dir);
  tk_leak_check();
}

Test(metrics, only_what_is_asked) {
  char *dir = tmp_dir("csvonly");
  loom_metrics_options o;
  loom_metrics_options_init(&o);
  o.tensorboard = false;
  loom_metrics *m = loom_metrics_open(dir, &o);
  cr_assert_not_null(m, "%s", loom_last_error());
  cr_assert_null(loom_metrics_event_path(m));
  cr_assert_eq(loom_metrics_scalar(m, "a", 1, 1.0), LOOM_OK);
  cr_assert_eq(loom_metrics_flush(m), LOOM_OK);
  cr_assert_eq(loom_metrics_close(m), LOOM_OK);
  rm_dir(dir);
  free(dir);
  tk_leak_check();
}

Test(metrics, errors) {
  tk_assert_error(loom_metrics_open(NULL, NULL) ? LOOM_OK : loom_last_status(), LOOM_ERR_INVALID_ARG, "logdir");
  /* a path through a regular file */
  char *dir = tmp_dir("err");
  char file[200], bad[260];
  cr_assert_eq(mkdir(dir, 0777), 0);
  snprintf(file, sizeof file, "%s/plain", dir);
  FILE *f = fopen(file, "w");
  cr_assert_not_null(f);
  fclose(f);
  cr_assert_null(loom_metrics_open(file, NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_IO, file, "not a directory");
  snprintf(bad, sizeof bad, "%s/sub", file);
  cr_assert_null(loom_metrics_open(bad, NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_IO, "cannot create the directory");
  loom_metrics_options o;
  memset(&o, 0, sizeof o);
  cr_assert_null(loom_metrics_open(dir, &o));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "struct_size");
  loom_metrics *m = loom_metrics_open(dir, NULL);
  cr_assert_not_null(m);
  tk_assert_error(loom_metrics_scalar(m, NULL, 0, 1), LOOM_ERR_INVALID_ARG, "tag");
  tk_assert_error(loom_metrics_scalar(m, "", 0, 1), LOOM_ERR_INVALID_ARG, "tag");
  tk_assert_error(loom_metrics_scalar(m, "a\nb", 0, 1), LOOM_ERR_INVALID_ARG, "control character");
  char longtag[700];
  memset(longtag, 'x', sizeof longtag - 1);
  longtag[sizeof longtag - 1] = 0;
  tk_assert_error(loom_metrics_scalar(m, longtag, 0, 1), LOOM_ERR_INVALID_ARG, "at most");
  tk_assert_error(loom_metrics_scalar(NULL, "a", 0, 1), LOOM_ERR_INVALID_ARG, "NULL");
  tk_assert_error(loom_metrics_flush(NULL), LOOM_ERR_INVALID_ARG, "NULL");
  cr_assert_eq(loom_metrics_close(m), LOOM_OK);
  cr_assert_eq(loom_metrics_close(NULL), LOOM_OK);
  rm_dir(dir);
  free(dir);
  tk_leak_check();
}

/* A full disk: writes fail with LOOM_ERR_IO naming the file, never silently. */
Test(metrics, write_error_is_reported) {
  if (access("/dev/full", W_OK) != 0) cr_skip_test("no /dev/full");
  char *dir = tmp_dir("full");
  cr_assert_eq(mkdir(dir, 0777), 0);
  char link[200];
  snprintf(link, sizeof link, "%s/metrics.csv", dir);
  cr_assert_eq(symlink("/dev/full", link), 0);
  loom_metrics_options o;
  loom_metrics_options_init(&o);
  o.tensorboard = false;
  loom_metrics *m = loom_metrics_open(dir, &o);
  if (m) {  /* the header write may already fail at open */
    loom_status st = LOOM_OK;
    for (int k = 0; k < 2000 && st == LOOM_OK; k++) st = loom_metrics_scalar(m, "train/loss", k, 1.0);
    if (st == LOOM_OK) st = loom_metrics_flush(m);
    tk_assert_error(st, LOOM_ERR_IO, "metrics.csv");
    tk_assert_error(loom_metrics_close(m), LOOM_ERR_IO, "metrics.csv");
  } else {
    tk_assert_error(loom_last_status(), LOOM_ERR_IO, "metrics.csv");
  }
  rm_dir(dir);
  free(dir);
  tk_leak_check();
}
