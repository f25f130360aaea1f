#!/usr/bin/env bash
# Run on the dev machine (Debian 12) before a GPU session: downloads the Debian
# packages of the libraries pagedllm builds against into .gpu-deps/ (about 23 MB,
# ignored by .gitignore), for the GPU machine, which has CUDA,
# CMake and a compiler but none of these and cannot download anything. A call to
# the device tool carries .gpu-deps; tools/gpu/validate.sh's deps stage unpacks
# them under /tmp/pagedllm-deps.
#
#   tools/gpu/pack_deps.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

packages=(
  libboost1.74-dev libboost-dev                     # Beast, Asio, DLL (headers only)
  libyaml-cpp-dev libyaml-cpp0.7
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  nlohmann-json3-dev catch2
  libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5
)
mkdir -p .gpu-deps
cd .gpu-deps
rm -f ./*.deb
apt-get download "${packages[@]}"
du -sh .
