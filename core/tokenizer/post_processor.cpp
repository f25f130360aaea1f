#include "core/tokenizer/post_processor.h"

#include <fmt/format.h>

#include "core/tokenizer/tokenizer_error.h"

namespace pagedllm::tokenizer {
namespace {

PostProcessor from_template(const Json& value, const JsonPlace& place) {
  const Json& special_tokens = require_field(value, "special_tokens", place);
  if (!special_tokens.is_object()) (place / "special_tokens").fail("expected an object");
  const Json& single = require_field(value, "single", place);
  if (!single.is_array()) (place / "single").fail("expected an array of template pieces");

  std::vector<TokenId> prefix;
  std::vector<TokenId> suffix;
  bool seen_sequence = false;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const JsonPlace piece_place = (place / "single")[i];
    const Json& piece = single[i];
    if (piece.is_object() && piece.contains("Sequence")) {
      const std::string id = require_string(piece["Sequence"], "id", piece_place / "Sequence");
      if (id != "A") piece_place.fail(fmt::format("the single template may only hold sequence A, not '{}'", id));
      if (seen_sequence) piece_place.fail("sequence A appears twice in the single template");
      seen_sequence = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken")) {
      piece_place.fail(R"(expected {"Sequence": ...} or {"SpecialToken": ...})");
    }
    const std::string name = require_string(piece["SpecialToken"], "id", piece_place / "SpecialToken");
    const auto it = special_tokens.find(name);
    if (it == special_tokens.end()) {
      piece_place.fail(fmt::format("special token '{}' is not listed in special_tokens", name));
    }
    const Json& ids = require_field(*it, "ids", place / "special_tokens" / name);
    if (!ids.is_array()) (place / "special_tokens" / name / "ids").fail("expected an array of ids");
    for (std::size_t k = 0; k < ids.size(); ++k) {
      const TokenId id = require_token_id(ids[k], (place / "special_tokens" / name / "ids")[k]);
      (seen_sequence ? suffix : prefix).push_back(id);
    }
  }
  if (!seen_sequence) (place / "single").fail("the single template has no $A sequence");
  return PostProcessor(std::move(prefix), std::move(suffix));
}

TokenId token_pair_id(const Json& value, std::string_view key, const JsonPlace& place) {
  const Json& pair = require_field(value, key, place);
  if (!pair.is_array() || pair.size() != 2) (place / key).fail(R"(expected ["token", id])");
  return require_token_id(pair[1], (place / key)[1]);
}

}  // namespace

PostProcessor PostProcessor::from_json(const Json& value, const JsonPlace& place) {
  if (value.is_null()) return PostProcessor({}, {});
  const std::string type = component_type(value, place);
  if (type == "TemplateProcessing") return from_template(value, place);
  if (type == "ByteLevel") return PostProcessor({}, {});
  if (type == "BertProcessing") {
    return PostProcessor({token_pair_id(value, "cls", place)}, {token_pair_id(value, "sep", place)});
  }
  if (type == "RobertaProcessing") {
    return PostProcessor({token_pair_id(value, "cls", place)}, {token_pair_id(value, "sep", place)});
  }
  if (type == "Sequence") {
    const Json& list = require_field(value, "processors", place);
    if (!list.is_array()) (place / "processors").fail("expected an array");
    std::vector<TokenId> prefix;
    std::vector<TokenId> suffix;
    for (std::size_t i = 0; i < list.size(); ++i) {
      // Each processor wraps the result of the previous ones.
      const PostProcessor step = from_json(list[i], (place / "processors")[i]);
      prefix.insert(prefix.begin(), step.prefix().begin(), step.prefix().end());
      suffix.insert(suffix.end(), step.suffix().begin(), step.suffix().end());
    }
    return PostProcessor(std::move(prefix), std::move(suffix));
  }
  (place / "type").fail(fmt::format(
      "unsupported post_processor '{}' (supported: TemplateProcessing, ByteLevel, Sequence, BertProcessing, "
      "RobertaProcessing)",
      type));
}

void PostProcessor::apply(std::vector<TokenId>& ids) const {
  ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
}

}  // namespace pagedllm::tokenizer
