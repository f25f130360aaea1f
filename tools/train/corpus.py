"""Reads the pinned corpus archive (built by build_corpus.py) and nothing else.

Every training script goes through load_corpus(), which checks the archive's sha256
against tools/train/corpus/corpus.sha256 and each file against MANIFEST.tsv, so the
data and the held-out split are the same on every machine that runs the scripts.
"""
import hashlib
import io
import lzma
import os
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ARCHIVE = os.path.join(HERE, "corpus", "python-stdlib.tar.xz")
DEFAULT_HASHES = os.path.join(HERE, "corpus", "corpus.sha256")


class CorpusError(RuntimeError):
    pass


def expected_archive_sha256(hash_file=DEFAULT_HASHES):
    with open(hash_file) as f:
        for line in f:
            digest, name = line.split()
            if name.endswith(".tar.xz"):
                return digest
    raise CorpusError(f"{hash_file}: no archive hash")


def load_corpus(archive=DEFAULT_ARCHIVE, hash_file=DEFAULT_HASHES):
    """Returns (train, heldout, archive_sha256): two lists of (path, text), sorted by path."""
    with open(archive, "rb") as f:
        raw = f.read()
    digest = hashlib.sha256(raw).hexdigest()
    want = expected_archive_sha256(hash_file)
    if digest != want:
        raise CorpusError(f"{archive}: sha256 {digest} differs from {want} in {hash_file}; "
                          "rebuild it with build_corpus.py or restore the committed archive")
    files = {}
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(raw)), mode="r:") as tar:
        for member in tar.getmembers():
            files[member.name] = tar.extractfile(member).read()
    manifest = [line.split("\t") for line in files["MANIFEST.tsv"].decode().splitlines()]
    held = set(files["HELDOUT.txt"].decode().splitlines())
    train, heldout = [], []
    for path, size, sha in manifest:
        data = files["stdlib/" + path]
        if len(data) != int(size) or hashlib.sha256(data).hexdigest() != sha:
            raise CorpusError(f"{archive}: {path} does not match its manifest entry")
        (heldout if path in held else train).append((path, data.decode("utf-8")))
    if len(heldout) != len(held):
        raise CorpusError(f"{archive}: HELDOUT.txt names files that are not in the manifest")
    return train, heldout, digest
