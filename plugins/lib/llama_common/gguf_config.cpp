// LlamaConfig from a GGUF file's metadata (the llama.* keys llama.cpp's
// convert_hf_to_gguf.py writes for LlamaForCausalLM), with the same checks as
// config.json's reader: every error names the file and the key.

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "pagedllm/sdk.hpp"
#include "pagedllm/sdk/cpp/gguf.hpp"
#include "llama_common/llama_config.h"

namespace pagedllm::llama {
namespace {

constexpr int64_t kMaxSize = int64_t(1) << 24;  // as config.json's reader

class Metadata {
 public:
  Metadata(const pllm::gguf::File& file, std::string_view who) : file_(file), who_(who) {}

  [[noreturn]] void fail(std::string_view key, const std::string& message,
                         pllm_status status = PLLM_ERROR_INVALID_CONFIG) const {
    file_.fail(status, "metadata '" + std::string(key) + "' " + message);
  }

  const pllm::gguf::Value* find(std::string_view key) const { return file_.find_metadata(key); }

  int64_t require_int(std::string_view key, int64_t lo, int64_t hi) const {
    const pllm::gguf::Value* v = find(key);
    if (!v) fail(key, "is required");
    return check_int(key, *v, lo, hi);
  }
  int64_t get_int(std::string_view key, int64_t fallback, int64_t lo, int64_t hi) const {
    const pllm::gguf::Value* v = find(key);
    return v ? check_int(key, *v, lo, hi) : fallback;
  }
  int64_t check_int(std::string_view key, const pllm::gguf::Value& v, int64_t lo, int64_t hi) const {
    if (!v.is_integer()) fail(key, std::string("must be an integer, got ") + pllm::gguf::value_type_name(v.type));
    const bool huge = !v.is_signed() && v.u > uint64_t(std::numeric_limits<int64_t>::max());
    const int64_t value = v.is_signed() ? v.i : int64_t(v.u);
    if (huge || value < lo || value > hi) {
      fail(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                    (v.is_signed() ? std::to_string(v.i) : std::to_string(v.u)));
    }
    return value;
  }

  double get_positive(std::string_view key, double fallback, bool required = false) const {
    const pllm::gguf::Value* v = find(key);
    if (!v) {
      if (required) fail(key, "is required");
      return fallback;
    }
    const bool is_float = v->type == pllm::gguf::ValueType::FLOAT32 || v->type == pllm::gguf::ValueType::FLOAT64;
    if (!is_float) fail(key, std::string("must be a float, got ") + pllm::gguf::value_type_name(v->type));
    if (!(v->f > 0.0) || !std::isfinite(v->f)) fail(key, "must be a positive number, got " + std::to_string(v->f));
    return v->f;
  }

  std::string get_string(std::string_view key, const std::string& fallback) const {
    const pllm::gguf::Value* v = find(key);
    if (!v) return fallback;
    if (v->type != pllm::gguf::ValueType::STRING) {
      fail(key, std::string("must be a string, got ") + pllm::gguf::value_type_name(v->type));
    }
    return v->s;
  }

  const std::string& who() const { return who_; }

 private:
  const pllm::gguf::File& file_;
  std::string who_;
};

// rope_freqs.weight: llama3 (or any per-frequency) scaling, precomputed.
void read_rope_factors(const pllm::gguf::File& file, const Metadata& m, LlamaConfig& c) {
  const pllm::gguf::TensorInfo* factors = file.find("rope_freqs.weight");
  if (!factors) return;
  if (c.rope_scaling.type != RopeScaling::Type::kNone) {
    m.fail("llama.rope.scaling.type", "is set next to a rope_freqs.weight tensor; " + m.who() +
                                          " applies one of them, not both", PLLM_ERROR_UNSUPPORTED);
  }
  if (factors->dims != std::vector<int64_t>{c.head_dim / 2}) {
    file.fail(PLLM_ERROR_INVALID_CONFIG, "tensor 'rope_freqs.weight' must have head_dim / 2 = " +
                                             std::to_string(c.head_dim / 2) + " elements");
  }
  std::vector<float> values(std::size_t(c.head_dim / 2));
  factors->to_f32(0, c.head_dim / 2, values.data());
  for (float f : values) {
    if (!(f > 0.0f) || !std::isfinite(f)) {
      file.fail(PLLM_ERROR_INVALID_CONFIG, "tensor 'rope_freqs.weight' holds " + std::to_string(f) +
                                               "; the factors must be positive");
    }
  }
  c.rope_scaling.type = RopeScaling::Type::kFactors;
  c.rope_scaling.freq_factors.assign(values.begin(), values.end());
}

void add_eos(LlamaConfig& c, int32_t id) {
  if (id >= 0 && std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) {
    c.eos_token_ids.push_back(id);
  }
}

}  // namespace

LlamaConfig LlamaConfig::from_gguf(const std::filesystem::path& gguf_path, std::string_view who) {
  const pllm::gguf::File file(gguf_path);
  const Metadata m(file, who);
  const std::string arch = m.get_string("general.architecture", "");
  if (arch.empty()) m.fail("general.architecture", "is required");
  if (arch != "llama") {
    m.fail("general.architecture", "is \"" + arch + "\"; " + std::string(who) + " loads llama only",
           PLLM_ERROR_UNSUPPORTED);
  }
  if (m.get_int("llama.expert_count", 0, 0, 4096) > 0) {
    m.fail("llama.expert_count", "is set; " + std::string(who) + " has no mixture-of-experts layers",
           PLLM_ERROR_UNSUPPORTED);
  }

  LlamaConfig c;
  if (m.find("llama.vocab_size")) {
    c.vocab_size = int32_t(m.require_int("llama.vocab_size", 1, std::numeric_limits<int32_t>::max()));
  } else if (const pllm::gguf::Value* tokens = m.find("tokenizer.ggml.tokens");
             tokens && tokens->type == pllm::gguf::ValueType::ARRAY && !tokens->array.empty()) {
    c.vocab_size = int32_t(std::min<std::size_t>(tokens->array.size(), std::numeric_limits<int32_t>::max()));
  } else {
    m.fail("llama.vocab_size", "is required (there is no tokenizer.ggml.tokens list either)");
  }
  c.hidden_size = int32_t(m.require_int("llama.embedding_length", 1, kMaxSize));
  c.intermediate_size = int32_t(m.require_int("llama.feed_forward_length", 1, kMaxSize));
  c.num_layers = int32_t(m.require_int("llama.block_count", 1, 4096));
  c.num_heads = int32_t(m.require_int("llama.attention.head_count", 1, 4096));
  c.num_kv_heads = int32_t(m.get_int("llama.attention.head_count_kv", c.num_heads, 1, 4096));
  if (c.num_heads % c.num_kv_heads != 0) {
    m.fail("llama.attention.head_count_kv", "= " + std::to_string(c.num_kv_heads) +
                                                " does not divide llama.attention.head_count = " +
                                                std::to_string(c.num_heads));
  }
  if (m.find("llama.attention.key_length")) {
    c.head_dim = int32_t(m.require_int("llama.attention.key_length", 2, 4096));
    if (m.get_int("llama.attention.value_length", c.head_dim, 1, 4096) != c.head_dim) {
      m.fail("llama.attention.value_length", "differs from llama.attention.key_length; " + std::string(who) +
                                                 " needs one head size", PLLM_ERROR_UNSUPPORTED);
    }
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      m.fail("llama.embedding_length", "= " + std::to_string(c.hidden_size) +
                                           " is not a multiple of llama.attention.head_count = " +
                                           std::to_string(c.num_heads) + " (and there is no key_length)");
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) {
    m.fail("llama.attention.key_length", "= " + std::to_string(c.head_dim) + " must be even (RoPE rotates pairs)");
  }
  if (m.get_int("llama.rope.dimension_count", c.head_dim, 1, 4096) != c.head_dim) {
    m.fail("llama.rope.dimension_count", "is not the head size " + std::to_string(c.head_dim) + "; " +
                                             std::string(who) + " rotates whole heads", PLLM_ERROR_UNSUPPORTED);
  }
  c.max_position_embeddings =
      int32_t(m.require_int("llama.context_length", 1, std::numeric_limits<int32_t>::max()));
  c.rms_norm_eps = m.get_positive("llama.attention.layer_norm_rms_epsilon", 0.0, true);
  c.rope_theta = m.get_positive("llama.rope.freq_base", 10000.0);

  const std::string scaling = m.get_string("llama.rope.scaling.type", "none");
  if (scaling == "linear") {
    c.rope_scaling.type = RopeScaling::Type::kLinear;
    c.rope_scaling.factor = m.get_positive("llama.rope.scaling.factor", 0.0, true);
  } else if (scaling != "none") {
    m.fail("llama.rope.scaling.type", "is \"" + scaling + "\"; " + std::string(who) +
                                          " supports none and linear (and llama3 as rope_freqs.weight)",
           PLLM_ERROR_UNSUPPORTED);
  } else if (m.find("llama.rope.scale_linear")) {  // the key older files write
    c.rope_scaling.type = RopeScaling::Type::kLinear;
    c.rope_scaling.factor = m.get_positive("llama.rope.scale_linear", 1.0);
  }
  read_rope_factors(file, m, c);

  c.tie_word_embeddings = file.find("output.weight") == nullptr;
  const int64_t last_id = int64_t(c.vocab_size) - 1;
  c.bos_token_id = int32_t(m.get_int("tokenizer.ggml.bos_token_id", -1, 0, last_id));
  // llama.cpp ends a generation at eos, eot (<|eot_id|>) and eom alike.
  for (const char* key :
       {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    add_eos(c, int32_t(m.get_int(key, -1, 0, last_id)));
  }
  return c;
}

}  // namespace pagedllm::llama
