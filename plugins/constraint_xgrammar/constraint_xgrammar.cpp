// constraint_xgrammar: structured output (JSON object, JSON schema, regex,
// choice) through xgrammar's C++ core (https://github.com/mlc-ai/xgrammar,
// built from its PyPI sdist by cmake/PagedLLMXgrammar.cmake): the grammar
// engine vLLM, SGLang, TensorRT-LLM and MLC use. The plugin keeps xgrammar's
// objects behind the SDK's opaque handles and turns its exceptions into
// statuses (the SDK wrapper's guard), so none crosses the boundary.

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <regex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagedllm/sdk.hpp"

namespace pagedllm::constraint_xgrammar {
namespace {

struct Grammar {
  xgrammar::CompiledGrammar compiled;
};

struct Matcher {
  xgrammar::GrammarMatcher matcher;
  int32_t accepted = 0;  // tokens xgrammar holds (its rollback history)
  // Stop tokens accepted after the one that terminated the matcher (a request
  // that ignores EOS): xgrammar does not take them, so rollback() undoes them here first.
  int32_t stop_tokens_past_end = 0;
};

[[noreturn]] void bad_constraint(const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, message);
}

// An EBNF string literal of `text` (xgrammar's escapes: \" \\ and \u00NN for control bytes; not \xNN,
// whose digits xgrammar reads on as far as they go, so "\n2" written \x0a2 would be U+00A2).
std::string ebnf_literal(const std::string& text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte == 0x7f) {
      out += "\\u00";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// root ::= "a" | "b" | ... from a JSON array of non-empty, distinct strings.
std::string choice_grammar(const char* text) {
  nlohmann::json choices;
  try {
    choices = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    bad_constraint(std::string("the choices are not valid JSON: ") + e.what());
  }
  if (!choices.is_array() || choices.empty()) bad_constraint("the choices must be a non-empty list of strings");
  std::string rule = "root ::= ";
  for (std::size_t i = 0; i < choices.size(); ++i) {
    if (!choices[i].is_string() || choices[i].get_ref<const std::string&>().empty()) {
      bad_constraint("choice " + std::to_string(i) + " is not a non-empty string");
    }
    rule += (i ? " | " : "") + ebnf_literal(choices[i].get<std::string>());
  }
  return rule + "\n";
}

// xgrammar 0.2.8 builds a string with minLength/maxLength (and no pattern or format) from a
// character class that lets raw control characters through (U+0000-U+001F other than CR and LF),
// which JSON forbids unescaped: the output would not parse. Such a string is given a pattern of
// printable ASCII other than the quote and the backslash, repeated within the bounds, instead: a
// negated class in xgrammar's regexes matches single bytes, so it would split UTF-8 characters and
// count bytes, not characters. The price: such a string never holds non-ASCII characters or escapes
// (docs/structured-output.md). Instance data under const, enum, default and examples is left alone.
void bound_string_lengths_by_pattern(nlohmann::json& schema) {
  if (schema.is_array()) {
    for (auto& item : schema) bound_string_lengths_by_pattern(item);
    return;
  }
  if (!schema.is_object()) return;
  const auto type = schema.find("type");
  const bool string = type != schema.end() && type->is_string() && *type == "string";
  const auto min = schema.find("minLength");
  const auto max = schema.find("maxLength");
  if (string && (min != schema.end() || max != schema.end()) && !schema.contains("pattern") &&
      !schema.contains("format")) {
    const auto bound = [](nlohmann::json::const_iterator it, nlohmann::json::const_iterator end) -> std::string {
      return it != end && it->is_number_integer() && it->get<int64_t>() >= 0 ? std::to_string(it->get<int64_t>()) : "";
    };
    const std::string lo = bound(min, schema.end());
    const std::string hi = bound(max, schema.end());
    schema["pattern"] = std::string(R"(^[ !#-\[\]-~]{)") + (lo.empty() ? "0" : lo) + "," + hi + "}$";
  }
  for (auto& [key, value] : schema.items()) {
    if (key != "const" && key != "enum" && key != "default" && key != "examples") {
      bound_string_lengths_by_pattern(value);
    }
  }
}

// The schema xgrammar is given: `text` parsed, with bound_string_lengths_by_pattern applied.
std::string prepared_schema(const std::string& text) {
  nlohmann::json schema = nlohmann::json::parse(text, nullptr, false);
  if (schema.is_discarded()) bad_constraint("the JSON schema is not valid JSON");
  bound_string_lengths_by_pattern(schema);
  return schema.dump();
}

class XgrammarConstraint : public pllm::ConstraintPlugin {
 public:
  struct Options {
    int32_t compile_threads = 1;  // xgrammar's own threads for one compilation
    bool any_whitespace = true;   // JSON: any whitespace between tokens (false: xgrammar's compact form)
    int32_t max_whitespace = 16;  // JSON: longest whitespace run (bounds runaway newlines); 0 = unbounded
    static Options parse(pllm::OptionReader& r) {
      Options o;
      o.compile_threads = r.get_in_range<int32_t>("compile_threads", 1, 1, 64);
      o.any_whitespace = r.get<bool>("any_whitespace", true);
      o.max_whitespace = r.get_in_range<int32_t>("max_whitespace", 16, 0, 1 << 20);
      return o;
    }
  };

  XgrammarConstraint(const Options& options, const pllm_constraint_create_args& args) : options_(options) {
    if (args.vocab_size <= 0 || args.num_tokens < 0 || args.num_tokens > args.vocab_size ||
        (args.num_tokens > 0 && (!args.token_strings || !args.token_lengths))) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "constraint_xgrammar: bad vocabulary (vocab_size " +
                                                         std::to_string(args.vocab_size) + ", num_tokens " +
                                                         std::to_string(args.num_tokens) + ")");
    }
    std::vector<std::string> vocab(std::size_t(args.num_tokens));
    for (int32_t i = 0; i < args.num_tokens; ++i) {
      if (args.token_lengths[i] < 0 || (args.token_lengths[i] > 0 && !args.token_strings[i])) {
        throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "constraint_xgrammar: bad token string " + std::to_string(i));
      }
      vocab[std::size_t(i)].assign(args.token_strings[i] ? args.token_strings[i] : "",
                                   std::size_t(args.token_lengths[i]));
    }
    xgrammar::VocabType type = xgrammar::VocabType::RAW;
    switch (args.vocab_type) {
      case PLLM_VOCAB_RAW: type = xgrammar::VocabType::RAW; break;
      case PLLM_VOCAB_BYTE_FALLBACK: type = xgrammar::VocabType::BYTE_FALLBACK; break;
      case PLLM_VOCAB_BYTE_LEVEL: type = xgrammar::VocabType::BYTE_LEVEL; break;
      case PLLM_VOCAB_TYPE_FORCE_32BIT:
      default:
        throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                          "constraint_xgrammar: unknown vocab_type " + std::to_string(int(args.vocab_type)));
    }
    const auto ids = [&](const int32_t* p, int32_t n, const char* what) {
      if (n < 0 || (n > 0 && !p)) throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, std::string("bad ") + what);
      std::vector<int32_t> out(p, p + n);
      for (const int32_t id : out) {
        if (id < 0 || id >= args.vocab_size) {
          throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, std::string("constraint_xgrammar: ") + what + " id " +
                                                             std::to_string(id) + " is outside the vocabulary");
        }
      }
      return out;
    };
    stop_tokens_ = ids(args.stop_token_ids, args.num_stop_tokens, "stop token");
    if (stop_tokens_.empty()) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "constraint_xgrammar: the model has no stop token, so a "
                                                     "constrained output could never end");
    }
    special_tokens_ = ids(args.special_token_ids, args.num_special_tokens, "special token");
    vocab_size_ = args.vocab_size;
    tokenizer_ = std::make_unique<xgrammar::TokenizerInfo>(vocab, type, args.vocab_size, stop_tokens_, false);
    compiler_ = std::make_unique<xgrammar::GrammarCompiler>(*tokenizer_, options.compile_threads, true);
  }

  // Thread-safe (pllm_constraint_api): xgrammar's compiler guards its cache.
  pllm_constraint_grammar* compile(const pllm_constraint_spec& spec) {
    auto grammar = std::make_unique<Grammar>(Grammar{compile_spec(spec)});
    require_some_output(grammar->compiled);
    return reinterpret_cast<pllm_constraint_grammar*>(grammar.release());
  }

  void release_grammar(pllm_constraint_grammar* grammar) { delete reinterpret_cast<Grammar*>(grammar); }

  pllm_constraint_matcher* create_matcher(const pllm_constraint_grammar* grammar) {
    const auto& g = *reinterpret_cast<const Grammar*>(grammar);
    auto matcher = std::make_unique<Matcher>(Matcher{xgrammar::GrammarMatcher(g.compiled, stop_tokens_)});
    return reinterpret_cast<pllm_constraint_matcher*>(matcher.release());
  }

  void destroy_matcher(pllm_constraint_matcher* matcher) { delete reinterpret_cast<Matcher*>(matcher); }

  void fill_bitmask(std::span<pllm_constraint_matcher* const> matchers, uint32_t* bitmask, int32_t words) {
    if (int64_t(words) != (int64_t(vocab_size_) + 31) / 32) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "constraint_xgrammar: fill_bitmask: " + std::to_string(words) +
                                                         " words a row, the vocabulary needs " +
                                                         std::to_string((int64_t(vocab_size_) + 31) / 32));
    }
    int64_t shape[2] = {int64_t(matchers.size()), words};
    DLTensor tensor = bitmask_tensor(bitmask, shape);
    for (std::size_t r = 0; r < matchers.size(); ++r) {
      if (!matchers[r]) throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "constraint_xgrammar: null matcher");
      uint32_t* row = bitmask + int64_t(r) * words;
      Matcher& m = *reinterpret_cast<Matcher*>(matchers[r]);
      if (m.matcher.IsTerminated()) {
        std::fill(row, row + words, 0u);
        for (const int32_t id : stop_tokens_) row[id >> 5] |= 1u << (id & 31);
        continue;
      }
      fill_row(m.matcher, tensor, int(r), row);
    }
  }

  bool accept_token(pllm_constraint_matcher* matcher, int32_t token) {
    if (token < 0 || token >= vocab_size_) return false;
    if (std::find(special_tokens_.begin(), special_tokens_.end(), token) != special_tokens_.end()) return false;
    Matcher& m = *reinterpret_cast<Matcher*>(matcher);
    // A terminated matcher (its stop token accepted) takes further stop tokens (a request that ignores EOS).
    if (m.matcher.IsTerminated()) {
      if (std::find(stop_tokens_.begin(), stop_tokens_.end(), token) == stop_tokens_.end()) return false;
      ++m.stop_tokens_past_end;
      return true;
    }
    if (!m.matcher.AcceptToken(token)) return false;
    ++m.accepted;
    return true;
  }

  // xgrammar keeps every accepted token's state, so any number up to those accepted rolls back.
  void rollback(pllm_constraint_matcher* matcher, int32_t num_tokens) {
    Matcher& m = *reinterpret_cast<Matcher*>(matcher);
    if (num_tokens < 0 || num_tokens > m.accepted + m.stop_tokens_past_end) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "constraint_xgrammar: rollback of " + std::to_string(num_tokens) +
                                                         " tokens; the matcher has accepted " +
                                                         std::to_string(m.accepted + m.stop_tokens_past_end));
    }
    const int32_t past_end = std::min(num_tokens, m.stop_tokens_past_end);
    m.stop_tokens_past_end -= past_end;
    m.accepted -= num_tokens - past_end;
    if (num_tokens > past_end) m.matcher.Rollback(num_tokens - past_end);
  }

  bool is_terminated(const pllm_constraint_matcher* matcher) {
    return reinterpret_cast<const Matcher*>(matcher)->matcher.IsTerminated();
  }

 private:
  // xgrammar's view of shape[0] host rows of shape[1] int32 bitmask words at `data`.
  static DLTensor bitmask_tensor(uint32_t* data, int64_t (&shape)[2]) {
    DLTensor tensor{};
    tensor.data = data;
    tensor.device = DLDevice{kDLCPU, 0};
    tensor.ndim = 2;
    tensor.dtype = DLDataType{kDLInt, 32, 1};
    tensor.shape = shape;
    return tensor;
  }

  // Row `index` of `tensor` (at `row`): the tokens the matcher allows next; a special token is never
  // constrained output, even where its text would match.
  void fill_row(xgrammar::GrammarMatcher& matcher, DLTensor& tensor, int index, uint32_t* row) const {
    matcher.FillNextTokenBitmask(&tensor, index);
    for (const int32_t id : special_tokens_) row[id >> 5] &= ~(1u << (id & 31));
  }

  // The JSON schemas inside a structural tag, prepared as a JSON_SCHEMA constraint's are, and each checked
  // on its own for admitting some output: inside the tag its first token is the tag's fixed text, so the
  // whole grammar's first step cannot tell. `begin` is the enclosing tag's opening text, for the message.
  void prepare_tag_schemas(nlohmann::json& node, const std::string& begin) const {
    if (node.is_array()) {
      for (nlohmann::json& item : node) prepare_tag_schemas(item, begin);
      return;
    }
    if (!node.is_object()) return;
    const auto type = node.find("type");
    const auto schema = node.find("json_schema");
    if (type != node.end() && *type == "json_schema" && schema != node.end() && schema->is_object()) {
      const std::string prepared = prepared_schema(schema->dump());
      try {
        const std::optional<int> max_ws = options_.max_whitespace > 0 ? std::optional<int>(options_.max_whitespace)
                                                                       : std::nullopt;
        require_some_output(compiler_->CompileJSONSchema(prepared, options_.any_whitespace, std::nullopt,
                                                         std::nullopt, false, max_ws));
      } catch (const pllm::Error& e) {
        bad_constraint("the JSON schema after \"" + begin + "\": " + e.what());
      } catch (const std::exception& e) {
        bad_constraint("the JSON schema after \"" + begin + "\": " + first_line(e.what()));
      }
      *schema = nlohmann::json::parse(prepared);
      return;
    }
    const auto tag_begin = node.find("begin");
    const std::string inner_begin = tag_begin != node.end() && tag_begin->is_string() ? tag_begin->get<std::string>()
                                                                                       : begin;
    for (auto& [key, value] : node.items()) prepare_tag_schemas(value, inner_begin);
  }

  // A grammar whose first step allows no token, not even its end, admits no output at all (a schema whose
  // $ref refers only to itself, say): the client's error, refused when it is compiled, at submit, rather
  // than a request whose first row has every token masked.
  void require_some_output(const xgrammar::CompiledGrammar& compiled) const {
    xgrammar::GrammarMatcher probe(compiled, stop_tokens_);
    const int32_t words = (vocab_size_ + 31) / 32;
    std::vector<uint32_t> row(std::size_t(words), 0u);
    int64_t shape[2] = {1, words};
    DLTensor tensor = bitmask_tensor(row.data(), shape);
    fill_row(probe, tensor, 0, row.data());
    if (std::all_of(row.begin(), row.end(), [](uint32_t word) { return word == 0; })) {
      bad_constraint("no output can match it (no token may start one: a $ref that refers only to itself, say)");
    }
  }

  xgrammar::CompiledGrammar compile_spec(const pllm_constraint_spec& spec) {
    const std::string text = spec.text ? spec.text : "";
    const std::optional<int> max_ws = options_.max_whitespace > 0 ? std::optional<int>(options_.max_whitespace)
                                                                   : std::nullopt;
    try {
      switch (spec.type) {
        case PLLM_CONSTRAINT_JSON_OBJECT:
          // Any JSON object: the schema {"type": "object"} (xgrammar's built-in grammar allows any JSON value).
          return compiler_->CompileJSONSchema(R"({"type": "object"})", options_.any_whitespace, std::nullopt,
                                              std::nullopt, false, max_ws);
        case PLLM_CONSTRAINT_JSON_SCHEMA:
          if (text.empty()) bad_constraint("the JSON schema is empty");
          return compiler_->CompileJSONSchema(prepared_schema(text), options_.any_whitespace, std::nullopt,
                                              std::nullopt, false, max_ws);
        case PLLM_CONSTRAINT_REGEX:
          if (text.empty()) bad_constraint("the regular expression is empty");
          return compiler_->CompileRegex(text);
        case PLLM_CONSTRAINT_CHOICE:
          return compiler_->CompileGrammar(choice_grammar(spec.text ? spec.text : ""));
        case PLLM_CONSTRAINT_STRUCTURAL_TAG: {
          nlohmann::json tag = nlohmann::json::parse(text, nullptr, false);
          if (tag.is_discarded()) bad_constraint("the structural tag is not valid JSON");
          prepare_tag_schemas(tag, "");
          return compiler_->CompileStructuralTag(tag.dump());
        }
        case PLLM_CONSTRAINT_INVALID:
        case PLLM_CONSTRAINT_TYPE_FORCE_32BIT:
          break;
      }
    } catch (const pllm::Error&) {
      throw;
    } catch (const std::exception& e) {
      // xgrammar reports a bad schema or regex by exception: the client's error, with its message.
      bad_constraint(first_line(e.what()));
    }
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "constraint_xgrammar: unknown constraint type " +
                                                  std::to_string(int(spec.type)));
  }

  // xgrammar's messages start with its log prefix "[hh:mm:ss] file.cc:line: " (not the client's
  // business) and may carry a C++ stack trace after the first line.
  static std::string first_line(const std::string& message) {
    static const std::regex log_prefix(R"(^\[[0-9:]+\] [^ ]+:[0-9]+: )");
    const std::string line = std::regex_replace(message.substr(0, message.find('\n')), log_prefix, "");
    return line.size() > 500 ? line.substr(0, 500) + "..." : line;
  }

  Options options_;
  int32_t vocab_size_ = 0;
  std::vector<int32_t> stop_tokens_;
  std::vector<int32_t> special_tokens_;
  std::unique_ptr<xgrammar::TokenizerInfo> tokenizer_;
  std::unique_ptr<xgrammar::GrammarCompiler> compiler_;
};

}  // namespace
}  // namespace pagedllm::constraint_xgrammar

PAGEDLLM_PLUGIN(pagedllm::constraint_xgrammar::XgrammarConstraint, "constraint_xgrammar", "0.1.0",
                "Structured output (JSON object, JSON schema, regex, choice) through xgrammar 0.2.8")
