// The EAGLE draft-vocabulary file as spec_eagle loads it: the input is
// written to draft_vocab.json in a scratch directory and load_draft_vocab
// reads the N most frequent ids for a few N (1, 64, 1024, the whole
// 8192-token vocabulary of the embedded model, and one past it); an accepted
// list then passes the heads' check and scatters compact logits.
// Properties: a bad file or size is a pllm::Error; an accepted list is N
// distinct ids in [0, vocab), ascending.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "pagedllm/sdk.hpp"
#include "draft_vocab.h"
#include "tools/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path dir = [] {
    auto d = pagedllm::fuzz::scratch_dir() / "draft";
    std::filesystem::create_directories(d);
    return d;
  }();
  constexpr std::int64_t kVocab = 8192;
  pagedllm::fuzz::write_file(dir / "draft_vocab.json", std::string_view(reinterpret_cast<const char*>(data), size));
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{64}, std::int64_t{1024}, kVocab - 1, kVocab, kVocab + 1}) {
    try {
      const std::vector<std::int32_t> ids = pagedllm::spec_eagle::load_draft_vocab(dir, n, kVocab);
      if (n == kVocab) {
        if (!ids.empty()) __builtin_trap();  // the whole vocabulary
        continue;
      }
      if (static_cast<std::int64_t>(ids.size()) != n) __builtin_trap();
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= kVocab || (i > 0 && ids[i - 1] >= ids[i])) __builtin_trap();
      }
      pagedllm::spec_eagle::check_draft_vocab(ids, kVocab);
      std::vector<float> compact(ids.size() * 2, 1.0f);
      pagedllm::spec_eagle::DraftVocabLogits logits;
      const float* full = logits.scatter(ids, compact.data(), 2, kVocab);
      if (full[kVocab + ids.back()] != 1.0f) __builtin_trap();
    } catch (const pllm::Error&) {
    }
  }
  return 0;
}
