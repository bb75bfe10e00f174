/* cpu_isa.c — the CPU kernels' instruction set (see cpu_isa.h): the CPU's
 * widest, or one forced by loom_set_cpu_isa or LOOM_CPU_ISA. The
 * environment is read once, at the first question; a value that is unknown
 * or that this CPU cannot run is kept as an error which every kernel entry
 * returns (as LOOM_ALLOC_CONF's is), never an abort. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/gemm_bf16_internal.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

static const char *const NAMES[LOOM_CPU_ISA_COUNT] = {"scalar", "avx2", "avx512", "avx512bf16", "amxbf16"};

static atomic_int g_forced = -1;     /* a forced level, or -1: the widest */
static atomic_int g_limit = -1;      /* tests: pretend the CPU runs at most this */
static atomic_int g_env_status = LOOM_OK;
static char g_env_msg[320];          /* written once, before g_env_status is set */
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
/* AMX-TILE and AMX-BF16 (CPUID leaf 7: EDX bits 24 and 22), and Linux's
 * leave to use the tile state (asked once, here: a kernel without AMX
 * support refuses, and the level stays avx512bf16). */
static bool amx_usable(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!(d & (1u << 24)) || !(d & (1u << 22))) return false;
  return loom_amx_request_permission();
}
#endif

static loom_cpu_isa_level hw_best(void) {
  static atomic_int cached = -1;
  int b = atomic_load(&cached);
  if (b < 0) {
    b = LOOM_CPU_ISA_SCALAR;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bf16"))
      b = amx_usable() ? LOOM_CPU_ISA_AMXBF16 : LOOM_CPU_ISA_AVX512BF16;
    else if (__builtin_cpu_supports("avx512f")) b = LOOM_CPU_ISA_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) b = LOOM_CPU_ISA_AVX2;
#endif
    atomic_store(&cached, b);
  }
  return (loom_cpu_isa_level)b;
}

loom_cpu_isa_level loom_cpu_isa_best(void) {
  int b = (int)hw_best(), lim = atomic_load(&g_limit);
  return (loom_cpu_isa_level)(lim >= 0 && lim < b ? lim : b);
}

bool loom_cpu_isa_runs(loom_cpu_isa_level l) { return (int)l >= 0 && l <= loom_cpu_isa_best(); }

const char *loom_cpu_isa_level_name(loom_cpu_isa_level l) {
  return (int)l >= 0 && (int)l < LOOM_CPU_ISA_COUNT ? NAMES[l] : "?";
}

/* "avx512, avx2 and scalar": what this CPU runs, widest first. */
static void runs_list(char *buf, size_t n) {
  int best = (int)loom_cpu_isa_best();
  buf[0] = '\0';
  for (int l = best; l >= 0; l--) {
    size_t at = strlen(buf);
    snprintf(buf + at, n - at, "%s%s", l == best ? "" : l == 0 ? " and " : ", ", NAMES[l]);
  }
}

/* loom_cpu_isa_parse with its message in msg (n bytes) instead of the
 * thread's error: the environment is read inside whatever call comes first. */
static loom_status parse_msg(const char *who, const char *name, loom_cpu_isa_level *level, bool *forced, char *msg,
                             size_t n) {
  char has[64];
  *forced = false;
  *level = loom_cpu_isa_best();
  if (!name || !strcmp(name, "auto")) return LOOM_OK;
  runs_list(has, sizeof has);
  for (int l = 0; l < LOOM_CPU_ISA_COUNT; l++) {
    if (strcmp(name, NAMES[l])) continue;
    if (!loom_cpu_isa_runs((loom_cpu_isa_level)l)) {
      snprintf(msg, n, "%s: this CPU cannot run %s kernels; it runs %s", who, name, has);
      return LOOM_ERR_UNSUPPORTED;
    }
    *level = (loom_cpu_isa_level)l;
    *forced = true;
    return LOOM_OK;
  }
  snprintf(msg, n, "%s: '%.40s' is not auto, amxbf16, avx512bf16, avx512, avx2 or scalar (this CPU runs %s)", who, name, has);
  return LOOM_ERR_INVALID_ARG;
}

loom_status loom_cpu_isa_parse(const char *who, const char *name, loom_cpu_isa_level *level, bool *forced) {
  char msg[320];
  loom_status st = parse_msg(who, name, level, forced, msg, sizeof msg);
  return st == LOOM_OK ? LOOM_OK : loom_set_error(st, "%s", msg);
}

static void read_env(void) {
  const char *env = getenv("LOOM_CPU_ISA");
  if (!env) return;
  loom_cpu_isa_level l;
  bool forced;
  loom_status st = parse_msg("LOOM_CPU_ISA", env, &l, &forced, g_env_msg, sizeof g_env_msg);
  if (st != LOOM_OK) atomic_store(&g_env_status, (int)st);
  else if (forced) atomic_store(&g_forced, (int)l);
}

static void env_once(void) { pthread_once(&g_env_once, read_env); }

loom_cpu_isa_level loom_cpu_isa_level_now(void) {
  env_once();
  int f = atomic_load_explicit(&g_forced, memory_order_relaxed);
  loom_cpu_isa_level best = loom_cpu_isa_best();
  return f >= 0 && f <= (int)best ? (loom_cpu_isa_level)f : best;
}

void loom_cpu_isa_force(loom_cpu_isa_level level, bool forced) {
  env_once();  /* so that a later first read cannot override the API */
  atomic_store(&g_forced, forced ? (int)level : -1);
  atomic_store(&g_env_status, LOOM_OK);
}

loom_status loom_cpu_isa_check(void) {
  env_once();
  int st = atomic_load(&g_env_status);
  return st == LOOM_OK ? LOOM_OK : loom_set_error((loom_status)st, "%s", g_env_msg);
}

void loom_cpu_isa_test_limit(int max) { atomic_store(&g_limit, max); }
