#!/usr/bin/env bash
# run_soak.sh [--build DIR] [--out DIR] [--name NAME] [-- bench_soak args...] —
# issue 24 part 3's soak: runs build/bench/bench_soak for the MNIST MLP
# (784->256->256->10, 20,000 steps, batch 64) and ResNet-20 (2,000 steps,
# batch 32), both at once and under `nice -n 10` (a shared machine), each with evaluation and a
# checkpoint every 500 steps and the profiler on for 50 steps of every 200;
# then bench/soak/check_soak.py (is every series flat after warm-up?) and
# plot_soak.py (the PNG). Writes OUT/NAME-mlp.csv, OUT/NAME-resnet20.csv,
# OUT/NAME.png and OUT/NAME-check.md (default OUT bench/results, NAME
# soak-<UTC date>); checkpoints and traces go to a temporary directory.
# Exits 1 if something grows. Takes about an hour on a loaded 2-core machine.
# Extra arguments after -- go to both bench_soak runs (e.g. --steps 600 for a
# quick look).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="$ROOT/build"
OUT="$ROOT/bench/results"
NAME="soak-$(date -u +%F)"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --name) NAME="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "run_soak.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
BIN="$BUILD/bench/bench_soak"
[ -x "$BIN" ] || { echo "run_soak.sh: no $BIN (configure with -DLOOM_BUILD_BENCH=ON)" >&2; exit 2; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
# OpenMP threads sleep instead of spinning between parallel regions: the
# loader's workers and other processes share the cores.
export OMP_WAIT_POLICY=PASSIVE
pids=()
for model in mlp resnet20; do
  nice -n 10 "$BIN" --model "$model" --csv "$OUT/$NAME-$model.csv" --dir "$WORK/$model" "$@" \
    >"$WORK/$model.out" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
cat "$WORK"/mlp.out "$WORK"/resnet20.out
[ "$rc" = 0 ] || { echo "run_soak.sh: a run failed" >&2; exit 1; }
check=0
python3 "$HERE/check_soak.py" "$OUT/$NAME-mlp.csv" "$OUT/$NAME-resnet20.csv" | tee "$OUT/$NAME-check.md" || check=1
/usr/bin/python3 "$HERE/plot_soak.py" --out "$OUT/$NAME.png" "$OUT/$NAME-mlp.csv" "$OUT/$NAME-resnet20.csv"
exit "$check"
