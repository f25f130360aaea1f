"""Byte-level BPE: training (incremental pair counts) and a plain reference encoder.

The encoder is written independently of pagedllm's C++ tokenizer and of HF tokenizers:
GPT-2's regex split (the `regex` module), GPT-2's byte-to-unicode table, then for each
pre-token the lowest-ranked adjacent pair is merged, leftmost first, until none is left.
"""
import heapq
import json
from collections import Counter

import regex

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT2_RE = regex.compile(GPT2_PATTERN)


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_ENCODER = bytes_to_unicode()
BYTE_DECODER = {c: b for b, c in BYTE_ENCODER.items()}


def pretokenize(text):
    return GPT2_RE.findall(text)


def train_bpe(texts, vocab_size, specials, log=None):
    """Returns (vocab: token -> id, merges: [(left, right)]).

    Ids: the special tokens first, then the 256 byte tokens in byte order, then one
    token per merge. Each step merges the most frequent adjacent pair; ties go to the
    pair with the smaller (left id, right id), so training is deterministic.
    """
    words = Counter()
    for text in texts:
        words.update(pretokenize(text))
    first_byte = len(specials)
    tokens = list(specials) + [BYTE_ENCODER[b] for b in range(256)]
    # Sorted so that word indices (and hence everything downstream) are deterministic.
    items = sorted(words.items())
    seqs = [[first_byte + b for b in w.encode("utf-8")] for w, _ in items]
    counts = [c for _, c in items]

    pair_count = Counter()
    where = {}
    for wi, seq in enumerate(seqs):
        c = counts[wi]
        for pair in zip(seq, seq[1:]):
            pair_count[pair] += c
            where.setdefault(pair, set()).add(wi)
    heap = [(-c, a, b) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)

    merges = []
    n_merges = vocab_size - len(tokens)
    while len(merges) < n_merges and heap:
        negc, a, b = heapq.heappop(heap)
        if pair_count.get((a, b), 0) != -negc or negc == 0:
            continue  # stale heap entry
        new_id = len(tokens)
        tokens.append(tokens[a] + tokens[b])
        merges.append((a, b))
        changed = set()
        for wi in sorted(where.pop((a, b), ())):
            seq = seqs[wi]
            c = counts[wi]
            i, out = 0, []
            found = False
            while i < len(seq):
                if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
                    out.append(new_id)
                    i += 2
                    found = True
                else:
                    out.append(seq[i])
                    i += 1
            if not found:
                continue
            for pair in zip(seq, seq[1:]):
                pair_count[pair] -= c
                changed.add(pair)
            for pair in zip(out, out[1:]):
                pair_count[pair] += c
                changed.add(pair)
                where.setdefault(pair, set()).add(wi)
            seqs[wi] = out
        pair_count.pop((a, b), None)
        changed.discard((a, b))
        for pair in changed:
            c = pair_count[pair]
            if c > 0:
                heapq.heappush(heap, (-c, pair[0], pair[1]))
            else:
                del pair_count[pair]
        if log and len(merges) % 1000 == 0:
            log(f"  {len(merges)} merges, last {tokens[a]!r}+{tokens[b]!r} count {-negc}")
    vocab = {tok: i for i, tok in enumerate(tokens)}
    if len(vocab) != len(tokens):
        raise RuntimeError("duplicate token produced by merges")
    return vocab, [(tokens[a], tokens[b]) for a, b in merges]


class Encoder:
    """Reference encoder for a byte-level BPE tokenizer.json written by train_tokenizer.py."""

    def __init__(self, vocab, merges, specials):
        self.vocab = vocab
        self.inv = {i: t for t, i in vocab.items()}
        self.ranks = {pair: r for r, pair in enumerate(merges)}
        self.specials = specials  # content -> id
        self.cache = {}

    @classmethod
    def from_file(cls, path):
        with open(path, encoding="utf-8") as f:
            tj = json.load(f)
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in tj["model"]["merges"]]
        specials = {t["content"]: t["id"] for t in tj["added_tokens"]}
        return cls(tj["model"]["vocab"], merges, specials)

    def bpe(self, piece):
        ids = self.cache.get(piece)
        if ids is not None:
            return ids
        symbols = [BYTE_ENCODER[b] for b in piece.encode("utf-8")]
        ranks = self.ranks
        while len(symbols) > 1:
            best, best_i = None, -1
            for i in range(len(symbols) - 1):
                r = ranks.get((symbols[i], symbols[i + 1]))
                if r is not None and (best is None or r < best):
                    best, best_i = r, i
            if best is None:
                break
            symbols[best_i:best_i + 2] = [symbols[best_i] + symbols[best_i + 1]]
        ids = [self.vocab[s] for s in symbols]
        if len(piece) <= 256:
            self.cache[piece] = ids
        return ids

    def encode(self, text):
        """Ids of `text` without special tokens (special-token text is not parsed)."""
        out = []
        for piece in pretokenize(text):
            out.extend(self.bpe(piece))
        return out

    def decode(self, ids):
        data = bytearray()
        for i in ids:
            tok = self.inv.get(i)
            if tok is None:
                continue
            if i in self.specials.values():
                data.extend(tok.encode("utf-8"))
            else:
                data.extend(BYTE_DECODER[c] for c in tok)
        return data.decode("utf-8", errors="replace")
