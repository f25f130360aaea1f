// models_llama through its C table: info from config.json, get_tensor, strict
// options, refused devices/dtypes/batches, and every kind of bad model
// directory refused with a message naming the file and the tensor or key.
// Needs the generator (numpy), not the oracle.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "tests/plugins/models_llama/llama_harness.h"

using namespace llama_test;
using Catch::Matchers::Contains;

namespace {

// The message of the error creating a model from `dir` (FAIL if it loads).
std::string load_error(const std::filesystem::path& dir, const std::string& options = "{}",
                       pllm_dtype dtype = PLLM_DTYPE_INVALID) {
  try {
    Model model(dir, options, dtype);
  } catch (const pagedllm::PluginCallError& e) {
    return e.what();
  }
  FAIL("the model loaded");
  return {};
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void write_json(const std::filesystem::path& path, const nlohmann::json& value) {
  std::ofstream(path, std::ios::trunc) << value.dump(2);
}

void edit_config(const std::filesystem::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json config = read_json(dir / "config.json");
  edit(config);
  write_json(dir / "config.json", config);
}

// Overwrites `bytes` at `offset` of `path`.
void patch(const std::filesystem::path& path, std::size_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(offset));
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace

TEST_CASE("models_llama: info comes from config.json and generation_config.json", "[models_llama]") {
  require_generator();
  TempDir dir;
  make_model(dir.path(), "--head-dim 32 --num-layers 2");
  Model model(dir.path(), R"({"num_threads": 2})");
  const pllm_model_info info = model.info();
  CHECK(std::string(info.architecture) == "LlamaForCausalLM");
  CHECK(info.vocab_size == 964);
  CHECK(info.hidden_size == 64);
  CHECK(info.num_layers == 2);
  CHECK(info.num_heads == 4);
  CHECK(info.num_kv_heads == 2);
  CHECK(info.head_dim == 32);
  CHECK(info.max_position_embeddings == 512);
  CHECK(info.dtype == PLLM_DTYPE_F32);
  CHECK(info.bos_token_id == 959);
  REQUIRE(info.num_eos_token_ids == 2);
  CHECK(info.eos_token_ids[0] == 960);
  CHECK(info.eos_token_ids[1] == 963);

  SECTION("generation_config.json adds eos ids; a config without bos has none") {
    edit_config(dir.path(), [](auto& c) {
      c["eos_token_id"] = 960;
      c.erase("bos_token_id");
    });
    write_json(dir.path() / "generation_config.json", {{"eos_token_id", {963, 1}}});
    const Model reloaded(dir.path());
    const pllm_model_info i2 = reloaded.info();
    CHECK(i2.bos_token_id == -1);
    REQUIRE(i2.num_eos_token_ids == 3);
    CHECK(std::vector<int32_t>(i2.eos_token_ids, i2.eos_token_ids + 3) == std::vector<int32_t>{960, 963, 1});
  }
}

TEST_CASE("models_llama: get_tensor serves HF names in the weight dtype", "[models_llama]") {
  // The matrices in the weight dtype (auto: as the checkpoint stores them,
  // bit for bit; model dtype f32: widened), the norms in f32.
  require_generator();
  struct Variant {
    const char* args;
    pllm_dtype model_dtype, matrices;
  };
  for (const Variant& v : {Variant{"--dtype f16", PLLM_DTYPE_INVALID, PLLM_DTYPE_F16},
                           Variant{"--dtype bf16 --tie-word-embeddings", PLLM_DTYPE_INVALID, PLLM_DTYPE_BF16},
                           Variant{"--dtype bf16", PLLM_DTYPE_F32, PLLM_DTYPE_F32}}) {
    const bool tied = std::string(v.args).find("tie") != std::string::npos;
    INFO(v.args << ", model dtype " << int(v.model_dtype));
    TempDir dir;
    make_model(dir.path(), v.args);
    Model model(dir.path(), "{}", v.model_dtype);
    const pllm::safetensors::Checkpoint checkpoint(dir.path());
    for (const char* name : {"model.embed_tokens.weight", "model.layers.1.self_attn.k_proj.weight",
                             "model.layers.2.mlp.up_proj.weight", "model.norm.weight"}) {
      INFO(name);
      const pllm_tensor t = model.tensor(name);
      const auto& stored = checkpoint.require(name);
      const pllm_dtype dtype = std::string(name) == "model.norm.weight" ? PLLM_DTYPE_F32 : v.matrices;
      CHECK(t.dtype == dtype);
      CHECK(t.device.type == PLLM_DEVICE_CPU);
      REQUIRE(std::vector<int64_t>(t.shape, t.shape + t.ndim) == stored.shape);
      CHECK(t.strides[t.ndim - 1] == 1);
      if (dtype == stored.dtype) {
        CHECK(std::memcmp(t.data, stored.data, stored.nbytes) == 0);
      } else {
        REQUIRE(dtype == PLLM_DTYPE_F32);
        std::vector<float> expected(std::size_t(stored.numel()));
        stored.to_f32(0, stored.numel(), expected.data());
        CHECK(std::memcmp(t.data, expected.data(), expected.size() * sizeof(float)) == 0);
      }
    }
    const pllm_tensor embed = model.tensor("model.embed_tokens.weight");
    const pllm_tensor head = model.tensor("lm_head.weight");
    CHECK(head.shape[0] == 964);
    CHECK(head.shape[1] == 64);
    CHECK((head.data == embed.data) == tied);  // tied: the embedding itself, shared
    try {
      model.tensor("model.layers.9.mlp.up_proj.weight");
      FAIL("found a tensor that does not exist");
    } catch (const pagedllm::PluginCallError& e) {
      CHECK(e.status() == PLLM_ERROR_NOT_FOUND);
      CHECK_THAT(e.what(), Contains("model.layers.9.mlp.up_proj.weight"));
    }
  }
}

TEST_CASE("models_llama: options, device and dtype are checked", "[models_llama]") {
  require_generator();
  TempDir dir;
  make_model(dir.path(), "--num-layers 1");
  const std::string typo = load_error(dir.path(), R"({"num_thread": 2})");
  CHECK_THAT(typo, Contains("num_thread"));
  CHECK_THAT(typo, Contains("did you mean 'num_threads'"));
  CHECK_THAT(load_error(dir.path(), R"({"num_threads": -1})"), Contains("num_threads"));
  CHECK_THAT(load_error(dir.path(), "{}", PLLM_DTYPE_I8), Contains("model dtype i8 is not supported"));
  for (const pllm_dtype dtype : {PLLM_DTYPE_F32, PLLM_DTYPE_BF16, PLLM_DTYPE_F16}) {
    Model ok(dir.path(), "{}", dtype);
    CHECK(ok.info().dtype == PLLM_DTYPE_F32);  // activations and KV cache
    CHECK(ok.tensor("model.layers.0.self_attn.q_proj.weight").dtype == dtype);
  }

  // The device: the CPU or CUDA. CUDA on a build without it is refused here;
  // with it, test_models_llama_cuda covers what a CUDA create says.
  const std::string path = dir.path().string(), options = "{}";
  const auto refused = [&](pllm_device device, const char* message) {
    pllm_model_create_args args = model_args(path, options, PLLM_DTYPE_INVALID, device);
    pllm_model* handle = nullptr;
    pllm_error error{};
    CHECK(Model::library()->api<pllm_model_api>().create(&args, &handle, &error) == PLLM_ERROR_UNSUPPORTED);
    CHECK(handle == nullptr);
    CHECK_THAT(error.message, Contains(message));
  };
  refused({PLLM_DEVICE_INVALID, 0}, "runs on the CPU or CUDA");
#ifndef PAGEDLLM_HAVE_CUDA
  refused({PLLM_DEVICE_CUDA, 0}, "built without CUDA");
#endif
}

TEST_CASE("models_llama: the cpu_bf16_compute option", "[models_llama]") {
  require_generator();
  TempDir dir;
  make_model(dir.path(), "--num-layers 1 --dtype bf16");
  const std::string bad = load_error(dir.path(), R"({"cpu_bf16_compute": "fast"})");
  CHECK_THAT(bad, Contains("cpu_bf16_compute"));
  CHECK_THAT(bad, Contains("vdpbf16ps, exact"));
  CHECK_THAT(bad, Contains("fast"));
  CHECK_THAT(load_error(dir.path(), R"({"cpu_bf16_compute": true})"), Contains("cpu_bf16_compute"));
  for (const char* mode : {"vdpbf16ps", "exact"}) {
    Model model(dir.path(), std::string(R"({"cpu_bf16_compute": ")") + mode + "\"}");
    CHECK(model.tensor("model.layers.0.mlp.down_proj.weight").dtype == PLLM_DTYPE_BF16);
  }
}

TEST_CASE("models_llama: the quantization option", "[models_llama]") {
  require_generator();
  TempDir dir;
  make_model(dir.path(), "--num-layers 1 --dtype bf16 --tie-word-embeddings");
  const std::string bad = load_error(dir.path(), R"({"quantization": "int4"})");
  CHECK_THAT(bad, Contains("quantization"));
  CHECK_THAT(bad, Contains("none, int8, int8_w8a8, int8_weight_only"));
  CHECK_THAT(bad, Contains("int4"));
  CHECK_THAT(load_error(dir.path(), R"({"quantization": 8})"), Contains("quantization"));
  for (const char* mode : {"int8", "int8_w8a8", "int8_weight_only"}) {
    INFO(mode);
    Model model(dir.path(), std::string(R"({"quantization": ")") + mode + "\"}");
    CHECK(model.info().dtype == PLLM_DTYPE_F32);
    // The embedding (and so a tied lm_head) stays bf16 for a speculator; the matrices are int8.
    CHECK(model.tensor("model.embed_tokens.weight").dtype == PLLM_DTYPE_BF16);
    CHECK(model.tensor("lm_head.weight").dtype == PLLM_DTYPE_BF16);
    try {
      model.tensor("model.layers.0.mlp.down_proj.weight");
      FAIL("get_tensor served an int8 matrix");
    } catch (const pagedllm::PluginCallError& e) {
      CHECK(e.status() == PLLM_ERROR_UNSUPPORTED);
      CHECK_THAT(e.what(), Contains("model.layers.0.mlp.down_proj.weight"));
      CHECK_THAT(e.what(), Contains("held as int8"));
    }
  }
  const std::string path = dir.path().string(), options = R"({"quantization": "int8"})";
  pllm_model_create_args args = model_args(path, options, PLLM_DTYPE_INVALID, {PLLM_DEVICE_CUDA, 0});
  pllm_model* handle = nullptr;
  pllm_error error{};
  CHECK(Model::library()->api<pllm_model_api>().create(&args, &handle, &error) == PLLM_ERROR_UNSUPPORTED);
  CHECK_THAT(error.message, Contains("quantization int8 runs on the CPU only"));
}

namespace {

// config.json's quantization_config as compressed-tensors 0.15 writes it for llm-compressor's W8A8 scheme.
nlohmann::json w8a8_quantization_config() {
  const nlohmann::json args = {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"group_size", nullptr},
                               {"block_structure", nullptr}, {"actorder", nullptr}, {"observer_kwargs", {}}};
  nlohmann::json weights = args, activations = args;
  weights.update({{"strategy", "channel"}, {"dynamic", false}, {"observer", "minmax"}});
  activations.update({{"strategy", "token"}, {"dynamic", true}, {"observer", nullptr}});
  return {{"quant_method", "compressed-tensors"}, {"format", "int-quantized"}, {"quantization_status", "compressed"},
          {"ignore", {"lm_head"}}, {"sparsity_config", nlohmann::json::object()},
          {"transform_config", nlohmann::json::object()}, {"kv_cache_scheme", nullptr},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights},
                                          {"input_activations", activations}, {"output_activations", nullptr},
                                          {"format", "int-quantized"}}}}}};
}

// Every decoder matrix of an f32 checkpoint stored as compressed-tensors int-quantized: I8 values and an F32
// weight_scale [rows, 1] per row (values are what matters here, not how well they approximate the weights).
void store_int8(const std::filesystem::path& file) {
  rewrite_safetensors(file, [](std::vector<RawTensor>& tensors) {
    std::vector<RawTensor> scales;
    for (RawTensor& t : tensors) {
      if (!t.name.ends_with("_proj.weight")) continue;
      const int64_t rows = t.shape[0], cols = t.shape[1];
      std::vector<float> w(std::size_t(rows * cols));
      std::vector<float> scale(static_cast<std::size_t>(rows));
      std::memcpy(w.data(), t.bytes.data(), t.bytes.size());
      std::string q(std::size_t(rows * cols), '\0');
      for (int64_t r = 0; r < rows; ++r) {
        float amax = 0.0f;
        for (int64_t i = 0; i < cols; ++i) amax = std::max(amax, std::abs(w[std::size_t(r * cols + i)]));
        scale[std::size_t(r)] = amax / 127.0f;
        for (int64_t i = 0; i < cols; ++i) {
          q[std::size_t(r * cols + i)] = char(std::lrint(w[std::size_t(r * cols + i)] / scale[std::size_t(r)]));
        }
      }
      t.dtype = "I8";
      t.bytes = q;
      RawTensor s{t.name + "_scale", "F32", {rows, 1}, {}};
      s.set_f32(scale);
      s.shape = {rows, 1};
      scales.push_back(s);
    }
    tensors.insert(tensors.end(), scales.begin(), scales.end());
  });
}

}  // namespace

TEST_CASE("models_llama: compressed-tensors checkpoints: what is not supported is refused by name",
          "[models_llama][weights][compressed_tensors]") {
  require_generator();
  TempDir dir;
  make_model(dir.path(), "--num-layers 1");
  const auto file = dir.path() / "model.safetensors";
  store_int8(file);
  const std::string config = (dir.path() / "config.json").string();
  CHECK_THAT(load_error(dir.path()),
             Contains(file.string() + ": tensor 'model.layers.0.self_attn.q_proj.weight': is I8, and config.json has "
                                      "no quantization_config saying what it holds"));
  edit_config(dir.path(), [](auto& c) { c["quantization_config"] = w8a8_quantization_config(); });
  {
    Model model(dir.path());  // loads; its numbers are test_models_llama's fidelity case's
    try {
      model.tensor("model.layers.0.mlp.down_proj.weight");
      FAIL("get_tensor served an int8 matrix");
    } catch (const pagedllm::PluginCallError& e) {
      CHECK_THAT(e.what(), Contains("held as int8 (compressed-tensors, 4 of 5"));
    }
  }
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {"another method", [](auto& q) { q["quant_method"] = "gptq"; }, "'quantization_config.quant_method' is \"gptq\""},
      {"fp8", [](auto& q) { q["format"] = "float-quantized"; }, "'quantization_config.format' is \"float-quantized\""},
      {"4-bit", [](auto& q) { q["config_groups"]["group_0"]["weights"]["num_bits"] = 4; },
       "weights.num_bits' is 4 (4-bit values)"},
      {"group scales", [](auto& q) {
         q["config_groups"]["group_0"]["weights"]["strategy"] = "group";
         q["config_groups"]["group_0"]["weights"]["group_size"] = 128;
       }, "weights.strategy' is \"group\""},
      {"zero points", [](auto& q) { q["config_groups"]["group_0"]["weights"]["symmetric"] = false; },
       "weights.symmetric' is false (asymmetric, with zero points)"},
      {"float weights", [](auto& q) { q["config_groups"]["group_0"]["weights"]["type"] = "float"; },
       "weights.type' is \"float\""},
      {"static activation scales",
       [](auto& q) { q["config_groups"]["group_0"]["input_activations"]["dynamic"] = false; },
       "input_activations.dynamic' is false (static activation scales)"},
      {"per-tensor activations",
       [](auto& q) { q["config_groups"]["group_0"]["input_activations"]["strategy"] = "tensor"; },
       "input_activations.strategy' is \"tensor\""},
      {"a quantized KV cache", [](auto& q) { q["kv_cache_scheme"] = {{"num_bits", 8}}; },
       "'quantization_config.kv_cache_scheme' is set"},
      {"sparsity", [](auto& q) { q["sparsity_config"] = {{"format", "sparse-24-bitmask"}}; },
       "'quantization_config.sparsity_config' is set"},
      {"uncompressed", [](auto& q) { q["quantization_status"] = "frozen"; },
       "'quantization_config.quantization_status' is \"frozen\""},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    edit_config(dir.path(), [&](auto& json) {
      json["quantization_config"] = w8a8_quantization_config();
      c.edit(json["quantization_config"]);
    });
    const std::string e = load_error(dir.path());
    CHECK_THAT(e, Contains(config + ": "));
    CHECK_THAT(e, Contains(c.message));
  }
  edit_config(dir.path(), [](auto& c) { c["quantization_config"] = w8a8_quantization_config(); });

  SECTION("a zero point tensor") {
    rewrite_safetensors(file, [](std::vector<RawTensor>& tensors) {
      tensors.push_back({"model.layers.0.mlp.up_proj.weight_zero_point", "I8", {1}, std::string(1, '\0')});
    });
    CHECK_THAT(load_error(dir.path()), Contains("tensor 'model.layers.0.mlp.up_proj.weight_zero_point': zero points"));
  }
  SECTION("group-wise scales") {
    rewrite_safetensors(file, [](std::vector<RawTensor>& tensors) {
      for (RawTensor& t : tensors) {
        if (t.name == "model.layers.0.self_attn.o_proj.weight_scale") t.shape = {t.shape[0] / 2, 2};
      }
    });
    CHECK_THAT(load_error(dir.path()), Contains("tensor 'model.layers.0.self_attn.o_proj.weight_scale': is F32 ["));
    CHECK_THAT(load_error(dir.path()), Contains("group-wise scales are not supported"));
  }
  SECTION("a fused matrix half int8") {
    // q_proj back to float (its scale dropped): q/k/v would mix dtypes in one matrix.
    rewrite_safetensors(file, [](std::vector<RawTensor>& tensors) {
      std::erase_if(tensors,
                    [](const RawTensor& t) { return t.name == "model.layers.0.self_attn.q_proj.weight_scale"; });
      for (RawTensor& t : tensors) {
        if (t.name == "model.layers.0.self_attn.q_proj.weight") {
          t.set_f32(std::vector<float>(std::size_t(t.shape[0] * t.shape[1]), 0.5f));
        }
      }
    });
    const std::string e = load_error(dir.path());
    CHECK_THAT(e, Contains("model.layers.0.self_attn.k_proj.weight, model.layers.0.self_attn.v_proj.weight are stored "
                           "int8 but model.layers.0.self_attn.q_proj.weight of the same fused matrix are not"));
  }
}

TEST_CASE("models_llama: bad batches are refused, not read out of bounds", "[models_llama]") {
  require_generator();
  TempDir dir;
  make_model(dir.path(), "--num-layers 1");
  PagedRunner runner(dir.path(), "{}", "{}");
  runner.add_sequence({959, 964});
  try {
    runner.step({{0, 2}});
    FAIL("token 964 of a 964-token vocabulary was accepted");
  } catch (const pagedllm::PluginCallError& e) {
    CHECK(e.status() == PLLM_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Contains("token_ids[1] = 964 is outside the vocabulary [0, 964)"));
  }
  runner.add_sequence({959, 1, 2});
  try {
    runner.step({{1, 3}}, {3}, {});
    FAIL("logits row 3 of 3 rows was accepted");
  } catch (const pagedllm::PluginCallError& e) {
    CHECK_THAT(e.what(), Contains("logits_indices[0] = 3 is not a token row [0, 3)"));
  }
}

TEST_CASE("models_llama: bad weight files name the file and the tensor", "[models_llama][weights]") {
  require_generator();
  TempDir dir;
  make_model(dir.path(), "--num-layers 2");
  const auto file = dir.path() / "model.safetensors";
  const std::string file_name = file.string();

  SECTION("truncated file") {
    std::filesystem::resize_file(file, std::filesystem::file_size(file) - 100);
    const std::string e = load_error(dir.path());
    CHECK_THAT(e, Contains(file_name));
    CHECK_THAT(e, Contains("tensor 'lm_head.weight'"));  // the last one, cut short
    CHECK_THAT(e, Contains("truncated"));
  }
  SECTION("absurd header length") {
    patch(file, 0, std::string("\x00\x00\x00\x00\x00\x00\x10\x00", 8));
    const std::string e = load_error(dir.path());
    CHECK_THAT(e, Contains(file_name));
    CHECK_THAT(e, Contains("header length 4503599627370496 exceeds the limit"));
  }
  SECTION("header JSON garbage") {
    patch(file, 8, "{\"model.embed_tokens.weight\": {\"dtype\": \x01");
    const std::string e = load_error(dir.path());
    CHECK_THAT(e, Contains(file_name));
    CHECK_THAT(e, Contains("header is not valid JSON"));
  }
  SECTION("shape mismatch") {
    rewrite_safetensors(file, [](std::vector<RawTensor>& tensors) {
      for (RawTensor& t : tensors) {
        if (t.name == "model.layers.1.self_attn.k_proj.weight") t.shape = {64, 32};
      }
    });
    const std::string e = load_error(dir.path());
    CHECK_THAT(e, Contains(file_name + ": tensor 'model.layers.1.self_attn.k_proj.weight' has shape [64, 32], "
                                       "expected [32, 64]"));
  }
  SECTION("missing tensor") {
    rewrite_safetensors(file, [](std::vector<RawTensor>& tensors) {
      std::erase_if(tensors, [](const RawTensor& t) { return t.name == "model.layers.0.mlp.down_proj.weight"; });
    });
    const std::string e = load_error(dir.path());
    CHECK_THAT(e, Contains(file_name + ": tensor 'model.layers.0.mlp.down_proj.weight' is missing"));
  }
  SECTION("wrong dtype") {
    rewrite_safetensors(file, [](std::vector<RawTensor>& tensors) {
      for (RawTensor& t : tensors) {
        if (t.name == "model.norm.weight") {
          t.dtype = "F64";
          t.shape = {32};  // the same 256 bytes, as f64
        }
      }
    });
    const std::string e = load_error(dir.path());
    CHECK_THAT(e, Contains(file_name + ": tensor 'model.norm.weight': dtype F64 is not supported"));
  }
  SECTION("lm_head missing from an untied model, present but unused in a tied one") {
    rewrite_safetensors(file, [](std::vector<RawTensor>& tensors) {
      std::erase_if(tensors, [](const RawTensor& t) { return t.name == "lm_head.weight"; });
    });
    CHECK_THAT(load_error(dir.path()), Contains("tensor 'lm_head.weight' is missing"));
    edit_config(dir.path(), [](auto& c) { c["tie_word_embeddings"] = true; });
    Model tied(dir.path());
  }
}

TEST_CASE("models_llama: a missing shard names the index, the shard and a tensor", "[models_llama][weights]") {
  require_generator();
  TempDir dir;
  make_model(dir.path(), "--num-layers 2 --shards 3 --dtype bf16");
  Model ok(dir.path());
  std::filesystem::remove(dir.path() / "model-00002-of-00003.safetensors");
  const std::string e = load_error(dir.path());
  CHECK_THAT(e, Contains((dir.path() / "model.safetensors.index.json").string()));
  CHECK_THAT(e, Contains("shard 'model-00002-of-00003.safetensors' (holding tensor 'model."));
  CHECK_THAT(e, Contains("does not exist"));
}

TEST_CASE("models_llama: bad config.json names the file and the key", "[models_llama][weights]") {
  require_generator();
  TempDir dir;
  make_model(dir.path(), "--num-layers 1");
  const std::string config = (dir.path() / "config.json").string();
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {"missing key", [](auto& c) { c.erase("rms_norm_eps"); }, "'rms_norm_eps' is required"},
      {"missing size", [](auto& c) { c.erase("intermediate_size"); }, "'intermediate_size' is required"},
      {"wrong type", [](auto& c) { c["hidden_size"] = "64"; }, "'hidden_size' must be an integer"},
      {"zero", [](auto& c) { c["num_hidden_layers"] = 0; }, "'num_hidden_layers' must be in [1, 4096]"},
      {"kv heads do not divide heads", [](auto& c) { c["num_key_value_heads"] = 3; },
       "'num_key_value_heads' = 3 does not divide num_attention_heads = 4"},
      {"hidden not a multiple of heads", [](auto& c) { c.erase("head_dim"); c["num_attention_heads"] = 6; c["num_key_value_heads"] = 2; },
       "'hidden_size' = 64 is not a multiple of num_attention_heads = 6"},
      {"odd head_dim", [](auto& c) { c["head_dim"] = 15; }, "'head_dim' = 15 must be even"},
      {"eos outside the vocabulary", [](auto& c) { c["eos_token_id"] = {960, 5000}; },
       "'eos_token_id' holds token id 5000, outside the vocabulary [0, 964)"},
      {"unknown architecture", [](auto& c) { c["architectures"] = {"Gemma2ForCausalLM"}; },
       "'architectures' is [\"Gemma2ForCausalLM\"]; models_llama loads LlamaForCausalLM, MistralForCausalLM, "
       "Qwen2ForCausalLM, Qwen3ForCausalLM"},
      {"unsupported rope scaling", [](auto& c) { c["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}}; },
       "'rope_scaling.rope_type' is \"dynamic\""},
      {"incomplete llama3 scaling", [](auto& c) { c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; },
       "'rope_scaling.low_freq_factor' is required for rope_type llama3"},
      {"activation", [](auto& c) { c["hidden_act"] = "gelu"; }, "'hidden_act' is \"gelu\""},
  };
  const nlohmann::json original = read_json(config);
  for (const Case& c : cases) {
    INFO(c.what);
    nlohmann::json edited = original;
    c.edit(edited);
    write_json(config, edited);
    const std::string e = load_error(dir.path());
    CHECK_THAT(e, Contains(config + ": "));
    CHECK_THAT(e, Contains(c.message));
  }
  write_json(config, original);
  Model ok(dir.path());
  std::filesystem::remove(config);
  CHECK_THAT(load_error(dir.path()), Contains(config + ": cannot open"));
}

TEST_CASE("models_llama: config.json as transformers 4 and 5 write it, keys that could change the forward refused",
          "[models_llama][weights]") {
  require_generator();
  TempDir dir;
  make_model(dir.path(), "--num-layers 1");
  const std::string config = (dir.path() / "config.json").string();
  const nlohmann::json original = read_json(config);
  const auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json edited = original;
    edit(edited);
    write_json(config, edited);
  };
  const nlohmann::json llama3 = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  SECTION("loaded: transformers 5's rope_parameters (flat, or nested by layer type) and dtype, harmless keys") {
    const std::function<void(nlohmann::json&)> loads[] = {
        [&](auto& c) {  // as transformers 5.25 writes it
          c.erase("rope_theta");
          c.erase("rope_scaling");
          c.erase("torch_dtype");
          c["dtype"] = "float32";
          c["rope_parameters"] = llama3;
          c["rope_parameters"]["rope_theta"] = 500000.0;
        },
        [&](auto& c) {  // nested under the layer types transformers 5 lists
          c["layer_types"] = {"full_attention"};
          c["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
        },
        [&](auto& c) {  // both spellings, agreeing
          c["rope_scaling"] = llama3;
          c["rope_parameters"] = llama3;
          c["rope_parameters"]["rope_theta"] = c["rope_theta"];
          c["dtype"] = c["torch_dtype"];
        },
        [&](auto& c) {  // keys that cannot change the forward, and an unknown one set to null (the default)
          c["use_cache"] = false;
          c["pretraining_tp"] = 2;
          c["transformers.js_config"] = {{"kv_cache_dtype", {{"q4f16", "float16"}}}};
          c["is_llama_config"] = true;
          c["rope_interleaved"] = false;
          c["attn_logit_softcapping"] = nullptr;
          c["auto_map"] = {{"AutoTokenizer", "tokenization_x.XTokenizer"}};
        },
    };
    for (const auto& edit : loads) {
      with(edit);
      Model ok(dir.path());
    }
  }
  SECTION("refused, naming the key") {
    struct Case {
      const char* what;
      std::function<void(nlohmann::json&)> edit;
      const char* message;
    };
    const Case cases[] = {
        {"an unknown key", [](auto& c) { c["attn_logit_softcapping"] = 50.0; },
         "'attn_logit_softcapping' is not a setting models_llama reads, and it could change what the model computes"},
        {"an unknown RoPE key", [&](auto& c) { c["rope_parameters"] = llama3; c["rope_parameters"]["beta_fast"] = 32; },
         "'rope_parameters.beta_fast' is not read for rope_type llama3"},
        {"dynamic NTK", [](auto& c) { c["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 4.0}}; },
         "'rope_parameters.rope_type' is \"dynamic\"; models_llama does not serve dynamic NTK scaling"},
        {"an unknown rope_type", [](auto& c) { c["rope_parameters"] = {{"rope_type", "su"}, {"factor", 4.0}}; },
         "'rope_parameters.rope_type' is \"su\"; models_llama supports default, linear, llama3, longrope and yarn"},
        {"yarn without a factor", [](auto& c) { c["rope_scaling"] = {{"rope_type", "yarn"}}; },
         "'rope_scaling.factor' is required for rope_type yarn unless original_max_position_embeddings is written"},
        {"yarn's betas crossed", [](auto& c) {
           c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 1.0}, {"beta_slow", 32.0}}; },
         "'rope_scaling.beta_slow' must be below beta_fast"},
        {"yarn's truncate not a bool", [](auto& c) {
           c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"truncate", "no"}}; },
         "'rope_scaling.truncate' must be true or false, got \"no\""},
        {"a key yarn does not read", [](auto& c) {
           c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"low_freq_factor", 1.0}}; },
         "'rope_scaling.low_freq_factor' is not read for rope_type yarn"},
        {"two RoPE bases", [](auto& c) { c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e5}}; },
         "'rope_theta' is 10000.000000 but 'rope_parameters.rope_theta' is 100000.000000: two spellings of one "
         "setting that disagree"},
        {"two RoPE scalings", [&](auto& c) { c["rope_scaling"] = llama3; c["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}}; },
         "'rope_scaling' (llama3, factor 8, low/high 1/4, original_max_position_embeddings 64) disagrees with "
         "'rope_parameters' (linear, factor 2)"},
        {"two rope types in one object", [](auto& c) { c["rope_scaling"] = {{"rope_type", "linear"}, {"type", "dynamic"}, {"factor", 2.0}}; },
         "'rope_scaling.type' is \"dynamic\" but 'rope_scaling.rope_type' is \"linear\""},
        {"two dtypes", [](auto& c) { c["dtype"] = "bfloat16"; }, "'torch_dtype' is \"float32\" but 'dtype' is \"bfloat16\""},
        {"a sliding layer", [](auto& c) { c["layer_types"] = {"sliding_attention"}; },
         "'layer_types[0]' is sliding_attention but the window keys make layer 0 a full one"},
        {"a sliding window", [](auto& c) { c["sliding_window"] = 4096; }, "'sliding_window' is 4096"},
        {"partial rotation", [](auto& c) { c["partial_rotary_factor"] = 0.5; }, "'partial_rotary_factor' is 0.500000"},
        {"interleaved RoPE", [](auto& c) { c["rope_interleaved"] = true; }, "'rope_interleaved' is true"},
        {"custom modeling code", [](auto& c) { c["auto_map"] = {{"AutoModelForCausalLM", "modeling_x.X"}}; },
         "'auto_map.AutoModelForCausalLM' is \"modeling_x.X\": custom modeling code"},
        {"another model type", [](auto& c) { c["model_type"] = "mistral"; }, "'model_type' is \"mistral\""},

    };
    for (const Case& c : cases) {
      INFO(c.what);
      with(c.edit);
      const std::string e = load_error(dir.path());
      CHECK_THAT(e, Contains(config + ": "));
      CHECK_THAT(e, Contains(c.message));
    }
  }
}

TEST_CASE("models_llama: the families' config.json as their real files write them, and what is still refused",
          "[models_llama][weights][families]") {
  require_oracle();
  TempDir dir;
  const auto make = [&](const char* preset) {
    const auto r = run_command(std::string(kPython) + " " PAGEDLLM_SOURCE_DIR
                                                  "/tools/testing/hf_oracle.py make --preset " + preset + " " +
                                                  quote((dir.path() / preset).string()));
    REQUIRE(r.exit_code == 0);
    return dir.path() / preset;
  };
  const auto edited = [](const std::filesystem::path& model, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json c = read_json(model / "config.json");
    edit(c);
    write_json(model / "config.json", c);
  };
  const std::filesystem::path qwen = make("qwen25"), mistral = make("mistral"), llama = make("llama_bias");

  SECTION("Qwen2.5's file: sliding_window and max_window_layers next to use_sliding_window false") {
    edited(qwen, [](auto& c) { c["sliding_window"] = 32768; c["max_window_layers"] = 21; });
    Model ok(qwen);
    CHECK(std::string(ok.info().architecture) == "Qwen2ForCausalLM");
  }
  SECTION("windows as each family writes them, two spellings that disagree, a model_type of another family") {
    // As a file written before transformers listed layer_types, then with the list agreeing.
    edited(qwen, [](auto& c) {
      c.erase("layer_types");
      c["use_sliding_window"] = true;
      c["sliding_window"] = 4096;
      c["max_window_layers"] = 1;
    });
    Model windowed_from_layer_1(qwen);
    edited(qwen, [](auto& c) { c["layer_types"] = {"full_attention", "sliding_attention"}; });
    Model windowed_as_listed(qwen);
    edited(qwen, [](auto& c) { c["layer_types"] = {"sliding_attention", "sliding_attention"}; });
    CHECK_THAT(load_error(qwen), Contains("'layer_types[0]' is sliding_attention but the window keys make layer 0 a "
                                          "full one: two spellings of one setting that disagree"));
    edited(qwen, [](auto& c) { c.erase("layer_types"); c["sliding_window"] = nullptr; });
    CHECK_THAT(load_error(qwen), Contains("'use_sliding_window' is true without a sliding_window"));
    edited(mistral, [](auto& c) { c["sliding_window"] = 4096; });
    Model mistral_v01_window(mistral);
    edited(mistral, [](auto& c) { c["model_type"] = "llama"; });
    CHECK_THAT(load_error(mistral), Contains("'model_type' is \"llama\" next to [\"MistralForCausalLM\"]"));
  }
  SECTION("a mixture of experts that cannot work is refused naming the key") {
    const std::filesystem::path mixtral = make("mixtral"), qwen_moe = make("qwen3_moe");
    Model mixtral_loads(mixtral);
    CHECK(std::string(mixtral_loads.info().architecture) == "MixtralForCausalLM");
    edited(mixtral, [](auto& c) { c["num_experts_per_tok"] = 9; });
    CHECK_THAT(load_error(mixtral), Contains("'num_experts_per_tok' must be in [1, 8], got 9"));
    edited(qwen_moe, [](auto& c) { c["mlp_only_layers"] = {5}; });
    CHECK_THAT(load_error(qwen_moe), Contains("'mlp_only_layers' must be in [0, 1], got 5"));
    edited(qwen_moe, [](auto& c) { c["mlp_only_layers"] = nlohmann::json::array(); c["router_typo"] = 1; });
    CHECK_THAT(load_error(qwen_moe), Contains("'router_typo' is not a setting models_llama reads"));
  }
  SECTION("a windowed model refuses an attention backend that does not declare windows, naming the layer") {
    const std::filesystem::path windowed = make("mistral_window");
    Placement placement;
    placement.attention_plugin = PAGEDLLM_BINARY_DIR "/tests/plugins/fixtures/fixture_attention.so";
    PagedRunner runner(windowed, "{}", "{}", 4, 96, 7, placement);
    runner.add_sequence(random_tokens(12, 3));
    CHECK_THROWS_WITH(runner.step({{0, 12}}),
                      Contains("layer 0 has a sliding window of 7 tokens, and the attention backend does not declare "
                               "PLLM_ATTENTION_SLIDING_WINDOW"));
    PagedRunner with_attention_cpu(windowed, "{}", "{}");
    with_attention_cpu.add_sequence(random_tokens(12, 3));
    CHECK_NOTHROW(with_attention_cpu.step({{0, 12}}));
  }
  SECTION("Gemma 3's file: its defaults when a key is left out, and what is still refused, naming the key") {
    const std::filesystem::path gemma = make("gemma3");
    // save_pretrained leaves out tie_word_embeddings (Gemma's default, tied); without layer_types, every
    // sliding_window_pattern-th layer is global.
    edited(gemma, [](auto& c) { c.erase("layer_types"); });
    Model tied_by_pattern(gemma);
    CHECK(std::string(tied_by_pattern.info().architecture) == "Gemma3ForCausalLM");
    // transformers 4 writes its legacy pattern next to layer_types, which wins.
    edited(gemma, [](auto& c) {
      c["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                          "sliding_attention", "full_attention"};
    });
    Model listed_layers_win(gemma);
    edited(gemma, [](auto& c) { c["attn_logit_softcapping"] = 50.0; });
    CHECK_THAT(load_error(gemma), Contains("'attn_logit_softcapping' is 50.0; models_llama has no soft-capping of "
                                           "attention scores yet"));
    edited(gemma, [](auto& c) { c["attn_logit_softcapping"] = nullptr; c["hidden_activation"] = "gelu"; });
    CHECK_THAT(load_error(gemma), Contains("'hidden_activation' is \"gelu\""));
    edited(gemma, [](auto& c) { c["hidden_activation"] = "gelu_pytorch_tanh"; c["use_bidirectional_attention"] = true; });
    CHECK_THAT(load_error(gemma), Contains("'use_bidirectional_attention' is true"));
    edited(gemma, [](auto& c) {
      c["use_bidirectional_attention"] = false;
      c["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                              {"sliding_attention", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e4}}}};
      c.erase("rope_theta");
      c.erase("rope_scaling");
    });
    CHECK_THAT(load_error(gemma), Contains("'rope_parameters.sliding_attention.rope_type' is not \"default\""));
    edited(gemma, [](auto& c) { c["rope_parameters"]["sliding_attention"] = {{"rope_type", "default"},
                                                                             {"rope_theta", 2e4}}; });
    CHECK_THAT(load_error(gemma), Contains("'rope_local_base_freq' is 10000.000000 but "
                                           "'rope_parameters.sliding_attention.rope_theta' is 20000.000000"));
  }
  SECTION("Phi-3's file: fused tensors and longrope, and a longrope that cannot work refused naming the key") {
    const std::filesystem::path phi = make("phi3_longrope");
    Model fused(phi);
    CHECK(std::string(fused.info().architecture) == "Phi3ForCausalLM");
    edited(phi, [](auto& c) { c["rope_scaling"]["long_factor"] = {1.0, 2.0}; });
    CHECK_THAT(load_error(phi), Contains("'rope_scaling.long_factor' holds 2 factors; longrope needs head_dim / 2 = 16"));
    edited(phi, [](auto& c) { c["rope_scaling"].erase("long_factor"); });
    CHECK_THAT(load_error(phi), Contains("'rope_scaling.long_factor' is required for rope_type longrope"));
  }
  SECTION("a key another family reads is refused on this one") {
    edited(mistral, [](auto& c) { c["attention_bias"] = true; });
    CHECK_THAT(load_error(mistral), Contains("'attention_bias' is not a setting models_llama reads"));
  }
  SECTION("tensors the config promises and the checkpoint lacks are named, extra ones are logged") {
    edited(llama, [](auto& c) { c["mlp_bias"] = false; });
    Model without_mlp_bias(llama);
    edited(qwen, [](auto& c) { c["architectures"] = {"Qwen3ForCausalLM"}; c["model_type"] = "qwen3"; });
    CHECK_THAT(load_error(qwen), Contains("model.layers.0.self_attn.q_norm.weight"));
  }
}
