#pragma once
// A paged-attention scenario: sequences with dense per-position Q/K/V, their
// blocks scattered over a permuted pool, and steps that write chunks of them
// through one or more backends and compare every output with a dense
// reference attention (plain softmax(QK^T * scale) V with a causal mask, in
// double, over contiguous K/V).

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/plugins/attention_cpu/attention_harness.h"
#include "tests/support/thrown.h"

namespace attention_test {

struct Config {
  int32_t num_layers = 1;
  int32_t num_kv_heads = 2;
  int32_t group = 1;  // query heads per kv head (GQA ratio)
  int32_t head_dim = 64;
  int32_t block_size = 16;
  pllm_dtype dtype = PLLM_DTYPE_F32;  // cache and activations
  int32_t sliding_window = 0;         // > 0: every layer's window (keys (p - window, p])
  int32_t num_heads() const { return num_kv_heads * group; }
};

// Positions [begin, begin + len) of sequence `seq` are new in a step.
struct Chunk {
  int32_t seq;
  int32_t begin;
  int32_t len;
};

// Tolerance |got - ref| <= atol + rtol * |ref|.
struct Tolerance {
  double atol;
  double rtol;
};

// Dense reference vs plugin: f32 accumulation over at most head_dim + context
// (< 256 here) terms of magnitude <= 1 has a worst-case error of about
// 256 * 2^-24 ~ 1.5e-5 and a typical one near sqrt(256) * 2^-24 ~ 1e-6; 2e-5
// absolute (outputs are convex combinations of V in [-1, 1]) is safe without
// hiding real bugs (a wrong key or a lost block shifts outputs by ~1e-2). For
// f16/bf16 the test feeds values already representable in the format, so the
// only extra error is the final rounding of the output: half an ulp, i.e. the
// unit roundoff u (f16: 2^-11, bf16: 2^-8) relative; we allow 2u relative,
// since a value within the f32 error of a rounding boundary may round to
// either neighbour.
inline Tolerance dense_tolerance(pllm_dtype dtype) {
  if (dtype == PLLM_DTYPE_F16) return {2e-5, 2.0 * 0x1p-11};
  if (dtype == PLLM_DTYPE_BF16) return {2e-5, 2.0 * 0x1p-8};
  return {2e-5, 0.0};
}

class Scenario {
 public:
  Scenario(const Config& config, std::vector<int32_t> seq_lens, uint32_t seed, int32_t spare_blocks = 5)
      : config_(config), seq_lens_(std::move(seq_lens)), rng_(seed) {
    const int32_t bs = config_.block_size;
    int32_t total = 0;
    for (int32_t len : seq_lens_) {
      const int32_t blocks = (len + bs - 1) / bs;
      max_blocks_per_seq_ = std::max(max_blocks_per_seq_, blocks);
      total += blocks;
    }
    num_device_blocks_ = total + spare_blocks;
    // A permuted pool: sequences own scattered, non-contiguous blocks.
    std::vector<int32_t> pool(static_cast<std::size_t>(num_device_blocks_));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng_);
    std::size_t next = 0;
    for (int32_t len : seq_lens_) {
      std::vector<int32_t> table(std::size_t(max_blocks_per_seq_), -1);
      for (int32_t i = 0; i < (len + bs - 1) / bs; ++i) table[std::size_t(i)] = pool[next++];
      tables_.push_back(std::move(table));
    }
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    auto fill = [&](std::size_t n) {
      std::vector<float> v(n);
      for (auto& x : v) x = round_to(config_.dtype, uniform(rng_));
      return v;
    };
    const auto hd = std::size_t(config_.head_dim);
    for (int32_t layer = 0; layer < config_.num_layers; ++layer) {
      for (int32_t len : seq_lens_) {
        q_.push_back(fill(std::size_t(len) * std::size_t(config_.num_heads()) * hd));
        k_.push_back(fill(std::size_t(len) * std::size_t(config_.num_kv_heads) * hd));
        v_.push_back(fill(std::size_t(len) * std::size_t(config_.num_kv_heads) * hd));
      }
    }
  }

  const Config& config() const { return config_; }
  int32_t num_device_blocks() const { return num_device_blocks_; }
  std::vector<int32_t>& table(int32_t seq) { return tables_[std::size_t(seq)]; }
  std::mt19937& rng() { return rng_; }
  float scale() const { return 1.0f / std::sqrt(float(config_.head_dim)); }

  pllm_kv_cache_spec spec() const {
    pllm_kv_cache_spec s{};
    s.struct_size = sizeof s;
    s.num_layers = config_.num_layers;
    s.num_kv_heads = config_.num_kv_heads;
    s.head_dim = config_.head_dim;
    s.block_size = config_.block_size;
    s.dtype = config_.dtype;
    return s;
  }

  // Fills every slot of the device pool with NaN K/V (through the write path:
  // one single-token sequence per slot), so any read beyond a sequence's
  // context shows up as NaN in its output. `B` is Backend or a wrapper with
  // its plan/run (attention_cuda's tests stage host buffers on the device).
  template <class B>
  void poison(B& backend) const {
    const int32_t slots = num_device_blocks_ * config_.block_size;
    const HostBatch sb = pagedllm::tools::every_slot_batch(slots, config_.block_size, /*max_blocks_per_seq=*/1);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const auto hd = config_.head_dim;
    TypedBuffer q(config_.dtype, std::vector<float>(std::size_t(slots * config_.num_heads() * hd), 0.0f));
    TypedBuffer kv(config_.dtype, std::vector<float>(std::size_t(slots * config_.num_kv_heads * hd), nan));
    TypedBuffer out(config_.dtype, std::vector<float>(q.size(), 0.0f));
    const pllm_batch b = sb.view();
    backend.plan(b);
    for (int32_t layer = 0; layer < config_.num_layers; ++layer) {
      const LayerTensors tensors = layer_args(q, kv, kv, out, slots);
      backend.run(layer, tensors.args());
    }
  }

  // Writes positions [0, len) of every sequence cheaply: each token is its own
  // one-token "sequence" (attention over a single key), for benchmarks that
  // need long contexts without paying for their prefill.
  template <class B>
  void fill(B& backend, const std::vector<int32_t>& lens) const {
    std::vector<Chunk> tokens;
    for (std::size_t s = 0; s < lens.size(); ++s) {
      for (int32_t p = 0; p < lens[s]; ++p) tokens.push_back({int32_t(s), p, 1});
    }
    HostBatch sb = make_batch(tokens);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      sb.seq_lens[i] = 1;
      const auto& table = tables_[std::size_t(tokens[i].seq)];
      sb.block_tables[i * std::size_t(max_blocks_per_seq_)] = table[std::size_t(tokens[i].begin / config_.block_size)];
    }
    const pllm_batch b = sb.view();
    backend.plan(b);
    for (int32_t layer = 0; layer < config_.num_layers; ++layer) {
      TypedBuffer q(config_.dtype, gather(q_, layer, tokens, config_.num_heads()));
      TypedBuffer k(config_.dtype, gather(k_, layer, tokens, config_.num_kv_heads));
      TypedBuffer v(config_.dtype, gather(v_, layer, tokens, config_.num_kv_heads));
      TypedBuffer out(config_.dtype, std::vector<float>(q.size(), 0.0f));
      const LayerTensors tensors = layer_args(q, k, v, out, b.num_tokens);
      backend.run(layer, tensors.args());
    }
  }

  // A chunked prefill of positions [0, context_lens[s]) of every sequence:
  // steps of one chunk per unfinished sequence, each of a random length in
  // [1, 2 * block_size + 3] (so chunks start and end mid-block).
  std::vector<std::vector<Chunk>> prefill_steps(const std::vector<int32_t>& context_lens) {
    std::vector<std::vector<Chunk>> steps;
    std::vector<int32_t> written(context_lens.size(), 0);
    std::uniform_int_distribution<int32_t> chunk_len(1, 2 * config_.block_size + 3);
    for (;;) {
      std::vector<Chunk> chunks;
      for (std::size_t s = 0; s < context_lens.size(); ++s) {
        const int32_t left = context_lens[s] - written[s];
        if (left == 0) continue;
        const int32_t len = std::min(left, chunk_len(rng_));
        chunks.push_back({int32_t(s), written[s], len});
        written[s] += len;
      }
      if (chunks.empty()) return steps;
      steps.push_back(std::move(chunks));
    }
  }

  // Blocks of the pool no sequence's table uses.
  std::vector<int32_t> free_blocks() const {
    std::vector<bool> used(static_cast<std::size_t>(num_device_blocks_), false);
    for (const auto& t : tables_) {
      for (int32_t b : t) {
        if (b >= 0) used[std::size_t(b)] = true;
      }
    }
    std::vector<int32_t> free;
    for (int32_t b = 0; b < num_device_blocks_; ++b) {
      if (!used[std::size_t(b)]) free.push_back(b);
    }
    return free;
  }

  // write = false: every row gets slot -1 and NaN K/V, so the step only reads
  // the cache (and NaN in the output shows a row that was written anyway).
  HostBatch make_batch(const std::vector<Chunk>& chunks, int32_t num_decode_seqs = 0, bool write = true) const {
    const int32_t bs = config_.block_size;
    HostBatch sb;
    sb.block_size = bs;
    sb.max_blocks_per_seq = max_blocks_per_seq_;
    sb.num_decode_seqs = num_decode_seqs;
    for (const Chunk& c : chunks) {
      const auto& table = tables_[std::size_t(c.seq)];
      for (int32_t p = c.begin; p < c.begin + c.len; ++p) {
        sb.token_ids.push_back(p);
        sb.positions.push_back(p);
        sb.slot_mapping.push_back(write ? int64_t(table[std::size_t(p / bs)]) * bs + p % bs : -1);
      }
      sb.query_start_loc.push_back(int32_t(sb.slot_mapping.size()));
      sb.seq_lens.push_back(c.begin + c.len);
      sb.block_tables.insert(sb.block_tables.end(), table.begin(), table.end());
    }
    return sb;
  }

  // Runs one step (every layer) on `backend` and returns the outputs, one
  // buffer per layer, as f32 [num_tokens, num_heads, head_dim].
  template <class B>
  std::vector<std::vector<float>> run_step(B& backend, const std::vector<Chunk>& chunks,
                                           int32_t num_decode_seqs = 0, bool write = true) const {
    const HostBatch sb = make_batch(chunks, num_decode_seqs, write);
    const pllm_batch b = sb.view();
    backend.plan(b);
    std::vector<std::vector<float>> outputs;
    for (int32_t layer = 0; layer < config_.num_layers; ++layer) {
      TypedBuffer q(config_.dtype, gather(q_, layer, chunks, config_.num_heads()));
      TypedBuffer k(config_.dtype, gather(k_, layer, chunks, config_.num_kv_heads));
      TypedBuffer v(config_.dtype, gather(v_, layer, chunks, config_.num_kv_heads));
      if (!write) {
        for (std::size_t i = 0; i < k.size(); ++i) {
          k.set(i, std::numeric_limits<float>::quiet_NaN());
          v.set(i, std::numeric_limits<float>::quiet_NaN());
        }
      }
      // A sentinel the kernels must overwrite everywhere.
      TypedBuffer out(config_.dtype, std::vector<float>(q.size(), 1234.0f));
      const LayerTensors tensors = layer_args(q, k, v, out, b.num_tokens);
      backend.run(layer, tensors.args());
      outputs.push_back(out.to_f32());
    }
    return outputs;
  }

  // The dense reference outputs of a step, per layer, in double.
  std::vector<std::vector<double>> dense(const std::vector<Chunk>& chunks) const {
    const int32_t hd = config_.head_dim, heads = config_.num_heads(), kvh = config_.num_kv_heads;
    std::vector<std::vector<double>> outputs;
    for (int32_t layer = 0; layer < config_.num_layers; ++layer) {
      std::vector<double> out;
      for (const Chunk& c : chunks) {
        const auto& q = q_[index(layer, c.seq)];
        const auto& k = k_[index(layer, c.seq)];
        const auto& v = v_[index(layer, c.seq)];
        for (int32_t p = c.begin; p < c.begin + c.len; ++p) {
          for (int32_t h = 0; h < heads; ++h) {
            const int32_t g = h / config_.group;
            const int32_t lo = config_.sliding_window > 0 ? std::max(0, p - config_.sliding_window + 1) : 0;
            std::vector<double> w(std::size_t(p) + 1);
            double max_score = -std::numeric_limits<double>::infinity();
            for (int32_t j = lo; j <= p; ++j) {
              double dot = 0;
              for (int32_t d = 0; d < hd; ++d) {
                dot += double(q[(std::size_t(p) * heads + h) * hd + d]) * k[(std::size_t(j) * kvh + g) * hd + d];
              }
              w[std::size_t(j)] = dot * double(scale());
              max_score = std::max(max_score, w[std::size_t(j)]);
            }
            double sum = 0;
            for (int32_t j = lo; j <= p; ++j) sum += (w[std::size_t(j)] = std::exp(w[std::size_t(j)] - max_score));
            for (int32_t d = 0; d < hd; ++d) {
              double acc = 0;
              for (int32_t j = lo; j <= p; ++j) acc += w[std::size_t(j)] * v[(std::size_t(j) * kvh + g) * hd + d];
              out.push_back(acc / sum);
            }
          }
        }
      }
      outputs.push_back(std::move(out));
    }
    return outputs;
  }

 private:
  std::size_t index(int32_t layer, int32_t seq) const {
    return std::size_t(layer) * seq_lens_.size() + std::size_t(seq);
  }

  std::vector<float> gather(const std::vector<std::vector<float>>& data, int32_t layer, const std::vector<Chunk>& chunks,
                            int32_t heads) const {
    std::vector<float> rows;
    const std::size_t row = std::size_t(heads) * std::size_t(config_.head_dim);
    for (const Chunk& c : chunks) {
      const auto& src = data[index(layer, c.seq)];
      rows.insert(rows.end(), src.begin() + std::ptrdiff_t(std::size_t(c.begin) * row),
                  src.begin() + std::ptrdiff_t(std::size_t(c.begin + c.len) * row));
    }
    return rows;
  }

  LayerTensors layer_args(TypedBuffer& q, TypedBuffer& k, TypedBuffer& v, TypedBuffer& out, int64_t tokens) const {
    LayerTensors tensors;
    tensors.query = q.tensor3(tokens, config_.num_heads(), config_.head_dim);
    tensors.key = k.tensor3(tokens, config_.num_kv_heads, config_.head_dim);
    tensors.value = v.tensor3(tokens, config_.num_kv_heads, config_.head_dim);
    tensors.output = out.tensor3(tokens, config_.num_heads(), config_.head_dim);
    tensors.scale = scale();
    tensors.sliding_window = config_.sliding_window;
    return tensors;
  }

  Config config_;
  std::vector<int32_t> seq_lens_;
  std::mt19937 rng_;
  int32_t max_blocks_per_seq_ = 0;
  int32_t num_device_blocks_ = 0;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<std::vector<float>> q_, k_, v_;  // [layer * num_seqs + seq]: [seq_len, heads, head_dim]
};

// The first element where |got - ref| > atol + rtol * |ref| (or got is not
// finite), as a message; empty when all match. `max_error` gets the largest
// absolute difference.
template <class Ref>
std::string compare(const std::vector<float>& got, const std::vector<Ref>& ref, Tolerance tol, double* max_error) {
  if (got.size() != ref.size()) return "size " + std::to_string(got.size()) + " != " + std::to_string(ref.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(double(got[i]) - double(ref[i]));
    if (!std::isfinite(got[i]) || diff > tol.atol + tol.rtol * std::abs(double(ref[i]))) {
      std::ostringstream m;
      m << "element " << i << ": got " << got[i] << ", expected " << double(ref[i]) << " (diff " << diff << ")";
      return m.str();
    }
    worst = std::max(worst, diff);
  }
  if (max_error) *max_error = std::max(*max_error, worst);
  return {};
}

// The error a plugin call made, which must fail.
inline pagedllm::PluginCallError call_error(const std::function<void()>& f) {
  return pagedllm::testing::thrown<pagedllm::PluginCallError>(f);
}

// A read-only decode of the sequence's last position (slot -1, NaN K/V): the
// output depends only on what the cache holds for positions [0, len).
template <class B>
void expect_cache_holds_sequence(const Scenario& scenario, B& backend, int32_t seq, int32_t len) {
  const std::vector<Chunk> read = {{seq, len - 1, 1}};
  const auto expected = scenario.dense(read);
  const auto got = scenario.run_step(backend, read, 1, /*write=*/false);
  for (int32_t layer = 0; layer < scenario.config().num_layers; ++layer) {
    INFO("layer " << layer);
    REQUIRE(compare(got[std::size_t(layer)], expected[std::size_t(layer)], dense_tolerance(scenario.config().dtype),
                    nullptr) == "");
  }
}

// copy_blocks, swap_out and swap_in observed through attention, one SECTION
// each: a 40-token sequence is written, its blocks copied (or swapped out,
// the device pool poisoned, and swapped back in elsewhere), its table pointed
// at the copies, and a read-only decode must attend exactly as before.
// `backend` is fresh (no cache yet); `config` has at least one layer.
template <class B>
void check_block_round_trips(const Config& config, B& backend) {
  const int32_t len = 40;
  const int32_t blocks = (len + config.block_size - 1) / config.block_size;
  Scenario scenario(config, {len}, 11u, /*spare_blocks=*/blocks + 1);
  const int64_t host_blocks = blocks + 2;
  backend.allocate_cache(scenario.spec(), scenario.num_device_blocks(), host_blocks);
  scenario.poison(backend);
  scenario.run_step(backend, {{0, 0, len}});
  expect_cache_holds_sequence(scenario, backend, 0, len);

  const std::vector<int32_t> original(scenario.table(0).begin(), scenario.table(0).begin() + blocks);
  const std::vector<int32_t> spare = scenario.free_blocks();
  REQUIRE(spare.size() >= std::size_t(blocks) + 1);

  SECTION("copy-on-write copies reach every layer") {
    std::vector<pllm_block_copy> pairs;
    for (int32_t i = 0; i < blocks; ++i) pairs.push_back({original[std::size_t(i)], spare[std::size_t(i)]});
    backend.copy_blocks(pairs);
    std::copy(spare.begin(), spare.begin() + blocks, scenario.table(0).begin());
    expect_cache_holds_sequence(scenario, backend, 0, len);
  }

  SECTION("pairs apply in order: a chain through a spare block") {
    // After the sequence's blocks are copied, spare[0] goes to spare[blocks]
    // and back: the last pair must copy what the one before it wrote, or
    // spare[0] ends up with the pool's NaN poison.
    std::vector<pllm_block_copy> pairs;
    for (int32_t i = 0; i < blocks; ++i) pairs.push_back({original[std::size_t(i)], spare[std::size_t(i)]});
    pairs.push_back({spare[0], spare[std::size_t(blocks)]});
    pairs.push_back({spare[std::size_t(blocks)], spare[0]});
    backend.copy_blocks(pairs);
    std::copy(spare.begin(), spare.begin() + blocks, scenario.table(0).begin());
    expect_cache_holds_sequence(scenario, backend, 0, len);
  }

  SECTION("swap out, clobber the device pool, swap in elsewhere") {
    std::vector<pllm_block_copy> out, in;
    for (int32_t i = 0; i < blocks; ++i) {
      const int64_t host = host_blocks - 1 - i;  // reversed, to catch an identity mapping
      out.push_back({original[std::size_t(i)], host});
      in.push_back({host, spare[std::size_t(i)]});
    }
    backend.swap_out(out);
    scenario.poison(backend);  // the device copy is gone: only the host pool has the data
    backend.swap_in(in);
    std::copy(spare.begin(), spare.begin() + blocks, scenario.table(0).begin());
    expect_cache_holds_sequence(scenario, backend, 0, len);
  }
}

}  // namespace attention_test
