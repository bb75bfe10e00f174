#!/usr/bin/env bash
# gpu-suite.sh --deps DIR --out DIR [--build DIR] [--commit HASH] [--budget SECONDS]
#              [--budget-scale N] [--skip REGEX] [--skip-done TSV] [--quick] [--plan]
#              [--gpt-data FILE]  (loom-gpt's corpus; default .gpt-data/shakespeare.txt, ignored by git)
#
# Everything a session with a GPU should run, in one call of the device tool
# (10 minutes a command; the plan below fits 8 on an H100): machine facts,
# configure + build for the local GPU, where every dependency came from, the
# test suite with LOOM_TEST_DEVICE=cuda, loom-mnist on the GPU, the
# compute-sanitizer probe and memcheck, every benchmark with a CUDA mode,
# the trainers' CUDA-graph and ResNet runs. --deps is the bundle from
# scripts/bundle-offline.sh (Criterion, zlib, jansson, DLPack headers,
# Fashion-MNIST), given to cmake as LOOM_DEPS_DIR.
#
# The time plan. Every step has its own budget (seconds on an H100 node:
# 16 cores; its timeout) and steps run in order of value. "core" steps are
# the plan: their budgets add up to at most --budget (default 420 s, leaving
# a minute of the 8 for the tool's transfers and start), so they always get
# their time. Every other step ("extra") runs only while the whole run is
# under --budget, and is cut to what is left; with under 20 s left it is
# skipped ("time budget spent"). The compute-sanitizer probe is a step too.
# --plan prints the plan (budget, worst-case start, tier of each step),
# checks it (every core step inside --budget, and --budget inside 8 minutes
# with 60 s to spare) and runs nothing. --budget-scale N multiplies every
# budget by N, for a rehearsal on a slower machine (scripts/gpu-rehearsal.sh:
# 2 cores instead of 16); the report says so. --skip REGEX skips the steps
# whose names match: a second call that gives the extras the time, e.g.
#   --skip '^(ctest_cuda|mnist_fp32|memcheck_test_cuda_paths)$'
# or, on a machine still warm from the first call, --skip-done BUILD/steps-done.tsv
# (every run appends its steps there): skips each step that passed or failed.
#
# A step that fails is reported and the rest still runs; a step whose
# program does not exist yet, or that needs a GPU where there is none, is
# reported as skipped with the reason. So on a machine without a GPU the
# script runs end to end (ctest does that in CI, see tests/CMakeLists.txt).
#
# --out gets few, small files, at most one level deep (the device tool
# returns at most 8 files, 16 MiB each):
#   report.md    date, commit, device, each step with its command, status,
#                time and budget, where each dependency came from, every
#                result line (bench=..., result ...) with its command
#   steps.tsv    step, status, seconds, note, command, budget, tier
#   deps.tsv     dependency, where from (bundle / system / missing / absent), path
#   logs.txt     every step's output, each cut to its last 256 KiB
# The short table of steps is printed last.
#
# Adding a step is one line:
#   step NAME [--core] [--gpu] [--needs FILE] [--data FILE] [--sanitizer] [--budget S] -- command args...
#   --core     part of the plan (its budget counts against --budget)
#   --gpu      skipped (with the reason) when no GPU is usable
#   --needs F  skipped when F (a program) is not there yet
#   --data F   skipped when F (a data file) is absent
#   --sanitizer skipped when compute-sanitizer does not work here
#   --budget   seconds on the node before the step is killed (default 60)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="" OUT="" BUILD="" COMMIT="${LOOM_COMMIT:-}" QUICK=0 BUDGET=420 SCALE=1 PLAN=0 SKIP_RE=""
# 8 of the device tool's 10 minutes a command; a session that can spend more
# of its device time in one call raises it (LOOM_GPU_NODE_LIMIT=570).
NODE_LIMIT="${LOOM_GPU_NODE_LIMIT:-480}"
SKIP_DONE=""
# loom-gpt's default corpus (scripts/setup.sh), carried to the offline GPU machine by hand.
GPT_DATA="${LOOM_GPT_DATA:-$ROOT/.gpt-data/shakespeare.txt}"
while (($#)); do
  case "$1" in
    --deps) DEPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --commit) COMMIT="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    --budget-scale) SCALE="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --plan) PLAN=1; shift ;;
    --skip) SKIP_RE="$2"; shift 2 ;;
    --skip-done) SKIP_DONE="$2"; shift 2 ;;
    --gpt-data) GPT_DATA="$2"; shift 2 ;;
    -h|--help) sed -n '2,50p' "$0"; exit 0 ;;
    *) echo "gpu-suite: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$BUDGET" =~ ^[0-9]+$ && "$SCALE" =~ ^[0-9]+$ ]] && ((SCALE > 0)) ||
  { echo "gpu-suite: --budget and --budget-scale take whole numbers (seconds, factor >= 1)" >&2; exit 2; }
if ((PLAN)); then
  OUT="$(mktemp -d)"
  trap 'rm -rf "$OUT"' EXIT
fi
[ -n "$OUT" ] || { echo "gpu-suite: --out DIR is required" >&2; exit 2; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
if [ -n "$DEPS" ]; then
  [ -d "$DEPS" ] || { echo "gpu-suite: --deps $DEPS is not a directory (make it with scripts/bundle-offline.sh)" >&2; exit 2; }
  DEPS="$(cd "$DEPS" && pwd)"
fi
BUILD="${BUILD:-$ROOT/build-gpu}"
((PLAN)) || mkdir -p "$BUILD"
BUILD="$(cd "$BUILD" 2>/dev/null && pwd || echo "$BUILD")"
JOBS="$(nproc 2>/dev/null || echo 4)"
REPORT="$OUT/report.md" TSV="$OUT/steps.tsv" LOGS="$OUT/logs.txt" DEPS_TSV="$OUT/deps.tsv"
: >"$TSV"
((PLAN)) || : >"$LOGS"
FIGS="$(mktemp)" STATE="$(mktemp -d)"
if ((PLAN)); then trap 'rm -rf "$OUT" "$FIGS" "$STATE"' EXIT; else trap 'rm -rf "$FIGS" "$STATE"' EXIT; fi
SUITE_T0=$(date +%s)

# ---- the machine ------------------------------------------------------------------
GPU_OK=0 GPU_WHY=""
if ! command -v nvidia-smi >/dev/null 2>&1; then
  GPU_WHY="no GPU: nvidia-smi not found"
elif ! nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then
  GPU_WHY="no GPU: nvidia-smi lists none"
else
  GPU_OK=1
fi
GPU_NAME=$( ((GPU_OK)) && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 || echo "none")
NVCC=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
PY=""
for p in "${LOOM_PYTHON:-}" "$(command -v python3 || true)" /usr/bin/python3; do
  [ -n "$p" ] && [ -x "$p" ] && "$p" -c "import torch" 2>/dev/null && { PY="$p"; break; }
done
case "$(uname -r)" in
  *fc*|*firecracker*) RUNTIME="Firecracker ($(uname -r))" ;;
  4.4.0*) RUNTIME="gVisor ($(uname -r))" ;;
  *) RUNTIME="$(uname -r)" ;;
esac
if [ -z "$COMMIT" ]; then
  COMMIT=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo "unknown (no .git here: pass --commit)")
fi
# A fingerprint of the sources actually built, whatever the commit says.
TREE=$(cd "$ROOT" && find CMakeLists.txt cmake lib include tests examples bench scripts -type f 2>/dev/null | LC_ALL=C sort \
       | xargs cat 2>/dev/null | sha256sum | cut -c1-16)
SAN_WHY="no GPU"

# ---- the step helper --------------------------------------------------------------------
# step NAME [--core] [--gpu] [--sanitizer] [--needs FILE] [--budget S] -- command...
# The command runs with STEP_TIMEOUT (seconds it has) in its environment.
sanitizer_ok() { [ -f "$STATE/san_ok" ]; }
step() {
  local name="$1"; shift
  local need_gpu=0 need_san=0 needs="" data="" budget=60 tier=extra
  while (($#)) && [ "$1" != "--" ]; do
    case "$1" in
      --core) tier=core; shift ;;
      --gpu) need_gpu=1; shift ;;
      --sanitizer) need_san=1; shift ;;
      --needs) needs="$2"; shift 2 ;;
      --data) data="$2"; shift 2 ;;
      --budget|--timeout) budget="$2"; shift 2 ;;
      *) echo "gpu-suite: step $name: unknown option $1" >&2; return 0 ;;
    esac
  done
  shift  # the --
  local cmd="$*" status note="" secs=0
  if [ -n "$SKIP_RE" ] && [[ "$name" =~ $SKIP_RE ]]; then
    ((PLAN)) && return 0
  fi
  if ((PLAN)); then
    printf '%s\tplan\t0\t\t%s\t%s\t%s\n' "$name" "$cmd" "$budget" "$tier" >>"$TSV"
    return 0
  fi
  local tmo=$((budget * SCALE))
  local left=$((BUDGET * SCALE - ($(date +%s) - SUITE_T0)))
  if [ -f "$STATE/san_why" ]; then SAN_WHY=$(cat "$STATE/san_why"); fi
  if [ -n "$SKIP_RE" ] && [[ "$name" =~ $SKIP_RE ]]; then
    status=skip note="--skip"
  elif [ -n "$SKIP_DONE" ] && [ -f "$SKIP_DONE" ] && awk -F'\t' -v n="$name" '$1 == n && ($2 == "pass" || $2 == "fail") {f = 1} END {exit !f}' "$SKIP_DONE"; then
    status=skip note="ran in an earlier call (--skip-done)"
  elif ((need_gpu)) && ((!GPU_OK)); then
    status=skip note="$GPU_WHY"
  elif ((need_san)) && ! sanitizer_ok; then
    status=skip note="compute-sanitizer: $SAN_WHY"
  elif [ -n "$needs" ] && [ ! -x "$needs" ]; then
    status=skip note="not built yet: ${needs#"$BUILD"/}"
  elif [ -n "$data" ] && [ ! -f "$data" ]; then
    status=skip note="no data: $data"
  elif [ "$tier" = extra ] && ((left < 20)); then
    status=skip note="time budget (--budget $BUDGET s) spent"
  else
    # Core steps have their budget by the plan; extras get what is left.
    [ "$tier" = extra ] && ((tmo > left)) && tmo=$left
    local log t0 rc
    log="$(mktemp)"
    t0=$(date +%s.%N)
    STEP_TIMEOUT=$tmo timeout --kill-after=10 "$tmo" bash -c "$cmd" >"$log" 2>&1
    rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}')
    if ((rc == 0)); then status=pass
    elif ((rc == 124 || rc == 137)); then status=fail note="timed out after ${tmo}s"
    else status=fail note="exit $rc"
    fi
    # A step may explain itself with a last "note: ..." line.
    local own
    own=$(grep -E "^note: " "$log" | tail -1 | cut -c7- || true)
    [ -n "$own" ] && note="${note:+$note; }$own"
    { echo "===== $name ($status, ${secs}s of ${tmo}s): $cmd"; tail -c 262144 "$log"; echo; } >>"$LOGS"
    grep -E "^(bench=|result )" "$log" | sed "s|^|$name\t|" >>"$FIGS" || true
    rm -f "$log"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$secs" "$note" "$cmd" "$budget" "$tier" >>"$TSV"
  printf 'gpu-suite: %-28s %-5s %6ss of %4ss %s\n' "$name" "$status" "$secs" "$tmo" "$note"
}

B="$BUILD"
T="$B/tests"
export B T JOBS ROOT DEPS PY NVCC COMMIT TREE STATE OUT DEPS_TSV

# Steps longer than one command are functions (exported to the step's shell).
facts() {
  echo "commit: $COMMIT"; echo "source fingerprint: $TREE"
  uname -a; echo "cores: $(nproc)"; free -g | head -2
  nvidia-smi || echo "nvidia-smi: none"
  "${NVCC:-nvcc}" --version 2>/dev/null | tail -2 || echo "nvcc: none"
  cmake --version | head -1
  { command -v ninja && ninja --version; } || echo "ninja: none"
  gcc --version | head -1
  echo "python with torch: ${PY:-none}"
  [ -n "$PY" ] && "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())'
  compute-sanitizer --version 2>/dev/null | tail -1 || echo "compute-sanitizer: none"
  return 0
}
# Where each dependency came from: the bundle (--deps), the system, or
# missing. Required: what the tests, checkpoints and trainers need; optional
# ones (OpenBLAS, MPI, cuDNN, NCCL) are "absent" without failing. Also every
# library the test binaries and libloom load at run time, without
# LD_LIBRARY_PATH (ldd).
deps_report() {
  cache() { sed -n "s/^$1:[A-Z]*=//p" "$B/CMakeCache.txt" | head -1; }
  from() {
    case "$1" in
      ""|*-NOTFOUND|"not found") echo missing ;;
      "$DEPS"/*) [ -n "$DEPS" ] && echo bundle || echo system ;;
      */site-packages/*|*/dist-packages/*) echo "system (pip wheel)" ;;
      *) echo system ;;
    esac
  }
  row() {  # name required(1/0) path
    local w; w=$(from "$3")
    [ "$w" = missing ] && [ "$2" = 1 ] && w=missing
    [ "$w" = missing ] && [ "$2" = 0 ] && w="absent (optional)"
    printf '%s\t%s\t%s\n' "$1" "$w" "${3:--}"
  }
  local mnist; mnist=$(cache LOOM_FASHION_MNIST_DIR)
  [ -f "$mnist/train-images-idx3-ubyte.gz" ] || [ -f "$mnist/train-images-idx3-ubyte" ] || mnist=""
  {
    row criterion_headers 1 "$(cache CRITERION_INCLUDE_DIR)"
    row criterion_library 1 "$(cache CRITERION_LIBRARY)"
    row zlib_headers 1 "$(cache ZLIB_INCLUDE_DIR)"
    row zlib_library 1 "$(cache ZLIB_LIBRARY_RELEASE)"
    row jansson_headers 1 "$(cache LOOM_JANSSON_INCLUDE)"
    row jansson_library 1 "$(cache LOOM_JANSSON_LIB)"
    row dlpack_header 1 "$(cache LOOM_DLPACK_INCLUDE)"
    row fashion_mnist 1 "$mnist"
    row openblas 0 "$(cache LOOM_OPENBLAS_LIB)"
    row mpi 0 "$(cache MPI_C_HEADER_DIR)"
    row cudnn 0 "$(cache CUDNN_LIBRARY)"
    row nccl 0 "$(cache NCCL_LIBRARY)"
    local f seen=" "
    for f in "$B/lib/libloom.so" "$T/test_prof" "$T/test_dtype"; do
      [ -x "$f" ] || [ -f "$f" ] || continue
      env -u LD_LIBRARY_PATH ldd "$f" | while read -r n _ p _; do
        case "$n" in linux-vdso*|/*|libc.so*|libm.so*|libgcc_s*|libstdc++*|libpthread*|libdl.so*|librt.so*|libresolv*) continue ;; esac
        case "$seen" in *" $n "*) continue ;; esac
        seen="$seen$n "
        [ "$p" = "not" ] && p="not found"
        case "$n" in libcuda.so*|libcudnn*|libnccl*|libcublas*|libcudart*|libnvrtc*) row "runtime:$n" 0 "$p" ;; *) row "runtime:$n" 1 "$p" ;; esac
      done
    done | sort -u
  } >"$DEPS_TSV"
  column -t -s "$(printf '\t')" "$DEPS_TSV"
  local miss
  miss=$(awk -F'\t' '$2 == "missing" {printf "%s ", $1}' "$DEPS_TSV")
  [ -z "$miss" ] || { echo "note: missing: $miss"; return 1; }
  echo "note: $(awk -F'\t' '$2 == "bundle"' "$DEPS_TSV" | wc -l) from the bundle, $(awk -F'\t' '$2 ~ /^system/' "$DEPS_TSV" | wc -l) from the system, none missing"
}
bundle_criterion() {
  env -u LD_LIBRARY_PATH ldd "$T/test_dtype" | grep -E "criterion|nanomsg|git2"
  env -u LD_LIBRARY_PATH ldd "$T/test_dtype" | grep -q "libcriterion.so.3 => $DEPS/lib/" ||
    { echo "note: the test binaries do not load the bundle's Criterion"; return 1; }
  env -u LD_LIBRARY_PATH "$T/test_dtype" --jobs 1
}
# The test suite on the GPU, once: every case prints [PASS]/[FAIL]/[SKIP]
# (CRITERION_VERBOSITY_LEVEL=1), counted from that one run. Left out: the
# tests that build or install the tree again, the checks of scripts, the
# CPU instruction-set repeats and the CPU-only ResNet conformance against
# PyTorch (no GPU in them, minutes of CPU).
GPU_CTEST_EXCLUDE='^(build_config|install_and_consume|gpu_suite_cpu|gpu_rehearsal|layers|layers_catches_back_edge|abi_exports|static_link_records|test_resnet_conformance)$|_(avx512bf16|avx512|avx2|scalar)$|^fuzz_|^dist_mpi_'
export GPU_CTEST_EXCLUDE
ctest_cuda() {
  local rc=0 log="$B/ctest_cuda.log"
  # ctest stops 10 s before the step's time, so the count below still runs.
  (cd "$B" && LOOM_TEST_DEVICE=cuda CRITERION_VERBOSITY_LEVEL=1 timeout $((STEP_TIMEOUT - 10)) \
     ctest -V -j"$JOBS" --timeout 120 -E "$GPU_CTEST_EXCLUDE") >"$log" 2>&1 || rc=$?
  grep -E "^[0-9]+: \[(FAIL|----)\]|tests passed|tests failed|The following tests|^[[:space:]]+[0-9]+ - |\*\*\*" "$log" | tail -300
  # Per binary (ctest -V prefixes each line with the test's number): the CNN
  # op tests run every case on LOOM_TEST_DEVICE, the others in *cuda* suites.
  awk '
    / Test command: / { n = $1; cmd = $4; sub(/.*\//, "", cmd); name[n] = cmd }
    $2 ~ /^\[(PASS|FAIL|SKIP)\]$/ {
      bin = name[$1]; cnn = bin ~ /^test_ops_(conv|batch_norm|pool|cnn_misc)$/
      if (!cnn && $3 !~ /cuda[a-z0-9_]*::/) next
      k = substr($2, 2, 4); c[k]++; per[bin, k]++; bins[bin] = 1
    }
    END {
      print "\nCUDA test cases, per binary (pass / fail / skip):"
      for (b in bins) printf "  %-28s %4d %4d %4d\n", b, per[b, "PASS"], per[b, "FAIL"], per[b, "SKIP"]
      printf "note: %d CUDA test cases passed, %d failed, %d skipped (one ctest run)\n", c["PASS"], c["FAIL"], c["SKIP"]
    }' "$log"
  # Figures tests print (e.g. which path the fused convolution took): into the report.
  grep -o 'result .*' "$log" | grep -E '^result [a-z_]+ ' || true
  return $rc
}
# compute-sanitizer: works on the Firecracker (H100) kind, refused under
# gVisor (H200). Decides whether the memcheck/racecheck steps run.
sanitizer_probe() {
  if ! command -v compute-sanitizer >/dev/null 2>&1; then echo "not installed" >"$STATE/san_why"; echo "note: not installed"; return 0; fi
  if [ ! -x "$B/bench/bench_op_overhead" ]; then echo "nothing built to try it on" >"$STATE/san_why"; echo "note: nothing to try it on"; return 0; fi
  if compute-sanitizer --tool memcheck --error-exitcode 1 "$B/bench/bench_op_overhead" --device cuda --iters 400 --reps 1 >"$STATE/probe" 2>&1; then
    touch "$STATE/san_ok"; cat "$STATE/probe"; echo "note: compute-sanitizer works here"
  else
    echo "refused here ($(grep -m1 -iE 'error|not supported' "$STATE/probe" | cut -c1-120))" >"$STATE/san_why"
    cat "$STATE/probe"; echo "note: $(cat "$STATE/san_why")"
  fi
  return 0
}
export -f facts deps_report bundle_criterion ctest_cuda sanitizer_probe

# ---- the plan: core steps, in order of value ------------------------------------------------------
# Budgets recalibrated from the first GPU run (H200, 2026-11-26: facts 4 s,
# configure 1 s on a warm build dir, mnist_fp32 1.4 s, sanitizer_probe 1 s,
# ctest_cuda 81 s, memcheck_test_cuda_paths 16 s): with ctest_cuda at 150 s
# the core steps add up to 420 s, the default --budget.
step facts --core --budget 10 -- facts

CMAKE_ARGS=(-S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Release -DLOOM_WERROR=ON)
command -v ninja >/dev/null 2>&1 && [ ! -f "$B/CMakeCache.txt" ] && CMAKE_ARGS+=(-G Ninja)
if [ -n "$DEPS" ]; then
  # LOOM_DEPS_DIR (cmake/LoomBundle.cmake): the bundle is searched first.
  # (-U: a reused build dir must look again, the bundle may have moved.)
  CMAKE_ARGS+=(-UCRITERION_LIBRARY -UCRITERION_INCLUDE_DIR -U'ZLIB_*' -U'LOOM_JANSSON_*' -ULOOM_DLPACK_INCLUDE
               -DLOOM_DEPS_DIR="$DEPS" -DCRITERION_ROOT="$DEPS" -DZLIB_ROOT="$DEPS" -DLOOM_FASHION_MNIST_DIR="$DEPS/fashion-mnist")
fi
if [ -n "$NVCC" ]; then
  CMAKE_ARGS+=(-DLOOM_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC")
  ((GPU_OK)) && CMAKE_ARGS+=(-DCMAKE_CUDA_ARCHITECTURES=native)
fi
# Another compiler than Debian's GCC 12 (the node's GCC 13) may warn where
# this one does not: on a GPU machine warnings are reported, not fatal (the
# build step's log has them); CI keeps -Werror, with GCC and clang.
((GPU_OK)) && CMAKE_ARGS+=(-DLOOM_WERROR=OFF)
step configure --core --budget 30 -- "cmake ${CMAKE_ARGS[*]@Q} && grep -E '^(CUDNN_LIBRARY|NCCL_LIBRARY|CRITERION_LIBRARY|ZLIB_LIBRARY_RELEASE|LOOM_JANSSON_LIB|CMAKE_CUDA_ARCHITECTURES|LOOM_BUILD_TESTS|LOOM_WERROR):' '$B/CMakeCache.txt'"
# -k: one target that does not compile must not keep the rest from being built and run.
KEEP_GOING="-k"
grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja' "$B/CMakeCache.txt" 2>/dev/null && KEEP_GOING="-k 0"
step build --core --budget 150 -- "cmake --build '$B' -j$JOBS -- $KEEP_GOING 2>&1 | tee '$B/build.log' | grep -vE '^\[[0-9]+/[0-9]+\] '; rc=\${PIPESTATUS[0]}; w=\$(grep -c 'warning:' '$B/build.log'); echo \"note: \$w compiler warnings\"; exit \$rc"
CUDNN=$(sed -n 's/^CUDNN_LIBRARY:FILEPATH=//p' "$B/CMakeCache.txt" 2>/dev/null)
NCCL=$(sed -n 's/^NCCL_LIBRARY:FILEPATH=//p' "$B/CMakeCache.txt" 2>/dev/null)
step deps --core --budget 5 -- deps_report
# The bundle works: the test binaries run Criterion from it without LD_LIBRARY_PATH.
if [ -n "$DEPS" ]; then
  step bundle_criterion --core --needs "$T/test_dtype" --budget 10 -- bundle_criterion
fi
MNIST_DATA="${DEPS:+$DEPS/fashion-mnist}"
MNIST_DATA="${MNIST_DATA:-/usr/share/datasets/fashion-mnist}"
step ctest_cuda --core --gpu --budget 150 -- ctest_cuda
step mnist_fp32 --core --gpu --needs "$B/examples/loom-mnist" --budget 20 -- \
  "'$B/examples/loom-mnist' --device cuda --data '$MNIST_DATA' --epochs 3 --seed 42 --quiet --precision fp32"
step sanitizer_probe --core --gpu --budget 15 -- sanitizer_probe
# memcheck reports device accesses and leaks, not API errors: loom checks every API call itself, and
# the allocator's OOM-retry tests make cudaMalloc fail on purpose (the second GPU run's two "errors").
step memcheck_test_cuda_paths --core --gpu --sanitizer --needs "$T/test_cuda_paths" --budget 30 -- \
  "LOOM_TEST_DEVICE=cuda compute-sanitizer --tool memcheck --report-api-errors no --leak-check full --error-exitcode 1 --target-processes all '$T/test_cuda_paths' --jobs 1 --filter '*cuda*/*'"

# ---- extras: run while the whole run is under --budget, cut to what is left -------------------------
# GPT-2 124M at T=1024 in bf16, loom-gpt vs the PyTorch twin with SDPA (issue 28's GPU target).
step gpt2_bf16_vs_pytorch --gpu --needs "$B/examples/loom-gpt" --budget 120 -- "sh '$ROOT/bench/gpt/run_gpt2_gpu.sh' --build '$B' --python '$PY' --rounds 2 --steps 20"
# Where a GPT-2 step's time goes on the GPU: loom's per-op table with device time (3 profiled steps).
step gpt2_bf16_profile --gpu --needs "$B/examples/loom-gpt" --budget 60 -- "sh '$ROOT/bench/gpt/run_gpt2_gpu.sh' --build '$B' --python '$PY' --profile '$B/gpt2-trace.json'"
# matmul/linear/linear_backward at every size, dtype and layout, each launch waited for, so that a
# faulting kernel fails at its own launch (the second H200 run: a misaligned address after linear).
step op_sweep_cuda_linalg_blocking --gpu --needs "$T/test_op_sweep" --budget 60 -- \
  "CUDA_LAUNCH_BLOCKING=1 LOOM_TEST_DEVICE=cuda LOOM_SWEEP_FULL=1 LOOM_SWEEP_OPS=matmul,linear,linear_backward '$T/test_op_sweep' --jobs 1 --filter 'op_sweep_cuda/*'"
# f16/bf16 attention runs the chunked path by default (batched cuBLASLt GEMMs over chunks of query rows,
# tensor cores; the H200 run of 2026-11-28 measured GPT-2 bf16 1.54x the fused kernels). The fused
# kernels stay selectable (LOOM_CUDA_ATTENTION=fused) and f32's default: their tests, their bf16 speed,
# and the GPT's CUDA-vs-CPU tests with every dtype on the chunked path.
step transformer_tests_fused --gpu --needs "$T/test_ops_transformer" --budget 60 -- \
  "rc=0; LOOM_CUDA_ATTENTION=fused LOOM_TEST_DEVICE=cuda '$T/test_ops_transformer' --jobs 4 || rc=1; LOOM_CUDA_ATTENTION=chunked LOOM_TEST_DEVICE=cuda '$T/test_gpt' --jobs 2 --filter 'gpt_cuda/*' || rc=1; exit \$rc"
step attention_cuda_bf16_fused --gpu --needs "$B/bench/bench_attention_cuda" --budget 45 -- "LOOM_CUDA_ATTENTION=fused '$B/bench/bench_attention_cuda' 5 10 bf16"
step gpt2_bf16_fused_vs_pytorch --gpu --needs "$B/examples/loom-gpt" --budget 90 -- "LOOM_CUDA_ATTENTION=fused sh '$ROOT/bench/gpt/run_gpt2_gpu.sh' --build '$B' --python '$PY' --rounds 1 --steps 20"
# Attention as the library runs it (f32: fused kernels; bf16: chunked) against matmul + softmax + matmul
# at GPT-2's shapes (issue 28).
step attention_cuda_f32 --gpu --needs "$B/bench/bench_attention_cuda" --budget 45 -- "'$B/bench/bench_attention_cuda' 5 10 f32"
step attention_cuda_bf16 --gpu --needs "$B/bench/bench_attention_cuda" --budget 45 -- "'$B/bench/bench_attention_cuda' 5 10 bf16"
# The first comparisons with PyTorch on the same GPU (the project's headline claim).
step mlp_vs_pytorch --gpu --needs "$B/bench/bench_mlp_step" --budget 60 -- "LOOM_PYTHON='$PY' '$ROOT/bench/mlp/run_mlp_vs_pytorch.sh' --device cuda --build '$B' --rounds 3"
step resnet50_amp_vs_pytorch --gpu --needs "$B/examples/loom-resnet" --budget 120 -- "LOOM_PYTHON='$PY' '$ROOT/bench/resnet/run_resnet_vs_pytorch.sh' --device cuda --build '$B' --rounds 2 --steps 20"
# Where ResNet-50's fp16 step goes (0.45-0.47x PyTorch on the H200): the per-op table with device time.
step resnet50_fp16_profile --gpu --needs "$B/examples/loom-resnet" --budget 60 -- \
  "'$B/examples/loom-resnet' --model resnet50 --synthetic 3x224x224 --batch 256 --steps 6 --warmup 3 --shortcut A --device cuda --format nhwc --precision fp16 --profile '$B/r50-trace.json' --profile-warmup 4 --profile-steps 3"
# The op sweep at every size, dtype and layout on the GPU (tests/test_op_sweep.c's full mode).
step op_sweep_cuda_full --gpu --needs "$T/test_op_sweep" --budget 120 -- \
  "LOOM_TEST_DEVICE=cuda LOOM_SWEEP_FULL=1 '$T/test_op_sweep' --jobs 1 --filter 'op_sweep_cuda/*'"
# f32 without TF32 is the slow case: 16 sizes x 3 paths x (3 + 5 x reps) blocks;
# at 50 reps the H200 needed about 72 s (the first run was cut at 30 s after
# 14 of 16 sizes), at 20 reps about 30 s.
step linear_cuda_f32 --gpu --needs "$B/bench/bench_linear_cuda" --budget 60 -- "'$B/bench/bench_linear_cuda' 20 f32"
step op_overhead_vs_pytorch --gpu --needs "$B/bench/bench_op_overhead" --budget 60 -- "LOOM_PYTHON='$PY' '$ROOT/bench/op_overhead/run_op_overhead.sh' --device cuda --build '$B' --rounds 3 --iters 100000"
EPOCHS=3
((QUICK)) && EPOCHS=1
for prec in fp16 bf16; do
  step "mnist_$prec" --gpu --needs "$B/examples/loom-mnist" --budget 30 -- \
    "'$B/examples/loom-mnist' --device cuda --data '$MNIST_DATA' --epochs $EPOCHS --seed 42 --quiet --precision $prec"
done
# The whole step as one CUDA graph, trainer-level: samples/s of each line vs the eager mnist_fp32/fp16 runs.
for prec in fp32 fp16; do
  step "mnist_${prec}_cuda_graph" --gpu --needs "$B/examples/loom-mnist" --budget 30 -- \
    "'$B/examples/loom-mnist' --device cuda --data '$MNIST_DATA' --epochs $EPOCHS --seed 42 --precision $prec --cuda-graph"
done
# Trainer-level check that replays train: eager vs --cuda-graph, fp32 and fp16, loss must fall and the
# test accuracy match eager within 0.02 (examples/common/check_cuda_graph.sh; fails on the first GPU run's output).
step mnist_cuda_graph_trains --gpu --needs "$B/examples/loom-mnist" --budget 60 -- \
  "sh '$ROOT/examples/common/check_cuda_graph.sh' '$B/examples/loom-mnist' --device cuda --data '$MNIST_DATA' --epochs $EPOCHS --seed 42"
step resnet20_cuda_graph_trains --gpu --needs "$B/examples/loom-resnet" --budget 90 -- \
  "ACC_MARGIN=0.03 sh '$ROOT/examples/common/check_cuda_graph.sh' '$B/examples/loom-resnet' --device cuda --data '$MNIST_DATA' --epochs 1 --seed 42"
# Issue 28's quality target at the recipe's size (met on the H200, 2026-11-26: 1.2842 vs 1.2936; ~180 s): nanoGPT's baby GPT (6 x 384, context 256, batch 64,
# dropout 0.2, 5000 steps) on the default corpus, loom vs the twin from the same initial weights.
step gpt_baby_quality_bf16 --gpu --needs "$B/examples/loom-gpt" --data "$GPT_DATA" --budget 300 -- \
  "sh '$ROOT/bench/gpt/run_gpt_quality.sh' --build '$B' --python '$PY' -- --data '$GPT_DATA' --device cuda --precision bf16 --layers 6 --heads 6 --embd 384 --block 256 --batch 64 --steps 5000 --lr 1e-3 --min-lr 1e-4 --warmup 100 --dropout 0.2 --eval-batches 200"
# The CNN op tests run every case on LOOM_TEST_DEVICE (no *cuda* suite names): no filter.
step memcheck_test_ops_conv --gpu --sanitizer --needs "$T/test_ops_conv" --budget 60 -- \
  "LOOM_TEST_DEVICE=cuda compute-sanitizer --tool memcheck --report-api-errors no --leak-check full --error-exitcode 1 --target-processes all '$T/test_ops_conv' --jobs 1"
for dt in f16 bf16; do
  step "linear_cuda_$dt" --gpu --needs "$B/bench/bench_linear_cuda" --budget 30 -- "'$B/bench/bench_linear_cuda' 50 $dt"
done
step mlp_step_fused --gpu --needs "$B/bench/bench_mlp_step" --budget 30 -- "'$B/bench/bench_mlp_step' --device cuda"
step mlp_step_unfused --gpu --needs "$B/bench/bench_mlp_step" --budget 30 -- "'$B/bench/bench_mlp_step' --device cuda --unfused"
step amp --gpu --needs "$B/bench/bench_amp" --budget 30 -- "'$B/bench/bench_amp' cuda"
step conv_cudnn --gpu --needs "$B/bench/bench_conv" --budget 45 -- "'$B/bench/bench_conv' --device cuda --format nhwc --dtype f16"
step conv_cudnn_fused --gpu --needs "$B/bench/bench_conv" --budget 45 -- "'$B/bench/bench_conv' --device cuda --format nhwc --dtype f16 --fused"
# loom-resnet (ResNet-20, Fashion-MNIST, fp16, channels-last) eager vs one CUDA graph per step: samples/s.
for mode in eager cuda_graph; do
  flag=""
  [ "$mode" = cuda_graph ] && flag="--cuda-graph"
  step "resnet20_fp16_$mode" --gpu --needs "$B/examples/loom-resnet" --budget 60 -- \
    "'$B/examples/loom-resnet' --device cuda --data '$MNIST_DATA' --epochs 1 --seed 42 --precision fp16 $flag"
done
# The profiler with CUDA-event device time: its summary (in logs.txt) must show device slices.
step mnist_profile --gpu --needs "$B/examples/loom-mnist" --budget 30 -- \
  "'$B/examples/loom-mnist' --device cuda --data '$MNIST_DATA' --epochs 1 --seed 42 --quiet --profile '$B/gpu-trace.json' --logdir '$B/gpu-logs'"
step alloc --gpu --needs "$B/bench/bench_alloc" --budget 30 -- "'$B/bench/bench_alloc'"
step loader_cuda --gpu --needs "$B/bench/bench_loader" --budget 30 -- "'$B/bench/bench_loader' 20000 2 cuda"
# One rank, no launcher: the node has one GPU (NCCL refuses two ranks on one
# device) and bench_allreduce opens a one-rank NCCL communicator when started
# without mpirun. A smoke of the NCCL path (init, all-reduce, synchronize)
# with its times; busbw is 0 by definition at one rank.
step nccl_allreduce --gpu --needs "$B/bench/bench_allreduce" --budget 30 -- "'$B/bench/bench_allreduce' device=cuda max=67108864"
# The Python package's DLPack tests with torch on the GPU (the package from
# the tree, libloom from the build; the node's python needs pytest).
step python_dlpack_cuda --gpu --needs "$B/lib/libloom.so" --budget 60 -- \
  "cd '$ROOT/python' && LOOM_TEST_DEVICE=cuda LOOM_LIBRARY='$B/lib/libloom.so' PYTHONPATH='$ROOT/python' '${PY:-python3}' -m pytest -q -rs -p no:cacheprovider tests/test_dlpack.py"
step profiler_overhead --gpu --needs "$B/bench/bench_profiler" --budget 30 -- "'$B/bench/bench_profiler' --device cuda"
step cuda_graphs --gpu --needs "$B/bench/bench_cuda_graph" --budget 30 -- "'$B/bench/bench_cuda_graph' --device cuda"
step alloc_expandable --gpu --needs "$B/bench/bench_alloc_expandable" --budget 30 -- "'$B/bench/bench_alloc_expandable'"
step memory_step --gpu --needs "$B/bench/bench_memory_step" --budget 30 -- "'$B/bench/bench_memory_step' --device cuda --batch 2048 --layers 16 --width 256 --every 4"

# ---- compute-sanitizer on the rest (last: slow, and its time is hard to predict) ---------------------
# BINARY:FILTER, the filter a Criterion glob over suite/test. Each suite must
# exist in tests/BINARY.c: --plan checks it (a filter that matches nothing
# makes compute-sanitizer fail with "terminated before first instrumented API
# call", as the first GPU run found for test_nn_optim, test_amp and
# test_alloc_device, which have no CUDA suites: nn and the optimizers run on
# the GPU in test_train and test_optim_groups, AMP in test_cuda_paths'
# cuda_amp (memcheck_test_cuda_paths), the real device allocator in
# test_alloc_expandable's and test_cuda_paths' CUDA suites).
SAN_TESTS="test_sync:*cuda*/* test_ops_elementwise:*cuda*/* test_ops_reduce:*cuda*/* test_ops_loss:*cuda*/*
  test_ops_linalg:*cuda*/* test_train:train_cuda/* test_optim_groups:optim_groups_cuda/*
  test_alloc_expandable:alloc_expandable_cuda/* test_loader:loader_cuda/*"
((QUICK)) && SAN_TESTS="test_sync:*cuda*/*"
# The suites of tests/NAME.c: Test(s, ...) and CUDA_TEST(s, ...) name s;
# DEVICE_TEST(s, ...) names s_cpu and s_cuda (tests/support/testkit.h).
suites_of() {
  sed -nE 's/^(Test|CUDA_TEST|DEVICE_TEST)\([[:space:]]*([A-Za-z0-9_]+).*/\1 \2/p' "$ROOT/tests/$1.c" |
    awk '$1 == "DEVICE_TEST" { print $2 "_cpu"; print $2 "_cuda"; next } { print $2 }' | sort -u
}
# Whether Criterion filter F (suite-glob/test-glob) selects a suite of tests/NAME.c.
filter_matches() {
  local pat="${2%%/*}" su
  while read -r su; do
    # shellcheck disable=SC2053
    [[ "$su" == $pat ]] && return 0
  done < <(suites_of "$1")
  return 1
}
SAN_BAD=""
for e in $SAN_TESTS; do
  t="${e%%:*}" f="${e#*:}"
  filter_matches "$t" "$f" || SAN_BAD="$SAN_BAD $t:$f"
  step "memcheck_$t" --gpu --sanitizer --needs "$T/$t" --budget 60 -- \
    "LOOM_TEST_DEVICE=cuda compute-sanitizer --tool memcheck --report-api-errors no --leak-check full --error-exitcode 1 --target-processes all '$T/$t' --jobs 1 --filter '$f'"
done
CNN_SAN_TESTS="test_ops_batch_norm test_ops_pool test_ops_cnn_misc"
((QUICK)) && CNN_SAN_TESTS="test_ops_batch_norm"
for t in $CNN_SAN_TESTS; do
  step "memcheck_$t" --gpu --sanitizer --needs "$T/$t" --budget 60 -- \
    "LOOM_TEST_DEVICE=cuda compute-sanitizer --tool memcheck --report-api-errors no --leak-check full --error-exitcode 1 --target-processes all '$T/$t' --jobs 1"
done
for t in test_ops_loss test_ops_reduce; do
  filter_matches "$t" '*cuda*/*' || SAN_BAD="$SAN_BAD $t:*cuda*/*"
  step "racecheck_$t" --gpu --sanitizer --needs "$T/$t" --budget 60 -- \
    "LOOM_TEST_DEVICE=cuda compute-sanitizer --tool racecheck --error-exitcode 1 --target-processes all '$T/$t' --jobs 1 --filter '*cuda*/*'"
done
filter_matches test_cuda_paths '*cuda*/*' || SAN_BAD="$SAN_BAD test_cuda_paths:*cuda*/*"

# ---- --plan: print and check the plan, run nothing ---------------------------------------------------
if ((PLAN)); then
  awk -F'\t' -v total="$BUDGET" -v node="$NODE_LIMIT" -v san_bad="$SAN_BAD" '
    BEGIN { printf "%-30s %-5s %6s %9s  %s\n", "step", "tier", "budget", "starts by", "" }
    { t = $7; b = $6 + 0
      if (t == "core") { fit = (core + b <= total) ? "planned" : "OVER THE PLAN"; start = core; core += b; if (core > total) bad = 1 }
      else { fit = (core + extra + b <= total) ? "if the core steps use their whole budgets" : "only if earlier steps finish early"; start = core + extra; extra += b }
      printf "%-30s %-5s %5ds %8ds  %s\n", $1, t, b, start, fit }
    END {
      printf "\ncore steps: %d s of --budget %d s; node limit %d s (the device tool: 600 s a command)\n", core, total, node
      if (total + 60 > node) { print "plan: FAIL: --budget leaves under 60 s of the " node " s"; exit 1 }
      if (bad) { print "plan: FAIL: the core steps need more than --budget"; exit 1 }
      if (san_bad != "") { print "plan: FAIL: sanitizer filters that select no suite of their test file:" san_bad; exit 1 }
      print "plan: ok"
    }' "$TSV"
  exit $?
fi

# ---- the report ---------------------------------------------------------------------------------------
count() { awk -F'\t' -v s="$1" '$2 == s' "$TSV" | wc -l; }
TOTAL=$(( $(date +%s) - SUITE_T0 ))
{
  echo "# loom GPU suite — $(date -u +%Y-%m-%d)"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ), $TOTAL s for the whole suite"
  echo "- commit: \`$COMMIT\`; source fingerprint \`$TREE\`"
  if ((GPU_OK)); then echo "- device: $GPU_NAME"; else echo "- device: none ($GPU_WHY)"; fi
  echo "- runtime: $RUNTIME; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $JOBS cores"
  echo "- nvcc: $( [ -n "$NVCC" ] && "$NVCC" --version | grep -o 'release [0-9.]*' || echo none); python: ${PY:-none}$( [ -n "$PY" ] && "$PY" -c 'import torch; print(", torch", torch.__version__)' 2>/dev/null)"
  echo "- cuDNN: ${CUDNN:-not found}; NCCL: ${NCCL:-not found}"
  [ -f "$STATE/san_why" ] && SAN_WHY=$(cat "$STATE/san_why")
  echo "- compute-sanitizer: $( sanitizer_ok && echo works || echo "not used: $SAN_WHY")"
  echo "- deps bundle: ${DEPS:-none}; build: \`$B\`"
  echo "- steps: $(count pass) passed, $(count fail) failed, $(count skip) skipped"
  echo "- time plan: core steps $(awk -F'\t' '$7 == "core" {s += $6} END {print s + 0}' "$TSV") s of --budget $BUDGET s (node seconds$( ((SCALE > 1)) && echo ", every budget x$SCALE on this machine")); steps over their budget: $(awk -F'\t' -v k="$SCALE" '$2 != "skip" && $3 > $6 * k {printf "%s ", $1; n++} END {if (!n) printf "none"}' "$TSV")"
  echo
  echo "Command: \`scripts/gpu-suite.sh${DEPS:+ --deps DIR} --out DIR\` (see the README's GPU section)."
  echo
  echo "## Steps"
  echo
  echo "| step | tier | status | seconds | budget | note | command (BUILD = the build dir, DEPS = the bundle, . = the repository) |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  awk -F'\t' -v b="$B" -v r="$ROOT" -v d="${DEPS:-@none@}" -v k="$SCALE" '
    function sub_all(s, from, to,   i, out) { out = ""; while ((i = index(s, from)) > 0) { out = out substr(s, 1, i - 1) to; s = substr(s, i + length(from)) } return out s }
    { c = sub_all(sub_all(sub_all($5, b, "BUILD"), d, "DEPS"), r, "."); gsub(/\|/, "\\|", c); gsub(/\|/, "\\|", $4);
      if (length(c) > 240) c = substr(c, 1, 237) "...";
      printf "| %s | %s | %s | %s | %s | %s | `%s` |\n", $1, $7, $2, $3, $6 * k, $4, c }' "$TSV"
  echo
  echo "## Dependencies"
  echo
  if [ -s "$DEPS_TSV" ]; then
    echo "Where configure and the loader found each one (bundle = --deps, system, missing; optional ones may be absent)."
    echo
    echo "| dependency | from | path |"
    echo "| --- | --- | --- |"
    awk -F'\t' -v d="${DEPS:-@none@}" '{ p = $3; i = index(p, d); if (i == 1) p = "DEPS" substr(p, length(d) + 1); printf "| %s | %s | `%s` |\n", $1, $2, p }' "$DEPS_TSV"
  else
    echo "Not reported (the deps step did not run)."
  fi
  echo
  echo "## Figures"
  echo
  if [ -s "$FIGS" ]; then
    echo "Every result line, under the step whose command printed it (commands in the table above)."
    echo
    echo '```'
    cat "$FIGS"
    echo '```'
  else
    echo "None: no step that measures anything ran here."
  fi
  echo
  echo "Raw output of every step: logs.txt; machine-readable step list: steps.tsv."
} >"$REPORT"

echo
echo "gpu-suite: $(count pass) passed, $(count fail) failed, $(count skip) skipped in ${TOTAL}s — report: $REPORT"
awk -F'\t' -v k="$SCALE" '{ printf "  %-28s %-5s %7s of %4ds  %s\n", $1, $2, $3, $6 * k, substr($4, 1, 80) }' "$TSV"
# The whole ctest and build logs come back too (the step logs keep only tails),
# and the step list stays in the build dir for --skip-done.
for f in ctest_cuda.log build.log; do [ -f "$B/$f" ] && gzip -9c "$B/$f" >"$OUT/$f.gz"; done
cat "$TSV" >>"$B/steps-done.tsv"
# Exit status: 0 when nothing failed (skips are fine), 1 otherwise.
[ "$(count fail)" -eq 0 ]
