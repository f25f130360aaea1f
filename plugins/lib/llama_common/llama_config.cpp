#include "llama_common/llama_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "pagedllm/sdk.hpp"
#include "llama_common/config_keys.h"

namespace pagedllm::llama {
namespace {

using nlohmann::json;

// Sizes beyond this are not a Llama this plugin could hold in memory anyway;
// the bound keeps every product of two sizes inside int64.
constexpr int64_t kMaxSize = int64_t(1) << 24;

// One JSON file's object, read key by key with errors naming file and key.
class Fields {
 public:
  Fields(std::filesystem::path path, const json& object) : path_(std::move(path)), object_(object) {}

  static json parse_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw pllm::Error(PLLM_ERROR_NOT_FOUND, path.string() + ": cannot open");
    std::stringstream text;
    text << in.rdbuf();
    json parsed = json::parse(text.str(), nullptr, false);
    if (parsed.is_discarded()) throw pllm::Error(PLLM_ERROR_INVALID_CONFIG, path.string() + ": not valid JSON");
    if (!parsed.is_object()) throw pllm::Error(PLLM_ERROR_INVALID_CONFIG, path.string() + ": not a JSON object");
    return parsed;
  }

  [[noreturn]] void fail(std::string_view key, const std::string& message,
                         pllm_status status = PLLM_ERROR_INVALID_CONFIG) const {
    throw pllm::Error(status, path_.string() + ": '" + std::string(key) + "' " + message);
  }

  // Absent and null are the same: HF writes null for "use the default". Marks the key read.
  const json* find(std::string_view key) const {
    read_.emplace(key);
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  // The object's keys with a value that no find() has looked at.
  std::vector<std::string> unread() const {
    std::vector<std::string> keys;
    for (const auto& [key, value] : object_.items()) {
      if (!value.is_null() && !read_.count(key)) keys.push_back(key);
    }
    return keys;
  }

  int64_t require_int(std::string_view key, int64_t lo, int64_t hi) const {
    const json* v = find(key);
    if (!v) fail(key, "is required");
    return check_int(key, *v, lo, hi);
  }
  int64_t get_int(std::string_view key, int64_t fallback, int64_t lo, int64_t hi) const {
    const json* v = find(key);
    return v ? check_int(key, *v, lo, hi) : fallback;
  }
  int64_t check_int(std::string_view key, const json& v, int64_t lo, int64_t hi) const {
    if (!v.is_number_integer()) fail(key, "must be an integer, got " + v.dump());
    const bool huge = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max());
    if (huge || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      fail(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v.dump());
    }
    return v.get<int64_t>();
  }

  double require_positive(std::string_view key) const {
    const json* v = find(key);
    if (!v) fail(key, "is required");
    return check_positive(key, *v);
  }
  double get_positive(std::string_view key, double fallback) const {
    const json* v = find(key);
    return v ? check_positive(key, *v) : fallback;
  }
  double check_positive(std::string_view key, const json& v) const {
    if (!v.is_number()) fail(key, "must be a number, got " + v.dump());
    const double d = v.get<double>();
    if (!(d > 0.0) || !std::isfinite(d)) fail(key, "must be a positive number, got " + v.dump());
    return d;
  }

  bool get_bool(std::string_view key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "must be true or false, got " + v->dump());
    return v->get<bool>();
  }

  // An id or a list of ids, each in [0, vocab_size).
  std::vector<int32_t> token_ids(std::string_view key, int64_t vocab_size) const {
    std::vector<int32_t> ids;
    const json* v = find(key);
    if (!v) return ids;
    auto add = [&](const json& id) {
      if (!id.is_number_integer()) fail(key, "must be a token id or a list of them, got " + v->dump());
      const bool huge = id.is_number_unsigned() && id.get<uint64_t>() >= uint64_t(vocab_size);
      const int64_t value = huge ? vocab_size : id.get<int64_t>();
      if (value < 0 || value >= vocab_size) {
        fail(key, "holds token id " + id.dump() + ", outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
      }
      if (std::find(ids.begin(), ids.end(), int32_t(value)) == ids.end()) ids.push_back(int32_t(value));
    };
    if (v->is_array()) {
      for (const auto& id : *v) add(id);
    } else {
      add(*v);
    }
    return ids;
  }

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const json& object_;
  mutable std::set<std::string, std::less<>> read_;
};

// The families config.json's `architectures` can name, each with the model_type transformers pairs it with.
struct ArchitectureName {
  std::string_view hf_class;
  Architecture architecture;
};
constexpr ArchitectureName kArchitectures[] = {
    {"LlamaForCausalLM", Architecture::kLlama},
    {"MistralForCausalLM", Architecture::kMistral},
    {"Qwen2ForCausalLM", Architecture::kQwen2},
    {"Qwen3ForCausalLM", Architecture::kQwen3},
    {"MixtralForCausalLM", Architecture::kMixtral},
    {"Qwen3MoeForCausalLM", Architecture::kQwen3Moe},
    {"Gemma3ForCausalLM", Architecture::kGemma3},
    {"Phi3ForCausalLM", Architecture::kPhi3},
};

std::string supported_classes() {
  std::string names;
  for (const ArchitectureName& a : kArchitectures) names += (names.empty() ? "" : ", ") + std::string(a.hf_class);
  return names;
}

Architecture read_architecture(const Fields& f, std::string_view who) {
  const json* archs = f.find("architectures");
  if (!archs) f.fail("architectures", "is required (" + std::string(who) + " loads " + supported_classes() + ")");
  if (!archs->is_array() || archs->empty()) f.fail("architectures", "must be a non-empty list, got " + archs->dump());
  std::optional<Architecture> found;
  for (const auto& a : *archs) {
    for (const ArchitectureName& known : kArchitectures) {
      if (!found && a.is_string() && a.get<std::string>() == known.hf_class) found = known.architecture;
    }
  }
  if (!found) {
    f.fail("architectures", "is " + archs->dump() + "; " + std::string(who) + " loads " + supported_classes(),
           PLLM_ERROR_UNSUPPORTED);
  }
  if (const json* type = f.find("model_type");
      type && !(type->is_string() && type->get<std::string>() == architecture_name(*found))) {
    f.fail("model_type", "is " + type->dump() + " next to " + archs->dump() + "; transformers would build that "
                         "model type's configuration, which " + std::string(who) + " does not read",
           PLLM_ERROR_UNSUPPORTED);
  }
  return *found;
}

// layer_types (transformers writes it where a model can mix attention kinds): each "full_attention" or
// "sliding_attention"; which a family accepts, read_family_features decides. Empty when absent.
std::vector<bool> read_sliding_layers(const Fields& f, int32_t num_layers, std::string_view who) {
  const json* types = f.find("layer_types");
  if (!types) return {};
  if (!types->is_array() || types->size() != std::size_t(num_layers)) {
    f.fail("layer_types", "must be a list of num_hidden_layers = " + std::to_string(num_layers) + " layer types");
  }
  std::vector<bool> sliding;
  for (std::size_t i = 0; i < types->size(); ++i) {
    const json& t = (*types)[i];
    const std::string type = t.is_string() ? t.get<std::string>() : "";
    if (type != "full_attention" && type != "sliding_attention") {
      f.fail("layer_types[" + std::to_string(i) + "]", "is " + t.dump() + "; " + std::string(who) +
                                                       " runs full_attention and sliding_attention layers",
             PLLM_ERROR_UNSUPPORTED);
    }
    sliding.push_back(type == "sliding_attention");
  }
  return sliding;
}

// Keys of a router's training loss and outputs: no effect on the forward at inference (jitter noise only when
// training, as transformers applies it).
void read_router_training_keys(const Fields& f) {
  (void)f.find("router_aux_loss_coef");
  (void)f.get_bool("output_router_logits", false);
  if (const json* jitter = f.find("router_jitter_noise"); jitter && !jitter->is_number()) {
    f.fail("router_jitter_noise", "must be a number, got " + jitter->dump());
  }
}

// Qwen3-MoE: experts of moe_intermediate_size in every decoder_sparse_step-th layer but those mlp_only_layers
// lists (which keep a dense MLP of intermediate_size), transformers' rule.
void read_qwen3_moe(const Fields& f, LlamaConfig& c) {
  c.num_experts = int32_t(f.require_int("num_experts", 0, 4096));
  if (c.num_experts == 0) return;
  c.num_experts_per_tok = int32_t(f.require_int("num_experts_per_tok", 1, c.num_experts));
  c.expert_intermediate_size = int32_t(f.require_int("moe_intermediate_size", 1, kMaxSize));
  c.normalize_top_k = f.get_bool("norm_topk_prob", false);
  const int64_t step = f.get_int("decoder_sparse_step", 1, 1, 4096);
  std::vector<bool> dense(std::size_t(c.num_layers), false);
  if (const json* only = f.find("mlp_only_layers")) {
    if (!only->is_array()) f.fail("mlp_only_layers", "must be a list of layer indices, got " + only->dump());
    for (const json& l : *only) f.check_int("mlp_only_layers", l, 0, c.num_layers - 1);
    for (const json& l : *only) dense[l.get<std::size_t>()] = true;
  }
  c.moe_layers.resize(std::size_t(c.num_layers));
  for (int32_t l = 0; l < c.num_layers; ++l) c.moe_layers[std::size_t(l)] = !dense[std::size_t(l)] && (l + 1) % step == 0;
  read_router_training_keys(f);
}

// Gemma 3 (Gemma3ForCausalLM, model_type gemma3_text), as transformers' Gemma3TextConfig reads it: (1 + w) norms
// before and after each sublayer, q/k norms, GeGLU-tanh, the embedding scaled by sqrt(hidden), the softmax
// scale from query_pre_attn_scalar, and local layers (a sliding window, their own RoPE base) among global ones.
// layer_types says which layers are local; without it, every sliding_window_pattern-th layer is global.
void read_gemma3(const Fields& f, LlamaConfig& c, std::string_view who, const std::vector<bool>& sliding_layers,
                 const std::function<void(int32_t, const std::function<bool(int32_t)>&)>& set_windows) {
  const std::string by = "; " + std::string(who);
  c.qkv_bias = c.o_bias = f.get_bool("attention_bias", false);
  c.qk_norm = c.unit_offset_norms = c.sandwich_norms = c.scale_embedding = true;
  const json* act = f.find("hidden_activation");
  if (act && !(act->is_string() && act->get<std::string>() == "gelu_pytorch_tanh")) {
    f.fail("hidden_activation", "is " + act->dump() + by + " implements gelu_pytorch_tanh for Gemma",
           PLLM_ERROR_UNSUPPORTED);
  }
  c.hidden_activation = Activation::kGeluTanh;
  c.query_pre_attn_scalar = f.get_positive("query_pre_attn_scalar", 256.0);
  c.final_logit_softcapping = f.get_positive("final_logit_softcapping", 0.0);
  if (const json* cap = f.find("attn_logit_softcapping")) {
    f.fail("attn_logit_softcapping", "is " + cap->dump() + by + " has no soft-capping of attention scores yet",
           PLLM_ERROR_UNSUPPORTED);
  }
  if (f.get_bool("use_bidirectional_attention", false)) {
    f.fail("use_bidirectional_attention", "is true" + by + " serves causal decoders", PLLM_ERROR_UNSUPPORTED);
  }
  const double local_base = f.get_positive("rope_local_base_freq", 10000.0);
  if (c.local_rope_theta > 0.0 && f.find("rope_local_base_freq") && c.local_rope_theta != local_base) {
    f.fail("rope_local_base_freq", "is " + std::to_string(local_base) + " but 'rope_parameters.sliding_attention."
                                   "rope_theta' is " + std::to_string(c.local_rope_theta) +
                                   ": two spellings of one setting that disagree");
  }
  if (c.local_rope_theta == 0.0) c.local_rope_theta = local_base;
  const json* window = f.find("sliding_window");
  const int32_t w = window ? int32_t(f.check_int("sliding_window", *window, 1, std::numeric_limits<int32_t>::max()))
                           : 4096;
  // transformers 4 writes the legacy pattern as _sliding_window_pattern next to layer_types, which it follows.
  int64_t pattern = f.get_int("sliding_window_pattern", 6, 1, 4096);
  pattern = f.get_int("_sliding_window_pattern", pattern, 1, 4096);
  if (!sliding_layers.empty()) {
    set_windows(w, [&](int32_t l) { return bool(sliding_layers[std::size_t(l)]); });
  } else {
    set_windows(w, [&](int32_t l) { return (l + 1) % pattern != 0; });
  }
}

// The optional parts of the layer each family's config.json turns on, and its sliding-window keys: what a
// window would change is refused (the attention contract has no window yet), what cannot change anything is
// read and passed.
void read_family_features(const Fields& f, LlamaConfig& c, std::string_view who) {
  const std::string by = "; " + std::string(who);
  const std::vector<bool> sliding_layers = read_sliding_layers(f, c.num_layers, who);
  const auto window_key = [&]() -> int32_t {
    const json* window = f.find("sliding_window");
    return window ? int32_t(f.check_int("sliding_window", *window, 1, std::numeric_limits<int32_t>::max())) : 0;
  };
  // The window of each layer `sliding(l)` says slides; layer_types, where written, must say the same.
  const auto set_windows = [&](int32_t window, const std::function<bool(int32_t)>& sliding) {
    c.layer_windows.assign(std::size_t(c.num_layers), 0);
    for (int32_t l = 0; l < c.num_layers; ++l) {
      if (sliding(l)) c.layer_windows[std::size_t(l)] = window;
      if (!sliding_layers.empty() && sliding_layers[std::size_t(l)] != sliding(l)) {
        f.fail("layer_types[" + std::to_string(l) + "]", std::string("is ") +
                   (sliding_layers[std::size_t(l)] ? "sliding_attention" : "full_attention") +
                   " but the window keys make layer " + std::to_string(l) +
                   (sliding(l) ? " a sliding one" : " a full one") + ": two spellings of one setting that disagree");
      }
    }
  };
  switch (c.architecture) {
    case Architecture::kLlama:
      c.qkv_bias = c.o_bias = f.get_bool("attention_bias", false);
      c.mlp_bias = f.get_bool("mlp_bias", false);
      if (const json* window = f.find("sliding_window")) {
        f.fail("sliding_window", "is " + window->dump() + by + " has no sliding-window attention for a Llama",
               PLLM_ERROR_UNSUPPORTED);
      }
      if (f.get_bool("use_sliding_window", false)) {
        f.fail("use_sliding_window", "is true" + by + " has no sliding-window attention for a Llama",
               PLLM_ERROR_UNSUPPORTED);
      }
      set_windows(0, [](int32_t) { return false; });
      break;
    case Architecture::kMistral:
    case Architecture::kMixtral: {
      // Every layer slides when sliding_window is set (Mistral v0.1: 4096; null from v0.2 on).
      const int32_t window = window_key();
      set_windows(window, [&](int32_t) { return window > 0; });
      if (c.architecture == Architecture::kMixtral) {
        c.num_experts = int32_t(f.require_int("num_local_experts", 1, 4096));
        c.num_experts_per_tok = int32_t(f.require_int("num_experts_per_tok", 1, c.num_experts));
        c.expert_intermediate_size = c.intermediate_size;
        c.normalize_top_k = true;
        c.moe_layers.assign(std::size_t(c.num_layers), true);
        read_router_training_keys(f);
      }
      break;
    }
    case Architecture::kQwen2:
    case Architecture::kQwen3:
    case Architecture::kQwen3Moe: {
      c.qkv_bias = true;
      if (c.architecture != Architecture::kQwen2) {
        c.qkv_bias = c.o_bias = f.get_bool("attention_bias", false);
        c.qk_norm = true;
      }
      // transformers windows layers max_window_layers.. only when use_sliding_window is true; Qwen2.5's
      // files carry sliding_window and max_window_layers with use_sliding_window false.
      const bool windowed = f.get_bool("use_sliding_window", false);
      const int32_t window = window_key();
      const int64_t first_windowed = f.get_int("max_window_layers", c.num_layers, 0, 4096);
      if (windowed && window == 0) {
        f.fail("use_sliding_window", "is true without a sliding_window", PLLM_ERROR_INVALID_CONFIG);
      }
      set_windows(window, [&](int32_t l) { return windowed && l >= first_windowed; });
      if (c.architecture == Architecture::kQwen3Moe) read_qwen3_moe(f, c);
      break;
    }
    case Architecture::kGemma3:
      read_gemma3(f, c, who, sliding_layers, set_windows);
      break;
    case Architecture::kPhi3: {
      // transformers' Phi3 masks every layer to sliding_window when it is set (Phi-3-mini-4k: 2047).
      const int32_t window = window_key();
      set_windows(window, [&](int32_t) { return window > 0; });
      c.fused_checkpoint_tensors = true;
      // Dropout probabilities: training only.
      for (const char* key : {"resid_pdrop", "embd_pdrop"}) {
        if (const json* p = f.find(key); p && !p->is_number()) f.fail(key, "must be a number, got " + p->dump());
      }
      break;
    }
  }
}

// Features of HF's LlamaConfig this plugin does not implement: refused, never ignored.
void check_unsupported_features(const Fields& f, Architecture architecture, std::string_view who) {
  const std::string by = "; " + std::string(who);
  // (Gemma's activation is its hidden_activation, read with its family.)
  if (const json* act = architecture == Architecture::kGemma3 ? nullptr : f.find("hidden_act");
      act && !(act->is_string() && act->get<std::string>() == "silu")) {
    f.fail("hidden_act", "is " + act->dump() + by + " implements silu only", PLLM_ERROR_UNSUPPORTED);
  }
  // nanotron's flag: true means the weights were trained with interleaved pairs, which transformers does not
  // apply (and pagedllm follows transformers); false is transformers' rotate-half.
  if (f.get_bool("rope_interleaved", false)) {
    f.fail("rope_interleaved", "is true (RoPE over interleaved pairs)" + by + " rotates halves, as transformers does",
           PLLM_ERROR_UNSUPPORTED);
  }
  if (f.get_bool("is_encoder_decoder", false)) {
    f.fail("is_encoder_decoder", "is true; " + std::string(who) + " serves decoders", PLLM_ERROR_UNSUPPORTED);
  }
  if (const json* pruned = f.find("pruned_heads"); pruned && !(pruned->is_object() && pruned->empty())) {
    f.fail("pruned_heads", "is " + pruned->dump() + by + " has no pruned attention heads", PLLM_ERROR_UNSUPPORTED);
  }
  // auto_map naming a model class means custom modeling code (trust_remote_code), not transformers' Llama.
  if (const json* auto_map = f.find("auto_map")) {
    if (!auto_map->is_object()) f.fail("auto_map", "must be an object, got " + auto_map->dump());
    for (const auto& [name, target] : auto_map->items()) {
      if (name.rfind("AutoModel", 0) == 0) {
        f.fail("auto_map." + name, "is " + target.dump() + ": custom modeling code, which " + std::string(who) +
                                       " does not run", PLLM_ERROR_UNSUPPORTED);
      }
    }
  }
  // transformers 5 writes "dtype", 4.x "torch_dtype" (5 prefers dtype). Weights are read in their stored dtype
  // either way; two spellings that disagree say the file was edited by hand.
  const json* dtype = f.find("dtype");
  const json* torch_dtype = f.find("torch_dtype");
  for (const auto& [key, v] : {std::pair{"dtype", dtype}, std::pair{"torch_dtype", torch_dtype}}) {
    if (v && !v->is_string()) f.fail(key, "must be a string, got " + v->dump());
  }
  if (dtype && torch_dtype && *dtype != *torch_dtype) {
    f.fail("torch_dtype", "is " + torch_dtype->dump() + " but 'dtype' is " + dtype->dump() +
                              ": two spellings of one setting that disagree");
  }
}

// One description of RoPE: transformers 5's rope_parameters (or one layer type's entry of it), or 4.x's
// rope_scaling. What it leaves unwritten is filled in by resolve_rope.
struct RopeEntry {
  std::optional<double> theta;
  RopeScaling scaling;
  std::optional<double> original_max_position_embeddings;  // llama3's, longrope's and yarn's, where written
  // yarn's mscale and mscale_all_dim (DeepSeek's), when both are written and attention_factor is not.
  std::optional<std::pair<double, double>> yarn_mscales;
  bool operator==(const RopeEntry&) const = default;
};

std::string describe(const RopeEntry& e) {
  std::ostringstream out;
  switch (e.scaling.type) {
    case RopeScaling::Type::kNone: out << "default"; break;
    case RopeScaling::Type::kLinear: out << "linear, factor " << e.scaling.factor; break;
    case RopeScaling::Type::kLlama3:
      out << "llama3, factor " << e.scaling.factor << ", low/high " << e.scaling.low_freq_factor << "/"
          << e.scaling.high_freq_factor;
      break;
    case RopeScaling::Type::kFactors: out << "per-frequency factors"; break;
    case RopeScaling::Type::kLongRope: out << "longrope"; break;
    case RopeScaling::Type::kYarn:
      out << "yarn, factor " << e.scaling.factor << ", beta_fast/slow " << e.scaling.beta_fast << "/"
          << e.scaling.beta_slow;
      break;
  }
  if (e.theta) out << ", rope_theta " << *e.theta;
  if (e.original_max_position_embeddings) out << ", original_max_position_embeddings " << *e.original_max_position_embeddings;
  return out.str();
}

// A flat RoPE object at `name` ("rope_scaling", "rope_parameters", "rope_parameters.full_attention"). Every key
// it holds is one its rope_type reads, or it is refused.
RopeEntry parse_rope_object(const Fields& f, const json& object, const std::string& name, std::string_view who) {
  if (!object.is_object()) f.fail(name, "must be an object or null, got " + object.dump());
  const Fields rs(f.path(), object);
  const auto text = [&](const char* key) -> std::optional<std::string> {
    const json* v = rs.find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) f.fail(name + "." + key, "must be a string, got " + v->dump());
    return v->get<std::string>();
  };
  // transformers reads "rope_type", falling back to the legacy "type", then "default".
  const std::optional<std::string> rope_type = text("rope_type"), legacy_type = text("type");
  if (rope_type && legacy_type && *rope_type != *legacy_type) {
    f.fail(name + ".type", "is \"" + *legacy_type + "\" but '" + name + ".rope_type' is \"" + *rope_type +
                               "\": two spellings of one setting that disagree");
  }
  const std::string type = rope_type ? *rope_type : legacy_type ? *legacy_type : "default";
  const auto positive = [&](const char* key) -> std::optional<double> {
    const json* v = rs.find(key);
    return v ? std::optional(rs.check_positive(name + "." + key, *v)) : std::nullopt;
  };
  const auto require = [&](const char* key) {
    const std::optional<double> v = positive(key);
    if (!v) f.fail(name + "." + key, "is required for rope_type " + type);
    return *v;
  };
  RopeEntry e;
  e.theta = positive("rope_theta");
  if (const std::optional<double> partial = positive("partial_rotary_factor"); partial && *partial != 1.0) {
    f.fail(name + ".partial_rotary_factor", "is " + std::to_string(*partial) + "; " + std::string(who) +
                                                " rotates whole heads", PLLM_ERROR_UNSUPPORTED);
  }
  if (type == "linear") {
    e.scaling.type = RopeScaling::Type::kLinear;
    e.scaling.factor = require("factor");
  } else if (type == "llama3") {
    e.scaling.type = RopeScaling::Type::kLlama3;
    e.scaling.factor = require("factor");
    e.scaling.low_freq_factor = require("low_freq_factor");
    e.scaling.high_freq_factor = require("high_freq_factor");
    e.original_max_position_embeddings = positive("original_max_position_embeddings");
    if (!(e.scaling.low_freq_factor < e.scaling.high_freq_factor)) {
      f.fail(name + ".low_freq_factor", "must be below high_freq_factor");
    }
  } else if (type == "longrope") {
    // Phi-3's: per-frequency factors for short and long contexts; `factor` is what transformers derives from
    // max / original_max_position_embeddings when the config has the latter, as Phi-3's always does.
    e.scaling.type = RopeScaling::Type::kLongRope;
    const auto factors = [&](const char* key) {
      const json* v = rs.find(key);
      if (!v) f.fail(name + "." + key, "is required for rope_type longrope");
      if (!v->is_array()) f.fail(name + "." + key, "must be a list of numbers, got " + v->dump());
      std::vector<double> out;
      for (const json& x : *v) out.push_back(rs.check_positive(name + "." + key, x));
      return out;
    };
    e.scaling.short_factor = factors("short_factor");
    e.scaling.long_factor = factors("long_factor");
    if (const std::optional<double> factor = positive("factor")) e.scaling.factor = *factor;
    // 0: derived in resolve_rope, which knows the context lengths.
    e.scaling.attention_factor = positive("attention_factor").value_or(0.0);
    e.original_max_position_embeddings = positive("original_max_position_embeddings");
  } else if (type == "yarn") {
    // transformers' _compute_yarn_parameters; what it derives when unwritten (the factor from the context
    // lengths, the attention factor from factor, mscale and mscale_all_dim) resolve_rope derives.
    e.scaling.type = RopeScaling::Type::kYarn;
    e.scaling.factor = positive("factor").value_or(0.0);
    e.scaling.attention_factor = positive("attention_factor").value_or(0.0);
    e.scaling.beta_fast = positive("beta_fast").value_or(32.0);
    e.scaling.beta_slow = positive("beta_slow").value_or(1.0);
    if (!(e.scaling.beta_slow < e.scaling.beta_fast)) f.fail(name + ".beta_slow", "must be below beta_fast");
    if (const json* truncate = rs.find("truncate")) {
      if (!truncate->is_boolean()) f.fail(name + ".truncate", "must be true or false, got " + truncate->dump());
      e.scaling.truncate = truncate->get<bool>();
    }
    const std::optional<double> mscale = positive("mscale"), mscale_all_dim = positive("mscale_all_dim");
    if (e.scaling.attention_factor == 0.0 && mscale && mscale_all_dim) {
      e.yarn_mscales = {*mscale, *mscale_all_dim};
    }
    e.original_max_position_embeddings = positive("original_max_position_embeddings");
  } else if (type == "dynamic") {
    f.fail(name + ".rope_type", "is \"dynamic\"; " + std::string(who) + " does not serve dynamic NTK scaling: "
           "transformers changes the base with each forward's length, so a cached key's rotation would depend on "
           "the length of the request that computed it, which a shared prefix cache cannot honour (yarn, linear, "
           "llama3 and longrope are served)", PLLM_ERROR_UNSUPPORTED);
  } else if (type != "default") {
    f.fail(name + ".rope_type", "is \"" + type + "\"; " + std::string(who) + " supports default, linear, llama3, "
           "longrope and yarn", PLLM_ERROR_UNSUPPORTED);
  }
  for (const std::string& key : rs.unread()) {
    f.fail(name + "." + key, "is not read for rope_type " + type + " by " + std::string(who) +
                                 "; refused rather than ignored, since it could change the rotation",
           PLLM_ERROR_UNSUPPORTED);
  }
  return e;
}

// The model's RoPE from every way a config.json can write it: rope_parameters (transformers 5; flat, or nested
// by layer type under names listed in layer_types), rope_scaling and a top-level rope_theta (4.x), a top-level
// original_max_position_embeddings (which transformers 5 prefers). Two that disagree are refused; what none
// writes takes transformers' default (rope_theta 10000; llama3's original context = max_position_embeddings).
void resolve_rope(const Fields& f, LlamaConfig& c, std::string_view who) {
  std::optional<RopeEntry> from_parameters, from_scaling;
  if (const json* parameters = f.find("rope_parameters")) {
    std::set<std::string> layer_types = {"full_attention", "sliding_attention"};
    if (const json* types = f.find("layer_types")) {
      for (const json& t : *types) {
        if (t.is_string()) layer_types.insert(t.get<std::string>());
      }
    }
    const bool nested = parameters->is_object() && !parameters->empty() &&
                        std::all_of(parameters->items().begin(), parameters->items().end(),
                                    [&](const auto& item) { return layer_types.count(item.key()) > 0; });
    if (nested) {
      // One RoPE for every layer, but Gemma 3's local layers, whose entry is their own base without scaling:
      // another family's sliding layers' entry of its own is refused.
      const json entry = parameters->contains("full_attention") ? parameters->at("full_attention") : json();
      if (c.architecture == Architecture::kGemma3 && parameters->contains("sliding_attention")) {
        const std::string local_name = "rope_parameters.sliding_attention";
        const RopeEntry local = parse_rope_object(f, parameters->at("sliding_attention"), local_name, who);
        if (local.scaling.type != RopeScaling::Type::kNone) {
          f.fail(local_name + ".rope_type", "is not \"default\"; " + std::string(who) +
                                                " rotates Gemma's local layers by their base alone, as transformers does",
                 PLLM_ERROR_UNSUPPORTED);
        }
        if (!local.theta) f.fail(local_name + ".rope_theta", "is required");
        c.local_rope_theta = *local.theta;
      } else if (parameters->contains("sliding_attention") && parameters->at("sliding_attention") != entry) {
        f.fail("rope_parameters.sliding_attention", "differs from 'rope_parameters.full_attention'; " +
                                                        std::string(who) + " rotates every layer alike",
               PLLM_ERROR_UNSUPPORTED);
      }
      if (!entry.is_null()) from_parameters = parse_rope_object(f, entry, "rope_parameters.full_attention", who);
    } else {
      from_parameters = parse_rope_object(f, *parameters, "rope_parameters", who);
    }
  }
  if (const json* scaling = f.find("rope_scaling")) from_scaling = parse_rope_object(f, *scaling, "rope_scaling", who);
  if (from_parameters && from_scaling) {
    // transformers 5 writes rope_parameters only; both present means a hand edit or a converter adding one.
    // 4.x's rope_scaling has no theta of its own: compare what both write.
    RopeEntry a = *from_parameters, b = *from_scaling;
    if (!a.theta || !b.theta) a.theta = b.theta = std::nullopt;
    if (!a.original_max_position_embeddings || !b.original_max_position_embeddings) {
      a.original_max_position_embeddings = b.original_max_position_embeddings = std::nullopt;
    }
    if (!(a == b)) {
      f.fail("rope_scaling", "(" + describe(*from_scaling) + ") disagrees with 'rope_parameters' (" +
                                 describe(*from_parameters) + "): two spellings of one setting that disagree");
    }
  }
  const RopeEntry entry = from_parameters ? *from_parameters : from_scaling ? *from_scaling : RopeEntry{};
  const char* entry_name = from_parameters ? "rope_parameters" : "rope_scaling";

  const std::optional<double> top_theta =
      f.find("rope_theta") ? std::optional(f.get_positive("rope_theta", 0.0)) : std::nullopt;
  if (top_theta && entry.theta && *top_theta != *entry.theta) {
    f.fail("rope_theta", "is " + std::to_string(*top_theta) + " but '" + std::string(entry_name) +
                             ".rope_theta' is " + std::to_string(*entry.theta) +
                             ": two spellings of one setting that disagree");
  }
  c.rope_theta = entry.theta ? *entry.theta : top_theta ? *top_theta : 10000.0;
  if (const double partial = f.get_positive("partial_rotary_factor", 1.0); partial != 1.0) {
    f.fail("partial_rotary_factor", "is " + std::to_string(partial) + "; " + std::string(who) + " rotates whole heads",
           PLLM_ERROR_UNSUPPORTED);
  }

  c.rope_scaling = entry.scaling;
  const std::optional<double> top_original =
      f.find("original_max_position_embeddings")
          ? std::optional(f.get_positive("original_max_position_embeddings", 0.0))
          : std::nullopt;
  if (top_original && entry.original_max_position_embeddings &&
      *top_original != *entry.original_max_position_embeddings) {
    f.fail("original_max_position_embeddings",
           "is " + std::to_string(*top_original) + " but '" + std::string(entry_name) +
               ".original_max_position_embeddings' is " + std::to_string(*entry.original_max_position_embeddings) +
               ": two spellings of one setting that disagree");
  }
  if (c.rope_scaling.type == RopeScaling::Type::kLlama3 || c.rope_scaling.type == RopeScaling::Type::kLongRope ||
      c.rope_scaling.type == RopeScaling::Type::kYarn) {
    c.rope_scaling.original_max_position_embeddings =
        top_original ? *top_original
        : entry.original_max_position_embeddings ? *entry.original_max_position_embeddings
                                                 : double(c.max_position_embeddings);
  }
  if (c.rope_scaling.type == RopeScaling::Type::kLongRope) {
    RopeScaling& s = c.rope_scaling;
    for (const auto& [key, factors] : {std::pair{"short_factor", &s.short_factor}, std::pair{"long_factor", &s.long_factor}}) {
      if (factors->size() != std::size_t(c.head_dim / 2)) {
        f.fail(std::string(entry_name) + "." + key, "holds " + std::to_string(factors->size()) +
                                                        " factors; longrope needs head_dim / 2 = " +
                                                        std::to_string(c.head_dim / 2));
      }
    }
    // transformers' _compute_longrope_parameters: unless given, sqrt(1 + ln(factor) / ln(original)) with
    // factor = max / original_max_position_embeddings, 1 when that is at most 1.
    if (s.attention_factor == 0.0) {
      const double original = s.original_max_position_embeddings;
      const double factor = (top_original || entry.original_max_position_embeddings)
                                ? double(c.max_position_embeddings) / original
                                : s.factor;
      s.attention_factor = factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(original));
    }
  }
  if (c.rope_scaling.type == RopeScaling::Type::kYarn) {
    RopeScaling& s = c.rope_scaling;
    if (s.factor == 0.0) {
      // transformers 5 derives an unwritten factor from the context lengths; 4.x requires it.
      if (!top_original && !entry.original_max_position_embeddings) {
        f.fail(std::string(entry_name) + ".factor",
               "is required for rope_type yarn unless original_max_position_embeddings is written");
      }
      s.factor = double(c.max_position_embeddings) / s.original_max_position_embeddings;
    }
    if (s.attention_factor == 0.0) {
      // The paper's 0.1 ln(factor) + 1, or DeepSeek's ratio of two such terms.
      const auto mscale = [&](double m) { return s.factor <= 1.0 ? 1.0 : 0.1 * m * std::log(s.factor) + 1.0; };
      s.attention_factor =
          entry.yarn_mscales ? mscale(entry.yarn_mscales->first) / mscale(entry.yarn_mscales->second) : mscale(1.0);
    }
  }
}

// Every key of config.json that no reader looked at must be on the list of harmless keys (config_keys.h) or
// one the caller reads itself (`caller_keys`); anything else could change the forward and is refused.
void refuse_unread_keys(const Fields& f, std::span<const std::string_view> caller_keys, std::string_view who) {
  for (const std::string& key : f.unread()) {
    if (find_harmless_config_key(key)) continue;
    if (std::find(caller_keys.begin(), caller_keys.end(), key) != caller_keys.end()) continue;
    f.fail(key, "is not a setting " + std::string(who) + " reads, and it could change what the model computes: "
                    "refused rather than ignored (plugins/models_llama/README.md lists the keys read and those "
                    "passed unread)", PLLM_ERROR_UNSUPPORTED);
  }
}

// compressed-tensors' quantization arguments of one tensor kind (a config group's
// `weights` or `input_activations`) at `prefix`: 8-bit symmetric integers, no
// groups, blocks or act-order, with one of `strategies`, dynamic as `dynamic` says
// (weights static, activations dynamic). Absent keys take compressed-tensors'
// defaults (8 bits, int, symmetric, not dynamic; no strategy means tensor).
void check_int8_args(const Fields& f, const json& args, const std::string& prefix,
                     const std::set<std::string>& strategies, bool dynamic, std::string_view who) {
  if (!args.is_object()) f.fail(prefix, "must be an object, got " + args.dump());
  const Fields a(f.path(), args);
  const auto refuse = [&](const char* key, const std::string& what) {
    f.fail(prefix + "." + key, what + "; " + std::string(who) + " reads compressed-tensors checkpoints of 8-bit "
                               "symmetric int weights (strategy channel or tensor), with int8 dynamic per-token "
                               "activations or none", PLLM_ERROR_UNSUPPORTED);
  };
  const auto text = [&](const char* key, const char* fallback) {
    const json* v = a.find(key);
    if (!v) return std::string(fallback);
    if (!v->is_string()) f.fail(prefix + "." + key, "must be a string, got " + v->dump());
    return v->get<std::string>();
  };
  if (const int64_t bits = a.get_int("num_bits", 8, 1, 64); bits != 8) {
    refuse("num_bits", "is " + std::to_string(bits) + " (" + std::to_string(bits) + "-bit values)");
  }
  if (const std::string type = text("type", "int"); type != "int") refuse("type", "is \"" + type + "\"");
  if (!a.get_bool("symmetric", true)) refuse("symmetric", "is false (asymmetric, with zero points)");
  if (const std::string strategy = text("strategy", "tensor"); !strategies.count(strategy)) {
    refuse("strategy", "is \"" + strategy + "\"");
  }
  const json* is_dynamic = a.find("dynamic");
  if (is_dynamic && !is_dynamic->is_boolean()) refuse("dynamic", "is " + is_dynamic->dump());
  if (a.get_bool("dynamic", false) != dynamic) {
    refuse("dynamic", dynamic ? "is false (static activation scales)" : "is true (weights quantized at run time)");
  }
  for (const char* key : {"group_size", "block_structure", "scale_dtype", "zp_dtype"}) {
    if (const json* v = a.find(key)) refuse(key, "is " + v->dump());
  }
  if (const json* v = a.find("actorder"); v && !(v->is_boolean() && !v->get<bool>())) {
    refuse("actorder", "is " + v->dump());
  }
}

// config.json's quantization_config: a compressed-tensors int8 checkpoint
// (llama_config.h), or refused naming the field.
std::optional<Int8Checkpoint> parse_quantization_config(const Fields& f, std::string_view who) {
  const json* v = f.find("quantization_config");
  if (!v) return std::nullopt;
  const std::string base = "quantization_config";
  if (!v->is_object()) f.fail(base, "must be an object, got " + v->dump());
  const Fields q(f.path(), *v);
  const auto refuse = [&](const std::string& key, const std::string& what) {
    f.fail(key, what + "; " + std::string(who) + " reads compressed-tensors int8 checkpoints (formats "
                "int-quantized, naive-quantized, pack-quantized)", PLLM_ERROR_UNSUPPORTED);
  };
  const auto text = [&](const Fields& object, const std::string& key_path, const char* key) {
    const json* s = object.find(key);
    if (!s) return std::string();
    if (!s->is_string()) f.fail(key_path, "must be a string, got " + s->dump());
    return s->get<std::string>();
  };
  const std::string method = text(q, base + ".quant_method", "quant_method");
  if (method != "compressed-tensors") {
    refuse(base + ".quant_method", method.empty() ? std::string("is missing") : "is \"" + method + "\"");
  }
  const std::set<std::string> formats = {"int-quantized", "naive-quantized", "pack-quantized"};
  const std::string format = text(q, base + ".format", "format");
  if (!formats.count(format) && format != "mixed-precision") {
    refuse(base + ".format", format.empty() ? std::string("is missing") : "is \"" + format + "\"");
  }
  if (const std::string status = text(q, base + ".quantization_status", "quantization_status");
      !status.empty() && status != "compressed") {
    refuse(base + ".quantization_status", "is \"" + status + "\" (the weights are not stored compressed)");
  }
  for (const char* key : {"sparsity_config", "transform_config", "kv_cache_scheme"}) {
    const json* x = q.find(key);
    if (x && !(x->is_object() && x->empty())) refuse(base + "." + key, "is set");
  }
  const json* groups = q.find("config_groups");
  if (!groups || !groups->is_object() || groups->empty()) {
    f.fail(base + ".config_groups", "must be a non-empty object of quantization schemes");
  }
  std::optional<bool> w8a8;
  for (const auto& [name, group] : groups->items()) {
    const std::string g = base + ".config_groups." + name;
    if (!group.is_object()) f.fail(g, "must be an object, got " + group.dump());
    const Fields scheme(f.path(), group);
    if (const std::string group_format = text(scheme, g + ".format", "format");
        !group_format.empty() && !formats.count(group_format)) {
      refuse(g + ".format", "is \"" + group_format + "\"");
    }
    const json* weights = scheme.find("weights");
    if (!weights) f.fail(g + ".weights", "is required");
    check_int8_args(f, *weights, g + ".weights", {"channel", "tensor"}, false, who);
    const json* activations = scheme.find("input_activations");
    if (activations) check_int8_args(f, *activations, g + ".input_activations", {"token"}, true, who);
    if (scheme.find("output_activations")) refuse(g + ".output_activations", "is set (quantized outputs)");
    if (w8a8 && *w8a8 != (activations != nullptr)) {
      refuse(g + ".input_activations", "differs from another group's (int8 activations in some, none in others)");
    }
    w8a8 = activations != nullptr;
  }
  return Int8Checkpoint{*w8a8};
}


}  // namespace

std::string_view architecture_name(Architecture a) {
  switch (a) {
    case Architecture::kLlama: return "llama";
    case Architecture::kMistral: return "mistral";
    case Architecture::kQwen2: return "qwen2";
    case Architecture::kQwen3: return "qwen3";
    case Architecture::kMixtral: return "mixtral";
    case Architecture::kQwen3Moe: return "qwen3_moe";
    case Architecture::kGemma3: return "gemma3_text";
    case Architecture::kPhi3: return "phi3";
  }
  return "unknown";
}

std::string_view architecture_class(Architecture a) {
  for (const ArchitectureName& known : kArchitectures) {
    if (known.architecture == a) return known.hf_class;
  }
  return "unknown";
}

LlamaConfig LlamaConfig::load(const std::filesystem::path& model_dir, std::string_view who,
                              std::span<const std::string_view> caller_keys) {
  std::error_code regular_ec;
  if (std::filesystem::is_regular_file(model_dir, regular_ec)) return from_gguf(model_dir, who);
  const std::filesystem::path path = model_dir / "config.json";
  const json object = Fields::parse_file(path);
  const Fields f(path, object);
  LlamaConfig c;
  c.architecture = read_architecture(f, who);
  check_unsupported_features(f, c.architecture, who);
  c.vocab_size = int32_t(f.require_int("vocab_size", 1, std::numeric_limits<int32_t>::max()));
  c.hidden_size = int32_t(f.require_int("hidden_size", 1, kMaxSize));
  c.intermediate_size = int32_t(f.require_int("intermediate_size", 1, kMaxSize));
  c.num_layers = int32_t(f.require_int("num_hidden_layers", 1, 4096));
  c.num_heads = int32_t(f.require_int("num_attention_heads", 1, 4096));
  c.num_kv_heads = int32_t(f.get_int("num_key_value_heads", c.num_heads, 1, 4096));
  if (c.num_heads % c.num_kv_heads != 0) {
    f.fail("num_key_value_heads", "= " + std::to_string(c.num_kv_heads) + " does not divide num_attention_heads = " +
                                      std::to_string(c.num_heads));
  }
  if (f.find("head_dim")) {
    c.head_dim = int32_t(f.require_int("head_dim", 2, 4096));
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      f.fail("hidden_size", "= " + std::to_string(c.hidden_size) + " is not a multiple of num_attention_heads = " +
                                std::to_string(c.num_heads) + " (and there is no head_dim)");
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) f.fail("head_dim", "= " + std::to_string(c.head_dim) + " must be even (RoPE rotates pairs)");
  c.max_position_embeddings = int32_t(f.require_int("max_position_embeddings", 1, std::numeric_limits<int32_t>::max()));
  c.rms_norm_eps = f.require_positive("rms_norm_eps");
  resolve_rope(f, c, who);
  // Absent, transformers takes the family's default (save_pretrained leaves out what equals it): Gemma's is tied.
  c.tie_word_embeddings = f.get_bool("tie_word_embeddings", c.architecture == Architecture::kGemma3);
  read_family_features(f, c, who);
  const std::vector<int32_t> bos = f.token_ids("bos_token_id", c.vocab_size);
  if (bos.size() > 1) f.fail("bos_token_id", "must be one token id");
  c.bos_token_id = bos.empty() ? -1 : bos.front();
  c.eos_token_ids = f.token_ids("eos_token_id", c.vocab_size);
  c.int8_checkpoint = parse_quantization_config(f, who);
  refuse_unread_keys(f, caller_keys, who);

  const std::filesystem::path generation_path = model_dir / "generation_config.json";
  std::error_code ec;
  if (std::filesystem::exists(generation_path, ec)) {
    const json generation = Fields::parse_file(generation_path);
    for (int32_t id : Fields(generation_path, generation).token_ids("eos_token_id", c.vocab_size)) {
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) {
        c.eos_token_ids.push_back(id);
      }
    }
  }
  return c;
}

}  // namespace pagedllm::llama
