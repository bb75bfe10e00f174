/* embedding_emu.cpp — loom's CUDA embedding kernels (lib/ops/cuda/embedding.cu)
 * run on the CPU under cuda_emu.h, against a plain CPU reference, bit for
 * bit: the forward gather (raw rows; zero rows for bad indices), the
 * backward's sort (keys and positions in the scratch: the stable order,
 * positions ascending within an index, bad keys V last) and dweight (each
 * row the f32 sum of its gy rows in position order, rounded once), and the
 * first bad position in the deferred error record. f32 and bf16; i32, i64
 * and u8 indices; small shapes, repeated indices, every index the same,
 * bad ones (-1, V), and user sizes (8192 tokens into 50257 rows; 16384
 * into 84). Some cases run again with the emulator's threads in descending
 * order (emu_reverse), so a missing __syncwarp would show. It proves the
 * kernels' logic (atomics, scan, warp ranks, barriers), not the GPU: no GPU
 * has run them. Prints one line per case; exit status 1 on any mismatch. */
#include "cuda_emu.h"

#include "ops/cuda/embedding.cu"

#include <cstdio>
#include <cstring>

#include "core/half.h"

static uint64_t g_rng = 0x2808;
static uint64_t next_u64() {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return g_rng;
}
static float urand() { return (float)((double)(next_u64() >> 11) * 0x1p-52 - 1.0); } /* [-1, 1) */

/* Storage of dtype dt (0 f32, 2 bf16) as raw bits. */
struct buf {
  int dt;
  std::vector<uint32_t> f;
  std::vector<uint16_t> h;
  buf(int dt_, size_t n) : dt(dt_), f(dt_ == 0 ? n : 0), h(dt_ == 0 ? 0 : n) {}
  void *ptr() { return dt == 0 ? (void *)f.data() : (void *)h.data(); }
  void set(size_t i, float v) {
    if (dt == 0) f[i] = loom_f32_bits(v);
    else h[i] = loom_bfloat_from_f32(v);
  }
  float get(size_t i) const { return dt == 0 ? loom_bits_f32(f[i]) : loom_bits_f32((uint32_t)h[i] << 16); }
  uint32_t bits(size_t i) const { return dt == 0 ? f[i] : h[i]; }
  uint32_t round_bits(float v) const { return dt == 0 ? loom_f32_bits(v) : loom_bfloat_from_f32(v); }
};

/* Index tensor of dtype idt (3 i32, 4 i64, 5 u8). */
struct ibuf {
  int idt;
  std::vector<int32_t> i32;
  std::vector<int64_t> i64;
  std::vector<uint8_t> u8;
  ibuf(int idt_, size_t n) : idt(idt_) {
    if (idt == 3) i32.resize(n);
    else if (idt == 4) i64.resize(n);
    else u8.resize(n);
  }
  const void *ptr() const { return idt == 3 ? (const void *)i32.data() : idt == 4 ? (const void *)i64.data() : u8.data(); }
  void set(size_t i, int64_t v) {
    if (idt == 3) i32[i] = (int32_t)v;
    else if (idt == 4) i64[i] = v;
    else u8[i] = (uint8_t)v;
  }
  int64_t get(size_t i) const { return idt == 3 ? i32[i] : idt == 4 ? i64[i] : u8[i]; }
};

enum fill { RANDOM, SAME, SORTED_DESC };
struct ecase {
  const char *name;
  int64_t n, V, D;
  int idt;
  fill how;
  std::vector<std::pair<int64_t, int64_t>> bad; /* (position, value) planted after the fill */
};

static int fails, failed_cases;
static void check(bool ok, const char *name, const char *what, int dt, bool rev, const char *detail) {
  if (!ok) {
    printf("FAIL %s %s%s: %s (%s)\n", name, dt ? "bf16" : "f32", rev ? " reversed" : "", what, detail);
    fails++;
  }
}

static void run(const ecase &c, int dt, bool rev) {
  emu_reverse = rev;
  const int64_t n = c.n, V = c.V, D = c.D;
  const int fails0 = fails;
  char msg[160] = "";
  ibuf idx(c.idt, (size_t)n);
  const int64_t same = c.V / 3;
  for (int64_t i = 0; i < n; i++)
    idx.set(i, c.how == SAME ? same : c.how == SORTED_DESC ? (V - 1) - i * V / n : (int64_t)(next_u64() % (uint64_t)V));
  for (auto &b : c.bad) idx.set(b.first, b.second);
  int64_t first_bad = -1;
  for (int64_t i = 0; i < n && first_bad < 0; i++)
    if (idx.get(i) < 0 || idx.get(i) >= V) first_bad = i;

  /* ---- forward */
  buf w(dt, (size_t)(V * D)), out(dt, (size_t)(n * D));
  for (int64_t e = 0; e < V * D; e++) w.set(e, urand());
  unsigned long long bad = ~0ull;
  loom_cu_deferred_error rec;
  rec.row = ~0ull, rec.label = rec.classes = rec.op = 0;
  check(loom_cu_embedding_fwd(dt, w.ptr(), V, D, c.idt, idx.ptr(), n, out.ptr(), &bad, &rec, nullptr) == cudaSuccess,
        c.name, "forward launch", dt, rev, "");
  bool ok = true;
  for (int64_t i = 0; i < n && ok; i++) {
    const int64_t v = idx.get(i);
    for (int64_t j = 0; j < D && ok; j++) {
      const uint32_t want = v < 0 || v >= V ? 0 : w.bits(v * D + j);
      if (out.bits(i * D + j) != want) {
        ok = false;
        snprintf(msg, sizeof msg, "out[%lld, %lld] = %#x, want %#x", (long long)i, (long long)j, out.bits(i * D + j), want);
      }
    }
  }
  check(ok, c.name, "forward rows", dt, rev, msg);
  /* The first bad position (or none) published with its index, V and op; *bad cleared. */
  auto check_record = [&](int op, const char *what) {
    const bool rec_ok = first_bad < 0 ? rec.row == ~0ull
                                      : rec.row == (unsigned long long)first_bad && rec.label == idx.get(first_bad) &&
                                            rec.classes == V && rec.op == op;
    snprintf(msg, sizeof msg, "row %lld label %lld classes %lld op %lld, want row %lld", (long long)rec.row,
             (long long)rec.label, (long long)rec.classes, (long long)rec.op, (long long)first_bad);
    check(rec_ok && bad == ~0ull, c.name, what, dt, rev, msg);
  };
  check_record(DEFERRED_EMBEDDING, "forward deferred record");

  /* ---- backward */
  buf gy(dt, (size_t)(n * D)), dw(dt, (size_t)(V * D));
  for (int64_t e = 0; e < n * D; e++) gy.set(e, urand());
  for (int64_t e = 0; e < V * D; e++) dw.set(e, 1.0f); /* garbage the launcher must clear */
  const size_t sb = loom_cu_embedding_bwd_scratch(n, V);
  std::vector<uint64_t> scratch((sb + 7) / 8, 0x5a5a5a5a5a5a5a5aull); /* garbage too */
  bad = ~0ull;
  rec.row = ~0ull, rec.label = rec.classes = rec.op = 0;
  check(loom_cu_embedding_bwd(dt, gy.ptr(), V, D, c.idt, idx.ptr(), n, dw.ptr(), scratch.data(), sb, &bad, &rec,
                              nullptr) == cudaSuccess,
        c.name, "backward launch", dt, rev, "");
  if (n > 0) {
    /* The stable order: a counting sort on the host, keys 0..V (V = bad). */
    std::vector<int64_t> start((size_t)V + 2, 0);
    for (int64_t i = 0; i < n; i++) {
      const int64_t v = idx.get(i);
      start[(size_t)(v < 0 || v >= V ? V : v) + 1]++;
    }
    for (int64_t v = 0; v <= V; v++) start[(size_t)v + 1] += start[(size_t)v];
    std::vector<int32_t> want_key((size_t)n), want_pos((size_t)n);
    for (int64_t i = 0; i < n; i++) {
      const int64_t v0 = idx.get(i), v = v0 < 0 || v0 >= V ? V : v0;
      const int64_t at = start[(size_t)v]++;
      want_key[(size_t)at] = (int32_t)v, want_pos[(size_t)at] = (int32_t)i;
    }
    /* The scratch as loom_cu_embedding_bwd lays it out: key_in, key_out, pos_out, count. */
    const size_t a = align256((size_t)n * sizeof(int32_t));
    const int32_t *key_out = (const int32_t *)((const char *)scratch.data() + a),
                  *pos_out = (const int32_t *)((const char *)scratch.data() + 2 * a);
    ok = true;
    for (int64_t k = 0; k < n && ok; k++)
      if (key_out[k] != want_key[(size_t)k] || pos_out[k] != want_pos[(size_t)k]) {
        ok = false;
        snprintf(msg, sizeof msg, "sorted entry %lld = (key %d, pos %d), want (key %d, pos %d)", (long long)k,
                 key_out[k], pos_out[k], want_key[(size_t)k], want_pos[(size_t)k]);
      }
    check(ok, c.name, "backward sort order", dt, rev, msg);
  }
  /* dweight: f32 sums in position order, rounded once. */
  std::vector<float> acc((size_t)(V * D), 0.0f);
  for (int64_t i = 0; i < n; i++) {
    const int64_t v = idx.get(i);
    if (v < 0 || v >= V) continue;
    for (int64_t j = 0; j < D; j++) acc[(size_t)(v * D + j)] += gy.get((size_t)(i * D + j));
  }
  ok = true;
  for (int64_t e = 0; e < V * D && ok; e++)
    if (dw.bits((size_t)e) != dw.round_bits(acc[(size_t)e])) {
      ok = false;
      snprintf(msg, sizeof msg, "dw[%lld, %lld] = %#x, want %#x", (long long)(e / D), (long long)(e % D),
               dw.bits((size_t)e), dw.round_bits(acc[(size_t)e]));
    }
  check(ok, c.name, "backward dweight", dt, rev, msg);
  check_record(DEFERRED_EMBEDDING_BACKWARD, "backward deferred record");

  failed_cases += fails != fails0;
  printf("%s %s [n %lld, V %lld, D %lld] %s%s\n", fails == fails0 ? "ok  " : "FAIL", c.name, (long long)n, (long long)V,
         (long long)D, dt ? "bf16" : "f32", rev ? " reversed" : "");
  emu_reverse = false;
}

int main() {
  const std::vector<ecase> small = {
      {"one", 1, 1, 1, 4, RANDOM, {}},
      {"repeats", 37, 5, 3, 3, RANDOM, {}},
      {"two column tiles", 100, 1000, 300, 4, RANDOM, {}},
      {"every index the same", 64, 7, 16, 4, SAME, {}},
      {"descending", 70, 70, 5, 3, SORTED_DESC, {}},
      {"bad -1 and V", 50, 10, 4, 4, RANDOM, {{17, -1}, {9, 10}, {40, 10}}},
      {"bad V only, u8", 90, 84, 6, 5, RANDOM, {{3, 84}, {89, 255}}},
      {"no indices", 0, 9, 4, 4, RANDOM, {}},
      {"no rows: every index bad", 5, 0, 3, 4, SAME, {}},
      {"D = 0", 33, 8, 0, 4, RANDOM, {{20, 8}}},
  };
  for (const ecase &c : small)
    for (int dt = 0; dt <= 2; dt += 2)
      for (int rev = 0; rev <= 1; rev++) run(c, dt, rev);
  ecase allbad = {"every index bad", 40, 6, 2, 3, SAME, {}};
  for (int64_t i = 0; i < allbad.n; i++) allbad.bad.push_back({i, i % 2 ? 6 : -1});
  run(allbad, 0, false);
  run(allbad, 0, true);

  /* User sizes: a GPT-2 step's tokens, and a character-level vocabulary
   * (segments of ~200 positions; and one segment of every position).
   * k_segment_sum's n blocks of 256 threads dominate the time. */
  run({"GPT-2 tokens", 8192, 50257, 64, 4, RANDOM, {{5000, 50257}, {6000, -1}}}, 0, false);
  run({"GPT-2 tokens", 8192, 50257, 64, 3, RANDOM, {}}, 2, true);
  run({"characters", 16384, 84, 64, 5, RANDOM, {}}, 2, true);
  run({"characters, one index", 16384, 84, 8, 3, SAME, {}}, 0, false);
  printf("%s: %d failing case(s)\n", fails ? "FAIL" : "ok", failed_cases);
  return fails ? 1 : 0;
}
