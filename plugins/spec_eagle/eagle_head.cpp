#include "eagle_head.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "pagedllm/sdk.hpp"
#include "pagedllm/sdk/cpp/float_convert.hpp"
#include "llama_cpu/cpu_kernels.h"
#include "llama_cpu/rope.h"
#include "llama_cpu/weight_loader.h"
#include "draft_inputs.h"
#include "draft_vocab.h"
#include "eagle_config.h"

namespace pagedllm::spec_eagle {

namespace {

// The ranks in the target's tensor-parallel group (1 without one).
int32_t group_size(const pllm_collectives_ref* collectives) {
  if (!collectives || !collectives->api || !collectives->comm) return 1;
  pllm_communicator_info group{};
  group.struct_size = sizeof group;
  pllm_error error{};
  const pllm_status status = collectives->api->get_info(collectives->comm, &group, &error);
  if (status != PLLM_OK) throw pllm::Error(status, std::string("spec_eagle: collectives get_info: ") + error.message);
  return group.world_size;
}

}  // namespace

EagleHead::EagleHead(const std::filesystem::path& draft_dir, const pllm_speculator_target& target,
                     std::vector<int32_t> draft_vocab, int num_threads, const pllm_collectives_ref* collectives,
                     llama_cpu::Bf16Compute bf16_compute)
    : full_config_(load_eagle_config(draft_dir, target, group_size(collectives))),
      shard_(llama_cpu::TensorParallelShard::join(full_config_, collectives, "spec_eagle")),
      config_(shard_ ? shard_->config() : full_config_),
      pool_(num_threads),
      inv_freq_(llama::rope_inv_freq(config_)),
      bf16_compute_(bf16_compute),
      draft_vocab_(std::move(draft_vocab)) {
  llama_cpu::use_single_threaded_blas();
  target_layers_ = target.info->num_layers;
  bind_target(target);
  load_weights(draft_dir);
}

void EagleHead::bind_target(const pllm_speculator_target& target) {
  const int64_t v = full_config_.vocab_size, h = full_config_.hidden_size;
  const int64_t vocab_first = shard_ ? shard_->vocab_first() : 0, vocab_rows = shard_ ? shard_->vocab_rows() : v;
  const SharedWeights shared =
      shared_weights(target, full_config_, {PLLM_DEVICE_CPU, 0}, PLLM_DTYPE_INVALID, vocab_rows);
  embed_ = {shared.embed.data, shared.embed.dtype};
  embed_stride_ = shared.embed.strides[0];
  // linear() reads the weight as a dense [vocab, hidden] matrix.
  if (shared.lm_head.strides[0] != h) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "spec_eagle: the target's lm_head rows are " +
                                                  std::to_string(shared.lm_head.strides[0]) +
                                                  " elements apart; a dense [vocab, hidden] matrix is needed");
  }
  lm_head_ = {shared.lm_head.data, shared.lm_head.dtype};
  lm_head_.bf16_compute = bf16_compute_;
  if (draft_vocab_.empty()) return;
  // A dense copy of the draft vocabulary's rows (this rank's of them), so a
  // draft step streams N x hidden elements instead of vocab x hidden.
  check_draft_vocab(draft_vocab_, v);
  std::vector<int32_t> held;
  for (const int32_t token : draft_vocab_) {
    if (token >= vocab_first && token < vocab_first + vocab_rows) held.push_back(token - int32_t(vocab_first));
  }
  const auto rows = static_cast<int64_t>(held.size());
  const std::size_t row_bytes = std::size_t(h) * llama_cpu::weight_dtype_size(lm_head_.dtype);
  draft_lm_head_.set_dtype(lm_head_.dtype);
  draft_lm_head_.set_bf16_compute(bf16_compute_);
  draft_lm_head_.resize(static_cast<std::size_t>(rows * h));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(static_cast<std::byte*>(draft_lm_head_.data()) + std::size_t(r) * row_bytes,
                lm_head_.rows_from(held[std::size_t(r)], h).data, row_bytes);
  }
  pllm::log_info("spec_eagle: draft vocabulary of ", draft_vocab_.size(), " of ", v, " tokens",
                 shard_ ? " (" + std::to_string(rows) + " in this rank's vocabulary)" : std::string(), " (lm_head ",
                 (std::size_t(rows) * row_bytes) >> 10, " KiB instead of ", (std::size_t(vocab_rows) * row_bytes) >> 10,
                 " KiB)");
  lm_head_ = draft_lm_head_.ref();
  if (shard_) shard_draft_vocab_ = std::move(held);
}

void EagleHead::load_weights(const std::filesystem::path& draft_dir) {
  const int64_t h = full_config_.hidden_size;
  const std::unique_ptr<llama::WeightSource> source = llama::open_weight_source(draft_dir, full_config_);
  const llama::WeightSource& checkpoint = *source;
  std::vector<llama_cpu::WeightPart> parts;
  parts.push_back({"fc.weight", {h, 2 * h}, &fc_, 0});
  if (checkpoint.find("fc.bias")) parts.push_back({"fc.bias", {h}, &fc_bias_, 0});
  fc_.set_bf16_compute(bf16_compute_);
  layer_.set_matrix_bf16_compute(bf16_compute_);
  llama_cpu::add_decoder_layer_parts(parts, full_config_, "layers.0.", layer_, false, shard_ ? &*shard_ : nullptr);
  const llama_cpu::LoadedWeights loaded = llama_cpu::load_weight_parts(checkpoint, parts, pool_);
  if (!loaded.unused.empty()) {
    std::string unused;
    for (const std::string& name : loaded.unused) unused += (unused.empty() ? "" : ", ") + name;
    pllm::log_info("spec_eagle: ignoring checkpoint tensors ", unused,
                   " (the embedding and lm_head are the target's)");
  }
  pllm::log_info("spec_eagle: loaded ", parts.size(), " tensors from ", draft_dir.string(), " (",
                 loaded.stored_bytes >> 10, " KiB stored); draft KV layer ", target_layers_, ", ",
                 pool_.size(), " threads");
}

void EagleHead::draft(const pllm_draft_args& args, pllm_draft_output& out) {
  const DraftInputs in = check_draft_inputs(args, out, full_config_, chain_rows_, {PLLM_DEVICE_CPU, 0}, false);
  const pllm_batch& b = *in.batch;
  const int64_t tokens = b.num_tokens, h = full_config_.hidden_size, v = full_config_.vocab_size;
  const auto n = [](int64_t count) { return static_cast<std::size_t>(count); };
  // Row t's feature: the target's hidden row feature_rows[t], or the kept
  // chain's row chain_rows[t] (row t itself without chain_rows).
  const auto feature = [&](int64_t t) -> const float* {
    if (!in.continues_chain()) return in.feature(t);
    return chain_.data() + (in.chain_rows ? int64_t(in.chain_rows[t]) : t) * h;
  };
  // embed(token_ids[t]): the rows of this rank's vocabulary, the others zero
  // here and summed in from their rank (exact: one rank holds each row).
  const int64_t vocab_first = shard_ ? shard_->vocab_first() : 0, vocab_rows = shard_ ? shard_->vocab_rows() : v;
  float* embed = embed_rows_.reserve(n(tokens * h));
  llama_cpu::parallel_rows(pool_, tokens, h, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t row = int64_t(b.token_ids[t]) - vocab_first;
      if (row >= 0 && row < vocab_rows) {
        pllm::to_f32(embed_.rows_from(row, embed_stride_).data, embed_.dtype, embed + t * h, h);
      } else {
        std::fill(embed + t * h, embed + (t + 1) * h, 0.0f);
      }
    }
  });
  chain_rows_ = -1;  // a failure below leaves no chain to continue
  if (shard_ && tokens > 0) shard_->all_reduce(embed, tokens * h, "the draft's embedding");
  // input row t = [embed(token_ids[t]) | feature t]
  float* input = input_.reserve(n(tokens * 2 * h));
  llama_cpu::parallel_rows(pool_, tokens, 2 * h, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      std::memcpy(input + t * 2 * h, embed + t * h, n(h) * sizeof(float));
      std::memcpy(input + t * 2 * h + h, feature(t), n(h) * sizeof(float));
    }
  });

  float* x = x_.reserve(n(tokens * h));
  llama_cpu::linear(pool_, input, 2 * h, tokens, fc_.ref(), h, 2 * h, x, h, false);
  if (!fc_bias_.empty()) {
    llama_cpu::parallel_rows(pool_, tokens, h, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        for (int64_t i = 0; i < h; ++i) x[t * h + i] += fc_bias_.f32()[i];
      }
    });
  }
  scratch_.prepare(pool_, config_, inv_freq_, b.positions, tokens);
  llama_cpu::decoder_layer_forward(pool_, config_, layer_, x, scratch_, *args.attention, target_layers_, "spec_eagle",
                                   shard_ ? &shard_->layer_rank() : nullptr);

  // The predicted features of the logits rows: lm_head's input, and the next
  // chain step's features.
  chain_.resize(n(int64_t(b.num_logits) * h));
  for (int32_t i = 0; i < b.num_logits; ++i) {
    std::memcpy(chain_.data() + i * h, x + int64_t(b.logits_indices[i]) * h, n(h) * sizeof(float));
  }
  float* logits = lm_head_logits(chain_.data(), b.num_logits);
  chain_rows_ = b.num_logits;
  *out.logits = llama_cpu::host_tensor(logits, {b.num_logits, v});
}

float* EagleHead::lm_head_logits(const float* features, int64_t rows) {
  const int64_t h = full_config_.hidden_size, v = full_config_.vocab_size;
  const auto n = [](int64_t count) { return static_cast<std::size_t>(count); };
  // Without a shard the columns are the vocabulary; with one, this rank's
  // vocab_shard() columns of it, gathered below.
  const int64_t columns = shard_ ? shard_->vocab_shard() : v;
  float* mine = nullptr;
  if (draft_vocab_.empty()) {
    const int64_t held = shard_ ? shard_->vocab_rows() : v;
    mine = (shard_ ? shard_logits_ : logits_).reserve(n(rows * columns));
    if (held < columns) std::fill(mine, mine + rows * columns, 0.0f);  // the last rank's padding
    if (held > 0) llama_cpu::linear(pool_, features, h, rows, lm_head_, held, h, mine, columns, false);
  } else {
    const std::vector<int32_t>& ids = shard_ ? shard_draft_vocab_ : draft_vocab_;
    const auto held = static_cast<int64_t>(ids.size());
    float* compact = draft_logits_.reserve(n(rows * std::max<int64_t>(held, 1)));
    if (held > 0) llama_cpu::linear(pool_, features, h, rows, lm_head_, held, h, compact, held, false);
    mine = vocab_logits_.scatter(ids, compact, rows, columns);
  }
  if (!shard_) return mine;
  float* gathered = gathered_logits_.reserve(n(shard_->size() * rows * columns));
  float* logits = logits_.reserve(n(rows * v));
  shard_->gather_vocab_columns(mine, rows, gathered, logits, "the draft's logits");
  return logits;
}

}  // namespace pagedllm::spec_eagle
