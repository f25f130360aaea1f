// example_prompt_lookup: a speculator without weights. It drafts by prompt
// lookup (n-gram matching, as in Saxena 2023 and vLLM's "ngram" method): find
// the latest earlier place in the sequence where its last n tokens occurred,
// and propose the token that followed them there. Code and documents repeat
// themselves, so this often guesses right; when it guesses wrong, verify()
// rejects the draft, so the output is exactly the plain engine's anyway
// (greedy: token for token; sampled: in distribution).
//
// How it fits sdk/speculator.h. Core drives the draft like EAGLE's: after each
// target step it calls draft() over every position the target just computed
// (row t: position p = positions[t], token_ids[t] = the token at p + 1, its KV
// slot slot_mapping[t]), then K - 1 more times over the drafted tokens (chain
// rows). This speculator reads no features; it only remembers each row's token
// by its KV slot, in an array that mirrors the paged cache, so a sequence's
// history is read back through its block table like attention reads K/V:
//   the token at position q + 1 = tokens_[slot of position q].
// Slots are reused once a sequence ends, so a sequence only ever reads slots
// its own rows wrote (or, for a prefix-cached block, rows with the same tokens).
// A slot this speculator never saw (a swapped-in block, a step decoded without
// drafts) reads as -1 or as stale: a worse guess, never a wrong output.
//
// Draft logits: 0 at the proposed token and -inf elsewhere (the draft
// distribution q is then one-hot), or all 0 (uniform: no opinion) when no
// n-gram matches. verify() is the SDK's lossless rejection sampler.
//
// Core requires one draft KV layer (num_draft_layers >= 1); this draft never
// runs attention, so that layer stays unused.
//
// Options:
//   max_ngram (default 3): the longest suffix tried first;
//   min_ngram (default 1): the shortest suffix tried before giving up.
// The speculative section's `draft` directory is not read (there are no weights).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <pagedllm/sdk.hpp>
#include <pagedllm/sdk/cpp/model_batch_check.hpp>
#include <pagedllm/sdk/cpp/rejection_sampler.hpp>
#include <string>
#include <vector>

namespace {

// The one place this file builds a pllm_tensor: a CPU f32 [rows, cols] view.
// Whoever fills a tensor sets struct_size (SDK 2.0: tensors can grow in later minors).
pllm_tensor cpu_f32_matrix(float* data, int64_t rows, int64_t cols) {
  pllm_tensor t{};
  t.struct_size = sizeof(pllm_tensor);
  t.data = data;
  t.dtype = PLLM_DTYPE_F32;
  t.device = {PLLM_DEVICE_CPU, 0};
  t.ndim = 2;
  t.shape[0] = rows;
  t.shape[1] = cols;
  t.strides[0] = cols;
  t.strides[1] = 1;
  return t;
}

class PromptLookup : public pllm::SpeculatorPlugin {
 public:
  struct Options {
    int max_ngram = 3;
    int min_ngram = 1;
    static Options parse(pllm::OptionReader& reader) {
      Options o;
      o.max_ngram = reader.get_in_range<int>("max_ngram", 3, 1, 64);
      o.min_ngram = reader.get_in_range<int>("min_ngram", 1, 1, 64);
      if (o.min_ngram > o.max_ngram) {
        throw pllm::Error(PLLM_ERROR_INVALID_CONFIG, "min_ngram (" + std::to_string(o.min_ngram) +
                                                         ") is larger than max_ngram (" + std::to_string(o.max_ngram) +
                                                         ")");
      }
      return o;
    }
  };

  PromptLookup(const Options& options, const pllm_speculator_create_args& args)
      : options_(options), target_(target_info(args)) {
    if (args.device.type != PLLM_DEVICE_CPU) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "example_prompt_lookup runs on the CPU only");
    }
  }

  pllm_speculator_info info() {
    pllm_speculator_info info{};
    info.struct_size = sizeof(info);
    info.num_draft_layers = 1;  // core's minimum; never used (see above)
    info.num_kv_heads = target_.num_kv_heads;
    info.head_dim = target_.head_dim;
    info.hidden_size = target_.hidden_size;
    return info;
  }

  void draft(const pllm_draft_args& args, pllm_draft_output& out) {
    if (!args.batch) throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "example_prompt_lookup: null batch");
    const pllm_batch& b = *args.batch;
    if (!PLLM_HAS_FIELD(pllm_draft_output, &out, logits) || !out.logits) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "example_prompt_lookup: draft output without a logits descriptor");
    }
    // Token ids, positions and logits rows (the checks every model makes), then what this draft reads besides.
    // args.features (the target's hidden rows) is not read: prompt lookup needs only the tokens.
    pllm::check_batch("example_prompt_lookup", b, pllm::require(args.attention, "example_prompt_lookup: attention"),
                      target_.vocab_size);
    if (b.num_tokens > 0 && (!b.slot_mapping || !b.query_start_loc || !b.block_tables || b.num_seqs <= 0)) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT,
                        "example_prompt_lookup: null slot_mapping, query_start_loc or block_tables");
    }
    for (int32_t t = 0; t < b.num_tokens; ++t) {
      if (b.slot_mapping[t] >= kMaxSlots) {
        throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "example_prompt_lookup: slot_mapping[" + std::to_string(t) +
                                                           "] = " + std::to_string(b.slot_mapping[t]) +
                                                           " is implausible");
      }
    }

    // 1. Remember every row's token at its position's slot.
    for (int32_t t = 0; t < b.num_tokens; ++t) {
      const int64_t slot = b.slot_mapping[t];
      if (slot < 0) continue;
      if (std::size_t(slot) >= tokens_.size()) tokens_.resize(std::size_t(slot) + 1, -1);
      tokens_[std::size_t(slot)] = b.token_ids[t];
    }

    // 2. For each row core wants logits for, look its sequence's n-grams up.
    const int64_t vocab = target_.vocab_size;
    logits_.assign(std::size_t(int64_t(b.num_logits) * vocab), 0.0f);
    for (int32_t i = 0; i < b.num_logits; ++i) {
      const int32_t row = b.logits_indices[i];
      const std::vector<int32_t> history = history_of(b, sequence_of(b, row), row);
      const int32_t proposal = lookup(history);
      if (proposal < 0) continue;  // no match: uniform logits, no opinion
      float* logits = &logits_[std::size_t(int64_t(i) * vocab)];
      std::fill(logits, logits + vocab, -std::numeric_limits<float>::infinity());
      logits[proposal] = 0.0f;
    }
    // The caller owns the descriptor; the logits stay in our buffer until the next draft().
    *out.logits = cpu_f32_matrix(logits_.data(), b.num_logits, vocab);
  }

  // Lossless verification: the SDK's rejection sampler (pllm_verify_args documents the rule).
  void verify(const pllm_verify_args& args, pllm_verify_output& out) { pllm::verify_drafts(args, out); }

 private:
  // The target model's info; the target is held by pointer (SDK 2.0), checked by require().
  static pllm_model_info target_info(const pllm_speculator_create_args& args) {
    const pllm_speculator_target& target = pllm::require(args.target, "example_prompt_lookup: target");
    if (!target.info) throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "example_prompt_lookup: no target model info");
    return *target.info;
  }

  // The sequence whose rows [query_start_loc[s], query_start_loc[s + 1]) hold `row`.
  static int32_t sequence_of(const pllm_batch& b, int32_t row) {
    int32_t s = 0;
    while (s + 1 < b.num_seqs && b.query_start_loc[s + 1] <= row) ++s;
    return s;
  }

  // The tokens at positions 1 .. p + 1 of sequence s, where p is `row`'s position:
  // the remembered ones through the block table, and `row`'s own token last.
  std::vector<int32_t> history_of(const pllm_batch& b, int32_t s, int32_t row) const {
    const int32_t position = b.positions[row];
    std::vector<int32_t> history;
    history.reserve(std::size_t(position) + 1);
    for (int32_t q = 0; q < position; ++q) {
      const int64_t block = b.block_tables[int64_t(s) * b.max_blocks_per_seq + q / b.block_size];
      const int64_t slot = block * b.block_size + q % b.block_size;
      history.push_back(block >= 0 && std::size_t(slot) < tokens_.size() ? tokens_[std::size_t(slot)] : -1);
    }
    history.push_back(b.token_ids[row]);
    return history;
  }

  // The token that followed the latest earlier occurrence of the history's
  // last n tokens, longest n first; -1 when none matches.
  int32_t lookup(const std::vector<int32_t>& h) const {
    const int64_t len = int64_t(h.size());
    for (int64_t n = std::min<int64_t>(options_.max_ngram, len - 1); n >= options_.min_ngram; --n) {
      for (int64_t start = len - n - 1; start >= 0; --start) {
        bool match = true;
        for (int64_t k = 0; k < n && match; ++k) match = h[std::size_t(start + k)] == h[std::size_t(len - n + k)];
        const int32_t next = h[std::size_t(start + n)];
        if (match && next >= 0) return next;
      }
    }
    return -1;
  }

  static constexpr int64_t kMaxSlots = int64_t(1) << 32;  // far above any KV pool this CPU draft serves

  Options options_;
  pllm_model_info target_;
  std::vector<int32_t> tokens_;  // by KV slot: the token at the slot's position + 1; -1 = never seen
  std::vector<float> logits_;    // the last draft()'s output
};

}  // namespace

PAGEDLLM_PLUGIN(PromptLookup, "example_prompt_lookup", "1.0.0",
                "Example: a weightless speculator drafting by prompt lookup (n-gram matching)")
