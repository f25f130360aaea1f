#!/usr/bin/env python3
"""Seed corpora for the fuzz targets, made from the repository's real files.

    make_corpus.py OUT_DIR     writes OUT_DIR/<target>/<seed> for every target

Each seed is in the input format its target's header comment describes (a
leading selector byte, NUL-separated parts). Regression inputs found by
fuzzing live in tools/fuzz/regressions/<target>/ and are run as well.
"""
import hashlib
import json
import pathlib
import struct
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests/fixtures/tokenizer"
TOKENIZER_DIRS = [ROOT / "models/pagedllm-tiny"] + [FIXTURES / n for n in ("bytelevel_gpt2", "bytelevel_llama3", "spm_llama2")]


def read(path):
    return (ROOT / path).read_bytes() if not isinstance(path, pathlib.Path) else path.read_bytes()


def completions():
    return [
        {"prompt": "def fib(n):", "max_tokens": 8},
        {"model": "pagedllm-tiny", "prompt": ["a", "b c"], "n": 2, "temperature": 0.7, "top_p": 0.9, "top_k": 5,
         "seed": 7, "stop": ["\n", "x"], "logprobs": 2, "echo": True, "stream": True,
         "stream_options": {"include_usage": True}},
        {"prompt": [1, 2, 3, 4], "max_tokens": 3, "stop_token_ids": [5], "ignore_eos": True, "min_p": 0.1,
         "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "logit_bias": {"12": 3}},
        {"prompt": [[1, 2], [3]], "max_tokens": None, "skip_special_tokens": False, "speculative_decoding": False,
         "include_stop_str_in_output": True, "best_of": 1, "suffix": None, "user": "u"},
        {"prompt": "x" * 600},
    ]


def chats():
    return [
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        {"model": "pagedllm-tiny", "messages": [{"role": "system", "content": "Be brief."},
                                                {"role": "user", "content": "2+2?"},
                                                {"role": "assistant", "content": "4"},
                                                {"role": "user", "content": [{"type": "text", "text": "and 3+3?"}]}],
         "n": 3, "logprobs": True, "top_logprobs": 2, "stream": True, "seed": 1, "stop": "<|im_end|>",
         "max_completion_tokens": 5, "response_format": {"type": "text"}},
        {"messages": [{"role": "developer", "content": "d"}, {"role": "user", "content": "<|im_start|>x<|im_end|>"}],
         "tools": None, "temperature": 0},
    ]


def http_requests():
    body = json.dumps(completions()[0]).encode()
    chat = json.dumps(chats()[1]).encode()
    auth = b"Authorization: Bearer sk-fuzz\r\n"
    return [
        b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /version HTTP/1.0\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode() + b"\r\n\r\n" + body,
        b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: x\r\n" + auth + b"Transfer-Encoding: chunked\r\n"
        b"Expect: 100-continue\r\n\r\n" + hex(len(chat))[2:].encode() + b"\r\n" + chat + b"\r\n0\r\n\r\n",
        b"POST /tokenize HTTP/1.1\r\nContent-Length: 40\r\n\r\n" + b'{"prompt": "hello", "add_special_tokens":1}'[:40],
        b"POST /detokenize HTTP/1.1\r\nConnection: close\r\nContent-Length: 19\r\n\r\n{\"tokens\": [1,2,3]}",
        b"DELETE /v1/models/pagedllm-tiny HTTP/1.1\r\n\r\n",
        b"GET /v1/models/pagedllm-tiny HTTP/1.1\r\nAuthorization: Bearer wrong\r\n\r\n",
    ]


def safetensors(tensors, metadata=None, trailing=b""):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        size = {"F32": 4, "F16": 2, "BF16": 2}.get(dtype, 4)
        for d in shape:
            size *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + size]}
        data += bytes((i * 37) & 0xFF for i in range(size))
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data + trailing


def real_header(path):
    raw = read(path)
    (n,) = struct.unpack("<Q", raw[:8])
    return raw[: 8 + n]


def gguf_files():
    """Small GGUF files written by the gguf package: metadata of several types, and
    tensors of the plain and quantized types the Llama loader dequantizes (random blocks
    for the types gguf-py does not quantize)."""
    import tempfile

    import gguf
    import numpy as np

    files = []
    rng = np.random.default_rng(7)
    types = gguf.GGMLQuantizationType
    quantized_by_gguf_py = (types.Q8_0, types.Q4_0, types.Q4_1, types.Q5_0, types.Q5_1)
    for version_types in ((types.F32, types.F16), (types.Q8_0, types.Q4_0, types.Q4_1),
                          (types.Q5_0, types.Q5_1, types.Q2_K, types.Q3_K, types.IQ4_NL, types.IQ4_XS)):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "seed.gguf"
            writer = gguf.GGUFWriter(str(path), "llama")
            writer.add_uint32("llama.block_count", 2)
            writer.add_float32("llama.rope.freq_base", 10000.0)
            writer.add_string("tokenizer.ggml.model", "gpt2")
            writer.add_array("tokenizer.ggml.tokens", ["a", "b", "<s>"])
            writer.add_bool("general.flag", True)
            for i, qtype in enumerate(version_types):
                values = rng.standard_normal((2, 64)).astype(np.float32)
                if qtype == gguf.GGMLQuantizationType.F32:
                    writer.add_tensor(f"t{i}", values)
                elif qtype == gguf.GGMLQuantizationType.F16:
                    writer.add_tensor(f"t{i}", values.astype(np.float16))
                elif qtype in quantized_by_gguf_py:
                    writer.add_tensor(f"t{i}", gguf.quants.quantize(values, qtype), raw_dtype=qtype)
                else:  # two rows of one block each
                    block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
                    writer.add_tensor(f"t{i}", rng.integers(0, 256, (2, block_bytes), dtype=np.uint8), raw_dtype=qtype)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
            writer.close()
            files.append(path.read_bytes())
    return files


def gguf_model_files():
    """Whole Llama GGUF files as tools/testing/gguf_oracle.py writes them for the llama.cpp
    comparison (llama.* hyper-parameters, every tensor, a chat template), shrunk to an
    8-wide model, with a gpt2 byte-level BPE vocabulary (merges, pre-tokenizer) or a llama
    SentencePiece one (scores): what LlamaConfig::from_gguf and Tokenizer::from_gguf
    accept, for the fuzzer to mutate."""
    import tempfile

    import gguf

    sys.path.insert(0, str(ROOT / "tools" / "testing"))
    import gguf_oracle

    gpt2 = {"model": "gpt2", "pre": "llama-bpe", "tokens": ["<|begin|>", "<|end|>", "a", "b", "\u0120", "ab", "\u0120a"],
            "merges": ["a b", "\u0120 a"], "types": [3, 3, 1, 1, 1, 1, 1], "bos": 0, "eos": 1}
    spm = {"model": "llama", "tokens": ["<unk>", "<s>", "</s>", "<0x0A>", "\u2581", "a", "\u2581a", "b"],
           "scores": [0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -0.5, -3.0], "types": [2, 3, 3, 6, 1, 1, 1, 1], "bos": 1, "eos": 2}
    files = []
    for seed, vocab in enumerate((gpt2, spm)):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "model.gguf"
            gguf_oracle.write_model(path, gguf.GGMLQuantizationType.F16, vocab, tied=True, rope_factors=False,
                                    seed=seed, hidden=8, intermediate=16)
            files.append(path.read_bytes())
    return files


def main():
    out = pathlib.Path(sys.argv[1])
    seeds = {t: [] for t in ("config", "openai_request", "http", "safetensors", "gguf", "model_config", "tokenizer_load",
                             "tokenizer_roundtrip", "chat_template", "draft_vocab", "tool_call_parser")}
    for yaml in sorted((ROOT / "configs").glob("*.yaml")):
        text = yaml.read_bytes()
        seeds["config"] += [text, text + b"\n#--set cache.block_size=32\n#--set scheduler={max_num_seqs: 4}\n"
                            b"#--set plugins.search_paths=[a, b]\n"]
    seeds["openai_request"] += [b"\0" + json.dumps(r).encode() for r in completions()]
    seeds["openai_request"] += [b"\1" + json.dumps(r).encode() for r in chats()]
    seeds["http"] += [bytes([0]) + r for r in http_requests()] + [bytes([7]) + r for r in http_requests()[2:4]]
    seeds["safetensors"] += [real_header("models/pagedllm-tiny-eagle/model.safetensors"),
                             safetensors([("model.norm.weight", "F32", [4]), ("lm_head.weight", "BF16", [3, 4]),
                                          ("embed", "F16", [2, 2])], {"format": "pt"}),
                             safetensors([("a", "F32", [0]), ("b", "F16", [1, 1, 1])]),
                             safetensors([("x", "I64", [2])]), safetensors([], {})]
    seeds["gguf"] += gguf_files() + gguf_model_files()
    # A real header whose data is cut to the first tensor's worth: what "truncated file?" reports.
    for model in ("models/pagedllm-tiny", "models/pagedllm-tiny-eagle"):
        config = read(model + "/config.json")
        generation = ROOT / model / "generation_config.json"
        seeds["model_config"].append(config)
        if generation.exists():
            seeds["model_config"].append(config + b"\0" + generation.read_bytes())
    for d in TOKENIZER_DIRS:
        tok, cfg = d / "tokenizer.json", d / "tokenizer_config.json"
        seeds["tokenizer_load"] += [tok.read_bytes()] + ([tok.read_bytes() + b"\0" + cfg.read_bytes()] if cfg.exists() else [])
        if cfg.exists():
            for r in chats():
                seeds["chat_template"].append(cfg.read_bytes() + b"\0" + json.dumps(r).encode())
    # Real models' Jinja templates (scripts/setup.sh unpacks llama.cpp's into .deps/chat-templates).
    first_chat = json.dumps(chats()[0]).encode()
    for template in sorted((ROOT / ".deps" / "chat-templates").glob("*.jinja")):
        config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": template.read_text()}
        seeds["chat_template"].append(json.dumps(config).encode() + b"\0" + first_chat)
    texts = [read("README.md")[:1500], read("core/tokenizer/utf8.cpp")[:1500], "héllo wörld — 世界 🙂\t\r\n  x".encode(),
             b"<|endoftext|><|im_start|>user\n<s></s>[INST]", b""]
    expected = json.loads(read(FIXTURES / "bytelevel_llama3/expected.json"))
    for which in range(4):
        seeds["tokenizer_roundtrip"] += [bytes([which]) + t for t in texts]
        seeds["tokenizer_roundtrip"].append(bytes([which | 4]) + bytes(range(256)))
    ids = next((c["ids"] for c in (expected if isinstance(expected, list) else expected.get("cases", []))
                if isinstance(c, dict) and "ids" in c), [])
    if ids:
        seeds["tokenizer_roundtrip"].append(bytes([6]) + b"".join(struct.pack("<H", i & 0xFFFF) for i in ids))
    vocab = json.loads(read("models/pagedllm-tiny-eagle/draft_vocab.json"))
    seeds["draft_vocab"] += [read("models/pagedllm-tiny-eagle/draft_vocab.json"),
                             json.dumps({"token_ids": vocab["token_ids"][:1100]}).encode(),
                             json.dumps({"token_ids": [3, 1, 2, 3]}).encode()]
    # Tool calls: byte 0 the format (0 hermes, 1 llama3_json, 2 mistral, 8 glm45, 9 qwen3_coder; +4 forced),
    # byte 1 the cut.
    seeds["tool_call_parser"] += [
        bytes([0, 9]) + b'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        bytes([0, 3]) + b'<tool_call>{"name": "f", "arguments": "{\\"a\\": [1, {}]}"}</tool_call><tool_call>{bad',
        bytes([1, 20]) + b'<|python_tag|>{"name": "a", "parameters": {"s": "}\\""}}; {"name": "b", "parameters": {}}',
        bytes([2, 5]) + b'Hm.[TOOL_CALLS] [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": [1]}}]',
        bytes([6, 1]) + b'[{"name": "a", "arguments": {"k": "v"}}]',
        bytes([2, 7]) + b'Hm.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS] {}',
        bytes([0, 30]) + b'<tool_call>{"name": "f", "arguments": {"s": "<b", "n": [1, </tool_call> x',
        bytes([8, 12]) + b'Ok.\n<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>a<b</arg_value>\n<arg_key>n</arg_key>'
                         b'\n<arg_value>3</arg_value>\n</tool_call>',
        bytes([9, 40]) + b'<tool_call>\n<function=f>\n<parameter=o>\n{"k": [1]}\n</parameter>\n<parameter=b>\nTrue\n'
                         b'</parameter>\n</function>\n</tool_call>',
    ]
    for target, items in seeds.items():
        d = out / target
        d.mkdir(parents=True, exist_ok=True)
        for item in items:
            (d / hashlib.sha1(item).hexdigest()).write_bytes(item)
        print(f"{target}: {len(items)} seeds")


if __name__ == "__main__":
    main()
