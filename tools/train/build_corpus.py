"""Builds the pinned training corpus: the Python 3.11 standard library of this
machine (Debian 12), packed into a deterministic archive that every training
script reads instead of the file system.

    scripts/python.sh tools/train/build_corpus.py            # (re)build and write the files below
    scripts/python.sh tools/train/build_corpus.py --check    # rebuild in memory, compare with the committed archive

Writes into tools/train/corpus/:
  python-stdlib.tar.xz   the archive: stdlib/<path> for every selected file, plus
                         MANIFEST.tsv and HELDOUT.txt (the same as the two files below)
  MANIFEST.tsv           path, size, sha256 of every file, in archive order (sorted paths)
  HELDOUT.txt            the held-out file list (evaluation only, never trained on)
  corpus.sha256          sha256 of the archive and of MANIFEST.tsv

Selection (documented in docs/training.md):
  - every regular *.py file under /usr/lib/python3.11, paths sorted bytewise;
  - excluded: dist-packages/ and site-packages/ (third-party code), __pycache__/,
    symbolic links, empty files, and three kinds of generated data files that are not
    code anyone writes by hand: the charmap codec tables in encodings/ (files that
    define a module-level `decoding_table =` or `decoding_map =`), pydoc_data/topics.py
    (750 KB of documentation strings), and _sysconfigdata_*.py (this machine's build
    variables);
  - test/ is kept: Debian installs only the regression-test *support* package there
    (libregrtest, support/), which is ordinary library code.
Held-out split: a file is held out when the first 8 hex digits of sha256(path), read as
an integer, are divisible by HELDOUT_MODULUS (about 1 file in 40). The list is written
out explicitly; training reads it from the archive.

The archive is deterministic: ustar entries in sorted order with mtime 0, uid/gid 0,
empty owner names, mode 0644, compressed with xz preset 9 (CRC64) in one call, so the
same files give the same bytes with the same liblzma.
"""
import argparse
import hashlib
import io
import lzma
import os
import re
import sys
import tarfile

STDLIB = "/usr/lib/python3.11"
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tools", "train", "corpus")
ARCHIVE = "python-stdlib.tar.xz"
HELDOUT_MODULUS = 40
CHARMAP = re.compile(rb"^decoding_(table|map) =", re.M)


def heldout(path):
    return int(hashlib.sha256(path.encode("utf-8")).hexdigest()[:8], 16) % HELDOUT_MODULUS == 0


def select_files(stdlib):
    chosen, skipped = [], []
    for root, dirs, files in os.walk(stdlib):
        rel_root = os.path.relpath(root, stdlib)
        parts = [] if rel_root == "." else rel_root.split(os.sep)
        if any(p in ("dist-packages", "site-packages", "__pycache__") for p in parts):
            continue
        for name in files:
            if not name.endswith(".py"):
                continue
            full = os.path.join(root, name)
            rel = "/".join(parts + [name])
            if os.path.islink(full):
                skipped.append((rel, "symlink"))
                continue
            with open(full, "rb") as f:
                data = f.read()
            if not data:
                skipped.append((rel, "empty"))
            elif rel.startswith("encodings/") and CHARMAP.search(data):
                skipped.append((rel, "generated charmap table"))
            elif rel == "pydoc_data/topics.py":
                skipped.append((rel, "generated documentation strings"))
            elif name.startswith("_sysconfigdata_"):
                skipped.append((rel, "generated build variables"))
            else:
                data.decode("utf-8")  # every file must be UTF-8 (raises otherwise)
                chosen.append((rel, data))
    chosen.sort(key=lambda item: item[0].encode("utf-8"))
    skipped.sort()
    return chosen, skipped


def tar_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    tar.addfile(info, io.BytesIO(data))


def build(stdlib):
    files, skipped = select_files(stdlib)
    manifest = "".join(f"{p}\t{len(d)}\t{hashlib.sha256(d).hexdigest()}\n" for p, d in files)
    held = "".join(f"{p}\n" for p, _ in files if heldout(p))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        tar_member(tar, "MANIFEST.tsv", manifest.encode())
        tar_member(tar, "HELDOUT.txt", held.encode())
        for path, data in files:
            tar_member(tar, "stdlib/" + path, data)
    archive = lzma.compress(buf.getvalue(), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9)
    return files, skipped, manifest, held, archive


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stdlib", default=STDLIB)
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with the committed archive, write nothing")
    args = ap.parse_args()

    files, skipped, manifest, held, archive = build(args.stdlib)
    archive_sha = hashlib.sha256(archive).hexdigest()
    manifest_sha = hashlib.sha256(manifest.encode()).hexdigest()
    total = sum(len(d) for _, d in files)
    n_held = held.count("\n")
    held_bytes = sum(len(d) for p, d in files if heldout(p))
    print(f"{len(files)} files, {total} bytes ({n_held} held out, {held_bytes} bytes); "
          f"skipped {len(skipped)}; archive {len(archive)} bytes")
    print(f"archive sha256 {archive_sha}\nmanifest sha256 {manifest_sha}")

    if args.check:
        with open(os.path.join(args.out, "corpus.sha256")) as f:
            committed = f.read()
        ok = archive_sha in committed and manifest_sha in committed
        print("matches the committed corpus" if ok else "DIFFERS from the committed corpus")
        return 0 if ok else 1

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, ARCHIVE), "wb") as f:
        f.write(archive)
    with open(os.path.join(args.out, "MANIFEST.tsv"), "w") as f:
        f.write(manifest)
    with open(os.path.join(args.out, "HELDOUT.txt"), "w") as f:
        f.write(held)
    with open(os.path.join(args.out, "SKIPPED.tsv"), "w") as f:
        f.write("".join(f"{p}\t{why}\n" for p, why in skipped))
    with open(os.path.join(args.out, "corpus.sha256"), "w") as f:
        f.write(f"{archive_sha}  {ARCHIVE}\n{manifest_sha}  MANIFEST.tsv\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
