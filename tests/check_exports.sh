#!/bin/sh
# check_exports.sh LIB — fails if the shared library exports any symbol that
# is not part of the public loom_* API (the ABI promise of DESIGN.md §3).
set -e
lib="$1"
syms=$(nm -D --defined-only "$lib" | awk '{print $3}')
bad=$(printf '%s\n' "$syms" | grep -v '^loom_' | grep -v '^$' || true)
count=$(printf '%s\n' "$syms" | grep -c '^loom_' || true)
if [ -n "$bad" ]; then
  echo "non-loom symbols exported by $lib:"; echo "$bad"; exit 1
fi
[ "$count" -gt 100 ] || { echo "only $count loom_ symbols exported by $lib"; exit 1; }
echo "$count loom_* symbols exported, nothing else"
