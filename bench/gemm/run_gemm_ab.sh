#!/usr/bin/env bash
# run_gemm_ab.sh — loom's built-in SGEMM of two builds side by side (a change
# and the code before it) on bench_gemm's shapes (the MNIST MLP step's nine
# GEMMs and two squares), alternating the builds round by round (ABAB, the
# order flipped every round: the machine may be shared) and reporting
# medians over the rounds of each shape's built-in GFLOP/s (each itself the
# best of REPS batches), the new / base ratio, and the MLP step's nine GEMMs
# together (total flops / total time).
#
#   bench/gemm/run_gemm_ab.sh --new DIR --base DIR [--threads T] [--rounds N] [--reps R] [--clock wall|cpu]
#
# --clock cpu: bench_gemm times with the process's CPU time (for --threads 1
# on an oversubscribed machine, where the wall clock measures the wait for a
# core). Both builds' bench_gemm must take the clock argument.
set -euo pipefail
NEW="" BASE="" THREADS=1 ROUNDS=5 REPS=5 CLOCK=wall
while (($#)); do
  case "$1" in
    --new) NEW="$2"; shift 2 ;;
    --base) BASE="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --clock) CLOCK="$2"; shift 2 ;;
    *) echo "usage: $0 --new DIR --base DIR [--threads T] [--rounds N] [--reps R]" >&2; exit 2 ;;
  esac
done
[ -n "$NEW" ] && [ -n "$BASE" ] || { echo "usage: $0 --new DIR --base DIR [--threads T] [--rounds N] [--reps R]" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p'), threads=$THREADS rounds=$ROUNDS reps=$REPS clock=$CLOCK"
for ((r = 1; r <= ROUNDS; r++)); do
  order=(new base)
  ((r % 2)) || order=(base new)
  for side in "${order[@]}"; do
    dir=$NEW
    [ "$side" = base ] && dir=$BASE
    OMP_NUM_THREADS=$THREADS "$dir/bench/bench_gemm" "$THREADS" "$REPS" best "$CLOCK" |
      sed -n "s/^bench=gemm shape=\([0-9x]*\) ta=\([01]\) tb=\([01]\) builtin_gflops=\([0-9.]*\).*/\1:\2\3 \4/p" |
      awk -v s="$side" -v r="$r" '{print s, r, NR, $1, $2}' >> "$tmp/all"
  done
  echo "# round $r done"
done
# side round idx shape gflops -> per shape medians; step = shapes 1..9.
awk '
function med(arr, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (arr[j] < arr[i]) { t = arr[i]; arr[i] = arr[j]; arr[j] = t }
  return (n % 2) ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2 }
{ key = $3; shape[key] = $4; n = ++cnt[$1, key]; v[$1, key, n] = $5; if (key > nk) nk = key; rounds[$2] = 1 }
END {
  for (k = 1; k <= nk; k++) {
    split(shape[k], p, ":"); split(p[1], d, "x"); fl = 2 * d[1] * d[2] * d[3]
    for (si = 0; si < 2; si++) { s = si ? "base" : "new"; delete a; for (i = 1; i <= cnt[s, k]; i++) a[i] = v[s, k, i]; m[s] = med(a, cnt[s, k]) }
    # per-round ratios new/base
    delete a; nr = 0; for (i = 1; i <= cnt["new", k] && i <= cnt["base", k]; i++) a[++nr] = v["new", k, i] / v["base", k, i]
    printf "bench=gemm_ab shape=%s ta_tb=%s new_gflops=%.1f base_gflops=%.1f new_vs_base=%.3f\n", p[1], p[2], m["new"], m["base"], med(a, nr)
    if (k <= 9) { tn += fl / (m["new"] * 1e9); tb += fl / (m["base"] * 1e9); ft += fl }
  }
  printf "bench=gemm_ab step=mlp_9_gemms new_gflops=%.1f base_gflops=%.1f new_vs_base=%.3f\n", ft / tn / 1e9, ft / tb / 1e9, tb / tn
}' "$tmp/all"
