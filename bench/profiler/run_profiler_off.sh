#!/usr/bin/env bash
# run_profiler_off.sh [RUNS] — what the profiler hooks cost when the profiler is
# off: builds bench_profiler twice from this tree with the same flags, once as
# usual and once with the hooks compiled out (-DLOOM_PROFILER=OFF), then runs
# the two alternately RUNS times (default 7) on the 1-element-add loop
# (dispatch-bound: the worst case per op) and on the MLP training step, one
# thread each, and prints one line per workload:
#   bench=prof_hooks_off work=... runs=... hooks_in_ms=... hooks_out_ms=... in_vs_out=...
#     best_in_vs_out=... in_spread=min/max out_spread=min/max
# hooks_*_ms: medians over runs of each run's fastest round (ms per step);
# in_vs_out - 1 is the cost of the hooks; best_in_vs_out compares the
# fastest rounds of all runs. Also prints the profiler-on overhead from
# bench_profiler in the normal build.
#
# Timings on a shared machine are noisy; with valgrind installed the script
# also counts instructions (cachegrind, deterministic) per op and per MLP
# step in both builds, from the slope between two step counts (so set-up
# cancels):
#   bench=prof_hooks_off_instructions work=... instr_per_op_in=... instr_per_op_out=... added_per_op=... in_vs_out=...
# CPU only (LOOM_CUDA=OFF for both builds, so nothing but the hooks differs).
# RUNS=0 skips the timings (only the instruction counts).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RUNS="${1:-7}"
B="${LOOM_BENCH_BUILD_ROOT:-$ROOT/build-profiler-bench}"
for v in ON OFF; do
  cmake -S "$ROOT" -B "$B/hooks-$v" -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=OFF -DLOOM_PROFILER=$v \
    -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$B/hooks-$v" -j"$(nproc)" --target bench_profiler >/dev/null
done
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
for spec in "tiny_op 2000" "mlp_step 5"; do
  ((RUNS > 0)) || break
  set -- $spec
  work=$1 steps=$2
  : >"$B/in.txt"; : >"$B/out.txt"
  for ((r = 0; r < RUNS; r++)); do
    "$B/hooks-ON/bench/bench_profiler" --threads 1 --work "$work" --steps "$steps" --rounds 5 --off-only |
      sed 's/.* best_ms=//' >>"$B/in.txt"
    "$B/hooks-OFF/bench/bench_profiler" --threads 1 --work "$work" --steps "$steps" --rounds 5 --off-only |
      sed 's/.* best_ms=//' >>"$B/out.txt"
  done
  in=$(median <"$B/in.txt"); out=$(median <"$B/out.txt")
  bin=$(sort -g "$B/in.txt" | head -1); bout=$(sort -g "$B/out.txt" | head -1)
  echo "bench=prof_hooks_off work=$work threads=1 runs=$RUNS steps=$steps hooks_in_ms=$in hooks_out_ms=$out" \
       "in_vs_out=$(awk -v a="$in" -v b="$out" 'BEGIN {printf "%.4f", a / b}')" \
       "best_in_vs_out=$(awk -v a="$bin" -v b="$bout" 'BEGIN {printf "%.4f", a / b}')" \
       "in_spread=$(sort -g "$B/in.txt" | sed -n '1p;$p' | paste -sd/) out_spread=$(sort -g "$B/out.txt" | sed -n '1p;$p' | paste -sd/)"
done
if ((RUNS > 0)); then
  "$B/hooks-ON/bench/bench_profiler" --threads 1 --work mlp_step --rounds 15 --steps 5
  "$B/hooks-ON/bench/bench_profiler" --threads 1 --work tiny_op --rounds 15 --steps 2000
fi

# Instructions per op / per step, hooks in vs out (valgrind's cachegrind).
if command -v valgrind >/dev/null; then
  irefs() {  # BUILD WORK STEPS -> instructions executed by the whole run
    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
      "$B/hooks-$1/bench/bench_profiler" --threads 1 --work "$2" --steps "$3" --rounds 1 --off-only 2>&1 >/dev/null |
      sed -n 's/.*I *refs: *//p' | tr -d ,
  }
  for spec in "tiny_op 200 400 100" "mlp_step 1 2 1"; do
    set -- $spec
    work=$1 s1=$2 s2=$3 ops=$4   # a run does 2*steps steps (warm-up + one round); ops per step (tiny_op: 100 adds)
    per=()
    for v in ON OFF; do
      a=$(irefs $v "$work" "$s1"); b=$(irefs $v "$work" "$s2")
      per+=("$(awk -v a="$a" -v b="$b" -v s1="$s1" -v s2="$s2" -v n="$ops" 'BEGIN {printf "%.2f", (b - a) / (2 * (s2 - s1)) / n}')")
    done
    unit=$([ "$work" = tiny_op ] && echo op || echo step)
    echo "bench=prof_hooks_off_instructions work=$work instr_per_${unit}_in=${per[0]} instr_per_${unit}_out=${per[1]}" \
         "added_per_${unit}=$(awk -v a="${per[0]}" -v b="${per[1]}" 'BEGIN {printf "%.2f", a - b}')" \
         "in_vs_out=$(awk -v a="${per[0]}" -v b="${per[1]}" 'BEGIN {printf "%.6f", a / b}')"
  done
fi
