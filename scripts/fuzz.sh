#!/usr/bin/env bash
# fuzz.sh [--short] [RUNS] — build loom's libFuzzer targets (clang,
# -fsanitize=fuzzer,address,undefined; -DLOOM_FUZZ=ON) and run each for RUNS
# executions (default 1000000; --short: 20000, a CI-optional smoke) from its
# seed corpus under tests/fuzz/. Prints one line per target:
#   fuzz <target>: <execs> execs, <crashes> crashes, <seconds> s, corpus <n>
# and exits non-zero if any target crashed, leaked or stopped early. Crash
# inputs are kept in $OUT/<target>/ (reproduce: build-fuzz/tests/fuzz_<target> FILE).
# Not part of ctest: the seeds alone are replayed there (fuzz_*_seeds).
# Environment: LOOM_FUZZ_TARGETS (a subset), LOOM_FUZZ_MAX_TIME=S (stop each
# target after S seconds; fewer than RUNS executions is then reported, not an
# error), LOOM_FUZZ_NO_BUILD=1 (reuse the build: parallel invocations).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS=1000000
if [ "${1:-}" = "--short" ]; then RUNS=20000; shift; fi
[ -n "${1:-}" ] && RUNS="$1"
BUILD="${LOOM_FUZZ_BUILD:-$ROOT/build-fuzz}"
OUT="${LOOM_FUZZ_OUT:-$BUILD/fuzz-runs}"
TARGETS="${LOOM_FUZZ_TARGETS:-idx cifar safetensors checkpoint_meta alloc_conf mnist_flags resnet_flags}"

if [ -z "${LOOM_FUZZ_NO_BUILD:-}" ]; then
CC=clang cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_CUDA=OFF -DLOOM_FUZZ=ON \
  -DLOOM_SANITIZE=address,undefined -DLOOM_BUILD_BENCH=OFF -DLOOM_BUILD_EXAMPLES=OFF -DLOOM_MPI=OFF >/dev/null
# shellcheck disable=SC2086
cmake --build "$BUILD" -j"$(nproc)" --target $(printf 'fuzz_%s ' $TARGETS) >/dev/null
fi
MAX_TIME="${LOOM_FUZZ_MAX_TIME:-0}"

status=0
for t in $TARGETS; do
  work="$OUT/$t"
  rm -rf "$work" && mkdir -p "$work/corpus"
  cp "$ROOT/tests/fuzz/corpus_$t/"* "$work/corpus/"
  start=$(date +%s)
  rc=0
  # -close_fd_mask=1: the targets' own stdout is noise; crash reports go to stderr (the log).
  (cd "$work" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$BUILD/tests/fuzz_$t" -runs="$RUNS" -max_total_time="$MAX_TIME" -seed=1 -max_len=65536 -rss_limit_mb=4096 -timeout=30 \
    -print_final_stats=1 -close_fd_mask=1 corpus >"$work/log" 2>&1) || rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  crashes=$(find "$work" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  capped=""
  if [ "${execs:-0}" -lt "$RUNS" ] && [ "$MAX_TIME" -gt 0 ]; then capped=", stopped by the ${MAX_TIME} s cap"; fi
  echo "fuzz $t: ${execs:-0} execs, $crashes crashes, $secs s, corpus $(ls "$work/corpus" | wc -l) (rc $rc$capped)"
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ] || { [ "${execs:-0}" -lt "$RUNS" ] && [ -z "$capped" ]; }; then
    status=1
    tail -40 "$work/log"
  fi
done
exit $status
