"""llama.cpp (through llama-cpp-python) as the oracle for pagedllm's GGUF loading.

Usage:
  gguf_oracle.py make DIR            writes DIR/tiny-*.gguf (f16, q8_0, spm and llama.cpp's quantizations of
                                     k-f16.gguf) and DIR/bad-*.gguf
  gguf_oracle.py run IN.json OUT.json
  gguf_oracle.py dequantize TYPE IN.bin OUT.f32

make: two small random Llama models written with the gguf package the way llama.cpp's
convert_hf_to_gguf.py writes a LlamaForCausalLM: q/k rows permuted per head, dims
reversed, a byte-level BPE ("gpt2") tokenizer, here trained on the tokenizer fixtures' fixed corpus with
HF tokenizers. tiny-f16.gguf: F16 matrices, F32 norms, its own output.weight,
pre-tokenizer "gpt-2", llama3 RoPE scaling as a rope_freqs.weight tensor.
tiny-q8_0.gguf: Q8_0 matrices, tied embeddings (no output.weight), pre-tokenizer
"llama-bpe" (llama3's regex, merges ignored for whole words, BOS added).
tiny-spm.gguf: a SentencePiece ("llama") vocabulary trained here with the sentencepiece
package (BPE, byte fallback, digits split, as Llama 2's), BF16 embedding and output,
Q4_0 matrices. tiny-{q4_k_m,q5_k_m,q5_0,q5_1,q3_k_m,q2_k,iq4_nl,iq4_xs}.gguf: a random
model with 256-wide rows (k-f16.gguf) quantized by llama.cpp's own quantizer, with its
mixes: Q6_K output.weight in all; Q4_K_M / Q5_K_M: Q4_K or Q5_K matrices, Q6_K for attn_v
and some ffn_down; Q3_K_M: Q3_K matrices, Q4_K attn_output and ffn_down, Q5_K attn_v;
Q2_K: Q2_K matrices, Q3_K attn_output, attn_v and ffn_down; the others one type.
bad-*.gguf: files the loader must refuse (another architecture, a missing tensor, a
tensor type it does not dequantize (MXFP4), an infinite block scale, a quantized tensor
cut short, an unknown pre-tokenizer).

dequantize: IN.bin, whole blocks of ggml type TYPE (Q5_0, IQ4_XS, ...), through
gguf.quants.dequantize into OUT.f32 (little-endian f32).

run: IN.json = {"files": [{"path", "texts": [...], "prompt", "greedy_tokens"}]}; for
each file, llama.cpp's ids of every text (add_bos as the file says, special tokens not
parsed), the logits of every position of the prompt plus llama.cpp's own greedy
continuation (one f32 KV cache, no flash attention, one thread), the greedy tokens and,
at each greedy step, the gap between the best and second-best logit.
"""

import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]

HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE, CONTEXT = 64, 2, 4, 2, 128, 256
HEAD_DIM = HIDDEN // HEADS
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def training_corpus():
    """The tokenizer fixtures' fixed corpus (tools/tokenizer_fixtures/corpus.py: pinned stdlib
    code and prose of many scripts), so the files, and the test's greedy margins, are the same
    in every run; the project's docs, which change with every commit, are not."""
    sys.path.insert(0, str(REPO / "tools" / "tokenizer_fixtures"))
    import corpus

    return corpus.training_corpus()


def train_tokenizer(vocab_size=640):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    assert [i for _, i in vocab] == list(range(len(vocab)))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return [t for t, _ in vocab], merges


def train_sentencepiece(vocab_size=1500):
    """tokens, scores and llama.cpp token types, as convert_hf_to_gguf.py's
    _create_vocab_sentencepiece reads them from a tokenizer.model."""
    import io

    import gguf
    import sentencepiece as spm

    lines = [line for text in training_corpus() for line in text.splitlines() if line.strip()]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
                                   model_type="bpe", byte_fallback=True, split_digits=True,
                                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   add_dummy_prefix=True, allow_whitespace_only_pieces=True,
                                   character_coverage=0.9995, num_threads=1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(gguf.TokenType.UNKNOWN)
        elif sp.is_control(i):
            types.append(gguf.TokenType.CONTROL)
        elif sp.is_unused(i):
            types.append(gguf.TokenType.UNUSED)
        elif sp.is_byte(i):
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)
    return tokens, scores, types


def permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute: each head's rotate-half halves interleaved."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_factors(base=10000.0, factor=8.0, low=1.0, high=4.0, original=64):
    """convert_hf_to_gguf.py's rope_freqs for llama3 scaling."""
    freqs = 1.0 / (base ** (np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM))
    low_wavelen, high_wavelen = original / low, original / high
    factors = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def write_model(path, qtype, tokenizer, tied, rope_factors, seed, embed_qtype=None, arch="llama", skip=(),
                hidden=HIDDEN, intermediate=INTERMEDIATE, extra_floats=None):
    import gguf

    head_dim = hidden // HEADS
    rng = np.random.default_rng(seed)
    vocab = len(tokenizer["tokens"])

    def matrix(rows, cols, scale):
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(path.stem)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(hidden)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(intermediate)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    for key, value in (extra_floats or {}).items():  # metadata the loader must read or refuse
        w.add_float32(key, value)
    w.add_tokenizer_model(tokenizer["model"])
    if "pre" in tokenizer:
        w.add_tokenizer_pre(tokenizer["pre"])
    w.add_token_list(tokenizer["tokens"])
    w.add_token_types(tokenizer["types"])
    if "merges" in tokenizer:
        w.add_token_merges(tokenizer["merges"])
    if "scores" in tokenizer:
        w.add_token_scores(tokenizer["scores"])
        w.add_add_space_prefix(True)
        w.add_unk_token_id(0)
    w.add_bos_token_id(tokenizer["bos"])
    w.add_eos_token_id(tokenizer["eos"])
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

    def add(name, data, dtype=qtype):
        if name in skip:
            return
        if data.ndim == 1:
            w.add_tensor(name, data.astype(np.float32))
        elif dtype == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, data.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(data, dtype), raw_dtype=dtype)

    # Scales that give logits a spread of a few units, so greedy choices are clear.
    add("token_embd.weight", matrix(vocab, hidden, 1.0), embed_qtype or qtype)
    if rope_factors:
        w.add_tensor("rope_freqs.weight", llama3_factors())
    for layer in range(LAYERS):
        p = f"blk.{layer}."
        add(p + "attn_norm.weight", norm())
        add(p + "attn_q.weight", permute(matrix(HEADS * head_dim, hidden, 1.5 / np.sqrt(hidden)), HEADS))
        add(p + "attn_k.weight", permute(matrix(KV_HEADS * head_dim, hidden, 1.5 / np.sqrt(hidden)), KV_HEADS))
        add(p + "attn_v.weight", matrix(KV_HEADS * head_dim, hidden, 1.0 / np.sqrt(hidden)))
        add(p + "attn_output.weight", matrix(hidden, HEADS * head_dim, 0.5 / np.sqrt(hidden)))
        add(p + "ffn_norm.weight", norm())
        add(p + "ffn_gate.weight", matrix(intermediate, hidden, 1.0 / np.sqrt(hidden)))
        add(p + "ffn_up.weight", matrix(intermediate, hidden, 1.0 / np.sqrt(hidden)))
        add(p + "ffn_down.weight", matrix(hidden, intermediate, 0.5 / np.sqrt(intermediate)))
    add("output_norm.weight", norm())
    if not tied:
        add("output.weight", matrix(vocab, hidden, 0.4), embed_qtype or qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make(directory):
    import gguf

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokens, merges = train_tokenizer()
    bpe = {"model": "gpt2", "tokens": tokens, "merges": merges, "bos": 0, "eos": 2,
           "types": [gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens]}
    write_model(directory / "tiny-f16.gguf", gguf.GGMLQuantizationType.F16, dict(bpe, pre="gpt-2"), tied=False,
                rope_factors=True, seed=1)
    write_model(directory / "tiny-q8_0.gguf", gguf.GGMLQuantizationType.Q8_0, dict(bpe, pre="llama-bpe"),
                tied=True, rope_factors=False, seed=2)
    tokens, scores, types = train_sentencepiece()
    spm = {"model": "llama", "tokens": tokens, "scores": scores, "types": types, "bos": 1, "eos": 2}
    write_model(directory / "tiny-spm.gguf", gguf.GGMLQuantizationType.Q4_0, spm, tied=False, rope_factors=False,
                seed=3, embed_qtype=gguf.GGMLQuantizationType.BF16)
    f16, gpt2 = gguf.GGMLQuantizationType.F16, dict(bpe, pre="gpt-2")
    write_model(directory / "bad-arch.gguf", f16, gpt2, tied=True, rope_factors=False, seed=4, arch="qwen2")
    write_model(directory / "bad-missing.gguf", f16, gpt2, tied=True, rope_factors=False, seed=4,
                skip={"blk.1.ffn_up.weight"})
    write_model(directory / "bad-mxfp4.gguf", gguf.GGMLQuantizationType.MXFP4, gpt2, tied=True, rope_factors=False,
                seed=4)
    write_model(directory / "bad-pre.gguf", f16, dict(bpe, pre="no-such-pre"), tied=True, rope_factors=False,
                seed=4)
    # Keys llama.cpp added or renamed: a soft-cap the Llama loader does not implement, and the old and new
    # spellings of the linear RoPE factor disagreeing; a harmless note passes.
    write_model(directory / "bad-softcap.gguf", f16, gpt2, tied=True, rope_factors=False, seed=4,
                extra_floats={"llama.final_logit_softcapping": 30.0})
    write_model(directory / "bad-rope-factor.gguf", f16, gpt2, tied=True, rope_factors=False, seed=4,
                extra_floats={"llama.rope.scaling.factor": 4.0, "llama.rope.scale_linear": 2.0})
    write_model(directory / "bad-tokenizer-key.gguf", f16, gpt2, tied=True, rope_factors=False, seed=4,
                extra_floats={"tokenizer.ggml.normalizer_scale": 1.0, "llama.rope.scaling.finetuned": 0.0})
    # A Q8_0 file whose blk.1.attn_output.weight has an infinite f16 block scale (block 3's d).
    write_model(directory / "bad-scale.gguf", gguf.GGMLQuantizationType.Q8_0, gpt2, tied=True, rope_factors=False,
                seed=4)
    reader = gguf.GGUFReader(directory / "bad-scale.gguf")
    offset = next(t.data_offset for t in reader.tensors if t.name == "blk.1.attn_output.weight")
    with open(directory / "bad-scale.gguf", "r+b") as f:
        f.seek(offset + 3 * 34)
        f.write(bytes([0x00, 0x7C]))
    # K-quants: gguf-py cannot write them, so llama.cpp's own quantizer makes them from an
    # F16 file whose rows are whole 256-element super-blocks; its _M mixes put attn_v,
    # some ffn_down and output.weight in Q6_K.
    write_model(directory / "k-f16.gguf", f16, gpt2, tied=False, rope_factors=False, seed=5, hidden=256,
                intermediate=512)
    for name, ftype in [("q4_k_m", "LLAMA_FTYPE_MOSTLY_Q4_K_M"), ("q5_k_m", "LLAMA_FTYPE_MOSTLY_Q5_K_M"),
                        ("q5_0", "LLAMA_FTYPE_MOSTLY_Q5_0"), ("q5_1", "LLAMA_FTYPE_MOSTLY_Q5_1"),
                        ("q3_k_m", "LLAMA_FTYPE_MOSTLY_Q3_K_M"), ("q2_k", "LLAMA_FTYPE_MOSTLY_Q2_K"),
                        ("iq4_nl", "LLAMA_FTYPE_MOSTLY_IQ4_NL"), ("iq4_xs", "LLAMA_FTYPE_MOSTLY_IQ4_XS")]:
        quantize_with_llama_cpp(directory / "k-f16.gguf", directory / f"tiny-{name}.gguf", ftype)
    # A quantized tensor whose bytes run past the end of the file: the Q3_K_M file less its last Q3_K block
    # (of blk.1.ffn_up.weight, the last tensor in its data section).
    (directory / "bad-truncated.gguf").write_bytes((directory / "tiny-q3_k_m.gguf").read_bytes()[:-110])


def quantize_with_llama_cpp(source, target, ftype):
    import ctypes
    import os

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, ftype)
    params.nthread = 1
    # llama.cpp logs every tensor to stderr; the test prints stderr only on failure.
    rc = llama_cpp.llama_model_quantize(os.fsencode(source), os.fsencode(target), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({source} -> {target}, {ftype}) returned {rc}")


def plain_cpu_kernels(llama_cpp):
    """Loads models without llama.cpp's extra buffer types (weights repacked for AMX tiles or interleaved
    AVX layouts): on a CPU with AMX-INT8 (Sapphire Rapids and later) llama.cpp 0.3.36 moves Q4_0/Q4_1/Q8_0/
    K-quant weights into AMX buffers, and its decode crashed there (SIGSEGV in llama_decode, 2026-12, on
    this project's VM). The plain kernels are the ones every CPU runs, and compute the same products (the
    activations quantized to the weight's dot type) in another order, within the tests' tolerances.
    Llama() takes no such option: its model parameters start from llama_model_default_params()."""
    defaults = llama_cpp.llama_model_default_params

    def without_extra_buffers():
        params = defaults()
        params.use_extra_bufts = False
        return params

    llama_cpp.llama_cpp.llama_model_default_params = without_extra_buffers
    llama_cpp.llama_model_default_params = without_extra_buffers


def run(request_path, output_path):
    import llama_cpp

    plain_cpu_kernels(llama_cpp)
    request = json.loads(Path(request_path).read_text())
    results = []
    for entry in request["files"]:
        llm = llama_cpp.Llama(model_path=entry["path"], n_ctx=512, n_batch=512, n_threads=1, n_threads_batch=1,
                              logits_all=True, flash_attn=False, type_k=llama_cpp.GGML_TYPE_F32,
                              type_v=llama_cpp.GGML_TYPE_F32, verbose=False)
        texts = [llm.tokenize(t.encode("utf-8"), add_bos=True, special=False) for t in entry["texts"]]
        prompt = llm.tokenize(entry["prompt"].encode("utf-8"), add_bos=True, special=False)
        llm.reset()
        llm.eval(prompt)
        greedy, gaps = [], []
        for _ in range(entry["greedy_tokens"]):
            last = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            top2 = np.sort(last)[-2:]
            token = int(np.argmax(last))
            greedy.append(token)
            gaps.append(float(top2[1] - top2[0]))
            llm.eval([token])
        # Every position's logits, the greedy tokens' included (the last one is never fed).
        logits = np.asarray(llm.scores[: llm.n_tokens], dtype=np.float32)
        results.append({"path": entry["path"], "text_ids": texts, "prompt_ids": prompt, "greedy": greedy,
                        "greedy_gaps": gaps, "logits": logits.tolist()})
        llm.close()
    Path(output_path).write_text(json.dumps({"files": results}))


def dequantize(type_name, input_path, output_path):
    import gguf

    qtype = gguf.GGMLQuantizationType[type_name]
    block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
    blocks = np.frombuffer(Path(input_path).read_bytes(), dtype=np.uint8).reshape((-1, block_bytes))
    Path(output_path).write_bytes(gguf.quants.dequantize(blocks, qtype).astype(np.float32).tobytes())


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "dequantize":
        dequantize(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
