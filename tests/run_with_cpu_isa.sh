#!/bin/sh
# run_with_cpu_isa.sh ISA PROGRAM [ARGS...] — run a test program with
# LOOM_CPU_ISA=ISA (amxbf16, avx512bf16, avx512, avx2 or scalar); exit 77, which ctest counts as
# skipped, when this CPU cannot run ISA.
isa=$1
shift
case $isa in
  amxbf16) need="avx512f avx512bw avx512vl avx512_bf16 amx_bf16 amx_tile" ;;
  avx512bf16) need="avx512f avx512bw avx512vl avx512_bf16" ;;
  avx512) need="avx512f" ;;
  avx2) need="avx2 fma" ;;
  *) need="" ;;
esac
for flag in $need; do
  if ! grep -qw "$flag" /proc/cpuinfo 2>/dev/null; then
    echo "skipped: this CPU has no $flag, needed for LOOM_CPU_ISA=$isa"
    exit 77
  fi
done
# Without AVX512_BF16, avx512 is already the widest set: the plain run's.
if [ "$isa" = avx512 ] && ! grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null; then
  echo "skipped: LOOM_CPU_ISA=avx512 is this CPU's widest set, which the plain run tests"
  exit 77
fi
# Without AMX, avx512bf16 is already the widest set: the plain run's.
if [ "$isa" = avx512bf16 ] && ! grep -qw amx_bf16 /proc/cpuinfo 2>/dev/null; then
  echo "skipped: LOOM_CPU_ISA=avx512bf16 is this CPU's widest set, which the plain run tests"
  exit 77
fi
LOOM_CPU_ISA=$isa exec "$@"
