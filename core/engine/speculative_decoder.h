#pragma once
// Speculative decoding inside the engine step (EAGLE, seed 002 ch. 9): the
// speculator plugin is a draft model that reads the target's hidden states;
// this class plans the draft's batches, turns draft logits into draft tokens
// and their distribution q with the sampler plugin, and verifies drafts
// against the target's distribution p with the speculator's rejection sampler.
//
// One step, for a speculative sequence:
//   target forward   rows [x, d_1..d_m] (m drafts from the previous step), hidden
//                    states of every row
//   verify()         p_1..p_{m+1} (after the request's penalties / temperature /
//                    top-k / top-p) against the stored q_1..q_m: tokens d_1..d_a, y
//                    (greedy requests: d_i against the sampler's greedy token of
//                    row i, exact match; no p, and no q stored for them)
//   scheduler update the sequence now has KV for x, d_1..d_a; y is its last token
//   propose()        the draft's own KV for those positions (input at position j:
//                    the feature of j and the token at j + 1), then K drafts by
//                    chain: the last row's logits give d'_1, whose row at the next
//                    position gives d'_2, ... (writes K - 1 positions past y's,
//                    which the scheduler reserves as num_draft_slots)
// Prefill chunks of speculative requests go through propose() too, so the draft's
// KV covers the prompt; the chunk that completes the prompt starts drafting.
//
// Structured output: a constrained sequence's grammar matcher has accepted
// exactly its output tokens between steps. propose() masks draft i's logits
// (greedy pick and q alike) by the grammar after d_1..d_{i-1}, advancing the
// matcher through the drafts and rolling it back at the end (a position where
// the mask leaves the draft nothing ends that sequence's drafts there);
// verify() masks target row i (its greedy token, or p) the same way, so a draft
// the grammar refuses is never accepted, then rolls the matcher back to the
// accepted drafts and advances it by the bonus or corrected token.
//
// p and q never leave the model's device: they live in buffers the speculator
// lends (allocate_buffer(), on its device), which the sampler's probabilities()
// writes and verify() reads. A speculator that lends none gets host memory.
// They are allocated on first use and grow with the batch (a power of two of
// sequences), after the KV pool was sized: on a GPU they come out of what
// cache.gpu_memory_utilization leaves free.

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/config/config.h"
#include "core/engine/model_runner.h"
#include "core/engine/structured_output.h"
#include "core/kv/kv_cache_manager.h"
#include "core/plugin/plugin_instance.h"
#include "core/scheduler/request.h"

namespace pagedllm {

class TensorParallelDriver;  // core/engine/tensor_parallel.h

// A sequence whose drafts are verified this step.
struct VerifyRequest {
  RequestId request = -1;
  SequenceId sequence = -1;
  std::span<const std::int32_t> drafts;  // the m drafts the target scored (a prefix of the stored ones)
  int first_logits_row = 0;              // rows [first, first + m + 1) of the forward's logits
  const pllm_sampling_params* params = nullptr;
  std::span<const std::int32_t> prompt;
  std::span<const std::int32_t> outputs;  // output tokens before x's successor
  // The sequence's grammar matcher (structured output), at `outputs`; null: unconstrained.
  pllm_constraint_matcher* matcher = nullptr;
};

// A speculative sequence whose target KV grew this step.
struct DraftRequest {
  RequestId request = -1;
  SequenceId sequence = -1;
  std::span<const std::int32_t> block_table;  // the step's row, valid during propose()
  int first_position = 0;                     // first position the target computed this step
  // Per computed position p = first_position + j: the token at p + 1, and the
  // row of the forward's hidden states holding p's feature.
  std::vector<std::int32_t> next_tokens;
  std::vector<std::int32_t> hidden_rows;
  int num_drafts = 0;  // drafts to propose after the last position (0: only the draft's KV)
  const pllm_sampling_params* params = nullptr;
  std::span<const std::int32_t> prompt;
  std::span<const std::int32_t> outputs;  // output tokens so far, the newest included
  // The sequence's grammar matcher (structured output), at `outputs`; null: unconstrained.
  pllm_constraint_matcher* matcher = nullptr;
};

class SpeculativeDecoder {
 public:
  // `device` is the model's: where the speculator's buffers must be.
  SpeculativeDecoder(const SpeculativeConfig& config, SpeculatorInstance speculator,
                     const pllm_model_info& target, const ModelRunner& runner,
                     const SamplerInstance& sampler, int block_size, pllm_device device);
  // Its buffers hold a reference to its speculator: it stays where it was made.
  SpeculativeDecoder(const SpeculativeDecoder&) = delete;
  SpeculativeDecoder& operator=(const SpeculativeDecoder&) = delete;
  // The constraint engine whose matchers requests name (structured output); set once at startup.
  void set_structured_output(const StructuredOutput* structured_output) { structured_output_ = structured_output; }

  // Under tensor parallelism (rank 0): every draft() is sent to the other ranks first, which run
  // it on their split of the head (core/engine/tensor_parallel.h). Set once at startup.
  void set_tensor_parallel(TensorParallelDriver* driver) { tensor_parallel_ = driver; }

  int num_speculative_tokens() const { return num_speculative_tokens_; }
  int num_draft_layers() const { return info_.num_draft_layers; }
  const SpeculatorInstance& speculator() const { return speculator_; }

  // Verifies each request's drafts; returns the accepted drafts plus one more
  // token per request, in order. Greedy requests: exact match against the
  // sampler's greedy tokens of the target rows (p is one-hot at that argmax, so
  // this is what rejection sampling does, without forming p or q). Sampled
  // requests: p from the sampler's probabilities(), the speculator's
  // rejection sampler against the stored q. Consumes the stored drafts.
  // Constrained requests: every row masked by the grammar after the drafts
  // before it; their matchers end at the returned tokens.
  // target_logits stay where the model left them (the sampler reads its rows
  // by index). non_finite[s] is set for a request one of whose rows the
  // sampler flagged (its result is then empty).
  std::vector<std::vector<std::int32_t>> verify(std::span<const VerifyRequest> requests,
                                                const pllm_tensor& target_logits,
                                                std::vector<std::uint8_t>& non_finite);
  // Runs the draft over every request's new positions and drafts num_drafts
  // tokens for those that ask (a constrained request fewer where the grammar
  // leaves the draft no token); returns them per request (empty: none) and keeps
  // their q for the next verify(). target_hidden stays where the model left
  // it: the draft reads its rows by index.
  std::vector<std::vector<std::int32_t>> propose(std::span<const DraftRequest> requests,
                                                 const pllm_tensor& target_hidden);
  // Forgets the drafts stored for a request's sequences (it ended).
  void forget(RequestId request);

 private:
  // Memory for probabilities: lent by the speculator (on the model's device),
  // or host memory when it lends none. Freed through the speculator, so it
  // must go before the speculator does.
  class ProbsBuffer {
   public:
    ProbsBuffer(const SpeculatorInstance& speculator, std::size_t floats, pllm_device expected_device);
    ~ProbsBuffer();
    ProbsBuffer(const ProbsBuffer&) = delete;
    ProbsBuffer& operator=(const ProbsBuffer&) = delete;
    float* data() const { return data_; }
    std::size_t floats() const { return floats_; }
    pllm_device device() const { return device_; }

   private:
    const SpeculatorInstance& speculator_;
    bool lent_ = false;        // data_ is the speculator's, given back through free_buffer()
    std::vector<float> host_;  // the memory when the speculator lends none
    float* data_ = nullptr;
    std::size_t floats_ = 0;
    pllm_device device_{};
  };
  struct StoredDrafts {
    RequestId request = -1;
    std::vector<std::int32_t> tokens;
    // q of each draft, [tokens.size(), vocab] from probs_offset of the buffer
    // of the propose() call that drafted them (shared with that call's other
    // sequences); null for greedy requests.
    std::shared_ptr<const ProbsBuffer> probs;
    std::size_t probs_offset = 0;
  };
  // Grammar masks for a set of sampler rows (pllm_sample_batch.token_bitmask):
  // empty when no row is constrained.
  struct RowMasks {
    std::vector<std::uint32_t> bits;        // [rows, words]
    std::vector<std::uint8_t> constrained;  // [rows]
    int words = 0;
    bool empty() const { return bits.empty(); }
    std::uint32_t* row(std::size_t r) { return bits.data() + r * static_cast<std::size_t>(words); }
    // Room for `rows` rows, none constrained yet.
    void reset(std::size_t rows, int row_words);
    // Points `batch` at the masks (no-op when empty).
    void attach(pllm_sample_batch& batch) const;
    // The masks of `rows` (indices into these rows), in that order.
    RowMasks select(std::span<const std::size_t> rows) const;
  };
  // Fills row rows[i] of `masks` with matchers[i]'s next-token mask (one plugin call).
  void fill_masks(std::span<pllm_constraint_matcher* const> matchers, std::span<const std::size_t> rows,
                  RowMasks& masks) const;
  // Advances a matcher by a token the sampler or the speculator chose under its
  // mask; a refusal is that plugin's fault (`who` names it).
  void accept_constrained(pllm_constraint_matcher* matcher, std::int32_t token, const PluginLibrary& who,
                          const char* what) const;
  void rollback_constrained(pllm_constraint_matcher* matcher, int num_tokens) const;
  // One row of a draft batch the decoder plans.
  struct DraftRow {
    std::span<const std::int32_t> block_table;
    int first_position = 0;
    std::span<const std::int32_t> tokens;
    bool wants_logits = false;
  };
  // Plans and runs one draft batch of `rows`. Token t of the rows (in their
  // order) reads row feature_rows[t] of `features` (the target's hidden states),
  // or, with null features, the draft's prediction at logits row
  // feature_rows[t] of the previous call (a chain). Returns the logits of the
  // rows that want them, in row order, where the speculator left them.
  pllm_tensor run_draft(std::span<const DraftRow> rows, const pllm_tensor* features,
                        const std::int32_t* feature_rows);
  // A draft token per logits row (the sampler's sample()), and for the rows
  // with a q_slot >= 0 (sampled requests; greedy ones pass -1) their q (the
  // sampler's probabilities()) as draft `round` of slot q_slot of `q`, a
  // [slots, K, vocab] buffer: one probabilities() call per run of consecutive
  // slots, K * vocab floats apart (one run unless a constrained request stopped
  // drafting early). Rows with masks are constrained; a constrained row whose
  // mask leaves the draft no finite logit gets token -1 (no q).
  void sample_drafts(const pllm_tensor& logits, std::span<const pllm_sample_row> rows, const RowMasks& masks,
                     std::span<const std::int32_t> q_slots, const ProbsBuffer* q, int round,
                     std::span<std::int32_t> tokens_out);
  // A buffer of at least `floats` for one propose() call's q: one that no stored
  // drafts hold any more when one is large enough (the free ones too small are
  // released), or a new one.
  std::shared_ptr<const ProbsBuffer> draft_probs_buffer(std::size_t floats);
  // A sampler row of `params` whose output history is `history`, sampled at
  // random offset history.size() (the index of the token it yields), from
  // logits row `logits_row`.
  static pllm_sample_row sample_row(const pllm_sampling_params* params, std::span<const std::int32_t> prompt,
                                    std::span<const std::int32_t> history, std::int64_t logits_row);
  // The sampler's tokens for `rows` (each names its logits row), checked
  // against the vocabulary. With `status`, a non-finite row is flagged there
  // (token -1) instead of failing the call.
  std::vector<std::int32_t> sample_tokens(const pllm_tensor& logits, std::span<const pllm_sample_row> rows,
                                          const RowMasks& masks, const char* what,
                                          std::vector<std::int32_t>* status = nullptr);
  // The sampler's probabilities() of `rows` into `probs` ([rows, vocab] f32
  // with contiguous rows, in a ProbsBuffer: nothing crosses to the host).
  void row_probabilities(const pllm_tensor& logits, std::span<const pllm_sample_row> rows, const RowMasks& masks,
                         const pllm_tensor& probs, const char* what, std::vector<std::int32_t>* status = nullptr);

  SpeculatorInstance speculator_;
  TensorParallelDriver* tensor_parallel_ = nullptr;
  pllm_speculator_info info_{};
  const ModelRunner& runner_;  // plan() and draft() of the draft batches
  const SamplerInstance& sampler_;
  int num_speculative_tokens_ = 0;
  std::int64_t vocab_size_ = 0;
  int block_size_ = 0;
  pllm_device device_{};
  const StructuredOutput* structured_output_ = nullptr;
  // After speculator_: the buffers are freed through it, before it is destroyed.
  std::unordered_map<SequenceId, StoredDrafts> stored_;
  // Every propose() call's q buffer, held by stored_ while drafts wait in it
  // (one in the steady state: verify() frees the last step's before propose()).
  std::vector<std::shared_ptr<const ProbsBuffer>> draft_probs_;
  // The step's p: grown, never shrunk.
  std::unique_ptr<ProbsBuffer> target_probs_;
};

}  // namespace pagedllm
