/* safetensors_read.c — open a safetensors file: read the 8-byte length and
 * the JSON header with pread, validate all of it (jansson parses; every rule
 * of the format is checked here), and only then map the file. Tensors are
 * zero-copy views of the private map on the CPU, or read through pinned
 * staging buffers to a GPU. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "device/device_internal.h"
#include "io/safetensors_internal.h"
#include "tensor/tensor_internal.h"
#include "core/sys.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; loom's reader assumes a little-endian host"
#endif

/* ---- the map ------------------------------------------------------------------ */

static void map_release(loom_st_map *m) {
  if (!m || atomic_fetch_sub(&m->refcount, 1) != 1) return;
  if (m->base) loom_sys_munmap(m->base, m->len);
  loom_sys_free(m);
}

/* Storage release callback of a tensor viewing the map. */
static void map_tensor_release(void *data, void *ctx) {
  (void)data;
  map_release(ctx);
}

/* ---- small helpers ------------------------------------------------------------- */

#if defined(LOOM_HAVE_JANSSON) || defined(LOOM_HAVE_CUDA) /* its only callers */
/* Read exactly n bytes at off; a short read means the file shrank. */
static loom_status pread_full(int fd, void *buf, size_t n, uint64_t off, const char *path) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = loom_sys_pread(fd, p, n, (off_t)off);
    if (r < 0) {
      if (errno == EINTR) continue;
      return loom_set_error(LOOM_ERR_IO, "safetensors '%s': read failed: %s", path, strerror(errno));
    }
    if (r == 0)
      return loom_set_error(LOOM_ERR_IO, "safetensors '%s': the file ended early (was it truncated while being read?)",
                            path);
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return LOOM_OK;
}
#endif

static void st_free(loom_safetensors *f) {
  if (!f) return;
  for (int i = 0; i < f->n; i++) loom_sys_free(f->e[i].name);
  for (int i = 0; i < f->n_meta; i++) {
    loom_sys_free(f->meta_keys[i]);
    loom_sys_free(f->meta_values[i]);
  }
  loom_sys_free(f->e);
  loom_sys_free(f->meta_keys);
  loom_sys_free(f->meta_values);
  if (f->fd >= 0) loom_sys_close(f->fd);
  map_release(f->map);
  loom_sys_free(f->path);
  loom_sys_free(f);
}

void loom_safetensors_close(loom_safetensors *f) { st_free(f); }

#ifdef LOOM_HAVE_JANSSON
#include <jansson.h>

/* LOOM_ERR_FORMAT naming the file. */
static loom_status bad(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static loom_status bad(const char *path, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return loom_set_error(LOOM_ERR_FORMAT, "safetensors '%s': %s (the file is damaged or not a safetensors file)", path,
                        msg);
}

static int cmp_entry(const void *a, const void *b) {
  const loom_st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static loom_status parse_metadata(loom_safetensors *f, json_t *meta) {
  if (!json_is_object(meta)) return bad(f->path, "__metadata__ is not an object of strings");
  size_t n = json_object_size(meta);
  f->meta_keys = loom_sys_calloc(n ? n : 1, sizeof *f->meta_keys);
  f->meta_values = loom_sys_calloc(n ? n : 1, sizeof *f->meta_values);
  if (!f->meta_keys || !f->meta_values) return loom_set_error(LOOM_ERR_OOM, "safetensors: out of host memory");
  const char *k;
  json_t *v;
  json_object_foreach(meta, k, v) {
    if (!json_is_string(v)) return bad(f->path, "__metadata__ entry '%s' is not a string", k);
    f->meta_keys[f->n_meta] = loom_sys_strdup(k);
    f->meta_values[f->n_meta] = loom_sys_strdup(json_string_value(v));
    f->n_meta++;
    if (!f->meta_keys[f->n_meta - 1] || !f->meta_values[f->n_meta - 1])
      return loom_set_error(LOOM_ERR_OOM, "safetensors: out of host memory");
  }
  return LOOM_OK;
}

/* A JSON integer >= 0 (reals such as 3.0 are refused). */
static int get_u64(json_t *v, uint64_t *out) {
  if (!json_is_integer(v)) return 0;
  json_int_t x = json_integer_value(v);
  if (x < 0) return 0;
  *out = (uint64_t)x;
  return 1;
}

static loom_status parse_entry(loom_safetensors *f, const char *name, json_t *v, uint64_t data_len, loom_st_entry *e) {
  if (!json_is_object(v)) return bad(f->path, "entry '%s' is not an object", name);
  json_t *dt = NULL, *shape = NULL, *offs = NULL;
  const char *k;
  json_t *x;
  json_object_foreach(v, k, x) {
    if (!strcmp(k, "dtype")) dt = x;
    else if (!strcmp(k, "shape")) shape = x;
    else if (!strcmp(k, "data_offsets")) offs = x;
    else return bad(f->path, "tensor '%s' has an unknown field '%s' (expected dtype, shape, data_offsets)", name, k);
  }
  if (!dt || !shape || !offs)
    return bad(f->path, "tensor '%s' lacks %s", name, !dt ? "its dtype" : !shape ? "its shape" : "its data_offsets");
  if (!json_is_string(dt)) return bad(f->path, "tensor '%s': dtype is not a string", name);
  e->dtype = loom_st_dtype_by_name(json_string_value(dt));
  if (!e->dtype) return bad(f->path, "tensor '%s': unknown dtype '%s'", name, json_string_value(dt));
  if (!json_is_array(shape)) return bad(f->path, "tensor '%s': shape is not an array", name);
  size_t rank = json_array_size(shape);
  if (rank > LOOM_ST_MAX_RANK) return bad(f->path, "tensor '%s' has %zu dimensions (at most %d)", name, rank, LOOM_ST_MAX_RANK);
  e->ndim = (int)rank;
  /* Byte count, refusing overflow; it must then equal the offsets' span. */
  uint64_t bytes = e->dtype->size;
  bool zero = false;
  for (size_t i = 0; i < rank; i++) {
    uint64_t d;
    if (!get_u64(json_array_get(shape, i), &d))
      return bad(f->path, "tensor '%s': shape[%zu] is not a non-negative integer", name, i);
    if (i < LOOM_MAX_DIMS) e->shape[i] = (int64_t)d;
    if (d == 0) zero = true;
    else if (!zero && bytes > UINT64_MAX / d)
      return bad(f->path, "tensor '%s': the byte count of its shape overflows 64 bits", name);
    else if (!zero) bytes *= d;
  }
  if (zero) bytes = 0;
  if (!json_is_array(offs) || json_array_size(offs) != 2 || !get_u64(json_array_get(offs, 0), &e->begin) ||
      !get_u64(json_array_get(offs, 1), &e->end))
    return bad(f->path, "tensor '%s': data_offsets is not [begin, end] of non-negative integers", name);
  if (e->begin > e->end)
    return bad(f->path, "tensor '%s': data_offsets [%llu, %llu] end before they begin", name,
               (unsigned long long)e->begin, (unsigned long long)e->end);
  if (e->end > data_len)
    return bad(f->path, "tensor '%s': data_offsets [%llu, %llu] run past the data section (%llu bytes)", name,
               (unsigned long long)e->begin, (unsigned long long)e->end, (unsigned long long)data_len);
  if (e->end - e->begin != bytes)
    return bad(f->path, "tensor '%s': %d-d %s of %llu bytes, but data_offsets [%llu, %llu] span %llu bytes", name,
               e->ndim, e->dtype->name, (unsigned long long)bytes, (unsigned long long)e->begin,
               (unsigned long long)e->end, (unsigned long long)(e->end - e->begin));
  e->name = loom_sys_strdup(name);
  if (!e->name) return loom_set_error(LOOM_ERR_OOM, "safetensors: out of host memory");
  return LOOM_OK;
}

/* Everything about the header; f->path and the sizes are set. */
static loom_status parse_header(loom_safetensors *f, const char *text, size_t len, uint64_t data_len) {
  json_error_t err;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    if (strstr(err.text, "duplicate"))
      return bad(f->path, "a name appears twice in the header (%s, at byte %d)", err.text, err.position);
    return bad(f->path, "the header is not valid JSON: %s (at byte %d)", err.text, err.position);
  }
  loom_status st = LOOM_OK;
  if (!json_is_object(root)) {
    st = bad(f->path, "the header is not a JSON object");
    goto out;
  }
  size_t n = json_object_size(root);
  f->e = loom_sys_calloc(n ? n : 1, sizeof *f->e);
  if (!f->e) {
    st = loom_set_error(LOOM_ERR_OOM, "safetensors: out of host memory");
    goto out;
  }
  const char *k;
  json_t *v;
  json_object_foreach(root, k, v) {
    if (!strcmp(k, "__metadata__")) st = parse_metadata(f, v);
    else {
      st = parse_entry(f, k, v, data_len, &f->e[f->n]);
      if (st == LOOM_OK) f->n++;
    }
    if (st != LOOM_OK) goto out;
  }
  /* Contiguous, non-overlapping, covering the data section exactly. */
  qsort(f->e, (size_t)f->n, sizeof *f->e, cmp_entry);
  uint64_t at = 0;
  for (int i = 0; i < f->n; i++) {
    const loom_st_entry *e = &f->e[i];
    if (e->begin < at) {
      st = bad(f->path, "tensor '%s' (bytes %llu..%llu) overlaps tensor '%s' (which ends at %llu)", e->name,
               (unsigned long long)e->begin, (unsigned long long)e->end, f->e[i - 1].name, (unsigned long long)at);
      goto out;
    }
    if (e->begin > at) {
      st = bad(f->path, "bytes %llu..%llu of the data section belong to no tensor (a gap before '%s')",
               (unsigned long long)at, (unsigned long long)e->begin, e->name);
      goto out;
    }
    at = e->end;
  }
  if (at != data_len)
    st = bad(f->path, "%llu trailing bytes after the last tensor (the data section is %llu bytes, tensors cover %llu)",
             (unsigned long long)(data_len - at), (unsigned long long)data_len, (unsigned long long)at);
out:
  json_decref(root);
  return st;
}

loom_safetensors *loom_safetensors_open(const char *path) {
  if (!path) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_safetensors_open: path is NULL");
    return NULL;
  }
  loom_safetensors *f = loom_sys_calloc(1, sizeof *f);
  char *header = NULL;
  if (!f || !(f->path = loom_sys_strdup(path))) {
    loom_sys_free(f);
    loom_set_error(LOOM_ERR_OOM, "safetensors: out of host memory");
    return NULL;
  }
  f->fd = loom_sys_open(path, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  loom_status st = LOOM_OK;
  if (f->fd < 0) {
    st = loom_set_error(LOOM_ERR_IO, "safetensors '%s': cannot open: %s", path, strerror(errno));
    goto fail;
  }
  if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    st = loom_set_error(LOOM_ERR_IO, "safetensors '%s': not a regular file", path);
    goto fail;
  }
  uint64_t size = (uint64_t)sb.st_size;
  if (size < 8) {
    st = bad(path, "the file is %llu bytes, shorter than the 8-byte header length", (unsigned long long)size);
    goto fail;
  }
  unsigned char lenb[8];
  if ((st = pread_full(f->fd, lenb, 8, 0, path)) != LOOM_OK) goto fail;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lenb[i];
  if (hlen > LOOM_ST_MAX_HEADER) {
    st = bad(path, "the header length %llu exceeds the format's limit of %llu bytes", (unsigned long long)hlen,
             (unsigned long long)LOOM_ST_MAX_HEADER);
    goto fail;
  }
  if (hlen > size - 8) {
    st = bad(path, "the header length %llu runs past the end of the file (%llu bytes)", (unsigned long long)hlen,
             (unsigned long long)size);
    goto fail;
  }
  header = loom_sys_malloc(hlen ? hlen : 1);
  if (!header) {
    st = loom_set_error(LOOM_ERR_OOM, "safetensors '%s': out of host memory for a %llu-byte header", path,
                        (unsigned long long)hlen);
    goto fail;
  }
  if ((st = pread_full(f->fd, header, hlen, 8, path)) != LOOM_OK) goto fail;
  f->data_start = 8 + hlen;
  if ((st = parse_header(f, header, hlen, size - f->data_start)) != LOOM_OK) goto fail;
  loom_sys_free(header);
  header = NULL;
  /* Valid: map it (private: writes to loaded tensors never reach the file). */
  f->map = loom_sys_calloc(1, sizeof *f->map);
  if (!f->map) {
    st = loom_set_error(LOOM_ERR_OOM, "safetensors: out of host memory");
    goto fail;
  }
  atomic_init(&f->map->refcount, 1);
  void *base = loom_sys_mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE, f->fd, 0);
  if (base == MAP_FAILED) {
    st = loom_set_error(LOOM_ERR_IO, "safetensors '%s': cannot map %llu bytes: %s", path, (unsigned long long)size,
                        strerror(errno));
    goto fail;
  }
  f->map->base = base;
  f->map->len = (size_t)size;
  return f;
fail:
  (void)st;
  loom_sys_free(header);
  st_free(f);
  return NULL;
}

#else  /* !LOOM_HAVE_JANSSON */

loom_safetensors *loom_safetensors_open(const char *path) {
  loom_set_error(LOOM_ERR_UNSUPPORTED,
                 "safetensors '%s': this loom was built without jansson; install libjansson-dev (Debian) and rebuild",
                 path ? path : "(null)");
  return NULL;
}

#endif

/* ---- queries ------------------------------------------------------------------ */

int loom_safetensors_num_tensors(const loom_safetensors *f) { return f ? f->n : 0; }

const char *loom_safetensors_name(const loom_safetensors *f, int i) {
  return (f && i >= 0 && i < f->n) ? f->e[i].name : NULL;
}

int loom_safetensors_find(const loom_safetensors *f, const char *name) {
  if (!f || !name) return -1;
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->e[i].name, name)) return i;
  return -1;
}

const char *loom_safetensors_dtype_name(const loom_safetensors *f, int i) {
  return (f && i >= 0 && i < f->n) ? f->e[i].dtype->name : NULL;
}

static loom_status entry_check(const loom_safetensors *f, int i, const char *fn) {
  if (!f) return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: file handle is NULL", fn);
  if (i < 0 || i >= f->n)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "%s: index %d is outside 0..%d of '%s'", fn, i, f->n - 1, f->path);
  const loom_st_entry *e = &f->e[i];
  if (e->dtype->loom < 0)
    return loom_set_error(LOOM_ERR_UNSUPPORTED,
                          "%s: tensor '%s' of '%s' is %s, which loom has no dtype for (it has F32, F16, BF16, I32, I64, "
                          "U8 and reads BOOL as U8); convert it before saving",
                          fn, e->name, f->path, e->dtype->name);
  if (e->ndim > LOOM_MAX_DIMS)
    return loom_set_error(LOOM_ERR_UNSUPPORTED, "%s: tensor '%s' of '%s' has %d dimensions; loom supports up to %d", fn,
                          e->name, f->path, e->ndim, LOOM_MAX_DIMS);
  return LOOM_OK;
}

loom_status loom_safetensors_info(const loom_safetensors *f, int i, loom_dtype *dtype, int *ndim, int64_t *shape) {
  LOOM_TRY(entry_check(f, i, "loom_safetensors_info"));
  const loom_st_entry *e = &f->e[i];
  if (dtype) *dtype = (loom_dtype)e->dtype->loom;
  if (ndim) *ndim = e->ndim;
  if (shape)
    for (int d = 0; d < e->ndim; d++) shape[d] = e->shape[d];
  return LOOM_OK;
}

int loom_safetensors_num_metadata(const loom_safetensors *f) { return f ? f->n_meta : 0; }

const char *loom_safetensors_metadata_key(const loom_safetensors *f, int i) {
  return (f && i >= 0 && i < f->n_meta) ? f->meta_keys[i] : NULL;
}

const char *loom_safetensors_metadata(const loom_safetensors *f, const char *key) {
  if (!f || !key) return NULL;
  for (int i = 0; i < f->n_meta; i++)
    if (!strcmp(f->meta_keys[i], key)) return f->meta_values[i];
  return NULL;
}

/* ---- loading a tensor ----------------------------------------------------------- */

#ifdef LOOM_HAVE_CUDA
/* Read the entry's bytes into t (contiguous, on a real GPU) through two
 * pinned staging buffers: the read of one chunk overlaps the copy of the
 * previous one. */
static loom_status read_to_cuda(loom_safetensors *f, const loom_st_entry *e, loom_tensor *t) {
  loom_device dev = t->storage->device;
  LOOM_TRY(loom_cuda_set_device(dev.index));
  loom_stream *s = loom_stream_current(dev);
  if (!s) return loom_last_status();
  cudaStream_t cs = (cudaStream_t)loom_stream_native(s);
  const size_t chunk = (size_t)8 << 20;
  size_t total = (size_t)(e->end - e->begin);
  void *stage[2] = {NULL, NULL};
  cudaEvent_t ev[2] = {NULL, NULL};
  bool pending[2] = {false, false};
  loom_status st = LOOM_OK;
  for (int k = 0; k < 2 && st == LOOM_OK; k++) {
    st = loom_alloc_pinned_malloc(chunk, &stage[k]);
    if (st == LOOM_OK) {
      cudaError_t ce = cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming);
      if (ce != cudaSuccess) st = loom_cuda_error(ce, "cudaEventCreateWithFlags", __FILE__, __LINE__);
    }
  }
  char *dst = loom_tensor_ptr(t);
  int k = 0;
  for (size_t off = 0; off < total && st == LOOM_OK; off += chunk, k ^= 1) {
    size_t len = total - off < chunk ? total - off : chunk;
    if (pending[k]) {
      cudaError_t ce = cudaEventSynchronize(ev[k]);
      if (ce != cudaSuccess) { st = loom_cuda_error(ce, "cudaEventSynchronize", __FILE__, __LINE__); break; }
    }
    st = pread_full(f->fd, stage[k], len, f->data_start + e->begin + off, f->path);
    if (st != LOOM_OK) break;
    cudaError_t ce = cudaMemcpyAsync(dst + off, stage[k], len, cudaMemcpyHostToDevice, cs);
    if (ce == cudaSuccess) ce = cudaEventRecord(ev[k], cs);
    if (ce != cudaSuccess) st = loom_cuda_error(ce, "cudaMemcpyAsync (safetensors load)", __FILE__, __LINE__);
    pending[k] = true;
  }
  /* The staging buffers are freed below: no copy may still read them. */
  cudaError_t ce = cudaStreamSynchronize(cs);
  if (ce != cudaSuccess && st == LOOM_OK) st = loom_cuda_error(ce, "cudaStreamSynchronize", __FILE__, __LINE__);
  for (int j = 0; j < 2; j++) {
    if (ev[j]) cudaEventDestroy(ev[j]);
    loom_alloc_pinned_free(stage[j]);
  }
  return st;
}
#endif

loom_tensor *loom_safetensors_get(loom_safetensors *f, const char *name, loom_device dev) {
  if (!f || !name) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "loom_safetensors_get: file and name must not be NULL");
    return NULL;
  }
  int i = loom_safetensors_find(f, name);
  if (i < 0) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "safetensors '%s' has no tensor '%s' (it has %d tensors%s%s%s)", f->path, name,
                   f->n, f->n ? ", e.g. '" : "", f->n ? f->e[0].name : "", f->n ? "'" : "");
    return NULL;
  }
  if (entry_check(f, i, "loom_safetensors_get") != LOOM_OK) return NULL;
  if (loom_device_check(dev) != LOOM_OK) return NULL;
  const loom_st_entry *e = &f->e[i];
  loom_dtype dt = (loom_dtype)e->dtype->loom;
  char *src = (char *)f->map->base + f->data_start + e->begin;
  size_t nbytes = (size_t)(e->end - e->begin);
  if (dev.kind == LOOM_CPU && (uintptr_t)src % loom_dtype_size(dt) == 0) {
    /* The caller is about to use these bytes: map them in now, in large
     * reads, rather than one page fault at a time when first touched (and
     * not in the middle of a training step). MADV_POPULATE_READ (Linux
     * 5.14+) faults the range in; older kernels get the readahead hint. */
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t first = (uintptr_t)src & ~(uintptr_t)(pg > 0 ? pg - 1 : 4095);
    size_t span = nbytes + ((uintptr_t)src - first);
    if (nbytes) {
      madvise((void *)first, span, MADV_WILLNEED);  /* large asynchronous reads of a cold file */
#ifdef MADV_POPULATE_READ
      madvise((void *)first, span, MADV_POPULATE_READ);
#endif
    }
    atomic_fetch_add(&f->map->refcount, 1);
    loom_tensor *t = loom_tensor_wrap(src, nbytes, dev, e->ndim, e->shape, dt, map_tensor_release, f->map);
    if (!t) map_release(f->map);  /* the wrap failed before taking its reference */
    return t;
  }
#ifdef LOOM_HAVE_CUDA
  if (dev.kind == LOOM_CUDA && loom_device_is_real_cuda(dev)) {
    loom_tensor *t = loom_tensor_alloc_raw(e->ndim, e->shape, dt, dev);
    if (!t) return NULL;
    if (read_to_cuda(f, e, t) != LOOM_OK) {
      loom_error_prefix("safetensors '%s', tensor '%s'", f->path, name);
      loom_tensor_release(t);
      return NULL;
    }
    return loom_tensor_adopt(t);
  }
#endif
  /* A misaligned CPU tensor (a foreign writer) or a device without a direct
   * path: an aligned host copy, moved to dev. */
  loom_tensor *h = loom_tensor_alloc_raw(e->ndim, e->shape, dt, loom_cpu());
  if (!h) return NULL;
  if (nbytes) memcpy(loom_tensor_ptr(h), src, nbytes);
  if (dev.kind == LOOM_CPU) return loom_tensor_adopt(h);
  loom_scope_begin();  /* retained out of a private scope: ours alone, whatever scopes are open */
  loom_tensor *t = loom_tensor_retain(loom_to_device(h, dev));
  loom_scope_end();
  loom_tensor_release(h);
  return t ? loom_tensor_adopt(t) : NULL;
}
