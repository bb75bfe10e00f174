#!/usr/bin/env bash
# run-mnist.sh — set everything up, build loom, and train loom-mnist on
# Fashion-MNIST (on the GPU when there is one, else on the CPU).
# Extra arguments go to loom-mnist, e.g. ./scripts/run-mnist.sh --epochs 2
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
BUILD="${LOOM_BUILD_DIR:-$ROOT/build}"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target loom-mnist
exec "$BUILD/examples/loom-mnist" --device auto "$@"
