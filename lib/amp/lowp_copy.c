/* lowp_copy.c — the low-precision copies of f32 master weights under a
 * mixed precision policy: the link from a master to its copy, and making,
 * dropping and refreshing the copies of a parameter list (lib/nn's policy
 * hands amp the parameters of each module it applies to).
 *
 * The copy of a master is an f16/bf16 leaf tensor that requires grad, so the
 * tape sends the GEMM's low-precision gradient there; it is owned by the
 * master (tensor.user_tag, released with the master), so it lives exactly as
 * long as the parameter and needs no bookkeeping in the module. */
#include "amp/amp_internal.h"
#include "loom/autograd.h"
#include "loom/ops.h"

/* ---- master -> copy link ------------------------------------------------------ */

static void release_copy(void *copy) { loom_tensor_release(copy); }

loom_tensor *loom_amp_copy_of(const loom_tensor *master) {
  /* user_tag is only ours when our destructor is attached. */
  if (!master || master->user_tag_free != release_copy) return NULL;
  return master->user_tag;
}

loom_tensor *loom_amp_lowp_copy(const loom_tensor *master) { return loom_amp_copy_of(master); }

static void drop_copy(loom_tensor *master) {
  loom_tensor *c = loom_amp_copy_of(master);
  if (!c) return;
  master->user_tag = NULL;
  master->user_tag_free = NULL;
  loom_tensor_release(c);
}

/* Cast master into c (no autograd). */
static loom_status refresh(loom_tensor *c, loom_tensor *master) {
  bool prev = loom_set_grad_enabled(false);
  loom_status st = loom_copy_(c, master);
  loom_set_grad_enabled(prev);
  return st;
}

/* Give master a copy of dtype dt (reusing one that exists), up to date. */
static loom_status ensure_copy(loom_tensor *master, loom_dtype dt) {
  if (master->dtype != LOOM_F32 || !loom_tensor_is_contiguous(master))
    return loom_set_error(LOOM_ERR_DTYPE, "set_precision: parameters must be contiguous f32 masters, got %s",
                          loom_dtype_name(master->dtype));
  if (master->user_tag && !loom_amp_copy_of(master))
    return loom_set_error(LOOM_ERR_STATE, "set_precision: the parameter's user_tag is in use by another subsystem");
  loom_tensor *c = loom_amp_copy_of(master);
  if (c && c->dtype != dt) {
    drop_copy(master);
    c = NULL;
  }
  if (!c) {
    c = loom_tensor_alloc_raw(master->ndim, master->shape, dt, master->storage->device);
    if (!c) return loom_last_status();
    c->requires_grad = true;
    master->user_tag = c;
    master->user_tag_free = release_copy;
  }
  return refresh(c, master);
}

/* ---- parameter lists ------------------------------------------------------------ */

loom_status loom_amp_make_copies(loom_tensor *const *params, int n, loom_dtype dt) {
  for (int i = 0; i < n; i++) LOOM_TRY(ensure_copy(params[i], dt));
  return LOOM_OK;
}

void loom_amp_drop_copies(loom_tensor *const *params, int n) {
  for (int i = 0; i < n; i++) drop_copy(params[i]);
}

loom_status loom_amp_refresh_copies(loom_tensor *const *params, int n) {
  for (int i = 0; i < n; i++) {
    loom_tensor *c = loom_amp_copy_of(params[i]);
    if (c) LOOM_TRY(refresh(c, params[i]));
  }
  return LOOM_OK;
}
