#!/usr/bin/env bash
# compare_builds.sh — the CPU benchmarks a refactor must not slow down, run
# on two loom builds side by side in one invocation: the MLP training step
# (bench_mlp_step), op-dispatch overhead (bench_op_overhead, with and without
# grad) and a ResNet-20 training step (loom-resnet, NHWC, batch 128). Rounds
# alternate old/new (ABAB…) so machine load falls on both alike; each metric
# reports the median over rounds and new/old (>1 means new is faster for
# throughputs; for per-op microseconds the ratio is old/new, so >1 still means
# new is faster).
#
#   bench/compare_builds.sh --old BUILD_DIR --new BUILD_DIR [--rounds N] [--threads N]
#
# Both build dirs must hold bench/bench_mlp_step, bench/bench_op_overhead and
# examples/loom-resnet (Release, -DLOOM_CUDA=OFF for a CPU comparison).
set -euo pipefail
OLD="" NEW="" ROUNDS=5 THREADS=2
while (($#)); do
  case "$1" in
    --old) OLD="$2"; shift 2 ;;
    --new) NEW="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    *) echo "usage: $0 --old DIR --new DIR [--rounds N] [--threads N]" >&2; exit 2 ;;
  esac
done
[ -n "$OLD" ] && [ -n "$NEW" ] || { echo "usage: $0 --old DIR --new DIR [--rounds N] [--threads N]" >&2; exit 2; }
for b in "$OLD" "$NEW"; do
  for p in bench/bench_mlp_step bench/bench_op_overhead examples/loom-resnet; do
    [ -x "$b/$p" ] || { echo "compare_builds: $b/$p is missing (build it first)" >&2; exit 2; }
  done
done
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" | head -1; }
declare -A vals
one_round() { # $1 = tag, $2 = build dir
  local b=$2 v
  v=$("$b/bench/bench_mlp_step" --device cpu --batch 128 --steps 100 | grep '^bench=' | tail -1 | field steps_per_s)
  vals[$1.mlp_steps_per_s]+="$v "
  local oh
  oh=$("$b/bench/bench_op_overhead" --device cpu --iters 20000 --reps 3)
  vals[$1.op_us_nograd]+="$(echo "$oh" | grep 'grad=0' | field host_us_per_op) "
  vals[$1.op_us_grad]+="$(echo "$oh" | grep 'grad=1' | field host_us_per_op) "
  v=$("$b/examples/loom-resnet" --model resnet20 --synthetic 3x32x32 --batch 128 --steps 10 --warmup 2 \
       --shortcut A --device cpu --threads "$THREADS" --format nhwc --quiet | grep '^result' | tail -1 | field samples_per_sec)
  vals[$1.resnet20_samples_per_s]+="$v "
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') ($(nproc) cores)"
echo "# old=$OLD new=$NEW rounds=$ROUNDS threads=$THREADS"
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then one_round old "$OLD"; one_round new "$NEW"; else one_round new "$NEW"; one_round old "$OLD"; fi
  echo "# round $r done"
done
for m in mlp_steps_per_s resnet20_samples_per_s op_us_nograd op_us_grad; do
  o=$(echo "${vals[old.$m]}" | median); n=$(echo "${vals[new.$m]}" | median)
  case $m in op_us_*) r=$(awk -v o="$o" -v n="$n" 'BEGIN{printf "%.3f", o/n}') ;;
             *) r=$(awk -v o="$o" -v n="$n" 'BEGIN{printf "%.3f", n/o}') ;; esac
  echo "# $m old: ${vals[old.$m]}"
  echo "# $m new: ${vals[new.$m]}"
  echo "bench=compare_builds metric=$m old_median=$o new_median=$n speedup_new=$r"
done
