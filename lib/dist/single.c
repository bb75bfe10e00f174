/* single.c — the SINGLE back end: a world of one process. All-reduce and
 * broadcast leave the tensor as it is (the sum, average and max over one
 * rank are the tensor itself), all-gather copies, barrier returns. It lets
 * the same training code (loom_ddp included) run without a launcher. */
#include "dist/dist_internal.h"

static loom_status s_all_reduce(loom_comm *c, loom_tensor *t, loom_reduce_op op, loom_comm_times *times) {
  (void)c, (void)t, (void)op;
  if (times) times->start = times->end = loom_dist_now();
  return LOOM_OK;
}

static loom_status s_broadcast(loom_comm *c, loom_tensor *t, int root) {
  (void)c, (void)t, (void)root;
  return LOOM_OK;
}

static loom_status s_all_gather(loom_comm *c, loom_tensor *in, loom_tensor *out) {
  (void)c;
  if (loom_tensor_ptr(in) == loom_tensor_ptr(out)) return LOOM_OK;
  /* Flat views, since out may have another shape with the same count. */
  int64_t n = loom_shape_numel(in->ndim, in->shape);
  loom_tensor *fi = loom_tensor_view_raw(loom_tensor_ptr(in), in->dtype, 1, &n, in->storage->device);
  loom_tensor *fo = loom_tensor_view_raw(loom_tensor_ptr(out), out->dtype, 1, &n, out->storage->device);
  loom_status st = fi && fo ? loom_copy_(fo, fi) : loom_last_status();
  loom_tensor_release(fi);
  loom_tensor_release(fo);
  if (st == LOOM_OK) loom_tensor_bump_version(out);
  return st;
}

static loom_status s_noop(loom_comm *c) {
  (void)c;
  return LOOM_OK;
}

static void s_abort(loom_comm *c) { (void)c; }
static void s_destroy(loom_comm *c) { (void)c; }

static const loom_comm_ops single_ops = {s_all_reduce, s_broadcast, s_all_gather, s_noop, s_noop, s_noop, NULL, s_abort,
                                         s_destroy, NULL};

loom_status loom_single_comm_init(loom_device dev, double timeout_s, loom_comm **out) {
  loom_comm *c = loom_comm_alloc(LOOM_COMM_SINGLE, dev, timeout_s);
  if (!c) return loom_last_status();
  c->ops = &single_ops;
  c->rank = 0;
  c->size = 1;
  c->local_rank = 0;
  c->local_size = 1;
  unsigned char mask[LOOM_DIST_MASK_BYTES];
  c->default_threads = loom_dist_threads_for(loom_dist_affinity(mask, sizeof mask), 1);
  *out = c;
  return LOOM_OK;
}
