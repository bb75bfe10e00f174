#!/usr/bin/env bash
# check-observability.sh BUILD_DIR — the observability checks that need
# Python packages, run by run-tests.sh after the -Werror build:
#   1. a short loom-mnist run with --logdir and --profile;
#   2. TensorBoard (pip, in a venv over Debian's Python with its site
#      packages) reads the event file and finds every scalar of metrics.csv
#      with the same step and value, and rejects a corrupted CRC;
#   3. the Chrome trace parses and has the step's ops;
#   4. scripts/plot_metrics.py renders metrics.csv to a PNG (Debian's
#      matplotlib) that is a real image: PNG signature, IHDR size, bytes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:?usage: check-observability.sh BUILD_DIR}"
PY=/usr/bin/python3   # Debian's: numpy, matplotlib (the python3 first on PATH may lack them)
OUT="$BUILD/observability"
VENV="$BUILD/tb-venv"
rm -rf "$OUT"
mkdir -p "$OUT"

if ! "$VENV/bin/python" -c "import tensorboard" 2>/dev/null; then
  echo "observability: creating $VENV with tensorboard (pip)"
  "$PY" -m venv --system-site-packages "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "tensorboard>=2.12"
fi

"$BUILD/examples/loom-mnist" --epochs 2 --train-limit 1536 --test-limit 500 --hidden 64 --device cpu --quiet \
  --logdir "$OUT/logs" --log-every 3 --profile "$OUT/trace.json" --profile-warmup 2 --profile-steps 3 \
  2>"$OUT/profile-summary.txt" | tee "$OUT/mnist.txt"
grep -q "^result test_accuracy=0\.[5-9]" "$OUT/mnist.txt"
grep -q "loom profiler: .* 3 steps" "$OUT/profile-summary.txt" || { cat "$OUT/profile-summary.txt"; exit 1; }

"$VENV/bin/python" "$ROOT/tests/tensorboard/check_events.py" "$OUT/logs"

"$PY" - "$OUT/trace.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
names = {e["name"] for e in ev if e.get("ph") == "X" and e.get("cat") == "op"}
need = {"linear", "linear_backward", "cross_entropy", "cross_entropy_backward"}
assert need <= names, f"trace lacks ops {need - names}"
steps = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "step"]
assert len(steps) == 3, f"{len(steps)} steps in the trace, want 3"
assert any(e.get("ph") == "C" for e in ev), "no memory counters"
print(f"trace: {len(ev)} events, {len(steps)} steps, ops {sorted(names)}")
EOF

"$PY" "$ROOT/scripts/plot_metrics.py" "$OUT/logs/metrics.csv" "$OUT/metrics.png"
"$PY" - "$OUT/metrics.png" <<'EOF'
import os, struct, sys
p = sys.argv[1]
b = open(p, "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
assert b[12:16] == b"IHDR", "no IHDR chunk first"
w, h = struct.unpack(">II", b[16:24])
assert w >= 600 and h >= 300, f"image is only {w}x{h}"
assert len(b) > 20000, f"only {len(b)} bytes: an empty plot?"
assert b[-8:-4] == b"IEND", "no IEND chunk at the end"
print(f"plot: {p} is a {w}x{h} PNG, {len(b)} bytes")
EOF
echo "observability: ok"
