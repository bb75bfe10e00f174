/* gpt.h — the GPT-2 language model (issue 28), as nanoGPT writes it.
 *
 * Token embedding + learned positional embedding, n_layer pre-LayerNorm
 * blocks (x + attn(ln_1(x)), then x + mlp(ln_2(x))), a final LayerNorm and
 * an output projection tied to the token embedding. Attention is causal
 * self-attention with one fused query/key/value projection c_attn [C -> 3C]
 * and an output projection c_proj; the MLP is c_fc [C -> 4C], GELU (tanh
 * approximation), c_proj [4C -> C]. LayerNorm's eps is 1e-5.
 *
 * Parameter names are nanoGPT's state_dict keys (named_parameters order):
 *   transformer.wte.weight [vocab, C]     (also the output projection: lm_head is tied
 *                                           to it and has no parameter of its own)
 *   transformer.wpe.weight [block, C]
 *   transformer.h.<i>.ln_1.weight / .bias [C]
 *   transformer.h.<i>.attn.c_attn.weight [3C, C] / .bias [3C]
 *   transformer.h.<i>.attn.c_proj.weight [C, C] / .bias [C]
 *   transformer.h.<i>.ln_2.weight / .bias
 *   transformer.h.<i>.mlp.c_fc.weight [4C, C] / .bias [4C]
 *   transformer.h.<i>.mlp.c_proj.weight [C, 4C] / .bias [C]
 *   transformer.ln_f.weight / .bias
 * so loom_safetensors_save of the parameters under these names is a file a
 * nanoGPT model loads (model.load_state_dict(..., strict=False): nanoGPT's
 * state_dict also lists the tied lm_head.weight, and without flash
 * attention its attn.bias mask buffers). Linear weights are [out, in] as in
 * nanoGPT (torch.nn.Linear); Hugging Face's GPT-2 checkpoints store them
 * [in, out] (its Conv1D) and without the "transformer." prefix: transpose
 * c_attn, c_proj and c_fc weights when converting from or to those.
 *
 * Initialization (GPT-2's, as nanoGPT's _init_weights): Linear and
 * Embedding weights N(0, 0.02), each c_proj.weight N(0, 0.02/sqrt(2 n_layer)),
 * biases 0, LayerNorm weights 1 and biases 0; drawn from the global generator
 * (loom_manual_seed).
 *
 * Dropout with the config's p after the embeddings, on the attention
 * weights and after each residual branch's projection, in training mode
 * only (loom_module_train). Attention runs the fused causal kernel
 * (loom_scaled_dot_product_attention, O(T) memory); attention dropout needs
 * the weights themselves, so in training mode with dropout > 0 attention is
 * computed unfused (softmax(q kᵀ/sqrt(d) + causal mask), dropout, · v), with
 * the [B, heads, T, T] scores in memory.
 *
 * Activation checkpointing: loom_sequential_set_checkpoint_every on the
 * "transformer.h" child (loom_module_find_child is internal; reach it with
 * loom_module_child(loom_module_child(gpt, 0), 3)) recomputes blocks in
 * backward; gradients are unchanged (dropout masks included).
 *
 * Mixed precision (loom_module_set_precision, amp.h): the Linear layers run
 * on f16/bf16 copies and the residual stream is cast to the compute dtype
 * after the embeddings; the embeddings, LayerNorm parameters (statistics in
 * f32), the tied head and the loss stay f32, so logits are f32.
 *
 * Not yet: CUDA (the attention, embedding and LayerNorm ops are CPU kernels
 * so far: a model on a GPU is built, its forward fails with
 * LOOM_ERR_UNSUPPORTED).
 *
 * Threads: a model is used by one thread at a time. */
#ifndef LOOM_GPT_H
#define LOOM_GPT_H

#include "nn.h"

LOOM_EXTERN_C_BEGIN

typedef struct loom_gpt_config {
  size_t struct_size;   /* sizeof(loom_gpt_config) */
  int64_t vocab_size;   /* no default (0): the tokenizer's (65 for nanoGPT's shakespeare_char,
                           50257 for GPT-2's BPE, 50304 padded as nanoGPT pads it) */
  int64_t block_size;   /* 1024: the longest sequence (rows of wpe) */
  int64_t n_layer;      /* 12 */
  int64_t n_head;       /* 12; must divide n_embd */
  int64_t n_embd;       /* 768 */
  double dropout;       /* 0.0; in [0, 1) */
  bool bias;            /* true: Linear and LayerNorm biases (nanoGPT's bias=False drops them all) */
} loom_gpt_config;

/* Sets struct_size and the defaults above: GPT-2 124M's shape once
 * vocab_size is set. */
LOOM_API void loom_gpt_config_init(loom_gpt_config *c);

/* The model on dev (cfg required: vocab_size has no default). Its forward
 * (loom_module_forward) takes token indices [B, T] (i32, i64 or u8; T <=
 * block_size) and returns logits [B, T, vocab_size] (f32). */
LOOM_API loom_module *loom_gpt_new(const loom_gpt_config *cfg, loom_device dev);

/* Forward with an optional loss: targets NULL returns the logits as
 * loom_module_forward does; targets [B, T] (i32, i64 or u8) returns the
 * mean cross-entropy over all B*T positions (a 0-d f32), computed by
 * loom_linear_cross_entropy from the final LayerNorm's output and the tied
 * embedding, without materializing the [B*T, vocab] logits. */
LOOM_API loom_tensor *loom_gpt_forward(loom_module *gpt, loom_tensor *idx, loom_tensor *targets);

/* nanoGPT's configure_optimizers split: decay gets every parameter with 2
 * or more dimensions (Linear weights and both embeddings), no_decay the
 * rest (biases and LayerNorm weights). Each array needs room for
 * loom_module_num_params(gpt) tensors (borrowed). Any module works; for a
 * GPT this is what AdamW's two parameter groups take. */
LOOM_API loom_status loom_gpt_split_decay(const loom_module *gpt, loom_tensor **decay, int *n_decay,
                                          loom_tensor **no_decay, int *n_no_decay);

LOOM_EXTERN_C_END
#endif
