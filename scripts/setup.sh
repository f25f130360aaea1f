#!/usr/bin/env bash
# Installs everything pagedllm needs to build and test on Debian 12, by package name.
# Idempotent: when every package is already installed it only checks and returns.
set -euo pipefail

packages=(
  # toolchain
  cmake ninja-build g++ pkg-config git file
  # libraries of core and the plugins
  libboost-dev libyaml-cpp-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libopenblas-dev libpcre2-dev libutf8proc-dev
  # tests
  catch2
  # tokenizer fixtures (tools/tokenizer_fixtures/make_fixtures.py, run by /usr/bin/python3)
  python3-sentencepiece python3-regex
  # the PyTorch fidelity oracle, the CPU training path (tools/train) and plots (all via /usr/bin/python3)
  python3-torch python3-numpy python3-matplotlib
  # the JavaScript test client (the official openai npm package, installed into tests/js by npm)
  nodejs
)
# Debian ships npm as its own package; Node.js from elsewhere often bundles it.
if ! command -v npm >/dev/null 2>&1; then packages+=(npm); fi

# The JavaScript test client: the openai package pinned by tests/js/package-lock.json.
install_js_packages() {
  local js
  js="$(cd "$(dirname "$0")/.." && pwd)/tests/js"
  if [[ ! -f $js/node_modules/.package-lock.json || $js/package-lock.json -nt $js/node_modules/.package-lock.json ]]; then
    echo "setup: npm ci in tests/js"
    (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  install_js_packages
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
install_js_packages
