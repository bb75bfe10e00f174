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
