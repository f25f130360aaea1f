"""Trains the byte-level BPE tokenizer of pagedllm-tiny on the training split of the
pinned corpus and writes tokenizer.json + tokenizer_config.json (HF format).

    scripts/python.sh tools/train/train_tokenizer.py --out work/tokenizer

Layout: GPT-2 style (ByteLevel pre-tokenizer with GPT-2's regex, "a b" merges,
ByteLevel decoder). Vocabulary 8192: ids 0-2 are the special tokens <|endoftext|>
(BOS, EOS and document separator), <|im_start|> and <|im_end|> (ChatML, so the chat
endpoint has a template; the model never saw them in training), ids 3-258 the 256 bytes,
then 7933 merges. The post-processor prepends <|endoftext|> (every training document
starts with it), so encode(text) with special tokens = [0] + ids.

Training is deterministic (no randomness; ties broken by token ids).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
          " + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def added_token(id_, content):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}


def tokenizer_json(vocab, merges, max_len):
    bos = SPECIALS[0]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added_token(vocab[s], s) for s in SPECIALS],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [vocab[bos]], "tokens": [bos]}}}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }


def tokenizer_config(vocab, max_len):
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIALS[0], "eos_token": SPECIALS[0], "pad_token": SPECIALS[0],
        "unk_token": None,
        "add_bos_token": True, "add_eos_token": False, "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_len,
        "chat_template": CHATML,
        "added_tokens_decoder": {str(vocab[s]): {k: v for k, v in added_token(vocab[s], s).items()
                                                 if k != "id"} for s in SPECIALS},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for tokenizer.json and tokenizer_config.json")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--max-len", type=int, default=512, help="model_max_length in tokenizer_config.json")
    ap.add_argument("--archive", default=corpus.DEFAULT_ARCHIVE)
    args = ap.parse_args()

    t0 = time.time()
    train, heldout, digest = corpus.load_corpus(args.archive)
    print(f"corpus {digest[:16]}: {len(train)} training files, {len(heldout)} held out", flush=True)
    vocab, merges = bpe.train_bpe([t for _, t in train], args.vocab_size, SPECIALS,
                                  log=lambda m: print(m, flush=True))
    print(f"trained {len(vocab)} tokens ({len(merges)} merges) in {time.time() - t0:.1f} s", flush=True)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(vocab, merges, args.max_len), f, ensure_ascii=False, indent=1)
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(vocab, args.max_len), f, ensure_ascii=False, indent=1)

    enc = bpe.Encoder.from_file(os.path.join(args.out, "tokenizer.json"))
    stats = {"vocab_size": len(vocab), "merges": len(merges), "corpus_sha256": digest}
    for name, docs in (("heldout", heldout), ("train", train)):
        nbytes = sum(len(t.encode("utf-8")) for _, t in docs)
        ntok = 0
        for _, t in docs:
            ids = enc.encode(t)
            ntok += len(ids)
            if name == "heldout" and enc.decode(ids) != t:
                raise SystemExit("round trip failed")
        stats[f"{name}_bytes"] = nbytes
        stats[f"{name}_tokens"] = ntok
        stats[f"{name}_bytes_per_token"] = round(nbytes / ntok, 4)
    with open(os.path.join(args.out, "tokenizer_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats), f"total {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
