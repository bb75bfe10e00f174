#!/bin/sh
# check-exports.sh LIB... — fails if a library defines any global symbol that
# is not part of loom's loom_* names (the ABI promise of docs/design.md §11):
#  - a shared library (libloom.so): its dynamic exports (nm -D) and its
#    global symbols (nm -g);
#  - a static library (libloom.a): the global symbols of its objects
#    (nm -g), which a user's program links beside its own, so an unprefixed
#    internal name there would clash with the user's.
# Allowed besides loom_*: what the compiler adds in sanitizer builds
# (AddressSanitizer's __odr_asan.<global> ODR indicators).
set -e
allowed='^loom_|^__odr_asan[.]'
status=0
for lib in "$@"; do
  case "$lib" in
    *.a) syms=$(nm -g --defined-only "$lib" | awk 'NF == 3 {print $3}') ;;
    *) syms=$( (nm -D --defined-only "$lib"; nm -g --defined-only "$lib") | awk 'NF == 3 {print $3}' | sort -u) ;;
  esac
  bad=$(printf '%s\n' "$syms" | grep -Ev "$allowed" | grep -v '^$' || true)
  count=$(printf '%s\n' "$syms" | grep -c '^loom_' || true)
  if [ -n "$bad" ]; then
    echo "non-loom symbols defined by $lib:"; echo "$bad"; status=1; continue
  fi
  if [ "$count" -le 100 ]; then
    echo "only $count loom_ symbols in $lib"; status=1; continue
  fi
  echo "$lib: $count loom_* symbols, nothing else"
done
exit $status
