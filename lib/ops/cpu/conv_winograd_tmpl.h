/* conv_winograd_tmpl.h (internal) — the kernels of conv_winograd_kern.h,
 * written once over a vector type and included by conv_winograd_x86.c once
 * per instruction set, with these defined: TGT (the target attribute), VL
 * (floats per vector: 16 or 8), V (the vector type), WGN(name) (the ISA's
 * function name), V_LOAD, V_STORE, V_ZERO, V_ADD, V_SUB, V_MAX, V_SET1,
 * V_FMADD, V_LOAD_F16 / V_LOAD_BF16 (VL 16-bit values widened: exact) and
 * V_STORE_F16 / V_STORE_BF16 (rounded to nearest even as core/half.h does,
 * bit for bit), UNROLL(n). No include guard; it undefines all of those but
 * UNROLL at its end, so the next instruction set defines them afresh.
 *
 * Activations may be f32, f16 or bf16: widened as they are loaded and
 * rounded as they are stored, so a 16-bit convolution gives the f32
 * convolution's results on the widened values, rounded once. */

/* VL activations at element i of p (dtype dt) as f32, and the store back. */
#define WG_LD(p, i, dt)                                                                 \
  ((dt) == LOOM_F16    ? V_LOAD_F16((const uint16_t *)(p) + (i))                       \
   : (dt) == LOOM_BF16 ? V_LOAD_BF16((const uint16_t *)(p) + (i))                      \
                       : V_LOAD((const float *)(p) + (i)))
#define WG_ST(p, i, dt, v)                                                              \
  do {                                                                                  \
    if ((dt) == LOOM_F16) V_STORE_F16((uint16_t *)(p) + (i), (v));                      \
    else if ((dt) == LOOM_BF16) V_STORE_BF16((uint16_t *)(p) + (i), (v));               \
    else V_STORE((float *)(p) + (i), (v));                                              \
  } while (0)

/* V = Bᵀ d B, Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. */
static inline TGT void WGN(bt_d_b)(V d[16], V v[16]) {
  V t[16];
  for (int j = 0; j < 4; j++) { /* rows: t = Bᵀ d */
    t[0 * 4 + j] = V_SUB(d[0 * 4 + j], d[2 * 4 + j]);
    t[1 * 4 + j] = V_ADD(d[1 * 4 + j], d[2 * 4 + j]);
    t[2 * 4 + j] = V_SUB(d[2 * 4 + j], d[1 * 4 + j]);
    t[3 * 4 + j] = V_SUB(d[1 * 4 + j], d[3 * 4 + j]);
  }
  for (int i = 0; i < 4; i++) { /* columns: v = t B */
    v[i * 4 + 0] = V_SUB(t[i * 4 + 0], t[i * 4 + 2]);
    v[i * 4 + 1] = V_ADD(t[i * 4 + 1], t[i * 4 + 2]);
    v[i * 4 + 2] = V_SUB(t[i * 4 + 2], t[i * 4 + 1]);
    v[i * 4 + 3] = V_SUB(t[i * 4 + 1], t[i * 4 + 3]);
  }
}

static TGT void WGN(input)(const loom_wg_geom *w, const void *in, loom_dtype dt, int64_t cin, int64_t t0, int64_t nt,
                           float *v) {
  const int64_t per_img = w->TH * w->TW;
  for (int64_t t = 0; t < nt; t++) {
    int64_t gt = t0 + t;
    if (gt >= w->ntiles) {
      loom_wg_zero_tile(v, 16, nt, t, cin);
      continue;
    }
    int64_t n = gt / per_img, r = gt % per_img, y0 = (r / w->TW) * 2 - 1, x0 = (r % w->TW) * 2 - 1;
    const int64_t img = n * w->H * w->W * cin;
    if (y0 >= 0 && x0 >= 0 && y0 + 3 < w->H && x0 + 3 < w->W) {
      /* Inside the image (most tiles): fixed offsets, no zero taps. */
      const int64_t base = img + (y0 * w->W + x0) * cin, rs = w->W * cin;
      for (int64_t c = 0; c < cin; c += VL) {
        V d[16], o[16];
        for (int i = 0; i < 4; i++)
          for (int j = 0; j < 4; j++) d[i * 4 + j] = WG_LD(in, base + i * rs + j * cin + c, dt);
        WGN(bt_d_b)(d, o);
        for (int p = 0; p < 16; p++) V_STORE(v + (p * nt + t) * cin + c, o[p]);
      }
      continue;
    }
    int64_t src[16]; /* element offsets; -1: padding */
    loom_wg_window(w, gt, 2, -1, 4, cin, src);
    for (int64_t c = 0; c < cin; c += VL) {
      V d[16], o[16];
      for (int e = 0; e < 16; e++) d[e] = src[e] >= 0 ? WG_LD(in, src[e] + c, dt) : V_ZERO();
      WGN(bt_d_b)(d, o);
      for (int p = 0; p < 16; p++) V_STORE(v + (p * nt + t) * cin + c, o[p]);
    }
  }
}

/* y = Aᵀ m A, Aᵀ = [1 1 1 0; 0 1 -1 -1]; outputs past the image edge dropped. */
static TGT void WGN(output)(const loom_wg_geom *w, const float *m, int64_t cout, int64_t t0, int64_t nt,
                            const float *bias, bool relu, void *out, loom_dtype dt) {
  const int64_t per_img = w->TH * w->TW;
  for (int64_t t = 0; t < nt && t0 + t < w->ntiles; t++) {
    int64_t gt = t0 + t;
    int64_t n = gt / per_img, r = gt % per_img, y0 = (r / w->TW) * 2, x0 = (r % w->TW) * 2;
    const int64_t img = n * w->H * w->W * cout;
    bool y1 = y0 + 1 < w->H, x1 = x0 + 1 < w->W;
    for (int64_t k = 0; k < cout; k += VL) {
      V e[16], s[8], o[4];
      for (int p = 0; p < 16; p++) e[p] = V_LOAD(m + (p * nt + t) * cout + k);
      for (int j = 0; j < 4; j++) { /* rows: s = Aᵀ e */
        s[0 * 4 + j] = V_ADD(V_ADD(e[0 * 4 + j], e[1 * 4 + j]), e[2 * 4 + j]);
        s[1 * 4 + j] = V_SUB(V_SUB(e[1 * 4 + j], e[2 * 4 + j]), e[3 * 4 + j]);
      }
      for (int i = 0; i < 2; i++) { /* columns: o = s A */
        o[i * 2 + 0] = V_ADD(V_ADD(s[i * 4 + 0], s[i * 4 + 1]), s[i * 4 + 2]);
        o[i * 2 + 1] = V_SUB(V_SUB(s[i * 4 + 1], s[i * 4 + 2]), s[i * 4 + 3]);
      }
      V bv = bias ? V_LOAD(bias + k) : V_ZERO();
      for (int q = 0; q < 4; q++) {
        int i = q / 2, j = q % 2;
        if ((i && !y1) || (j && !x1)) continue;
        V val = V_ADD(o[q], bv);
        if (relu) val = V_MAX(val, V_ZERO());
        WG_ST(out, img + ((y0 + i) * w->W + x0 + j) * cout + k, dt, val);
      }
    }
  }
}

/* e = A d Aᵀ, A = [1 0; 1 1; 1 -1; 0 -1]; dy past the image edge is zero. */
static TGT void WGN(dy)(const loom_wg_geom *w, const void *dy, loom_dtype dt, int64_t K, int64_t t0, int64_t nt,
                        float *e) {
  for (int64_t t = 0; t < nt; t++) {
    int64_t gt = t0 + t;
    if (gt >= w->ntiles) {
      loom_wg_zero_tile(e, 16, nt, t, K);
      continue;
    }
    int64_t src[4]; /* element offsets; -1: past the edge */
    loom_wg_window(w, gt, 2, 0, 2, K, src);
    for (int64_t k = 0; k < K; k += VL) {
      V d[4], s[8], o[16];
      for (int q = 0; q < 4; q++) d[q] = src[q] >= 0 ? WG_LD(dy, src[q] + k, dt) : V_ZERO();
      for (int j = 0; j < 2; j++) { /* rows: s = A d */
        s[0 * 2 + j] = d[0 * 2 + j];
        s[1 * 2 + j] = V_ADD(d[0 * 2 + j], d[1 * 2 + j]);
        s[2 * 2 + j] = V_SUB(d[0 * 2 + j], d[1 * 2 + j]);
        s[3 * 2 + j] = V_SUB(V_ZERO(), d[1 * 2 + j]);
      }
      for (int i = 0; i < 4; i++) { /* columns: o = s Aᵀ */
        o[i * 4 + 0] = s[i * 2 + 0];
        o[i * 4 + 1] = V_ADD(s[i * 2 + 0], s[i * 2 + 1]);
        o[i * 4 + 2] = V_SUB(s[i * 2 + 0], s[i * 2 + 1]);
        o[i * 4 + 3] = V_SUB(V_ZERO(), s[i * 2 + 1]);
      }
      for (int p = 0; p < 16; p++) V_STORE(e + (p * nt + t) * K + k, o[p]);
    }
  }
}

/* ---- F(4x4, 3x3): 6x6 input tiles, 36 points ------------------------------
 * Bᵀ = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0;
 *       0 2 -1 -2 1 0; 0 4 0 -5 0 1],
 * Aᵀ = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
 * (Lavin & Gray's; checked against a float64 correlation when written).
 * 1-D transforms over vectors x[k*xs], results to y[k*ys]. */
static inline TGT void WGN(bt6)(const V *x, int xs, V *y, int ys) {
  const V d0 = x[0], d1 = x[xs], d2 = x[2 * xs], d3 = x[3 * xs], d4 = x[4 * xs], d5 = x[5 * xs];
  const V c4 = V_SET1(4.0f), c5 = V_SET1(-5.0f), cm4 = V_SET1(-4.0f), c2 = V_SET1(2.0f);
  y[0] = V_FMADD(c4, d0, V_FMADD(c5, d2, d4));
  y[ys] = V_FMADD(cm4, V_ADD(d1, d2), V_ADD(d3, d4));
  y[2 * ys] = V_FMADD(c4, V_SUB(d1, d2), V_SUB(d4, d3));
  y[3 * ys] = V_FMADD(c2, V_SUB(d3, d1), V_SUB(d4, d2));
  y[4 * ys] = V_FMADD(c2, V_SUB(d1, d3), V_SUB(d4, d2));
  y[5 * ys] = V_FMADD(c4, d1, V_FMADD(c5, d3, d5));
}

/* Aᵀ: 6 -> 4. */
static inline TGT void WGN(at6)(const V *x, int xs, V *y, int ys) {
  const V a = V_ADD(x[xs], x[2 * xs]), b = V_SUB(x[xs], x[2 * xs]);
  const V c = V_ADD(x[3 * xs], x[4 * xs]), d = V_SUB(x[3 * xs], x[4 * xs]);
  y[0] = V_ADD(V_ADD(x[0], a), c);
  y[ys] = V_FMADD(V_SET1(2.0f), d, b);
  y[2 * ys] = V_FMADD(V_SET1(4.0f), c, a);
  y[3 * ys] = V_ADD(V_FMADD(V_SET1(8.0f), d, b), x[5 * xs]);
}

/* A = (Aᵀ)ᵀ: 4 -> 6. */
static inline TGT void WGN(a4)(const V *x, int xs, V *y, int ys) {
  const V e0 = x[0], e1 = x[xs], e2 = x[2 * xs], e3 = x[3 * xs];
  const V p = V_ADD(e0, e2), q = V_ADD(e1, e3);
  const V p2 = V_FMADD(V_SET1(4.0f), e2, e0), q2 = V_FMADD(V_SET1(8.0f), e3, V_ADD(e1, e1));
  y[0] = e0;
  y[ys] = V_ADD(p, q);
  y[2 * ys] = V_SUB(p, q);
  y[3 * ys] = V_ADD(p2, q2);
  y[4 * ys] = V_SUB(p2, q2);
  y[5 * ys] = e3;
}

static TGT void WGN(input4)(const loom_wg_geom *w, const void *in, loom_dtype dt, int64_t cin, int64_t t0, int64_t nt,
                            float *v) {
  for (int64_t t = 0; t < nt; t++) {
    int64_t gt = t0 + t;
    if (gt >= w->ntiles) {
      loom_wg_zero_tile(v, 36, nt, t, cin);
      continue;
    }
    int64_t src[36]; /* element offsets; -1: padding */
    loom_wg_window(w, gt, 4, -1, 6, cin, src);
    for (int64_t c = 0; c < cin; c += VL) {
      V d[36], u[36], o[6];
      for (int e = 0; e < 36; e++) d[e] = src[e] >= 0 ? WG_LD(in, src[e] + c, dt) : V_ZERO();
      for (int j = 0; j < 6; j++) WGN(bt6)(d + j, 6, u + j, 6); /* columns: Bᵀ d */
      for (int i = 0; i < 6; i++) {                              /* rows: (Bᵀ d) B */
        WGN(bt6)(u + i * 6, 1, o, 1);
        for (int k = 0; k < 6; k++) V_STORE(v + ((i * 6 + k) * nt + t) * cin + c, o[k]);
      }
    }
  }
}

static TGT void WGN(output4)(const loom_wg_geom *w, const float *m, int64_t cout, int64_t t0, int64_t nt,
                             const float *bias, bool relu, void *out, loom_dtype dt) {
  const int64_t per_img = w->TH * w->TW;
  for (int64_t t = 0; t < nt && t0 + t < w->ntiles; t++) {
    int64_t gt = t0 + t;
    int64_t n = gt / per_img, r = gt % per_img, y0 = (r / w->TW) * 4, x0 = (r % w->TW) * 4;
    const int64_t img = n * w->H * w->W * cout;
    const int ny = (int)(w->H - y0 < 4 ? w->H - y0 : 4), nx = (int)(w->W - x0 < 4 ? w->W - x0 : 4);
    for (int64_t k = 0; k < cout; k += VL) {
      V e[36], s[24], o[4];
      for (int p = 0; p < 36; p++) e[p] = V_LOAD(m + (p * nt + t) * cout + k);
      for (int j = 0; j < 6; j++) WGN(at6)(e + j, 6, s + j, 6); /* columns: Aᵀ e */
      V bv = bias ? V_LOAD(bias + k) : V_ZERO();
      for (int i = 0; i < ny; i++) { /* rows: (Aᵀ e) A */
        WGN(at6)(s + i * 6, 1, o, 1);
        for (int j = 0; j < nx; j++) {
          V val = V_ADD(o[j], bv);
          if (relu) val = V_MAX(val, V_ZERO());
          WG_ST(out, img + ((y0 + i) * w->W + x0 + j) * cout + k, dt, val);
        }
      }
    }
  }
}

static TGT void WGN(dy4)(const loom_wg_geom *w, const void *dy, loom_dtype dt, int64_t K, int64_t t0, int64_t nt,
                         float *e) {
  for (int64_t t = 0; t < nt; t++) {
    int64_t gt = t0 + t;
    if (gt >= w->ntiles) {
      loom_wg_zero_tile(e, 36, nt, t, K);
      continue;
    }
    int64_t src[16]; /* element offsets; -1: past the edge */
    loom_wg_window(w, gt, 4, 0, 4, K, src);
    for (int64_t k = 0; k < K; k += VL) {
      V d[16], s[24], o[6];
      for (int q = 0; q < 16; q++) d[q] = src[q] >= 0 ? WG_LD(dy, src[q] + k, dt) : V_ZERO();
      for (int j = 0; j < 4; j++) WGN(a4)(d + j, 4, s + j, 4); /* columns: A d, s [6][4] */
      for (int i = 0; i < 6; i++) {                             /* rows: (A d) Aᵀ */
        WGN(a4)(s + i * 4, 1, o, 1);
        for (int jj = 0; jj < 6; jj++) V_STORE(e + ((i * 6 + jj) * nt + t) * K + k, o[jj]);
      }
    }
  }
}

/* The GEMM micro-kernel: out[r][VL*j ..] (+)= Σ_d a[r*ars + d*acs] *
 * b[d*ldb + VL*j ..] for r < MR, j < NV, the accumulators in registers. */
#define WG_MK(MR, NV)                                                                                        \
  static TGT void WGN(mk_##MR##x##NV)(const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb, \
                                      int64_t depth, float *out, int64_t ldo, bool accumulate) {             \
    V acc[MR][NV];                                                                                          \
    UNROLL(12) for (int r = 0; r < MR; r++) UNROLL(4) for (int j = 0; j < NV; j++) acc[r][j] = V_ZERO();    \
    for (int64_t d = 0; d < depth; d++) {                                                                   \
      V bv[NV];                                                                                             \
      UNROLL(4) for (int j = 0; j < NV; j++) bv[j] = V_LOAD(b + d * ldb + VL * j);                          \
      const float *ad = a + d * acs;                                                                        \
      UNROLL(12) for (int r = 0; r < MR; r++) {                                                             \
        V av = V_SET1(ad[r * ars]);                                                                         \
        UNROLL(4) for (int j = 0; j < NV; j++) acc[r][j] = V_FMADD(av, bv[j], acc[r][j]);                   \
      }                                                                                                     \
    }                                                                                                       \
    UNROLL(12) for (int r = 0; r < MR; r++) UNROLL(4) for (int j = 0; j < NV; j++) {                        \
      float *o = out + r * ldo + VL * j;                                                                    \
      V_STORE(o, accumulate ? V_ADD(V_LOAD(o), acc[r][j]) : acc[r][j]);                                     \
    }                                                                                                       \
  }

#if VL == 16
/* Up to 24 of 32 registers of accumulators: tile rows (multiples of 12) as
 * 12x1, 12x2, 6x3, 6x4; channel rows (multiples of 16) as 8x1, 8x2, 4x3,
 * 4x4; 64 columns at a time. */
WG_MK(12, 1)
WG_MK(12, 2)
WG_MK(6, 3)
WG_MK(6, 4)
WG_MK(8, 1)
WG_MK(8, 2)
WG_MK(4, 3)
WG_MK(4, 4)

static TGT void WGN(gemm)(int64_t rows, int64_t ncol, int64_t depth, const float *a, int64_t ars, int64_t acs,
                          const float *b, int64_t ldb, float *out, int64_t ldo, bool accumulate) {
  for (int64_t c0 = 0; c0 < ncol; c0 += 64) {
    int nv = (int)((ncol - c0) / 16 < 4 ? (ncol - c0) / 16 : 4);
    wg_mk_fn f;
    int64_t mr;
    if (rows % 12 == 0) {
      f = nv == 1 ? WGN(mk_12x1) : nv == 2 ? WGN(mk_12x2) : nv == 3 ? WGN(mk_6x3) : WGN(mk_6x4);
      mr = nv <= 2 ? 12 : 6;
    } else {
      f = nv == 1 ? WGN(mk_8x1) : nv == 2 ? WGN(mk_8x2) : nv == 3 ? WGN(mk_4x3) : WGN(mk_4x4);
      mr = nv <= 2 ? 8 : 4;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += mr)
      f(a + r0 * ars, ars, acs, b + c0, ldb, depth, out + r0 * ldo + c0, ldo, accumulate);
  }
}
#else
/* Up to 12 of 16 registers: tile rows take 16 columns at a time (6x2: six
 * broadcasts and two loads per twelve FMAs; 12x1 for a last 8), channel
 * rows 24 (4x3, then 4x2 or 4x1). */
WG_MK(12, 1)
WG_MK(6, 2)
WG_MK(4, 1)
WG_MK(4, 2)
WG_MK(4, 3)

static TGT void WGN(gemm)(int64_t rows, int64_t ncol, int64_t depth, const float *a, int64_t ars, int64_t acs,
                          const float *b, int64_t ldb, float *out, int64_t ldo, bool accumulate) {
  const bool tiles = rows % 12 == 0;
  const int64_t step = tiles ? 16 : 24;
  for (int64_t c0 = 0; c0 < ncol; c0 += step) {
    int nv = (int)((ncol - c0) / 8 < step / 8 ? (ncol - c0) / 8 : step / 8);
    wg_mk_fn f;
    int64_t mr;
    if (tiles) {
      f = nv == 1 ? WGN(mk_12x1) : WGN(mk_6x2);
      mr = nv == 1 ? 12 : 6;
    } else {
      f = nv == 1 ? WGN(mk_4x1) : nv == 2 ? WGN(mk_4x2) : WGN(mk_4x3);
      mr = 4;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += mr)
      f(a + r0 * ars, ars, acs, b + c0, ldb, depth, out + r0 * ldo + c0, ldo, accumulate);
  }
}
#endif
#undef WG_MK
#undef WG_LD
#undef WG_ST
#undef TGT
#undef VL
#undef V
#undef WGN
#undef V_LOAD
#undef V_STORE
#undef V_ZERO
#undef V_ADD
#undef V_SUB
#undef V_MAX
#undef V_SET1
#undef V_FMADD
#undef V_LOAD_F16
#undef V_LOAD_BF16
#undef V_STORE_F16
#undef V_STORE_BF16
