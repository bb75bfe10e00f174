/* gpt_layers.c — the parts a GPT-2 block is made of, named as nanoGPT names
 * them: Embedding (weight), LayerNorm (weight, bias), CausalSelfAttention
 * (c_attn, c_proj), MLP (c_fc, c_proj) and Block (ln_1, attn, ln_2, mlp).
 * Parameters are created here with placeholder values; gpt.c initializes
 * the whole model afterwards (GPT-2's scheme needs each weight's name). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/autograd.h"
#include "nn/gpt_internal.h"
#include "core/sys.h"

static void part_free(loom_module *m) {
  loom_sys_free(m->impl);
  m->impl = NULL;
}

loom_module *loom_gpt_part_alloc(loom_gpt_part part, const loom_gpt_config *cfg, const char *name) {
  loom_module *m = loom_module_alloc(LOOM_MOD_GPT, name);
  loom_gpt_impl *g = m ? loom_sys_calloc(1, sizeof *g) : NULL;
  if (!g) {
    if (m) loom_set_error(LOOM_ERR_OOM, "%s: out of host memory", name);
    loom_module_free(m);
    return NULL;
  }
  *g = (loom_gpt_impl){part, *cfg};
  m->impl = g;
  m->destroy = part_free;
  return m;
}

loom_gpt_part loom_gpt_part_of(const loom_module *m) {
  return m && m->kind == LOOM_MOD_GPT && m->impl ? ((const loom_gpt_impl *)m->impl)->part : 0;
}

static const loom_gpt_config *cfg_of(const loom_module *m) { return &((const loom_gpt_impl *)m->impl)->cfg; }

static loom_module *part_new(loom_gpt_part part, const loom_gpt_config *cfg, const char *name,
                             loom_tensor *(*forward)(loom_module *, loom_tensor *)) {
  loom_module *m = loom_gpt_part_alloc(part, cfg, name);
  if (m) m->forward = forward;
  return m;
}

/* A parameter the module owns (not the caller's scope), zeroed. */
static loom_status add_leaf(loom_module *m, const char *name, int ndim, const int64_t *shape, loom_device dev) {
  loom_tensor *t = loom_tensor_alloc_raw(ndim, shape, LOOM_F32, dev);
  if (t && loom_fill_(t, 0.0) != LOOM_OK) {
    loom_tensor_release(t);
    t = NULL;
  }
  if (t) loom_set_requires_grad(t, true);
  return loom_module_add_param(m, name, t);
}

static loom_tensor *child(loom_module *m, const char *name, loom_tensor *x) {
  return loom_module_forward(loom_module_find_child(m, name), x);
}

/* ---- Embedding ------------------------------------------------------------------ */

static loom_tensor *embedding_forward(loom_module *m, loom_tensor *idx) { return loom_embedding(idx, m->params[0]); }

loom_module *loom_gpt_embedding_new(int64_t n, const loom_gpt_config *cfg, loom_device dev) {
  loom_module *m = part_new(LOOM_GPT_EMBEDDING, cfg, "Embedding", embedding_forward);
  int64_t shape[2] = {n, cfg->n_embd};
  if (m && add_leaf(m, "weight", 2, shape, dev) != LOOM_OK) {
    loom_module_free(m);
    return NULL;
  }
  if (m) loom_module_set_name(m, "Embedding(%lld, %lld)", (long long)n, (long long)cfg->n_embd);
  return m;
}

/* ---- LayerNorm ------------------------------------------------------------------ */

static loom_tensor *layer_norm_forward(loom_module *m, loom_tensor *x) {
  return loom_layer_norm(x, m->params[0], m->n_params > 1 ? m->params[1] : NULL, LOOM_GPT_LN_EPS);
}

loom_module *loom_gpt_layer_norm_new(const loom_gpt_config *cfg, loom_device dev) {
  loom_module *m = part_new(LOOM_GPT_LAYER_NORM, cfg, "LayerNorm", layer_norm_forward);
  int64_t c = cfg->n_embd;
  if (m && (add_leaf(m, "weight", 1, &c, dev) != LOOM_OK || (cfg->bias && add_leaf(m, "bias", 1, &c, dev) != LOOM_OK))) {
    loom_module_free(m);
    return NULL;
  }
  if (m) loom_module_set_name(m, "LayerNorm(%lld)", (long long)c);
  return m;
}

/* ---- attention ------------------------------------------------------------------ */

loom_tensor *loom_gpt_attention_unfused(loom_tensor *q, loom_tensor *k, loom_tensor *v, double p, bool training) {
  if (!q || !k || !v) return NULL;
  int64_t T = loom_tensor_dim(q, -2), D = loom_tensor_dim(q, -1);
  /* The causal mask as an additive [T, T] term: 0 where key j <= query i, -inf above. */
  float *mask = loom_sys_malloc((size_t)(T * T) * sizeof *mask);
  if (!mask) {
    loom_set_error(LOOM_ERR_OOM, "gpt attention: out of host memory for a %lldx%lld mask", (long long)T, (long long)T);
    return NULL;
  }
  for (int64_t i = 0; i < T; i++)
    for (int64_t j = 0; j < T; j++) mask[i * T + j] = j <= i ? 0.0f : -INFINITY;
  int64_t ms[2] = {T, T};
  loom_tensor *bias = loom_from_host(mask, 2, ms, LOOM_F32, loom_tensor_device(q));
  loom_sys_free(mask);
  loom_tensor *att = loom_mul_scalar(loom_matmul_ex(q, k, false, true), 1.0 / sqrt((double)D));
  /* In the scores' dtype (f16/bf16 under mixed precision; -inf is exact there too). */
  if (att && bias && loom_tensor_dtype(att) != LOOM_F32) bias = loom_cast(bias, loom_tensor_dtype(att));
  att = loom_dropout(loom_softmax(loom_add(att, bias), -1), p, training);
  return loom_matmul(att, v);
}

loom_tensor *loom_gpt_attention(loom_tensor *q, loom_tensor *k, loom_tensor *v, double p, bool training) {
  if (training && p > 0) return loom_gpt_attention_unfused(q, k, v, p, training);
  return loom_scaled_dot_product_attention(q, k, v, true);
}

/* x [B, T, C] -> c_proj(attention(split heads of c_attn(x))), dropout. */
static loom_tensor *attention_forward(loom_module *m, loom_tensor *x) {
  const loom_gpt_config *c = cfg_of(m);
  if (!x) return NULL;
  int64_t B = loom_tensor_dim(x, 0), T = loom_tensor_dim(x, 1), C = c->n_embd, H = c->n_head;
  loom_tensor *qkv = child(m, "c_attn", x);  /* [B, T, 3C] */
  int64_t sh[4] = {B, T, H, C / H};
  loom_tensor *qkvh[3];
  for (int i = 0; i < 3; i++)  /* nanoGPT's split, view and transpose: [B, H, T, D] */
    qkvh[i] = loom_transpose(loom_view(loom_slice(qkv, 2, i * C, (i + 1) * C, 1), 4, sh), 1, 2);
  loom_tensor *y = loom_gpt_attention(qkvh[0], qkvh[1], qkvh[2], c->dropout, m->training);
  int64_t bt[3] = {B, T, C};
  y = loom_reshape(loom_transpose(y, 1, 2), 3, bt);
  return loom_dropout(child(m, "c_proj", y), c->dropout, m->training);
}

/* ---- MLP ------------------------------------------------------------------------ */

static loom_tensor *mlp_forward(loom_module *m, loom_tensor *x) {
  const loom_gpt_config *c = cfg_of(m);
  return loom_dropout(child(m, "c_proj", loom_gelu(child(m, "c_fc", x))), c->dropout, m->training);
}

/* ---- Block ---------------------------------------------------------------------- */

/* t in dtype dt (t itself when it is already). */
static loom_tensor *as_dtype(loom_tensor *t, loom_dtype dt) {
  return t && loom_tensor_dtype(t) != dt ? loom_cast(t, dt) : t;
}

/* x + attn(ln_1(x)), then + mlp(ln_2(x)), in a scope of its own so that
 * only the result outlives it (the graph keeps what backward needs). The
 * residual stream keeps x's dtype: under a mixed precision policy kept f32
 * for the last Linear (keep_last_fp32), that branch is cast back. */
static loom_tensor *block_forward(loom_module *m, loom_tensor *x) {
  if (!x) return NULL;
  loom_dtype dt = loom_tensor_dtype(x);
  loom_scope_begin();
  x = loom_add(x, as_dtype(child(m, "attn", child(m, "ln_1", x)), dt));
  x = loom_add(x, as_dtype(child(m, "mlp", child(m, "ln_2", x)), dt));
  if (x) loom_keep(x);
  loom_scope_end();
  return x;
}

static loom_module *linear(int64_t in, int64_t out, const loom_gpt_config *cfg, loom_device dev) {
  return loom_linear_new(in, out, cfg->bias, LOOM_INIT_ZEROS, dev);
}

loom_module *loom_gpt_block_new(const loom_gpt_config *cfg, loom_device dev) {
  int64_t C = cfg->n_embd;
  loom_module *b = part_new(LOOM_GPT_BLOCK, cfg, "Block", block_forward);
  loom_module *attn = part_new(LOOM_GPT_ATTENTION, cfg, "CausalSelfAttention", attention_forward);
  loom_module *mlp = part_new(LOOM_GPT_MLP, cfg, "MLP", mlp_forward);
  loom_status st = b && attn && mlp ? LOOM_OK : loom_last_status();
  /* add_child takes its child also on failure, so each is added before anything else can fail. */
  if (st == LOOM_OK) st = loom_module_add_child(attn, "c_attn", linear(C, 3 * C, cfg, dev));
  if (st == LOOM_OK) st = loom_module_add_child(attn, "c_proj", linear(C, C, cfg, dev));
  if (st == LOOM_OK) st = loom_module_add_child(mlp, "c_fc", linear(C, 4 * C, cfg, dev));
  if (st == LOOM_OK) st = loom_module_add_child(mlp, "c_proj", linear(4 * C, C, cfg, dev));
  if (st == LOOM_OK) st = loom_module_add_child(b, "ln_1", loom_gpt_layer_norm_new(cfg, dev));
  if (st == LOOM_OK) {
    st = loom_module_add_child(b, "attn", attn);
    attn = NULL;
  }
  if (st == LOOM_OK) st = loom_module_add_child(b, "ln_2", loom_gpt_layer_norm_new(cfg, dev));
  if (st == LOOM_OK) {
    st = loom_module_add_child(b, "mlp", mlp);
    mlp = NULL;
  }
  loom_module_free(attn);
  loom_module_free(mlp);
  if (st != LOOM_OK) {
    loom_module_free(b);
    return NULL;
  }
  loom_module_set_name(b, "Block(%lld, %lld heads)", (long long)C, (long long)cfg->n_head);
  return b;
}
