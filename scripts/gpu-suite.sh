#!/usr/bin/env bash
# gpu-suite.sh --deps DIR --out DIR [--build DIR] [--commit HASH] [--budget SECONDS] [--quick]
#
# Everything a session with a GPU should run, in one call (designed to fit
# the device tool's 10-minute command on an H100 in under 8): machine facts,
# configure + build for the local GPU, the test suite with
# LOOM_TEST_DEVICE=cuda, compute-sanitizer memcheck (and racecheck on the
# custom kernels) where it works, every benchmark with a CUDA mode, and
# loom-mnist on the GPU in fp32 / fp16 / bf16. --deps is the bundle from
# scripts/bundle-offline.sh (Criterion, zlib headers, Fashion-MNIST).
#
# Steps run in order of value: build, tests, benchmarks, loom-mnist, then
# the (slow, unpredictable) sanitizers. --budget (default 470 s, so the
# suite ends inside 8 minutes) caps each step's time by what is left, and
# steps that would start with under 20 s left are skipped with that reason.
#
# A step that fails is reported and the rest still runs; a step whose
# program does not exist yet, or that needs a GPU where there is none, is
# reported as skipped with the reason. So on a machine without a GPU the
# script runs end to end (ctest does that in CI, see tests/CMakeLists.txt).
#
# --out gets few, small files, at most one level deep (the device tool
# returns at most 8 files, 16 MiB each):
#   report.md    date, commit, device, each step with its command, status and
#                time, every result line (bench=..., result ...) with the
#                command that printed it
#   steps.tsv    step, status, seconds, note (machine-readable)
#   logs.txt     every step's output, each cut to its last 256 KiB
# The short table of steps is printed last.
#
# Adding a step is one line:  step NAME [--gpu] [--needs FILE] [--timeout S] -- command args...
#   --gpu      skipped (with the reason) when no GPU is usable
#   --needs F  skipped when F (a program) is not there yet
#   --sanitizer skipped when compute-sanitizer does not work here
#   --timeout  seconds before the step is killed (default 300)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="" OUT="" BUILD="" COMMIT="${LOOM_COMMIT:-}" QUICK=0 BUDGET=470
while (($#)); do
  case "$1" in
    --deps) DEPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --commit) COMMIT="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    --quick) QUICK=1; shift ;;
    -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
    *) echo "gpu-suite: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$OUT" ] || { echo "gpu-suite: --out DIR is required" >&2; exit 2; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
if [ -n "$DEPS" ]; then
  [ -d "$DEPS" ] || { echo "gpu-suite: --deps $DEPS is not a directory (make it with scripts/bundle-offline.sh)" >&2; exit 2; }
  DEPS="$(cd "$DEPS" && pwd)"
fi
BUILD="${BUILD:-$ROOT/build-gpu}"
mkdir -p "$BUILD"
BUILD="$(cd "$BUILD" && pwd)"
JOBS="$(nproc 2>/dev/null || echo 4)"
REPORT="$OUT/report.md" TSV="$OUT/steps.tsv" LOGS="$OUT/logs.txt"
: >"$TSV"
: >"$LOGS"
FIGS="$(mktemp)"
trap 'rm -f "$FIGS"' EXIT
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
SAN_OK=0 SAN_WHY="no GPU"

# ---- the step helper --------------------------------------------------------------------
# step NAME [--gpu] [--sanitizer] [--needs FILE] [--timeout S] -- command...
step() {
  local name="$1"; shift
  local need_gpu=0 need_san=0 needs="" tmo=300
  while (($#)) && [ "$1" != "--" ]; do
    case "$1" in
      --gpu) need_gpu=1; shift ;;
      --sanitizer) need_san=1; shift ;;
      --needs) needs="$2"; shift 2 ;;
      --timeout) tmo="$2"; shift 2 ;;
      *) echo "gpu-suite: step $name: unknown option $1" >&2; return 0 ;;
    esac
  done
  shift  # the --
  local cmd="$*" status note="" secs=0
  local left=$((BUDGET - ($(date +%s) - SUITE_T0)))
  if ((need_gpu)) && ((!GPU_OK)); then
    status=skip note="$GPU_WHY"
  elif ((need_san)) && ((!SAN_OK)); then
    status=skip note="compute-sanitizer: $SAN_WHY"
  elif [ -n "$needs" ] && [ ! -x "$needs" ]; then
    status=skip note="not built yet: ${needs#"$BUILD"/}"
  elif ((left < 20)); then
    status=skip note="time budget (--budget $BUDGET s) spent"
  else
    ((tmo > left)) && tmo=$left
    local log t0 rc
    log="$(mktemp)"
    t0=$(date +%s.%N)
    timeout --kill-after=10 "$tmo" bash -c "$cmd" >"$log" 2>&1
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
    { echo "===== $name ($status, ${secs}s): $cmd"; tail -c 262144 "$log"; echo; } >>"$LOGS"
    grep -E "^(bench=|result )" "$log" | sed "s|^|$name\t|" >>"$FIGS" || true
    rm -f "$log"
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$secs" "$note" "$cmd" >>"$TSV"
  printf 'gpu-suite: %-28s %-5s %6ss %s\n' "$name" "$status" "$secs" "$note"
}

B="$BUILD"
T="$B/tests"
export B T JOBS ROOT DEPS PY NVCC COMMIT TREE

# Steps longer than one command are functions (exported to the step's shell).
facts() {
  echo "commit: $COMMIT"; echo "source fingerprint: $TREE"
  uname -a; echo "cores: $(nproc)"; free -g | head -2
  nvidia-smi || echo "nvidia-smi: none"
  "${NVCC:-nvcc}" --version 2>/dev/null | tail -2 || echo "nvcc: none"
  cmake --version | head -1
  { command -v ninja && ninja --version; } || echo "ninja: none"
  echo "python with torch: ${PY:-none}"
  [ -n "$PY" ] && "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())'
  compute-sanitizer --version 2>/dev/null | tail -1 || echo "compute-sanitizer: none"
  return 0
}
bundle_criterion() {
  env -u LD_LIBRARY_PATH ldd "$T/test_dtype" | grep -E "criterion|nanomsg|git2"
  env -u LD_LIBRARY_PATH ldd "$T/test_dtype" | grep -q "libcriterion.so.3 => $DEPS/lib/" ||
    { echo "note: the test binaries do not load the bundle's Criterion"; return 1; }
  env -u LD_LIBRARY_PATH "$T/test_dtype" --jobs 1
}
ctest_cuda() {
  local rc=0
  (cd "$B" && LOOM_TEST_DEVICE=cuda ctest --output-on-failure -j"$JOBS" -E '^gpu_suite') || rc=$?
  echo; echo "CUDA test cases that passed, per binary (run again with the cuda filter):"
  local t n total=0
  for t in "$T"/test_*; do
    [ -x "$t" ] || continue
    n=$(LOOM_TEST_DEVICE=cuda "$t" --filter '*cuda*/*' --verbose 2>&1 | grep -c '^\[PASS\]')
    echo "  $(basename "$t"): $n"
    total=$((total + n))
  done
  echo "note: $total CUDA test cases passed"
  return $rc
}
export -f facts bundle_criterion ctest_cuda

# ---- facts and build ------------------------------------------------------------------------
step facts --timeout 60 -- facts

CMAKE_ARGS=(-S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Release -DLOOM_WERROR=ON)
command -v ninja >/dev/null 2>&1 && [ ! -f "$B/CMakeCache.txt" ] && CMAKE_ARGS+=(-G Ninja)
if [ -n "$DEPS" ]; then
  # (-U: a reused build dir must look again, the bundle may have moved)
  CMAKE_ARGS+=(-UCRITERION_LIBRARY -UCRITERION_INCLUDE_DIR -U'ZLIB_*' -DCRITERION_ROOT="$DEPS" -DZLIB_ROOT="$DEPS"
               -DLOOM_FASHION_MNIST_DIR="$DEPS/fashion-mnist")
fi
if [ -n "$NVCC" ]; then
  CMAKE_ARGS+=(-DLOOM_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC")
  ((GPU_OK)) && CMAKE_ARGS+=(-DCMAKE_CUDA_ARCHITECTURES=native)
fi
step configure --timeout 300 -- "cmake ${CMAKE_ARGS[*]@Q} && grep -E '^(CUDNN_LIBRARY|NCCL_LIBRARY|CRITERION_LIBRARY|ZLIB_LIBRARY_RELEASE|CMAKE_CUDA_ARCHITECTURES|LOOM_BUILD_TESTS):' '$B/CMakeCache.txt'"
step build --timeout 420 -- "cmake --build '$B' -j$JOBS"
CUDNN=$(sed -n 's/^CUDNN_LIBRARY:FILEPATH=//p' "$B/CMakeCache.txt" 2>/dev/null)
NCCL=$(sed -n 's/^NCCL_LIBRARY:FILEPATH=//p' "$B/CMakeCache.txt" 2>/dev/null)

# The bundle works: the test binaries run Criterion from it without LD_LIBRARY_PATH.
if [ -n "$DEPS" ]; then
  step bundle_criterion --needs "$T/test_dtype" --timeout 120 -- bundle_criterion
fi

# compute-sanitizer: works on the Firecracker (H100) kind, refused under gVisor (H200).
if ((GPU_OK)); then
  if ! command -v compute-sanitizer >/dev/null 2>&1; then
    SAN_WHY="not installed"
  elif [ ! -x "$B/bench/bench_op_overhead" ]; then
    SAN_WHY="nothing built to try it on"
  elif timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 "$B/bench/bench_op_overhead" --device cuda \
         --iters 400 --reps 1 >"$OUT/.san_probe" 2>&1; then
    SAN_OK=1 SAN_WHY=""
  else
    SAN_WHY="refused here ($(grep -m1 -iE 'error|not supported' "$OUT/.san_probe" | cut -c1-120))"
  fi
  rm -f "$OUT/.san_probe"
fi

# ---- tests on the GPU ----------------------------------------------------------------------------
step ctest_cuda --gpu --timeout 240 -- ctest_cuda
# The op sweep at every size, dtype and layout on the GPU (tests/test_op_sweep.c's full mode).
step op_sweep_cuda_full --gpu --needs "$T/test_op_sweep" --timeout 300 -- \
  "LOOM_TEST_DEVICE=cuda LOOM_SWEEP_FULL=1 '$T/test_op_sweep' --jobs 1 --filter 'op_sweep_cuda/*'"
# ---- benchmarks with a CUDA mode ------------------------------------------------------------------
for dt in f32 f16 bf16; do
  step "linear_cuda_$dt" --gpu --needs "$B/bench/bench_linear_cuda" --timeout 180 -- "'$B/bench/bench_linear_cuda' 50 $dt"
done
step mlp_step_fused --gpu --needs "$B/bench/bench_mlp_step" --timeout 180 -- "'$B/bench/bench_mlp_step' --device cuda"
step mlp_step_unfused --gpu --needs "$B/bench/bench_mlp_step" --timeout 180 -- "'$B/bench/bench_mlp_step' --device cuda --unfused"
step mlp_vs_pytorch --gpu --needs "$B/bench/bench_mlp_step" --timeout 300 -- "LOOM_PYTHON='$PY' '$ROOT/bench/mlp/run_mlp_vs_pytorch.sh' --device cuda --build '$B' --rounds 3"
step op_overhead_vs_pytorch --gpu --needs "$B/bench/bench_op_overhead" --timeout 300 -- "LOOM_PYTHON='$PY' '$ROOT/bench/op_overhead/run_op_overhead.sh' --device cuda --build '$B' --rounds 3 --iters 100000"
step amp --gpu --needs "$B/bench/bench_amp" --timeout 240 -- "'$B/bench/bench_amp' cuda"
step alloc --gpu --needs "$B/bench/bench_alloc" --timeout 180 -- "'$B/bench/bench_alloc'"
step loader_cuda --gpu --needs "$B/bench/bench_loader" --timeout 180 -- "'$B/bench/bench_loader' 20000 2 cuda"
# Benchmarks other work is adding (skipped until their programs exist).
step conv_cudnn --gpu --needs "$B/bench/bench_conv" --timeout 240 -- "'$B/bench/bench_conv' --device cuda --format nhwc --dtype f16"
step conv_cudnn_fused --gpu --needs "$B/bench/bench_conv" --timeout 180 -- "'$B/bench/bench_conv' --device cuda --format nhwc --dtype f16 --fused"
step resnet50_amp_vs_pytorch --gpu --needs "$B/examples/loom-resnet" --timeout 300 -- "LOOM_PYTHON='$PY' '$ROOT/bench/resnet/run_resnet_vs_pytorch.sh' --device cuda --build '$B' --rounds 2 --steps 20"
step nccl_allreduce --gpu --needs "$B/bench/bench_allreduce" --timeout 180 -- "'$B/bench/bench_allreduce' --device cuda"
step profiler_overhead --gpu --needs "$B/bench/bench_profiler" --timeout 180 -- "'$B/bench/bench_profiler' --device cuda"
step cuda_graphs --gpu --needs "$B/bench/bench_cuda_graph" --timeout 180 -- "'$B/bench/bench_cuda_graph' --device cuda"
step alloc_expandable --gpu --needs "$B/bench/bench_alloc_expandable" --timeout 180 -- "'$B/bench/bench_alloc_expandable'"
step memory_step --gpu --needs "$B/bench/bench_memory_step" --timeout 180 -- "'$B/bench/bench_memory_step' --device cuda --batch 2048 --layers 16 --width 256 --every 4"

# ---- loom-mnist on the GPU -------------------------------------------------------------------------
MNIST_DATA="${DEPS:+$DEPS/fashion-mnist}"
MNIST_DATA="${MNIST_DATA:-/usr/share/datasets/fashion-mnist}"
EPOCHS=3
((QUICK)) && EPOCHS=1
for prec in fp32 fp16 bf16; do
  step "mnist_$prec" --gpu --needs "$B/examples/loom-mnist" --timeout 240 -- \
    "'$B/examples/loom-mnist' --device cuda --data '$MNIST_DATA' --epochs $EPOCHS --seed 42 --quiet --precision $prec"
done
# The whole step as one CUDA graph, trainer-level: samples/s of each line vs the eager mnist_fp32/fp16 runs.
for prec in fp32 fp16; do
  step "mnist_${prec}_cuda_graph" --gpu --needs "$B/examples/loom-mnist" --timeout 240 -- \
    "'$B/examples/loom-mnist' --device cuda --data '$MNIST_DATA' --epochs $EPOCHS --seed 42 --precision $prec --cuda-graph"
done
# loom-resnet (ResNet-20, Fashion-MNIST, fp16, channels-last) eager vs one CUDA graph per step: samples/s.
for mode in eager cuda_graph; do
  flag=""
  [ "$mode" = cuda_graph ] && flag="--cuda-graph"
  step "resnet20_fp16_$mode" --gpu --needs "$B/examples/loom-resnet" --timeout 300 -- \
    "'$B/examples/loom-resnet' --device cuda --data '$MNIST_DATA' --epochs 1 --seed 42 --precision fp16 $flag"
done
# The profiler with CUDA-event device time: its summary (in logs.txt) must show device slices.
step mnist_profile --gpu --needs "$B/examples/loom-mnist" --timeout 180 -- \
  "'$B/examples/loom-mnist' --device cuda --data '$MNIST_DATA' --epochs 1 --seed 42 --quiet --profile '$B/gpu-trace.json' --logdir '$B/gpu-logs'"

# ---- compute-sanitizer (last: slow, and its time is hard to predict) ----------------------------------
SAN_TESTS="test_ops_elementwise test_ops_reduce test_ops_loss test_ops_linalg test_nn_optim test_amp test_alloc_device test_loader test_sync test_cuda_paths"
((QUICK)) && SAN_TESTS="test_cuda_paths test_sync"
for t in $SAN_TESTS; do
  step "memcheck_$t" --gpu --sanitizer --needs "$T/$t" --timeout 240 -- \
    "LOOM_TEST_DEVICE=cuda compute-sanitizer --tool memcheck --leak-check full --error-exitcode 1 --target-processes all '$T/$t' --jobs 1 --filter '*cuda*/*'"
done
# The CNN op tests run every case on LOOM_TEST_DEVICE (no *cuda* suite names): no filter.
CNN_SAN_TESTS="test_ops_conv test_ops_batch_norm test_ops_pool test_ops_cnn_misc"
((QUICK)) && CNN_SAN_TESTS="test_ops_batch_norm"
for t in $CNN_SAN_TESTS; do
  step "memcheck_$t" --gpu --sanitizer --needs "$T/$t" --timeout 240 -- \
    "LOOM_TEST_DEVICE=cuda compute-sanitizer --tool memcheck --leak-check full --error-exitcode 1 --target-processes all '$T/$t' --jobs 1"
done
for t in test_ops_loss test_ops_reduce; do
  step "racecheck_$t" --gpu --sanitizer --needs "$T/$t" --timeout 240 -- \
    "LOOM_TEST_DEVICE=cuda compute-sanitizer --tool racecheck --error-exitcode 1 --target-processes all '$T/$t' --jobs 1 --filter '*cuda*/*'"
done

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
  echo "- compute-sanitizer: $( ((SAN_OK)) && echo works || echo "not used: $SAN_WHY")"
  echo "- deps bundle: ${DEPS:-none}; build: \`$B\`"
  echo "- steps: $(count pass) passed, $(count fail) failed, $(count skip) skipped"
  echo
  echo "Command: \`scripts/gpu-suite.sh${DEPS:+ --deps DIR} --out DIR\` (see the README's GPU section)."
  echo
  echo "## Steps"
  echo
  echo "| step | status | seconds | note | command (BUILD = the build dir, DEPS = the bundle, . = the repository) |"
  echo "| --- | --- | --- | --- | --- |"
  awk -F'\t' -v b="$B" -v r="$ROOT" -v d="${DEPS:-@none@}" '
    function sub_all(s, from, to,   i, out) { out = ""; while ((i = index(s, from)) > 0) { out = out substr(s, 1, i - 1) to; s = substr(s, i + length(from)) } return out s }
    { c = sub_all(sub_all(sub_all($5, b, "BUILD"), d, "DEPS"), r, "."); gsub(/\|/, "\\|", c); gsub(/\|/, "\\|", $4);
      if (length(c) > 240) c = substr(c, 1, 237) "...";
      printf "| %s | %s | %s | %s | `%s` |\n", $1, $2, $3, $4, c }' "$TSV"
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
awk -F'\t' '{ printf "  %-28s %-5s %7s  %s\n", $1, $2, $3, substr($4, 1, 90) }' "$TSV"
# Exit status: 0 when nothing failed (skips are fine), 1 otherwise.
[ "$(count fail)" -eq 0 ]
