"""Builds the small tokenizer fixtures in tests/fixtures/tokenizer/ and their
expected ids, independently of pagedllm's C++ tokenizer.

Run with Debian's interpreter (python3-sentencepiece and python3-regex):
    scripts/python.sh tools/tokenizer_fixtures/make_fixtures.py

Three fixtures, each a directory with tokenizer.json, tokenizer_config.json and
expected.json ({"cases": [{"text", "ids"}]}, ids without special tokens):

- spm_llama2: a SentencePiece BPE model trained here (byte_fallback, split_digits,
  identity normalization, like Llama 2), converted to the Llama-2 tokenizer.json
  layout the way HF's LlamaConverter does. Expected ids come from sentencepiece's
  own encoder.
- bytelevel_gpt2: a byte-level BPE trained here, GPT-2 layout (ByteLevel
  pre-tokenizer with its regex, "a b" merges). Expected ids come from the plain
  reference BPE below with the `regex` module doing the split.
- bytelevel_llama3: the same kind of model, Llama-3 layout (Split with the
  Llama-3 regex + ByteLevel without regex, ["a","b"] merges, ignore_merges,
  <|begin_of_text|> template).
"""
import json
import os
import random
import sys
import tempfile

import regex
import sentencepiece as spm

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
STDLIB = "/usr/lib/python3.11"

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

MULTILINGUAL = [
    "The quick brown fox jumps over the lazy dog. It's 12:45, isn't it?",
    "Füße, Straße, naïve café — déjà vu! Ça va? Ünïcödé ÄÖÜ äöü ß",
    "Привет, мир! Как дела? Это тест токенизатора.",
    "你好，世界！这是一个分词器的测试。我们喜欢编程。",
    "こんにちは世界。カタカナとひらがなと漢字。",
    "안녕하세요 세계! 토크나이저 테스트입니다.",
    "مرحبا بالعالم! هذا اختبار.",
    "Γειά σου Κόσμε! Αυτό είναι ένα τεστ.",
    "emoji: 🙂🚀🎉👍🏽 👨‍👩‍👧 flags 🇫🇷🇯🇵",
    "math: ∑ x² ≤ ∞, α+β=γ, ½ ¾ ⅓ Ⅻ ٣٤٥ ०१२",
    "tabs\tand\nnewlines\r\n  indented    spaces   ",
]

TEST_TEXTS = [
    "",
    " ",
    "  ",
    "\n",
    "\n\n\n",
    "Hello",
    " Hello",
    "Hello world",
    "Hello  world",
    "  leading and trailing  ",
    "I'm don't you'll we've they're she'd it's",
    "I'M DON'T YOU'LL WE'VE",
    "12345678901234567890 3.14159 1,000,000",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "x\ty\tz\n\ta\t\tb",
    "unicode: \u00a0nbsp \u2003emspace \u3000ideographic \u200bzwsp",
    "<s> not a special token </s> <unk>",
    "<|endoftext|> <|begin_of_text|><|eot_id|>",
    "\u0000\u0001\u007f control",
    "a" * 50,
    "ab" * 30 + " " + "abc" * 20,
    "pagedllm pagedllm_serving pagedllm",
    "!!!??? ... --- *** ### @@@",
    "\U0001f600\U0001f601 \U0001f9d1\u200d\U0001f4bb \U00010348 \U0010fffd",
    "mixed日本語English한국어Русский123",
] + MULTILINGUAL


def stdlib_text(names):
    parts = []
    for name in names:
        with open(os.path.join(STDLIB, name), encoding="utf-8") as f:
            parts.append(f.read())
    return "\n".join(parts)


def corpus():
    text = stdlib_text(["textwrap.py", "string.py", "heapq.py", "bisect.py", "shlex.py"])
    return text + "\n" + "\n".join(MULTILINGUAL * 20)


def sample_snippets(rng, count):
    """Random slices of other stdlib files: text the models were not trained on."""
    text = stdlib_text(["json/decoder.py", "fractions.py", "calendar.py"])
    snippets = []
    for _ in range(count):
        start = rng.randrange(0, len(text) - 400)
        snippets.append(text[start:start + rng.randrange(20, 400)])
    return snippets


def write_fixture(name, tokenizer, config, cases):
    directory = os.path.join(OUT, name)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    with open(os.path.join(directory, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"cases": cases}, f, ensure_ascii=False)


def added_token(id_, content, special=True, normalized=False):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": normalized, "special": special}


# --------------------------------------------------------------------------
# SentencePiece (Llama 2 layout)


def spm_fixture(texts):
    with tempfile.TemporaryDirectory() as tmp:
        corpus_path = os.path.join(tmp, "corpus.txt")
        with open(corpus_path, "w", encoding="utf-8") as f:
            f.write(corpus())
        prefix = os.path.join(tmp, "spm")
        spm.SentencePieceTrainer.train(
            input=corpus_path, model_prefix=prefix, model_type="bpe", vocab_size=1200,
            byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True,
            normalization_rule_name="identity", add_dummy_prefix=True,
            remove_extra_whitespaces=False, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
            character_coverage=0.9995, max_sentence_length=100000, minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=prefix + ".model")

    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    scores = {sp.id_to_piece(i): sp.get_score(i) for i in range(sp.get_piece_size())}
    # HF's SentencePieceExtractor: every split of every piece into two vocab
    # pieces is a merge, ranked by the merged piece's score.
    merges = []
    for piece, score in scores.items():
        local = []
        for index in range(1, len(piece)):
            left, right = piece[:index], piece[index:]
            if left in vocab and right in vocab:
                local.append((left, right, score))
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2], reverse=True)

    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [added_token(0, "<unk>"), added_token(1, "<s>"), added_token(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b, _ in merges]},
    }
    config = {
        "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "pad_token": None, "legacy": False,
        "tokenizer_class": "LlamaTokenizer", "model_max_length": 2048,
        "chat_template": "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
    }
    cases = [{"text": t, "ids": sp.encode(t)} for t in texts]
    write_fixture("spm_llama2", tokenizer, config, cases)


# --------------------------------------------------------------------------
# Byte-level BPE (GPT-2 and Llama 3 layouts)


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


def to_byte_chars(text):
    return "".join(BYTE_ENCODER[b] for b in text.encode("utf-8"))


def train_byte_level(text, pattern, num_merges):
    words = {}
    for piece in regex.findall(pattern, text):
        symbols = tuple(to_byte_chars(piece))
        words[symbols] = words.get(symbols, 0) + 1
    merges = []
    for _ in range(num_merges):
        pairs = {}
        for symbols, count in words.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] = pairs.get(pair, 0) + count
        if not pairs:
            break
        best = max(pairs.items(), key=lambda item: (item[1], item[0]))[0]
        merges.append(best)
        merged = {}
        for symbols, count in words.items():
            out = []
            i = 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    out.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + count
        words = merged
    vocab = {}
    for char in BYTE_ENCODER.values():
        vocab[char] = len(vocab)
    for left, right in merges:
        vocab.setdefault(left + right, len(vocab))
    return vocab, merges


def reference_bpe(piece, vocab, ranks, ignore_merges):
    """The plain BPE: merge the lowest-ranked adjacent pair, leftmost first, until none is left."""
    chars = to_byte_chars(piece)
    if ignore_merges and chars in vocab:
        return [vocab[chars]]
    symbols = list(chars)
    while True:
        best = None
        for i in range(len(symbols) - 1):
            rank = ranks.get((symbols[i], symbols[i + 1]))
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, i)
        if best is None:
            break
        i = best[1]
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    return [vocab[s] for s in symbols]


def reference_encode(text, pattern, vocab, merges, ignore_merges):
    ranks = {pair: rank for rank, pair in enumerate(merges)}
    ids = []
    for piece in regex.findall(pattern, text):
        ids.extend(reference_bpe(piece, vocab, ranks, ignore_merges))
    return ids


def byte_level_fixtures(texts):
    text = corpus()
    vocab, merges = train_byte_level(text, GPT2_PATTERN, 700)
    gpt2_vocab = dict(vocab)
    eot = len(gpt2_vocab)
    gpt2 = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added_token(eot, "<|endoftext|>")],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "vocab": gpt2_vocab,
                  "merges": [f"{a} {b}" for a, b in merges]},
    }
    gpt2_config = {"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>",
                   "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
                   "add_prefix_space": False, "model_max_length": 1024}
    cases = [{"text": t, "ids": reference_encode(t, GPT2_PATTERN, gpt2_vocab, merges, False)}
             for t in texts]
    write_fixture("bytelevel_gpt2", gpt2, gpt2_config, cases)

    l3_vocab, l3_merges = train_byte_level(text, LLAMA3_PATTERN, 700)
    # Whole words in the vocabulary that no merge sequence builds: only
    # ignore_merges can produce them.
    for word in ["Ġpagedllm", "pagedllm", "Ġfib"]:
        l3_vocab.setdefault(word, len(l3_vocab))
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eot_id|>"]
    first_special = len(l3_vocab)
    llama3 = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added_token(first_special + i, s) for i, s in enumerate(specials)],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
             "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {
                 "id": "<|begin_of_text|>", "ids": [first_special],
                 "tokens": ["<|begin_of_text|>"]}}}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": l3_vocab, "merges": [[a, b] for a, b in l3_merges]},
    }
    llama3_config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>", "model_max_length": 8192,
        "chat_template": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    }
    cases = [{"text": t, "ids": reference_encode(t, LLAMA3_PATTERN, l3_vocab, l3_merges, True)}
             for t in texts]
    write_fixture("bytelevel_llama3", llama3, llama3_config, cases)


def main():
    rng = random.Random(1234)
    texts = TEST_TEXTS + sample_snippets(rng, 60)
    spm_fixture(texts)
    byte_level_fixtures(texts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
