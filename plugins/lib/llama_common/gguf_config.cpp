// LlamaConfig from a GGUF file's metadata (the llama.* keys llama.cpp's
// convert_hf_to_gguf.py writes for LlamaForCausalLM), with the same checks as
// config.json's reader: every error names the file and the key, and every
// llama.* key is read or on the harmless list (config_keys.h), or refused.

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "pagedllm/sdk.hpp"
#include "pagedllm/sdk/cpp/gguf.hpp"
#include "llama_common/config_keys.h"
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

  // Marks the key read.
  const pllm::gguf::Value* find(std::string_view key) const {
    read_.emplace(key);
    return file_.find_metadata(key);
  }

  // A key written under `prefix` that no find() has looked at, in file order; null when none.
  const std::string* first_unread(std::string_view prefix) const {
    for (const auto& [key, value] : file_.metadata()) {
      if (key.rfind(prefix, 0) == 0 && !read_.count(key)) return &key;
    }
    return nullptr;
  }

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
  const std::vector<std::pair<std::string, pllm::gguf::Value>>& metadata() const { return file_.metadata(); }

 private:
  const pllm::gguf::File& file_;
  std::string who_;
  mutable std::set<std::string, std::less<>> read_;
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

// llama.rope.scaling.*, as llama.cpp reads it: the type defaults to linear, the factor is
// rope.scaling.factor or the older rope.scale_linear (two that disagree are refused), and a
// factor of 0 or 1 means none.
void read_rope_scaling(const Metadata& m, LlamaConfig& c) {
  const bool has_factor = m.find("llama.rope.scaling.factor") != nullptr;
  const bool has_old_factor = m.find("llama.rope.scale_linear") != nullptr;
  const std::string scaling = m.get_string("llama.rope.scaling.type", "linear");
  const auto factor_at = [&](const char* key) {
    const pllm::gguf::Value* v = m.find(key);
    const bool is_float = v->type == pllm::gguf::ValueType::FLOAT32 || v->type == pllm::gguf::ValueType::FLOAT64;
    if (!is_float) m.fail(key, std::string("must be a float, got ") + pllm::gguf::value_type_name(v->type));
    if (!(v->f >= 0.0) || !std::isfinite(v->f)) m.fail(key, "must be 0 (none) or positive, got " + std::to_string(v->f));
    return v->f;
  };
  const double factor = has_factor ? factor_at("llama.rope.scaling.factor") : 0.0;
  const double old_factor = has_old_factor ? factor_at("llama.rope.scale_linear") : 0.0;
  if (has_factor && has_old_factor && factor != old_factor) {
    m.fail("llama.rope.scale_linear", "is " + std::to_string(old_factor) + " but llama.rope.scaling.factor is " +
                                          std::to_string(factor) + ": two spellings of one setting that disagree");
  }
  const double scale = has_factor ? factor : old_factor;
  const bool scaled = scale != 0.0 && scale != 1.0;
  if (scaling == "none") {
    if (scaled) {
      m.fail("llama.rope.scaling.factor", "is " + std::to_string(scale) + " next to llama.rope.scaling.type none "
                                          "(llama.cpp would still scale the positions): contradictory");
    }
  } else if (scaling == "linear") {
    if (scaled) {
      c.rope_scaling.type = RopeScaling::Type::kLinear;
      c.rope_scaling.factor = scale;
    }
  } else {
    m.fail("llama.rope.scaling.type", "is \"" + scaling + "\"; " + m.who() +
                                          " supports none and linear (and llama3 as rope_freqs.weight)",
           PLLM_ERROR_UNSUPPORTED);
  }
  // Only YaRN reads the original context length; with linear scaling or none it is a note.
  (void)m.find("llama.rope.scaling.original_context_length");
}

// Every key under the architecture's prefix is read above or harmless (config_keys.h); every other key
// is the general.* description, the tokenizer's tokenizer.*, split.* (checked above) or llama-quantize's
// quantize.* notes. Anything else could change the forward and is refused.
void refuse_unread_arch_keys(const Metadata& m, const std::string& arch_prefix) {
  for (const std::string* key = m.first_unread(arch_prefix); key; key = m.first_unread(arch_prefix)) {
    if (!find_harmless_gguf_arch_key(std::string_view(*key).substr(arch_prefix.size()))) {
      m.fail(*key, "is not a setting " + m.who() + " reads, and it could change what the model computes: "
                   "refused rather than ignored", PLLM_ERROR_UNSUPPORTED);
    }
    (void)m.find(*key);
  }
  for (const auto& [key, value] : m.metadata()) {
    const bool known = key.rfind("general.", 0) == 0 || key.rfind("tokenizer.", 0) == 0 ||
                       key.rfind("split.", 0) == 0 || key.rfind("quantize.", 0) == 0 ||
                       key.rfind(arch_prefix, 0) == 0;
    if (!known) {
      m.fail(key, "is not a key of a " + arch_prefix.substr(0, arch_prefix.size() - 1) + " model file: refused "
                  "rather than ignored", PLLM_ERROR_UNSUPPORTED);
    }
  }
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
  if (const std::string type = m.get_string("general.type", "model"); type != "model") {
    m.fail("general.type", "is \"" + type + "\"; " + std::string(who) + " loads models (a LoRA adapter is not one)",
           PLLM_ERROR_UNSUPPORTED);
  }
  if (const int64_t parts = m.get_int("split.count", 1, 0, 1 << 16); parts > 1) {
    m.fail("split.count", "is " + std::to_string(parts) + ": the model is split over several files, and " +
                              std::string(who) + " reads one (merge them with llama-gguf-split --merge)",
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

  read_rope_scaling(m, c);
  read_rope_factors(file, m, c);

  (void)m.get_int("llama.expert_used_count", 0, 0, 0);  // 0 or absent: no experts (expert_count above)
  refuse_unread_arch_keys(m, "llama.");

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
