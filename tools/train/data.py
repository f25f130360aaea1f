"""Token streams of the pinned corpus, encoded with the trained tokenizer.

Each document (one stdlib file) is <|endoftext|> followed by its tokens, exactly what the
tokenizer's post-processor produces for it; the documents are concatenated in manifest
(sorted path) order. The encoding is cached next to the output as .npy files keyed by the
sha256 of the archive and of tokenizer.json.
"""
import hashlib
import json
import os

import numpy as np

import bpe
import corpus


def file_sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def token_streams(tokenizer_json, cache_dir, archive=corpus.DEFAULT_ARCHIVE, log=print):
    """Returns (train_ids, heldout_ids, info) as int32 numpy arrays."""
    key = hashlib.sha256((file_sha256(archive) + file_sha256(tokenizer_json)).encode()).hexdigest()[:16]
    paths = {s: os.path.join(cache_dir, f"tokens-{s}-{key}.npy") for s in ("train", "heldout")}
    info_path = os.path.join(cache_dir, f"tokens-{key}.json")
    if all(os.path.exists(p) for p in paths.values()) and os.path.exists(info_path):
        with open(info_path) as f:
            info = json.load(f)
        return np.load(paths["train"]), np.load(paths["heldout"]), info
    train, heldout, digest = corpus.load_corpus(archive)
    enc = bpe.Encoder.from_file(tokenizer_json)
    eot = enc.specials["<|endoftext|>"]
    out, info = {}, {"corpus_sha256": digest, "tokenizer_sha256": file_sha256(tokenizer_json)}
    for split, docs in (("train", train), ("heldout", heldout)):
        ids = []
        for _, text in docs:
            ids.append(eot)
            ids.extend(enc.encode(text))
        out[split] = np.asarray(ids, dtype=np.int32)
        info[f"{split}_files"] = len(docs)
        info[f"{split}_bytes"] = sum(len(t.encode("utf-8")) for _, t in docs)
        info[f"{split}_tokens"] = len(ids)
        log(f"encoded {split}: {len(docs)} files, {len(ids)} tokens")
    os.makedirs(cache_dir, exist_ok=True)
    for split, arr in out.items():
        np.save(paths[split], arr)
    with open(info_path, "w") as f:
        json.dump(info, f, indent=1)
    return out["train"], out["heldout"], info
