// example_llama: the Llama architecture (Llama 2/3-style, GQA, SwiGLU, RMSNorm,
// RoPE without scaling) as a model plugin, in plain C++ loops over f32 weights
// read with the SDK's safetensors reader. It is slow on purpose: every line is
// the textbook formula, so it shows what a model plugin does and nothing else.
//
// What a model plugin owns: the weights and the forward pass. What it does not:
// the KV cache. Each layer hands its new tokens' Q/K/V to the attention backend
// core passes in (attention.api->run), which stores K/V in its paged cache and
// attends over each sequence's context. Any backend on the same device works.
//
// forward(batch) computes every token row of the step (decode rows and prefill
// chunks alike, one after another) and returns logits only for the rows core
// asks for (batch.logits_indices) and the last hidden states (after the final
// norm) for batch.hidden_indices, which speculators such as EAGLE read. The
// outputs stay in memory the model owns (SDK 2.0): core hands in descriptors
// (out.logits, out.hidden) and the model fills them with views of its buffers,
// valid until its next forward().
//
// Options: none. model.dtype: auto or f32 (the weights are widened to f32).

#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <pagedllm/sdk.hpp>
#include <pagedllm/sdk/cpp/model_batch_check.hpp>
#include <pagedllm/sdk/cpp/safetensors.hpp>
#include <string>
#include <vector>

namespace {

using Weights = std::vector<float>;

// The one place this file builds a pllm_tensor: a CPU f32 view of `data`, row-major.
// Whoever fills a tensor sets struct_size (SDK 2.0: tensors can grow in later minors).
pllm_tensor cpu_f32_tensor(float* data, std::initializer_list<int64_t> shape) {
  pllm_tensor t{};
  t.struct_size = sizeof(pllm_tensor);
  t.data = data;
  t.dtype = PLLM_DTYPE_F32;
  t.device = {PLLM_DEVICE_CPU, 0};
  t.ndim = int32_t(shape.size());
  int64_t stride = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    t.shape[d] = shape.begin()[d];
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

// y[o] = sum_i w[o * in + i] * x[i]: a [out, in] weight (HF's nn.Linear layout) times a vector.
void matvec(const Weights& w, const float* x, float* y, int64_t out, int64_t in) {
  for (int64_t o = 0; o < out; ++o) {
    float sum = 0.0f;
    for (int64_t i = 0; i < in; ++i) sum += w[std::size_t(o * in + i)] * x[i];
    y[o] = sum;
  }
}

// y = x / sqrt(mean(x^2) + eps) * weight
void rms_norm(const float* x, const Weights& weight, float eps, float* y, int64_t n) {
  float sum_squares = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum_squares += x[i] * x[i];
  const float inv_rms = 1.0f / std::sqrt(sum_squares / float(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv_rms * weight[std::size_t(i)];
}

struct Config {
  int32_t vocab_size, hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim;
  int32_t max_position_embeddings, bos_token_id;
  std::vector<int32_t> eos_token_ids;
  float rms_norm_eps, rope_theta;
  bool tie_word_embeddings;

  static Config load(const std::string& model_dir) {
    const std::string path = model_dir + "/config.json";
    std::ifstream file(path);
    if (!file) throw pllm::Error(PLLM_ERROR_NOT_FOUND, path + ": cannot be read");
    const nlohmann::json j = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) throw pllm::Error(PLLM_ERROR_INVALID_CONFIG, path + ": not a JSON object");
    const auto require = [&](const char* key) -> const nlohmann::json& {
      if (!j.contains(key)) throw pllm::Error(PLLM_ERROR_INVALID_CONFIG, path + ": missing '" + key + "'");
      return j.at(key);
    };
    if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null()) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, path + ": rope_scaling is not supported by example_llama");
    }
    // transformers 5 writes the RoPE base (and any scaling) into rope_parameters, 4.x into rope_theta:
    // read both, and refuse a rotation other than the default rather than apply the wrong one.
    const nlohmann::json rope = j.contains("rope_parameters") ? j.at("rope_parameters") : nlohmann::json();
    if (!rope.is_null() && !(rope.is_object() && rope.value("rope_type", std::string("default")) == "default")) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, path + ": rope_parameters other than the default rotation are not "
                                                       "supported by example_llama");
    }
    for (const char* bias : {"attention_bias", "mlp_bias"}) {
      if (j.value(bias, false)) throw pllm::Error(PLLM_ERROR_UNSUPPORTED, path + ": " + bias + " is not supported");
    }
    Config c{};
    try {
      c.vocab_size = require("vocab_size").get<int32_t>();
      c.hidden_size = require("hidden_size").get<int32_t>();
      c.intermediate_size = require("intermediate_size").get<int32_t>();
      c.num_layers = require("num_hidden_layers").get<int32_t>();
      c.num_heads = require("num_attention_heads").get<int32_t>();
      c.num_kv_heads = j.value("num_key_value_heads", c.num_heads);
      c.head_dim = j.value("head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
      c.max_position_embeddings = require("max_position_embeddings").get<int32_t>();
      c.rms_norm_eps = j.value("rms_norm_eps", 1e-6f);
      c.rope_theta = rope.is_object() && rope.contains("rope_theta") ? rope.at("rope_theta").get<float>()
                                                                      : j.value("rope_theta", 10000.0f);
      c.tie_word_embeddings = j.value("tie_word_embeddings", false);
      c.bos_token_id =
          j.contains("bos_token_id") && j.at("bos_token_id").is_number() ? j.at("bos_token_id").get<int32_t>() : -1;
      const nlohmann::json eos = j.value("eos_token_id", nlohmann::json());
      if (eos.is_number()) c.eos_token_ids = {eos.get<int32_t>()};
      if (eos.is_array()) c.eos_token_ids = eos.get<std::vector<int32_t>>();
    } catch (const nlohmann::json::exception& e) {
      throw pllm::Error(PLLM_ERROR_INVALID_CONFIG, path + ": " + e.what());
    }
    if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 ||
        c.head_dim <= 0 || c.head_dim % 2 != 0 || c.num_heads % c.num_kv_heads != 0) {
      throw pllm::Error(PLLM_ERROR_INVALID_CONFIG, path + ": inconsistent sizes (heads, kv heads, head_dim)");
    }
    return c;
  }
};

struct Layer {
  Weights input_norm, q, k, v, o, post_attention_norm, gate, up, down;
};

class ExampleLlama : public pllm::ModelPlugin {
 public:
  struct Options {
    static Options parse(pllm::OptionReader&) { return {}; }
  };

  ExampleLlama(const Options&, const pllm_model_create_args& args) : config_(Config::load(args.model_path)) {
    if (args.device.type != PLLM_DEVICE_CPU)
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "example_llama runs on the CPU only");
    if (args.dtype != PLLM_DTYPE_INVALID && args.dtype != PLLM_DTYPE_F32) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "example_llama computes in f32: set model.dtype to auto or f32");
    }
    load_weights(args.model_path);
    // RoPE's inverse frequencies, as HF computes them: theta^(-2i / head_dim).
    for (int32_t i = 0; i < config_.head_dim / 2; ++i) {
      inv_freq_.push_back(1.0f / std::pow(config_.rope_theta, float(2 * i) / float(config_.head_dim)));
    }
    pllm::log_info("example_llama: ", config_.num_layers, " layers, hidden ", config_.hidden_size, ", vocab ",
                   config_.vocab_size, " (f32 weights)");
  }

  pllm_model_info info() {
    pllm_model_info info{};
    info.struct_size = sizeof(info);
    info.architecture = "LlamaForCausalLM";
    info.vocab_size = config_.vocab_size;
    info.hidden_size = config_.hidden_size;
    info.num_layers = config_.num_layers;
    info.num_heads = config_.num_heads;
    info.num_kv_heads = config_.num_kv_heads;
    info.head_dim = config_.head_dim;
    info.max_position_embeddings = config_.max_position_embeddings;
    info.dtype = PLLM_DTYPE_F32;  // activations and the KV cache
    info.bos_token_id = config_.bos_token_id;
    info.num_eos_token_ids = int32_t(config_.eos_token_ids.size());
    info.eos_token_ids = config_.eos_token_ids.data();
    return info;
  }

  void forward(const pllm_batch& batch, const pllm_attention_ref& attention, pllm_forward_output& out) {
    pllm::check_batch("example_llama", batch, attention, config_.vocab_size);
    const bool has_hidden = pllm::check_forward_output("example_llama", batch, out);
    const Config& c = config_;
    const int64_t tokens = batch.num_tokens, hidden = c.hidden_size, hd = c.head_dim;
    const int64_t q_width = int64_t(c.num_heads) * hd, kv_width = int64_t(c.num_kv_heads) * hd;

    // The residual stream: one row of `hidden` floats per token row.
    std::vector<float> x(static_cast<std::size_t>(tokens * hidden));
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy_n(&embed_[std::size_t(batch.token_ids[t] * hidden)], hidden, &x[std::size_t(t * hidden)]);
    }
    const auto buffer = [](int64_t size) { return std::vector<float>(std::size_t(size)); };
    auto normed = buffer(hidden), projected = buffer(hidden);
    auto q = buffer(tokens * q_width), k = buffer(tokens * kv_width), v = buffer(tokens * kv_width);
    auto attn = buffer(tokens * q_width), gate = buffer(c.intermediate_size), up = buffer(c.intermediate_size);

    for (int32_t l = 0; l < c.num_layers; ++l) {
      const Layer& w = layers_[std::size_t(l)];
      // Attention block: norm, project to Q/K/V, rotate Q and K by position.
      for (int64_t t = 0; t < tokens; ++t) {
        rms_norm(&x[std::size_t(t * hidden)], w.input_norm, c.rms_norm_eps, normed.data(), hidden);
        matvec(w.q, normed.data(), &q[std::size_t(t * q_width)], q_width, hidden);
        matvec(w.k, normed.data(), &k[std::size_t(t * kv_width)], kv_width, hidden);
        matvec(w.v, normed.data(), &v[std::size_t(t * kv_width)], kv_width, hidden);
        for (int32_t h = 0; h < c.num_heads; ++h) rope(&q[std::size_t(t * q_width + h * hd)], batch.positions[t]);
        for (int32_t h = 0; h < c.num_kv_heads; ++h) rope(&k[std::size_t(t * kv_width + h * hd)], batch.positions[t]);
      }
      // The backend writes K/V into its cache and attends: the one call that touches the KV cache.
      // The layer args hold the tensors by pointer: the descriptors live here for the call.
      const pllm_tensor query = cpu_f32_tensor(q.data(), {tokens, c.num_heads, hd});
      const pllm_tensor key = cpu_f32_tensor(k.data(), {tokens, c.num_kv_heads, hd});
      const pllm_tensor value = cpu_f32_tensor(v.data(), {tokens, c.num_kv_heads, hd});
      const pllm_tensor output = cpu_f32_tensor(attn.data(), {tokens, c.num_heads, hd});
      pllm_attention_layer_args layer{};
      layer.struct_size = sizeof(layer);
      layer.query = &query;
      layer.key = &key;
      layer.value = &value;
      layer.output = &output;
      layer.scale = 1.0f / std::sqrt(float(hd));
      layer.stream = nullptr;
      pllm_error error{};
      if (attention.api->run(attention.backend, l, &layer, &error) != PLLM_OK) {
        throw pllm::Error(PLLM_ERROR_INTERNAL,
                          "example_llama: attention of layer " + std::to_string(l) + " failed: " + error.message);
      }
      for (int64_t t = 0; t < tokens; ++t) {
        float* row = &x[std::size_t(t * hidden)];
        matvec(w.o, &attn[std::size_t(t * q_width)], projected.data(), hidden, q_width);
        for (int64_t i = 0; i < hidden; ++i) row[i] += projected[std::size_t(i)];
        // MLP block (SwiGLU): down(silu(gate(x)) * up(x)).
        rms_norm(row, w.post_attention_norm, c.rms_norm_eps, normed.data(), hidden);
        matvec(w.gate, normed.data(), gate.data(), c.intermediate_size, hidden);
        matvec(w.up, normed.data(), up.data(), c.intermediate_size, hidden);
        for (std::size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
        matvec(w.down, gate.data(), projected.data(), hidden, c.intermediate_size);
        for (int64_t i = 0; i < hidden; ++i) row[i] += projected[std::size_t(i)];
      }
    }

    // Final norm, then the lm_head for the rows core samples from.
    logits_.assign(std::size_t(int64_t(batch.num_logits) * c.vocab_size), 0.0f);
    for (int32_t i = 0; i < batch.num_logits; ++i) {
      rms_norm(&x[std::size_t(batch.logits_indices[i] * hidden)], final_norm_, c.rms_norm_eps, normed.data(), hidden);
      matvec(lm_head(), normed.data(), &logits_[std::size_t(int64_t(i) * c.vocab_size)], c.vocab_size, hidden);
    }
    *out.logits = cpu_f32_tensor(logits_.data(), {batch.num_logits, c.vocab_size});
    if (has_hidden) {
      const int32_t rows = PLLM_HAS_FIELD(pllm_batch, &batch, hidden_indices) ? batch.num_hidden : 0;
      hidden_.assign(std::size_t(int64_t(rows) * hidden), 0.0f);
      for (int32_t i = 0; i < rows; ++i) {
        rms_norm(&x[std::size_t(batch.hidden_indices[i] * hidden)], final_norm_, c.rms_norm_eps,
                 &hidden_[std::size_t(int64_t(i) * hidden)], hidden);
      }
      // No hidden rows asked for: an empty descriptor (ndim 0), still with its struct_size.
      *out.hidden = rows > 0 ? cpu_f32_tensor(hidden_.data(), {rows, hidden}) : cpu_f32_tensor(nullptr, {});
    }
  }

  // Lets a speculator share the embeddings and lm_head instead of loading its own copy.
  pllm_tensor get_tensor(const char* name) {
    const std::string n = name ? name : "";
    if (n == "model.embed_tokens.weight")
      return cpu_f32_tensor(embed_.data(), {config_.vocab_size, config_.hidden_size});
    if (n == "lm_head.weight") {
      return cpu_f32_tensor(const_cast<float*>(lm_head().data()), {config_.vocab_size, config_.hidden_size});
    }
    throw pllm::Error(PLLM_ERROR_NOT_FOUND, "example_llama: no shared tensor '" + n + "'");
  }

 private:
  // HF's rotate_half RoPE: pairs (i, i + head_dim/2) rotated by position * inv_freq[i].
  void rope(float* head, int32_t position) const {
    const int32_t half = config_.head_dim / 2;
    for (int32_t i = 0; i < half; ++i) {
      const float angle = float(position) * inv_freq_[std::size_t(i)];
      const float cos = std::cos(angle), sin = std::sin(angle);
      const float a = head[i], b = head[i + half];
      head[i] = a * cos - b * sin;
      head[i + half] = b * cos + a * sin;
    }
  }

  const Weights& lm_head() const { return config_.tie_word_embeddings ? embed_ : lm_head_; }

  void load_weights(const std::string& model_dir) {
    pllm::safetensors::Checkpoint ckpt(model_dir);
    const Config& c = config_;
    const int64_t hidden = c.hidden_size, ff = c.intermediate_size;
    const int64_t q_width = int64_t(c.num_heads) * c.head_dim, kv_width = int64_t(c.num_kv_heads) * c.head_dim;
    // Reads tensor `name`, checking its shape, widened to f32 (exact for f16 / bf16).
    const auto read = [&](const std::string& name, std::vector<int64_t> shape) {
      const auto& view = ckpt.require(name, shape);
      Weights values(std::size_t(view.numel()));
      view.to_f32(0, view.numel(), values.data());
      return values;
    };
    embed_ = read("model.embed_tokens.weight", {c.vocab_size, hidden});
    for (int32_t l = 0; l < c.num_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      layers_.push_back(
          {read(p + "input_layernorm.weight", {hidden}), read(p + "self_attn.q_proj.weight", {q_width, hidden}),
           read(p + "self_attn.k_proj.weight", {kv_width, hidden}),
           read(p + "self_attn.v_proj.weight", {kv_width, hidden}),
           read(p + "self_attn.o_proj.weight", {hidden, q_width}),
           read(p + "post_attention_layernorm.weight", {hidden}), read(p + "mlp.gate_proj.weight", {ff, hidden}),
           read(p + "mlp.up_proj.weight", {ff, hidden}), read(p + "mlp.down_proj.weight", {hidden, ff})});
      pllm::report_progress("example_llama: loading layers", l + 1, c.num_layers);
    }
    final_norm_ = read("model.norm.weight", {hidden});
    if (!c.tie_word_embeddings) lm_head_ = read("lm_head.weight", {c.vocab_size, hidden});
  }

  Config config_;
  Weights embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;
  std::vector<float> logits_, hidden_;  // the outputs of the last forward()
};

}  // namespace

PAGEDLLM_PLUGIN(ExampleLlama, "example_llama", "1.0.0", "Example: the Llama architecture in plain C++ (CPU, f32)")
