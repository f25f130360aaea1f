#pragma once
// What every attention backend owes the SDK 2.0 contract, shared by the
// attention_cpu and attention_cuda tests (B is the test Backend or the CUDA
// harness, H the raw Backend whose calls go straight through the C table):
//   - structs from other parties (create args, kv spec, batch, layer args, the
//     tensors it points at) of exactly the 2.0 layout or of a newer minor
//     (struct_size larger, fields appended) are accepted; one without the 2.0
//     fields is refused with INVALID_ARGUMENT naming it; nothing crashes;
//   - an unknown dtype (a later minor's, or the enum's 32-bit sentinel) is
//     PLLM_ERROR_UNSUPPORTED, never a crash;
//   - a slot -1 row attends to itself and to the step's other new tokens as
//     the cache holds them (batch.h): rows with a slot are written first, its
//     own key/value rows are never read.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/plugins/attention_cpu/attention_harness.h"
#include "tests/support/thrown.h"

namespace attention_test {

using Catch::Matchers::Contains;

// A struct as the next minor might declare it: this major's fields, then one more.
template <class T>
struct NextMinor {
  T current;
  uint64_t appended = 0x5eed;
  T* get() {
    current.struct_size = sizeof(*this);
    return &current;
  }
};

inline pllm_kv_cache_spec contract_spec(pllm_dtype dtype) {
  pllm_kv_cache_spec spec{};
  spec.struct_size = sizeof spec;
  spec.num_layers = 1;
  spec.num_kv_heads = 1;
  spec.head_dim = 32;
  spec.block_size = 16;
  spec.dtype = dtype;
  return spec;
}

// Calls the C table's create() for `plugin` with args of `struct_size`.
inline pllm_status create_with(const std::string& plugin, pllm_device device, uint32_t struct_size,
                               std::string& message) {
  NextMinor<pllm_attention_create_args> args{};
  args.current.options_json = "{}";
  args.current.device = device;
  pllm_attention_create_args* p = args.get();
  p->struct_size = struct_size;
  const auto library = attention_library(plugin);  // keeps the plugin loaded through the calls
  const pllm_attention_api& api = library->api<pllm_attention_api>();
  pllm_attention_backend* handle = nullptr;
  pllm_error error{};
  const pllm_status status = api.create(p, &handle, &error);
  if (handle) api.destroy(handle);
  message = error.message;
  return status;
}

inline void check_create_args_sizes(const std::string& plugin, pllm_device device) {
  std::string message;
  CHECK(create_with(plugin, device, sizeof(pllm_attention_create_args), message) == PLLM_OK);
  CHECK(create_with(plugin, device, sizeof(NextMinor<pllm_attention_create_args>), message) == PLLM_OK);
  for (const uint32_t too_small : {uint32_t(offsetof(pllm_attention_create_args, device)), 0u}) {
    CHECK(create_with(plugin, device, too_small, message) == PLLM_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(message, Contains(plugin + ": create args: struct_size " + std::to_string(too_small) +
                                 " is too small for the fields SDK 2.0 defines"));
  }
}

// One sequence of one new token at position 0, in block 0 (slot 0).
inline HostBatch one_token_batch(const pllm_kv_cache_spec& spec) {
  HostBatch hb;
  hb.block_size = spec.block_size;
  hb.max_blocks_per_seq = 1;
  hb.token_ids = {0};
  hb.positions = {0};
  hb.query_start_loc = {0, 1};
  hb.seq_lens = {1};
  hb.block_tables = {0};
  hb.slot_mapping = {0};
  return hb;
}

template <class E = pagedllm::PluginCallError, class F>
E refusal(F&& f) {
  return pagedllm::testing::thrown<E>(std::forward<F>(f));
}

// The kv spec and the batch at 2.0 size, at a newer minor's, and too small.
template <class H>
void check_spec_and_batch_sizes(H& backend, const std::string& plugin) {
  pllm_kv_cache_spec spec = contract_spec(PLLM_DTYPE_F32);
  NextMinor<pllm_kv_cache_spec> newer{spec};
  const uint64_t bytes = backend.bytes_per_block(spec);
  CHECK(backend.bytes_per_block(*newer.get()) == bytes);
  for (const uint32_t too_small : {uint32_t(offsetof(pllm_kv_cache_spec, dtype)), 0u}) {
    spec.struct_size = too_small;
    const auto e = refusal([&] { backend.bytes_per_block(spec); });
    CHECK(e.status() == PLLM_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Contains(plugin + ": kv cache spec: struct_size " + std::to_string(too_small)));
  }
  spec.struct_size = sizeof spec;
  backend.allocate_cache(*newer.get(), 4, 0);

  const HostBatch hb = one_token_batch(spec);
  NextMinor<pllm_batch> batch{hb.view()};
  backend.plan(batch.current);
  backend.plan(*batch.get());
  batch.current.struct_size = offsetof(pllm_batch, hidden_indices);
  const auto e = refusal([&] { backend.plan(batch.current); });
  CHECK(e.status() == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(e.what(), Contains(plugin + ": batch: struct_size"));
}

// Layer args and their tensors too small: refused, naming which. `backend`
// has a cache (check_spec_and_batch_sizes).
template <class H>
void check_layer_args_refusals(H& backend, const std::string& plugin) {
  const HostBatch hb = one_token_batch(contract_spec(PLLM_DTYPE_F32));
  backend.plan(hb.view());
  TypedBuffer q(PLLM_DTYPE_F32, std::vector<float>(32, 0.5f));
  LayerTensors t;
  t.query = t.key = t.value = t.output = q.tensor3(1, 1, 32);
  pllm_attention_layer_args args = t.args();
  args.struct_size = offsetof(pllm_attention_layer_args, stream);
  auto e = refusal([&] { backend.run(0, args); });
  CHECK(e.status() == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(e.what(), Contains(plugin + ": layer args: struct_size " +
                                std::to_string(offsetof(pllm_attention_layer_args, stream))));
  args = t.args();
  t.key.struct_size = offsetof(pllm_tensor, strides);
  e = refusal([&] { backend.run(0, args); });
  CHECK(e.status() == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(e.what(), Contains(plugin + ": layer args: key: struct_size"));
  t.key.struct_size = sizeof(pllm_tensor);
  args.output = nullptr;
  e = refusal([&] { backend.run(0, args); });
  CHECK_THAT(e.what(), Contains(plugin + ": layer args: output is null"));
}

// An unknown dtype in the kv spec and in a tensor: UNSUPPORTED, not a crash.
template <class H>
void check_unknown_dtypes(H& backend, const std::string& plugin) {
  for (const auto dtype : {pllm_dtype(99), PLLM_DTYPE_FORCE_32BIT}) {
    const pllm_kv_cache_spec spec = contract_spec(dtype);
    const auto e = refusal([&] { backend.bytes_per_block(spec); });
    CHECK(e.status() == PLLM_ERROR_UNSUPPORTED);
    CHECK_THAT(e.what(), Contains(plugin));
  }
}

// The naive attention of query row `q` over keys/values `k`, `v` (row-major,
// head_dim wide), in double.
inline std::vector<double> naive_attention(const std::vector<float>& q, const std::vector<std::vector<float>>& k,
                                           const std::vector<std::vector<float>>& v, double scale) {
  std::vector<double> w(k.size());
  double max_w = -std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < k.size(); ++j) {
    double dot = 0;
    for (std::size_t d = 0; d < q.size(); ++d) dot += double(q[d]) * k[j][d];
    w[j] = dot * scale;
    max_w = std::max(max_w, w[j]);
  }
  double sum = 0;
  for (double& x : w) sum += (x = std::exp(x - max_w));
  std::vector<double> out(q.size(), 0.0);
  for (std::size_t j = 0; j < k.size(); ++j) {
    for (std::size_t d = 0; d < q.size(); ++d) out[d] += w[j] / sum * v[j][d];
  }
  return out;
}

// Positions 0..3 cached with K/V A; then one step whose rows are position 2
// with a slot (new K/V B) and position 3 with slot -1 (K/V NaN). Row 3 must
// attend over A0, A1, B2 (the step's other new token, written first) and A3
// (itself, as cached), never its NaN row. `backend` is fresh; f32, so the
// oracle's double sums differ only by rounding (tolerance 1e-5 on values of
// magnitude below 1).
template <class B>
void check_slot_minus_one_rows(B& backend) {
  constexpr int32_t kHeadDim = 32;
  const pllm_kv_cache_spec spec = contract_spec(PLLM_DTYPE_F32);
  backend.allocate_cache(spec, 2, 0);
  std::mt19937 rng(18);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto random_rows = [&](int rows) {
    std::vector<std::vector<float>> r(static_cast<std::size_t>(rows), std::vector<float>(kHeadDim));
    for (auto& row : r) {
      for (float& x : row) x = uniform(rng);
    }
    return r;
  };
  auto flat = [](const std::vector<std::vector<float>>& rows) {
    std::vector<float> f;
    for (const auto& row : rows) f.insert(f.end(), row.begin(), row.end());
    return f;
  };
  const double scale = 1.0 / std::sqrt(double(kHeadDim));
  auto run = [&](const HostBatch& hb, const std::vector<std::vector<float>>& q, const std::vector<std::vector<float>>& k,
                 const std::vector<std::vector<float>>& v) {
    TypedBuffer qb(PLLM_DTYPE_F32, flat(q)), kb(PLLM_DTYPE_F32, flat(k)), vb(PLLM_DTYPE_F32, flat(v));
    TypedBuffer out(PLLM_DTYPE_F32, std::vector<float>(qb.size(), 1234.0f));
    LayerTensors t;
    const int64_t rows = int64_t(q.size());
    t.query = qb.tensor3(rows, 1, kHeadDim);
    t.key = kb.tensor3(rows, 1, kHeadDim);
    t.value = vb.tensor3(rows, 1, kHeadDim);
    t.output = out.tensor3(rows, 1, kHeadDim);
    t.scale = float(scale);
    backend.plan(hb.view());
    backend.run(0, t.args());
    return out.to_f32();
  };
  auto batch = [&](std::vector<int32_t> positions, std::vector<int64_t> slots, int32_t seq_len) {
    HostBatch hb;
    hb.block_size = spec.block_size;
    hb.max_blocks_per_seq = 1;
    hb.token_ids.assign(positions.size(), 0);
    hb.positions = positions;
    hb.query_start_loc = {0, int32_t(positions.size())};
    hb.seq_lens = {seq_len};
    hb.block_tables = {1};  // block 1: its slots are 16..31
    hb.slot_mapping = slots;
    return hb;
  };

  const auto a_k = random_rows(4), a_v = random_rows(4);
  (void)run(batch({0, 1, 2, 3}, {16, 17, 18, 19}, 4), random_rows(4), a_k, a_v);

  const auto q = random_rows(2), b_k = random_rows(1), b_v = random_rows(1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::vector<float>> step_k = {b_k[0], std::vector<float>(kHeadDim, nan)};
  const std::vector<std::vector<float>> step_v = {b_v[0], std::vector<float>(kHeadDim, nan)};
  const std::vector<float> out = run(batch({2, 3}, {18, -1}, 4), q, step_k, step_v);

  const auto expect_row2 = naive_attention(q[0], {a_k[0], a_k[1], b_k[0]}, {a_v[0], a_v[1], b_v[0]}, scale);
  const auto expect_row3 =
      naive_attention(q[1], {a_k[0], a_k[1], b_k[0], a_k[3]}, {a_v[0], a_v[1], b_v[0], a_v[3]}, scale);
  for (int d = 0; d < kHeadDim; ++d) {
    INFO("dim " << d);
    CHECK(std::abs(out[std::size_t(d)] - expect_row2[std::size_t(d)]) < 1e-5);
    CHECK(std::abs(out[std::size_t(kHeadDim + d)] - expect_row3[std::size_t(d)]) < 1e-5);
  }
}

}  // namespace attention_test
