#include "core/tokenizer/tokenizer_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "core/tokenizer/tokenizer_error.h"

namespace pagedllm::tokenizer {
namespace {

std::optional<std::string> token_field(const Json& value, std::string_view key, const JsonPlace& place) {
  const auto it = value.find(key);
  if (it == value.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return require_string(*it, "content", place / key);
  (place / key).fail("expected a string or an object with 'content'");
}

std::optional<bool> optional_flag(const Json& value, std::string_view key, const JsonPlace& place) {
  const auto it = value.find(key);
  if (it == value.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) (place / key).fail(fmt::format("expected true or false, got {}", it->type_name()));
  return it->get<bool>();
}

}  // namespace

TokenizerConfig TokenizerConfig::from_json(const Json& value, const std::string& source) {
  const JsonPlace place(source, "");
  if (!value.is_object()) place.fail("expected a JSON object");
  TokenizerConfig config;
  config.source = source;
  config.tokenizer_class = optional_string(value, "tokenizer_class", place).value_or("");
  config.bos_token = token_field(value, "bos_token", place);
  config.eos_token = token_field(value, "eos_token", place);
  config.pad_token = token_field(value, "pad_token", place);
  config.unk_token = token_field(value, "unk_token", place);
  config.add_bos_token = optional_flag(value, "add_bos_token", place);
  config.add_eos_token = optional_flag(value, "add_eos_token", place);

  const auto templates = value.find("chat_template");
  if (templates != value.end() && !templates->is_null()) {
    config.chat_template_source = source;
    if (templates->is_string()) {
      config.chat_template = templates->get<std::string>();
    } else if (templates->is_array()) {
      for (std::size_t i = 0; i < templates->size(); ++i) {
        const Json& entry = (*templates)[i];
        const JsonPlace at = (place / "chat_template")[i];
        if (require_string(entry, "name", at) == "default") config.chat_template = require_string(entry, "template", at);
      }
    } else {
      (place / "chat_template").fail("expected a string or a list of {name, template}");
    }
  }
  return config;
}

TokenizerConfig TokenizerConfig::from_file(const std::string& path) {
  TokenizerConfig config = from_json(read_json_file(path), path);
  const std::filesystem::path jinja = std::filesystem::path(path).parent_path() / "chat_template.jinja";
  if (std::filesystem::exists(jinja)) {
    std::ifstream file(jinja, std::ios::binary);
    std::ostringstream contents;
    contents << file.rdbuf();
    if (!file) throw TokenizerError(fmt::format("{}: cannot read file", jinja.string()));
    config.chat_template = contents.str();
    config.chat_template_source = jinja.string();
  }
  return config;
}

std::optional<bool> TokenizerConfig::special_tokens_template_default_bos() const {
  std::string_view name = tokenizer_class;
  if (name.ends_with("Fast")) name.remove_suffix(4);
  if (name == "LlamaTokenizer" || name == "CodeLlamaTokenizer" || name == "GemmaTokenizer" ||
      name == "CohereTokenizer") {
    return true;
  }
  if (name == "GPTNeoXTokenizer") return false;
  return std::nullopt;
}

}  // namespace pagedllm::tokenizer
