#pragma once
// Drives models_llama the way core will: the real models_llama and attention
// .so files (attention_cpu on the CPU; on CUDA the backend a Placement names)
// loaded through the host's registry, a paged KV cache
// with permuted, non-contiguous block tables whose every slot first holds NaN
// K/V, and hand-built pllm_batch steps; plus the Python side (the tiny-Llama
// generator and the HF transformers oracle, tools/testing/hf_oracle.py). Shared by the fidelity tests and
// the benchmark, so it throws std::runtime_error instead of using Catch.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#ifdef PAGEDLLM_LINKS_CUDART
#include <cuda_runtime_api.h>
#endif

#include "core/plugin/plugin_instance.h"
#include "core/plugin/plugin_registry.h"
#include "pagedllm/sdk.h"
#include "pagedllm/sdk/cpp/safetensors.hpp"
#include "llama_common/tensor_view.h"
#include "tests/support/python.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tools/common/host_batch.h"

namespace llama_test {

using pagedllm::testing::run_command;
using pagedllm::testing::TempDir;

inline void expect(bool condition, const std::string& message) {
  if (!condition) throw std::runtime_error(message);
}

using pagedllm::testing::kPython;
using pagedllm::testing::kPythonTransformers5;

// ---- Python: generator and oracle --------------------------------------------

inline std::string quote(const std::string& s) { return "'" + s + "'"; }

// Writes a tiny Llama into `dir` (make_tiny_llama.py with `args`).
inline void make_model(const std::filesystem::path& dir, const std::string& args = "") {
  const auto r = run_command(std::string(kPython) + " " PAGEDLLM_SOURCE_DIR "/tools/testing/make_tiny_llama.py " +
                             quote(dir.string()) + " " + args);
  expect(r.exit_code == 0, "make_tiny_llama.py failed: " + r.err);
}

using Matrix = std::vector<std::vector<double>>;  // rows of one sequence

struct OracleOutput {
  std::vector<Matrix> logits;  // [sequence][position][vocab]
  std::vector<Matrix> hidden;  // [sequence][position][hidden], after the final norm
};

// Runs tools/testing/hf_oracle.py (transformers' LlamaForCausalLM, float32):
// mode "logits" (every position's logits and final-norm hidden state) or
// "greedy" ({"outputs", "margins"}); `extra` is appended to its arguments.
inline nlohmann::json run_oracle(const std::filesystem::path& model_dir, const char* mode, const nlohmann::json& input,
                                 const std::string& extra = "") {
  TempDir io;
  const auto in = io.write("in.json", input.dump());
  const auto out = io.path() / "out.json";
  const auto r = run_command(std::string(kPython) + " " PAGEDLLM_SOURCE_DIR "/tools/testing/hf_oracle.py " + mode +
                             " --model " + quote(model_dir.string()) + " --input " + quote(in.string()) +
                             " --output " + quote(out.string()) + " " + extra);
  expect(r.exit_code == 0, std::string("hf_oracle.py ") + mode + " failed: " + r.err);
  std::ifstream file(out);
  return nlohmann::json::parse(file);
}

// hf_oracle.py suite: several models made and answered by one process, run by `python` (kPython:
// transformers 4.57.1; kPythonTransformers5: transformers 5, which also writes the checkpoints).
inline nlohmann::json run_oracle_suite(const nlohmann::json& input, const char* python = kPython) {
  TempDir io;
  const auto in = io.write("in.json", input.dump());
  const auto out = io.path() / "out.json";
  const auto r = run_command(std::string(python) + " " PAGEDLLM_SOURCE_DIR "/tools/testing/hf_oracle.py suite --input " +
                             quote(in.string()) + " --output " + quote(out.string()));
  expect(r.exit_code == 0, "hf_oracle.py suite failed: " + r.err);
  std::ifstream file(out);
  return nlohmann::json::parse(file);
}

// transformers' logits and hidden states at every position of `sequences`.
inline OracleOutput oracle_logits(const std::filesystem::path& model_dir,
                                  const std::vector<std::vector<int32_t>>& sequences) {
  const nlohmann::json result = run_oracle(model_dir, "logits", {{"sequences", sequences}}, "--json");
  return {result["logits"].get<std::vector<Matrix>>(), result["hidden"].get<std::vector<Matrix>>()};
}

// ---- Editing checkpoints ------------------------------------------------------

// A tensor of a safetensors file as raw bytes, for tests that alter files.
struct RawTensor {
  std::string name;
  std::string dtype;  // the safetensors name: "F32", "I64", ...
  std::vector<int64_t> shape;
  std::string bytes;
  void set_f32(const std::vector<float>& values) {
    dtype = "F32";
    bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
};

// Reads `path`, lets `edit` change, drop or add tensors, and writes the file
// back, tensors back to back in their new order.
template <class Edit>
void rewrite_safetensors(const std::filesystem::path& path, Edit&& edit) {
  std::vector<RawTensor> tensors;
  {
    const pllm::safetensors::File file(path);
    for (const auto& t : file.tensors()) {
      tensors.push_back({t.name, pllm::safetensors::dtype_name(t.dtype), t.shape,
                         std::string(reinterpret_cast<const char*>(t.data), t.nbytes)});
    }
  }
  edit(tensors);
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  const std::string text = header.dump();
  const uint64_t length = text.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << text << data;
}

// ---- Plugins ------------------------------------------------------------------

inline pagedllm::PluginRegistry& registry() {
  static pagedllm::PluginRegistry r({PAGEDLLM_BINARY_DIR "/plugins"});
  return r;
}

// Where a run happens: the device of the model and of the attention backend,
// the backend plugin, the model dtype (INVALID: as stored), and for a device
// other than the CPU how to make the NaN-filled K/V the runner poisons the
// cache with (it must stay valid as long as the runner).
struct Placement {
  pllm_device device{PLLM_DEVICE_CPU, 0};
  std::string attention_plugin = "attention_cpu";
  pllm_dtype dtype = PLLM_DTYPE_INVALID;
  // [rows, heads, head_dim] of `dtype` on `device`, every element `fill` (0 or NaN).
  std::function<pllm_tensor(int64_t rows, int64_t heads, int64_t head_dim, pllm_dtype dtype, float fill)>
      device_tensor;
  // Waits for the device (the poison runs on the default stream, the model on its own).
  std::function<void()> synchronize;
  // The tensor-parallel group the model is a rank of (null: the whole model).
  const pllm_collectives_ref* collectives = nullptr;
};

class Attention {
 public:
  explicit Attention(const std::string& options, const Placement& placement = {}) {
    pllm_attention_create_args args{};
    args.struct_size = sizeof args;
    args.options_json = options.c_str();
    args.device = placement.device;
    instance_ = pagedllm::create_plugin_instance<pllm_attention_api, pllm_attention_backend>(
        registry().load(placement.attention_plugin, PLLM_PLUGIN_KIND_ATTENTION, "attention.plugin"), args);
  }
  pllm_attention_ref ref() const { return pagedllm::attention_ref(instance_); }
  void allocate(const pllm_kv_cache_spec& spec, int64_t blocks) {
    call([&](pllm_error* e) { return instance_.api().allocate_cache(instance_.get(), &spec, blocks, 0, e); }, "allocate");
  }
  void plan(const pllm_batch& batch) {
    call([&](pllm_error* e) { return instance_.api().plan(instance_.get(), &batch, e); }, "plan");
  }
  void run(int32_t layer, const pllm_attention_layer_args& args) {
    call([&](pllm_error* e) { return instance_.api().run(instance_.get(), layer, &args, e); }, "run");
  }

 private:
  template <class F>
  void call(F&& f, const char* what) {
    pllm_error error{};
    pagedllm::check_plugin_call(f(&error), error, instance_.library(), what);
  }
  pagedllm::AttentionInstance instance_;
};

// NaN K/V into `slots` slots of layers [0, num_layers), through the backend's
// write path (one single-token sequence per slot), so a read of a slot the step
// did not write shows up as NaN.
inline void poison_every_slot(Attention& attention, const Placement& placement, const pllm_model_info& info,
                              int32_t num_layers, int32_t slots, int32_t block_size, int32_t max_blocks_per_seq) {
  const pagedllm::tools::HostBatch b = pagedllm::tools::every_slot_batch(slots, block_size, max_blocks_per_seq);
  const pllm_batch batch = b.view();
  const int64_t heads = info.num_heads, kv_heads = info.num_kv_heads, d = info.head_dim;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  pllm_tensor query{}, key{}, output{};
  std::vector<float> q, kv, out;  // the host tensors' memory, on the CPU
  if (placement.device.type == PLLM_DEVICE_CPU) {
    q.assign(std::size_t(slots * heads * d), 0.0f);
    out.resize(q.size());
    kv.assign(std::size_t(slots * kv_heads * d), nan);
    auto view = [&](std::vector<float>& data, int64_t h) {
      return pagedllm::llama::tensor_view(data.data(), PLLM_DTYPE_F32, {PLLM_DEVICE_CPU, 0}, {slots, h, d});
    };
    query = view(q, heads);
    key = view(kv, kv_heads);
    output = view(out, heads);
  } else {
    expect(bool(placement.device_tensor), "a device placement needs device_tensor");
    query = placement.device_tensor(slots, heads, d, info.dtype, 0.0f);
    key = placement.device_tensor(slots, kv_heads, d, info.dtype, nan);
    output = placement.device_tensor(slots, heads, d, info.dtype, 0.0f);
  }
  pllm_attention_layer_args args{};
  args.struct_size = sizeof args;
  args.query = &query;
  args.key = &key;
  args.value = &key;
  args.output = &output;
  args.scale = 1.0f;
  attention.plan(batch);
  for (int32_t layer = 0; layer < num_layers; ++layer) attention.run(layer, args);
  if (placement.synchronize) placement.synchronize();
}

// The args point into `path` and `options`, which must outlive the create call.
inline pllm_model_create_args model_args(const std::string& path, const std::string& options,
                                         pllm_dtype dtype = PLLM_DTYPE_INVALID,
                                         pllm_device device = {PLLM_DEVICE_CPU, 0},
                                         const pllm_collectives_ref* collectives = nullptr) {
  pllm_model_create_args args{};
  args.struct_size = sizeof args;
  args.options_json = options.c_str();
  args.model_path = path.c_str();
  args.device = device;
  args.dtype = dtype;
  args.collectives = collectives;
  return args;
}

class Model {
 public:
  // Throws pagedllm::PluginCallError when the plugin refuses.
  Model(const std::filesystem::path& dir, const std::string& options = "{}", pllm_dtype dtype = PLLM_DTYPE_INVALID,
        pllm_device device = {PLLM_DEVICE_CPU, 0}, const pllm_collectives_ref* collectives = nullptr) {
    const std::string path = dir.string();
    instance_ = pagedllm::create_plugin_instance<pllm_model_api, pllm_model>(
        library(), model_args(path, options, dtype, device, collectives));
  }
  static std::shared_ptr<pagedllm::PluginLibrary> library() {
    return registry().load("models_llama", PLLM_PLUGIN_KIND_MODEL, "model.plugin");
  }
  pllm_model_info info() const {
    pllm_model_info out{};
    out.struct_size = sizeof out;
    pllm_error error{};
    pagedllm::check_plugin_call(instance_.api().get_info(instance_.get(), &out, &error), error, instance_.library(),
                                "get_info");
    return out;
  }
  // The logits and hidden states forward() filled (views of the model's memory
  // on its device, valid until the next forward).
  struct Outputs {
    pllm_tensor logits = described(), hidden = described();
    static pllm_tensor described() {
      pllm_tensor t{};
      t.struct_size = sizeof t;
      return t;
    }
  };
  Outputs forward(const pllm_batch& batch, pllm_attention_ref attention) {
    Outputs result;
    pllm_forward_output out{sizeof out, &result.logits, &result.hidden};
    pllm_error error{};
    pagedllm::check_plugin_call(instance_.api().forward(instance_.get(), &batch, &attention, &out, &error), error,
                                instance_.library(), "forward");
    return result;
  }
  // The C table and handle, for a speculator that attaches to this model.
  const pllm_model_api& api() const { return instance_.api(); }
  pllm_model* handle() const { return instance_.get(); }
  pllm_tensor tensor(const char* name) const {
    pllm_tensor out{};
    out.struct_size = sizeof out;
    pllm_error error{};
    pagedllm::check_plugin_call(instance_.api().get_tensor(instance_.get(), name, &out, &error), error,
                                instance_.library(), "get_tensor");
    return out;
  }

 private:
  pagedllm::ModelInstance instance_;
};

// ---- A paged run --------------------------------------------------------------

// Rows of a [rows, cols] f32 host tensor, honouring its row stride.
// A model's outputs stay on its device (SDK 2.0): a CUDA tensor is copied back.
inline std::vector<std::vector<float>> rows_of(const pllm_tensor& t) {
  expect(t.dtype == PLLM_DTYPE_F32 && t.ndim == 2 && t.strides[1] == 1, "not a row-major [rows, cols] f32 tensor");
  const auto* base = static_cast<const float*>(t.data);
  std::vector<float> copy;
  if (t.device.type == PLLM_DEVICE_CUDA && t.shape[0] > 0) {
#ifdef PAGEDLLM_LINKS_CUDART
    copy.resize(std::size_t((t.shape[0] - 1) * t.strides[0] + t.shape[1]));
    expect(cudaMemcpy(copy.data(), base, copy.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess,
           "copying device outputs back failed");
    base = copy.data();
#else
    expect(false, "device outputs, but this test does not link the CUDA runtime");
#endif
  }
  std::vector<std::vector<float>> rows;
  for (int64_t r = 0; r < t.shape[0]; ++r) {
    const float* row = base + r * t.strides[0];
    rows.emplace_back(row, row + t.shape[1]);
  }
  return rows;
}

// One model over a paged cache of `num_blocks` blocks, handed out to sequences
// from a shuffled pool as they grow (so block tables are permuted and
// non-contiguous). Every slot of every layer holds NaN K/V before the first
// step: a read beyond a sequence's context turns its logits into NaN.
class PagedRunner {
 public:
  struct Chunk {
    int32_t seq;
    int32_t len;  // the sequence's next `len` tokens are new in this step
  };
  struct Row {
    int32_t seq;
    int32_t position;
  };
  struct Step {
    std::vector<Row> token_rows;  // what each token row of the batch is
    std::vector<std::vector<float>> logits, hidden;
  };

  PagedRunner(const std::filesystem::path& model_dir, const std::string& model_options,
              const std::string& attention_options, int32_t block_size = 4, int32_t num_blocks = 96, uint32_t seed = 7,
              Placement placement = {}, int32_t max_blocks_per_seq = kDefaultMaxBlocksPerSeq)
      : max_blocks_per_seq_(max_blocks_per_seq),
        placement_(std::move(placement)),
        model_(model_dir, model_options, placement_.dtype, placement_.device, placement_.collectives),
        attention_(attention_options, placement_),
        block_size_(block_size),
        rng_(seed) {
    info_ = model_.info();
    pllm_kv_cache_spec spec{};
    spec.struct_size = sizeof spec;
    spec.num_layers = info_.num_layers;
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

  Model& model() { return model_; }
  const pllm_model_info& info() const { return info_; }

  int32_t add_sequence(std::vector<int32_t> tokens) {
    sequences_.push_back({std::move(tokens), 0, {}});
    return int32_t(sequences_.size() - 1);
  }
  void append_token(int32_t seq, int32_t token) { sequences_[std::size_t(seq)].tokens.push_back(token); }
  int32_t computed(int32_t seq) const { return sequences_[std::size_t(seq)].computed; }

  // Runs one step over `chunks` (decodes must come first), with logits and
  // hidden states for every token row.
  Step step(const std::vector<Chunk>& chunks) {
    int32_t tokens = 0;
    for (const Chunk& c : chunks) tokens += c.len;
    std::vector<int32_t> all(std::size_t(tokens), 0);
    std::iota(all.begin(), all.end(), 0);
    return step(chunks, all, all);
  }

  // The same, with logits for `logits_rows` and hidden states for
  // `hidden_rows` only (token rows of the batch, in the order asked).
  Step step(const std::vector<Chunk>& chunks, const std::vector<int32_t>& logits_rows,
            const std::vector<int32_t>& hidden_rows) {
    Step result;
    pagedllm::tools::HostBatch b;
    b.block_size = block_size_;
    b.max_blocks_per_seq = max_blocks_per_seq_;
    bool decodes_done = false;
    int32_t num_decode = 0;
    for (const Chunk& c : chunks) {
      Sequence& s = sequences_[std::size_t(c.seq)];
      expect(s.computed + c.len <= int32_t(s.tokens.size()), "a chunk runs past its sequence's tokens");
      const bool decode = c.len == 1 && s.computed > 0;
      expect(!decode || !decodes_done, "decodes must come first, as core lays them out");
      if (decode) ++num_decode; else decodes_done = true;
      const int32_t seq_len = s.computed + c.len;
      while (int32_t(s.blocks.size()) * block_size_ < seq_len) {
        expect(!free_blocks_.empty(), "the block pool is exhausted");
        s.blocks.push_back(free_blocks_.back());
        free_blocks_.pop_back();
      }
      for (int32_t p = s.computed; p < seq_len; ++p) {
        b.token_ids.push_back(s.tokens[std::size_t(p)]);
        b.positions.push_back(p);
        b.slot_mapping.push_back(int64_t(s.blocks[std::size_t(p / block_size_)]) * block_size_ + p % block_size_);
        result.token_rows.push_back({c.seq, p});
      }
      b.query_start_loc.push_back(int32_t(b.token_ids.size()));
      b.seq_lens.push_back(seq_len);
      std::vector<int32_t> table(std::size_t(max_blocks_per_seq_), -1);
      expect(s.blocks.size() <= table.size(), "a sequence needs more than max_blocks_per_seq blocks");
      std::copy(s.blocks.begin(), s.blocks.end(), table.begin());
      b.block_tables.insert(b.block_tables.end(), table.begin(), table.end());
    }
    b.num_decode_seqs = num_decode;
    pllm_batch batch = b.view();
    batch.num_logits = int32_t(logits_rows.size());
    batch.logits_indices = logits_rows.data();
    batch.num_hidden = int32_t(hidden_rows.size());
    batch.hidden_indices = hidden_rows.data();
    attention_.plan(batch);
    const auto out = model_.forward(batch, attention_.ref());
    expect(out.logits.shape[0] == int64_t(logits_rows.size()) && out.logits.shape[1] == info_.vocab_size,
           "logits have the wrong shape");
    result.logits = rows_of(out.logits);
    if (hidden_rows.empty()) {
      expect(out.hidden.ndim == 0, "hidden states returned though none were asked for");
    } else {
      expect(out.hidden.shape[0] == int64_t(hidden_rows.size()) && out.hidden.shape[1] == info_.hidden_size,
             "hidden states have the wrong shape");
      result.hidden = rows_of(out.hidden);
    }
    for (const Chunk& c : chunks) sequences_[std::size_t(c.seq)].computed += c.len;
    return result;
  }

  static constexpr int32_t kDefaultMaxBlocksPerSeq = 48;

 private:

  struct Sequence {
    std::vector<int32_t> tokens;
    int32_t computed;
    std::vector<int32_t> blocks;
  };
  // NaN K/V into every slot of every layer.
  void poison(int32_t num_blocks) {
    poison_every_slot(attention_, placement_, info_, info_.num_layers, num_blocks * block_size_, block_size_,
                      max_blocks_per_seq_);
  }

  int32_t max_blocks_per_seq_;
  Placement placement_;
  Model model_;
  Attention attention_;
  pllm_model_info info_{};
  int32_t block_size_;
  std::mt19937 rng_;
  std::vector<int32_t> free_blocks_;
  std::vector<Sequence> sequences_;
};

}  // namespace llama_test
