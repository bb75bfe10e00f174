#!/usr/bin/env bash
# run_transformer_ops_vs_pytorch.sh — bench_transformer_ops (loom) and
# pytorch_transformer_ops.py (PyTorch) alternately (ABAB), ROUNDS times, on
# the CPU with THREADS threads; prints per (op, shape) the median over rounds
# of each side's per-round median step time and torch_ms / loom_ms as
# speedup (> 1: loom is faster).
#
#   bench/transformer_ops/run_transformer_ops_vs_pytorch.sh [--build DIR] [--threads N] [--rounds N] [--filter OP]
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
[ -x "$BUILD/bench/bench_transformer_ops" ] || cmake --build "$BUILD" --target bench_transformer_ops -j"$(nproc)"
# shellcheck source=../torch_best.sh
. "$ROOT/bench/torch_best.sh"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
for ((r = 1; r <= ROUNDS; r++)); do
  "$BUILD/bench/bench_transformer_ops" "$THREADS" 5 $FILTER | grep '^bench=' >>"$TMP/loom"
  # PyTorch under both of libgomp's wait policies, the faster per op kept
  # (bench/torch_best.sh says why the default alone can handicap it).
  { torch_both "$PY" "$ROOT/bench/transformer_ops/pytorch_transformer_ops.py" "$THREADS" 5 $FILTER || true; } |
    { grep '^bench=' || true; } | awk 'function kv(line, key) { return match(line, key "=[^ ]*") ? substr(line, RSTART + length(key) + 1, RLENGTH - length(key) - 1) : "" }
       { k = kv($0, "op") " " kv($0, "shape"); m = kv($0, "ms") + 0
         if (!(k in best) || m < best[k]) { best[k] = m; line[k] = $0 } if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
       END { for (i = 0; i < n; i++) print line[order[i]] }' >>"$TMP/torch"
done
awk '
  function kv(line, key) { return match(line, key "=[^ ]*") ? substr(line, RSTART + length(key) + 1, RLENGTH - length(key) - 1) : "" }
  function median(s,   a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { k = kv($0, "op") " " kv($0, "shape"); m = kv($0, "ms")
    if (FILENAME ~ /loom$/) { L[k] = L[k] " " m; if (!(k in seen)) { seen[k] = 1; order[n++] = k } } else T[k] = T[k] " " m }
  END { for (i = 0; i < n; i++) { k = order[i]; split(k, f, " "); l = median(L[k]); t = median(T[k])
          printf "bench=transformer_ops_vs_pytorch op=%s shape=%s threads='"$THREADS"' loom_ms=%.2f torch_ms=%.2f speedup=%.2f\n",
                 f[1], f[2], l, t, (l > 0 ? t / l : 0) } }' "$TMP/loom" "$TMP/torch"
"$BUILD/bench/bench_transformer_ops" mem
