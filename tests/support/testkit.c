/* testkit.c — device parameterization, float64 reference helpers, closeness
 * and error assertions, and the finite-difference gradient checker shared by
 * the op, autograd and nn tests (see testkit.h). */
#include "support/testkit.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- devices ------------------------------------------------------------ */
void tk_require_device(loom_device dev) {
  if (dev.kind == LOOM_CPU) return;
  const char *env = getenv("LOOM_TEST_DEVICE");
  bool insist = env && strncmp(env, "cuda", 4) == 0;
  if (loom_device_count(LOOM_CUDA) > dev.index) return;
  const char *why = loom_cuda_unavailable_reason();
  if (!why) why = "the requested CUDA device index does not exist";
  if (insist) cr_assert_fail("LOOM_TEST_DEVICE=%s insists on a GPU but none is usable: %s", env, why);
  cr_skip_test("CUDA unavailable: %s", why);
}

#if defined(__SANITIZE_ADDRESS__)
#define TK_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TK_LSAN 1
#endif
#endif
#ifdef TK_LSAN
#include <sanitizer/lsan_interface.h>
void tk_leak_check(void) {
  cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer: this test leaked memory (report above)");
}
#else
void tk_leak_check(void) {}
#endif

void tk_teardown(void) {
  loom_status st = loom_shutdown();
  cr_assert_eq(st, LOOM_OK, "loom_shutdown at the end of the test: %s", loom_last_error());
  tk_leak_check();
}

/* ---- random data ---------------------------------------------------------- */
static uint64_t g_state = 0x9E3779B97F4A7C15ull;

void tk_seed(uint64_t s) { g_state = s * 0x9E3779B97F4A7C15ull + 1; }

static uint64_t next_u64(void) {
  /* splitmix64 */
  uint64_t z = (g_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double tk_uniform(double lo, double hi) { return lo + (hi - lo) * ((double)(next_u64() >> 11) * 0x1.0p-53); }

double tk_round(double v, loom_dtype dt) {
  switch (dt) {
    case LOOM_F32: return (float)v;
    case LOOM_F16: return loom_f16_to_f32(loom_f32_to_f16((float)v));
    case LOOM_BF16: return loom_bf16_to_f32(loom_f32_to_bf16((float)v));
    case LOOM_I32: return (double)(int32_t)v;
    case LOOM_I64: return (double)(int64_t)v;
    case LOOM_U8: return (double)(uint8_t)v;
  }
  return v;
}

int64_t tk_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

double *tk_rand_vals(int64_t n, double lo, double hi, double away, loom_dtype dt) {
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  cr_assert_not_null(v);
  for (int64_t i = 0; i < n; i++) {
    double x;
    do {
      x = tk_round(tk_uniform(lo, hi), dt);
    } while (away > 0 && fabs(x) < away);
    v[i] = x;
  }
  return v;
}

loom_tensor *tk_tensor(const double *vals, int ndim, const int64_t *shape, loom_dtype dt, loom_device dev) {
  int64_t n = tk_numel(ndim, shape);
  /* Build on the host in f64 -> exact dtype, then move to dev. */
  size_t es = loom_dtype_size(dt);
  unsigned char *buf = malloc((size_t)(n ? n : 1) * es);
  cr_assert_not_null(buf);
  for (int64_t i = 0; i < n; i++) {
    double v = vals[i];
    switch (dt) {
      case LOOM_F32: ((float *)buf)[i] = (float)v; break;
      case LOOM_F16: ((uint16_t *)buf)[i] = loom_f32_to_f16((float)v); break;
      case LOOM_BF16: ((uint16_t *)buf)[i] = loom_f32_to_bf16((float)v); break;
      case LOOM_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
      case LOOM_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
      case LOOM_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    }
  }
  loom_tensor *t = loom_from_host(buf, ndim, shape, dt, dev);
  free(buf);
  cr_assert_not_null(t, "tk_tensor: loom_from_host failed: %s", loom_last_error());
  return t;
}

loom_tensor *tk_rand_tensor(int ndim, const int64_t *shape, double lo, double hi, double away, loom_dtype dt,
                            loom_device dev, double **out_vals) {
  double *v = tk_rand_vals(tk_numel(ndim, shape), lo, hi, away, dt);
  loom_tensor *t = tk_tensor(v, ndim, shape, dt, dev);
  if (out_vals) *out_vals = v;
  else free(v);
  return t;
}

const char *tk_where = "";

double *tk_read(loom_tensor *t) {
  cr_assert_not_null(t, "%s%stk_read: NULL tensor (%s)", tk_where, *tk_where ? ": " : "", loom_last_error());
  int64_t n = loom_tensor_numel(t);
  double *out = malloc((size_t)(n ? n : 1) * sizeof *out);
  cr_assert_not_null(out);
  loom_dtype dt = loom_tensor_dtype(t);
  if (loom_dtype_is_float(dt)) {
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    loom_status st = loom_to_host(t, f, (size_t)n * sizeof *f, LOOM_F32);
    cr_assert_eq(st, LOOM_OK, "%s%stk_read: %s", tk_where, *tk_where ? ": " : "", loom_last_error());
    for (int64_t i = 0; i < n; i++) out[i] = f[i];
    free(f);
  } else {
    int64_t *q = malloc((size_t)(n ? n : 1) * sizeof *q);
    loom_status st = loom_to_host(t, q, (size_t)n * sizeof *q, LOOM_I64);
    cr_assert_eq(st, LOOM_OK, "%s%stk_read: %s", tk_where, *tk_where ? ": " : "", loom_last_error());
    for (int64_t i = 0; i < n; i++) out[i] = (double)q[i];
    free(q);
  }
  return out;
}

int64_t tk_bcast_index(int64_t i, int ond, const int64_t *osh, int nd, const int64_t *sh) {
  int64_t idx = 0, stride = 1;
  for (int d = ond - 1; d >= 0; d--) {
    int64_t c = i % osh[d];
    i /= osh[d];
    int td = d - (ond - nd);
    if (td >= 0) {
      if (sh[td] != 1) idx += c * stride;
      stride *= sh[td];
    }
  }
  return idx;
}

bool tk_bcast_shape(int na, const int64_t *sa, int nb, const int64_t *sb, int *nout, int64_t *out) {
  int n = na > nb ? na : nb;
  for (int i = 0; i < n; i++) {
    int ia = na - n + i, ib = nb - n + i;
    int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    out[i] = da == 1 ? db : da;
  }
  *nout = n;
  return true;
}

/* ---- comparison ------------------------------------------------------------ */
double tk_rtol(loom_dtype dt) {
  switch (dt) {
    case LOOM_F32: return 2e-6;
    case LOOM_F16: return 2.0 * 0x1p-11;  /* one ulp of a rounded result plus input rounding slack */
    case LOOM_BF16: return 2.0 * 0x1p-8;
    default: return 0;
  }
}

void tk_assert_close(const double *got, const double *want, int64_t n, double atol, double rtol, const char *what) {
  for (int64_t i = 0; i < n; i++) {
    double g = got[i], w = want[i];
    if (isnan(w) || isnan(g)) {
      cr_assert(isnan(w) && isnan(g), "%s: element %lld is %.9g, expected %.9g", what, (long long)i, g, w);
      continue;
    }
    if (isinf(w) || isinf(g)) {
      cr_assert(g == w, "%s: element %lld is %.9g, expected %.9g", what, (long long)i, g, w);
      continue;
    }
    cr_assert(fabs(g - w) <= atol + rtol * fabs(w), "%s: element %lld is %.9g, expected %.9g (|diff| %.3g > %.3g)", what,
              (long long)i, g, w, fabs(g - w), atol + rtol * fabs(w));
  }
}

void tk_assert_shape(loom_tensor *t, int ndim, const int64_t *shape, const char *what) {
  cr_assert_not_null(t, "%s: NULL result: %s", what, loom_last_error());
  cr_assert_eq(loom_tensor_ndim(t), ndim, "%s: ndim %d, expected %d", what, loom_tensor_ndim(t), ndim);
  for (int d = 0; d < ndim; d++)
    cr_assert_eq(loom_tensor_shape(t)[d], shape[d], "%s: dim %d is %lld, expected %lld", what, d,
                 (long long)loom_tensor_shape(t)[d], (long long)shape[d]);
}

void tk_assert_tensor(loom_tensor *t, int ndim, const int64_t *shape, loom_dtype dt, const double *want, double atol,
                      double rtol, const char *what) {
  tk_assert_shape(t, ndim, shape, what);
  cr_assert_eq(loom_tensor_dtype(t), dt, "%s: dtype %s, expected %s", what, loom_dtype_name(loom_tensor_dtype(t)),
               loom_dtype_name(dt));
  double *got = tk_read(t);
  tk_assert_close(got, want, tk_numel(ndim, shape), atol, rtol, what);
  free(got);
}

/* ---- errors ----------------------------------------------------------------- */
void tk_assert_error_(loom_status got, loom_status want, const char *file, int line, ...) {
  cr_assert_eq(got, want, "%s:%d: status %s, expected %s (message: \"%s\")", file, line, loom_status_name(got),
               loom_status_name(want), loom_last_error());
  cr_assert_eq(loom_last_status(), want, "%s:%d: loom_last_status() is %s, expected %s", file, line,
               loom_status_name(loom_last_status()), loom_status_name(want));
  const char *msg = loom_last_error();
  cr_assert(msg && msg[0], "%s:%d: empty error message", file, line);
  va_list ap;
  va_start(ap, line);
  for (const char *frag = va_arg(ap, const char *); frag; frag = va_arg(ap, const char *))
    cr_assert(strstr(msg, frag), "%s:%d: error message \"%s\" does not mention \"%s\"", file, line, msg, frag);
  va_end(ap);
}

/* ---- finite differences ------------------------------------------------------- */
/* Element i (row-major) of t becomes v, written through a one-element view
 * (t may have any layout; the rest of t is not rewritten). */
static void write_elem(loom_tensor *t, int64_t i, float v) {
  loom_scope_begin();
  bool prev = loom_set_grad_enabled(false);
  int nd = loom_tensor_ndim(t);
  const int64_t *shape = loom_tensor_shape(t);
  int64_t idx[LOOM_MAX_DIMS], ones[LOOM_MAX_DIMS];
  for (int d = nd - 1; d >= 0; d--) idx[d] = i % shape[d], i /= shape[d], ones[d] = 1;
  loom_tensor *e = t;
  for (int d = 0; d < nd; d++) e = loom_slice(e, d, idx[d], idx[d] + 1, 1);
  loom_tensor *src = loom_from_host(&v, nd, ones, LOOM_F32, loom_cpu());
  cr_assert_not_null(src);
  cr_assert_eq(loom_copy_(e, src), LOOM_OK, "gradcheck: copy_ failed: %s", loom_last_error());
  loom_set_grad_enabled(prev);
  loom_scope_end();
}

static double weighted_sum(tk_fn fn, void *ctx, loom_tensor **in, const double *r, int64_t ny) {
  loom_scope_begin();
  bool prev = loom_set_grad_enabled(false);
  loom_tensor *y = fn(in, ctx);
  loom_set_grad_enabled(prev);
  cr_assert_not_null(y, "gradcheck: forward failed: %s", loom_last_error());
  double *v = tk_read(y);
  double s = 0;
  for (int64_t i = 0; i < ny; i++) s += v[i] * r[i];
  free(v);
  loom_scope_end();
  return s;
}

void tk_gradcheck(tk_fn fn, void *ctx, loom_tensor **in, int n_in, double h, double atol, double rtol,
                  const char *what) {
  tk_gradcheck_sampled(fn, ctx, in, n_in, h, atol, rtol, 0, what);
}

/* The j-th element to check of an input of n (m of them checked). */
static int64_t coord(int64_t j, int64_t n, int64_t m) {
  if (m >= n) return j;
  if (j == 0) return 0;
  if (j == 1) return n - 1;
  return (int64_t)tk_uniform(0.0, (double)n) % n;
}

void tk_gradcheck_sampled(tk_fn fn, void *ctx, loom_tensor **in, int n_in, double h, double atol, double rtol,
                          int64_t max_coords, const char *what) {
  loom_scope_begin();
  for (int k = 0; k < n_in; k++)
    if (in[k]) loom_zero_grad(in[k]);
  loom_tensor *y = fn(in, ctx);
  cr_assert_not_null(y, "%s: forward failed: %s", what, loom_last_error());
  cr_assert(loom_requires_grad(y), "%s: output does not require grad", what);
  int64_t ny = loom_tensor_numel(y);
  double *r = tk_rand_vals(ny, -1.0, 1.0, 0.0, LOOM_F32);
  loom_tensor *rt = tk_tensor(r, loom_tensor_ndim(y), loom_tensor_shape(y), loom_tensor_dtype(y), loom_tensor_device(y));
  cr_assert_eq(loom_backward_with(y, rt), LOOM_OK, "%s: backward failed: %s", what, loom_last_error());
  for (int k = 0; k < n_in; k++) {
    if (!in[k] || !loom_requires_grad(in[k])) continue;
    cr_assert_eq(loom_tensor_dtype(in[k]), LOOM_F32, "%s: gradcheck needs f32 inputs", what);
    loom_tensor *g = loom_grad(in[k]);
    cr_assert_not_null(g, "%s: input %d got no gradient", what, k);
    tk_assert_shape(g, loom_tensor_ndim(in[k]), loom_tensor_shape(in[k]), what);
    double *ga = tk_read(g);
    double *x = tk_read(in[k]);
    int64_t n = loom_tensor_numel(in[k]);
    int64_t m = max_coords > 0 && max_coords < n ? max_coords : n;
    for (int64_t j = 0; j < m; j++) {
      int64_t i = coord(j, n, m);
      float xp = (float)(x[i] + h), xm = (float)(x[i] - h);
      write_elem(in[k], i, xp);
      double lp = weighted_sum(fn, ctx, in, r, ny);
      write_elem(in[k], i, xm);
      double lm = weighted_sum(fn, ctx, in, r, ny);
      write_elem(in[k], i, (float)x[i]);
      double num = (lp - lm) / ((double)xp - (double)xm);
      cr_assert(fabs(ga[i] - num) <= atol + rtol * fabs(num),
                "%s: d/d(input %d)[%lld]: analytic %.7g vs finite difference %.7g", what, k, (long long)i, ga[i], num);
    }
    free(x);
    free(ga);
  }
  free(r);
  loom_scope_end();
}

/* ---- files ------------------------------------------------------------- */

void tk_tmpdir(char *dir, size_t n, const char *prefix) {
  const char *base = getenv("TMPDIR");
  snprintf(dir, n, "%s/%s-XXXXXX", base && *base ? base : "/tmp", prefix);
  cr_assert_not_null(mkdtemp(dir), "mkdtemp %s", dir);
}

void tk_tmpdir_remove(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char p[4096];
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(dir);
}
