#!/usr/bin/env bash
# Installs everything pagedllm needs to build and test on Debian 12: Debian's packages by
# name, then the project's Python virtual environment (.venv, git-ignored) from the pinned
# requirements.txt. Idempotent: with every package present and .venv matching
# requirements.txt it only checks and returns (seconds).
# Every Python tool and test runs .venv/bin/python (scripts/python.sh prints its path).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

packages=(
  # toolchain
  cmake ninja-build g++ pkg-config git file ccache
  # libraries of core and the plugins
  libboost-dev libyaml-cpp-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libopenblas-dev libpcre2-dev libutf8proc-dev
  # tests; clang and its compiler-rt build the libFuzzer targets (tools/fuzz)
  catch2 clang libclang-rt-dev
  # the interpreter the project's virtual environment is made from (Debian's Python 3.11)
  python3 python3-venv
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} Debian packages present"
else
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The virtual environment: made from Debian's /usr/bin/python3 (not whichever python3 is
# first on PATH), filled from requirements.txt (every package at an exact version), and
# stamped with the requirements' digest, so an unchanged one is a no-op and a changed one
# is brought in line.
venv=$repo/.venv
requirements=$repo/requirements.txt
stamp=$venv/.requirements.sha256
want=$(sha256sum "$requirements" | cut -d' ' -f1)
if [[ -x $venv/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
  echo "setup: .venv matches requirements.txt"
  exit 0
fi
start=$SECONDS
if [[ ! -x $venv/bin/python ]]; then
  echo "setup: making the virtual environment .venv (/usr/bin/python3 -m venv)"
  /usr/bin/python3 -m venv "$venv"
fi
echo "setup: installing requirements.txt into .venv (a fresh machine downloads about 3 GB: torch and its libraries)"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$requirements"
"$venv/bin/python" -m pip check >/dev/null
echo "$want" >"$stamp"
echo "setup: .venv ready in $((SECONDS - start)) s"
