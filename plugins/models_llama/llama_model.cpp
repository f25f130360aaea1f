#include "plugins/models_llama/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <set>
#include <string>

#include "pagedllm/sdk.hpp"
#include "pagedllm/sdk/cpp/safetensors.hpp"
#include "plugins/models_llama/cpu_kernels.h"
#include "plugins/models_llama/rope.h"

namespace pagedllm::models_llama {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

[[noreturn]] void invalid(const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "models_llama: " + message);
}

pllm_tensor host_tensor(float* data, const std::vector<int64_t>& shape) {
  pllm_tensor t{};
  t.data = data;
  t.dtype = PLLM_DTYPE_F32;
  t.device = {PLLM_DEVICE_CPU, 0};
  t.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[std::size_t(i)];
    t.strides[i] = stride;
    stride *= shape[std::size_t(i)];
  }
  return t;
}

// A [tokens, heads, head_dim] view into rows `row_stride` floats apart.
pllm_tensor heads_view(float* data, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride) {
  pllm_tensor t = host_tensor(data, {tokens, heads, head_dim});
  t.strides[0] = row_stride;
  return t;
}

}  // namespace

float* Buffer::reserve(std::size_t count) {
  if (count > capacity_) {
    data_.reset();
    data_.reset(static_cast<float*>(::operator new[](count * sizeof(float), std::align_val_t(64))));
    capacity_ = count;
  }
  return data_.get();
}

LlamaModel::LlamaModel(const std::filesystem::path& model_dir, int num_threads)
    : config_(LlamaConfig::load(model_dir)), pool_(num_threads), inv_freq_(rope_inv_freq(config_)) {
  use_single_threaded_blas();
  load_weights(model_dir);
}

void LlamaModel::load_weights(const std::filesystem::path& model_dir) {
  const LlamaConfig& c = config_;
  const int64_t h = c.hidden_size, v = c.vocab_size, inter = c.intermediate_size;
  const int64_t q = c.q_size(), kv = c.kv_size();

  // Every checkpoint tensor and where its rows go in the f32 layout.
  struct Part {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float>* storage;
    int64_t first_row;
  };
  std::vector<Part> parts;
  layers_.resize(std::size_t(c.num_layers));
  parts.push_back({"model.embed_tokens.weight", {v, h}, &embed_, 0});
  for (int32_t l = 0; l < c.num_layers; ++l) {
    Layer& layer = layers_[std::size_t(l)];
    const std::string p = "model.layers." + str(l) + ".";
    parts.push_back({p + "input_layernorm.weight", {h}, &layer.input_norm, 0});
    parts.push_back({p + "self_attn.q_proj.weight", {q, h}, &layer.qkv, 0});
    parts.push_back({p + "self_attn.k_proj.weight", {kv, h}, &layer.qkv, q});
    parts.push_back({p + "self_attn.v_proj.weight", {kv, h}, &layer.qkv, q + kv});
    parts.push_back({p + "self_attn.o_proj.weight", {h, q}, &layer.o, 0});
    parts.push_back({p + "post_attention_layernorm.weight", {h}, &layer.post_norm, 0});
    parts.push_back({p + "mlp.gate_proj.weight", {inter, h}, &layer.gate_up, 0});
    parts.push_back({p + "mlp.up_proj.weight", {inter, h}, &layer.gate_up, inter});
    parts.push_back({p + "mlp.down_proj.weight", {h, inter}, &layer.down, 0});
  }
  parts.push_back({"model.norm.weight", {h}, &norm_, 0});
  if (!c.tie_word_embeddings) parts.push_back({"lm_head.weight", {v, h}, &lm_head_, 0});

  // Validate every tensor before allocating anything.
  const pllm::safetensors::Checkpoint checkpoint(model_dir);
  std::vector<const pllm::safetensors::TensorView*> views;
  uint64_t total_bytes = 0;
  for (const Part& part : parts) {
    views.push_back(&checkpoint.require(part.name, part.shape));
    total_bytes += views.back()->nbytes;
  }
  if (checkpoint.names().size() > parts.size()) {
    std::set<std::string_view> used;
    for (const Part& part : parts) used.insert(part.name);
    std::string unused;
    for (const std::string& name : checkpoint.names()) {
      if (!used.count(name)) unused += (unused.empty() ? "" : ", ") + name;
    }
    pllm::log_info("models_llama: ignoring checkpoint tensors ", unused,
                   c.tie_word_embeddings ? " (lm_head is tied to the embedding)" : "");
  }

  // Allocate the f32 layout (each fused matrix once, at its full size), then
  // convert tensor by tensor in parallel chunks.
  std::map<std::vector<float>*, int64_t> sizes;
  for (const Part& part : parts) {
    const int64_t width = part.shape.size() > 1 ? part.shape[1] : 1;
    int64_t& size = sizes[part.storage];
    size = std::max(size, (part.first_row + part.shape[0]) * width);
  }
  for (auto& [storage, size] : sizes) storage->resize(std::size_t(size));
  uint64_t done_bytes = 0;
  pllm::report_progress("loading weights", 0, total_bytes);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const Part& part = parts[i];
    const pllm::safetensors::TensorView& view = *views[i];
    const int64_t width = part.shape.size() > 1 ? part.shape[1] : 1;
    float* dst = part.storage->data() + part.first_row * width;
    constexpr int64_t kChunk = 1 << 18;
    const int64_t numel = view.numel();
    pool_.parallel_for((numel + kChunk - 1) / kChunk, [&](int64_t chunk, int) {
      const int64_t first = chunk * kChunk;
      view.to_f32(first, std::min(kChunk, numel - first), dst + first);
    });
    slots_.emplace(part.name, Slot{dst, part.shape});
    done_bytes += view.nbytes;
    pllm::report_progress("loading weights", done_bytes, total_bytes);
  }
  if (c.tie_word_embeddings) slots_.emplace("lm_head.weight", Slot{embed_.data(), {v, h}});
  pllm::log_info("models_llama: loaded ", parts.size(), " tensors from ", model_dir.string(), " (",
                 checkpoint.files().size(), " file", checkpoint.files().size() == 1 ? "" : "s", ", ",
                 total_bytes >> 20, " MiB stored, ", weight_bytes() >> 20, " MiB as f32)");
}

std::size_t LlamaModel::weight_bytes() const {
  std::size_t floats = embed_.size() + norm_.size() + lm_head_.size();
  for (const Layer& l : layers_) {
    floats += l.input_norm.size() + l.qkv.size() + l.o.size() + l.post_norm.size() + l.gate_up.size() + l.down.size();
  }
  return floats * sizeof(float);
}

pllm_tensor LlamaModel::tensor(std::string_view name) const {
  auto it = slots_.find(name);
  if (it == slots_.end()) {
    throw pllm::Error(PLLM_ERROR_NOT_FOUND, "models_llama: no tensor '" + std::string(name) + "'");
  }
  return host_tensor(it->second.data, it->second.shape);
}

void LlamaModel::validate(const pllm_batch& b, const pllm_attention_ref& attention) const {
  if (b.struct_size < offsetof(pllm_batch, logits_indices) + sizeof(b.logits_indices)) {
    invalid("batch: struct_size " + str(b.struct_size) + " is too small");
  }
  if (!attention.api || !attention.api->run || !attention.backend) invalid("no attention backend");
  if (b.num_tokens < 0) invalid("batch: negative num_tokens");
  if (b.num_tokens > 0 && (!b.token_ids || !b.positions)) invalid("batch: null token_ids or positions");
  for (int32_t t = 0; t < b.num_tokens; ++t) {
    if (b.token_ids[t] < 0 || b.token_ids[t] >= config_.vocab_size) {
      invalid("batch: token_ids[" + str(t) + "] = " + str(b.token_ids[t]) + " is outside the vocabulary [0, " +
              str(config_.vocab_size) + ")");
    }
    if (b.positions[t] < 0) invalid("batch: positions[" + str(t) + "] = " + str(b.positions[t]) + " is negative");
  }
  auto check_rows = [&](const char* what, int32_t count, const int32_t* rows) {
    if (count < 0 || (count > 0 && !rows)) invalid(std::string("batch: bad ") + what);
    for (int32_t i = 0; i < count; ++i) {
      if (rows[i] < 0 || rows[i] >= b.num_tokens) {
        invalid(std::string("batch: ") + what + "[" + str(i) + "] = " + str(rows[i]) + " is not a token row [0, " +
                str(b.num_tokens) + ")");
      }
    }
  };
  check_rows("logits_indices", b.num_logits, b.logits_indices);
  if (PLLM_HAS_FIELD(pllm_batch, &b, hidden_indices)) check_rows("hidden_indices", b.num_hidden, b.hidden_indices);
}

void LlamaModel::forward(const pllm_batch& b, pllm_attention_ref attention, pllm_forward_output& out) {
  validate(b, attention);
  if (out.struct_size < offsetof(pllm_forward_output, logits) + sizeof(out.logits)) {
    invalid("forward output: struct_size " + str(out.struct_size) + " is too small");
  }
  const LlamaConfig& c = config_;
  const int64_t tokens = b.num_tokens, h = c.hidden_size, inter = c.intermediate_size, d = c.head_dim;
  const int64_t q = c.q_size(), kv = c.kv_size(), qkv_width = q + 2 * kv, half = d / 2;
  const int32_t num_hidden = PLLM_HAS_FIELD(pllm_batch, &b, hidden_indices) ? b.num_hidden : 0;
  const auto n = [](int64_t count) { return static_cast<std::size_t>(count); };

  float* x = x_.reserve(n(tokens * h));
  float* normed = normed_.reserve(n(tokens * h));
  float* qkv = qkv_.reserve(n(tokens * qkv_width));
  float* attn = attn_.reserve(n(tokens * q));
  float* gate_up = gate_up_.reserve(n(tokens * 2 * inter));
  float* act = act_.reserve(n(tokens * inter));
  float* cos = cos_.reserve(n(tokens * half));
  float* sin = sin_.reserve(n(tokens * half));

  parallel_rows(pool_, tokens, h, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      std::memcpy(x + t * h, embed_.data() + int64_t(b.token_ids[t]) * h, n(h) * sizeof(float));
    }
  });
  parallel_rows(pool_, tokens, half * 40, [&](int64_t begin, int64_t end) {
    rope_tables(inv_freq_, b.positions + begin, end - begin, cos + begin * half, sin + begin * half);
  });

  pllm_attention_layer_args args{};
  args.struct_size = sizeof args;
  args.query = heads_view(qkv, tokens, c.num_heads, d, qkv_width);
  args.key = heads_view(qkv + q, tokens, c.num_kv_heads, d, qkv_width);
  args.value = heads_view(qkv + q + kv, tokens, c.num_kv_heads, d, qkv_width);
  args.output = heads_view(attn, tokens, c.num_heads, d, q);
  args.scale = static_cast<float>(1.0 / std::sqrt(double(d)));
  args.stream = nullptr;
  const auto eps = static_cast<float>(c.rms_norm_eps);

  for (int32_t l = 0; l < c.num_layers && tokens > 0; ++l) {
    const Layer& layer = layers_[std::size_t(l)];
    rms_norm(pool_, x, h, tokens, h, layer.input_norm.data(), eps, normed, h);
    linear(pool_, normed, h, tokens, layer.qkv.data(), qkv_width, h, qkv, qkv_width, false);
    parallel_rows(pool_, tokens, q + kv, [&](int64_t begin, int64_t end) {
      apply_rope(qkv + begin * qkv_width, end - begin, qkv_width, c.num_heads + c.num_kv_heads, d,
                 cos + begin * half, sin + begin * half);
    });
    pllm_error error{};
    const pllm_status status = attention.api->run(attention.backend, l, &args, &error);
    if (status != PLLM_OK) {
      throw pllm::Error(status, "models_llama: attention backend failed at layer " + str(l) + ": " + error.message);
    }
    linear(pool_, attn, q, tokens, layer.o.data(), h, q, x, h, true);
    rms_norm(pool_, x, h, tokens, h, layer.post_norm.data(), eps, normed, h);
    linear(pool_, normed, h, tokens, layer.gate_up.data(), 2 * inter, h, gate_up, 2 * inter, false);
    swiglu(pool_, gate_up, tokens, inter, act);
    linear(pool_, act, inter, tokens, layer.down.data(), h, inter, x, h, true);
  }

  // The final norm only on the rows asked for; lm_head only on the logits rows.
  auto gather_normed = [&](int32_t count, const int32_t* indices, float* dst) {
    for (int32_t i = 0; i < count; ++i) std::memcpy(dst + i * h, x + int64_t(indices[i]) * h, n(h) * sizeof(float));
    rms_norm(pool_, dst, h, count, h, norm_.data(), eps, dst, h);
  };
  float* rows = rows_.reserve(n(int64_t(b.num_logits) * h));
  float* logits = logits_.reserve(n(int64_t(b.num_logits) * c.vocab_size));
  gather_normed(b.num_logits, b.logits_indices, rows);
  linear(pool_, rows, h, b.num_logits, lm_head(), c.vocab_size, h, logits, c.vocab_size, false);
  out.logits = host_tensor(logits, {b.num_logits, c.vocab_size});

  if (PLLM_HAS_FIELD(pllm_forward_output, &out, hidden)) {
    out.hidden = pllm_tensor{};
    if (num_hidden > 0) {
      float* hidden = hidden_.reserve(n(int64_t(num_hidden) * h));
      gather_normed(num_hidden, b.hidden_indices, hidden);
      out.hidden = host_tensor(hidden, {num_hidden, h});
    }
  } else if (num_hidden > 0) {
    invalid("hidden states were asked for, but the forward output struct has no 'hidden' field");
  }
}

}  // namespace pagedllm::models_llama
