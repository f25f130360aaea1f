"""Checks that the running interpreter holds exactly the packages requirements.txt pins.

Usage: check_python_env.py REQUIREMENTS_TXT

Exits 1 naming every package that is missing or at another version, with the command that
fixes it (scripts/setup.sh). The C++ and Python tests that need these packages fail rather
than skip without them; this test says why in one place.
"""

import sys
from importlib import metadata
from pathlib import Path


def pins(requirements: Path) -> dict[str, str]:
    pinned = {}
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise SystemExit(f"{requirements}: '{line}' is not pinned with ==")
        pinned[name.strip()] = version.strip()
    return pinned


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    problems = []
    pinned = pins(Path(sys.argv[1]))
    for name, version in pinned.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name}=={version}: not installed")
            continue
        if installed != version:
            problems.append(f"{name}=={version}: {installed} installed")
    if problems:
        print(f"{sys.executable} does not match {sys.argv[1]} (run scripts/setup.sh):", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"{sys.executable}: all {len(pinned)} pinned packages present")
    return 0


if __name__ == "__main__":
    sys.exit(main())
