#!/usr/bin/env bash
# run-tests.sh — set everything up, then build and run the whole test suite:
#   1. an AddressSanitizer + UBSan build (CPU) with fault injection compiled
#      in (the sweeps of tests/test_fault_sweep.c), ctest;
#   2. the data and loader tests under ThreadSanitizer (in-process, see
#      tests/support/criterion_or_tsan.h);
#   3. a clang build (-Werror, CPU) and its unit tests;
#   4. a -Werror build (CUDA code included when nvcc is installed), ctest —
#      last, so the final summary is the whole suite's; it includes the
#      Python package's pytest suite, run in a venv (system site packages +
#      safetensors and ./python from pip), its ResNet/MNIST parity checks
#      against the C trainers, and a wheel built from source (CPU-only)
#      installed into a fresh venv.
#   5. observability: TensorBoard reads loom-mnist's event file, the metrics
#      plot is a real PNG (scripts/check-observability.sh).
# As root (CI), both ctest runs include dist_mpi_two_hosts: two ranks in two
# network namespaces over TCP, the link cut mid-run (33-77 s each, bounded
# by its own limits; skipped, saying why, when not root).
# GPU tests run when a GPU is present (or LOOM_TEST_DEVICE=cuda insists);
# otherwise they show as skipped.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
JOBS="$(nproc)"
OUT="${LOOM_TEST_BUILD_ROOT:-$ROOT/build-test}"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S "$ROOT" -B "$OUT/asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_WERROR=ON -DLOOM_CUDA=OFF \
  -DLOOM_SANITIZE=address,undefined -DLOOM_FAULT_INJECTION=ON -DLOOM_BUILD_BENCH=OFF >/dev/null
cmake --build "$OUT/asan" -j"$JOBS"
(cd "$OUT/asan" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$JOBS")

echo "== ThreadSanitizer: the data loader tests"
cmake -S "$ROOT" -B "$OUT/tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_WERROR=ON -DLOOM_CUDA=OFF \
  -DLOOM_SANITIZE=thread -DLOOM_BUILD_BENCH=OFF -DLOOM_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$OUT/tsan" -j"$JOBS" --target test_data test_loader
(cd "$OUT/tsan" && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -R "^test_(data|loader)$")

echo "== clang (-Wall -Wextra -Werror, CPU only): the warning-free build is not one compiler's accident"
# (GCC 12 is the reference; the GPU node's GCC 13 may warn where it does not,
# which scripts/gpu-suite.sh reports there without failing.) The unit tests
# run too, without the instruction-set repeats, the trainers and the PyTorch
# conformance run (minutes; the other builds run them).
CC=clang cmake -S "$ROOT" -B "$OUT/clang" -DCMAKE_BUILD_TYPE=Release -DLOOM_WERROR=ON -DLOOM_CUDA=OFF \
  -DLOOM_BUILD_BENCH=OFF >/dev/null
cmake --build "$OUT/clang" -j"$JOBS"
(cd "$OUT/clang" && ctest --output-on-failure -j"$JOBS" -R '^test_' -E '_(avx512|avx2|scalar)$|^test_resnet_conformance$')

echo "== Python venv: Debian's numpy/torch/pytest, safetensors and the package's build backend (scikit-build-core) from PyPI"
VENV="$OUT/venv"
[ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check safetensors "scikit-build-core>=0.10"

echo "== build (-Werror) and test"
cmake -S "$ROOT" -B "$OUT/plain" -DCMAKE_BUILD_TYPE=Release -DLOOM_WERROR=ON -DLOOM_PYTHON="$VENV/bin/python" >/dev/null
cmake --build "$OUT/plain" -j"$JOBS"
# The package around the library just built (LOOM_LIBRARY: bundled, not
# rebuilt); ctest's python_wheel_install builds one from source as a user would.
LOOM_LIBRARY="$OUT/plain/lib/libloom.so" "$VENV/bin/pip" install -q --disable-pip-version-check --no-build-isolation \
  --no-deps --force-reinstall "$ROOT/python"
(cd "$OUT/plain" && ctest --output-on-failure -j"$JOBS")

echo "== observability: TensorBoard reads the event file; trace; metrics plot"
"$ROOT/scripts/check-observability.sh" "$OUT/plain"
