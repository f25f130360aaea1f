// The SDK's safetensors / HF checkpoint reader against hand-built files:
// exact values, and every malformed file refused with a pllm::Error whose
// message names the file and the tensor (or key) concerned.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "pagedllm/sdk/cpp/safetensors.hpp"
#include "tests/support/process_mappings.h"
#include "tests/support/temp_dir.h"
#include "tests/support/thrown.h"

using Catch::Matchers::Contains;
using pagedllm::testing::TempDir;
namespace st = pllm::safetensors;

namespace {

pllm::Error error_of(const std::function<void()>& body) { return pagedllm::testing::thrown<pllm::Error>(body); }

template <class T>
std::string raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

std::string length_prefix(std::uint64_t n) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &n, 8);
  return s;
}

// A safetensors file from a header text and a data area.
std::string file_bytes(const std::string& header, const std::string& data) {
  return length_prefix(header.size()) + header + data;
}

nlohmann::json entry(const char* dtype, std::vector<std::int64_t> shape, std::uint64_t begin, std::uint64_t end) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

// Two valid tensors: a [2, 3] F32 and a [4] BF16, back to back.
struct Valid {
  std::vector<float> a{1.0f, -2.5f, 3.25f, 0.0f, 1e-30f, -7.0f};
  std::vector<std::uint16_t> b{0x3f80, 0xc000, 0x7f80, 0x0001};  // 1, -2, inf, smallest subnormal
  nlohmann::json header() const {
    return {{"__metadata__", {{"format", "pt"}}}, {"a", entry("F32", {2, 3}, 0, 24)}, {"b", entry("BF16", {4}, 24, 32)}};
  }
  std::string data() const { return raw(a) + raw(b); }
};

std::string message_of_file(const TempDir& dir, const std::string& bytes) {
  const auto path = dir.write("bad.safetensors", bytes);
  const pllm::Error e = error_of([&] { st::File f(path); });
  CHECK_THAT(e.what(), Contains(path.string()));
  return e.what();
}

}  // namespace

TEST_CASE("safetensors: a valid file maps tensors with exact values", "[sdk][safetensors]") {
  TempDir dir;
  Valid v;
  const auto path = dir.write("ok.safetensors", file_bytes(v.header().dump(), v.data()));
  st::File file(path);
  CHECK(file.metadata().at("format") == "pt");
  REQUIRE(file.tensors().size() == 2);
  CHECK(file.tensors()[0].name == "a");  // in data order
  const st::TensorView* a = file.find("a");
  REQUIRE(a);
  CHECK(a->dtype == PLLM_DTYPE_F32);
  CHECK(a->shape == std::vector<std::int64_t>{2, 3});
  CHECK(a->numel() == 6);
  CHECK(a->nbytes == 24);
  std::vector<float> out(6);
  a->to_f32(0, 6, out.data());
  CHECK(out == v.a);
  a->to_f32(4, 2, out.data());
  CHECK(out[0] == 1e-30f);
  CHECK(out[1] == -7.0f);
  const st::TensorView* b = file.find("b");
  REQUIRE(b);
  std::vector<float> bf(4);
  b->to_f32(0, 4, bf.data());
  CHECK(bf[0] == 1.0f);
  CHECK(bf[1] == -2.0f);
  CHECK(std::isinf(bf[2]));
  CHECK(bf[3] == std::ldexp(1.0f, -133));
  CHECK(file.find("c") == nullptr);
  CHECK_THAT(error_of([&] { b->to_f32(2, 3, bf.data()); }).what(), Contains("tensor 'b'"));
}

TEST_CASE("safetensors: every f16 pattern widens exactly", "[sdk][safetensors]") {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const std::uint32_t exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
    const float sign = (bits & 0x8000) ? -1.0f : 1.0f;
    const float got = pllm::f16_to_f32(static_cast<std::uint16_t>(bits));
    if (exponent == 0x1f) {
      CHECK((mantissa ? std::isnan(got) : got == sign * std::numeric_limits<float>::infinity()));
      continue;
    }
    const float expected = exponent == 0 ? sign * std::ldexp(float(mantissa), -24)
                                         : sign * std::ldexp(float(mantissa + 1024), int(exponent) - 25);
    if (got != expected || std::signbit(got) != std::signbit(expected)) {
      FAIL("f16 " << bits << ": got " << got << ", expected " << expected);
    }
  }
  CHECK(pllm::bf16_to_f32(0x4049) == 3.140625f);
  CHECK(std::isnan(pllm::bf16_to_f32(0x7fc0)));
}

TEST_CASE("safetensors: converting no elements touches neither pointer", "[sdk][safetensors]") {
  // Found by tools/fuzz (fuzz_safetensors): an empty tensor read into an empty vector passed
  // memcpy a null destination (undefined behaviour, reported by UBSan).
  const std::vector<float> none;
  CHECK(pllm::to_f32(nullptr, PLLM_DTYPE_F32, const_cast<float*>(none.data()), 0));
  CHECK(pllm::to_f32(nullptr, PLLM_DTYPE_BF16, nullptr, 0));
  CHECK_FALSE(pllm::to_f32(nullptr, PLLM_DTYPE_I32, nullptr, 0));
}

TEST_CASE("safetensors: truncated files and absurd header lengths are refused", "[sdk][safetensors]") {
  TempDir dir;
  Valid v;
  const std::string good = file_bytes(v.header().dump(), v.data());
  CHECK_THAT(message_of_file(dir, ""), Contains("truncated"));
  CHECK_THAT(message_of_file(dir, good.substr(0, 5)), Contains("truncated"));
  CHECK_THAT(message_of_file(dir, length_prefix(std::uint64_t(1) << 40) + "{}"), Contains("exceeds the limit"));
  CHECK_THAT(message_of_file(dir, length_prefix(100'000'001) + "{}"), Contains("header length 100000001"));
  CHECK_THAT(message_of_file(dir, length_prefix(4096) + "{}"), Contains("truncated file?"));
  // Cut inside the data: the tensor that runs past the end is named.
  const std::string cut = message_of_file(dir, good.substr(0, good.size() - 3));
  CHECK_THAT(cut, Contains("tensor 'b'"));
  CHECK_THAT(cut, Contains("truncated file?"));
}

TEST_CASE("safetensors: a refused file leaves no mapping behind", "[sdk][safetensors]") {
  using pagedllm::testing::process_mappings;
  TempDir dir;
  // Refused after mapping: the header is not JSON.
  const auto path = dir.write("garbage.safetensors", file_bytes("\x01garbage, not json", std::string(64, '\xff')));
  CHECK_THROWS_AS(st::File(path), pllm::Error);  // warm-up: anything the first throw allocates
  const std::size_t before = process_mappings();
  for (int i = 0; i < 2000; ++i) CHECK_THROWS_AS(st::File(path), pllm::Error);
  // Each leak is one more line (2000 before the fix); a little slack for the
  // allocator or a sanitizer runtime mapping something of its own meanwhile.
  CHECK(process_mappings() <= before + 4);
}

TEST_CASE("safetensors: malformed headers are refused naming the tensor", "[sdk][safetensors]") {
  TempDir dir;
  Valid v;
  CHECK_THAT(message_of_file(dir, file_bytes("{\"a\": [1, 2", v.data())), Contains("header is not valid JSON"));
  CHECK_THAT(message_of_file(dir, file_bytes("\x01\x02garbage", v.data())), Contains("header is not valid JSON"));
  // A number past what JSON's parser can hold is out_of_range, not parse_error (found by fuzz_safetensors).
  CHECK_THAT(message_of_file(dir, file_bytes("{\"__metadata__\": {\"n\": -21474E83649}}", "")),
             Contains("header is not valid JSON"));
  CHECK_THAT(message_of_file(dir, file_bytes("[1, 2]", "")), Contains("not a JSON object"));

  auto with = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& data = {}) {
    nlohmann::json h = v.header();
    edit(h);
    return message_of_file(dir, file_bytes(h.dump(), data.empty() ? v.data() : data));
  };
  const std::string dup = message_of_file(
      dir, file_bytes(R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
                      R"( "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]},)"
                      R"( "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})",
                      v.data()));
  CHECK_THAT(dup, Contains("tensor 'a' appears twice"));

  const std::string shape = with([](auto& h) { h["a"]["shape"] = {3, 3}; });
  CHECK_THAT(shape, Contains("tensor 'a'"));
  CHECK_THAT(shape, Contains("needs 36 bytes"));
  CHECK_THAT(with([](auto& h) { h["a"]["shape"] = {2, -3}; }), Contains("tensor 'a': shape"));
  CHECK_THAT(with([](auto& h) { h["a"]["shape"] = {std::uint64_t(1) << 62, 16}; }), Contains("overflows"));
  CHECK_THAT(with([](auto& h) { h["a"]["data_offsets"] = {24, 0}; }), Contains("tensor 'a': data_offsets"));
  CHECK_THAT(with([](auto& h) { h["b"].erase("dtype"); }), Contains("tensor 'b': missing 'dtype'"));
  CHECK_THAT(with([](auto& h) { h["b"] = 3; }), Contains("tensor 'b': entry is not a JSON object"));
  CHECK_THAT(with([](auto& h) { h["__metadata__"] = {{"n", 1}}; }), Contains("__metadata__ key 'n'"));

  SECTION("unsupported and unknown dtypes") {
    TempDir d2;
    nlohmann::json h = v.header();
    h["b"] = entry("U64", {1}, 24, 32);
    const auto path = d2.write("u64.safetensors", file_bytes(h.dump(), v.data()));
    const pllm::Error e = error_of([&] { st::File f(path); });
    CHECK(e.status() == PLLM_ERROR_UNSUPPORTED);
    CHECK_THAT(e.what(), Contains(path.string()));
    CHECK_THAT(e.what(), Contains("tensor 'b': dtype U64 is not supported"));
    CHECK_THAT(with([](auto& h2) { h2["b"]["dtype"] = "Q4"; }), Contains("tensor 'b': unknown dtype 'Q4'"));
  }

  SECTION("integer tensors are read as bytes, never converted to f32") {
    TempDir d2;
    nlohmann::json h = v.header();
    h["b"] = entry("I8", {8}, 24, 32);
    const auto path = d2.write("i8.safetensors", file_bytes(h.dump(), v.data()));
    st::File f(path);
    const st::TensorView& b = *f.find("b");
    CHECK(b.dtype == PLLM_DTYPE_I8);
    CHECK(b.nbytes == 8);
    CHECK(std::memcmp(b.data, v.data().data() + 24, 8) == 0);
    float out[8];
    const pllm::Error e = error_of([&] { b.to_f32(0, 8, out); });
    CHECK(e.status() == PLLM_ERROR_UNSUPPORTED);
    CHECK_THAT(e.what(), Contains("tensor 'b': is I8, not a float tensor"));
  }
}

TEST_CASE("safetensors: overlapping tensors, holes and trailing bytes are refused", "[sdk][safetensors]") {
  TempDir dir;
  Valid v;
  nlohmann::json overlap = v.header();
  overlap["b"]["data_offsets"] = {20, 28};
  const std::string o = message_of_file(dir, file_bytes(overlap.dump(), v.data()));
  CHECK_THAT(o, Contains("tensor 'b'"));
  CHECK_THAT(o, Contains("overlaps tensor 'a'"));
  CHECK_THAT(message_of_file(dir, file_bytes(overlap.dump(), v.data().substr(0, 28))), Contains("overlaps"));

  nlohmann::json gap = v.header();
  gap["b"]["data_offsets"] = {28, 36};
  CHECK_THAT(message_of_file(dir, file_bytes(gap.dump(), v.data() + "1234")),
             Contains("bytes [24, 28) of the data area before tensor 'b' belong to no tensor"));
  CHECK_THAT(message_of_file(dir, file_bytes(v.header().dump(), v.data() + "xy")),
             Contains("2 bytes after the last tensor ('b')"));
}

TEST_CASE("safetensors: a checkpoint of one file or of shards", "[sdk][safetensors]") {
  TempDir dir;
  Valid v;
  SECTION("single file") {
    dir.write("model.safetensors", file_bytes(v.header().dump(), v.data()));
    st::Checkpoint ckpt(dir.path());
    CHECK_FALSE(ckpt.sharded());
    CHECK(ckpt.names() == std::vector<std::string>{"a", "b"});
    CHECK(ckpt.total_bytes() == 32);
    CHECK(ckpt.require("a", {2, 3}).numel() == 6);
    const pllm::Error missing = error_of([&] { ckpt.require("lm_head.weight"); });
    CHECK(missing.status() == PLLM_ERROR_NOT_FOUND);
    CHECK_THAT(missing.what(), Contains((dir.path() / "model.safetensors").string()));
    CHECK_THAT(missing.what(), Contains("tensor 'lm_head.weight' is missing"));
    const pllm::Error shape = error_of([&] { ckpt.require("a", {3, 2}); });
    CHECK_THAT(shape.what(), Contains((dir.path() / "model.safetensors").string() + ": tensor 'a' has shape [2, 3], expected [3, 2]"));
  }
  SECTION("shards") {
    const std::string a = file_bytes(nlohmann::json{{"a", entry("F32", {2, 3}, 0, 24)}}.dump(), raw(v.a));
    const std::string b = file_bytes(nlohmann::json{{"b", entry("BF16", {4}, 0, 8)}}.dump(), raw(v.b));
    dir.write("m-1.safetensors", a);
    dir.write("m-2.safetensors", b);
    nlohmann::json index = {{"metadata", {{"total_size", 32}}},
                            {"weight_map", {{"a", "m-1.safetensors"}, {"b", "m-2.safetensors"}}}};
    auto write_index = [&] { dir.write("model.safetensors.index.json", index.dump()); };
    const std::string index_path = (dir.path() / "model.safetensors.index.json").string();
    write_index();
    {
      st::Checkpoint ckpt(dir.path());
      CHECK(ckpt.sharded());
      CHECK(ckpt.files().size() == 2);
      CHECK(ckpt.require("b").file->path() == dir.path() / "m-2.safetensors");
      CHECK_THAT(error_of([&] { ckpt.require("c"); }).what(), Contains(index_path + ": tensor 'c' is missing"));
    }
    index["weight_map"]["b"] = "m-3.safetensors";
    write_index();
    const pllm::Error missing_shard = error_of([&] { st::Checkpoint c(dir.path()); });
    CHECK(missing_shard.status() == PLLM_ERROR_NOT_FOUND);
    CHECK_THAT(missing_shard.what(), Contains(index_path + ": shard 'm-3.safetensors' (holding tensor 'b') does not exist"));

    index["weight_map"]["b"] = "m-1.safetensors";
    write_index();
    CHECK_THAT(error_of([&] { st::Checkpoint c(dir.path()); }).what(),
               Contains("weight_map puts tensor 'b' in 'm-1.safetensors', which has no such tensor"));

    index["weight_map"]["b"] = "../m-2.safetensors";
    write_index();
    CHECK_THAT(error_of([&] { st::Checkpoint c(dir.path()); }).what(), Contains("is not a file name inside"));

    dir.write("m-2.safetensors", file_bytes(v.header().dump(), v.data()));  // holds 'a' too
    index["weight_map"]["b"] = "m-2.safetensors";
    write_index();
    CHECK_THAT(error_of([&] { st::Checkpoint c(dir.path()); }).what(), Contains("tensor 'a' is also in"));

    dir.write("model.safetensors.index.json", "{\"weight_map\": ");
    CHECK_THAT(error_of([&] { st::Checkpoint c(dir.path()); }).what(), Contains(index_path + ": not valid JSON"));
    dir.write("model.safetensors.index.json", "{\"weight_map\": {}, \"metadata\": {\"total_size\": 1E400}}");
    CHECK_THAT(error_of([&] { st::Checkpoint c(dir.path()); }).what(), Contains(index_path + ": not valid JSON"));
    dir.write("model.safetensors.index.json", "{}");
    CHECK_THAT(error_of([&] { st::Checkpoint c(dir.path()); }).what(), Contains("has no 'weight_map'"));
  }
  SECTION("nothing to load") {
    CHECK_THAT(error_of([&] { st::Checkpoint c(dir.path()); }).what(), Contains("neither model.safetensors nor"));
    CHECK(error_of([&] { st::Checkpoint c(dir.path() / "nope"); }).status() == PLLM_ERROR_NOT_FOUND);
  }
}
