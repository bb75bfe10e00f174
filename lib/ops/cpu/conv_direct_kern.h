/* conv_direct_kern.h (internal) — the register-blocked micro-kernels of the
 * direct convolution (conv_direct.c), and the argument blocks they take.
 * conv_direct_x86.c instantiates them for AVX-512 (16 floats per vector)
 * and AVX2+FMA (8); nothing here may be called unless the CPU has the ISA
 * (conv_direct.c checks). Below, 16 is the vector width VL of the ISA.
 *
 * Pixel-broadcast kernel (forward, backward-data): a tile of MR output
 * pixels of one row x OVB vectors of 16 output channels stays in registers
 *   acc[i][j] = sum over taps t, reduction channels c of
 *               x[xoff[t] + i*PS + c] * w[t][c*ws + 16j .. 16j+15]
 * with x a padded NHWC image (channels contiguous, PS floats between the
 * tile's pixels: a compile-time constant for the common pitches, so every
 * broadcast is one FMA with an immediate address) and the weights packed
 * [tap][c][o] (vectors over o). Bias and ReLU are applied to the tile
 * before its one store.
 *
 * Channel-broadcast kernel (backward-filter): a tile of MRC input channels x
 * OVB vectors of 16 output channels for one tap, summed over all output
 * pixels of an image:
 *   acc[i][j] = sum over pixels p of x[pix(p) + i] * dy[p][16j .. 16j+15]
 * then added to the partial dW [c][o]. */
#ifndef LOOM_OPS_CPU_CONV_DIRECT_KERN_H
#define LOOM_OPS_CPU_CONV_DIRECT_KERN_H

#include <stdbool.h>
#include <stdint.h>

#define LOOM_CONV_MAX_TAPS 64  /* KH*KW handled by the direct path */

typedef struct loom_pb_args {
  const float *x;               /* input at the tile's first pixel, first reduction channel */
  const int64_t *xoff;          /* per tap: offset of that tap's pixel, in floats */
  const float *const *w;        /* per tap: packed weights of this output block, [c][ws] */
  int ntaps;
  int64_t K;                    /* reduction channels */
  int64_t ws;                   /* floats between the weights of consecutive reduction channels */
  int64_t ps;                   /* input pixel pitch (the runtime-pitch kernels read this) */
  float *y;                     /* output for the tile's first pixel, first channel of the block */
  int64_t yps;                  /* floats between output pixels */
  int mr;                       /* pixels to store (<= MR) */
  uint16_t lastmask;            /* lanes to store of the block's last vector (low VL bits, a prefix) */
  const float *bias;            /* NULL, or the bias of the block's first channel */
  bool relu;
} loom_pb_args;
typedef void (*loom_pb_fn)(const loom_pb_args *a);

typedef struct loom_cb_args {
  const float *x;               /* input pixel of output (0, 0) for this tap, first channel of the block */
  int64_t xrs, xps;             /* input floats per output row / per output column */
  const float *dy;              /* output gradient at pixel (0, 0), first channel of the block */
  int64_t dyrs, dyps;           /* dy floats per output row / per output column */
  int64_t rows, cols;           /* output rows and columns */
  float *dw;                    /* partial dW at [c0][o0] (+=) */
  int64_t dws;                  /* floats between channels of dw */
  int mrc;                      /* channels to add (<= MRC) */
  uint16_t lastmask;            /* lanes of the block's last vector */
} loom_cb_args;
typedef void (*loom_cb_fn)(const loom_cb_args *a);

/* A kernel with its tile: pixel-broadcast (mr pixels, ps = 0 for the
 * runtime-pitch variant) or channel-broadcast (mr channels). */
typedef struct loom_pb_kernel {
  int mr, ovb, ps;
  loom_pb_fn fn;
} loom_pb_kernel;
typedef struct loom_cb_kernel {
  int mrc, ovb;
  loom_cb_fn fn;
} loom_cb_kernel;

/* One instruction set's kernels. */
typedef struct loom_conv_isa {
  const char *name;             /* "avx512", "avx2" */
  int vl;                       /* floats per vector */
  const loom_pb_kernel *pb;
  int npb;
  const loom_cb_kernel *cb;
  int ncb;
} loom_conv_isa;

/* conv_direct_x86.c (npb == 0 where the ISA cannot be compiled). */
extern const loom_conv_isa loom_conv_isa_avx512;
extern const loom_conv_isa loom_conv_isa_avx2;

#endif
