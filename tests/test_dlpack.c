/* test_dlpack.c — DLPack exchange (lib/io/dlpack.c): exported tensors
 * describe loom's memory exactly (pointer, dtype, shape, strides, device) and
 * keep it alive until their deleter runs; imported tensors view the
 * producer's memory without a copy, honour strides and byte_offset, and call
 * the producer's deleter exactly once — when the last view dies, or at once
 * on every failure. Run under ASan, a missed or doubled deleter shows up as a
 * leak or a double free as well as in the counters. */
#include <stdlib.h>
#include <string.h>

#include "io/dlpack_abi.h"
#include "support/testkit.h"

/* ---- a foreign producer -------------------------------------------------------- */

static int g_deleted;

typedef struct producer {
  DLManagedTensor m;
  DLManagedTensorVersioned v;
  int64_t shape[LOOM_MAX_DIMS], strides[LOOM_MAX_DIMS];
  void *data;
} producer;

static void producer_free(producer *p) {
  free(p->data);
  free(p);
  g_deleted++;
}
static void legacy_del(DLManagedTensor *m) { producer_free(m->manager_ctx); }
static void versioned_del(DLManagedTensorVersioned *m) { producer_free(m->manager_ctx); }

/* A producer tensor over `bytes` fresh bytes holding 0, 1, 2, ... as dtype. */
static producer *make_producer(int ndim, const int64_t *shape, const int64_t *strides, DLDataType dt, size_t bytes) {
  producer *p = calloc(1, sizeof *p);
  p->data = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  memset(p->data, 0, bytes);
  for (int d = 0; d < ndim; d++) {
    p->shape[d] = shape[d];
    if (strides) p->strides[d] = strides[d];
  }
  DLTensor t = {p->data, {LOOM_DL_CPU, 0}, ndim, dt, p->shape, strides ? p->strides : NULL, 0};
  p->m.dl_tensor = t;
  p->m.manager_ctx = p;
  p->m.deleter = legacy_del;
  p->v.version.major = 1;
  p->v.version.minor = 0;
  p->v.manager_ctx = p;
  p->v.deleter = versioned_del;
  p->v.dl_tensor = t;
  return p;
}

static const DLDataType F32 = {LOOM_DL_FLOAT, 32, 1};

/* ---- export ---------------------------------------------------------------------- */

DEVICE_TEST(dlpack, export_describes_the_tensor_and_keeps_it_alive) {
  int64_t shape[2] = {3, 4};
  loom_tensor *t = loom_view(loom_arange(0, 12, 1, LOOM_F32, dev), 2, shape);
  loom_tensor *base = loom_keep(loom_transpose(t, 0, 1)); /* ours: [4, 3], strides [1, 4] */
  DLManagedTensor *m = loom_to_dlpack(base);
  cr_assert_not_null(m, "%s", loom_last_error());
  DLTensor *d = &m->dl_tensor;
  cr_assert_eq(d->data, loom_tensor_data(base), "no copy: the pointer is loom's");
  cr_assert_eq(d->byte_offset, 0);
  cr_assert_eq(d->ndim, 2);
  cr_assert(d->shape[0] == 4 && d->shape[1] == 3);
  cr_assert(d->strides[0] == 1 && d->strides[1] == 4);
  cr_assert(d->dtype.code == LOOM_DL_FLOAT && d->dtype.bits == 32 && d->dtype.lanes == 1);
  int32_t ty, id;
  cr_assert_eq(loom_dlpack_device(base, &ty, &id), LOOM_OK);
  cr_assert_eq((int)d->device.device_type, ty);
  cr_assert_eq(d->device.device_id, id);
  cr_assert_eq(ty, dev.kind == LOOM_CPU ? LOOM_DL_CPU : LOOM_DL_CUDA);
  /* loom lets go of its tensors; the export still owns the memory. */
  loom_tensor_release(base);
  if (dev.kind == LOOM_CPU) {
    float *f = d->data;
    cr_assert_eq(f[1], 1.0f);  /* element [1, 0] of the transpose: strides [1, 4] */
    cr_assert_eq(f[4 * 2 + 3], 11.0f);
  }
  m->deleter(m);
  /* The versioned form. */
  DLManagedTensorVersioned *v = loom_to_dlpack_versioned(t);
  cr_assert_not_null(v, "%s", loom_last_error());
  cr_assert_eq(v->version.major, 1);
  cr_assert_eq(v->flags, 0);
  cr_assert_eq(v->dl_tensor.data, loom_tensor_data(t));
  cr_assert(v->dl_tensor.strides[0] == 4 && v->dl_tensor.strides[1] == 1);
  v->deleter(v);
}

DEVICE_TEST(dlpack, every_dtype_round_trips_without_a_copy) {
  const loom_dtype dts[6] = {LOOM_F32, LOOM_F16, LOOM_BF16, LOOM_I32, LOOM_I64, LOOM_U8};
  const DLDataType want[6] = {{LOOM_DL_FLOAT, 32, 1}, {LOOM_DL_FLOAT, 16, 1}, {LOOM_DL_BFLOAT, 16, 1},
                              {LOOM_DL_INT, 32, 1},   {LOOM_DL_INT, 64, 1},   {LOOM_DL_UINT, 8, 1}};
  for (int k = 0; k < 6; k++) {
    for (int versioned = 0; versioned < 2; versioned++) {
      int64_t shape[3] = {2, 3, 5};
      loom_tensor *t = loom_arange(0, 30, 1, dts[k], dev);
      t = loom_reshape(t, 3, shape);
      loom_tensor *back;
      if (versioned) {
        DLManagedTensorVersioned *v = loom_to_dlpack_versioned(t);
        cr_assert_not_null(v);
        cr_assert(v->dl_tensor.dtype.code == want[k].code && v->dl_tensor.dtype.bits == want[k].bits);
        back = loom_from_dlpack_versioned(v);
      } else {
        DLManagedTensor *m = loom_to_dlpack(t);
        cr_assert_not_null(m);
        cr_assert(m->dl_tensor.dtype.code == want[k].code && m->dl_tensor.dtype.bits == want[k].bits);
        back = loom_from_dlpack(m);
      }
      cr_assert_not_null(back, "%s: %s", loom_dtype_name(dts[k]), loom_last_error());
      cr_assert_eq(loom_tensor_data(back), loom_tensor_data(t), "%s: zero copy", loom_dtype_name(dts[k]));
      cr_assert_eq(loom_tensor_dtype(back), dts[k]);
      cr_assert(loom_device_eq(loom_tensor_device(back), dev));
      cr_assert_eq(loom_tensor_ndim(back), 3);
      double *a = tk_read(back), *b = tk_read(t);
      for (int i = 0; i < 30; i++) cr_assert_eq(a[i], b[i]);
      free(a), free(b);
    }
  }
}

/* ---- import from a foreign producer ------------------------------------------------- */

Test(dlpack, import_is_zero_copy_and_deletes_once_when_the_last_view_dies) {
  g_deleted = 0;
  int64_t shape[2] = {3, 4};
  producer *p = make_producer(2, shape, NULL, F32, 12 * sizeof(float));
  float *src = p->data;
  for (int i = 0; i < 12; i++) src[i] = (float)i;
  loom_tensor *t = loom_from_dlpack(&p->m);  /* outside a scope: ours */
  cr_assert_not_null(t, "%s", loom_last_error());
  cr_assert_eq(loom_tensor_data(t), (void *)src);
  loom_tensor *tr = loom_transpose(t, 0, 1);   /* a view shares the storage */
  loom_tensor *sum = loom_sum_all(t);          /* an op result does not */
  loom_tensor_release(t);
  cr_assert_eq(g_deleted, 0, "a view is still alive");
  src[5] = 100.0f;                             /* the producer's writes are seen */
  double v;
  loom_scope_begin();
  cr_assert_eq(loom_item(loom_slice(loom_slice(tr, 0, 1, 2, 1), 1, 1, 2, 1), &v), LOOM_OK);
  loom_scope_end();
  cr_assert_eq(v, 100.0);
  loom_tensor_release(tr);
  cr_assert_eq(g_deleted, 1, "the deleter runs when the last view dies");
  cr_assert_eq(loom_item(sum, &v), LOOM_OK);
  cr_assert_eq(v, 66.0);
  loom_tensor_release(sum);
  cr_assert_eq(g_deleted, 1, "exactly once");
  tk_leak_check();
}

Test(dlpack, import_in_a_scope_deletes_at_scope_end) {
  g_deleted = 0;
  int64_t shape[1] = {8};
  producer *p = make_producer(1, shape, NULL, F32, 8 * sizeof(float));
  loom_scope_begin();
  loom_tensor *t = loom_from_dlpack_versioned(&p->v);
  cr_assert_not_null(t, "%s", loom_last_error());
  cr_assert_eq(loom_tensor_data(t), p->data);
  loom_scope_end();
  cr_assert_eq(g_deleted, 1);
  tk_leak_check();
}

Test(dlpack, strides_and_byte_offset_are_honoured) {
  g_deleted = 0;
  /* A [3, 2] view with strides [4, 2] into 12 floats, starting at element 1. */
  int64_t shape[2] = {3, 2}, strides[2] = {4, 2};
  producer *p = make_producer(2, shape, strides, F32, 16 * sizeof(float));
  float *src = p->data;
  for (int i = 0; i < 16; i++) src[i] = (float)i;
  p->m.dl_tensor.byte_offset = sizeof(float);
  loom_scope_begin();
  loom_tensor *t = loom_from_dlpack(&p->m);
  cr_assert_not_null(t, "%s", loom_last_error());
  cr_assert_eq(loom_tensor_data(t), (void *)(src + 1));
  cr_assert(loom_tensor_strides(t)[0] == 4 && loom_tensor_strides(t)[1] == 2);
  double *v = tk_read(t);
  const double want[6] = {1, 3, 5, 7, 9, 11};
  for (int i = 0; i < 6; i++) cr_assert_eq(v[i], want[i], "element %d", i);
  free(v);
  loom_scope_end();
  cr_assert_eq(g_deleted, 1);
  /* Stride 0 (a broadcast) is a valid DLPack layout too. */
  int64_t bshape[2] = {3, 4}, bstrides[2] = {0, 1};
  p = make_producer(2, bshape, bstrides, F32, 4 * sizeof(float));
  for (int i = 0; i < 4; i++) ((float *)p->data)[i] = (float)(i + 1);
  loom_scope_begin();
  double s;
  cr_assert_eq(loom_item(loom_sum_all(loom_from_dlpack(&p->m)), &s), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(s, 30.0);
  loom_scope_end();
  cr_assert_eq(g_deleted, 2);
  tk_leak_check();
}

Test(dlpack, bool_imports_as_u8) {
  g_deleted = 0;
  int64_t shape[1] = {3};
  DLDataType b = {LOOM_DL_BOOL, 8, 1};
  producer *p = make_producer(1, shape, NULL, b, 3);
  ((unsigned char *)p->data)[1] = 1;
  loom_scope_begin();
  loom_tensor *t = loom_from_dlpack(&p->m);
  cr_assert_not_null(t, "%s", loom_last_error());
  cr_assert_eq(loom_tensor_dtype(t), LOOM_U8);
  loom_scope_end();
  cr_assert_eq(g_deleted, 1);
  tk_leak_check();
}

Test(dlpack, read_only_versioned_tensors_are_copied_and_released_at_once) {
  g_deleted = 0;
  int64_t shape[1] = {4};
  producer *p = make_producer(1, shape, NULL, F32, 4 * sizeof(float));
  for (int i = 0; i < 4; i++) ((float *)p->data)[i] = (float)(i * i);
  p->v.flags = LOOM_DL_FLAG_READ_ONLY;
  void *theirs = p->data;
  loom_scope_begin();
  loom_tensor *t = loom_from_dlpack_versioned(&p->v);
  cr_assert_not_null(t, "%s", loom_last_error());
  cr_assert_eq(g_deleted, 1, "the producer's memory is let go as soon as it is copied");
  cr_assert_neq(loom_tensor_data(t), theirs);
  double *v = tk_read(t);
  for (int i = 0; i < 4; i++) cr_assert_eq(v[i], (double)(i * i));
  free(v);
  loom_scope_end();
  tk_leak_check();
}

/* Every refusal calls the deleter exactly once and says why. */
Test(dlpack, failures_still_call_the_deleter_once) {
  int64_t shape[2] = {2, 2};
  struct {
    const char *what, *frag;
    loom_status code;
  } cases[] = {
      {"f64", "no loom dtype", LOOM_ERR_UNSUPPORTED},
      {"lanes", "no loom dtype", LOOM_ERR_UNSUPPORTED},
      {"negative stride", "negative stride", LOOM_ERR_UNSUPPORTED},
      {"misaligned", "not aligned", LOOM_ERR_UNSUPPORTED},
      {"device", "device type 4", LOOM_ERR_UNSUPPORTED},
      {"cuda", "CUDA device 0", LOOM_ERR_DEVICE},
      {"ndim", "9 dimensions", LOOM_ERR_UNSUPPORTED},
      {"major", "major version 2", LOOM_ERR_UNSUPPORTED},
      {"null data", "data is NULL", LOOM_ERR_INVALID_ARG},
      {"unmapped data", "not mapped", LOOM_ERR_INVALID_ARG},
      {"strides past the buffer", "not mapped", LOOM_ERR_INVALID_ARG},
      {"2^80 elements", "too many elements", LOOM_ERR_SHAPE},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    g_deleted = 0;
    int64_t strides[2] = {2, 1};
    producer *p = make_producer(2, shape, strides, F32, 64);
    DLTensor *d = &p->m.dl_tensor;
    const char *w = cases[c].what;
    if (!strcmp(w, "f64")) d->dtype.bits = 64;
    if (!strcmp(w, "lanes")) d->dtype.lanes = 4;
    if (!strcmp(w, "negative stride")) p->strides[0] = -2;
    if (!strcmp(w, "misaligned")) d->byte_offset = 2;
    if (!strcmp(w, "device")) d->device.device_type = 4;  /* OpenCL */
    if (!strcmp(w, "cuda")) d->device.device_type = LOOM_DL_CUDA;
    if (!strcmp(w, "ndim")) d->ndim = 9;
    if (!strcmp(w, "null data")) d->data = NULL;
    if (!strcmp(w, "unmapped data")) d->data = (void *)(uintptr_t)4096;  /* page 1: never mapped */
    if (!strcmp(w, "strides past the buffer")) p->strides[0] = (int64_t)1 << 40;  /* 4 TiB on */
    if (!strcmp(w, "2^80 elements")) {
      p->shape[0] = p->shape[1] = (int64_t)1 << 40;
      p->strides[0] = p->strides[1] = 0;
    }
    loom_tensor *t;
    if (!strcmp(w, "major")) {
      p->v.version.major = 2;
      p->v.dl_tensor.data = (void *)0x1;  /* must not be touched */
      t = loom_from_dlpack_versioned(&p->v);
    } else {
      t = loom_from_dlpack(&p->m);
    }
    cr_assert_null(t, "%s: accepted", w);
    loom_status code = cases[c].code;
    /* Host memory labelled CUDA: without a GPU loom does not see device 0;
     * with one, device 0 exists but CUDA does not know the address. */
    if (!strcmp(w, "cuda") && loom_device_count(LOOM_CUDA) > 0) code = LOOM_ERR_INVALID_ARG;
    tk_assert_error(loom_last_status(), code, cases[c].frag);
    cr_assert_eq(g_deleted, 1, "%s: deleter ran %d times", w, g_deleted);
  }
  cr_assert_null(loom_from_dlpack(NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_INVALID_ARG, "NULL");
  loom_clear_error();
  cr_assert_null(loom_to_dlpack(NULL));
  tk_assert_error(loom_last_status(), LOOM_ERR_NULL_INPUT, "NULL");
  tk_leak_check();
}

Test(dlpack, stream_sync_on_the_cpu_is_a_no_op) {
  cr_assert_eq(loom_dlpack_sync_stream(loom_cpu(), 1), LOOM_OK);
  cr_assert_eq(loom_dlpack_sync_stream(loom_cpu(), -1), LOOM_OK);
  tk_leak_check();
}

/* On a GPU: the CUDA side of the protocol (device ids, stream hand-off). */
DEVICE_TEST(dlpack, device_stream_hand_off) {
  loom_tensor *t = loom_ones(1, (int64_t[]){16}, LOOM_F32, dev);
  cr_assert_eq(loom_dlpack_sync_stream(dev, 1), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_dlpack_sync_stream(dev, 2), LOOM_OK, "%s", loom_last_error());
  cr_assert_eq(loom_dlpack_sync_stream(dev, -1), LOOM_OK);
  DLManagedTensor *m = loom_to_dlpack(t);
  cr_assert_not_null(m);
  loom_tensor *back = loom_from_dlpack(m);
  cr_assert_not_null(back, "%s", loom_last_error());
  cr_assert(loom_device_eq(loom_tensor_device(back), dev));
  double s;
  cr_assert_eq(loom_item(loom_sum_all(back), &s), LOOM_OK);
  cr_assert_eq(s, 16.0);
}
