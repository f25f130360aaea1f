// tokenizer.json (and tokenizer_config.json) as the engine loads a model's
// tokenizer: the input up to its first NUL byte is written to tokenizer.json,
// the rest (when there is a NUL) to tokenizer_config.json, and
// Tokenizer::from_model_dir reads them; an accepted tokenizer then encodes a
// few texts and decodes every id, whole and streaming.
// Properties: a bad file is a TokenizerError; an accepted tokenizer encodes
// valid UTF-8 to ids in its vocabulary.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/tokenizer/incremental_detokenizer.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_error.h"
#include "tools/fuzz/fuzz_support.h"

using namespace pagedllm::tokenizer;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path dir = [] {
    auto d = pagedllm::fuzz::scratch_dir() / "tokenizer";
    std::filesystem::create_directories(d);
    return d;
  }();
  const auto [tokenizer_json, config_json] = pagedllm::fuzz::split_at_nul(data, size);
  pagedllm::fuzz::write_file(dir / "tokenizer.json", tokenizer_json);
  std::error_code ignored;
  std::filesystem::remove(dir / "tokenizer_config.json", ignored);
  if (config_json) pagedllm::fuzz::write_file(dir / "tokenizer_config.json", *config_json);

  try {
    const Tokenizer tokenizer = Tokenizer::from_model_dir(dir.string());
    const auto vocab = static_cast<TokenId>(tokenizer.vocab_size());
    for (const char* text : {"", "Hello, world!", " def fib(n):\n\treturn n", "héllo 世界 🙂 <|endoftext|> <s>", "  \n\n  x"}) {
      for (const bool special : {false, true}) {
        for (const TokenId id : tokenizer.encode(text, special, special)) {
          if (id < 0 || id >= vocab) __builtin_trap();
        }
      }
    }
    std::vector<TokenId> ids;
    for (TokenId id = -1; id <= vocab && id < 512; ++id) ids.push_back(id);
    (void)tokenizer.decode(ids);
    (void)tokenizer.decode(ids, true);
    IncrementalDetokenizer detokenizer(tokenizer, false);
    for (const TokenId id : ids) {
      if (id >= 0 && id < vocab) (void)detokenizer.push(id);
    }
    (void)detokenizer.finish();
  } catch (const TokenizerError&) {
  }
  return 0;
}
