#pragma once
// The tokenizer facade: loads an HF tokenizer.json (plus tokenizer_config.json
// from a model directory), or a GGUF file's tokenizer as the equivalent
// tokenizer.json (gguf_vocabulary.h), and encodes / decodes exactly as HF
// `tokenizers` does.
//
// Encoding pipeline (HF's order):
//   validate UTF-8 -> split around added tokens (raw, then normalized)
//   -> normalizer (per piece) -> pre_tokenizer -> BPE per word
//   -> post_processor special tokens (when add_special_tokens).
// Decoding: ids -> token strings (unknown ids dropped, specials dropped when
// skip_special_tokens) -> decoder chain -> concatenation.
//
// All const methods are thread-safe.

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/added_vocabulary.h"
#include "core/tokenizer/bpe_model.h"
#include "core/tokenizer/decoder.h"
#include "core/tokenizer/normalizer.h"
#include "core/tokenizer/post_processor.h"
#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/token_id.h"
#include "core/tokenizer/tokenizer_config.h"

namespace pagedllm::tokenizer {

class Tokenizer {
 public:
  // ---- loading (all throw TokenizerError naming the file) ----------------
  // A tokenizer.json file on its own (no tokenizer_config.json).
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  // tokenizer.json text; `source` names it in errors.
  static Tokenizer from_json_text(std::string_view text, const std::string& source);
  // A model directory: tokenizer.json and, when present, tokenizer_config.json
  // (BOS/EOS/PAD, add_bos_token/add_eos_token, chat template).
  static Tokenizer from_model_dir(const std::string& directory);
  // A GGUF file's tokenizer.ggml.* metadata and chat template (gguf_vocabulary.h).
  static Tokenizer from_gguf(const std::string& gguf_path);
  // What the engine's model.path names: a model directory or a GGUF file.
  static Tokenizer from_model(const std::string& model_path);
  // A tokenizer.json file, a GGUF file (by its magic) or a model directory.
  static Tokenizer from_path(const std::string& path);

  // ---- encode / decode ---------------------------------------------------
  // `text` must be valid UTF-8 (else TokenizerError naming the byte offset).
  // Special added tokens written in `text` are only recognised when
  // parse_special is true (rendered chat templates); otherwise they are
  // tokenized as plain text. Non-special added tokens are always recognised.
  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens = true,
                              bool parse_special = false) const;
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;

  // ---- vocabulary ----------------------------------------------------------
  // The token string of `id` (added token content or vocabulary entry).
  std::optional<std::string> id_to_token(TokenId id) const;
  std::optional<TokenId> token_to_id(std::string_view token) const;
  bool is_special(TokenId id) const;
  // One past the largest id of the vocabulary and the added tokens.
  std::size_t vocab_size() const { return token_strings_.size(); }

  std::optional<TokenId> bos_id() const { return bos_id_; }
  std::optional<TokenId> eos_id() const { return eos_id_; }
  std::optional<TokenId> pad_id() const { return pad_id_; }
  const TokenizerConfig& config() const { return config_; }
  const PostProcessor& post_processor() const { return post_processor_; }
  // How the token strings (id_to_token) spell bytes, from the decoder: GPT-2
  // byte-level, SentencePiece byte fallback, or the bytes themselves.
  enum class TokenEncoding { kRaw, kByteFallback, kByteLevel };
  TokenEncoding token_encoding() const { return token_encoding_; }
  // The file the tokenizer came from.
  const std::string& source() const { return source_; }

  // The token strings that decode() would feed the decoder (used by the
  // incremental detokenizer to skip special tokens consistently).
  bool keeps_in_decode(TokenId id, bool skip_special_tokens) const;
  // True for <0xNN> tokens when the decoder has a ByteFallback step: a run of
  // them decodes as a whole, so its text is not final until the run ends.
  bool is_fallback_byte(TokenId id) const {
    return id >= 0 && static_cast<std::size_t>(id) < token_fallback_byte_.size() &&
           token_fallback_byte_[static_cast<std::size_t>(id)];
  }

 private:
  Tokenizer() = default;
  static Tokenizer from_json(const Json& root, const std::string& source);
  void index_tokens();
  void apply_config(TokenizerConfig config);

  std::string source_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<AddedVocabulary> added_;
  PostProcessor post_processor_{{}, {}};
  TokenizerConfig config_;

  // Indexed by id: the string decode uses and whether the id is special.
  std::vector<std::string> token_strings_;
  std::vector<bool> token_present_;
  std::vector<bool> token_special_;
  std::vector<bool> token_fallback_byte_;
  bool decoder_has_byte_fallback_ = false;
  TokenEncoding token_encoding_ = TokenEncoding::kRaw;
  std::optional<TokenId> bos_id_;
  std::optional<TokenId> eos_id_;
  std::optional<TokenId> pad_id_;
};

}  // namespace pagedllm::tokenizer
