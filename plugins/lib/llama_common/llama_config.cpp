#include "llama_common/llama_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "pagedllm/sdk.hpp"

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

  // Absent and null are the same: HF writes null for "use the default".
  const json* find(std::string_view key) const {
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
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
};

void check_architecture(const Fields& f, std::string_view who) {
  const json* archs = f.find("architectures");
  if (!archs) f.fail("architectures", "is required (" + std::string(who) + " loads LlamaForCausalLM)");
  if (!archs->is_array() || archs->empty()) f.fail("architectures", "must be a non-empty list, got " + archs->dump());
  for (const auto& a : *archs) {
    if (a.is_string() && a.get<std::string>() == "LlamaForCausalLM") return;
  }
  f.fail("architectures", "is " + archs->dump() + "; " + std::string(who) + " loads LlamaForCausalLM only",
         PLLM_ERROR_UNSUPPORTED);
}

// Features of HF's LlamaConfig this plugin does not implement: refused, never ignored.
void check_unsupported_features(const Fields& f, std::string_view who) {
  if (const json* act = f.find("hidden_act"); act && !(act->is_string() && act->get<std::string>() == "silu")) {
    f.fail("hidden_act", "is " + act->dump() + "; " + std::string(who) + " implements silu only",
           PLLM_ERROR_UNSUPPORTED);
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (f.get_bool(key, false)) {
      f.fail(key, "is true; " + std::string(who) + " has no projection biases", PLLM_ERROR_UNSUPPORTED);
    }
  }
}

RopeScaling parse_rope_scaling(const Fields& f, std::string_view who) {
  RopeScaling scaling;
  const json* v = f.find("rope_scaling");
  if (!v) return scaling;
  if (!v->is_object()) f.fail("rope_scaling", "must be an object or null, got " + v->dump());
  const Fields rs(f.path(), *v);
  // HF reads "rope_type", falling back to the legacy "type".
  const json* type = rs.find("rope_type") ? rs.find("rope_type") : rs.find("type");
  if (!type || !type->is_string()) f.fail("rope_scaling.rope_type", "is required (a string)");
  const std::string name = type->get<std::string>();
  auto require = [&](const char* key) {
    const json* value = rs.find(key);
    if (!value) f.fail(std::string("rope_scaling.") + key, "is required for rope_type " + name);
    return rs.check_positive(std::string("rope_scaling.") + key, *value);
  };
  if (name == "default") return scaling;
  if (name == "linear") {
    scaling.type = RopeScaling::Type::kLinear;
    scaling.factor = require("factor");
    return scaling;
  }
  if (name == "llama3") {
    scaling.type = RopeScaling::Type::kLlama3;
    scaling.factor = require("factor");
    scaling.low_freq_factor = require("low_freq_factor");
    scaling.high_freq_factor = require("high_freq_factor");
    scaling.original_max_position_embeddings = require("original_max_position_embeddings");
    if (!(scaling.low_freq_factor < scaling.high_freq_factor)) {
      f.fail("rope_scaling.low_freq_factor", "must be below high_freq_factor");
    }
    return scaling;
  }
  f.fail("rope_scaling.rope_type", "is \"" + name + "\"; " + std::string(who) + " supports default, linear and llama3",
         PLLM_ERROR_UNSUPPORTED);
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

LlamaConfig LlamaConfig::load(const std::filesystem::path& model_dir, std::string_view who) {
  std::error_code regular_ec;
  if (std::filesystem::is_regular_file(model_dir, regular_ec)) return from_gguf(model_dir, who);
  const std::filesystem::path path = model_dir / "config.json";
  const json object = Fields::parse_file(path);
  const Fields f(path, object);
  check_architecture(f, who);
  check_unsupported_features(f, who);

  LlamaConfig c;
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
  c.rope_theta = f.get_positive("rope_theta", 10000.0);
  c.rope_scaling = parse_rope_scaling(f, who);
  c.tie_word_embeddings = f.get_bool("tie_word_embeddings", false);
  const std::vector<int32_t> bos = f.token_ids("bos_token_id", c.vocab_size);
  if (bos.size() > 1) f.fail("bos_token_id", "must be one token id");
  c.bos_token_id = bos.empty() ? -1 : bos.front();
  c.eos_token_ids = f.token_ids("eos_token_id", c.vocab_size);
  c.int8_checkpoint = parse_quantization_config(f, who);

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
