#!/bin/sh
# check-install.sh BUILD_DIR SOURCE_DIR — install loom into a scratch prefix,
# then build the README's C example against it twice, as a user would: with
# CMake's find_package(loom) and with pkg-config; and the C++ example
# (loom.hpp) from a C++-only CMake project, and statically through
# `pkg-config --static`. Runs the results.
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
# A C++ project (no C enabled) using include/loom/loom.hpp, the README's C++ example.
mkdir -p "$tmp/consumer_cpp"
cp "$src/examples/cpp/example.cpp" "$tmp/consumer_cpp/"
cat > "$tmp/consumer_cpp/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(consumer_cpp CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(loom REQUIRED)
add_executable(consumer_cpp example.cpp)
target_compile_options(consumer_cpp PRIVATE -Wall -Wextra -Werror)
target_link_libraries(consumer_cpp PRIVATE loom::loom)
CM
cmake -S "$tmp/consumer_cpp" -B "$tmp/consumer_cpp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer_cpp/build" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/consumer_cpp/build/consumer_cpp"
echo "find_package(loom) from C++: ok"
libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -1)
PKG_CONFIG_PATH="$libdir" cc "$tmp/consumer/example.c" $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs loom) \
  -o "$tmp/consumer/pc"
LD_LIBRARY_PATH="$(dirname "$libdir")" "$tmp/consumer/pc"
# A static-only install (no libloom.so): `pkg-config --static` must name every
# library libloom.a needs (loom.pc's Libs.private), or this link fails.
cp -a "$tmp/prefix" "$tmp/static_prefix"
rm -f "$tmp"/static_prefix/lib*/libloom.so*
slibdir=$(ls -d "$tmp"/static_prefix/lib*/pkgconfig | head -1)
cc "$tmp/consumer/example.c" $(PKG_CONFIG_PATH="$slibdir" pkg-config --static --cflags --libs loom) \
  -o "$tmp/consumer/pc_static"
"$tmp/consumer/pc_static"
echo "pkg-config --static loom: ok"
echo "pkg-config loom: ok"
