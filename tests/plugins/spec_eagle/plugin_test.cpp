// spec_eagle through its C table: info, strict options, bad draft checkpoints
// and drafts that do not fit the target refused at create with a message
// naming the file and the tensor or key, and draft() refusing malformed
// arguments -- errors, never a crash.

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "tests/plugins/spec_eagle/eagle_harness.h"
#include "tests/support/thrown.h"

using namespace eagle_test;
using Catch::Matchers::Contains;

namespace {

const Model& target() {
  static Model model(kTargetDir, R"({"num_threads": 1})");
  return model;
}

std::string create_error(const std::filesystem::path& draft_dir, const std::string& options = "{}",
                         const pllm_model_api* model_api = nullptr) {
  try {
    Speculator spec(draft_dir, target(), options, 4, model_api);
  } catch (const pagedllm::PluginCallError& e) {
    return e.what();
  }
  FAIL("the draft loaded");
  return {};
}

// A copy of the committed head to break.
struct DraftCopy {
  llama_test::TempDir tmp;
  std::filesystem::path dir = tmp.path() / "eagle";
  DraftCopy() { std::filesystem::copy(kDraftDir, dir, std::filesystem::copy_options::recursive); }
  void edit_config(const std::function<void(nlohmann::json&)>& edit) const {
    nlohmann::json config;
    {
      std::ifstream in(dir / "config.json");
      config = nlohmann::json::parse(in);
    }
    edit(config);
    std::ofstream(dir / "config.json", std::ios::trunc) << config.dump(2);
  }
  template <class Edit>
  void edit_weights(Edit&& edit) const {
    llama_test::rewrite_safetensors(dir / "model.safetensors", edit);
  }
};

}  // namespace

TEST_CASE("spec_eagle: info describes one draft layer shaped like the target's", "[spec_eagle]") {
  Speculator spec(kDraftDir, target(), R"({"num_threads": 2})");
  const pllm_speculator_info info = spec.info();
  CHECK(info.num_draft_layers == 1);
  CHECK(info.num_kv_heads == 2);
  CHECK(info.head_dim == 32);
  CHECK(info.hidden_size == 256);
}

TEST_CASE("spec_eagle: on the CPU it lends host memory for p and q, and takes back only what it lent",
          "[spec_eagle]") {
  Speculator spec(kDraftDir, target());
  const pllm_speculator_buffer a = spec.allocate_buffer(1000);
  const pllm_speculator_buffer b = spec.allocate_buffer(3 * 8192 * sizeof(float));
  for (const pllm_speculator_buffer& buffer : {a, b}) {
    REQUIRE(buffer.data != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(buffer.data) % 256 == 0);
    CHECK(buffer.device.type == PLLM_DEVICE_CPU);
  }
  CHECK(a.bytes >= 1000);
  CHECK(b.bytes >= 3 * 8192 * sizeof(float));
  CHECK(a.data != b.data);
  // Host memory: writable in full.
  std::memset(b.data, 0x7f, std::size_t(b.bytes));
  spec.free_buffer(a.data);
  const auto error_of = [](auto&& call) {
    return std::string(pagedllm::testing::thrown<pagedllm::PluginCallError>(call).what());
  };
  CHECK_THAT(error_of([&] { spec.free_buffer(a.data); }), Contains("free_buffer: not a buffer this instance lent"));
  int on_stack = 0;
  CHECK_THAT(error_of([&] { spec.free_buffer(&on_stack); }), Contains("not a buffer this instance lent"));
  CHECK_THAT(error_of([&] { spec.allocate_buffer(0); }), Contains("allocate_buffer: 0 bytes"));
  // An output struct without 2.0's fields is refused before anything is allocated.
  CHECK_THAT(error_of([&] { spec.allocate_buffer(64, 8); }),
             Contains("spec_eagle: allocate_buffer output: struct_size 8 is too small"));
  spec.free_buffer(b.data);
}

TEST_CASE("spec_eagle: unknown options are refused", "[spec_eagle]") {
  CHECK_THAT(create_error(kDraftDir, R"({"num_thread": 2})"), Contains("num_thread"));
  CHECK_THAT(create_error(kDraftDir, R"({"num_threads": -1})"), Contains("num_threads"));
  CHECK_THAT(create_error(kDraftDir, R"({"cpu_bf16_compute": "bf16"})"),
             Contains("cpu_bf16_compute") && Contains("vdpbf16ps, exact"));
}

TEST_CASE("spec_eagle: bad draft checkpoints name the file and the tensor or key", "[spec_eagle]") {
  DraftCopy draft;
  const std::string config = (draft.dir / "config.json").string();
  const std::string weights = (draft.dir / "model.safetensors").string();

  SECTION("no such directory") {
    CHECK_THAT(create_error(draft.dir / "missing"), Contains((draft.dir / "missing" / "config.json").string()) &&
                                                        Contains("cannot open"));
  }
  SECTION("no weights") {
    std::filesystem::remove(draft.dir / "model.safetensors");
    CHECK_THAT(create_error(draft.dir), Contains(draft.dir.string()) && Contains("model.safetensors"));
  }
  SECTION("fc.weight missing") {
    draft.edit_weights([](auto& tensors) { std::erase_if(tensors, [](auto& t) { return t.name == "fc.weight"; }); });
    CHECK_THAT(create_error(draft.dir), Contains("fc.weight"));
  }
  SECTION("fc.weight of the wrong shape") {
    draft.edit_weights([](auto& tensors) {
      for (auto& t : tensors) {
        if (t.name == "fc.weight") t.shape = {512, 256};
      }
    });
    CHECK_THAT(create_error(draft.dir), Contains(weights) && Contains("fc.weight") && Contains("[256, 512]"));
  }
  SECTION("a layer tensor missing") {
    draft.edit_weights([](auto& tensors) {
      std::erase_if(tensors, [](auto& t) { return t.name == "layers.0.mlp.down_proj.weight"; });
    });
    CHECK_THAT(create_error(draft.dir), Contains("layers.0.mlp.down_proj.weight"));
  }
  SECTION("a hidden size other than the target's") {
    draft.edit_config([](auto& c) { c["hidden_size"] = 128; });
    CHECK_THAT(create_error(draft.dir),
               Contains(config) && Contains("'hidden_size' = 128 does not match the target model's hidden_size = 256"));
  }
  SECTION("other KV heads than the target's") {
    draft.edit_config([](auto& c) { c["num_key_value_heads"] = 4; });
    CHECK_THAT(create_error(draft.dir), Contains("'num_key_value_heads' = 4 does not match") && Contains("= 2"));
  }
  SECTION("another head_dim than the target's") {
    draft.edit_config([](auto& c) { c["head_dim"] = 16; });
    CHECK_THAT(create_error(draft.dir), Contains("'head_dim' = 16 does not match"));
  }
  SECTION("another vocabulary than the target's") {
    draft.edit_config([](auto& c) { c["vocab_size"] = 8000; });
    CHECK_THAT(create_error(draft.dir), Contains("'vocab_size' = 8000 does not match"));
  }
  SECTION("two decoder layers") {
    draft.edit_config([](auto& c) { c["num_hidden_layers"] = 2; });
    CHECK_THAT(create_error(draft.dir), Contains("exactly one decoder layer"));
  }
  SECTION("another EAGLE version") {
    draft.edit_config([](auto& c) { c["eagle"]["version"] = 2; });
    CHECK_THAT(create_error(draft.dir), Contains("'eagle.version' is 2"));
  }
  SECTION("config.json that is not JSON") {
    std::ofstream(draft.dir / "config.json", std::ios::trunc) << "{";
    CHECK_THAT(create_error(draft.dir), Contains(config) && Contains("not valid JSON"));
  }
}

TEST_CASE("spec_eagle: a bad draft vocabulary is refused with the file and the reason", "[spec_eagle]") {
  DraftCopy draft;
  const std::string file = (draft.dir / "draft_vocab.json").string();
  const auto write_ids = [&](const std::string& ids) {
    std::ofstream(draft.dir / "draft_vocab.json", std::ios::trunc) << R"({"token_ids": )" << ids << "}";
  };
  SECTION("a size above the vocabulary") {
    CHECK_THAT(create_error(draft.dir, R"({"draft_vocab_size": 8193})"),
               Contains("draft_vocab_size = 8193 must be in [0, vocab_size = 8192]"));
  }
  SECTION("a negative size") {
    CHECK_THAT(create_error(draft.dir, R"({"draft_vocab_size": -1})"), Contains("draft_vocab_size"));
  }
  SECTION("no draft_vocab.json") {
    std::filesystem::remove(draft.dir / "draft_vocab.json");
    CHECK_THAT(create_error(draft.dir, R"({"draft_vocab_size": 16})"),
               Contains(file) && Contains("cannot be read, and draft_vocab_size = 16 needs it"));
  }
  SECTION("not JSON") {
    std::ofstream(draft.dir / "draft_vocab.json", std::ios::trunc) << "[1, 2";
    CHECK_THAT(create_error(draft.dir, R"({"draft_vocab_size": 2})"), Contains(file) && Contains("not a JSON object"));
  }
  SECTION("no token_ids") {
    std::ofstream(draft.dir / "draft_vocab.json", std::ios::trunc) << R"({"counts": [3, 2]})";
    CHECK_THAT(create_error(draft.dir, R"({"draft_vocab_size": 2})"), Contains("has no 'token_ids' array"));
  }
  SECTION("fewer ranked tokens than asked for") {
    write_ids("[5, 6, 7]");
    CHECK_THAT(create_error(draft.dir, R"({"draft_vocab_size": 4})"),
               Contains("ranks 3 tokens, fewer than draft_vocab_size = 4"));
  }
  SECTION("a token outside the vocabulary") {
    write_ids("[5, 8192, 7]");
    CHECK_THAT(create_error(draft.dir, R"({"draft_vocab_size": 3})"),
               Contains("token_ids[1] = 8192 is not a token id in [0, 8192)"));
  }
  SECTION("a token that is not an integer") {
    write_ids(R"([5, "6"])");
    CHECK_THAT(create_error(draft.dir, R"({"draft_vocab_size": 2})"), Contains("token_ids[1] = \"6\""));
  }
  SECTION("a repeated token") {
    write_ids("[5, 6, 5]");
    CHECK_THAT(create_error(draft.dir, R"({"draft_vocab_size": 3})"), Contains("token_ids[2] = 5 is repeated"));
  }
}

TEST_CASE("spec_eagle: a draft vocabulary needs only the ranks it uses", "[spec_eagle]") {
  DraftCopy draft;
  // Only the first 2 ids are read: a bad id after them does not matter, and
  // the whole vocabulary (0 or 8192) needs no file at all.
  std::ofstream(draft.dir / "draft_vocab.json", std::ios::trunc) << R"({"token_ids": [9, 3, -1]})";
  CHECK(Speculator(draft.dir, target(), R"({"draft_vocab_size": 2})").info().hidden_size == 256);
  std::filesystem::remove(draft.dir / "draft_vocab.json");
  CHECK(Speculator(draft.dir, target(), R"({"draft_vocab_size": 0})").info().hidden_size == 256);
  CHECK(Speculator(draft.dir, target(), R"({"draft_vocab_size": 8192})").info().hidden_size == 256);
}

namespace {

// A target table whose get_tensor answers `fake_status` for lm_head.weight and
// defers to the real models_llama otherwise.
const pllm_model_api* real_api = nullptr;
pllm_status fake_status = PLLM_ERROR_NOT_FOUND;
pllm_status fake_get_tensor(pllm_model* model, const char* name, pllm_tensor* out, pllm_error* error) {
  if (std::string(name) == "lm_head.weight") {
    std::snprintf(error->message, sizeof error->message, "no lm_head here");
    return fake_status;
  }
  return real_api->get_tensor(model, name, out, error);
}

}  // namespace

TEST_CASE("spec_eagle: a target without lm_head.weight shares its embedding (tied)", "[spec_eagle]") {
  real_api = &target().api();
  pllm_model_api api = target().api();
  api.get_tensor = &fake_get_tensor;
  fake_status = PLLM_ERROR_NOT_FOUND;
  Speculator spec(kDraftDir, target(), "{}", 4, &api);
  CHECK(spec.info().hidden_size == 256);

  fake_status = PLLM_ERROR_IO;
  CHECK_THAT(create_error(kDraftDir, "{}", &api), Contains("get_tensor(\"lm_head.weight\") failed: no lm_head here"));
}

TEST_CASE("spec_eagle: fc.bias is optional", "[spec_eagle]") {
  DraftCopy draft;
  draft.edit_weights([](auto& tensors) { std::erase_if(tensors, [](auto& t) { return t.name == "fc.bias"; }); });
  Speculator spec(draft.dir, target());
  CHECK(spec.info().num_draft_layers == 1);
}

TEST_CASE("spec_eagle: cuda:0 with a target on the CPU is a clear error in every build", "[spec_eagle]") {
  const auto e = pagedllm::testing::thrown<pagedllm::PluginCallError>(
      [] { Speculator spec(kDraftDir, target(), "{}", 4, nullptr, {PLLM_DEVICE_CUDA, 0}); });
  CHECK(e.status() == PLLM_ERROR_UNSUPPORTED);
  const std::string message = e.what();
#ifdef PAGEDLLM_HAVE_CUDA
  // The CUDA head refuses the CPU target before it touches a device.
  CHECK_THAT(message, Contains("the target's 'model.embed_tokens.weight' is on cpu, but the draft runs on cuda:0"));
#else
  CHECK_THAT(message, Contains("spec_eagle: cuda:0 asked for, but this build has no CUDA"));
#endif
}

TEST_CASE("spec_eagle: a target without get_tensor is refused", "[spec_eagle]") {
  pllm_model_api api = target().api();
  api.get_tensor = nullptr;
  CHECK_THAT(create_error(kDraftDir, "{}", &api), Contains("no get_tensor"));
}

TEST_CASE("spec_eagle: draft() refuses malformed arguments", "[spec_eagle]") {
  EagleRunner runner(R"({"num_threads": 1})", R"({"variant": "reference"})", R"({"num_threads": 1})");
  const int32_t seq = runner.add_sequence();
  std::vector<std::vector<float>> features(3, std::vector<float>(256, 0.5f));
  auto error_of = [&](auto&& call) {
    try {
      call();
    } catch (const pagedllm::PluginCallError& e) {
      return std::string(e.what());
    }
    FAIL("draft() accepted the arguments");
    return std::string();
  };
  SECTION("a chain without a previous draft") {
    CHECK_THAT(error_of([&] { runner.draft_step({{seq, 0, {1, 2, 3}}}, {}, {2}); }),
               Contains("no previous draft() kept predicted features"));
  }
  SECTION("a chain whose length differs from the previous logits rows") {
    runner.draft_step({{seq, 0, {1, 2, 3}}}, features, {2});
    CHECK_THAT(error_of([&] { runner.draft_step({{seq, 3, {4, 5}}}, {}, {1}); }),
               Contains("returned 1 logits rows for this batch's 2 tokens"));
  }
  SECTION("features of the wrong width") {
    const EagleRunner::Batch& b = runner.plan({{seq, 0, {1, 2, 3}}}, {2}, {});
    std::vector<float> narrow(3 * 128, 0.0f);
    const pllm_tensor features_128 = f32_tensor(narrow.data(), {3, 128});
    const int32_t rows[] = {0, 1, 2};
    CHECK_THAT(error_of([&] { runner.draft().draft(b.view, &features_128, runner.attention_ref(), rows); }),
               Contains("features must be an f32 [rows, hidden = 256]"));
  }
  SECTION("a feature row outside the features") {
    const EagleRunner::Batch& b = runner.plan({{seq, 0, {1, 2, 3}}}, {2}, {});
    std::vector<float> wide(3 * 256, 0.0f);
    const pllm_tensor features_256 = f32_tensor(wide.data(), {3, 256});
    const int32_t rows[] = {0, 3, 2};
    CHECK_THAT(error_of([&] { runner.draft().draft(b.view, &features_256, runner.attention_ref(), rows); }),
               Contains("feature_rows[1] = 3 is outside the features' rows [0, 3)"));
  }
  SECTION("a token outside the vocabulary") {
    CHECK_THAT(error_of([&] { runner.draft_step({{seq, 0, {1, 8192, 3}}}, features, {2}); }),
               Contains("token_ids[1] = 8192 is outside the vocabulary"));
  }
  SECTION("a logits row outside the batch") {
    CHECK_THAT(error_of([&] { runner.draft_step({{seq, 0, {1, 2, 3}}}, features, {3}); }),
               Contains("logits_indices[0] = 3 is not a token row"));
  }
}
