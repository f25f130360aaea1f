#pragma once
// Drives spec_eagle the way core will: the real spec_eagle, models_llama and
// attention .so files loaded through the host's registry (attention_cpu, or on
// CUDA the backend a llama_test::Placement names), the draft attached to a real
// target model on the same device, and (EagleRunner) the draft's KV layer in
// the target's paged pool, with permuted non-contiguous block tables whose
// every slot first holds NaN K/V. Throws std::runtime_error /
// pagedllm::PluginCallError; Catch-free so any test file can use it.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/plugins/models_llama/paged_runner.h"
#include "tools/common/host_batch.h"

namespace eagle_test {

using llama_test::Attention;
using llama_test::expect;
using llama_test::Model;
using llama_test::Placement;

inline const std::filesystem::path kTargetDir = PAGEDLLM_SOURCE_DIR "/models/pagedllm-tiny";
inline const std::filesystem::path kDraftDir = PAGEDLLM_SOURCE_DIR "/models/pagedllm-tiny-eagle";

inline std::shared_ptr<pagedllm::PluginLibrary> speculator_library() {
  return llama_test::registry().load("spec_eagle", PLLM_PLUGIN_KIND_SPECULATOR, "speculative.plugin");
}

// spec_eagle attached to `target`. `model_api` replaces the target's table
// when given (to test a target without get_tensor).
class Speculator {
 public:
  Speculator(const std::filesystem::path& draft_dir, const Model& target, const std::string& options = "{}",
             int32_t num_speculative_tokens = 4, const pllm_model_api* model_api = nullptr,
             pllm_device device = {PLLM_DEVICE_CPU, 0})
      : target_info_(target.info()) {
    const std::string path = draft_dir.string();
    pllm_speculator_create_args args{};
    args.struct_size = sizeof args;
    args.options_json = options.c_str();
    args.draft_path = path.c_str();
    args.device = device;
    target_.struct_size = sizeof target_;
    target_.model_api = model_api ? model_api : &target.api();
    target_.model = target.handle();
    target_.info = &target_info_;
    args.target = &target_;
    args.num_speculative_tokens = num_speculative_tokens;
    instance_ = pagedllm::create_plugin_instance<pllm_speculator_api, pllm_speculator>(speculator_library(), args);
  }

  pllm_speculator_info info() const {
    pllm_speculator_info out{};
    out.struct_size = sizeof out;
    pllm_error error{};
    check(instance_.api().get_info(instance_.get(), &out, &error), error, "get_info");
    return out;
  }

  // Logits [batch.num_logits, vocab] of one draft forward; `feature_rows`
  // picks row t's feature among `features`' rows, or, without features, the
  // chain rows (null: row t itself).
  pllm_tensor draft(const pllm_batch& batch, const pllm_tensor* features, pllm_attention_ref attention,
                    const int32_t* feature_rows = nullptr) {
    pllm_draft_args args{};
    args.struct_size = sizeof args;
    args.batch = &batch;
    args.features = features;
    args.attention = &attention;
    args.feature_rows = feature_rows;
    pllm_tensor logits{};
    logits.struct_size = sizeof logits;
    pllm_draft_output out{sizeof out, &logits};
    pllm_error error{};
    check(instance_.api().draft(instance_.get(), &args, &out, &error), error, "draft");
    return logits;
  }

  void verify(const pllm_verify_args& args, pllm_verify_output& out) {
    pllm_error error{};
    check(instance_.api().verify(instance_.get(), &args, &out, &error), error, "verify");
  }

  // `struct_size`: what the caller declares of its output struct.
  pllm_speculator_buffer allocate_buffer(uint64_t bytes, uint32_t struct_size = sizeof(pllm_speculator_buffer)) {
    pllm_speculator_buffer out{};
    out.struct_size = struct_size;
    pllm_error error{};
    check(instance_.api().allocate_buffer(instance_.get(), bytes, &out, &error), error, "allocate_buffer");
    return out;
  }

  void free_buffer(void* data) {
    pllm_error error{};
    check(instance_.api().free_buffer(instance_.get(), data, &error), error, "free_buffer");
  }

 private:
  void check(pllm_status status, const pllm_error& error, const char* what) const {
    pagedllm::check_plugin_call(status, error, instance_.library(), what);
  }
  pllm_model_info target_info_;
  pllm_speculator_target target_{};
  pagedllm::SpeculatorInstance instance_;
};

// A sequence of `count` tokens of pagedllm-tiny's vocabulary: bos (0), then
// ids drawn from [1, 8192) by `seed`.
inline std::vector<int32_t> random_tokens(int32_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(1, 8191);
  std::vector<int32_t> out{0};
  while (int32_t(out.size()) < count) out.push_back(token(rng));
  return out;
}

// v[begin, end).
inline std::vector<int32_t> slice(const std::vector<int32_t>& v, std::size_t begin, std::size_t end) {
  return {v.begin() + std::ptrdiff_t(begin), v.begin() + std::ptrdiff_t(end)};
}

inline pllm_tensor f32_tensor(const float* data, std::vector<int64_t> shape) {
  pllm_tensor t{};
  t.struct_size = sizeof t;
  t.data = const_cast<float*>(data);
  t.dtype = PLLM_DTYPE_F32;
  t.device = {PLLM_DEVICE_CPU, 0};
  t.ndim = int32_t(shape.size());
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[std::size_t(i)];
    t.strides[i] = stride;
    stride *= shape[std::size_t(i)];
  }
  return t;
}

// The arrays of one verify() call, laid out as pllm_verify_args says: per
// sequence its draft count, K drafts, greedy flag, seed and offset; p
// [rows, K + 1, vocab] and q [rows, K, vocab]. The statistical cases
// (rejection_cases.h) and the device's random calls (cuda_verify_test.cpp)
// both build their args here.
struct VerifyArrays {
  int64_t k = 0;
  std::vector<int32_t> num_drafts, drafts;
  std::vector<float> p, q;
  std::vector<uint8_t> greedy;
  std::vector<uint64_t> seeds, offsets;

  // The args of `rows` sequences over `vocab` ids, with p and q at p_data and
  // q_data on `device`, whose descriptors are written to pt and qt.
  pllm_verify_args verify_args(int64_t rows, int64_t vocab, const float* p_data, const float* q_data,
                               pllm_device device, pllm_tensor& pt, pllm_tensor& qt) const {
    pt = f32_tensor(p_data, {rows, k + 1, vocab});
    qt = f32_tensor(q_data, {rows, k, vocab});
    pt.device = qt.device = device;
    pllm_verify_args a{};
    a.struct_size = sizeof a;
    a.num_seqs = int32_t(rows);
    a.max_draft_tokens = int32_t(k);
    a.num_drafts = num_drafts.data();
    a.draft_token_ids = drafts.data();
    a.draft_probs = &qt;
    a.target_probs = &pt;
    a.greedy = greedy.data();
    a.seeds = seeds.data();
    a.random_offsets = offsets.data();
    return a;
  }
};

// The target and its draft over one paged pool of target + draft layers,
// with block tables handed out from a shuffled pool.
class EagleRunner {
 public:
  // One sequence's rows of a step: positions [first, first + count), with
  // token_ids[i] the token of row i.
  struct Chunk {
    int32_t seq;
    int32_t first;
    std::vector<int32_t> token_ids;
  };
  struct Batch {
    pagedllm::tools::HostBatch host;
    std::vector<int32_t> logits_rows, hidden_rows;
    pllm_batch view;  // of host, with the logits and hidden rows
  };

  EagleRunner(const std::string& model_options, const std::string& attention_options, const std::string& draft_options,
              Placement placement = {}, int32_t block_size = 4, int32_t num_blocks = 48, uint32_t seed = 11)
      : placement_(std::move(placement)),
        target_(kTargetDir, model_options, placement_.dtype, placement_.device),
        attention_(attention_options, placement_),
        draft_(kDraftDir, target_, draft_options, 4, nullptr, placement_.device),
        block_size_(block_size),
        rng_(seed) {
    info_ = target_.info();
    const pllm_speculator_info d = draft_.info();
    num_layers_ = info_.num_layers + d.num_draft_layers;
    pllm_kv_cache_spec spec{};
    spec.struct_size = sizeof spec;
    spec.num_layers = num_layers_;
    spec.num_kv_heads = info_.num_kv_heads;
    spec.head_dim = info_.head_dim;
    spec.block_size = block_size;
    spec.dtype = info_.dtype;
    attention_.allocate(spec, num_blocks);
    free_blocks_.resize(std::size_t(num_blocks));
    std::iota(free_blocks_.begin(), free_blocks_.end(), 0);
    std::shuffle(free_blocks_.begin(), free_blocks_.end(), rng_);
    poison(num_blocks);
  }

  Model& target() { return target_; }
  Speculator& draft() { return draft_; }
  pllm_attention_ref attention_ref() const { return attention_.ref(); }
  const pllm_model_info& info() const { return info_; }
  int32_t add_sequence() {
    blocks_.emplace_back();
    return int32_t(blocks_.size() - 1);
  }

  // Lays out `chunks` (decode rows first, as core does) with logits for
  // `logits_rows` and hidden states for `hidden_rows`, and plans it.
  Batch& plan(const std::vector<Chunk>& chunks, std::vector<int32_t> logits_rows, std::vector<int32_t> hidden_rows) {
    Batch& b = batch_;
    b = Batch{};
    pagedllm::tools::HostBatch& h = b.host;
    h.block_size = block_size_;
    h.max_blocks_per_seq = kMaxBlocksPerSeq;
    for (const Chunk& c : chunks) {
      std::vector<int32_t>& blocks = blocks_[std::size_t(c.seq)];
      const int32_t len = int32_t(c.token_ids.size()), seq_len = c.first + len;
      if (len == 1 && c.first > 0) ++h.num_decode_seqs;
      while (int32_t(blocks.size()) * block_size_ < seq_len) {
        expect(!free_blocks_.empty(), "the block pool is exhausted");
        blocks.push_back(free_blocks_.back());
        free_blocks_.pop_back();
      }
      for (int32_t i = 0; i < len; ++i) {
        const int32_t p = c.first + i;
        h.token_ids.push_back(c.token_ids[std::size_t(i)]);
        h.positions.push_back(p);
        h.slot_mapping.push_back(int64_t(blocks[std::size_t(p / block_size_)]) * block_size_ + p % block_size_);
      }
      h.query_start_loc.push_back(int32_t(h.token_ids.size()));
      h.seq_lens.push_back(seq_len);
      std::vector<int32_t> table(std::size_t(kMaxBlocksPerSeq), -1);
      std::copy(blocks.begin(), blocks.end(), table.begin());
      h.block_tables.insert(h.block_tables.end(), table.begin(), table.end());
    }
    b.logits_rows = std::move(logits_rows);
    b.hidden_rows = std::move(hidden_rows);
    pllm_batch& v = b.view;
    v = h.view();
    v.num_logits = int32_t(b.logits_rows.size());
    v.logits_indices = b.logits_rows.data();
    v.num_hidden = int32_t(b.hidden_rows.size());
    v.hidden_indices = b.hidden_rows.data();
    attention_.plan(v);
    return b;
  }

  // A target step: the post-norm hidden states of `hidden_rows`.
  std::vector<std::vector<float>> target_step(const std::vector<Chunk>& chunks, std::vector<int32_t> hidden_rows) {
    const Batch& b = plan(chunks, {}, std::move(hidden_rows));
    return llama_test::rows_of(target_.forward(b.view, attention_.ref()).hidden);
  }

  // A draft step: row t's feature is features[t] ([num_tokens][hidden]), or,
  // when `features` is empty, the draft's own chain (row feature_rows[t] of
  // the previous step's logits when given). Logits of `logits_rows`.
  std::vector<std::vector<float>> draft_step(const std::vector<Chunk>& chunks,
                                             const std::vector<std::vector<float>>& features,
                                             std::vector<int32_t> logits_rows,
                                             const std::vector<int32_t>& feature_rows = {}) {
    const Batch& b = plan(chunks, std::move(logits_rows), {});
    // Features are handed over in reverse row order and picked back by
    // feature_rows, as core hands the target's hidden states by index.
    std::vector<int32_t> rows(features.size());
    std::vector<float> reversed;
    for (std::size_t t = features.size(); t-- > 0;) {
      rows[t] = int32_t(features.size() - 1 - t);
      reversed.insert(reversed.end(), features[t].begin(), features[t].end());
    }
    const pllm_tensor f = f32_tensor(reversed.data(), {int64_t(features.size()), int64_t(info_.hidden_size)});
    const pllm_tensor logits =
        features.empty() ? draft_.draft(b.view, nullptr, attention_.ref(),
                                        feature_rows.empty() ? nullptr : feature_rows.data())
                         : draft_.draft(b.view, &f, attention_.ref(), rows.data());
    expect(logits.ndim == 2 && logits.shape[0] == int64_t(b.logits_rows.size()) && logits.shape[1] == info_.vocab_size,
           "draft logits have the wrong shape");
    return llama_test::rows_of(logits);
  }

 private:
  static constexpr int32_t kMaxBlocksPerSeq = 24;

  // NaN K/V into every slot of every layer, target and draft.
  void poison(int32_t num_blocks) {
    llama_test::poison_every_slot(attention_, placement_, info_, num_layers_, num_blocks * block_size_, block_size_,
                                  kMaxBlocksPerSeq);
  }

  Placement placement_;
  Model target_;
  Attention attention_;
  Speculator draft_;
  pllm_model_info info_{};
  int32_t num_layers_ = 0;
  int32_t block_size_;
  std::mt19937 rng_;
  std::vector<int32_t> free_blocks_;
  std::vector<std::vector<int32_t>> blocks_;
  Batch batch_;
};

}  // namespace eagle_test
