#!/usr/bin/env bash
# run_checkpoint_vs_torch.sh [args for checkpoint_vs_torch.py] — build
# bench_checkpoint, make a venv with Debian's torch + safetensors from PyPI,
# and compare 1 GiB checkpoint save/load against safetensors.torch.
# Needs ~2 GiB free in --dir (default /tmp); files are removed as it goes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${LOOM_BUILD_DIR:-$ROOT/build}"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target bench_checkpoint >/dev/null
VENV="$BUILD/bench-venv"
[ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check safetensors
exec "$VENV/bin/python" "$ROOT/bench/checkpoint/checkpoint_vs_torch.py" --bench "$BUILD/bench/bench_checkpoint" "$@"
