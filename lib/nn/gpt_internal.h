/* gpt_internal.h (internal) — the parts of the GPT model (lib/nn/gpt*.c).
 * Every part is a module of kind LOOM_MOD_GPT whose impl says which part it
 * is and carries the model's config; the parts' constructors and forwards
 * are in gpt_layers.c (embedding, LayerNorm, attention, MLP, block), the
 * model, its initialization and its decay split in gpt.c. */
#ifndef LOOM_NN_GPT_INTERNAL_H
#define LOOM_NN_GPT_INTERNAL_H

#include "loom/gpt.h"
#include "nn/module_internal.h"

typedef enum loom_gpt_part {
  LOOM_GPT_MODEL = 1,        /* the GPT: child "transformer"; forward returns logits */
  LOOM_GPT_TRANSFORMER = 2,  /* wte, wpe, drop, h, ln_f; forward returns ln_f's output */
  LOOM_GPT_EMBEDDING = 3,    /* weight [n, C]; forward gathers rows */
  LOOM_GPT_LAYER_NORM = 4,   /* weight [C], bias [C] when cfg.bias */
  LOOM_GPT_ATTENTION = 5,    /* c_attn, c_proj */
  LOOM_GPT_MLP = 6,          /* c_fc, c_proj */
  LOOM_GPT_BLOCK = 7,        /* ln_1, attn, ln_2, mlp */
} loom_gpt_part;

typedef struct loom_gpt_impl {
  loom_gpt_part part;
  loom_gpt_config cfg;
} loom_gpt_impl;

#define LOOM_GPT_LN_EPS 1e-5

/* A part of the model with its impl (NULL + error on failure). */
loom_module *loom_gpt_part_alloc(loom_gpt_part part, const loom_gpt_config *cfg, const char *name);
/* The part of m, or 0 when m is not a GPT module. */
loom_gpt_part loom_gpt_part_of(const loom_module *m);

loom_module *loom_gpt_embedding_new(int64_t n, const loom_gpt_config *cfg, loom_device dev);
loom_module *loom_gpt_layer_norm_new(const loom_gpt_config *cfg, loom_device dev);
loom_module *loom_gpt_block_new(const loom_gpt_config *cfg, loom_device dev);

/* Causal self-attention of q, k, v [B, H, T, D]: the fused kernel, or, when
 * p > 0 and training, the unfused form with dropout p on the weights (the
 * [B, H, T, T] scores materialized). Exposed for the tests, which compare
 * the two forms. */
loom_tensor *loom_gpt_attention(loom_tensor *q, loom_tensor *k, loom_tensor *v, double p, bool training);
/* The unfused form always (p may be 0). */
loom_tensor *loom_gpt_attention_unfused(loom_tensor *q, loom_tensor *k, loom_tensor *v, double p, bool training);

#endif
