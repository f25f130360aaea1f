#include "core/tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/tokenizer/gguf_vocabulary.h"
#include "core/tokenizer/tokenizer_error.h"
#include "core/tokenizer/utf8.h"

namespace pagedllm::tokenizer {
namespace {

bool contains_component(const Json& value, std::string_view type) {
  if (value.is_object()) {
    const auto it = value.find("type");
    if (it != value.end() && it->is_string() && it->get<std::string>() == type) return true;
  }
  if (value.is_object() || value.is_array()) {
    for (const Json& child : value) {
      if (contains_component(child, type)) return true;
    }
  }
  return false;
}

bool is_byte_token_text(const std::string& token) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); };
  return token.size() == 6 && token.starts_with("<0x") && hex(token[3]) && hex(token[4]) && token[5] == '>';
}

}  // namespace

Tokenizer Tokenizer::from_json_text(std::string_view text, const std::string& source) {
  return from_json(parse_json_text(text, source), source);
}

Tokenizer Tokenizer::from_json(const Json& root, const std::string& source) {
  const JsonPlace place(source, "");
  if (!root.is_object()) place.fail("expected a JSON object");

  Tokenizer tokenizer;
  tokenizer.source_ = source;
  const auto component = [&](std::string_view key) -> const Json* {
    const auto it = root.find(key);
    return it == root.end() || it->is_null() ? nullptr : &*it;
  };
  if (const Json* normalizer = component("normalizer")) {
    tokenizer.normalizer_ = make_normalizer(*normalizer, place / "normalizer");
  }
  if (const Json* pre_tokenizer = component("pre_tokenizer")) {
    tokenizer.pre_tokenizer_ = make_pre_tokenizer(*pre_tokenizer, place / "pre_tokenizer");
  }
  const Json* model = component("model");
  if (model == nullptr) place.fail("missing field 'model'");
  tokenizer.model_ = BpeModel::from_json(*model, place / "model");
  if (const Json* decoder = component("decoder")) {
    tokenizer.decoder_ = make_decoder(*decoder, place / "decoder");
    tokenizer.decoder_has_byte_fallback_ = contains_component(*decoder, "ByteFallback");
    tokenizer.token_encoding_ = contains_component(*decoder, "ByteLevel") ? TokenEncoding::kByteLevel
                                : tokenizer.decoder_has_byte_fallback_ ? TokenEncoding::kByteFallback
                                                                       : TokenEncoding::kRaw;
  }
  if (const Json* post_processor = component("post_processor")) {
    tokenizer.post_processor_ = PostProcessor::from_json(*post_processor, place / "post_processor");
  }
  const Json* added = component("added_tokens");
  tokenizer.added_ = std::make_unique<AddedVocabulary>(
      added != nullptr ? AddedVocabulary::parse(*added, place / "added_tokens") : std::vector<AddedToken>{},
      tokenizer.normalizer_.get());
  tokenizer.index_tokens();
  // A template's special ids must name tokens: an id past the vocabulary would reach the model's embedding.
  for (const std::vector<TokenId>* ids : {&tokenizer.post_processor_.prefix(), &tokenizer.post_processor_.suffix()}) {
    for (const TokenId id : *ids) {
      if (!tokenizer.id_to_token(id)) {
        (place / "post_processor")
            .fail(fmt::format("special token id {} is neither in the vocabulary nor an added token", id));
      }
    }
  }
  return tokenizer;
}

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json_path) {
  std::ifstream file(tokenizer_json_path, std::ios::binary);
  if (!file) throw TokenizerError(fmt::format("{}: cannot open tokenizer file", tokenizer_json_path));
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) throw TokenizerError(fmt::format("{}: read error", tokenizer_json_path));
  return from_json_text(contents.str(), tokenizer_json_path);
}

Tokenizer Tokenizer::from_model_dir(const std::string& directory) {
  const std::filesystem::path dir(directory);
  const std::filesystem::path json = dir / "tokenizer.json";
  if (!std::filesystem::exists(json)) {
    throw TokenizerError(fmt::format("{}: no tokenizer.json in this directory (only HF tokenizer.json "
                                     "tokenizers are supported; convert tokenizer.model with transformers)",
                                     directory));
  }
  Tokenizer tokenizer = from_file(json.string());
  const std::filesystem::path config = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config)) tokenizer.apply_config(TokenizerConfig::from_file(config.string()));
  return tokenizer;
}

Tokenizer Tokenizer::from_gguf(const std::string& gguf_path) {
  GgufTokenizerFiles files = gguf_tokenizer_files(gguf_path);
  Tokenizer tokenizer = from_json(files.tokenizer_json, gguf_path);
  tokenizer.apply_config(std::move(files.config));
  return tokenizer;
}

Tokenizer Tokenizer::from_model(const std::string& model_path) {
  if (std::filesystem::is_regular_file(model_path)) return from_gguf(model_path);
  return from_model_dir(model_path);
}

Tokenizer Tokenizer::from_path(const std::string& path) {
  if (std::filesystem::is_directory(path)) return from_model_dir(path);
  std::ifstream file(path, std::ios::binary);
  char magic[4] = {};
  if (file.read(magic, sizeof magic) && std::string_view(magic, sizeof magic) == "GGUF") return from_gguf(path);
  return from_file(path);
}

void Tokenizer::index_tokens() {
  std::size_t size = model_->vocab_size();
  for (const AddedToken& token : added_->tokens()) size = std::max(size, static_cast<std::size_t>(token.id) + 1);
  token_strings_.assign(size, std::string());
  token_present_.assign(size, false);
  token_special_.assign(size, false);
  token_fallback_byte_.assign(size, false);
  for (std::size_t id = 0; id < model_->vocab_size(); ++id) {
    if (const std::string* token = model_->id_to_token(static_cast<TokenId>(id))) {
      token_strings_[id] = *token;
      token_present_[id] = true;
    }
  }
  // Added tokens take precedence over the vocabulary entry with the same id.
  for (const AddedToken& token : added_->tokens()) {
    const auto id = static_cast<std::size_t>(token.id);
    token_strings_[id] = token.content;
    token_present_[id] = true;
  }
  // HF skips by content: a vocabulary entry equal to a special token is special too.
  for (std::size_t id = 0; id < size; ++id) {
    token_special_[id] = token_present_[id] && added_->is_special_content(token_strings_[id]);
    token_fallback_byte_[id] = decoder_has_byte_fallback_ && token_present_[id] && is_byte_token_text(token_strings_[id]);
  }
}

void Tokenizer::apply_config(TokenizerConfig config) {
  auto resolve = [&](const std::optional<std::string>& token, std::string_view field) -> std::optional<TokenId> {
    if (!token) return std::nullopt;
    const std::optional<TokenId> id = token_to_id(*token);
    if (!id) {
      throw TokenizerError(fmt::format("{}: {} '{}' is neither an added token nor in the vocabulary of {}",
                                       config.source, field, *token, source_));
    }
    return id;
  };
  bos_id_ = resolve(config.bos_token, "bos_token");
  eos_id_ = resolve(config.eos_token, "eos_token");
  pad_id_ = resolve(config.pad_token, "pad_token");

  // transformers' LlamaTokenizerFast and a few others rebuild the template from the
  // flags (add_eos_token defaults to false); other classes ignore them.
  if (const std::optional<bool> default_bos = config.special_tokens_template_default_bos()) {
    const bool add_bos = config.add_bos_token.value_or(*default_bos);
    const bool add_eos = config.add_eos_token.value_or(false);
    std::vector<TokenId> prefix;
    std::vector<TokenId> suffix;
    if (add_bos) {
      if (!bos_id_) throw TokenizerError(fmt::format("{}: add_bos_token is true but bos_token is not set", config.source));
      prefix.push_back(*bos_id_);
    }
    if (add_eos) {
      if (!eos_id_) throw TokenizerError(fmt::format("{}: add_eos_token is true but eos_token is not set", config.source));
      suffix.push_back(*eos_id_);
    }
    post_processor_ = PostProcessor(std::move(prefix), std::move(suffix));
  }
  config_ = std::move(config);
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special_tokens, bool parse_special) const {
  if (const std::optional<std::size_t> bad = utf8::find_invalid(text)) {
    throw TokenizerError(fmt::format("prompt: invalid UTF-8 at byte {} (byte 0x{:02X})", *bad,
                                     static_cast<unsigned char>(text[*bad])));
  }
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<PreToken> pieces;
  for (InputSegment& segment : added_->split(text, parse_special, normalizer_.get())) {
    if (segment.token) {
      ids.push_back(*segment.token);
      continue;
    }
    pieces.clear();
    pieces.push_back({std::move(segment.text), segment.at_input_start});
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
    for (const PreToken& piece : pieces) model_->tokenize(piece.text, ids);
  }
  if (add_special_tokens) post_processor_.apply(ids);
  return ids;
}

bool Tokenizer::keeps_in_decode(TokenId id, bool skip_special_tokens) const {
  if (id < 0 || static_cast<std::size_t>(id) >= token_strings_.size()) return false;
  const auto index = static_cast<std::size_t>(id);
  return token_present_[index] && !(skip_special_tokens && token_special_[index]);
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const TokenId id : ids) {
    if (keeps_in_decode(id, skip_special_tokens)) tokens.push_back(token_strings_[static_cast<std::size_t>(id)]);
  }
  std::string text;
  if (decoder_) {
    decoder_->decode_chain(tokens);
    for (const std::string& token : tokens) text += token;
    return text;
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) text += ' ';
    text += tokens[i];
  }
  return text;
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
  if (!keeps_in_decode(id, false)) return std::nullopt;
  return token_strings_[static_cast<std::size_t>(id)];
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  if (const std::optional<TokenId> id = added_->find(token)) return id;
  return model_->token_to_id(token);
}

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && static_cast<std::size_t>(id) < token_special_.size() && token_special_[static_cast<std::size_t>(id)];
}

}  // namespace pagedllm::tokenizer
