#!/bin/sh
# check_install.sh PYTHON SOURCE_DIR WORK_DIR — the Python package's install
# path, as a user meets it: `pip wheel ./python` builds libloom itself with
# CMake (scikit-build-core from PyPI) into a wheel; the wheel is installed into
# a fresh venv and used from a directory outside the source tree, with no
# LOOM_LIBRARY: `python -m loom` must name the library inside the package,
# and the package's user-module and packaging tests must pass against it.
# CPU-only unless LOOM_CUDA says otherwise (the CUDA build of the same
# sources is the tree's own; this saves CI the second one). ccache is used
# when installed.
set -eu
py="$1"; src="$2"; work="$3"
rm -rf "$work"
mkdir -p "$work/elsewhere"
if [ -z "${CMAKE_C_COMPILER_LAUNCHER:-}" ] && command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
fi
start=$(date +%s)
LOOM_CUDA="${LOOM_CUDA:-OFF}" "$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$work/wheels" "$src/python"
echo "wheel built in $(($(date +%s) - start)) s: $(ls "$work/wheels")"
whl=$(ls "$work"/wheels/loom-*-py3-none-*.whl)
files=$("$py" -m zipfile -l "$whl")
echo "$files" | grep -q "loom/libloom.so" || { echo "the wheel holds no loom/libloom.so"; exit 1; }
echo "$files" | grep -q "loom/py.typed" || { echo "the wheel holds no loom/py.typed"; exit 1; }
# A fresh venv (the system's numpy and pytest through its site packages).
"$py" -c "import sys; sys.exit(0 if sys.prefix != sys.base_prefix else 1)" && base=$("$py" -c "import sys; print(sys.base_prefix)")/bin/python3 || base="$py"
"$base" -m venv --system-site-packages "$work/venv"
cd "$work/elsewhere"
env -u LOOM_LIBRARY -u PYTHONPATH "$work/venv/bin/pip" install -q --disable-pip-version-check --no-deps "$whl"
out=$(env -u LOOM_LIBRARY -u PYTHONPATH "$work/venv/bin/python" -m loom)
echo "$out"
echo "$out" | grep -q "^library: $work/venv/.*/site-packages/loom/libloom.so" || { echo "python -m loom did not load the packaged library"; exit 1; }
env -u LOOM_LIBRARY -u PYTHONPATH "$work/venv/bin/python" -m pytest -q -p no:cacheprovider \
  "$src/python/tests/test_package.py" "$src/python/tests/test_user_module.py"
echo "python install: ok"
