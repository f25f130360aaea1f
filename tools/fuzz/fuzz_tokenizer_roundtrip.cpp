// Tokenizer encode/decode of arbitrary bytes with the repository's tokenizers
// (the embedded model's and the three fixtures: byte-level GPT-2 and Llama 3,
// SentencePiece-style Llama 2). Byte 0 picks the tokenizer (bits 0-1) and the
// mode (bit 2); the rest is the text, or (ids mode) little-endian 16-bit ids,
// some past the vocabulary.
// Properties:
//   text: invalid UTF-8 is a TokenizerError; for valid UTF-8,
//         decode(encode(x)) == x, with and without special tokens (except
//         SentencePiece's space marker U+2581, which decodes to ' ' by design);
//   ids:  decode never fails, and the streaming detokenizer's pieces
//         concatenate to decode(ids) (docs: incremental_detokenizer.h) and
//         are valid UTF-8, with or without a prompt before them.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/incremental_detokenizer.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_error.h"
#include "core/tokenizer/utf8.h"

using namespace pagedllm::tokenizer;

namespace {

struct Entry {
  Tokenizer tokenizer;
  bool sentencepiece;
};

std::vector<Entry> load() {
  std::vector<Entry> all;
  all.push_back({Tokenizer::from_model_dir(PAGEDLLM_SOURCE_DIR "/models/pagedllm-tiny"), false});
  all.push_back({Tokenizer::from_model_dir(PAGEDLLM_SOURCE_DIR "/tests/fixtures/tokenizer/bytelevel_gpt2"), false});
  all.push_back({Tokenizer::from_model_dir(PAGEDLLM_SOURCE_DIR "/tests/fixtures/tokenizer/bytelevel_llama3"), false});
  all.push_back({Tokenizer::from_model_dir(PAGEDLLM_SOURCE_DIR "/tests/fixtures/tokenizer/spm_llama2"), true});
  return all;
}

void text_mode(const Entry& entry, std::string_view text) {
  const Tokenizer& tokenizer = entry.tokenizer;
  const bool valid = !utf8::find_invalid(text);
  std::vector<TokenId> plain;
  try {
    plain = tokenizer.encode(text, false);
  } catch (const TokenizerError&) {
    if (valid) __builtin_trap();  // valid UTF-8 always encodes
    return;
  }
  if (!valid) __builtin_trap();  // invalid UTF-8 is refused
  if (entry.sentencepiece && text.find("\xE2\x96\x81") != std::string_view::npos) return;
  if (tokenizer.decode(plain) != text) __builtin_trap();
  if (tokenizer.decode(tokenizer.encode(text, true), true) != text) __builtin_trap();
  // Rendered chat prompts are encoded with parse_special: any text still encodes.
  (void)tokenizer.encode(text, true, true);
}

void ids_mode(const Entry& entry, const std::uint8_t* data, std::size_t size) {
  const Tokenizer& tokenizer = entry.tokenizer;
  const auto vocab = static_cast<std::uint32_t>(tokenizer.vocab_size());
  std::vector<TokenId> ids;
  for (std::size_t i = 0; i + 1 < size; i += 2) {
    ids.push_back(static_cast<TokenId>((data[i] | (data[i + 1] << 8)) % (vocab + 16)));
  }
  for (const bool skip : {false, true}) {
    const std::string whole = tokenizer.decode(ids, skip);
    std::vector<TokenId> in_vocab;
    for (const TokenId id : ids) {
      if (static_cast<std::uint32_t>(id) < vocab) in_vocab.push_back(id);
    }
    // The engine only streams ids of the model's vocabulary.
    IncrementalDetokenizer detokenizer(tokenizer, skip);
    std::string streamed;
    for (const TokenId id : in_vocab) streamed += detokenizer.push(id);
    streamed += detokenizer.finish();
    if (utf8::find_invalid(streamed)) __builtin_trap();
    if (streamed != tokenizer.decode(in_vocab, skip)) __builtin_trap();
    // With a prompt for context: its text is not emitted, the rest still streams as valid UTF-8.
    const std::span<const TokenId> prompt(in_vocab.data(), in_vocab.size() / 3);
    IncrementalDetokenizer after_prompt(tokenizer, skip, prompt);
    std::string rest;
    for (std::size_t i = prompt.size(); i < in_vocab.size(); ++i) rest += after_prompt.push(in_vocab[i]);
    rest += after_prompt.finish();
    if (utf8::find_invalid(rest)) __builtin_trap();
    (void)whole;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<Entry> tokenizers = load();
  if (size == 0) return 0;
  const Entry& entry = tokenizers[data[0] & 3];
  if (data[0] & 4) {
    ids_mode(entry, data + 1, size - 1);
  } else {
    text_mode(entry, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  }
  return 0;
}
