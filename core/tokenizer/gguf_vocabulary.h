#pragma once
// A GGUF file's tokenizer (tokenizer.ggml.* and tokenizer.chat_template) as the
// HF tokenizer.json and tokenizer_config.json that say the same thing, so the
// one Tokenizer class encodes it. The two vocabulary kinds llama.cpp writes:
//
//   "gpt2"  byte-level BPE: tokens + merges, the pre-tokenizer chosen by
//           tokenizer.ggml.pre (llama.cpp's regexes per name, as HF Split /
//           Digits / ByteLevel steps); llama3-style files ignore merges for
//           whole-vocabulary words, as llama.cpp does.
//   "llama" SentencePiece BPE: tokens + scores (no merges in the file). The
//           merges are made from the scores the way llama.cpp's SPM tokenizer
//           merges (the pair whose joined token scores highest first), which is
//           what transformers' converter does too; <0xNN> byte fallback,
//           "▁" for spaces and a prefix space (tokenizer.ggml.add_space_prefix).
//
// Token types: CONTROL and UNKNOWN tokens are special added tokens (only parsed
// in rendered chat templates), USER_DEFINED ones plain added tokens (always
// matched), as llama.cpp treats them. bos/eos/unk/pad come from their ids,
// add_bos/add_eos from tokenizer.ggml.add_{bos,eos}_token (defaults: llama.cpp's).

#include <string>

#include "core/tokenizer/json_fields.h"
#include "core/tokenizer/tokenizer_config.h"

namespace pagedllm::tokenizer {

struct GgufTokenizerFiles {
  Json tokenizer_json;
  TokenizerConfig config;
};

// Reads `gguf_path`; TokenizerError naming the file and the key on anything
// missing, malformed or unsupported (another tokenizer model, an unknown pre).
GgufTokenizerFiles gguf_tokenizer_files(const std::string& gguf_path);

}  // namespace pagedllm::tokenizer
