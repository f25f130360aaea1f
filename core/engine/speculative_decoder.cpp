#include "core/engine/speculative_decoder.h"

#include <algorithm>
#include <bit>
#include <initializer_list>

#include <fmt/format.h>

#include "core/common/logging.h"
#include "core/config/config_error.h"
#include "core/engine/plugin_batch.h"
#include "core/engine/seeds.h"
#include "core/engine/tensor_parallel.h"
#include "core/scheduler/step_batch_builder.h"

namespace pagedllm {
namespace {

// An f32 tensor of `shape` over `data` on `device`, contiguous, or with
// `outer_stride` elements from one row of the first dimension to the next.
pllm_tensor f32_tensor(const float* data, pllm_device device, std::initializer_list<std::int64_t> shape,
                       std::int64_t outer_stride = 0) {
  pllm_tensor t{};
  t.struct_size = sizeof t;
  t.data = const_cast<float*>(data);
  t.dtype = PLLM_DTYPE_F32;
  t.ndim = static_cast<std::int32_t>(shape.size());
  std::int64_t stride = 1;
  for (auto d = static_cast<std::ptrdiff_t>(shape.size()) - 1; d >= 0; --d) {
    t.shape[d] = shape.begin()[d];
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  if (outer_stride > 0) t.strides[0] = outer_stride;
  t.device = device;
  return t;
}

std::string device_name(const pllm_device& device) {
  switch (device.type) {
    case PLLM_DEVICE_CPU: return "cpu";
    case PLLM_DEVICE_CUDA: return fmt::format("cuda:{}", device.index);
    case PLLM_DEVICE_INVALID:
    case PLLM_DEVICE_FORCE_32BIT: break;
  }
  return fmt::format("device type {} index {}", static_cast<int>(device.type), device.index);
}

// Room for `count` of something, rounded up to a power of two so that a
// growing batch reallocates a logarithmic number of times.
std::size_t rounded_up(std::size_t count) { return std::bit_ceil(std::max<std::size_t>(count, 1)); }

// The sampler's definition (sampler.h): a row it samples greedily is verified greedily.
bool is_greedy(const pllm_sampling_params& params) { return pllm_is_greedy(&params) != 0; }

}  // namespace

SpeculativeDecoder::ProbsBuffer::ProbsBuffer(const SpeculatorInstance& speculator, std::size_t floats,
                                             pllm_device expected_device)
    : speculator_(speculator), floats_(floats) {
  const pllm_speculator_api& api = speculator_.api();
  if (api.allocate_buffer == nullptr) {
    host_.resize(floats);
    data_ = host_.data();
    device_ = {PLLM_DEVICE_CPU, 0};
    return;
  }
  const std::uint64_t bytes = floats * sizeof(float);
  pllm_speculator_buffer buffer{};
  buffer.struct_size = sizeof buffer;
  pllm_error error{};
  check_plugin_call(api.allocate_buffer(speculator_.get(), bytes, &buffer, &error), error, speculator_.library(),
                    "allocate_buffer");
  data_ = static_cast<float*>(buffer.data);
  device_ = buffer.device;
  if (buffer.data == nullptr || buffer.bytes < bytes || buffer.device.type != expected_device.type ||
      buffer.device.index != expected_device.index) {
    if (buffer.data != nullptr) (void)api.free_buffer(speculator_.get(), buffer.data, &error);  // the error says why
    throw PluginCallError(PLLM_ERROR_INTERNAL,
                          fmt::format("plugin '{}': allocate_buffer({}) returned {} bytes at {} on {}; it must "
                                      "return at least that many bytes on the model's device, {}",
                                      speculator_.library().name(), bytes, buffer.bytes, buffer.data,
                                      device_name(buffer.device), device_name(expected_device)));
  }
  lent_ = true;
}

SpeculativeDecoder::ProbsBuffer::~ProbsBuffer() {
  if (!lent_) return;
  pllm_error error{};
  if (speculator_.api().free_buffer(speculator_.get(), data_, &error) != PLLM_OK) {
    host_log().error("plugin '{}': free_buffer failed: {}", speculator_.library().name(), error.message);
  }
}

SpeculativeDecoder::SpeculativeDecoder(const SpeculativeConfig& config, SpeculatorInstance speculator,
                                       const pllm_model_info& target, const ModelRunner& runner,
                                       const SamplerInstance& sampler, int block_size, pllm_device device)
    : speculator_(std::move(speculator)),
      runner_(runner),
      sampler_(sampler),
      num_speculative_tokens_(config.num_speculative_tokens),
      vocab_size_(target.vocab_size),
      block_size_(block_size),
      device_(device) {
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
  if ((speculator_.api().allocate_buffer == nullptr) != (speculator_.api().free_buffer == nullptr)) {
    throw ConfigError(fmt::format("speculator plugin '{}' has only one of allocate_buffer() and free_buffer()",
                                  speculator_.library().name()));
  }
  if (sampler_.api().probabilities == nullptr) {
    throw ConfigError(fmt::format("sampler plugin '{}' has no probabilities(), which speculative "
                                  "decoding verifies against",
                                  sampler_.library().name()));
  }
}

pllm_sample_row SpeculativeDecoder::sample_row(const pllm_sampling_params* params,
                                               std::span<const std::int32_t> prompt,
                                               std::span<const std::int32_t> history, std::int64_t logits_row) {
  pllm_sample_row row{};
  row.struct_size = sizeof(pllm_sample_row);
  row.params = params;
  row.prompt_token_ids = prompt.data();
  row.num_prompt_tokens = static_cast<std::int32_t>(prompt.size());
  row.output_token_ids = history.data();
  row.num_output_tokens = static_cast<std::int32_t>(history.size());
  row.random_offset = history.size();
  row.logits_row = static_cast<std::int32_t>(logits_row);
  return row;
}

void SpeculativeDecoder::RowMasks::reset(std::size_t rows, int row_words) {
  words = row_words;
  bits.assign(rows * static_cast<std::size_t>(row_words), 0);
  constrained.assign(rows, 0);
}

void SpeculativeDecoder::RowMasks::attach(pllm_sample_batch& batch) const {
  if (empty()) return;
  batch.token_bitmask = bits.data();
  batch.bitmask_words = words;
  batch.constrained_rows = constrained.data();
}

SpeculativeDecoder::RowMasks SpeculativeDecoder::RowMasks::select(std::span<const std::size_t> rows) const {
  RowMasks out;
  if (empty()) return out;
  out.reset(rows.size(), words);
  const auto w = static_cast<std::size_t>(words);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::copy_n(bits.begin() + static_cast<std::ptrdiff_t>(rows[i] * w), w, out.row(i));
    out.constrained[i] = constrained[rows[i]];
  }
  return out;
}

void SpeculativeDecoder::fill_masks(std::span<pllm_constraint_matcher* const> matchers,
                                    std::span<const std::size_t> rows, RowMasks& masks) const {
  if (matchers.empty()) return;
  const auto words = static_cast<std::size_t>(masks.words);
  std::vector<std::uint32_t> filled(matchers.size() * words);
  structured_output_->fill_bitmask(matchers, filled.data());
  for (std::size_t k = 0; k < rows.size(); ++k) {
    std::copy_n(filled.begin() + static_cast<std::ptrdiff_t>(k * words), words, masks.row(rows[k]));
    masks.constrained[rows[k]] = 1;
  }
}

void SpeculativeDecoder::accept_constrained(pllm_constraint_matcher* matcher, std::int32_t token,
                                            const PluginLibrary& who, const char* what) const {
  if (!structured_output_->accept(matcher, token)) {
    throw PluginCallError(PLLM_ERROR_INTERNAL, fmt::format("plugin '{}': {} chose token {} outside the row's "
                                                           "structured-output mask",
                                                           who.name(), what, token));
  }
}

void SpeculativeDecoder::rollback_constrained(pllm_constraint_matcher* matcher, int num_tokens) const {
  structured_output_->rollback(matcher, num_tokens);
}

std::vector<std::int32_t> SpeculativeDecoder::sample_tokens(const pllm_tensor& logits,
                                                            std::span<const pllm_sample_row> rows,
                                                            const RowMasks& masks, const char* what,
                                                            std::vector<std::int32_t>* status) {
  std::vector<std::int32_t> tokens(rows.size());
  if (rows.empty()) return tokens;
  if (status) status->assign(rows.size(), PLLM_SAMPLE_OK);
  pllm_sample_batch batch{sizeof(pllm_sample_batch), static_cast<std::int32_t>(rows.size()), sizeof(pllm_sample_row),
                          rows.data(), &logits, nullptr, 0, nullptr};
  masks.attach(batch);
  pllm_sample_output out{sizeof(pllm_sample_output), tokens.data(), nullptr, 0, nullptr, nullptr,
                         status ? status->data() : nullptr};
  pllm_error error{};
  check_plugin_call(sampler_.api().sample(sampler_.get(), &batch, &out, &error), error, sampler_.library(), what);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (status && (*status)[i] != PLLM_SAMPLE_OK) continue;
    if (tokens[i] < 0 || tokens[i] >= vocab_size_) {
      throw PluginCallError(PLLM_ERROR_INTERNAL, fmt::format("plugin '{}': {} returned token {} outside the vocabulary",
                                                             sampler_.library().name(), what, tokens[i]));
    }
  }
  return tokens;
}

void SpeculativeDecoder::row_probabilities(const pllm_tensor& logits, std::span<const pllm_sample_row> rows,
                                           const RowMasks& masks, const pllm_tensor& probs, const char* what,
                                           std::vector<std::int32_t>* status) {
  if (rows.empty()) return;
  if (status) status->assign(rows.size(), PLLM_SAMPLE_OK);
  const auto n = static_cast<std::int32_t>(rows.size());
  pllm_sample_batch batch{sizeof(pllm_sample_batch), n, sizeof(pllm_sample_row), rows.data(), &logits,
                          nullptr, 0, nullptr};
  masks.attach(batch);
  const pllm_probabilities_output out{sizeof(pllm_probabilities_output), &probs, status ? status->data() : nullptr};
  pllm_error error{};
  check_plugin_call(sampler_.api().probabilities(sampler_.get(), &batch, &out, &error), error, sampler_.library(),
                    what);
}

std::vector<std::vector<std::int32_t>> SpeculativeDecoder::verify(std::span<const VerifyRequest> requests,
                                                                  const pllm_tensor& target_logits,
                                                                  std::vector<std::uint8_t>& non_finite) {
  const auto vocab = static_cast<std::size_t>(vocab_size_);
  const std::size_t n = requests.size();
  // Row i of a request (target row first_logits_row + i) sees its output and
  // the drafts before it as history (penalties), at random offset outputs + i.
  std::vector<std::vector<std::int32_t>> histories(n);
  std::vector<std::size_t> greedy, sampled;
  for (std::size_t s = 0; s < n; ++s) {
    const VerifyRequest& r = requests[s];
    const auto found = stored_.find(r.sequence);
    PAGEDLLM_CHECK(found != stored_.end() && found->second.tokens.size() >= r.drafts.size() &&
                       std::equal(r.drafts.begin(), r.drafts.end(), found->second.tokens.begin()),
                   "sequence {}: the drafts to verify are not the ones proposed", r.sequence);
    histories[s].assign(r.outputs.begin(), r.outputs.end());
    histories[s].insert(histories[s].end(), r.drafts.begin(), r.drafts.end());
    (is_greedy(*r.params) ? greedy : sampled).push_back(s);
  }
  // The m + 1 sampler rows of each of `group`, and their target logits rows.
  const auto target_rows = [&](std::span<const std::size_t> group, std::vector<pllm_sample_row>& rows) {
    for (const std::size_t s : group) {
      const VerifyRequest& r = requests[s];
      for (std::size_t i = 0; i <= r.drafts.size(); ++i) {
        const std::span<const std::int32_t> history(histories[s].data(), r.outputs.size() + i);
        rows.push_back(sample_row(r.params, r.prompt, history, r.first_logits_row + static_cast<std::int64_t>(i)));
      }
    }
  };
  // A request one of whose rows the sampler flagged non-finite is not verified.
  const auto flag_non_finite = [&](std::span<const std::size_t> group, const std::vector<std::int32_t>& status) {
    std::size_t row = 0;
    for (const std::size_t s : group) {
      for (std::size_t i = 0; i <= requests[s].drafts.size(); ++i, ++row) {
        if (status[row] != PLLM_SAMPLE_OK) non_finite[s] = 1;
      }
    }
  };
  // Structured output: row i of a constrained request is masked by its grammar
  // after d_1..d_i, so each matcher is advanced through the drafts while the
  // grammar takes them (advanced[s] of them), and settled on the result below.
  std::vector<std::size_t> advanced(n, 0);
  const auto group_masks = [&](std::span<const std::size_t> group, std::size_t num_rows) {
    RowMasks masks;
    std::vector<std::size_t> first_row;
    bool constrained = false;
    std::size_t max_drafts = 0, next_row = 0;
    for (const std::size_t s : group) {
      first_row.push_back(next_row);
      next_row += requests[s].drafts.size() + 1;
      constrained = constrained || requests[s].matcher != nullptr;
      max_drafts = std::max(max_drafts, requests[s].drafts.size());
    }
    if (!constrained) return masks;
    PAGEDLLM_CHECK(structured_output_ != nullptr, "a constrained request without a constraint engine");
    masks.reset(num_rows, structured_output_->words());
    for (std::size_t i = 0; i <= max_drafts; ++i) {
      std::vector<pllm_constraint_matcher*> matchers;
      std::vector<std::size_t> rows, members;
      for (std::size_t g = 0; g < group.size(); ++g) {
        const VerifyRequest& r = requests[group[g]];
        if (r.matcher == nullptr || i > r.drafts.size() || advanced[group[g]] < i) continue;
        matchers.push_back(r.matcher);
        rows.push_back(first_row[g] + i);
        members.push_back(g);
      }
      if (matchers.empty()) break;
      fill_masks(matchers, rows, masks);
      for (const std::size_t g : members) {
        const VerifyRequest& r = requests[group[g]];
        if (i < r.drafts.size() && structured_output_->accept(r.matcher, r.drafts[i])) ++advanced[group[g]];
      }
    }
    // Past a draft the grammar refuses, rows repeat its row's mask: that draft
    // is rejected at its own row (the token chosen there is allowed, the draft
    // is not), so nothing after it is used.
    for (std::size_t g = 0; g < group.size(); ++g) {
      const VerifyRequest& r = requests[group[g]];
      if (r.matcher == nullptr) continue;
      const std::size_t last = first_row[g] + advanced[group[g]];
      for (std::size_t row = last + 1; row <= first_row[g] + r.drafts.size(); ++row) {
        std::copy_n(masks.row(last), masks.words, masks.row(row));
        masks.constrained[row] = 1;
      }
    }
    return masks;
  };
  non_finite.assign(n, 0);
  std::vector<std::vector<std::int32_t>> accepted(n);

  // Greedy: p_i is one-hot at the argmax of row i's processed logits, so
  // rejection sampling reduces to exact match: d_i is accepted while it equals
  // the sampler's greedy token of row i, and the first unmatched row's token
  // (or row m + 1's, the bonus) follows. The sampler's greedy sample() is that
  // argmax, so no vocabulary-wide p is formed and the speculator is not called.
  if (!greedy.empty()) {
    std::vector<pllm_sample_row> rows;
    target_rows(greedy, rows);
    const RowMasks masks = group_masks(greedy, rows.size());
    std::vector<std::int32_t> status;
    const std::vector<std::int32_t> target = sample_tokens(target_logits, rows, masks, "sample (verify)", &status);
    flag_non_finite(greedy, status);
    std::size_t row = 0;
    for (const std::size_t s : greedy) {
      const std::span<const std::int32_t> drafts = requests[s].drafts;
      if (non_finite[s]) {
        row += drafts.size() + 1;
        continue;
      }
      std::size_t i = 0;
      while (i < drafts.size() && drafts[i] == target[row + i]) ++i;
      accepted[s].assign(drafts.begin(), drafts.begin() + static_cast<std::ptrdiff_t>(i));
      accepted[s].push_back(target[row + i]);
      row += drafts.size() + 1;
    }
  }

  // Sampled: p from the sampler's probabilities() ([m + 1, V] per request,
  // one call for all, into the step's p buffer on the model's device), then
  // the speculator's rejection sampler, one call per request reading its p and
  // its stored q where they lie.
  if (!sampled.empty()) {
    std::vector<pllm_sample_row> rows;
    target_rows(sampled, rows);
    const RowMasks masks = group_masks(sampled, rows.size());
    if (!target_probs_ || target_probs_->floats() < rows.size() * vocab) {
      target_probs_.reset();  // freed before its successor is allocated
      target_probs_ = std::make_unique<ProbsBuffer>(speculator_, rounded_up(rows.size()) * vocab, device_);
    }
    const float* const p_data = target_probs_->data();
    const pllm_device p_device = target_probs_->device();
    std::vector<std::int32_t> status;
    row_probabilities(target_logits, rows, masks,
                      f32_tensor(p_data, p_device, {static_cast<std::int64_t>(rows.size()), vocab_size_}),
                      "probabilities", &status);
    flag_non_finite(sampled, status);
    std::size_t p_row = 0;
    for (const std::size_t s : sampled) {
      const VerifyRequest& r = requests[s];
      if (non_finite[s]) {
        p_row += r.drafts.size() + 1;
        continue;
      }
      const StoredDrafts& stored = stored_.at(r.sequence);
      const auto m = static_cast<std::int64_t>(r.drafts.size());
      // [1, m, V] and [1, m + 1, V]: pllm_verify_args' layout for one sequence.
      const pllm_tensor q = f32_tensor(stored.probs->data() + stored.probs_offset, stored.probs->device(),
                                       {1, m, vocab_size_});
      const pllm_tensor p = f32_tensor(p_data + p_row * vocab, p_device, {1, m + 1, vocab_size_});
      p_row += r.drafts.size() + 1;
      const std::int32_t num_drafts = static_cast<std::int32_t>(m);
      const std::uint8_t greedy_row = 0;
      const std::uint64_t seed = r.params->seed;
      const std::uint64_t offset = r.outputs.size();
      std::vector<std::int32_t> out_tokens(r.drafts.size() + 1);
      std::int32_t count = 0;
      pllm_verify_args args{sizeof(pllm_verify_args), 1, num_drafts, &num_drafts, r.drafts.data(), &q, &p,
                            &greedy_row, &seed, &offset};
      pllm_verify_output out{sizeof(pllm_verify_output), out_tokens.data(), &count};
      pllm_error error{};
      check_plugin_call(speculator_.api().verify(speculator_.get(), &args, &out, &error), error,
                        speculator_.library(), "verify");
      if (count < 1 || count > num_drafts + 1) {
        throw PluginCallError(PLLM_ERROR_INTERNAL,
                              fmt::format("plugin '{}': verify returned {} tokens for {} drafts",
                                          speculator_.library().name(), count, num_drafts));
      }
      for (int i = 0; i < count; ++i) {
        if (out_tokens[static_cast<std::size_t>(i)] < 0 || out_tokens[static_cast<std::size_t>(i)] >= vocab_size_) {
          throw PluginCallError(PLLM_ERROR_INTERNAL,
                                fmt::format("plugin '{}': verify returned token {} outside the vocabulary",
                                            speculator_.library().name(), out_tokens[static_cast<std::size_t>(i)]));
        }
      }
      out_tokens.resize(static_cast<std::size_t>(count));
      accepted[s] = std::move(out_tokens);
    }
  }
  // Each matcher back to the accepted drafts, then on by the token after them.
  for (std::size_t s = 0; s < n; ++s) {
    const VerifyRequest& r = requests[s];
    if (r.matcher == nullptr) continue;
    if (non_finite[s]) {
      rollback_constrained(r.matcher, static_cast<int>(advanced[s]));
      continue;
    }
    const std::size_t kept = std::min(accepted[s].size() - 1, advanced[s]);
    rollback_constrained(r.matcher, static_cast<int>(advanced[s] - kept));
    const bool greedy_request = is_greedy(*r.params);
    for (std::size_t t = kept; t < accepted[s].size(); ++t) {
      accept_constrained(r.matcher, accepted[s][t], greedy_request ? sampler_.library() : speculator_.library(),
                         greedy_request ? "sample (verify)" : "verify");
    }
  }
  for (const VerifyRequest& r : requests) stored_.erase(r.sequence);
  return accepted;
}

void SpeculativeDecoder::forget(RequestId request) {
  std::erase_if(stored_, [request](const auto& entry) { return entry.second.request == request; });
}

pllm_tensor SpeculativeDecoder::run_draft(std::span<const DraftRow> rows, const pllm_tensor* features,
                                          const std::int32_t* feature_rows) {
  PAGEDLLM_CHECK(features != nullptr ||
                     std::all_of(rows.begin(), rows.end(), [](const DraftRow& r) { return r.tokens.size() == 1; }),
                 "a draft chain continues single-token rows only");
  // Single-token rows are the batch's decodes; the logits follow the caller's row order.
  std::vector<BatchRow> batch_rows;
  batch_rows.reserve(rows.size());
  for (const DraftRow& r : rows) {
    batch_rows.push_back({r.tokens, r.first_position, r.block_table, r.wants_logits ? 1 : 0, r.tokens.size() == 1});
  }
  const BuiltBatch built = build_step_batch(batch_rows, block_size_);

  // Feature rows in the batch's token order: indices into the target's hidden
  // states (which the draft gathers on its device), or into the chain.
  std::vector<std::int32_t> batch_feature_rows(built.batch.token_ids.size());
  std::size_t caller_token = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto first = static_cast<std::size_t>(
        built.batch.query_start_loc[static_cast<std::size_t>(built.batch_row[i])]);
    for (std::size_t j = 0; j < rows[i].tokens.size(); ++j) {
      batch_feature_rows[first + j] = feature_rows[caller_token++];
    }
  }
  const std::vector<std::int32_t> no_hidden_rows;  // the draft returns logits only
  const pllm_batch batch = plugin_batch_view(built.batch, no_hidden_rows);

  if (tensor_parallel_) tensor_parallel_->send_draft(batch, features != nullptr, batch_feature_rows);
  return runner_.draft(speculator_, batch, features, batch_feature_rows.data());
}

void SpeculativeDecoder::sample_drafts(const pllm_tensor& logits, std::span<const pllm_sample_row> rows,
                                       const RowMasks& masks, std::span<const std::int32_t> q_slots,
                                       const ProbsBuffer* q, int round, std::span<std::int32_t> tokens_out) {
  // Each row names its logits row: the sampler reads them where the draft left them.
  std::vector<std::int32_t> status;
  const std::vector<std::int32_t> tokens = sample_tokens(logits, rows, masks, "sample (draft)", &status);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    tokens_out[i] = tokens[i];
    if (status[i] == PLLM_SAMPLE_OK) continue;
    // A constrained row's mask may leave nothing of a draft vocabulary (spec_eagle's
    // draft_vocab_size): no draft there. Otherwise the draft's logits are broken.
    if (masks.empty() || !masks.constrained[i]) {
      throw PluginCallError(PLLM_ERROR_INTERNAL, fmt::format("plugin '{}': draft returned non-finite logits "
                                                             "(NaN or +inf, or all -inf)",
                                                             speculator_.library().name()));
    }
    tokens_out[i] = -1;
  }
  // The rows that drafted a token and keep q, in slot order: q row `round` of
  // their slots. Consecutive slots are one probabilities() call (all of them,
  // unless a constrained request stopped drafting early).
  std::vector<std::size_t> by_slot;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (q_slots[i] < 0 || tokens_out[i] < 0) continue;
    PAGEDLLM_CHECK(q != nullptr, "draft round {}: q slot {} without a q buffer", round, q_slots[i]);
    by_slot.push_back(i);
  }
  std::sort(by_slot.begin(), by_slot.end(), [&](std::size_t a, std::size_t b) { return q_slots[a] < q_slots[b]; });
  const std::int64_t slot_stride = num_speculative_tokens_ * vocab_size_;
  for (std::size_t begin = 0; begin < by_slot.size();) {
    std::size_t end = begin + 1;
    while (end < by_slot.size() && q_slots[by_slot[end]] == q_slots[by_slot[end - 1]] + 1) ++end;
    const std::span<const std::size_t> run(by_slot.data() + begin, end - begin);
    std::vector<pllm_sample_row> run_rows;
    for (const std::size_t i : run) run_rows.push_back(rows[i]);
    const std::int64_t first_slot = q_slots[run.front()];
    PAGEDLLM_CHECK(static_cast<std::size_t>((first_slot + static_cast<std::int64_t>(run.size())) * slot_stride) <=
                       q->floats(),
                   "draft round {}: q slots {}..{} past the buffer", round, first_slot,
                   first_slot + static_cast<std::int64_t>(run.size()) - 1);
    const pllm_tensor probs =
        f32_tensor(q->data() + first_slot * slot_stride + static_cast<std::int64_t>(round) * vocab_size_, q->device(),
                   {static_cast<std::int64_t>(run.size()), vocab_size_}, slot_stride);
    row_probabilities(logits, run_rows, masks.select(run), probs, "probabilities (draft)");
    begin = end;
  }
}

std::shared_ptr<const SpeculativeDecoder::ProbsBuffer> SpeculativeDecoder::draft_probs_buffer(std::size_t floats) {
  std::shared_ptr<const ProbsBuffer> reused;
  std::erase_if(draft_probs_, [&](const std::shared_ptr<const ProbsBuffer>& buffer) {
    if (buffer.use_count() > 1) return false;  // drafts stored in it wait for verify()
    if (!reused && buffer->floats() >= floats) {
      reused = buffer;
      return false;
    }
    return true;
  });
  if (reused) return reused;
  const auto slot = static_cast<std::size_t>(num_speculative_tokens_) * static_cast<std::size_t>(vocab_size_);
  auto buffer = std::make_shared<const ProbsBuffer>(speculator_, rounded_up((floats + slot - 1) / slot) * slot,
                                                    device_);
  draft_probs_.push_back(buffer);
  return buffer;
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
  pllm_tensor logits = run_draft(rows, &target_hidden, hidden_rows.data());

  // Which requests draft, and their per-draft sampling rows: the draft stream's
  // seed, offsets continuing the request's output, drafts so far as history.
  std::vector<std::size_t> drafting;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].num_drafts > 0) drafting.push_back(i);
  }
  std::vector<pllm_sampling_params> params(drafting.size());
  std::vector<std::vector<std::int32_t>> histories(drafting.size());
  // The q of sampled requests (greedy drafts need none: verify() matches them
  // against the target's argmax) goes to one buffer of [slots, K, vocab] on
  // the model's device. Slots follow the number of drafts, most first, so the
  // requests still drafting in round i hold slots 0..n_i - 1 and one
  // probabilities() call writes their q rows (more where a constrained request
  // stopped early: sample_drafts()).
  std::vector<std::size_t> by_drafts;
  for (std::size_t d = 0; d < drafting.size(); ++d) {
    const DraftRequest& r = requests[drafting[d]];
    PAGEDLLM_CHECK(r.num_drafts <= num_speculative_tokens_, "sequence {}: {} drafts asked of K = {}", r.sequence,
                   r.num_drafts, num_speculative_tokens_);
    if (!is_greedy(*r.params)) by_drafts.push_back(d);
  }
  std::stable_sort(by_drafts.begin(), by_drafts.end(), [&](std::size_t a, std::size_t b) {
    return requests[drafting[a]].num_drafts > requests[drafting[b]].num_drafts;
  });
  std::vector<std::int32_t> q_slot(drafting.size(), -1);
  for (std::size_t slot = 0; slot < by_drafts.size(); ++slot) q_slot[by_drafts[slot]] = static_cast<std::int32_t>(slot);
  const std::size_t q_slot_floats = static_cast<std::size_t>(num_speculative_tokens_) * vocab;
  const std::shared_ptr<const ProbsBuffer> q =
      by_drafts.empty() ? nullptr : draft_probs_buffer(by_drafts.size() * q_slot_floats);
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
    stored.probs = q_slot[d] < 0 ? nullptr : q;
    stored.probs_offset = q_slot[d] < 0 ? 0 : static_cast<std::size_t>(q_slot[d]) * q_slot_floats;
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
  // Structured output: a constrained request's matcher follows its drafts
  // (advanced[d] of them) for the next round's mask, and goes back at the end.
  std::vector<int> advanced(drafting.size(), 0);
  for (int round = 0; !active.empty(); ++round) {
    std::vector<pllm_sample_row> sample_rows;
    std::vector<std::int32_t> q_slots;
    std::vector<pllm_constraint_matcher*> matchers;
    std::vector<std::size_t> constrained_rows;
    for (const std::size_t d : active) {
      const DraftRequest& r = requests[drafting[d]];
      if (r.matcher != nullptr) {
        matchers.push_back(r.matcher);
        constrained_rows.push_back(sample_rows.size());
      }
      // Logits row a of the previous draft call is this request's.
      sample_rows.push_back(sample_row(&params[d], r.prompt, histories[d],
                                       static_cast<std::int64_t>(sample_rows.size())));
      q_slots.push_back(q_slot[d]);
    }
    RowMasks masks;
    if (!matchers.empty()) {
      PAGEDLLM_CHECK(structured_output_ != nullptr, "a constrained request without a constraint engine");
      masks.reset(sample_rows.size(), structured_output_->words());
      fill_masks(matchers, constrained_rows, masks);
    }
    std::vector<std::int32_t> tokens(active.size());
    sample_drafts(logits, sample_rows, masks, q_slots, q.get(), round, tokens);
    std::vector<std::size_t> next_active;
    std::vector<std::int32_t> feature_rows;
    std::vector<DraftRow> chain;
    std::vector<std::int32_t> chain_tokens(active.size());
    for (std::size_t a = 0; a < active.size(); ++a) {
      const std::size_t d = active[a];
      const DraftRequest& r = requests[drafting[d]];
      if (tokens[a] < 0) continue;  // the grammar left the draft nothing: its drafts end here
      if (r.matcher != nullptr) {
        accept_constrained(r.matcher, tokens[a], sampler_.library(), "sample (draft)");
        ++advanced[d];
      }
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
    logits = run_draft(chain, nullptr, feature_rows.data());
    active = std::move(next_active);
  }
  for (std::size_t d = 0; d < drafting.size(); ++d) {
    const DraftRequest& r = requests[drafting[d]];
    if (r.matcher != nullptr) rollback_constrained(r.matcher, advanced[d]);
    if (drafts[drafting[d]].empty()) stored_.erase(r.sequence);
  }
  return drafts;
}

}  // namespace pagedllm
