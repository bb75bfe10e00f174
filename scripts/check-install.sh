#!/bin/sh
# check-install.sh BUILD_DIR SOURCE_DIR — install loom into a scratch prefix,
# then build the README example against it twice, as a user would: with
# CMake's find_package(loom) and with pkg-config. Runs the results.
set -eu
build="$1"; src="$2"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
mkdir -p "$tmp/consumer"
cp "$src/examples/embed/example.c" "$tmp/consumer/"
cat > "$tmp/consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(loom REQUIRED)
add_executable(consumer example.c)
target_link_libraries(consumer PRIVATE loom::loom)
CM
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer/build" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/consumer/build/consumer"
echo "find_package(loom): ok"
libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -1)
PKG_CONFIG_PATH="$libdir" cc "$tmp/consumer/example.c" $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs loom) \
  -o "$tmp/consumer/pc"
LD_LIBRARY_PATH="$(dirname "$libdir")" "$tmp/consumer/pc"
echo "pkg-config loom: ok"
