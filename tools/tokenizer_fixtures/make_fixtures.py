"""Builds the tokenizer fixtures in tests/fixtures/tokenizer/ with HF `tokenizers`, and
their expectations with `tokenizers` and `transformers` (the reference pagedllm's C++
tokenizer is tested against).

    .venv/bin/python tools/tokenizer_fixtures/make_fixtures.py           # rebuild everything
    .venv/bin/python tools/tokenizer_fixtures/make_fixtures.py --check   # what CI runs

Building trains each tokenizer with `tokenizers`' BpeTrainer on corpus.training_corpus(),
gives it the normalizer / pre-tokenizer / decoder / post-processor layout of its model
family, saves tokenizer.json + tokenizer_config.json, and then writes the expectations.
--check does not retrain: it loads the committed tokenizer files with the installed
`tokenizers` / `transformers`, recomputes every expectation and fails (exit 1) naming
the first difference from the committed ones, so they cannot drift from HF.

Files (docs/tokenizer.md says how the C++ tests use them):
- texts.json: the test texts, shared by every fixture (corpus.test_texts()).
- <fixture>/expected.json, one entry per text: "ids" (tokenizers' encode with
  add_special_tokens=False and encode_special_tokens=True: special tokens in the text
  are plain text), "parsed" (special tokens recognised, HF's default; null when equal to
  "ids"), "special" (transformers' AutoTokenizer(text)["input_ids"], i.e. with its
  add_special_tokens, as [prefix, suffix] around "parsed"), "decoded" / "skipped"
  (decode of "parsed" without / with skip_special_tokens; null when equal to the text /
  to "decoded"). Then "random_decodes": random id sequences (specials, byte tokens, cut
  characters) and their decode both ways, and "streams": id sequences with the decode of
  every prefix, for the streaming detokenizer.
- chat_templates.json: real families' chat templates, conversations, and transformers'
  apply_chat_template output: the text (tokenize=False) and its ids (tokenize=True), or
  the exception it raised.
- config_variants.json: tokenizer_config.json variants (tokenizer classes, add_bos_token,
  add_eos_token) on the fixtures' tokenizer.json, and AutoTokenizer(text)'s ids.
- core/tokenizer/hf_normalization_gaps.inc: the code points whose Unicode normalization
  HF's (older) tables do not know and utf8proc's do; pagedllm leaves them alone as HF does.
"""
import argparse
import json
import os
import random
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,  # noqa: E402
                        pre_tokenizers, processors, trainers)
import transformers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
GAPS = os.path.join(ROOT, "core", "tokenizer", "hf_normalization_gaps.inc")

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
                  r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                 r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

# --------------------------------------------------------------------------
# Chat templates as the model families publish them in tokenizer_config.json.

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}")  # meta-llama/Meta-Llama-3-8B-Instruct
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
    "{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) "
    "%}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}")  # meta-llama/Llama-2-7b-chat-hf
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) "
    "%}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif "
    "message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only "
    "user and assistant roles are supported!') }}{% endif %}{% endfor %}")  # mistralai/Mistral-7B-Instruct-v0.1, v0.2
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>"
    "system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' "
    "+ message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>"
    "assistant\n' }}{% endif %}")  # Qwen/Qwen2-7B-Instruct
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}")  # teknium/OpenHermes-2.5-Mistral-7B
ZEPHYR_TEMPLATE = (
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] "
    "+ eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + "
    "eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n"
    "{% endif %}\n{% endfor %}")  # TinyLlama/TinyLlama-1.1B-Chat-v1.0

# (family, template, fixture whose bos/eos tokens it renders with)
CHAT_FAMILIES = [
    ("llama3", LLAMA3_TEMPLATE, "bytelevel_llama3"),
    ("llama2", LLAMA2_TEMPLATE, "spm_llama2"),
    ("mistral", MISTRAL_TEMPLATE, "spm_metaspace"),
    ("qwen2", QWEN2_TEMPLATE, "bytelevel_qwen2"),
    # The same template with Jinja's "\n" escapes instead of newlines (JSON "\\n").
    ("qwen2-escaped", QWEN2_TEMPLATE.replace("\n", "\\n"), "bytelevel_qwen2"),
    ("chatml", CHATML_TEMPLATE, "bytelevel_qwen2"),
    ("zephyr", ZEPHYR_TEMPLATE, "spm_llama2"),
]

CONVERSATIONS = [
    [],
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi! "},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "2+2?"}],
    [{"role": "user", "content": "  spaced\tcontent \n"}, {"role": "assistant", "content": "\n ok \n"},
     {"role": "user", "content": "again"}, {"role": "assistant", "content": " done"}],
    [{"role": "user", "content": "Привет! 你好 🙂 👨‍👩‍👧 مرحبا नमस्ते"},
     {"role": "assistant", "content": "Γειά! def f(x):\n    return x\n"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": ""}],
    [{"role": "system", "content": "\u3000 wide space system \u00a0"},
     {"role": "user", "content": "<s>[INST] literal tags <|im_end|> in text"}],
    [{"role": "user", "content": "first"}, {"role": "user", "content": "second"}],
    [{"role": "assistant", "content": "I speak first"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
     {"role": "system", "content": "late system"}],
]


# --------------------------------------------------------------------------
# The tokenizers

def special(content, **kwargs):
    return AddedToken(content, special=True, normalized=False, **kwargs)


def train_bpe(pre_tokenizer, normalizer=None, vocab_size=1200, limit_alphabet=None,
              initial_alphabet=(), special_tokens=()):
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    kwargs = {"vocab_size": vocab_size, "show_progress": False, "special_tokens": list(special_tokens),
              "initial_alphabet": list(initial_alphabet)}
    if limit_alphabet is not None:
        kwargs["limit_alphabet"] = limit_alphabet
    tokenizer.train_from_iterator(corpus.training_corpus(), trainers.BpeTrainer(**kwargs))
    return tokenizer


# Sizes other tests rely on: the rule-model tests serve bytelevel_gpt2 with a 957-token
# model (<|endoftext|> = 956); tools/testing/make_tiny_llama.py builds its models on
# bytelevel_llama3 (964 tokens, <|begin_of_text|> = 959, <|end_of_text|> = 960,
# <|eot_id|> = 963), and tests/plugins/models_llama checks those numbers.
GPT2_MODEL_VOCAB = 956
LLAMA3_MODEL_VOCAB = 959
SPM_VOCAB = 1200


def exact_size(tok, size, name):
    if tok.get_vocab_size() != size:
        raise SystemExit(f"{name}: trained {tok.get_vocab_size()} tokens, other tests need {size}")
    return tok


def bytelevel_gpt2():
    tok = exact_size(train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
                               vocab_size=GPT2_MODEL_VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
                     GPT2_MODEL_VOCAB, "bytelevel_gpt2")
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([special("<|endoftext|>")])
    config = {"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
              "unk_token": "<|endoftext|>", "add_prefix_space": False, "model_max_length": 1024,
              "clean_up_tokenization_spaces": False}
    return tok, config


def bytelevel_llama3():
    # Whole words in the vocabulary that no merge sequence builds: only ignore_merges
    # (Llama 3's setting) produces them. The trained size leaves room for those missing.
    words = ["Ġpagedllm", "pagedllm", "Ġfib"]
    for trained in range(LLAMA3_MODEL_VOCAB - len(words), LLAMA3_MODEL_VOCAB + 1):
        tok = train_bpe(pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
            vocab_size=trained, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        data = json.loads(tok.to_str())
        for word in words:
            data["model"]["vocab"].setdefault(word, len(data["model"]["vocab"]))
        if len(data["model"]["vocab"]) == LLAMA3_MODEL_VOCAB:
            break
    data["model"]["ignore_merges"] = True
    tok = exact_size(Tokenizer.from_str(json.dumps(data)), LLAMA3_MODEL_VOCAB, "bytelevel_llama3")
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([special(s) for s in ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                                 "<|end_header_id|>", "<|eot_id|>"]])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
              "eos_token": "<|eot_id|>", "model_max_length": 8192, "clean_up_tokenization_spaces": True,
              "chat_template": LLAMA3_TEMPLATE}
    return tok, config


def bytelevel_qwen2():
    tok = train_bpe(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        normalizer=normalizers.NFC(), initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([special(s) for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    # Added-token options (RoBERTa's <mask> is lstrip).
    tok.add_special_tokens([special("<mask>", lstrip=True), special("[R]", rstrip=True)])
    tok.add_tokens([AddedToken("pagedllm", single_word=True, normalized=False),
                    AddedToken("<tool>", normalized=False), AddedToken("</tool>", normalized=False)])
    config = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 32768,
              "clean_up_tokenization_spaces": False, "split_special_tokens": False,
              "chat_template": QWEN2_TEMPLATE}
    return tok, config


def bytelevel_normalized():
    """Normalizers: Lowercase, all four Unicode forms, Replace (regex and string), Strip;
    added tokens matched on the normalized text."""
    norm = normalizers.Sequence([
        normalizers.Lowercase(), normalizers.NFKD(), normalizers.NFC(),
        normalizers.Replace(Regex("[ \t]{2,}"), " "), normalizers.NFD(), normalizers.Replace("``", '"'),
        normalizers.NFKC(), normalizers.Strip(left=True, right=True)])
    tok = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True), normalizer=norm,
                    vocab_size=900, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([special("<|endoftext|>")])
    tok.add_tokens([AddedToken("Hello World", normalized=True), AddedToken("ＴＯＯＬ", normalized=True)])
    # transformers forces a top-level ByteLevel pre-tokenizer's add_prefix_space to the
    # config's value (default false); say it, so both read the same.
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>",
              "eos_token": "<|endoftext|>", "add_prefix_space": True, "clean_up_tokenization_spaces": False}
    return tok, config


BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]


def sentencepiece_vocab(trained, with_bytes):
    """Llama's layout: <unk> <s> </s>, then the 256 byte tokens, then the trained pieces."""
    data = json.loads(trained.to_str())
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    if with_bytes:
        for token in BYTE_TOKENS:
            vocab[token] = len(vocab)
    for token, _ in sorted(data["model"]["vocab"].items(), key=lambda item: item[1]):
        vocab.setdefault(token, len(vocab))
    return vocab, data["model"]["merges"]


def spm_model(vocab, merges, byte_fallback):
    return {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": byte_fallback,
            "ignore_merges": False, "vocab": vocab, "merges": merges}


def spm_added_tokens():
    return [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]


def bos_template(bos_id):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [bos_id], "tokens": ["<s>"]}}}


def spm_llama2():
    """Llama 2's tokenizer.json (legacy layout): Prepend+Replace normalizer, no
    pre-tokenizer, byte_fallback, fuse_unk. A small alphabet, so rarer characters fall
    back to <0xNN> tokens."""
    trained = train_bpe(pre_tokenizers.Metaspace(prepend_scheme="always", split=True), limit_alphabet=160,
                        vocab_size=SPM_VOCAB - 3 - len(BYTE_TOKENS))
    vocab, merges = sentencepiece_vocab(trained, with_bytes=True)
    if len(vocab) != SPM_VOCAB:
        raise SystemExit(f"spm_llama2: {len(vocab)} tokens, not {SPM_VOCAB}")
    data = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": spm_added_tokens(),
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        "pre_tokenizer": None, "post_processor": bos_template(1),
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": spm_model(vocab, merges, byte_fallback=True),
    }
    config = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
              "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None, "legacy": False,
              "model_max_length": 2048, "clean_up_tokenization_spaces": False, "chat_template": ZEPHYR_TEMPLATE}
    return Tokenizer.from_str(json.dumps(data)), config


def spm_metaspace():
    """The layout transformers' LlamaConverter writes for legacy=False (Mistral, newer
    Llama-style models): a Metaspace pre-tokenizer (prepend_scheme "first", no split) and
    decoder, no normalizer. Without byte_fallback, so unknown characters become one fused
    <unk>."""
    trained = train_bpe(pre_tokenizers.Metaspace(prepend_scheme="always", split=True), limit_alphabet=150)
    vocab, merges = sentencepiece_vocab(trained, with_bytes=False)
    data = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": spm_added_tokens(),
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        "post_processor": bos_template(1),
        "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        "model": spm_model(vocab, merges, byte_fallback=False),
    }
    config = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
              "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "legacy": False,
              "model_max_length": 32768, "clean_up_tokenization_spaces": False, "chat_template": MISTRAL_TEMPLATE}
    return Tokenizer.from_str(json.dumps(data)), config


FIXTURES = {
    "spm_llama2": spm_llama2,
    "spm_metaspace": spm_metaspace,
    "bytelevel_gpt2": bytelevel_gpt2,
    "bytelevel_llama3": bytelevel_llama3,
    "bytelevel_qwen2": bytelevel_qwen2,
    "bytelevel_normalized": bytelevel_normalized,
}


def build(name):
    tok, config = FIXTURES[name]()
    directory = os.path.join(OUT, name)
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"), pretty=False)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
        f.write("\n")


# --------------------------------------------------------------------------
# Expectations, all from HF

def load(name):
    directory = os.path.join(OUT, name)
    plain = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    auto = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
    if not isinstance(auto, transformers.PreTrainedTokenizerFast):
        raise SystemExit(f"{name}: transformers loaded {type(auto).__name__}, not a fast tokenizer")
    return plain, auto


def hf_decode(plain, auto, ids, skip):
    text = plain.decode(ids, skip_special_tokens=skip)
    # transformers' decode (what serving stacks call) must agree with the Rust decode.
    other = auto.decode(ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False)
    if other != text:
        raise SystemExit(f"tokenizers and transformers decode {ids} differently: {text!r} vs {other!r}")
    return text


def encode_case(plain, auto, text):
    plain.encode_special_tokens = True
    ids = plain.encode(text, add_special_tokens=False).ids
    plain.encode_special_tokens = False
    parsed = plain.encode(text, add_special_tokens=False).ids
    if auto(text, add_special_tokens=False)["input_ids"] != parsed:
        raise SystemExit(f"tokenizers and transformers encode {text!r} differently")
    with_special = auto(text)["input_ids"]
    prefix = 0
    while prefix < len(with_special) and with_special[prefix:prefix + len(parsed)] != parsed:
        prefix += 1
    if with_special[prefix:prefix + len(parsed)] != parsed:
        raise SystemExit(f"{text!r}: add_special_tokens did not only add tokens around the text")
    decoded = hf_decode(plain, auto, parsed, False)
    skipped = hf_decode(plain, auto, parsed, True)
    return {"ids": ids, "parsed": None if parsed == ids else parsed,
            "special": [with_special[:prefix], with_special[prefix + len(parsed):]],
            "decoded": None if decoded == text else decoded, "skipped": None if skipped == decoded else skipped}


def interesting_ids(plain):
    vocab = plain.get_vocab()
    special_ids = sorted(i for i, t in plain.get_added_tokens_decoder().items() if t.special)
    byte_ids = [vocab[t] for t in BYTE_TOKENS if t in vocab]
    # Byte-level tokens of one raw byte: lead and continuation bytes cut characters.
    byte_ids += [i for t, i in vocab.items() if len(t) == 1 and ord(t) >= 0x80 and ord(t) < 0x180]
    return special_ids, sorted(byte_ids)


def random_decodes(plain, auto, rng, count):
    special_ids, byte_ids = interesting_ids(plain)
    size = plain.get_vocab_size()
    cases = []
    for _ in range(count):
        ids = []
        for _ in range(rng.randrange(0, 24)):
            r = rng.random()
            if r < 0.15 and special_ids:
                ids.append(rng.choice(special_ids))
            elif r < 0.45 and byte_ids:
                ids.append(rng.choice(byte_ids))
            else:
                ids.append(rng.randrange(0, size))
        cases.append({"ids": ids, "decoded": hf_decode(plain, auto, ids, False),
                      "skipped": hf_decode(plain, auto, ids, True)})
    return cases


STREAM_TEXTS = [
    "Hello world! I'm streaming text.",
    " leading space and  double  spaces ",
    "你好，世界！🙂🚀 emoji and ünïcödé 👨‍👩‍👧‍👦",
    "def f(x):\n    return x * 2\n\n\tdone",
    "Приветствую! αβγ ٣٤٥ नमस्ते 😀😀😀 \U00010348",
]


def streams(plain, auto, rng):
    """Texts' ids with specials and cut characters spliced in; decode of every prefix."""
    special_ids, byte_ids = interesting_ids(plain)
    plain.encode_special_tokens = False
    out = []
    for text in STREAM_TEXTS:
        ids = list(auto(text)["input_ids"])
        for _ in range(3):
            pool = special_ids if rng.random() < 0.5 or not byte_ids else byte_ids
            ids.insert(rng.randrange(0, len(ids) + 1), rng.choice(pool))
        out.append({"ids": ids,
                    "prefixes": [hf_decode(plain, auto, ids[:n], False) for n in range(len(ids) + 1)],
                    "skipped": hf_decode(plain, auto, ids, True)})
    return out


def expectations(name, texts):
    plain, auto = load(name)
    rng = random.Random(name)
    return {"hf": {"tokenizers": __import__("tokenizers").__version__, "transformers": transformers.__version__},
            "cases": [encode_case(plain, auto, text) for text in texts],
            "random_decodes": random_decodes(plain, auto, rng, 150),
            "streams": streams(plain, auto, rng)}


# tokenizer_config.json variants on the fixtures' tokenizer.json files: which classes
# rebuild the BOS/EOS template from add_bos_token / add_eos_token, and their defaults.
CONFIG_VARIANTS = [
    ("spm_llama2", {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": True}),
    ("spm_llama2", {"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": False}),
    ("spm_llama2", {"tokenizer_class": "LlamaTokenizer", "add_bos_token": False, "add_eos_token": True}),
    ("spm_llama2", {"tokenizer_class": "CodeLlamaTokenizer", "add_eos_token": True}),
    ("spm_llama2", {"tokenizer_class": "GemmaTokenizer", "add_bos_token": False}),
    ("spm_llama2", {"tokenizer_class": "CohereTokenizerFast", "add_eos_token": True}),
    ("spm_llama2", {"tokenizer_class": "PreTrainedTokenizerFast"}),
    ("spm_llama2", {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False}),
    ("spm_llama2", {"tokenizer_class": "PreTrainedTokenizerFast", "add_eos_token": True}),
    ("bytelevel_llama3", {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False}),
    ("bytelevel_llama3", {"tokenizer_class": "GPTNeoXTokenizer"}),
    ("bytelevel_llama3", {"tokenizer_class": "GPTNeoXTokenizer", "add_bos_token": True, "add_eos_token": True}),
    ("bytelevel_gpt2", {"tokenizer_class": "GPT2Tokenizer", "add_bos_token": True}),
    ("bytelevel_qwen2", {"tokenizer_class": "Qwen2Tokenizer", "add_eos_token": True}),
]


def config_expectations():
    import shutil
    import tempfile
    out = []
    for fixture, flags in CONFIG_VARIANTS:
        with open(os.path.join(OUT, fixture, "tokenizer_config.json"), encoding="utf-8") as f:
            base = json.load(f)
        config = {key: base[key] for key in ("bos_token", "eos_token") if base.get(key) is not None}
        config.update(flags)
        with tempfile.TemporaryDirectory() as directory:
            shutil.copy(os.path.join(OUT, fixture, "tokenizer.json"), directory)
            with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump(config, f)
            auto = transformers.AutoTokenizer.from_pretrained(directory, local_files_only=True)
            cases = [{"text": text, "ids": auto(text)["input_ids"]} for text in ("", "Hello world")]
        out.append({"fixture": fixture, "config": config, "transformers_class": type(auto).__name__,
                    "cases": cases})
    return {"transformers": transformers.__version__, "variants": out}


def chat_expectations():
    families = []
    for family, template, fixture in CHAT_FAMILIES:
        _, auto = load(fixture)
        cases = []
        for messages in CONVERSATIONS:
            for add_generation_prompt in (False, True):
                case = {"messages": messages, "add_generation_prompt": add_generation_prompt}
                try:
                    case["text"] = auto.apply_chat_template(messages, chat_template=template, tokenize=False,
                                                            add_generation_prompt=add_generation_prompt)
                    # The prompt's ids, special tokens recognised and none added.
                    case["ids"] = auto.apply_chat_template(messages, chat_template=template, tokenize=True,
                                                           add_generation_prompt=add_generation_prompt)
                except Exception as error:  # noqa: BLE001 - the template's raise_exception
                    case["error"] = str(error)
                cases.append(case)
        families.append({"family": family, "fixture": fixture, "template": template, "bos_token": auto.bos_token,
                         "eos_token": auto.eos_token, "cases": cases})
    return {"transformers": transformers.__version__, "families": families}


# --------------------------------------------------------------------------
# Where HF's Unicode normalization data is older than utf8proc's

def normalization_gaps():
    """core/tokenizer/hf_normalization_gaps.inc: the code points that utf8proc (which
    pagedllm links) decomposes or gives a combining class, and that HF's normalizers
    (the unicode-normalization-alignments crate, with an old Unicode version's tables)
    treat as unassigned: no decomposition, combining class 0. pagedllm's NFC/NFD/NFKC/NFKD
    leave them as HF does."""
    import ctypes
    import ctypes.util

    class Property(ctypes.Structure):
        _fields_ = [("category", ctypes.c_int16), ("combining_class", ctypes.c_int16),
                    ("bidi_class", ctypes.c_int16), ("decomp_type", ctypes.c_int16),
                    ("decomp_seqindex", ctypes.c_uint16)]

    library = ctypes.util.find_library("utf8proc")
    if library is None:
        raise SystemExit("libutf8proc not found (pagedllm links it; apt-get install libutf8proc-dev)")
    utf8proc = ctypes.CDLL(library)
    utf8proc.utf8proc_get_property.restype = ctypes.POINTER(Property)
    utf8proc.utf8proc_unicode_version.restype = ctypes.c_char_p
    utf8proc.utf8proc_NFD.restype = ctypes.c_void_p
    candidates = []
    for c in range(1, 0x110000):
        if 0xD800 <= c < 0xE000:
            continue
        prop = utf8proc.utf8proc_get_property(c).contents
        if prop.combining_class or prop.decomp_seqindex != 0xFFFF:
            candidates.append((c, prop.combining_class))
    separator = "\n"
    decomposed = normalizers.NFKD().normalize_str(separator.join(chr(c) for c, _ in candidates)).split(separator)
    # A mark of class 240 (U+0345) before the code point: HF moves it after only when it
    # knows the code point's (lower) class.
    ordered = normalizers.NFD().normalize_str(
        separator.join("a\u0345" + chr(c) for c, _ in candidates)).split(separator)
    gaps = [c for (c, ccc), d, o in zip(candidates, decomposed, ordered)
            if d == chr(c) and (ccc == 0 or (ccc < 240 and o == "a\u0345" + chr(c)))]
    # Gap code points with a canonical decomposition: utf8proc's NFC/NFKC compose their
    # parts, HF's do not. Only pairs of starters are handled (an error otherwise).
    pairs = []
    for c in gaps:
        prop = utf8proc.utf8proc_get_property(c).contents
        if prop.decomp_seqindex == 0xFFFF or prop.decomp_type != 0:
            continue
        parts = ctypes.string_at(utf8proc.utf8proc_NFD(chr(c).encode("utf-8"))).decode("utf-8")
        if len(parts) != 2 or any(utf8proc.utf8proc_get_property(ord(p)).contents.combining_class for p in parts):
            raise SystemExit(f"U+{c:04X}: a canonical decomposition that is not two starters; extend the gap handling")
        pairs.append((ord(parts[0]), ord(parts[1])))
    ranges = []
    for c in gaps:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    lines = [f"// Generated by tools/tokenizer_fixtures/make_fixtures.py from utf8proc "
             f"{utf8proc.utf8proc_unicode_version().decode()} (Unicode) and tokenizers "
             f"{__import__('tokenizers').__version__}: do not edit.",
             "",
             "// Code points utf8proc decomposes or gives a combining class that HF's normalizers treat",
             "// as unassigned (no decomposition, class 0). {first, last}, sorted.",
             "constexpr CodePointRange kHfNormalizationGaps[] = {"]
    lines += [f"    {{0x{a:05X}, 0x{b:05X}}}," for a, b in ranges]
    lines += ["};", "",
              "// Adjacent starters that utf8proc's NFC/NFKC compose into one of those code points and HF's do not.",
              "constexpr char32_t kHfUncomposedPairs[][2] = {"]
    lines += [f"    {{0x{a:05X}, 0x{b:05X}}}," for a, b in pairs]
    lines += ["};"]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------

def dump(value):
    """Compact JSON with one top-level list entry per line, so diffs stay readable."""
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, list):
                body = ",\n".join(json.dumps(entry, ensure_ascii=False) for entry in item)
                lines.append(f"{json.dumps(key)}: [\n{body}\n]")
            else:
                lines.append(f"{json.dumps(key)}: {json.dumps(item, ensure_ascii=False)}")
        return "{\n" + ",\n".join(lines) + "\n}\n"
    return json.dumps(value, ensure_ascii=False) + "\n"


def outputs():
    texts = corpus.test_texts()
    files = {"texts.json": dump({"texts": texts}), "chat_templates.json": dump(chat_expectations()),
             "config_variants.json": dump(config_expectations()),
             GAPS: normalization_gaps()}
    for name in FIXTURES:
        files[f"{name}/expected.json"] = dump(expectations(name, texts))
    return files


def first_difference(old, new):
    for number, (a, b) in enumerate(zip(old.splitlines(), new.splitlines()), 1):
        if a != b:
            return f"line {number}:\n  committed: {a[:300]}\n  HF now:    {b[:300]}"
    return "length differs"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true",
                    help="recompute the expectations from the committed tokenizer files and compare")
    args = ap.parse_args()
    if not args.check:
        for name in FIXTURES:
            build(name)
    failures = 0
    for path, text in outputs().items():
        full = os.path.join(OUT, path)
        if args.check:
            with open(full, encoding="utf-8") as f:
                committed = f.read()
            if committed != text:
                failures += 1
                print(f"{full} differs from what HF produces now, {first_difference(committed, text)}")
        else:
            with open(full, "w", encoding="utf-8") as f:
                f.write(text)
    if args.check:
        print(f"{len(FIXTURES)} fixtures + texts + chat templates: "
              f"{'all equal to HF' if not failures else f'{failures} files differ (rerun without --check)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
