/* matmul_cpu.c — batched matmul on the CPU GEMM (lib/ops/cpu/gemm.c).
 *
 * Operands whose last two dims are a transposed-contiguous view are fed to
 * GEMM with the transpose flag flipped instead of being copied. f16/bf16
 * operands are widened to f32, multiplied with f32 accumulation and rounded
 * once on store — what tensor cores do. */
#include <stdlib.h>

#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/cpu_util.h"
#include "ops/cpu/gemm.h"
#include "core/sys.h"

/* Describe operand t's last two dims for GEMM. If they are neither row- nor
 * column-contiguous, *tmp receives a contiguous f32 copy. */
typedef struct gemm_operand {
  const float *base;
  int64_t ld;
  bool flip;           /* stored transposed relative to its logical layout */
  loom_tensor *tmp;    /* owned copy when one was needed */
  loom_tensor *src;    /* what base/strides refer to */
} gemm_operand;

static loom_status prepare(loom_tensor *t, gemm_operand *g) {
  int nd = t->ndim;
  int64_t r = t->shape[nd - 2], c = t->shape[nd - 1];
  int64_t s0 = t->strides[nd - 2], s1 = t->strides[nd - 1];
  g->tmp = NULL;
  g->src = t;
  if (t->dtype == LOOM_F32 && (s1 == 1 || c == 1) && (s0 >= c || r == 1)) {
    g->ld = (r == 1) ? (c > 0 ? c : 1) : s0;
    if (g->ld < c) g->ld = c;
    g->flip = false;
  } else if (t->dtype == LOOM_F32 && (s0 == 1 || r == 1) && (s1 >= r || c == 1)) {
    g->ld = (c == 1) ? (r > 0 ? r : 1) : s1;
    if (g->ld < r) g->ld = r;
    g->flip = true;
  } else {
    g->tmp = loom_tensor_alloc_raw(nd, t->shape, LOOM_F32, loom_cpu());
    if (!g->tmp) return loom_last_status();
    loom_op_args ca = {.in = {t}, .n_in = 1, .out = {g->tmp}, .n_out = 1};
    loom_cpu_copy(&ca);
    g->src = g->tmp;
    g->ld = c > 0 ? c : 1;
    g->flip = false;
  }
  g->base = loom_tensor_ptr(g->src);
  return LOOM_OK;
}


loom_status loom_cpu_matmul(loom_op_args *a) {
  LOOM_TRY(loom_cpu_isa_check());
  loom_tensor *x = a->in[0], *y = a->in[1], *o = a->out[0];
  bool ta = a->i[0] != 0, tb = a->i[1] != 0;
  int nd = o->ndim;
  int64_t M = o->shape[nd - 2], N = o->shape[nd - 1];
  int64_t K = ta ? x->shape[x->ndim - 2] : x->shape[x->ndim - 1];
  int64_t batches = loom_shape_numel(nd - 2, o->shape);
  gemm_operand gx, gy;
  LOOM_TRY(prepare(x, &gx));
  loom_status st = prepare(y, &gy);
  if (st != LOOM_OK) { loom_tensor_release(gx.tmp); return st; }
  float *obuf = o->dtype == LOOM_F32 ? (float *)loom_tensor_ptr(o) : loom_sys_malloc((size_t)(M * N > 0 ? M * N : 1) * sizeof(float));
  if (!obuf) {
    loom_tensor_release(gx.tmp);
    loom_tensor_release(gy.tmp);
    return loom_set_error(LOOM_ERR_OOM, "matmul: out of host memory");
  }
  for (int64_t b = 0; b < batches; b++) {
    const float *pa = gx.base + loom_matmul_batch_offset(gx.src, o, b);
    const float *pb = gy.base + loom_matmul_batch_offset(gy.src, o, b);
    float *pc = o->dtype == LOOM_F32 ? obuf + b * M * N : obuf;
    loom_cpu_sgemm(ta != gx.flip, tb != gy.flip, M, N, K, 1.0f, pa, gx.ld, pb, gy.ld, 0.0f, pc, N);
    if (o->dtype != LOOM_F32)
      loom_cpu_store_f32((char *)loom_tensor_ptr(o) + (size_t)(b * M * N) * loom_dtype_size(o->dtype), o->dtype, 1,
                         M * N, pc);
  }
  if (obuf != loom_tensor_ptr(o)) loom_sys_free(obuf);
  loom_tensor_release(gx.tmp);
  loom_tensor_release(gy.tmp);
  return LOOM_OK;
}
