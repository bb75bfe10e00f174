#!/usr/bin/env bash
# gpu-asan.sh --deps DIR --out DIR [--seconds N] BINARY[:FILTER]...
#
# The CUDA test cases under AddressSanitizer + UBSan, on the GPU node: a host
# heap overrun in CUDA-only host code shows up in a plain build as
# "malloc(): unsorted double linked list corrupted" long after the write;
# here it comes with the stack of the write. Builds tests/BINARY in
# build-gpu-asan (RelWithDebInfo, -fsanitize=address,undefined on the C
# code; nvcc's code is not instrumented) against the offline bundle, then
# runs each BINARY with LOOM_TEST_DEVICE=cuda, --jobs 1 and its Criterion
# --filter, within --seconds in all (default 240). Everything goes to
# OUT/asan.txt (the first ASan/UBSan report of each binary and its cases'
# verdicts); OUT/asan-build.txt has the build's errors.
#   scripts/gpu-asan.sh --deps .deps --out $OUT test_ops_elementwise:'elementwise_cuda/*'
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="" OUT="" SECS=240
while (($#)); do
  case "$1" in
    --deps) DEPS="$(cd "$2" && pwd)"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --seconds) SECS="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    --*) echo "gpu-asan: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ -n "$OUT" ] && (($#)) || { echo "usage: gpu-asan.sh --deps DIR --out DIR [--seconds N] BINARY[:FILTER]..." >&2; exit 2; }
mkdir -p "$OUT"
T0=$(date +%s)
B="$ROOT/build-gpu-asan"
args=(-S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE=address,undefined -DLOOM_WERROR=OFF
      -DLOOM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native)
[ -f "$B/CMakeCache.txt" ] || ! command -v ninja >/dev/null || args+=(-G Ninja)
[ -n "$DEPS" ] && args+=(-DLOOM_DEPS_DIR="$DEPS" -DCRITERION_ROOT="$DEPS" -DZLIB_ROOT="$DEPS"
                         -DLOOM_FASHION_MNIST_DIR="$DEPS/fashion-mnist")
targets=()
for spec in "$@"; do targets+=("${spec%%:*}"); done
{ cmake "${args[@]}" >/dev/null && cmake --build "$B" -j"$(nproc)" --target "${targets[@]}"; } >"$OUT/asan-build.txt" 2>&1
echo "gpu-asan: build rc=$? in $(( $(date +%s) - T0 )) s (errors: $OUT/asan-build.txt)"
# CUDA maps memory where ASan keeps its shadow gap: protect_shadow_gap=0.
export ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0:print_summary=1 UBSAN_OPTIONS=print_stacktrace=1
export LOOM_TEST_DEVICE=cuda CRITERION_VERBOSITY_LEVEL=1
for spec in "$@"; do
  bin="${spec%%:*}" filter="*"
  [[ "$spec" == *:* ]] && filter="${spec#*:}"
  left=$((SECS - ($(date +%s) - T0)))
  if ((left < 10)); then echo "===== $bin: skipped, --seconds $SECS spent"; continue; fi
  ((left > 45)) && left=45
  echo "===== $bin --filter '$filter' (at most ${left}s)"
  if [ ! -x "$B/tests/$bin" ]; then echo "not built"; continue; fi
  timeout -k 5 "$left" "$B/tests/$bin" --jobs 1 --filter "$filter" 2>&1 | grep -v '^\[PASS\]' | head -c 200000
  echo "rc=${PIPESTATUS[0]}"
done >"$OUT/asan.txt" 2>&1
grep -cE "ERROR: AddressSanitizer|runtime error:" "$OUT/asan.txt" | sed 's/^/gpu-asan: sanitizer reports: /'
grep -E "^=====|^rc=|Synthesis" "$OUT/asan.txt"
