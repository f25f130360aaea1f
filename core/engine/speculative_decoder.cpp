#include "core/engine/speculative_decoder.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/config/config_error.h"
#include "core/engine/seeds.h"

namespace pagedllm {
namespace {

pllm_tensor f32_matrix(float* data, std::int64_t rows, std::int64_t cols) {
  pllm_tensor t{};
  t.data = data;
  t.dtype = PLLM_DTYPE_F32;
  t.ndim = 2;
  t.shape[0] = rows;
  t.shape[1] = cols;
  t.strides[0] = cols;
  t.strides[1] = 1;
  t.device = {PLLM_DEVICE_CPU, 0};
  return t;
}

// Copies row `row` of a 2-D f32 tensor (any strides) into `out`.
void copy_row(const pllm_tensor& t, std::int64_t row, float* out) {
  const auto* base = static_cast<const float*>(t.data) + row * t.strides[0];
  for (std::int64_t c = 0; c < t.shape[1]; ++c) out[c] = base[c * t.strides[1]];
}

bool is_greedy(const pllm_sampling_params& params) { return params.temperature == 0.0f; }

}  // namespace

SpeculativeDecoder::SpeculativeDecoder(const SpeculativeConfig& config, SpeculatorInstance speculator,
                                       const pllm_model_info& target, const AttentionInstance& attention,
                                       const SamplerInstance& sampler, int block_size)
    : speculator_(std::move(speculator)),
      attention_(attention),
      sampler_(sampler),
      num_speculative_tokens_(config.num_speculative_tokens),
      target_num_layers_(target.num_layers),
      vocab_size_(target.vocab_size),
      block_size_(block_size) {
  pllm_error error{};
  info_.struct_size = sizeof(pllm_speculator_info);
  check_plugin_call(speculator_.api().get_info(speculator_.get(), &info_, &error), error,
                    speculator_.library(), "get_info");
  if (info_.num_draft_layers < 1 || info_.num_kv_heads != target.num_kv_heads ||
      info_.head_dim != target.head_dim || info_.hidden_size != target.hidden_size) {
    throw ConfigError(fmt::format(
        "speculative.draft {}: the draft ({} layers, {} KV heads of {}, hidden {}) cannot share the "
        "target's KV pool and features ({} KV heads of {}, hidden {})",
        config.draft.string(), info_.num_draft_layers, info_.num_kv_heads, info_.head_dim,
        info_.hidden_size, target.num_kv_heads, target.head_dim, target.hidden_size));
  }
  if (sampler_.api().probabilities == nullptr) {
    throw ConfigError(fmt::format("sampler plugin '{}' has no probabilities(), which speculative "
                                  "decoding verifies against",
                                  sampler_.library().name()));
  }
}

std::vector<std::vector<std::int32_t>> SpeculativeDecoder::verify(std::span<const VerifyRequest> requests,
                                                                  const pllm_tensor& target_logits) {
  const int k = num_speculative_tokens_;
  const auto vocab = static_cast<std::size_t>(vocab_size_);
  const std::size_t n = requests.size();
  // p: every request's m + 1 target rows after its own sampling processing.
  // Row i of a request sees the drafts before it as output history (penalties).
  std::vector<std::vector<std::int32_t>> histories(n);
  std::vector<pllm_sample_row> rows;
  std::vector<std::int64_t> logits_rows;
  for (std::size_t s = 0; s < n; ++s) {
    const VerifyRequest& r = requests[s];
    const auto found = stored_.find(r.sequence);
    PAGEDLLM_CHECK(found != stored_.end() && found->second.tokens.size() >= r.drafts.size() &&
                       std::equal(r.drafts.begin(), r.drafts.end(), found->second.tokens.begin()),
                   "sequence {}: the drafts to verify are not the ones proposed", r.sequence);
    histories[s].assign(r.outputs.begin(), r.outputs.end());
    histories[s].insert(histories[s].end(), r.drafts.begin(), r.drafts.end());
  }
  for (std::size_t s = 0; s < n; ++s) {
    const VerifyRequest& r = requests[s];
    for (std::size_t i = 0; i <= r.drafts.size(); ++i) {
      pllm_sample_row row{};
      row.struct_size = sizeof(pllm_sample_row);
      row.params = r.params;
      row.prompt_token_ids = r.prompt.data();
      row.num_prompt_tokens = static_cast<std::int32_t>(r.prompt.size());
      row.output_token_ids = histories[s].data();
      row.num_output_tokens = static_cast<std::int32_t>(r.outputs.size() + i);
      row.random_offset = r.outputs.size() + i;
      rows.push_back(row);
      logits_rows.push_back(r.first_logits_row + static_cast<std::int64_t>(i));
    }
  }
  gathered_.resize(rows.size() * vocab);
  for (std::size_t i = 0; i < rows.size(); ++i) copy_row(target_logits, logits_rows[i], &gathered_[i * vocab]);
  std::vector<float> row_probs(rows.size() * vocab);
  {
    pllm_sample_batch batch{sizeof(pllm_sample_batch), static_cast<std::int32_t>(rows.size()),
                            sizeof(pllm_sample_row), rows.data(),
                            f32_matrix(gathered_.data(), static_cast<std::int64_t>(rows.size()), vocab_size_)};
    pllm_tensor out = f32_matrix(row_probs.data(), static_cast<std::int64_t>(rows.size()), vocab_size_);
    pllm_error error{};
    check_plugin_call(sampler_.api().probabilities(sampler_.get(), &batch, &out, &error), error,
                      sampler_.library(), "probabilities");
  }

  // Padded to K drafts per request, as the verify table lays them out.
  const std::size_t stride_q = static_cast<std::size_t>(k) * vocab;
  const std::size_t stride_p = static_cast<std::size_t>(k + 1) * vocab;
  probs_.assign(n * stride_q, 0.0f);
  std::vector<float> target_probs(n * stride_p, 0.0f);
  std::vector<std::int32_t> num_drafts(n), drafts(n * static_cast<std::size_t>(k), 0);
  std::vector<std::uint8_t> greedy(n);
  std::vector<std::uint64_t> seeds(n), offsets(n);
  std::size_t p_row = 0;
  for (std::size_t s = 0; s < n; ++s) {
    const VerifyRequest& r = requests[s];
    const StoredDrafts& stored = stored_.at(r.sequence);
    const std::size_t m = r.drafts.size();
    num_drafts[s] = static_cast<std::int32_t>(m);
    std::copy(r.drafts.begin(), r.drafts.end(), drafts.begin() + static_cast<std::ptrdiff_t>(s * k));
    std::copy_n(stored.probs.begin(), m * vocab, probs_.begin() + static_cast<std::ptrdiff_t>(s * stride_q));
    std::copy_n(row_probs.begin() + static_cast<std::ptrdiff_t>(p_row * vocab), (m + 1) * vocab,
                target_probs.begin() + static_cast<std::ptrdiff_t>(s * stride_p));
    p_row += m + 1;
    greedy[s] = is_greedy(*r.params) ? 1 : 0;
    seeds[s] = r.params->seed;
    offsets[s] = r.outputs.size();
  }
  pllm_tensor q{}, p{};
  q = f32_matrix(probs_.data(), static_cast<std::int64_t>(n), 0);
  q.ndim = 3;
  q.shape[1] = k;
  q.shape[2] = vocab_size_;
  q.strides[0] = static_cast<std::int64_t>(stride_q);
  q.strides[1] = vocab_size_;
  q.strides[2] = 1;
  p = q;
  p.data = target_probs.data();
  p.shape[1] = k + 1;
  p.strides[0] = static_cast<std::int64_t>(stride_p);
  std::vector<std::int32_t> out_tokens(n * static_cast<std::size_t>(k + 1)), out_counts(n);
  pllm_verify_args args{sizeof(pllm_verify_args), static_cast<std::int32_t>(n), k, num_drafts.data(),
                        drafts.data(), q, p, greedy.data(), seeds.data(), offsets.data()};
  pllm_verify_output out{sizeof(pllm_verify_output), out_tokens.data(), out_counts.data()};
  pllm_error error{};
  check_plugin_call(speculator_.api().verify(speculator_.get(), &args, &out, &error), error,
                    speculator_.library(), "verify");

  std::vector<std::vector<std::int32_t>> accepted(n);
  for (std::size_t s = 0; s < n; ++s) {
    const int count = out_counts[s];
    if (count < 1 || count > num_drafts[s] + 1) {
      throw PluginCallError(PLLM_ERROR_INTERNAL,
                            fmt::format("plugin '{}': verify returned {} tokens for {} drafts",
                                        speculator_.library().name(), count, num_drafts[s]));
    }
    const auto* first = out_tokens.data() + s * static_cast<std::size_t>(k + 1);
    for (int i = 0; i < count; ++i) {
      if (first[i] < 0 || first[i] >= vocab_size_) {
        throw PluginCallError(PLLM_ERROR_INTERNAL,
                              fmt::format("plugin '{}': verify returned token {} outside the vocabulary",
                                          speculator_.library().name(), first[i]));
      }
    }
    accepted[s].assign(first, first + count);
    stored_.erase(requests[s].sequence);
  }
  return accepted;
}

void SpeculativeDecoder::forget(RequestId request) {
  std::erase_if(stored_, [request](const auto& entry) { return entry.second.request == request; });
}

pllm_tensor SpeculativeDecoder::run_draft(std::span<const DraftRow> rows, const pllm_tensor& features,
                                          const std::int32_t* feature_rows) {
  // Single-token rows first, as pllm_batch orders decodes.
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](std::size_t i) { return rows[i].tokens.size() == 1; });
  PAGEDLLM_CHECK(features.ndim == 2 ||
                     std::all_of(rows.begin(), rows.end(), [](const DraftRow& r) { return r.tokens.size() == 1; }),
                 "a draft chain continues single-token rows only");

  std::vector<std::int32_t> token_ids, positions, query_start_loc{0}, seq_lens, block_tables, logits_indices;
  std::vector<std::int64_t> slot_mapping;
  std::vector<std::int32_t> reordered_feature_rows;
  std::size_t max_blocks = 0;
  for (const DraftRow& r : rows) max_blocks = std::max(max_blocks, r.block_table.size());
  pllm_batch batch{};
  batch.struct_size = sizeof(pllm_batch);
  // Features follow the batch's row order; the caller's order is restored for logits.
  std::vector<std::size_t> feature_source;
  std::size_t caller_token = 0;
  std::vector<std::size_t> first_token_of(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    first_token_of[i] = caller_token;
    caller_token += rows[i].tokens.size();
  }
  for (const std::size_t i : order) {
    const DraftRow& r = rows[i];
    const int count = static_cast<int>(r.tokens.size());
    for (int j = 0; j < count; ++j) {
      const int position = r.first_position + j;
      const auto block = static_cast<std::size_t>(position / block_size_);
      PAGEDLLM_CHECK(block < r.block_table.size() && r.block_table[block] >= 0,
                     "draft position {} has no KV block", position);
      token_ids.push_back(r.tokens[static_cast<std::size_t>(j)]);
      positions.push_back(position);
      slot_mapping.push_back(static_cast<std::int64_t>(r.block_table[block]) * block_size_ +
                             position % block_size_);
      feature_source.push_back(first_token_of[i] + static_cast<std::size_t>(j));
    }
    if (count == 1) ++batch.num_decode_seqs;
    query_start_loc.push_back(static_cast<std::int32_t>(token_ids.size()));
    seq_lens.push_back(r.first_position + count);
    batch.max_query_len = std::max(batch.max_query_len, count);
    batch.max_seq_len = std::max(batch.max_seq_len, r.first_position + count);
    block_tables.insert(block_tables.end(), r.block_table.begin(), r.block_table.end());
    block_tables.insert(block_tables.end(), max_blocks - r.block_table.size(), -1);
  }
  // Logits rows in the caller's row order.
  std::vector<std::size_t> batch_row_of(rows.size());
  for (std::size_t b = 0; b < order.size(); ++b) batch_row_of[order[b]] = b;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].wants_logits) logits_indices.push_back(query_start_loc[batch_row_of[i] + 1] - 1);
  }

  pllm_tensor batch_features = features;
  if (features.ndim == 2) {
    const auto hidden = static_cast<std::size_t>(features.shape[1]);
    features_.resize(feature_source.size() * hidden);
    for (std::size_t t = 0; t < feature_source.size(); ++t) {
      copy_row(features, feature_rows[feature_source[t]], &features_[t * hidden]);
    }
    batch_features = f32_matrix(features_.data(), static_cast<std::int64_t>(feature_source.size()),
                                features.shape[1]);
  } else {
    for (const std::size_t source : feature_source) reordered_feature_rows.push_back(feature_rows[source]);
  }

  batch.num_seqs = static_cast<std::int32_t>(rows.size());
  batch.num_tokens = static_cast<std::int32_t>(token_ids.size());
  batch.block_size = block_size_;
  batch.max_blocks_per_seq = static_cast<std::int32_t>(max_blocks);
  batch.token_ids = token_ids.data();
  batch.positions = positions.data();
  batch.slot_mapping = slot_mapping.data();
  batch.query_start_loc = query_start_loc.data();
  batch.seq_lens = seq_lens.data();
  batch.block_tables = block_tables.data();
  batch.num_logits = static_cast<std::int32_t>(logits_indices.size());
  batch.logits_indices = logits_indices.data();

  pllm_error error{};
  check_plugin_call(attention_.api().plan(attention_.get(), &batch, &error), error, attention_.library(),
                    "plan (draft)");
  pllm_draft_args args{sizeof(pllm_draft_args), &batch, batch_features, {&attention_.api(), attention_.get()},
                       features.ndim == 2 ? nullptr : reordered_feature_rows.data()};
  pllm_draft_output out{};
  out.struct_size = sizeof(pllm_draft_output);
  check_plugin_call(speculator_.api().draft(speculator_.get(), &args, &out, &error), error,
                    speculator_.library(), "draft");
  if (batch.num_logits > 0 &&
      (out.logits.dtype != PLLM_DTYPE_F32 || out.logits.ndim != 2 || out.logits.shape[0] != batch.num_logits ||
       out.logits.shape[1] != vocab_size_)) {
    throw PluginCallError(PLLM_ERROR_INTERNAL,
                          fmt::format("plugin '{}': draft returned logits that are not f32 [{}, {}]",
                                      speculator_.library().name(), batch.num_logits, vocab_size_));
  }
  return out.logits;
}

void SpeculativeDecoder::sample_drafts(const pllm_tensor& logits, std::span<const pllm_sample_row> rows,
                                       std::span<float* const> probs_out, std::span<std::int32_t> tokens_out) {
  const auto vocab = static_cast<std::size_t>(vocab_size_);
  const auto n = static_cast<std::int64_t>(rows.size());
  // The draft's logits rows are the sample rows, in order: the sampler reads them in place.
  std::vector<float> probs(rows.size() * vocab);
  pllm_sample_batch batch{sizeof(pllm_sample_batch), static_cast<std::int32_t>(n), sizeof(pllm_sample_row),
                          rows.data(), logits};
  pllm_tensor probs_tensor = f32_matrix(probs.data(), n, vocab_size_);
  pllm_error error{};
  check_plugin_call(sampler_.api().probabilities(sampler_.get(), &batch, &probs_tensor, &error), error,
                    sampler_.library(), "probabilities (draft)");
  std::vector<float> logprobs(rows.size());
  pllm_sample_output out{sizeof(pllm_sample_output), tokens_out.data(), logprobs.data(), 0, nullptr, nullptr};
  check_plugin_call(sampler_.api().sample(sampler_.get(), &batch, &out, &error), error, sampler_.library(),
                    "sample (draft)");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (tokens_out[i] < 0 || tokens_out[i] >= vocab_size_) {
      throw PluginCallError(PLLM_ERROR_INTERNAL, fmt::format("plugin '{}': draft token {} outside the vocabulary",
                                                             sampler_.library().name(), tokens_out[i]));
    }
    std::copy_n(probs.begin() + static_cast<std::ptrdiff_t>(i * vocab), vocab, probs_out[i]);
  }
}

std::vector<std::vector<std::int32_t>> SpeculativeDecoder::propose(std::span<const DraftRequest> requests,
                                                                   const pllm_tensor& target_hidden) {
  const auto vocab = static_cast<std::size_t>(vocab_size_);
  std::vector<std::vector<std::int32_t>> drafts(requests.size());
  if (requests.empty()) return drafts;

  // Pass 1: the draft's KV for every position the target computed; logits at
  // the last position of the requests that draft.
  std::vector<DraftRow> rows;
  std::vector<std::int32_t> hidden_rows;
  for (const DraftRequest& r : requests) {
    rows.push_back({r.block_table, r.first_position, r.next_tokens, r.num_drafts > 0});
    hidden_rows.insert(hidden_rows.end(), r.hidden_rows.begin(), r.hidden_rows.end());
  }
  pllm_tensor logits = run_draft(rows, target_hidden, hidden_rows.data());

  // Which requests draft, and their per-draft sampling rows: the draft stream's
  // seed, offsets continuing the request's output, drafts so far as history.
  std::vector<std::size_t> drafting;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].num_drafts > 0) drafting.push_back(i);
  }
  std::vector<pllm_sampling_params> params(drafting.size());
  std::vector<std::vector<std::int32_t>> histories(drafting.size());
  for (std::size_t d = 0; d < drafting.size(); ++d) {
    const DraftRequest& r = requests[drafting[d]];
    params[d] = *r.params;
    params[d].seed = draft_seed(r.params->seed);
    params[d].num_top_logprobs = 0;
    histories[d].reserve(r.outputs.size() + static_cast<std::size_t>(r.num_drafts));
    histories[d].assign(r.outputs.begin(), r.outputs.end());
    StoredDrafts& stored = stored_[r.sequence];
    stored.request = r.request;
    stored.tokens.clear();
    stored.probs.assign(static_cast<std::size_t>(r.num_drafts) * vocab, 0.0f);
  }

  // Chain: round i samples draft i of every request still drafting, then runs
  // the draft one position further for those that want another.
  std::vector<std::size_t> active(drafting.size());
  for (std::size_t d = 0; d < drafting.size(); ++d) active[d] = d;
  std::vector<int> last_position(drafting.size());
  for (std::size_t d = 0; d < drafting.size(); ++d) {
    const DraftRequest& r = requests[drafting[d]];
    last_position[d] = r.first_position + static_cast<int>(r.next_tokens.size()) - 1;
  }
  for (int round = 0; !active.empty(); ++round) {
    std::vector<pllm_sample_row> sample_rows;
    std::vector<float*> probs_out;
    for (const std::size_t d : active) {
      const DraftRequest& r = requests[drafting[d]];
      pllm_sample_row row{};
      row.struct_size = sizeof(pllm_sample_row);
      row.params = &params[d];
      row.prompt_token_ids = r.prompt.data();
      row.num_prompt_tokens = static_cast<std::int32_t>(r.prompt.size());
      row.output_token_ids = histories[d].data();
      row.num_output_tokens = static_cast<std::int32_t>(histories[d].size());
      row.random_offset = histories[d].size();
      sample_rows.push_back(row);
      probs_out.push_back(stored_[r.sequence].probs.data() + static_cast<std::size_t>(round) * vocab);
    }
    std::vector<std::int32_t> tokens(active.size());
    sample_drafts(logits, sample_rows, probs_out, tokens);
    std::vector<std::size_t> next_active;
    std::vector<std::int32_t> feature_rows;
    std::vector<DraftRow> chain;
    std::vector<std::int32_t> chain_tokens(active.size());
    for (std::size_t a = 0; a < active.size(); ++a) {
      const std::size_t d = active[a];
      const DraftRequest& r = requests[drafting[d]];
      histories[d].push_back(tokens[a]);
      drafts[drafting[d]].push_back(tokens[a]);
      stored_[r.sequence].tokens.push_back(tokens[a]);
      if (round + 1 < r.num_drafts) {
        chain_tokens[a] = tokens[a];
        next_active.push_back(d);
        feature_rows.push_back(static_cast<std::int32_t>(a));
      }
    }
    if (next_active.empty()) break;
    for (std::size_t c = 0; c < next_active.size(); ++c) {
      const std::size_t d = next_active[c];
      const auto a = static_cast<std::size_t>(feature_rows[c]);
      ++last_position[d];
      chain.push_back({requests[drafting[d]].block_table, last_position[d],
                       std::span<const std::int32_t>(&chain_tokens[a], 1), true});
    }
    pllm_tensor none{};
    logits = run_draft(chain, none, feature_rows.data());
    active = std::move(next_active);
  }
  return drafts;
}

}  // namespace pagedllm
