/* test_op_sweep.c — every op of the op table (LOOM_OP_COUNT ids), one case
 * each, run under every configuration it declares: dtype (f32, f16, bf16) ×
 * layout (contiguous, sliced, transposed, channels-last) × shape class
 * (small, empty, one element, odd sizes, batch 1, >= 2^20 elements,
 * >= 2048 channels) × device (CPU; CUDA), each against a float64 reference
 * computed here, with a gradient check where the op is differentiable (the
 * way ggml's test-backend-ops sweeps its backends). The cases and the
 * machinery they share are in tests/op_sweep/ (sweep.h says how a case is
 * written).
 *
 * It fails when an op has no case (the table below is indexed by op id; the
 * failure names the op), when the grad table disagrees with a case about
 * whether the op is differentiable (a differentiable op without a
 * grad-table entry would silently not record), and when an entry leaves a
 * dimension undeclared: every entry lists the dtypes it covers (an op that
 * takes neither f16 nor bf16 says why, in one word), the layouts it computes
 * correctly and those it refuses with an error (all of contiguous, sliced
 * and transposed, one way or the other; channels-last where it takes 4-D
 * inputs), and the shape classes (all but WIDE, which the ops with channels
 * or features add). A gap is a visible decision, not an omission.
 *
 * Adding an op: write its case in tests/op_sweep/cases_*.c (declared in
 * sweep.h), then add `[LOOM_OP_X] = {sw_case_x, SW_GRAD or SW_NO_GRAD,
 * dtypes, layouts, refused layouts, shape classes, why-no-16-bit}` below.
 *
 * Modes (environment):
 *  - default (CI, also under ASan and the _avx2 / _scalar ctest variants):
 *    the small shape classes under every declared dtype × layout, on one
 *    CPU thread; the big classes (BIG, WIDE) in f32, contiguous, their
 *    gradients checked at 2 coordinates per input (the first and the last
 *    element: where blocking and vector tails go wrong). About 6 s of CPU,
 *    25 s under ASan;
 *  - LOOM_SWEEP_FULL=1: every declared combination at every size, the big
 *    classes' gradients at 16 coordinates, with loom's default thread count
 *    (about 5.5 min of CPU on a 2-core AMD EPYC, 23 min wall while the
 *    machine was shared, 2026-11-25; for bench/ or the GPU suite:
 *    scripts/gpu-suite.sh runs it with LOOM_TEST_DEVICE=cuda).
 * The suites op_sweep_cpu and op_sweep_cuda run the same cases on each
 * device: without a usable GPU the CUDA ones skip, saying why, and fail
 * instead under LOOM_TEST_DEVICE=cuda (tests/support/testkit.h).
 *
 * Known failures (sw_known below) are skipped with a printed line naming
 * them, so they show in every run until fixed. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <criterion/parameterized.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autograd/grad_table.h"
#include "op_sweep/sweep.h"
#include "ops/op.h"

/* ---- the case table ---------------------------------------------------------- */

enum { SW_NO_GRAD = 0, SW_GRAD = 1 };
typedef struct sw_case {
  sw_case_fn run;
  int grad;            /* SW_GRAD: differentiable (a grad-table entry; run checks the gradient) */
  unsigned dtypes;     /* SW_F32 | SW_F16 | SW_BF16 */
  unsigned layouts;    /* layouts the op computes correctly */
  unsigned refuses;    /* layouts the op refuses with an error naming what it needs */
  unsigned shapes;     /* shape classes */
  const char *no_half; /* one word: why neither f16 nor bf16 (when dtypes has neither) */
} sw_case;

/* The common declarations: any float dtype, every layout (4-D inputs) or
 * the three that apply to 2-D ones, every shape class (with WIDE: the ops
 * with channels or features). */
#define ALL4(fn, grad) {fn, grad, SW_FLOATS, SW_ALL_LAYOUTS, 0, SW_EVERY_SHAPE, NULL}
#define DENSE(fn, grad) {fn, grad, SW_FLOATS, SW_DENSE_LAYOUTS, 0, SW_EVERY_SHAPE, NULL}
#define CNN(fn, grad) {fn, grad, SW_FLOATS, SW_ALL_LAYOUTS, 0, SW_ALL_SHAPES, NULL}
/* Backward ops run directly whose kernels read rows densely: contiguous
 * inputs, strided views refused with an error naming "contiguous". */
#define DENSE_ONLY(fn, dtypes, no_half)                                                                     \
  {fn, SW_NO_GRAD, dtypes, SW_LAYOUT(SW_CONTIGUOUS), SW_LAYOUT(SW_SLICED) | SW_LAYOUT(SW_TRANSPOSED), SW_ALL_SHAPES, \
   no_half}

static const sw_case g_cases[LOOM_OP_COUNT] = {
    [LOOM_OP_ADD] = ALL4(sw_case_add, SW_GRAD),
    [LOOM_OP_SUB] = ALL4(sw_case_sub, SW_GRAD),
    [LOOM_OP_MUL] = ALL4(sw_case_mul, SW_GRAD),
    [LOOM_OP_DIV] = ALL4(sw_case_div, SW_GRAD),
    [LOOM_OP_ADD_SCALAR] = ALL4(sw_case_add_scalar, SW_GRAD),
    [LOOM_OP_MUL_SCALAR] = ALL4(sw_case_mul_scalar, SW_GRAD),
    [LOOM_OP_RSUB_SCALAR] = ALL4(sw_case_rsub_scalar, SW_GRAD),
    [LOOM_OP_RDIV_SCALAR] = ALL4(sw_case_rdiv_scalar, SW_GRAD),
    [LOOM_OP_POW_SCALAR] = ALL4(sw_case_pow_scalar, SW_GRAD),
    [LOOM_OP_NEG] = ALL4(sw_case_neg, SW_GRAD),
    [LOOM_OP_EXP] = ALL4(sw_case_exp, SW_GRAD),
    [LOOM_OP_LOG] = ALL4(sw_case_log, SW_GRAD),
    [LOOM_OP_SQRT] = ALL4(sw_case_sqrt, SW_GRAD),
    [LOOM_OP_RELU] = ALL4(sw_case_relu, SW_GRAD),
    [LOOM_OP_RELU_BACKWARD] = ALL4(sw_case_relu_backward, SW_NO_GRAD),
    [LOOM_OP_EQ] = ALL4(sw_case_eq, SW_NO_GRAD),
    [LOOM_OP_SUM] = ALL4(sw_case_sum, SW_GRAD),
    [LOOM_OP_MAX] = ALL4(sw_case_max, SW_GRAD),
    [LOOM_OP_ARGMAX] = ALL4(sw_case_argmax, SW_NO_GRAD),
    [LOOM_OP_MATMUL] = {sw_case_matmul, SW_GRAD, SW_FLOATS, SW_DENSE_LAYOUTS, 0, SW_ALL_SHAPES, NULL},
    [LOOM_OP_LINEAR] = {sw_case_linear, SW_GRAD, SW_FLOATS, SW_DENSE_LAYOUTS, 0, SW_ALL_SHAPES, NULL},
    [LOOM_OP_LINEAR_BACKWARD] = {sw_case_linear_backward, SW_NO_GRAD, SW_FLOATS, SW_DENSE_LAYOUTS, 0, SW_ALL_SHAPES,
                                 NULL},
    [LOOM_OP_LOG_SOFTMAX] = DENSE(sw_case_log_softmax, SW_GRAD),
    /* Run directly (loom_op_run): its kernel reads rows densely, so a strided
     * view is refused (the public function and autograd pass contiguous ones). */
    [LOOM_OP_LOG_SOFTMAX_BACKWARD] = {sw_case_log_softmax_backward, SW_NO_GRAD, SW_FLOATS,
                                      SW_LAYOUT(SW_CONTIGUOUS), SW_LAYOUT(SW_SLICED) | SW_LAYOUT(SW_TRANSPOSED),
                                      SW_EVERY_SHAPE, NULL},
    [LOOM_OP_CROSS_ENTROPY] = DENSE(sw_case_cross_entropy, SW_GRAD),
    [LOOM_OP_CROSS_ENTROPY_BACKWARD] = DENSE(sw_case_cross_entropy_backward, SW_NO_GRAD),
    [LOOM_OP_COPY] = ALL4(sw_case_copy, SW_GRAD),
    [LOOM_OP_VIEW_RESHAPE] = ALL4(sw_case_view_reshape, SW_GRAD),
    [LOOM_OP_VIEW_PERMUTE] = ALL4(sw_case_view_permute, SW_GRAD),
    [LOOM_OP_VIEW_SLICE] = ALL4(sw_case_view_slice, SW_GRAD),
    [LOOM_OP_VIEW_EXPAND] = ALL4(sw_case_view_expand, SW_GRAD),
    [LOOM_OP_CONV2D] = CNN(sw_case_conv2d, SW_GRAD),
    [LOOM_OP_CONV2D_BACKWARD] = CNN(sw_case_conv2d_backward, SW_NO_GRAD),
    [LOOM_OP_BATCH_NORM] = CNN(sw_case_batch_norm, SW_GRAD),
    [LOOM_OP_BATCH_NORM_BACKWARD] = CNN(sw_case_batch_norm_backward, SW_NO_GRAD),
    [LOOM_OP_MAX_POOL2D] = CNN(sw_case_max_pool2d, SW_GRAD),
    [LOOM_OP_MAX_POOL2D_BACKWARD] = CNN(sw_case_max_pool2d_backward, SW_NO_GRAD),
    [LOOM_OP_AVG_POOL2D] = CNN(sw_case_avg_pool2d, SW_GRAD),
    [LOOM_OP_ADAPTIVE_AVG_POOL2D] = CNN(sw_case_adaptive_avg_pool2d, SW_GRAD),
    [LOOM_OP_AVG_POOL2D_BACKWARD] = CNN(sw_case_avg_pool2d_backward, SW_NO_GRAD),
    [LOOM_OP_DROPOUT] = ALL4(sw_case_dropout, SW_GRAD),
    [LOOM_OP_DROPOUT_BACKWARD] = ALL4(sw_case_dropout_backward, SW_NO_GRAD),
    [LOOM_OP_ADD_RELU] = ALL4(sw_case_add_relu, SW_GRAD),
    [LOOM_OP_ADD_RELU_BACKWARD] = ALL4(sw_case_add_relu_backward, SW_NO_GRAD),
    [LOOM_OP_CAT] = ALL4(sw_case_cat, SW_GRAD),
    /* Transformer ops: the public functions copy strided inputs to dense
     * ones; the backward ops, run directly, refuse strided views. */
    [LOOM_OP_GELU] = ALL4(sw_case_gelu, SW_GRAD),
    [LOOM_OP_GELU_BACKWARD] = ALL4(sw_case_gelu_backward, SW_NO_GRAD),
    [LOOM_OP_SOFTMAX] = DENSE(sw_case_softmax, SW_GRAD),
    [LOOM_OP_SOFTMAX_BACKWARD] = DENSE_ONLY(sw_case_softmax_backward, SW_FLOATS, NULL),
    [LOOM_OP_EMBEDDING] = {sw_case_embedding, SW_GRAD, SW_FLOATS, SW_DENSE_LAYOUTS, 0, SW_ALL_SHAPES, NULL},
    [LOOM_OP_EMBEDDING_BACKWARD] = DENSE_ONLY(sw_case_embedding_backward, SW_FLOATS, NULL),
    [LOOM_OP_LAYER_NORM] = {sw_case_layer_norm, SW_GRAD, SW_FLOATS, SW_DENSE_LAYOUTS, 0, SW_ALL_SHAPES, NULL},
    [LOOM_OP_LAYER_NORM_BACKWARD] = DENSE_ONLY(sw_case_layer_norm_backward, SW_FLOATS, NULL),
    [LOOM_OP_ATTENTION] = {sw_case_attention, SW_GRAD, SW_FLOATS, SW_DENSE_LAYOUTS, 0, SW_ALL_SHAPES, NULL},
    [LOOM_OP_ATTENTION_BACKWARD] = DENSE_ONLY(sw_case_attention_backward, SW_FLOATS, NULL),
    [LOOM_OP_LINEAR_CROSS_ENTROPY] = {sw_case_linear_cross_entropy, SW_GRAD, SW_F32, SW_DENSE_LAYOUTS, 0,
                                      SW_ALL_SHAPES, "f32-only"},
    [LOOM_OP_LINEAR_CROSS_ENTROPY_BACKWARD] = DENSE_ONLY(sw_case_linear_cross_entropy_backward, SW_F32, "f32-only"),
};

/* Known failures: configurations skipped (with a printed line) until the
 * bug is fixed. Each says what goes wrong. */
typedef struct sw_known_failure {
  loom_op_id op;
  unsigned dtypes, layouts, shapes;
  int device; /* LOOM_CPU, LOOM_CUDA, or -1: both */
  const char *why;
} sw_known_failure;

#define SW_ATTN_WIDE "head dim 2048: loom's CUDA attention kernels take head dims up to 256"
static const sw_known_failure sw_known[] = {
    /* A limit, not a bug: the CUDA kernels refuse it with LOOM_ERR_UNSUPPORTED. */
    {LOOM_OP_ATTENTION, SW_FLOATS, SW_ALL_LAYOUTS, SW_SHAPE(SW_WIDE), LOOM_CUDA, SW_ATTN_WIDE},
    {LOOM_OP_ATTENTION_BACKWARD, SW_FLOATS, SW_ALL_LAYOUTS, SW_SHAPE(SW_WIDE), LOOM_CUDA, SW_ATTN_WIDE},
};

static const char *known_failure(int id, unsigned dt, sw_layout l, sw_shape s, loom_device dev) {
  for (size_t k = 0; k < sizeof sw_known / sizeof sw_known[0]; k++) {
    const sw_known_failure *f = &sw_known[k];
    if ((int)f->op == id && (f->dtypes & dt) && (f->layouts >> l & 1) && (f->shapes >> s & 1) &&
        (f->device < 0 || f->device == (int)dev.kind))
      return f->why;
  }
  return NULL;
}

/* ---- the table checks ------------------------------------------------------------ */

static const char *op_name(int id) {
  const loom_op_def *d = loom_op_get((loom_op_id)id);
  return d && d->name ? d->name : "(unnamed op)";
}

/* One word: letters, digits and '-' only. */
static bool one_word(const char *s) {
  if (!s || !*s) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-')) return false;
  return true;
}

/* Why op id fails the table checks, or NULL. */
static const char *table_problem(int id, char *buf, size_t n) {
  const sw_case *cs = &g_cases[id];
  bool has_rule = loom_grad_get((loom_op_id)id) != NULL;
  const char *name = op_name(id);
  if (!cs->run) {
    snprintf(buf, n, "op %s (id %d) has no case in tests/test_op_sweep.c", name, id);
  } else if (cs->grad && !has_rule) {
    snprintf(buf, n, "op %s (id %d) is differentiable but has no grad-table entry (lib/autograd/grad_table.c)", name,
             id);
  } else if (!cs->grad && has_rule) {
    snprintf(buf, n, "op %s (id %d) has a grad-table entry but its case checks no gradient", name, id);
  } else if (!(cs->dtypes & SW_F32)) {
    snprintf(buf, n, "op %s (id %d): its case does not cover f32", name, id);
  } else if (!(cs->dtypes & (SW_F16 | SW_BF16)) && !one_word(cs->no_half)) {
    snprintf(buf, n, "op %s (id %d) covers neither f16 nor bf16: say why in one word in its entry (e.g. \"integer-only\")",
             name, id);
  } else if (cs->layouts & cs->refuses) {
    snprintf(buf, n, "op %s (id %d) declares a layout both handled and refused", name, id);
  } else if (((cs->layouts | cs->refuses) & SW_DENSE_LAYOUTS) != SW_DENSE_LAYOUTS) {
    snprintf(buf, n, "op %s (id %d) does not declare whether it handles or refuses the sliced and transposed layouts",
             name, id);
  } else if ((cs->shapes & SW_EVERY_SHAPE) != SW_EVERY_SHAPE) {
    int s = 0;
    while (cs->shapes >> s & 1) s++;
    snprintf(buf, n, "op %s (id %d) does not cover the %s shape class", name, id, sw_shape_name((sw_shape)s));
  } else {
    return NULL;
  }
  return buf;
}

/* Every op id in one go: the full list of ops without a case (or whose
 * declarations are incomplete, or disagree with the grad table). */
Test(op_sweep, every_op_has_a_case) {
  char report[8192] = "", line[256];
  for (int id = 0; id < LOOM_OP_COUNT; id++) {
    if (!table_problem(id, line, sizeof line)) continue;
    strncat(report, "\n  ", sizeof report - strlen(report) - 1);
    strncat(report, line, sizeof report - strlen(report) - 1);
  }
  cr_assert(report[0] == '\0', "the op sweep does not cover the op table:%s", report);
}

/* ---- running an op's configurations ----------------------------------------------- */

static bool sweep_full(void) {
  const char *e = getenv("LOOM_SWEEP_FULL");
  return e && *e && strcmp(e, "0") != 0;
}

/* LOOM_SWEEP_OPS=name,name,...: only these ops' configurations run (the
 * table checks still run for every op). For a focused rerun on a GPU, e.g.
 * with CUDA_LAUNCH_BLOCKING=1 so that a faulting kernel is named by the
 * launch that fails rather than by a later read. */
static bool op_selected(const char *name) {
  const char *e = getenv("LOOM_SWEEP_OPS");
  if (!e || !*e) return true;
  size_t n = strlen(name);
  for (const char *p = e; *p;) {
    const char *q = strchr(p, ',');
    size_t len = q ? (size_t)(q - p) : strlen(p);
    if (len == n && !strncmp(p, name, n)) return true;
    if (!q) break;
    p = q + 1;
  }
  return false;
}

static const loom_dtype DTYPES[3] = {LOOM_F32, LOOM_F16, LOOM_BF16};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether this run visits the configuration (see the modes above). */
static bool planned(loom_dtype dt, sw_layout l, sw_shape s, bool full) {
  if (full || (s != SW_BIG && s != SW_WIDE)) return true;
  return dt == LOOM_F32 && l == SW_CONTIGUOUS;
}

/* One op: its table checks, then its case under every configuration. */
static void sweep_op(int id, loom_device dev) {
  char why[256];
  const char *problem = table_problem(id, why, sizeof why);
  cr_assert_null(problem, "%s", problem);
  const sw_case *cs = &g_cases[id];
  if (!op_selected(op_name(id))) return;
  bool full = sweep_full();
  /* One CPU thread: on the small shapes more only add fork/join waits
   * (seconds on a loaded machine); the kernels' chunking runs either way. */
  if (!full) loom_set_num_threads(1);
  char devname[32];
  loom_device_str(dev, devname, sizeof devname);
  int ran = 0;
  double total = 0, slowest = 0;
  char slowest_ctx[sizeof sw_ctx] = "";
  for (int k = 0; k < 3; k++) {
    if (!(cs->dtypes >> k & 1)) continue;
    for (int l = 0; l < SW_NLAYOUTS; l++) {
      if (!((cs->layouts | cs->refuses) >> l & 1)) continue;
      for (int s = 0; s < SW_NSHAPES; s++) {
        if (!(cs->shapes >> s & 1) || !planned(DTYPES[k], (sw_layout)l, (sw_shape)s, full)) continue;
        snprintf(sw_ctx, sizeof sw_ctx, "%s [%s, %s, %s, %s]", op_name(id), loom_dtype_name(DTYPES[k]),
                 sw_layout_name((sw_layout)l), sw_shape_name((sw_shape)s), devname);
        tk_where = sw_ctx;
        const char *known = known_failure(id, 1u << k, (sw_layout)l, (sw_shape)s, dev);
        if (known) {
          cr_log_warn("op sweep: known failure, skipped: %s: %s", sw_ctx, known);
          continue;
        }
        bool big = s == SW_BIG || s == SW_WIDE;
        sw_config c = {DTYPES[k], (sw_layout)l, (sw_shape)s, dev, cs->refuses >> l & 1, big ? (full ? 16 : 2) : 0};
        tk_seed(((uint64_t)id * 4 + (uint64_t)k) * 64 + (uint64_t)(l * SW_NSHAPES + s));
        loom_clear_error();
        sw_strided_inputs = 0;
        double t0 = now_s();
        loom_scope_begin();
        cs->run(&c);
        loom_scope_end();
        double dt = now_s() - t0;
        total += dt;
        if (dt > slowest) slowest = dt, memcpy(slowest_ctx, sw_ctx, sizeof sw_ctx);
        ran++;
      }
    }
  }
  cr_log_info("op sweep: %s on %s: %d configurations in %.2f s (slowest: %s, %.2f s)", op_name(id), devname, ran,
              total, slowest_ctx, slowest);
  tk_leak_check();
}

static int g_ids[LOOM_OP_COUNT];

static struct criterion_test_params op_ids(void) {
  for (int i = 0; i < LOOM_OP_COUNT; i++) g_ids[i] = i;
  return cr_make_param_array(int, g_ids, LOOM_OP_COUNT);
}

ParameterizedTestParameters(op_sweep_cpu, op) { return op_ids(); }
ParameterizedTest(int *id, op_sweep_cpu, op) {
  tk_require_device(loom_cpu());
  sweep_op(*id, loom_cpu());
}

/* The same cases with every input on the GPU (and TF32 off: f32 results
 * are held to f32 tolerances). */
ParameterizedTestParameters(op_sweep_cuda, op) { return op_ids(); }
ParameterizedTest(int *id, op_sweep_cuda, op) {
  tk_require_device(loom_cuda(0));
  loom_set_allow_tf32(false);
  sweep_op(*id, loom_cuda(0));
}
