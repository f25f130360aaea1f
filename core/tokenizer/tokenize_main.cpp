// pagedllm-tokenize: encode stdin to a JSON array of ids, or decode one.
//
//   pagedllm-tokenize --tokenizer PATH [--decode] [--no-special] [--parse-special]
//
// PATH is a tokenizer.json or a model directory. Encoding reads the text
// exactly as given (a trailing newline is part of it) and prints the ids;
// --no-special leaves out BOS/EOS, --parse-special recognises special tokens
// written in the text (HF's default). Decoding reads a JSON array of ids and
// prints the text with no newline added; --no-special skips special tokens.
// Exit status: 0 ok, 2 bad usage or bad input (files, stdin), 1 other errors.

#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_error.h"

namespace {

using pagedllm::tokenizer::TokenId;
using pagedllm::tokenizer::Tokenizer;
using pagedllm::tokenizer::TokenizerError;

constexpr std::string_view kUsage =
    "usage: pagedllm-tokenize --tokenizer PATH [--decode] [--no-special] [--parse-special]\n"
    "  reads text on stdin and prints its token ids as a JSON array;\n"
    "  with --decode reads a JSON array of ids and prints the text.\n"
    "  PATH: a tokenizer.json file or a model directory.\n";

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string tokenizer_path;
  bool decode = false;
  bool no_special = false;
  bool parse_special = false;
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
    } else if (argument == "--help" || argument == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else {
      throw UsageError(fmt::format("unknown argument '{}'", argument));
    }
  }
  if (options.tokenizer_path.empty()) throw UsageError("--tokenizer PATH is required");
  return options;
}

std::vector<TokenId> parse_ids(const std::string& text) {
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw TokenizerError(fmt::format("stdin: expected a JSON array of token ids: {}", error.what()));
  }
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

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse_arguments(argc, argv);
    const Tokenizer tokenizer = Tokenizer::from_path(options.tokenizer_path);
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
