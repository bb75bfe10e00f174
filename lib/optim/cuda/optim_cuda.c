/* optim_cuda.c — the C side of the fused multi-tensor SGD / AdamW steps on
 * the GPU (device code: optim.cu) and the device-resident state they keep:
 *  - the parameter table (pointers, sizes, chunk map), kept in device memory
 *    and re-uploaded only when it changes (dev_table.c), not copied from
 *    pageable memory every step; the gradients, new tensors every step, are
 *    not in it but go by value in the launch (optim_launch.h), so a warm
 *    training loop never uploads it again and a captured graph keeps the
 *    gradients of its own step whatever eager steps do in between;
 *  - each parameter's update count and the optimizer's step count, on the
 *    device, so SGD's first step and AdamW's bias corrections come from
 *    there — a step the loss scaler skips on the GPU is simply not counted,
 *    without the host ever learning of it during the step;
 *  - AdamW's bias corrections 1 - beta^t, tabulated once by the host with
 *    the CPU's exact expression (float)(1.0 - pow(beta, t)) up to where both
 *    reach 1.0f (capped; beyond, the device computes the same expression),
 *    so the GPU update stays bit-identical to the CPU's. */
#ifdef LOOM_HAVE_CUDA
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "device/sync_stats.h"
#include "loom/graph.h"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/dev_table.h"
#include "optim/cuda/optim_launch.h"
#include "optim/optim_kernels.h"
#include "core/sys.h"

#define BC_TABLE_MAX ((int64_t)1 << 20)

struct loom_opt_cuda {
  loom_device dev;
  int n_params;
  int64_t *counts;        /* device: [n_params] per parameter, the step count, the schedule position */
  float *bc;              /* device: bc1[bc_len] then bc2[bc_len] (AdamW), else NULL */
  int64_t bc_len;
  double beta1, beta2;
  loom_dev_table *table;
  loom_cu_opt_tensor *host_tab;  /* scratch: this step's table */
  const float **host_grads;      /* scratch: this step's gradients, in table order */
  int host_cap;
};

void loom_cuda_opt_free(loom_opt_cuda *s) {
  if (!s) return;
  loom_alloc_free(s->dev, s->counts);
  loom_alloc_free(s->dev, s->bc);
  loom_dev_table_free(s->table);
  loom_sys_free(s->host_tab);
  loom_sys_free((void *)s->host_grads);
  loom_sys_free(s);
}

int64_t loom_cuda_opt_table_uploads(const loom_opt_cuda *s) { return s ? loom_dev_table_uploads(s->table) : 0; }

/* Upload n bytes from a temporary host buffer (staged before returning). */
static loom_status upload(loom_cuda_ctx *c, void *dst, const void *src, size_t n, const char *what) {
  cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream);
  if (e != cudaSuccess) return loom_cuda_error(e, what, __FILE__, __LINE__);
  return LOOM_OK;
}

static loom_status state_new(loom_cuda_ctx *c, const loom_opt_cuda_args *a, bool adamw, loom_opt_cuda **out) {
  /* The counts and corrections are uploaded from host memory once; inside a
   * capture that upload would only be recorded (never run now, and run
   * again at every replay), so the first step must be eager. */
  if (loom_graph_capturing())
    return loom_set_error(LOOM_ERR_STATE, "optimizer step: the first step of an optimizer on cuda:%d cannot be "
                          "captured (it uploads the optimizer's device state); take one step before "
                          "loom_graph_capture_begin", c->dev.index);
  loom_opt_cuda *s = loom_sys_calloc(1, sizeof *s);
  if (!s) return loom_set_error(LOOM_ERR_OOM, "optimizer step: out of host memory");
  s->dev = c->dev;
  s->n_params = a->n_params;
  s->beta1 = a->beta1;
  s->beta2 = a->beta2;
  loom_stream *ls = loom_stream_current(c->dev);
  loom_status st = ls ? LOOM_OK : loom_last_status();
  size_t cbytes = (size_t)(a->n_params + 2) * sizeof(int64_t);
  int64_t *hc = loom_sys_malloc(cbytes);
  float *hb = NULL;
  if (!hc) st = loom_set_error(LOOM_ERR_OOM, "optimizer step: out of host memory");
  if (st == LOOM_OK) {
    for (int i = 0; i < a->n_params; i++) hc[i] = a->host_counts ? a->host_counts[i] : 0;
    hc[a->n_params] = a->host_steps;
    hc[a->n_params + 1] = a->sched_step;
    st = loom_alloc_malloc_uncaptured(c->dev, cbytes, ls, (void **)&s->counts);
  }
  if (st == LOOM_OK) st = upload(c, s->counts, hc, cbytes, "cudaMemcpyAsync(optimizer counts)");
  if (st == LOOM_OK && adamw) {
    /* Until both corrections are exactly 1.0f (t ~ 17k for beta2 = 0.999). */
    int64_t len = 1;
    while (len < BC_TABLE_MAX && ((float)(1.0 - pow(a->beta1, (double)len)) != 1.0f ||
                                  (float)(1.0 - pow(a->beta2, (double)len)) != 1.0f))
      len++;
    s->bc_len = len;
    hb = loom_sys_malloc((size_t)(2 * len) * sizeof *hb);
    if (!hb) st = loom_set_error(LOOM_ERR_OOM, "optimizer step: out of host memory");
    for (int64_t t = 1; st == LOOM_OK && t <= len; t++) {
      /* Exactly adamw.c's CPU update expression (adamw_cpu). */
      hb[t - 1] = (float)(1.0 - pow(a->beta1, (double)t));
      hb[len + t - 1] = (float)(1.0 - pow(a->beta2, (double)t));
    }
    if (st == LOOM_OK)
      st = loom_alloc_malloc_uncaptured(c->dev, (size_t)(2 * len) * sizeof *hb, ls, (void **)&s->bc);
    if (st == LOOM_OK) st = upload(c, s->bc, hb, (size_t)(2 * len) * sizeof *hb, "cudaMemcpyAsync(bias corrections)");
  }
  loom_sys_free(hc);
  loom_sys_free(hb);
  if (st != LOOM_OK) {
    loom_cuda_opt_free(s);
    return st;
  }
  *out = s;
  return LOOM_OK;
}

loom_status loom_cuda_opt_counts(loom_opt_cuda *s, int64_t *counts, int64_t *steps) {
  if (!s) return loom_set_error(LOOM_ERR_STATE, "optimizer: no device state yet");
  loom_cuda_ctx *c = loom_cuda_ctx_get(s->dev);
  if (!c) return loom_last_status();
  size_t n = (size_t)(s->n_params + 1);
  int64_t *h = loom_sys_malloc(n * sizeof *h);
  if (!h) return loom_set_error(LOOM_ERR_OOM, "optimizer: out of host memory");
  loom_sync_count(LOOM_SYNC_D2H);
  cudaError_t e = cudaMemcpyAsync(h, s->counts, n * sizeof *h, cudaMemcpyDeviceToHost, c->stream);
  if (e == cudaSuccess) {
    loom_sync_count(LOOM_SYNC_STREAM);
    e = cudaStreamSynchronize(c->stream);
  }
  if (e != cudaSuccess) {
    loom_sys_free(h);
    return loom_cuda_error(e, "reading the optimizer's step counts", __FILE__, __LINE__);
  }
  if (counts) memcpy(counts, h, (size_t)s->n_params * sizeof *h);
  if (steps) *steps = h[s->n_params];
  loom_sys_free(h);
  return LOOM_OK;
}

static loom_status optim_step(loom_device dev, const loom_param_group *g, loom_cu_opt_hparams h,
                              const loom_opt_cuda_args *a) {
  /* Group hyper-parameters by value (group 0 = h's when no groups are given). */
  if (a->group_of && (a->n_groups < 1 || a->n_groups > LOOM_CU_OPT_MAX_GROUPS))
    return loom_set_error(LOOM_ERR_INTERNAL, "optimizer step: %d parameter groups (1..%d on CUDA)", a->n_groups,
                          LOOM_CU_OPT_MAX_GROUPS);
  h.group_lr[0] = h.lr, h.group_wd[0] = h.weight_decay;
  for (int k = 0; a->group_of && k < a->n_groups; k++) h.group_lr[k] = a->group_lr[k], h.group_wd[k] = a->group_wd[k];
  loom_cuda_ctx *c = loom_cuda_ctx_get(dev);
  if (!c) return loom_last_status();
  bool fresh = !*a->state;
  if (fresh) LOOM_TRY(state_new(c, a, h.kind == 1, a->state));
  loom_opt_cuda *s = *a->state;
  if (a->sched && a->sched_reseed && !fresh) {
    /* Not while capturing: the position would be re-set at every replay. */
    if (loom_graph_capturing())
      return loom_set_error(LOOM_ERR_STATE, "optimizer step: loom_optimizer_set_schedule was called since the last "
                            "step; take one step outside the graph capture first");
    LOOM_TRY(upload(c, s->counts + s->n_params + 1, &a->sched_step, sizeof a->sched_step,
                    "cudaMemcpyAsync(schedule position)"));
  }
  if (g->n > s->host_cap) {
    loom_cu_opt_tensor *nt = loom_sys_realloc(s->host_tab, (size_t)g->n * sizeof *nt);
    if (nt) s->host_tab = nt;
    const float **ng = nt ? loom_sys_realloc((void *)s->host_grads, (size_t)g->n * sizeof *ng) : NULL;
    if (!ng) return loom_set_error(LOOM_ERR_OOM, "optimizer step: out of host memory");
    s->host_grads = ng;
    s->host_cap = g->n;
  }
  loom_cu_opt_tensor *host = s->host_tab;
  int64_t chunks = 0;
  for (int i = 0; i < g->n; i++) {
    if (h.kind == 1 && (!g->buf1 || !g->buf2 || !g->buf1[i] || !g->buf2[i]))
      return loom_set_error(LOOM_ERR_INTERNAL, "AdamW step: parameter %d has no state buffers", a->param_index[i]);
    memset(&host[i], 0, sizeof host[i]);  /* padding too: the table is compared bytewise */
    host[i].param = g->param[i];
    s->host_grads[i] = g->grad[i];
    host[i].buf1 = g->buf1 ? g->buf1[i] : NULL;
    host[i].buf2 = g->buf2 ? g->buf2[i] : NULL;
    host[i].lowp = g->lowp ? g->lowp[i] : NULL;
    host[i].numel = g->numel[i];
    host[i].first_chunk = chunks;
    host[i].pidx = a->param_index[i];
    host[i].group = a->group_of ? a->group_of[i] : 0;
    chunks += (g->numel[i] + LOOM_CU_OPT_CHUNK - 1) / LOOM_CU_OPT_CHUNK;
  }
  if (g->n == 0) return LOOM_OK;
  void *dtab = NULL;
  LOOM_TRY(loom_dev_table_sync(&s->table, dev, host, (size_t)g->n * sizeof *host, &dtab));
  loom_cu_opt_dev d;
  memset(&d, 0, sizeof d);
  d.counts = s->counts;
  d.n_params = s->n_params;
  d.bc1 = s->bc;
  d.bc2 = s->bc ? s->bc + s->bc_len : NULL;
  d.bc_len = s->bc_len;
  d.beta1 = s->beta1;
  d.beta2 = s->beta2;
  d.skip = a->skip;
  d.has_sched = a->sched != NULL;
  if (a->sched) d.sched = *a->sched;
  LOOM_LAUNCH_CHECK(loom_cu_optim_step(dtab, host, s->host_grads, g->n, chunks, h, d, c->stream));
  return LOOM_OK;
}

loom_status loom_cuda_sgd_step(loom_device dev, const loom_param_group *g, const loom_sgd_hparams *hp,
                               const loom_opt_cuda_args *a) {
  loom_cu_opt_hparams h;
  memset(&h, 0, sizeof h);
  h.kind = 0;
  h.lowp_bf16 = g->lowp_dtype == LOOM_BF16;
  h.lr = hp->lr;
  h.momentum = hp->momentum;
  h.dampening = hp->dampening;
  h.weight_decay = hp->weight_decay;
  h.nesterov = hp->nesterov;
  h.first_step = hp->first_step;
  h.bias_correction1 = 1.0f;
  h.bias_correction2 = 1.0f;
  return optim_step(dev, g, h, a);
}

loom_status loom_cuda_adamw_step(loom_device dev, const loom_param_group *g, const loom_adamw_hparams *hp,
                                 const loom_opt_cuda_args *a) {
  loom_cu_opt_hparams h;
  memset(&h, 0, sizeof h);
  h.kind = 1;
  h.lowp_bf16 = g->lowp_dtype == LOOM_BF16;
  h.lr = hp->lr;
  h.weight_decay = hp->weight_decay;
  h.beta1 = hp->beta1;
  h.beta2 = hp->beta2;
  h.eps = hp->eps;
  h.bias_correction1 = hp->bias_correction1;
  h.bias_correction2 = hp->bias_correction2;
  return optim_step(dev, g, h, a);
}
#endif
