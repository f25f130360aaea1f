#pragma once
// The draft vocabulary: the tokens an EAGLE head may propose (FR-Spec,
// "Frequency-Ranked Speculative Sampling"). A draft step's lm_head over the
// whole vocabulary streams the same [vocab, hidden] matrix as a target step,
// which on a small target costs about as much as the target's decoder layers.
// Restricted to the N most frequent tokens of the training corpus, the draft
// computes N logits and leaves every other token at -inf (q = 0). That is
// still lossless: verification samples from p, and the rejection sampler's
// residual max(0, p - q) covers the tokens the draft can never propose; only
// the acceptance rate can drop, when the target's next token is a rare one.
//
// `draft_vocab.json` in the draft directory (tools/train/draft_vocab.py):
//   {"token_ids": [...every token id, most frequent first...], "counts": [...], ...}

#include <cstdint>
#include <filesystem>
#include <vector>

namespace pagedllm::spec_eagle {

// The `size` most frequent token ids of draft_dir/draft_vocab.json, ascending
// (the order the head lays out its lm_head rows in); empty for size 0 or
// size == vocab_size: the whole vocabulary. Throws pllm::Error naming the file
// for a missing or malformed file, an id outside [0, vocab_size), a repeated
// id, or a size the file's ranking does not cover.
std::vector<int32_t> load_draft_vocab(const std::filesystem::path& draft_dir, int64_t size, int64_t vocab_size);

// Throws pllm::Error(PLLM_ERROR_INVALID_ARGUMENT) for a draft vocabulary
// longer than the vocabulary or with an id outside [0, vocab_size): what each
// head checks before it gathers lm_head rows by those ids.
void check_draft_vocab(const std::vector<int32_t>& draft_vocab, int64_t vocab_size);

// The [rows, vocab] host logits a head returns with a draft vocabulary: row r
// holds the compact [rows, N] logits at the draft vocabulary's ids and -inf
// everywhere else. The -inf entries are written once, when the buffer grows,
// and never again (the ids are the same every call, and core only reads a
// draft's logits), so a call costs N stores per row instead of a vocab-wide fill.
class DraftVocabLogits {
 public:
  // The full rows, valid until the next call.
  float* scatter(const std::vector<int32_t>& draft_vocab, const float* compact, int64_t rows, int64_t vocab_size);

 private:
  std::vector<float> full_;
};

}  // namespace pagedllm::spec_eagle
