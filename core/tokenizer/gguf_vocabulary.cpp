#include "core/tokenizer/gguf_vocabulary.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/tokenizer/tokenizer_error.h"
#include "core/tokenizer/utf8.h"
#include "pagedllm/sdk/cpp/gguf.hpp"

namespace pagedllm::tokenizer {
namespace {

using pllm::gguf::Value;
using pllm::gguf::ValueType;

// llama.cpp's token types (llama_token_type).
enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

class Metadata {
 public:
  explicit Metadata(const pllm::gguf::File& file) : file_(file) {}

  [[noreturn]] void fail(std::string_view key, const std::string& message) const {
    throw TokenizerError(fmt::format("{}: metadata '{}' {}", file_.path().string(), key, message));
  }
  // Marks the key read.
  const Value* find(std::string_view key) const {
    read_.emplace(key);
    return file_.find_metadata(key);
  }

  // Every tokenizer.* key is read above or cannot change how text becomes ids (kHarmlessTokenizerKeys);
  // any other — a normalizer setting, a key llama.cpp adds later — is refused rather than ignored.
  void refuse_unread_tokenizer_keys(bool spm) const {
    for (const auto& [key, value] : file_.metadata()) {
      if (key.rfind("tokenizer.", 0) != 0 || read_.count(key) || harmless(key, spm)) continue;
      fail(key, "is not a tokenizer setting pagedllm reads, and it could change the token ids: refused rather than "
                "ignored");
    }
  }

  std::string string(std::string_view key, const std::string& fallback) const {
    const Value* v = find(key);
    if (!v) return fallback;
    if (v->type != ValueType::STRING) fail(key, fmt::format("must be a string, got {}", value_type_name(v->type)));
    return v->s;
  }
  std::optional<bool> flag(std::string_view key) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != ValueType::BOOL) fail(key, fmt::format("must be a bool, got {}", value_type_name(v->type)));
    return v->i != 0;
  }
  // A token id inside [0, vocab_size); nullopt when absent.
  std::optional<int64_t> token_id(std::string_view key, std::size_t vocab_size) const {
    const Value* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_integer()) fail(key, fmt::format("must be an integer, got {}", value_type_name(v->type)));
    const bool in_range = v->is_signed() ? v->i >= 0 && uint64_t(v->i) < vocab_size : v->u < vocab_size;
    if (!in_range) {
      fail(key, fmt::format("= {} is outside the vocabulary [0, {})", v->is_signed() ? v->i : int64_t(v->u),
                            vocab_size));
    }
    return v->is_signed() ? v->i : int64_t(v->u);
  }
  // An array of `element` values; nullptr when absent.
  const std::vector<Value>* array(std::string_view key, ValueType element, bool required) const {
    const Value* v = find(key);
    if (!v) {
      if (required) fail(key, "is required");
      return nullptr;
    }
    if (v->type != ValueType::ARRAY || (!v->array.empty() && v->element_type != element)) {
      fail(key, fmt::format("must be an array of {}", value_type_name(element)));
    }
    return &v->array;
  }

 private:
  // Keys llama.cpp writes that do not change a gpt2 (byte-level BPE) or llama (SentencePiece) file's ids:
  // the ids of tokens the tokenizer never inserts by itself (separator, classifier, mask, end of turn or
  // message, fill-in-the-middle pieces), pair-input and other tokenizer models' settings llama.cpp reads
  // only for them (add_sep_token; remove_extra_whitespaces and precompiled_charsmap are the UGM / T5
  // normalizer's, token_type_count BERT's, rwkv.world RWKV's), named chat templates besides the default
  // (tokenizer.chat_template.NAME), and an embedded tokenizer.json llama.cpp does not read either.
  static bool harmless(std::string_view key, bool spm) {
    static constexpr std::string_view kKeys[] = {
        "tokenizer.ggml.add_sep_token",         "tokenizer.ggml.cls_token_id",
        "tokenizer.ggml.eom_token_id",          "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.fim_mid_token_id",      "tokenizer.ggml.fim_pad_token_id",
        "tokenizer.ggml.fim_pre_token_id",      "tokenizer.ggml.fim_rep_token_id",
        "tokenizer.ggml.fim_sep_token_id",      "tokenizer.ggml.fim_suf_token_id",
        "tokenizer.ggml.mask_token_id",         "tokenizer.ggml.middle_token_id",
        "tokenizer.ggml.precompiled_charsmap",  "tokenizer.ggml.prefix_token_id",
        "tokenizer.ggml.remove_extra_whitespaces", "tokenizer.ggml.seperator_token_id",
        "tokenizer.ggml.suffix_token_id",       "tokenizer.ggml.token_type_count",
        "tokenizer.huggingface.json",           "tokenizer.rwkv.world",
    };
    if (std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys)) return true;
    // llama.cpp applies add_space_prefix to SentencePiece vocabularies only (read above for them).
    if (!spm && key == "tokenizer.ggml.add_space_prefix") return true;
    return key.rfind("tokenizer.chat_template.", 0) == 0;
  }

  const pllm::gguf::File& file_;
  mutable std::set<std::string, std::less<>> read_;
};

// HF's pre-tokenizer for llama.cpp's tokenizer.ggml.pre names (llama-vocab.cpp's
// regexes per pre type; the names sharing a regex are listed together).
Json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

struct PreTokenizerChoice {
  Json pre_tokenizer;
  bool ignore_merges = false;
  bool add_bos = false;  // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
};

PreTokenizerChoice gpt2_pre_tokenizer(const std::string& pre, const Metadata& m) {
  static const char* const kLlama3[] = {"llama3", "llama-v3", "llama-bpe", "falcon3"};
  static const char* const kStarcoder[] = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone",
                                           "minerva-7b"};
  static const char* const kGpt2[] = {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
                                      "jina-v2-de", "a.x-4.0"};
  const auto one_of = [&](const auto& names) {
    return std::find(std::begin(names), std::end(names), pre) != std::end(names);
  };
  if (one_of(kLlama3)) {
    // llama3's regex as Meta's tokenizer.json writes it (llama.cpp spells the
    // case-insensitive contractions out: the same matches).
    static const char* const kLlama3Regex =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
        R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";
    const Json split = {
        {"type", "Split"},
        {"pattern", {{"Regex", kLlama3Regex}}},
        {"behavior", "Isolated"},
        {"invert", false}};
    return {{{"type", "Sequence"}, {"pretokenizers", Json::array({split, byte_level(false)})}}, true, true};
  }
  if (one_of(kStarcoder)) {
    const Json digits = {{"type", "Digits"}, {"individual_digits", true}};
    return {{{"type", "Sequence"}, {"pretokenizers", Json::array({digits, byte_level(true)})}}, false, false};
  }
  if (one_of(kGpt2)) return {byte_level(true), false, false};
  m.fail("tokenizer.ggml.pre", fmt::format("is \"{}\"; supported: gpt-2 (and phi-2, jina-*), llama3 (llama-bpe, "
                                           "llama-v3, falcon3), smollm (starcoder, refact, command-r, codeshell, "
                                           "exaone, minerva-7b)",
                                           pre));
}

// SentencePiece BPE has no merges in the file: every split of a token into two
// tokens is a merge, ranked by the joined token's score, highest first (ties by
// id), which is the order llama.cpp's SPM tokenizer merges bigrams in.
Json merges_from_scores(const std::vector<std::string>& tokens, const std::vector<float>& scores) {
  std::unordered_map<std::string_view, std::size_t> ids;
  for (std::size_t id = 0; id < tokens.size(); ++id) ids.emplace(tokens[id], id);
  struct Merge {
    float score;
    std::size_t joined;
    std::size_t split;  // byte offset of the split in the joined token
  };
  std::vector<Merge> merges;
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    const std::string_view token = tokens[id];
    std::size_t at = 0, length = 0;
    while (at < token.size()) {
      utf8::decode_at(token, at, &length);
      at += std::max<std::size_t>(length, 1);
      if (at >= token.size()) break;
      if (ids.count(token.substr(0, at)) && ids.count(token.substr(at))) merges.push_back({scores[id], id, at});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    return a.score != b.score ? a.score > b.score : a.joined < b.joined;
  });
  Json list = Json::array();
  for (const Merge& merge : merges) {
    const std::string& token = tokens[merge.joined];
    list.push_back(Json::array({token.substr(0, merge.split), token.substr(merge.split)}));
  }
  return list;
}

Json added_token(std::size_t id, const std::string& content, bool special) {
  return {{"id", id},           {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},    {"normalized", false}, {"special", special}};
}

}  // namespace

GgufTokenizerFiles gguf_tokenizer_files(const std::string& gguf_path) {
  std::unique_ptr<pllm::gguf::File> file;
  try {
    file = std::make_unique<pllm::gguf::File>(gguf_path);
  } catch (const pllm::Error& e) {
    throw TokenizerError(e.what());
  }
  const Metadata m(*file);
  const std::string model = m.string("tokenizer.ggml.model", "");
  if (model.empty()) m.fail("tokenizer.ggml.model", "is required (the file carries no tokenizer)");
  if (model != "gpt2" && model != "llama") {
    m.fail("tokenizer.ggml.model", fmt::format("is \"{}\"; supported: gpt2 (byte-level BPE), llama (SentencePiece "
                                               "BPE)", model));
  }
  const bool spm = model == "llama";

  const std::vector<Value>& token_values = *m.array("tokenizer.ggml.tokens", ValueType::STRING, true);
  std::vector<std::string> tokens;
  tokens.reserve(token_values.size());
  for (const Value& v : token_values) tokens.push_back(v.s);
  if (tokens.empty()) m.fail("tokenizer.ggml.tokens", "is empty");
  std::vector<int64_t> types(tokens.size(), kNormal);
  if (const std::vector<Value>* values = m.array("tokenizer.ggml.token_type", ValueType::INT32, false)) {
    if (values->size() != tokens.size()) {
      m.fail("tokenizer.ggml.token_type", fmt::format("has {} entries for {} tokens", values->size(), tokens.size()));
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) types[i] = (*values)[i].i;
  }

  Json vocab = Json::object();
  for (std::size_t id = 0; id < tokens.size(); ++id) vocab[tokens[id]] = id;
  Json added = Json::array();
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    if (types[id] == kControl || types[id] == kUnknown) added.push_back(added_token(id, tokens[id], true));
    if (types[id] == kUserDefined) added.push_back(added_token(id, tokens[id], false));
  }

  const std::size_t n = tokens.size();
  const std::optional<int64_t> bos = m.token_id("tokenizer.ggml.bos_token_id", n);
  const std::optional<int64_t> eos = m.token_id("tokenizer.ggml.eos_token_id", n);
  const std::optional<int64_t> unk = m.token_id("tokenizer.ggml.unknown_token_id", n);
  const std::optional<int64_t> pad = m.token_id("tokenizer.ggml.padding_token_id", n);

  Json root = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added}};
  Json bpe = {{"type", "BPE"}, {"dropout", nullptr}, {"vocab", vocab}};
  bool default_add_bos = false;
  if (spm) {
    const std::vector<Value>* score_values = m.array("tokenizer.ggml.scores", ValueType::FLOAT32, true);
    if (score_values->size() != n) {
      m.fail("tokenizer.ggml.scores", fmt::format("has {} entries for {} tokens", score_values->size(), n));
    }
    std::vector<float> scores;
    for (const Value& v : *score_values) scores.push_back(float(v.f));
    const bool add_space_prefix = m.flag("tokenizer.ggml.add_space_prefix").value_or(true);
    Json replace_space = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}};
    root["normalizer"] = add_space_prefix
                             ? Json{{"type", "Sequence"},
                                    {"normalizers",
                                     Json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}}, replace_space})}}
                             : replace_space;
    root["pre_tokenizer"] = nullptr;
    bpe["merges"] = merges_from_scores(tokens, scores);
    bpe["byte_fallback"] = true;
    bpe["fuse_unk"] = true;
    if (unk) bpe["unk_token"] = tokens[std::size_t(*unk)];
    Json decoders = Json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                 {{"type", "ByteFallback"}},
                                 {{"type", "Fuse"}}});
    if (add_space_prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    root["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    default_add_bos = true;
  } else {
    const std::vector<Value>& merge_values = *m.array("tokenizer.ggml.merges", ValueType::STRING, true);
    Json merges = Json::array();
    for (const Value& v : merge_values) merges.push_back(v.s);
    const PreTokenizerChoice pre = gpt2_pre_tokenizer(m.string("tokenizer.ggml.pre", "gpt-2"), m);
    root["normalizer"] = nullptr;
    root["pre_tokenizer"] = pre.pre_tokenizer;
    bpe["merges"] = std::move(merges);
    bpe["ignore_merges"] = pre.ignore_merges;
    root["decoder"] = byte_level(true);
    default_add_bos = pre.add_bos;
  }
  root["model"] = std::move(bpe);

  const bool add_bos = m.flag("tokenizer.ggml.add_bos_token").value_or(default_add_bos);
  const bool add_eos = m.flag("tokenizer.ggml.add_eos_token").value_or(false);
  Json single = Json::array();
  Json special = Json::object();
  const auto special_piece = [&](const char* key, std::optional<int64_t> id) {
    if (!id) m.fail(key, "is required when the tokenizer adds that token");
    const std::string& content = tokens[std::size_t(*id)];
    special[content] = {{"id", content}, {"ids", Json::array({*id})}, {"tokens", Json::array({content})}};
    single.push_back({{"SpecialToken", {{"id", content}, {"type_id", 0}}}});
  };
  if (add_bos) special_piece("tokenizer.ggml.bos_token_id", bos);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (add_eos) special_piece("tokenizer.ggml.eos_token_id", eos);
  root["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", special}};
  (void)m.find("tokenizer.chat_template");  // read below
  m.refuse_unread_tokenizer_keys(spm);

  GgufTokenizerFiles files;
  files.tokenizer_json = std::move(root);
  TokenizerConfig& config = files.config;
  config.source = gguf_path;
  const auto content = [&](std::optional<int64_t> id) -> std::optional<std::string> {
    if (!id) return std::nullopt;
    return tokens[std::size_t(*id)];
  };
  config.bos_token = content(bos);
  config.eos_token = content(eos);
  config.pad_token = content(pad);
  config.unk_token = content(unk);
  config.add_bos_token = add_bos;
  config.add_eos_token = add_eos;
  const std::string chat_template = m.string("tokenizer.chat_template", "");
  if (!chat_template.empty()) {
    config.chat_template = chat_template;
    config.chat_template_source = gguf_path + " (tokenizer.chat_template)";
  }
  return files;
}

}  // namespace pagedllm::tokenizer
