#!/bin/sh
# check-gpu-suite.sh SOURCE_DIR WORK_DIR — the GPU session's two commands,
# run here (issue 10): scripts/bundle-offline.sh makes the bundle, then
# scripts/gpu-suite.sh --deps BUNDLE --out OUT runs end to end with it (a
# fresh configure + build against the bundle's Criterion and zlib). Without
# a GPU every CUDA step must be reported as skipped with the reason, nothing
# may fail, and --out must satisfy the device tool's limits on returned files
# (at most 8, each under 16 MiB, at most two folders deep, names of letters,
# digits, '.', '_' and '-').
set -eu
src="$1"; work="$2"
rm -rf "$work"; mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$src/scripts/bundle-offline.sh" "$work/deps" || fail "bundle-offline.sh"
rc=0
"$src/scripts/gpu-suite.sh" --deps "$work/deps" --out "$work/out" --build "$work/build" --commit test-run >"$work/suite.log" 2>&1 || rc=$?
tail -45 "$work/suite.log"
tsv="$work/out/steps.tsv"
[ -s "$work/out/report.md" ] && [ -s "$tsv" ] && [ -f "$work/out/logs.txt" ] || fail "report.md, steps.tsv or logs.txt missing"
status() { awk -F'\t' -v n="$1" '$1 == n { print $2 }' "$tsv"; }
for s in facts configure build bundle_criterion; do
  [ "$(status $s)" = pass ] || fail "step $s: $(status $s) (see $work/out/logs.txt)"
done
if nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then
  echo "note: a GPU is present: the CUDA steps ran (this check is meant for machines without one)"
else
  [ "$rc" -eq 0 ] || fail "gpu-suite.sh exited $rc without a GPU"
  gpu_steps=$(awk -F'\t' '$4 ~ /^no GPU/' "$tsv" | wc -l)
  [ "$gpu_steps" -ge 20 ] || fail "only $gpu_steps steps were skipped for want of a GPU"
  awk -F'\t' '$2 == "fail"' "$tsv" | grep . && fail "a step failed"
  awk -F'\t' '$1 ~ /^(ctest_cuda|mnist_|memcheck_|linear_cuda_|mlp_|op_overhead)/ && $2 != "skip"' "$tsv" | grep . &&
    fail "a CUDA step was not skipped"
  grep -q "no GPU" "$work/out/report.md" || fail "the report does not say why the CUDA steps were skipped"
fi
grep -q "commit: \`test-run\`" "$work/out/report.md" || fail "the report does not name the commit"
n=$(find "$work/out" -type f | wc -l)
[ "$n" -le 8 ] || fail "$n files under --out (the device tool returns 8)"
find "$work/out" -type f -size +16M | grep . && fail "a file over 16 MiB"
find "$work/out" -mindepth 3 | grep . && fail "something more than two folders deep"
find "$work/out" | sed "s|^$work/out||" | grep -E '[^A-Za-z0-9._/-]' && fail "a name the device tool would not return"
echo "ok: bundle + gpu-suite ran end to end ($(awk -F'\t' '$2 == "skip"' "$tsv" | wc -l) steps skipped, $n files under --out)"
