#!/usr/bin/env bash
# bundle-offline.sh DIR — pack what the offline GPU node lacks into DIR (run
# on a Debian dev machine; DIR then travels with the device tool's `carry`):
#   DIR/include/criterion/...      Criterion's headers
#   DIR/include/zlib.h, zconf.h    zlib's headers (the node may have none)
#   DIR/lib/libcriterion.so.3      Criterion, and every shared library it
#   DIR/lib/lib*.so.N              needs that a stock Ubuntu may not have
#                                  (ldd; glibc, libgcc_s and libstdc++ stay)
#   DIR/lib/libz.so, libz.so.1     zlib to link against (the node has the
#                                  runtime, maybe not the -dev link)
#   DIR/include/jansson*.h,        jansson, for test_prof
#   DIR/lib/libjansson.so{,.4}
#   DIR/fashion-mnist/*.gz         the Fashion-MNIST IDX files
#   DIR/MANIFEST.txt               what, from which package versions, sizes
# Plain files only (no symlinks: each carries its own SONAME). Use it with
#   cmake -DCRITERION_ROOT=DIR -DZLIB_ROOT=DIR -DLOOM_FASHION_MNIST_DIR=DIR/fashion-mnist
# which is what scripts/gpu-suite.sh --deps DIR does. The test binaries are
# linked with DT_RPATH, so Criterion's own dependencies are found in DIR/lib
# without LD_LIBRARY_PATH. Fails if the bundle exceeds 40 MiB.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ $# -ne 1 ]; then
  echo "usage: $0 DIR   (e.g. $0 .deps, which git ignores)" >&2
  exit 2
fi
DIR="$1"
"$ROOT/scripts/setup.sh"   # libcriterion-dev, zlib1g-dev, dataset-fashion-mnist (only what is missing)

MNIST=/usr/share/datasets/fashion-mnist
CRIT=$(readlink -f "$(ldconfig -p | awk '/libcriterion\.so\.3 .*x86-64/ {print $NF; exit}')")
[ -f "$CRIT" ] || { echo "bundle: libcriterion.so.3 not found (libcriterion-dev)" >&2; exit 1; }
[ -f /usr/include/criterion/criterion.h ] || { echo "bundle: Criterion headers not found" >&2; exit 1; }
[ -f /usr/include/zlib.h ] || { echo "bundle: zlib.h not found (zlib1g-dev)" >&2; exit 1; }

rm -rf "$DIR"
mkdir -p "$DIR/include" "$DIR/lib" "$DIR/fashion-mnist"
cp -r /usr/include/criterion "$DIR/include/"
cp /usr/include/zlib.h /usr/include/zconf.h "$DIR/include/"
cp "$CRIT" "$DIR/lib/libcriterion.so.3"
ZLIB=$(readlink -f "$(ldconfig -p | awk '/libz\.so\.1 .*x86-64/ {print $NF; exit}')")
cp "$ZLIB" "$DIR/lib/libz.so.1"
cp "$ZLIB" "$DIR/lib/libz.so"
# jansson (test_prof parses Chrome traces with it).
JANSSON=$(readlink -f "$(ldconfig -p | awk '/libjansson\.so\.4 .*x86-64/ {print $NF; exit}')")
[ -f "$JANSSON" ] && [ -f /usr/include/jansson.h ] || { echo "bundle: jansson not found (libjansson-dev)" >&2; exit 1; }
cp /usr/include/jansson.h /usr/include/jansson_config.h "$DIR/include/"
cp "$JANSSON" "$DIR/lib/libjansson.so.4"
cp "$JANSSON" "$DIR/lib/libjansson.so"

# Criterion's dependencies, transitively (ldd lists them all), minus what
# every glibc system has.
stock='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libgcc_s|libstdc\+\+)\.so'
deps=()
while read -r name _ path _; do
  [[ "$name" =~ $stock ]] && continue
  [ -f "$path" ] || { echo "bundle: $name needed by Criterion is not found here" >&2; exit 1; }
  cp "$(readlink -f "$path")" "$DIR/lib/$name"
  deps+=("$name")
done < <(ldd "$CRIT" | awk '/=>/ {print $1, $2, $3, $4}')

for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  cp "$MNIST/$f" "$DIR/fashion-mnist/"
done

# Every bundled library resolves inside the bundle or from the stock set.
if LD_LIBRARY_PATH="$DIR/lib" ldd "$DIR/lib/libcriterion.so.3" | grep -q "not found"; then
  LD_LIBRARY_PATH="$DIR/lib" ldd "$DIR/lib/libcriterion.so.3" >&2
  echo "bundle: a dependency is missing" >&2
  exit 1
fi

ver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "?"; }
{
  echo "loom offline bundle for the GPU node, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "from loom commit $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "criterion: libcriterion-dev $(ver libcriterion-dev) ($CRIT)"
  echo "zlib: zlib1g-dev $(ver zlib1g-dev)"
  echo "jansson: libjansson-dev $(ver libjansson-dev)"
  echo "criterion's bundled dependencies: ${deps[*]}"
  echo "fashion-mnist: dataset-fashion-mnist $(ver dataset-fashion-mnist)"
  echo "use: cmake -DCRITERION_ROOT=DIR -DZLIB_ROOT=DIR -DLOOM_FASHION_MNIST_DIR=DIR/fashion-mnist (scripts/gpu-suite.sh --deps DIR)"
  echo
  (cd "$DIR" && find . -type f ! -name MANIFEST.txt -printf '%s\t%p\n' | sort -k2)
} >"$DIR/MANIFEST.txt"

bytes=$(du -sb "$DIR" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN{printf "%.1f", b / 1048576}')
echo "bundle: $DIR: $mib MiB, $(find "$DIR" -type f | wc -l) files (Criterion + ${#deps[@]} dependencies, zlib, Fashion-MNIST)"
if [ "$bytes" -gt $((40 * 1048576)) ]; then
  echo "bundle: over the 40 MiB budget" >&2
  exit 1
fi
