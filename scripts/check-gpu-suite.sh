#!/bin/sh
# check-gpu-suite.sh SOURCE_DIR WORK_DIR — the GPU session, rehearsed here
# (issues 10 and 22; ctest gpu_suite_cpu): scripts/gpu-rehearsal.sh makes the
# offline bundle, hides the Debian packages the GPU node lacks (a private
# mount namespace, when this runs as root) and runs scripts/gpu-suite.sh
# --deps BUNDLE end to end (a fresh configure + build against the bundle);
# it checks that every dependency came from the bundle, that every CUDA step
# was skipped for want of a GPU, nothing failed, and that the time plan
# holds. Here, on top: --out satisfies the device tool's limits on returned
# files (at most 8, each under 16 MiB, at most two folders deep, names of
# letters, digits, '.', '_' and '-').
set -eu
src="$1"; work="$2"
rm -rf "$work"; mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
# Hiding needs a private mount namespace and an overlay mount (root, and a
# kernel/container that allow them): tried on a scratch directory first.
hide=""
p="$work/.overlay-probe"
mkdir -p "$p/lower" "$p/upper" "$p/work" "$p/mnt"
if [ "$(id -u)" != 0 ] || ! unshare -m --propagation private sh -c \
     "mount -t overlay overlay -o lowerdir=$p/lower,upperdir=$p/upper,workdir=$p/work $p/mnt" 2>/dev/null; then
  hide="--no-hide"
  echo "note: no private mount namespace with overlays here: the rehearsal runs with the system's packages visible"
fi
rm -rf "$p"
# shellcheck disable=SC2086
"$src/scripts/gpu-rehearsal.sh" --work "$work" $hide || fail "gpu-rehearsal.sh (see $work/rehearsal.md, $work/out/logs.txt)"
tsv="$work/out/steps.tsv"
status() { awk -F'\t' -v n="$1" '$1 == n { print $2 }' "$tsv"; }
for s in facts configure build deps bundle_criterion; do
  [ "$(status $s)" = pass ] || fail "step $s: $(status $s) (see $work/out/logs.txt)"
done
if nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then
  echo "note: a GPU is present: the CUDA steps ran (this check is meant for machines without one)"
else
  gpu_steps=$(awk -F'\t' '$4 ~ /^no GPU/' "$tsv" | wc -l)
  [ "$gpu_steps" -ge 20 ] || fail "only $gpu_steps steps were skipped for want of a GPU"
  grep -q "no GPU" "$work/out/report.md" || fail "the report does not say why the CUDA steps were skipped"
fi
grep -q "commit: \`rehearsal\`" "$work/out/report.md" || fail "the report does not name the commit"
grep -q "^## Dependencies" "$work/out/report.md" || fail "the report does not list the dependencies"
n=$(find "$work/out" -type f | wc -l)
[ "$n" -le 8 ] || fail "$n files under --out (the device tool returns 8)"
find "$work/out" -type f -size +16M | grep . && fail "a file over 16 MiB"
find "$work/out" -mindepth 3 | grep . && fail "something more than two folders deep"
find "$work/out" | sed "s|^$work/out||" | grep -E '[^A-Za-z0-9._/-]' && fail "a name the device tool would not return"
echo "ok: bundle + gpu-suite ran end to end ($(awk -F'\t' '$2 == "skip"' "$tsv" | wc -l) steps skipped, $n files under --out)"
