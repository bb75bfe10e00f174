#!/usr/bin/env bash
# bundle-offline.sh DIR — pack what the offline GPU node lacks into DIR (run
# on a Debian dev machine; DIR then travels with the device tool's `carry`):
#   DIR/include/...                every bundled dependency's headers
#   DIR/lib/libX.so.N, libX.so     every bundled library (under its SONAME,
#                                  and under its link name for -lX), and every
#                                  shared library they need that a stock
#                                  Ubuntu may not have (ldd; glibc, libgcc_s
#                                  and libstdc++ stay)
#   DIR/fashion-mnist/*.gz         the Fashion-MNIST IDX files
#   DIR/MANIFEST.txt               per dependency: package, version, files;
#                                  then every file with its size
# The dependencies are the table DEPS below, one line each: adding one (an
# image decoder, say) is one line, plus its Debian package in setup.sh.
# Plain files only (no symlinks: each carries its own SONAME). Use it with
#   cmake -DLOOM_DEPS_DIR=DIR      (cmake/LoomBundle.cmake: searched first)
# which is what scripts/gpu-suite.sh --deps DIR does. The test binaries are
# linked with DT_RPATH, so the bundled libraries' own dependencies are found
# in DIR/lib without LD_LIBRARY_PATH. Fails if the bundle exceeds 40 MiB.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ $# -ne 1 ]; then
  echo "usage: $0 DIR   (e.g. $0 .deps, which git ignores)" >&2
  exit 2
fi
DIR="$1"

# name | Debian package | headers under /usr/include (files or folders) | libraries (SONAMEs)
DEPS=(
  "criterion|libcriterion-dev|criterion|libcriterion.so.3"
  "zlib|zlib1g-dev|zlib.h zconf.h|libz.so.1"
  "jansson|libjansson-dev|jansson.h jansson_config.h|libjansson.so.4"
  "dlpack|libdlpack-dev|dlpack|"
)
MNIST=/usr/share/datasets/fashion-mnist
pkgs=()
for d in "${DEPS[@]}"; do IFS='|' read -r _ pkg _ _ <<<"$d"; pkgs+=("$pkg"); done
"$ROOT/scripts/setup.sh" "${pkgs[@]}" dataset-fashion-mnist   # only what is missing

# The file a SONAME resolves to here (ldconfig's cache, x86-64).
lib_path() { readlink -f "$(ldconfig -p | awk -v n="$1" '$1 == n && /x86-64/ {print $NF; exit}')"; }

rm -rf "$DIR"
mkdir -p "$DIR/include" "$DIR/lib" "$DIR/fashion-mnist"
ver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "?"; }
manifest=()
bundled_libs=()
for d in "${DEPS[@]}"; do
  IFS='|' read -r name pkg headers libs <<<"$d"
  for h in $headers; do
    [ -e "/usr/include/$h" ] || { echo "bundle: $name: /usr/include/$h not found ($pkg)" >&2; exit 1; }
    cp -r "/usr/include/$h" "$DIR/include/"
  done
  for so in $libs; do
    f=$(lib_path "$so")
    [ -f "$f" ] || { echo "bundle: $name: $so not found ($pkg)" >&2; exit 1; }
    cp "$f" "$DIR/lib/$so"
    cp "$f" "$DIR/lib/${so%%.so*}.so"   # the link name, for -l / find_library
    bundled_libs+=("$DIR/lib/$so")
  done
  manifest+=("$name: $pkg $(ver "$pkg"): headers ${headers:-none}; libraries ${libs:-none}")
done

# What the bundled libraries need, transitively (ldd lists it all), minus
# what every glibc system has.
stock='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libgcc_s|libstdc\+\+)\.so'
deps=()
for l in "${bundled_libs[@]}"; do
  while read -r name _ path _; do
    [[ "$name" =~ $stock ]] && continue
    [ -f "$DIR/lib/$name" ] && continue
    [ -f "$path" ] || { echo "bundle: $name needed by $(basename "$l") is not found here" >&2; exit 1; }
    cp "$(readlink -f "$path")" "$DIR/lib/$name"
    deps+=("$name")
  done < <(ldd "$l" | awk '/=>/ {print $1, $2, $3, $4}')
done

for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  cp "$MNIST/$f" "$DIR/fashion-mnist/"
done

# Every bundled library resolves inside the bundle or from the stock set.
for l in "${bundled_libs[@]}"; do
  if LD_LIBRARY_PATH="$DIR/lib" ldd "$l" | grep -q "not found"; then
    LD_LIBRARY_PATH="$DIR/lib" ldd "$l" >&2
    echo "bundle: a dependency of $(basename "$l") is missing" >&2
    exit 1
  fi
done

{
  echo "loom offline bundle for the GPU node, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "from loom commit $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  printf '%s\n' "${manifest[@]}"
  echo "their runtime dependencies: ${deps[*]}"
  echo "fashion-mnist: dataset-fashion-mnist $(ver dataset-fashion-mnist)"
  echo "use: cmake -DLOOM_DEPS_DIR=DIR (scripts/gpu-suite.sh --deps DIR)"
  echo
  (cd "$DIR" && find . -type f ! -name MANIFEST.txt -printf '%s\t%p\n' | sort -k2)
} >"$DIR/MANIFEST.txt"

bytes=$(du -sb "$DIR" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN{printf "%.1f", b / 1048576}')
echo "bundle: $DIR: $mib MiB, $(find "$DIR" -type f | wc -l) files (${#DEPS[@]} dependencies + ${#deps[@]} libraries they need, Fashion-MNIST)"
if [ "$bytes" -gt $((40 * 1048576)) ]; then
  echo "bundle: over the 40 MiB budget" >&2
  exit 1
fi
