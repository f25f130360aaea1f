#!/usr/bin/env bash
# Runs the project's Python (.venv/bin/python, made by scripts/setup.sh) with the given
# arguments; every Python tool of the project is meant to run through it.
set -euo pipefail
python=$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python
if [[ ! -x $python ]]; then
  echo "scripts/python.sh: $python does not exist; run scripts/setup.sh" >&2
  exit 1
fi
exec "$python" "$@"
