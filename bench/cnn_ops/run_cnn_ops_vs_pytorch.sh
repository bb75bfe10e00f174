#!/usr/bin/env bash
# run_cnn_ops_vs_pytorch.sh — bench_cnn_ops (loom) and pytorch_cnn_ops.py
# (PyTorch) alternately, ROUNDS times, on the CPU with THREADS threads; prints
# per (op, shape, format) each side's best GB/s and loom/pytorch as ratio.
#
#   bench/cnn_ops/run_cnn_ops_vs_pytorch.sh [--build DIR] [--threads N] [--rounds N] [--filter OP]
#
# The anchor is Debian's python3-torch (CPU), installed when missing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build" THREADS=2 ROUNDS=3 FILTER=""
while (($#)); do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --filter) FILTER="$2"; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--threads N] [--rounds N] [--filter OP]" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3
"$PY" -c "import torch" 2>/dev/null || "$ROOT/scripts/setup.sh" python3-torch
[ -x "$BUILD/bench/bench_cnn_ops" ] || cmake --build "$BUILD" --target bench_cnn_ops -j"$(nproc)"
# shellcheck source=../torch_best.sh
. "$ROOT/bench/torch_best.sh"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
for ((r = 1; r <= ROUNDS; r++)); do
  "$BUILD/bench/bench_cnn_ops" "$THREADS" 2 $FILTER | grep '^bench=' >>"$TMP/loom"
  # PyTorch under both of libgomp's wait policies; the best GB/s below keeps the
  # faster (bench/torch_best.sh says why the default alone can handicap it).
  torch_both "$PY" "$ROOT/bench/cnn_ops/pytorch_cnn_ops.py" "$THREADS" 2 $FILTER | grep '^bench=' >>"$TMP/torch"
done
# Best GB/s per key (op shape format) on each side, then the ratio.
awk '
  function kv(line, key,   m) { return match(line, key "=[^ ]*") ? substr(line, RSTART + length(key) + 1, RLENGTH - length(key) - 1) : "" }
  { k = kv($0, "op") " " kv($0, "shape") " " kv($0, "format"); g = kv($0, "gbps") + 0
    if (FILENAME ~ /loom$/) { if (g > L[k]) L[k] = g; if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
    else if (g > T[k]) T[k] = g }
  END { for (i = 0; i < n; i++) { k = order[i]; split(k, f, " ")
          printf "bench=cnn_ops_vs_pytorch op=%s shape=%s format=%s threads='"$THREADS"' loom_gbps=%.2f torch_gbps=%.2f ratio=%.2f\n",
                 f[1], f[2], f[3], L[k], T[k], (T[k] > 0 ? L[k] / T[k] : 0) } }' "$TMP/loom" "$TMP/torch"
