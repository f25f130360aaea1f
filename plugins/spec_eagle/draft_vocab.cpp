#include "draft_vocab.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "pagedllm/sdk.hpp"

namespace pagedllm::spec_eagle {

std::vector<int32_t> load_draft_vocab(const std::filesystem::path& draft_dir, int64_t size, int64_t vocab_size) {
  if (size < 0 || size > vocab_size) {
    throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: draft_vocab_size = " + std::to_string(size) +
                                                       " must be in [0, vocab_size = " + std::to_string(vocab_size) +
                                                       "] (0: the whole vocabulary)");
  }
  if (size == 0 || size == vocab_size) return {};
  const std::filesystem::path path = draft_dir / "draft_vocab.json";
  const auto fail = [&](pllm_status status, const std::string& what) {
    throw pllm::Error(status, "spec_eagle: " + path.string() + ": " + what);
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail(PLLM_ERROR_NOT_FOUND, "cannot be read, and draft_vocab_size = " + std::to_string(size) +
                                   " needs it (tools/train/draft_vocab.py writes it; 0 drafts over the whole vocabulary)");
  }
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json file = nlohmann::json::parse(text.str(), nullptr, false);
  if (file.is_discarded() || !file.is_object()) fail(PLLM_ERROR_INVALID_CONFIG, "is not a JSON object");
  const auto ids = file.find("token_ids");
  if (ids == file.end() || !ids->is_array()) fail(PLLM_ERROR_INVALID_CONFIG, "has no 'token_ids' array");
  if (int64_t(ids->size()) < size) {
    fail(PLLM_ERROR_INVALID_CONFIG, "ranks " + std::to_string(ids->size()) + " tokens, fewer than draft_vocab_size = " +
                                        std::to_string(size));
  }
  std::vector<int32_t> vocab;
  vocab.reserve(static_cast<std::size_t>(size));
  std::vector<bool> seen(static_cast<std::size_t>(vocab_size), false);
  for (int64_t i = 0; i < size; ++i) {
    const nlohmann::json& id = (*ids)[static_cast<std::size_t>(i)];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
      fail(PLLM_ERROR_INVALID_CONFIG, "token_ids[" + std::to_string(i) + "] = " + id.dump() +
                                          " is not a token id in [0, " + std::to_string(vocab_size) + ")");
    }
    const auto token = static_cast<int32_t>(id.get<int64_t>());
    if (seen[static_cast<std::size_t>(token)]) {
      fail(PLLM_ERROR_INVALID_CONFIG, "token_ids[" + std::to_string(i) + "] = " + std::to_string(token) + " is repeated");
    }
    seen[static_cast<std::size_t>(token)] = true;
    vocab.push_back(token);
  }
  std::sort(vocab.begin(), vocab.end());
  return vocab;
}

void check_draft_vocab(const std::vector<int32_t>& draft_vocab, int64_t vocab_size) {
  if (int64_t(draft_vocab.size()) > vocab_size) {
    throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: the draft vocabulary has " +
                                                       std::to_string(draft_vocab.size()) + " tokens, more than the " +
                                                       std::to_string(vocab_size) + " of the vocabulary");
  }
  for (const int32_t token : draft_vocab) {
    if (token < 0 || token >= vocab_size) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: draft vocabulary token " + std::to_string(token) +
                                                         " is not in [0, " + std::to_string(vocab_size) + ")");
    }
  }
}

float* DraftVocabLogits::scatter(const std::vector<int32_t>& draft_vocab, const float* compact, int64_t rows,
                                 int64_t vocab_size) {
  const auto needed = static_cast<std::size_t>(rows * vocab_size);
  if (full_.size() < needed) full_.resize(needed, -std::numeric_limits<float>::infinity());
  const auto width = static_cast<int64_t>(draft_vocab.size());
  for (int64_t r = 0; r < rows; ++r) {
    float* row = full_.data() + r * vocab_size;
    const float* from = compact + r * width;
    for (int64_t i = 0; i < width; ++i) row[draft_vocab[static_cast<std::size_t>(i)]] = from[i];
  }
  return full_.data();
}

}  // namespace pagedllm::spec_eagle
