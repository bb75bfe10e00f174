#!/usr/bin/env bash
# gpu-rehearsal.sh --work DIR [--deps BUNDLE] [--no-hide] [--quick]
#
# The GPU session, rehearsed on this Debian machine as the offline GPU node
# would run it (issue 22): scripts/gpu-suite.sh end to end, inside a private
# mount namespace (unshare -m; needs root) where every Debian package the
# node lacks is hidden (HIDE_PKGS below: Criterion and its libraries,
# jansson, cJSON, DLPack, zlib's headers, OpenBLAS, OpenMPI, Fashion-MNIST,
# the image codecs' -dev packages), so that only the offline bundle
# (scripts/bundle-offline.sh) can provide them, and with the node's python
# layout (python3 on PATH is a venv holding torch: made here with
# --system-site-packages over Debian's python3-torch).
#
# Then it checks what must hold before a GPU is spent on the suite:
#   - every dependency the suite reports (deps.tsv) was found, and each one
#     the bundle carries came from the bundle (not the system);
#   - every CUDA step is skipped for want of a GPU, and nothing failed;
#   - the time plan holds (gpu-suite.sh --plan), and no step that ran took
#     longer than its budget scaled to this machine (--budget-scale: 16
#     node cores / the cores here).
# Writes DIR/out/{report.md,steps.tsv,deps.tsv,logs.txt} and
# DIR/rehearsal.md (hidden packages, per dependency "from the bundle / from
# the system / missing", the checks). Exit 0 when everything holds.
#
# A package that a tool of the rehearsal itself needs (cmake, gcc, python3,
# nvcc, git, ld link some of Criterion's libraries, e.g. libssh2 and
# libcrypto through libcurl; ld links libjansson4) stays visible; the report
# names it (the bundle's copies are found first all the same: DT_RPATH). --no-hide
# runs without the namespace (no root): the dependency check then only
# proves that nothing is missing, not that the bundle suffices.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="" DEPS="" HIDE=1 QUICK=()
while (($#)); do
  case "$1" in
    --work) WORK="$2"; shift 2 ;;
    --deps) DEPS="$2"; shift 2 ;;
    --no-hide) HIDE=0; shift ;;
    --quick) QUICK=(--quick); shift ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "gpu-rehearsal: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$WORK" ] || { echo "gpu-rehearsal: --work DIR is required" >&2; exit 2; }
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
REPORT="$WORK/rehearsal.md"

# Debian packages the GPU node does not have (it has no apt at all). Add a
# dependency's packages here when scripts/bundle-offline.sh learns to carry it.
HIDE_PKGS=(
  libcriterion-dev libcriterion3 libboxfort-dev libnanomsg-dev libnanomsg5 libgit2-dev libgit2-1.5
  libmbedtls14 libmbedx509-1 libmbedcrypto7 libhttp-parser2.9 libffi-dev
  libjansson-dev libjansson4 libcjson-dev libcjson1 libdlpack-dev zlib1g-dev
  libopenblas-dev libopenblas-openmp-dev libopenblas-pthread-dev libopenblas0 libopenblas0-openmp
  libopenblas0-pthread libblas-dev libblas3 liblapack-dev liblapack3
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libmpich-dev mpich
  dataset-fashion-mnist libpng-dev libjpeg-dev libjpeg62-turbo-dev libturbojpeg0-dev
)
# What the rehearsal itself runs: their libraries stay visible.
# (Debian's ld links libjansson4 for --package-metadata: so does Ubuntu's.)
TOOLS=(cmake ctest gcc cc1 collect2 lto-wrapper as ld ld.bfd python3 git ninja make ccache /usr/local/cuda/bin/nvcc)

# ---- 1. the bundle, made outside the namespace (it copies Debian's files) -----------------
if [ -z "$DEPS" ]; then
  DEPS="$WORK/deps"
  "$ROOT/scripts/bundle-offline.sh" "$DEPS"
fi
DEPS="$(cd "$DEPS" && pwd)"

# ---- 2. the node's python: a venv with torch -------------------------------------------------
VENV="$WORK/venv"
[ -x "$VENV/bin/python3" ] || /usr/bin/python3 -m venv --system-site-packages "$VENV"
"$VENV/bin/python3" -c "import torch" 2>/dev/null || { echo "gpu-rehearsal: no torch in $VENV (python3-torch)" >&2; exit 1; }

# ---- 3. what to hide: every file of the packages above, less what the tools load -------------
installed=()
for p in "${HIDE_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && installed+=("$p")
done
tool_libs="$WORK/tool-libs.txt"
: >"$tool_libs"
for t in "${TOOLS[@]}"; do
  f=$(command -v "$t" 2>/dev/null || gcc -print-prog-name="$t" 2>/dev/null || true)
  [ -n "$f" ] && [ -x "$f" ] || continue
  ldd "$f" 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3}' | xargs -r readlink -f >>"$tool_libs"  || true
done
hidden=() kept=()
files="$WORK/hidden-files.txt"
: >"$files"
for p in "${installed[@]}"; do
  list=$(dpkg -L "$p" 2>/dev/null | sed 's|^/lib/|/usr/lib/|; s|^/bin/|/usr/bin/|' | while read -r f; do
           [ -f "$f" ] || [ -L "$f" ] && [ ! -d "$f" ] && case "$f" in /usr/*) echo "$f" ;; esac; done || true)
  # (the package's own files: a -dev package's libX.so link is not what a tool loads)
  if [ -s "$tool_libs" ] && grep -qxF -f "$tool_libs" <<<"$list"; then
    kept+=("$p")
  else
    hidden+=("$p")
    printf '%s\n' "$list" >>"$files"
  fi
done

# ---- 4. the suite inside the namespace -------------------------------------------------------------
SCALE=$(( (16 + $(nproc) - 1) / $(nproc) ))
OUT="$WORK/out" BUILD="$WORK/build"
rm -rf "$OUT"
suite=("$ROOT/scripts/gpu-suite.sh" --deps "$DEPS" --out "$OUT" --build "$BUILD" --commit rehearsal
       --budget-scale "$SCALE" "${QUICK[@]}")
mode=""
if ((HIDE)); then
  # An overlay over /usr whose upper layer holds a whiteout (char 0:0) per hidden file.
  upper="$WORK/ovl/upper" ovwork="$WORK/ovl/work"
  rm -rf "$WORK/ovl"
  mkdir -p "$upper" "$ovwork"
  # (one python process: a fork per file takes minutes on a loaded machine)
  /usr/bin/python3 - "$upper" "$files" <<'PY'
import os, stat, sys
upper, files = sys.argv[1], sys.argv[2]
for f in open(files).read().split():
    rel = os.path.relpath(f, "/usr")
    os.makedirs(os.path.join(upper, os.path.dirname(rel)), exist_ok=True)
    try:
        os.mknod(os.path.join(upper, rel), stat.S_IFCHR | 0o000, os.makedev(0, 0))
    except FileExistsError:
        pass
PY
  probe="/usr/include/jansson.h"
  # shellcheck disable=SC2016
  inner='mount -t overlay overlay -o lowerdir=/usr,upperdir="$1",workdir="$2" /usr || exit 90
         shift 2
         for f in /usr/include/criterion/criterion.h /usr/include/jansson.h /usr/include/zlib.h /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz; do
           [ ! -e "$f" ] || { echo "gpu-rehearsal: $f is still visible" >&2; exit 91; }
         done
         exec "$@"'
  rc=0
  PATH="$VENV/bin:$PATH" unshare -m --propagation private sh -c "$inner" rehearsal "$upper" "$ovwork" "${suite[@]}" \
    >"$WORK/suite.log" 2>&1 || rc=$?
  mode="in a private mount namespace, $(wc -l <"$files") files of ${#hidden[@]} packages hidden (e.g. $probe)"
  ((rc == 90)) && { tail -5 "$WORK/suite.log" >&2; echo "gpu-rehearsal: cannot mount the overlay (root? use --no-hide)" >&2; exit 1; }
  ((rc == 91)) && { tail -5 "$WORK/suite.log" >&2; exit 1; }
else
  rc=0
  PATH="$VENV/bin:$PATH" "${suite[@]}" >"$WORK/suite.log" 2>&1 || rc=$?
  mode="WITHOUT hiding anything (--no-hide): the system's packages were visible"
fi
tail -60 "$WORK/suite.log"

# ---- 5. the checks ------------------------------------------------------------------------------------------
problems=()
tsv="$OUT/steps.tsv" deps="$OUT/deps.tsv"
[ -s "$tsv" ] && [ -s "$OUT/report.md" ] || problems+=("the suite wrote no report (exit $rc)")
[ -s "$deps" ] || problems+=("the suite reported no dependencies (deps step)")
((rc == 0)) || problems+=("gpu-suite.sh exited $rc")
if [ -s "$tsv" ]; then
  # (awk: empty note fields would shift a shell `read`)
  while IFS= read -r p; do problems+=("$p"); done < <(awk -F'\t' -v k="$SCALE" '
    $2 == "fail" { print "step " $1 " failed: " $4 }
    $2 != "skip" && $3 + 0 > $6 * k { print "step " $1 " took " $3 " s, over its budget " $6 " s x" k }
    $1 ~ /^(ctest_cuda|mnist_|memcheck_|racecheck_|linear_cuda_|sanitizer_probe)/ && !($2 == "skip" && $4 ~ /^no GPU/) {
      print "CUDA step " $1 ": " $2 " (" $4 "), not skipped for want of a GPU" }' "$tsv")
fi
# What the bundle carries must come from it (with the packages hidden).
bundled="criterion_headers criterion_library zlib_headers zlib_library jansson_headers jansson_library dlpack_header fashion_mnist"
for l in "$DEPS"/lib/*.so.*; do bundled="$bundled runtime:$(basename "$l")"; done
if [ -s "$deps" ]; then
  while IFS= read -r p; do problems+=("$p"); done < <(awk -F'\t' -v hide="$HIDE" -v bundled=" $bundled " '
    $2 == "missing" { print "dependency " $1 " is missing"; next }
    hide && index(bundled, " " $1 " ") && $2 != "bundle" { print "dependency " $1 " came from the " $2 " (" $3 "), not the bundle" }' "$deps")
fi
plan=$("$ROOT/scripts/gpu-suite.sh" --plan "${QUICK[@]}" 2>&1) || problems+=("the time plan: $(echo "$plan" | tail -1)")

{
  echo "# GPU rehearsal — $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
  echo "scripts/gpu-suite.sh ran $mode, with --deps $DEPS, python3 = $VENV/bin/python3 (venv over Debian's torch), budgets x$SCALE ($(nproc) cores here, 16 on the node)."
  echo
  echo "- hidden packages: ${hidden[*]:-none}"
  echo "- kept visible (the rehearsal's own tools load them; the bundle carries its copies): ${kept[*]:-none}"
  echo "- suite: $(grep -E '^gpu-suite: [0-9]+ passed' "$WORK/suite.log" | tail -1 | sed 's/ — report.*//')"
  echo
  echo "## Dependencies"
  echo
  echo "| dependency | from | path |"
  echo "| --- | --- | --- |"
  [ -s "$deps" ] && awk -F'\t' -v d="$DEPS" '{ p = $3; if (index(p, d) == 1) p = "DEPS" substr(p, length(d) + 1); printf "| %s | %s | `%s` |\n", $1, $2, p }' "$deps"
  echo
  echo "## Time plan (node seconds)"
  echo
  echo '```'
  echo "$plan" | tail -3
  echo '```'
  echo
  echo "## Checks"
  echo
  if ((${#problems[@]})); then printf -- '- FAIL: %s\n' "${problems[@]}"; else echo "- all hold"; fi
} >"$REPORT"
echo
sed -n '/## Dependencies/,$p' "$REPORT"
if ((${#problems[@]})); then
  echo "gpu-rehearsal: FAILED (${#problems[@]} problems; $REPORT)"
  exit 1
fi
echo "ok: gpu rehearsal ($mode): every dependency found, each bundled one from the bundle, every CUDA step skipped, no step over its budget"
