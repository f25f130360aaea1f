// pagedllm-tokenize: encode stdin to a JSON array of ids, or decode one.
//
//   pagedllm-tokenize --tokenizer PATH [--decode] [--no-special] [--parse-special] [--jsonl]
//
// PATH is a tokenizer.json or a model directory. Encoding reads the text
// exactly as given (a trailing newline is part of it) and prints the ids;
// --no-special leaves out BOS/EOS, --parse-special recognises special tokens
// written in the text (HF's default). Decoding reads a JSON array of ids and
// prints the text with no newline added; --no-special skips special tokens.
// --jsonl: many inputs, one JSON value per stdin line (a string to encode, or an
// array of ids to decode), one JSON line out for each (the ids, or the text as a
// JSON string): what the large-corpus comparison against HF feeds it.
//
//   pagedllm-tokenize --render-template FILE
//
// Runs a Jinja chat template (a .jinja file, as the model ships it) on each stdin
// line, a JSON object of the template's variables (messages, tools,
// add_generation_prompt, bos_token, ...), and prints one JSON line each:
// {"text": the rendered prompt} or {"error": why the template failed}. It shows
// what the server will send the model, and is how the tests compare the engine
// with transformers' apply_chat_template.
// Exit status: 0 ok, 2 bad usage or bad input (files, stdin), 1 other errors.

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/tokenizer/jinja/template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_error.h"

namespace {

using pagedllm::tokenizer::TokenId;
using pagedllm::tokenizer::Tokenizer;
using pagedllm::tokenizer::TokenizerError;

constexpr std::string_view kUsage =
    "usage: pagedllm-tokenize --tokenizer PATH [--decode] [--no-special] [--parse-special] [--jsonl]\n"
    "       pagedllm-tokenize --render-template FILE\n"
    "  reads text on stdin and prints its token ids as a JSON array;\n"
    "  with --decode reads a JSON array of ids and prints the text.\n"
    "  --jsonl: one JSON string (or, with --decode, array of ids) per line in, one JSON line out each.\n"
    "  PATH: a tokenizer.json file, a model directory or a GGUF file.\n"
    "  --render-template: renders the Jinja template FILE once per stdin line (a JSON object of its\n"
    "  variables), printing {\"text\": ...} or {\"error\": ...} per line.\n";

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string tokenizer_path;
  bool decode = false;
  bool no_special = false;
  bool parse_special = false;
  bool jsonl = false;
  std::string template_path;
};

Options parse_arguments(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    if (argument == "--tokenizer") {
      if (i + 1 >= argc) throw UsageError("--tokenizer needs a PATH");
      options.tokenizer_path = argv[++i];
    } else if (argument == "--decode") {
      options.decode = true;
    } else if (argument == "--no-special") {
      options.no_special = true;
    } else if (argument == "--parse-special") {
      options.parse_special = true;
    } else if (argument == "--render-template") {
      if (i + 1 >= argc) throw UsageError("--render-template needs a FILE");
      options.template_path = argv[++i];
    } else if (argument == "--jsonl") {
      options.jsonl = true;
    } else if (argument == "--help" || argument == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else {
      throw UsageError(fmt::format("unknown argument '{}'", argument));
    }
  }
  if (options.tokenizer_path.empty() && options.template_path.empty()) {
    throw UsageError("--tokenizer PATH or --render-template FILE is required");
  }
  return options;
}

nlohmann::json parse_json(const std::string& text, std::string_view expected) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {  // parse_error, or out_of_range for a number JSON cannot hold
    throw TokenizerError(fmt::format("stdin: expected {}: {}", expected, error.what()));
  }
}

std::vector<TokenId> parse_ids(const std::string& text) {
  const nlohmann::json value = parse_json(text, "a JSON array of token ids");
  if (!value.is_array()) throw TokenizerError("stdin: expected a JSON array of token ids");
  std::vector<TokenId> ids;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const nlohmann::json& id = value[i];
    if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > INT32_MAX) {
      throw TokenizerError(fmt::format("stdin: element {} is not a token id (a non-negative integer): {}", i, id.dump()));
    }
    ids.push_back(id.get<TokenId>());
  }
  return ids;
}

// --jsonl: each line of stdin is one input, each output line one result.
void run_jsonl(const Tokenizer& tokenizer, const Options& options) {
  std::string line;
  for (std::size_t number = 1; std::getline(std::cin, line); ++number) {
    if (options.decode) {
      std::cout << nlohmann::json(tokenizer.decode(parse_ids(line), options.no_special)).dump() << '\n';
      continue;
    }
    const nlohmann::json value = parse_json(line, "a JSON string per line");
    if (!value.is_string()) throw TokenizerError(fmt::format("stdin line {}: expected a JSON string", number));
    const std::vector<TokenId> ids =
        tokenizer.encode(value.get<std::string>(), !options.no_special, options.parse_special);
    std::cout << nlohmann::json(ids).dump() << '\n';
  }
}

void run_template(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw TokenizerError(fmt::format("{}: cannot read the template", path));
  std::stringstream source;
  source << file.rdbuf();
  std::optional<pagedllm::jinja::Template> chat_template;
  std::string parse_error;
  try {
    chat_template.emplace(source.str());
  } catch (const pagedllm::jinja::TemplateError& error) {
    parse_error = error.what();
  }
  std::string line;
  for (std::size_t number = 1; std::getline(std::cin, line); ++number) {
    const auto variables = nlohmann::ordered_json::parse(line, nullptr, false);
    if (variables.is_discarded()) throw TokenizerError(fmt::format("stdin line {}: not JSON", number));
    if (!variables.is_object()) throw TokenizerError(fmt::format("stdin line {}: expected a JSON object", number));
    nlohmann::json result;
    if (!chat_template) {
      result["error"] = parse_error;
    } else {
      try {
        result["text"] = chat_template->render(pagedllm::jinja::Value::from_json(variables));
      } catch (const pagedllm::jinja::TemplateError& error) {
        result["error"] = error.what();
      }
    }
    std::cout << result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse_arguments(argc, argv);
    if (!options.template_path.empty()) {
      run_template(options.template_path);
      std::cout.flush();
      return std::cout ? 0 : 1;
    }
    const Tokenizer tokenizer = Tokenizer::from_path(options.tokenizer_path);
    if (options.jsonl) {
      run_jsonl(tokenizer, options);
      std::cout.flush();
      return std::cout ? 0 : 1;
    }
    const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (options.decode) {
      std::cout << tokenizer.decode(parse_ids(input), options.no_special);
    } else {
      const std::vector<TokenId> ids = tokenizer.encode(input, !options.no_special, options.parse_special);
      std::cout << nlohmann::json(ids).dump() << '\n';
    }
    std::cout.flush();
    return std::cout ? 0 : 1;
  } catch (const UsageError& error) {
    std::cerr << "pagedllm-tokenize: " << error.what() << '\n' << kUsage;
    return 2;
  } catch (const TokenizerError& error) {
    std::cerr << "pagedllm-tokenize: " << error.what() << '\n';
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "pagedllm-tokenize: internal error: " << error.what() << '\n';
    return 1;
  }
}
