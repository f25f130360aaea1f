#include "core/tokenizer/decoder.h"

#include <optional>

#include <fmt/format.h>

#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/normalizer.h"
#include "core/tokenizer/regex.h"
#include "core/tokenizer/tokenizer_error.h"
#include "core/tokenizer/utf8.h"

namespace pagedllm::tokenizer {
namespace {

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

// Each token maps back to bytes when every char is in the table (else its raw
// UTF-8 is kept, e.g. added tokens with spaces); the joined bytes are then
// decoded lossily, like Rust's String::from_utf8_lossy.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    std::string token_bytes;
    for (const std::string& token : tokens) {
      token_bytes.clear();
      bool all_mapped = true;
      for (std::size_t pos = 0; pos < token.size();) {
        std::size_t length = 0;
        const std::optional<unsigned char> byte = byte_level::decode_char(utf8::decode_at(token, pos, &length));
        if (!byte) {
          all_mapped = false;
          break;
        }
        token_bytes.push_back(static_cast<char>(*byte));
        pos += length;
      }
      bytes += all_mapped ? token_bytes : token;
    }
    tokens.assign(1, utf8::lossy(bytes));
  }
};

enum class MetaspacePrepend { kAdds, kNever };

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, MetaspacePrepend prepend)
      : replacement_(std::move(replacement)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      // HF drops every replacement char of the first token when a prefix is
      // prepended on encode, not only the leading one.
      const bool drop = i == 0 && prepend_ == MetaspacePrepend::kAdds;
      std::string out;
      const std::string& token = tokens[i];
      for (std::size_t pos = 0; pos < token.size();) {
        if (token.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!drop) out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(token[pos++]);
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  MetaspacePrepend prepend_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(const TextPattern& pattern, std::string content, const std::string& where)
      : literal_(pattern.text), content_(std::move(content)) {
    if (pattern.is_regex) regex_.emplace(pattern.text, where);
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      std::vector<RegexMatch> matches;
      if (regex_) {
        matches = regex_->find_all(token);
      } else if (!literal_.empty()) {
        for (std::size_t pos = token.find(literal_); pos != std::string::npos;
             pos = token.find(literal_, pos + literal_.size())) {
          matches.push_back({pos, pos + literal_.size()});
        }
      }
      if (matches.empty()) continue;
      std::string out;
      std::size_t last = 0;
      for (const RegexMatch& match : matches) {
        out.append(token, last, match.begin - last);
        out += content_;
        last = match.end;
      }
      out.append(token, last);
      token = std::move(out);
    }
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
  std::string content_;
};

std::optional<unsigned char> parse_byte_token(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int high = hex(token[3]);
  const int low = hex(token[4]);
  if (high < 0 || low < 0) return std::nullopt;
  return static_cast<unsigned char>(high * 16 + low);
}

// Runs of <0xNN> tokens become their UTF-8 text; an invalid run becomes one
// U+FFFD per byte (HF's rule, not the lossy one).
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (!utf8::find_invalid(pending)) {
        out.push_back(pending);
      } else {
        for (std::size_t i = 0; i < pending.size(); ++i) out.emplace_back(utf8::kReplacementCharacter);
      }
      pending.clear();
    };
    for (std::string& token : tokens) {
      if (const std::optional<unsigned char> byte = parse_byte_token(token)) {
        pending.push_back(static_cast<char>(*byte));
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    tokens.assign(1, std::move(joined));
  }
};

// Strips up to `start` leading and `stop` trailing `content` chars per token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, std::size_t start, std::size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      std::vector<std::size_t> offsets;  // byte offset of each char
      std::vector<char32_t> chars;
      for (std::size_t pos = 0; pos < token.size();) {
        std::size_t length = 0;
        offsets.push_back(pos);
        chars.push_back(utf8::decode_at(token, pos, &length));
        pos += length;
      }
      std::size_t start_cut = 0;
      while (start_cut < std::min(start_, chars.size()) && chars[start_cut] == content_) ++start_cut;
      std::size_t stop_cut = chars.size();
      for (std::size_t i = 0; i < stop_ && stop_cut > start_cut && chars[stop_cut - 1] == content_; ++i) --stop_cut;
      const std::size_t begin = start_cut < chars.size() ? offsets[start_cut] : token.size();
      const std::size_t end = stop_cut < chars.size() ? offsets[stop_cut] : token.size();
      token = token.substr(begin, end - begin);
    }
  }

 private:
  char32_t content_;
  std::size_t start_;
  std::size_t stop_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const Json& value, const JsonPlace& place) {
  const std::string type = component_type(value, place);
  if (type == "Sequence") {
    const Json& list = require_field(value, "decoders", place);
    if (!list.is_array()) (place / "decoders").fail("expected an array");
    std::vector<std::unique_ptr<Decoder>> steps;
    for (std::size_t i = 0; i < list.size(); ++i) steps.push_back(make_decoder(list[i], (place / "decoders")[i]));
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    std::string replacement = require_string(value, "replacement", place);
    if (replacement.empty()) (place / "replacement").fail("must be one character");
    bool adds_prefix = optional_bool(value, "add_prefix_space", true, place);
    if (const std::optional<std::string> scheme = optional_string(value, "prepend_scheme", place)) {
      adds_prefix = *scheme != "never";
    }
    return std::make_unique<MetaspaceDecoder>(std::move(replacement),
                                              adds_prefix ? MetaspacePrepend::kAdds : MetaspacePrepend::kNever);
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(parse_text_pattern(require_field(value, "pattern", place), place / "pattern"),
                                            require_string(value, "content", place), place.describe());
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const std::string content = require_string(value, "content", place);
    std::size_t length = 0;
    if (content.empty() || (utf8::decode_at(content, 0, &length), length != content.size())) {
      (place / "content").fail("must be exactly one character");
    }
    const long long start = optional_integer(value, "start", 0, place);
    const long long stop = optional_integer(value, "stop", 0, place);
    if (start < 0 || stop < 0) place.fail("start and stop must be non-negative");
    return std::make_unique<StripDecoder>(utf8::decode_at(content, 0, &length), static_cast<std::size_t>(start),
                                          static_cast<std::size_t>(stop));
  }
  (place / "type").fail(fmt::format(
      "unsupported decoder '{}' (supported: Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip)",
      type));
}

}  // namespace pagedllm::tokenizer
