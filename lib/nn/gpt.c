/* gpt.c — the GPT-2 model (include/loom/gpt.h): its config, construction
 * under nanoGPT's names, GPT-2's initialization, the forward to logits or
 * to the loss (fused projection + cross-entropy on the tied embedding), and
 * nanoGPT's weight-decay split. The parts are in gpt_layers.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "loom/autograd.h"
#include "nn/gpt_internal.h"
#include "core/struct_size.h"

void loom_gpt_config_init(loom_gpt_config *c) {
  if (!c) return;
  *c = (loom_gpt_config){.struct_size = sizeof *c, .vocab_size = 0, .block_size = 1024, .n_layer = 12, .n_head = 12,
                         .n_embd = 768, .dropout = 0.0, .bias = true};
}

static loom_status check_config(const loom_gpt_config *c) {
  if (c->vocab_size <= 0)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "gpt_new: vocab_size = %lld must be set (positive): it has no default",
                          (long long)c->vocab_size);
  if (c->block_size <= 0 || c->n_layer <= 0 || c->n_head <= 0 || c->n_embd <= 0)
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "gpt_new: block_size, n_layer, n_head and n_embd must be positive (got %lld, %lld, %lld, %lld)",
                          (long long)c->block_size, (long long)c->n_layer, (long long)c->n_head, (long long)c->n_embd);
  if (c->n_embd % c->n_head)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "gpt_new: n_head = %lld does not divide n_embd = %lld",
                          (long long)c->n_head, (long long)c->n_embd);
  if (!(c->dropout >= 0.0 && c->dropout < 1.0))
    return loom_set_error(LOOM_ERR_INVALID_ARG, "gpt_new: dropout = %g must be in [0, 1)", c->dropout);
  return LOOM_OK;
}

/* ---- forward ------------------------------------------------------------------ */

/* idx [B, T] -> ln_f(h(drop(wte[idx] + wpe[0..T)))) [B, T, C]. */
static loom_tensor *transformer_forward(loom_module *m, loom_tensor *idx) {
  const loom_gpt_config *c = &((const loom_gpt_impl *)m->impl)->cfg;
  if (loom_tensor_ndim(idx) != 2) {
    loom_set_error(LOOM_ERR_SHAPE, "gpt: token indices must be [B, T], got %d dims", loom_tensor_ndim(idx));
    return NULL;
  }
  int64_t T = loom_tensor_dim(idx, 1);
  if (T < 1 || T > c->block_size) {
    loom_set_error(LOOM_ERR_SHAPE, "gpt: a sequence of %lld tokens; the model's block_size is %lld", (long long)T,
                   (long long)c->block_size);
    return NULL;
  }
  loom_tensor *pos = loom_arange(0, (double)T, 1, LOOM_I64, loom_tensor_device(idx));
  loom_tensor *x = loom_add(loom_module_forward(loom_module_find_child(m, "wte"), idx),
                            loom_module_forward(loom_module_find_child(m, "wpe"), pos));
  x = loom_dropout(x, c->dropout, m->training);
  /* Under a mixed precision policy the residual stream is in the compute
   * dtype from here on, and so is ln_f's output, which the head takes (the
   * embeddings and LayerNorm parameters stay f32). */
  loom_precision p = loom_module_get_precision(m);
  if (x && p != LOOM_PRECISION_FP32) x = loom_cast(x, loom_precision_compute_dtype(p));
  x = loom_module_forward(loom_module_find_child(m, "h"), x);
  return loom_module_forward(loom_module_find_child(m, "ln_f"), x);
}

static loom_module *transformer(const loom_module *gpt) { return loom_module_find_child(gpt, "transformer"); }
static loom_tensor *wte(const loom_module *gpt) { return loom_module_find_child(transformer(gpt), "wte")->params[0]; }

/* Logits [B, T, V] = hidden · wteᵀ (the tied lm_head), in a scope so that
 * only they outlive the call. */
static loom_tensor *model_forward(loom_module *m, loom_tensor *idx) {
  loom_scope_begin();
  loom_tensor *h = loom_module_forward(transformer(m), idx);
  if (h && loom_tensor_dtype(h) != LOOM_F32) h = loom_cast(h, LOOM_F32); /* f32 logits for sampling */
  loom_tensor *y = loom_linear(h, wte(m), NULL, LOOM_ACT_NONE);
  if (y) loom_keep(y);
  loom_scope_end();
  return y;
}

loom_tensor *loom_gpt_forward(loom_module *gpt, loom_tensor *idx, loom_tensor *targets) {
  if (loom_gpt_part_of(gpt) != LOOM_GPT_MODEL) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "gpt_forward: %s is not a GPT (loom_gpt_new)", gpt ? gpt->name : "NULL");
    return NULL;
  }
  if (!targets) return loom_module_forward(gpt, idx);
  if (!idx) {
    if (loom_last_status() == LOOM_OK) loom_set_error(LOOM_ERR_NULL_INPUT, "gpt_forward: idx is NULL");
    return NULL;
  }
  if (loom_tensor_ndim(targets) != 2 || loom_tensor_ndim(idx) != 2 ||
      loom_tensor_dim(targets, 0) != loom_tensor_dim(idx, 0) || loom_tensor_dim(targets, 1) != loom_tensor_dim(idx, 1)) {
    loom_set_error(LOOM_ERR_SHAPE, "gpt_forward: targets must be [B, T] like idx (%d and %d dims)",
                   loom_tensor_ndim(targets), loom_tensor_ndim(idx));
    return NULL;
  }
  loom_scope_begin();
  int64_t C = loom_tensor_dim(wte(gpt), 1), flat_x[2] = {-1, C}, flat_y[1] = {-1};
  loom_tensor *h = loom_reshape(loom_module_forward(transformer(gpt), idx), 2, flat_x);
  /* Under a mixed policy the head's GEMMs run in the compute dtype (as
   * torch.autocast's lm_head), from the f32 tied weight cast each step;
   * the op sums the logits and computes the loss in f32. */
  loom_tensor *w = wte(gpt);
  if (h && loom_tensor_dtype(h) != LOOM_F32) w = loom_cast(w, loom_tensor_dtype(h));
  loom_tensor *loss = loom_linear_cross_entropy(h, w, loom_reshape(targets, 1, flat_y));
  if (loss) loom_keep(loss);
  loom_scope_end();
  return loss;
}

/* ---- construction ---------------------------------------------------------------- */

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

/* GPT-2's initialization, by name (nanoGPT's _init_weights and its c_proj
 * scaling): N(0, 0.02) for Linear and Embedding weights, 0.02/sqrt(2 L) for
 * c_proj weights, zero biases, LayerNorm weights 1. */
static loom_status init_weights(loom_module *m, int64_t n_layer) {
  char name[256];
  loom_status st = LOOM_OK;
  bool prev = loom_set_grad_enabled(false);
  for (int i = 0; st == LOOM_OK && i < loom_module_num_params(m); i++) {
    loom_tensor *p = loom_module_param(m, i);
    if (!loom_module_param_name(m, i, name, sizeof name)) {
      st = loom_last_status();
      break;
    }
    if (ends_with(name, ".bias")) {
      st = loom_fill_(p, 0.0);
    } else if (strstr(name, ".ln_") || strstr(name, "ln_f.")) {
      st = loom_fill_(p, 1.0);
    } else {
      double std = ends_with(name, "c_proj.weight") ? 0.02 / sqrt(2.0 * (double)n_layer) : 0.02;
      loom_scope_begin();
      loom_tensor *r = loom_mul_scalar(loom_randn(loom_tensor_ndim(p), loom_tensor_shape(p), LOOM_F32,
                                                  loom_tensor_device(p)), std);
      st = r ? loom_copy_(p, r) : loom_last_status();
      loom_scope_end();
    }
  }
  loom_set_grad_enabled(prev);
  return st;
}

static loom_module *transformer_new(const loom_gpt_config *c, loom_device dev) {
  loom_module *t = loom_gpt_part_alloc(LOOM_GPT_TRANSFORMER, c, "Transformer");
  if (!t) return NULL;
  t->forward = transformer_forward;
  loom_module *h = loom_sequential_new();
  loom_status st = h ? LOOM_OK : loom_last_status();
  for (int64_t i = 0; st == LOOM_OK && i < c->n_layer; i++) st = loom_sequential_add(h, loom_gpt_block_new(c, dev));
  if (st == LOOM_OK) st = loom_module_add_child(t, "wte", loom_gpt_embedding_new(c->vocab_size, c, dev));
  if (st == LOOM_OK) st = loom_module_add_child(t, "wpe", loom_gpt_embedding_new(c->block_size, c, dev));
  if (st == LOOM_OK) st = loom_module_add_child(t, "drop", loom_dropout_new(c->dropout));
  if (st == LOOM_OK) {
    st = loom_module_add_child(t, "h", h);
    h = NULL;
  }
  if (st == LOOM_OK) st = loom_module_add_child(t, "ln_f", loom_gpt_layer_norm_new(c, dev));
  loom_module_free(h);
  if (st != LOOM_OK) {
    loom_module_free(t);
    return NULL;
  }
  return t;
}

loom_module *loom_gpt_new(const loom_gpt_config *cfg, loom_device dev) {
  if (!cfg) {
    loom_set_error(LOOM_ERR_INVALID_ARG, "gpt_new: cfg is NULL (loom_gpt_config_init, then set vocab_size)");
    return NULL;
  }
  loom_gpt_config c;
  loom_gpt_config_init(&c);
  if (LOOM_STRUCT_IN("gpt_new", loom_gpt_config, &c, cfg) != LOOM_OK || check_config(&c) != LOOM_OK ||
      loom_device_check(dev) != LOOM_OK)
    return NULL;
  loom_module *m = loom_gpt_part_alloc(LOOM_GPT_MODEL, &c, "GPT");
  if (!m) return NULL;
  m->forward = model_forward;
  if (loom_module_add_child(m, "transformer", transformer_new(&c, dev)) != LOOM_OK ||
      init_weights(m, c.n_layer) != LOOM_OK) {
    loom_error_prefix("gpt_new");
    loom_module_free(m);
    return NULL;
  }
  loom_module_set_name(m, "GPT(vocab %lld, block %lld, %lld layers, %lld heads, %lld wide)", (long long)c.vocab_size,
                       (long long)c.block_size, (long long)c.n_layer, (long long)c.n_head, (long long)c.n_embd);
  return m;
}

/* ---- weight decay ---------------------------------------------------------------- */

loom_status loom_gpt_split_decay(const loom_module *m, loom_tensor **decay, int *n_decay, loom_tensor **no_decay,
                                 int *n_no_decay) {
  if (!m || !decay || !n_decay || !no_decay || !n_no_decay)
    return loom_set_error(LOOM_ERR_INVALID_ARG, "gpt_split_decay: NULL argument");
  *n_decay = *n_no_decay = 0;
  for (int i = 0; i < loom_module_num_params(m); i++) {
    loom_tensor *p = loom_module_param(m, i);
    if (loom_tensor_ndim(p) >= 2) decay[(*n_decay)++] = p;
    else no_decay[(*n_no_decay)++] = p;
  }
  return LOOM_OK;
}
