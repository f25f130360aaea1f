#include "core/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/normalizer.h"
#include "core/tokenizer/tokenizer_error.h"

namespace pagedllm::tokenizer {
namespace {

// Applies `split` (a piece -> its ranges) to every piece.
template <typename SplitFn>
void split_each(std::vector<PreToken>& pieces, SplitFn&& split) {
  std::vector<PreToken> out;
  out.reserve(pieces.size() * 2);
  for (PreToken& piece : pieces) {
    for (const TextRange& range : split(piece.text)) {
      if (range.end == range.begin) continue;
      out.push_back({piece.text.substr(range.begin, range.end - range.begin),
                     piece.at_input_start && range.begin == 0});
    }
  }
  pieces = std::move(out);
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& step : steps_) step->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_each(pieces, [&](const std::string& text) {
      return split_by_matches(text.size(), regex_.find_all(text), behavior_, invert_);
    });
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_.emplace(kGpt2SplitPattern, where);
  }
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_) {
      for (PreToken& piece : pieces) {
        if (!piece.text.starts_with(' ')) piece.text.insert(0, " ");
      }
    }
    if (regex_) {
      split_each(pieces, [&](const std::string& text) {
        return split_by_matches(text.size(), regex_->find_all(text), SplitBehavior::kIsolated, false);
      });
    }
    for (PreToken& piece : pieces) {
      std::string mapped;
      mapped.reserve(piece.text.size() * 2);
      byte_level::append_encoded(mapped, piece.text);
      piece.text = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

enum class PrependScheme { kFirst, kAlways, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (PreToken& piece : pieces) {
      std::string replaced;
      replaced.reserve(piece.text.size() + replacement_.size());
      for (const char c : piece.text) {
        if (c == ' ') {
          replaced += replacement_;
        } else {
          replaced.push_back(c);
        }
      }
      bool prepend = false;
      switch (scheme_) {
        case PrependScheme::kAlways:
          prepend = true;
          break;
        case PrependScheme::kFirst:
          prepend = piece.at_input_start;
          break;
        case PrependScheme::kNever:
          break;
      }
      if (prepend && !replaced.starts_with(replacement_)) replaced.insert(0, replacement_);
      piece.text = std::move(replaced);
    }
    if (!split_) return;
    split_each(pieces, [&](const std::string& text) {
      std::vector<RegexMatch> matches;
      for (std::size_t pos = text.find(replacement_); pos != std::string::npos;
           pos = text.find(replacement_, pos + replacement_.size())) {
        matches.push_back({pos, pos + replacement_.size()});
      }
      return split_by_matches(text.size(), matches, SplitBehavior::kMergedWithNext, false);
    });
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

SplitBehavior parse_behavior(const std::string& name, const JsonPlace& place) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  place.fail(fmt::format("unknown split behavior '{}' (expected Removed, Isolated, "
                         "MergedWithPrevious, MergedWithNext or Contiguous)",
                         name));
}

PrependScheme parse_prepend_scheme(const Json& value, const JsonPlace& place) {
  const std::optional<std::string> scheme = optional_string(value, "prepend_scheme", place);
  if (!scheme) {
    return optional_bool(value, "add_prefix_space", true, place) ? PrependScheme::kAlways
                                                                  : PrependScheme::kNever;
  }
  if (*scheme == "first") return PrependScheme::kFirst;
  if (*scheme == "always") return PrependScheme::kAlways;
  if (*scheme == "never") return PrependScheme::kNever;
  (place / "prepend_scheme").fail(fmt::format("unknown prepend_scheme '{}' (expected first, always or never)", *scheme));
}

}  // namespace

std::vector<TextRange> split_by_matches(std::size_t length, const std::vector<RegexMatch>& matches,
                                        SplitBehavior behavior, bool invert) {
  struct Part {
    TextRange range;
    bool is_match;
  };
  std::vector<Part> parts;
  if (length == 0) {
    parts.push_back({{0, 0}, false});
  } else {
    std::size_t previous = 0;
    for (const RegexMatch& match : matches) {
      if (previous != match.begin) parts.push_back({{previous, match.begin}, false});
      parts.push_back({{match.begin, match.end}, true});
      previous = match.end;
    }
    if (previous != length) parts.push_back({{previous, length}, false});
  }
  if (invert) {
    for (Part& part : parts) part.is_match = !part.is_match;
  }

  std::vector<TextRange> out;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Part& part : parts) out.push_back(part.range);
      break;
    case SplitBehavior::kRemoved:
      for (const Part& part : parts) {
        if (!part.is_match) out.push_back(part.range);
      }
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Part& part : parts) {
        if (part.is_match == previous_match && !out.empty()) {
          out.back().end = part.range.end;
        } else {
          out.push_back(part.range);
        }
        previous_match = part.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Part& part : parts) {
        if (part.is_match && !previous_match && !out.empty()) {
          out.back().end = part.range.end;
        } else {
          out.push_back(part.range);
        }
        previous_match = part.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->range.begin;
        } else {
          out.push_back(it->range);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  std::erase_if(out, [](const TextRange& range) { return range.begin == range.end; });
  return out;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& value, const JsonPlace& place) {
  const std::string type = component_type(value, place);
  if (type == "Sequence") {
    const Json& list = require_field(value, "pretokenizers", place);
    if (!list.is_array()) (place / "pretokenizers").fail("expected an array");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (std::size_t i = 0; i < list.size(); ++i) {
      steps.push_back(make_pre_tokenizer(list[i], (place / "pretokenizers")[i]));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(optional_bool(value, "add_prefix_space", true, place),
                                                   optional_bool(value, "use_regex", true, place),
                                                   place.describe());
  }
  if (type == "Split") {
    const TextPattern pattern = parse_text_pattern(require_field(value, "pattern", place), place / "pattern");
    Regex regex(pattern.text, (place / "pattern").describe(),
                pattern.is_regex ? Regex::Syntax::kPattern : Regex::Syntax::kLiteral);
    return std::make_unique<SplitPreTokenizer>(
        std::move(regex), parse_behavior(require_string(value, "behavior", place), place / "behavior"),
        optional_bool(value, "invert", false, place));
  }
  if (type == "Metaspace") {
    std::string replacement = require_string(value, "replacement", place);
    if (replacement.empty()) (place / "replacement").fail("must be one character");
    return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), parse_prepend_scheme(value, place),
                                                   optional_bool(value, "split", true, place));
  }
  if (type == "Digits") {
    const bool individual = optional_bool(value, "individual_digits", false, place);
    return std::make_unique<SplitPreTokenizer>(Regex(R"(\p{N})", place.describe()),
                                               individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                                               false);
  }
  (place / "type").fail(fmt::format(
      "unsupported pre_tokenizer '{}' (supported: Sequence, ByteLevel, Split, Metaspace, Digits)", type));
}

}  // namespace pagedllm::tokenizer
