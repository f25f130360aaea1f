// The SDK's GGUF reader (pagedllm/sdk/cpp/gguf.hpp, gguf_types.hpp) against an
// independent oracle, gguf-py (tests/sdk/gguf_oracle.py: its GGUFWriter writes the
// files, its GGUFReader and gguf.quants.dequantize give the expected metadata, layout
// and values, compared bit for bit), and against hostile files: every truncation of a
// real file and the corruptions of llama.cpp's GGUF CVEs, each refused with a
// pllm::Error naming the field, never a crash (the sanitizer build runs these too).

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagedllm/sdk/cpp/gguf.hpp"
#include "tests/support/process_mappings.h"
#include "tests/support/python.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/thrown.h"

using Catch::Matchers::Contains;
using pagedllm::testing::TempDir;
namespace gguf = pllm::gguf;

namespace {

const std::string kOracle = std::string(PAGEDLLM_SOURCE_DIR) + "/tests/sdk/gguf_oracle.py";

pllm::Error error_of(const std::function<void()>& body) { return pagedllm::testing::thrown<pllm::Error>(body); }

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// gguf-py's file, what its reader sees in it, and the dequantized values.
struct OracleFile {
  std::filesystem::path gguf;
  nlohmann::json manifest;
  std::vector<float> values;
};

OracleFile write_oracle_file(const TempDir& dir, const std::string& options = "") {
  pagedllm::testing::require_python_modules("gguf, numpy");
  OracleFile f;
  f.gguf = dir.path() / "test.gguf";
  const auto manifest = dir.path() / "manifest.json";
  const auto values = dir.path() / "values.f32";
  const auto r = pagedllm::testing::run_command(std::string(pagedllm::testing::kPython) + " -B " + kOracle +
                                                " write '" + f.gguf.string() + "' '" + manifest.string() + "' '" +
                                                values.string() + "' " + options);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  f.manifest = nlohmann::json::parse(slurp(manifest));
  const std::string raw = slurp(values);
  f.values.resize(raw.size() / 4);
  std::memcpy(f.values.data(), raw.data(), raw.size());
  return f;
}

// Equal bit for bit, except that any NaN equals any NaN (payloads are not specified).
bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, 4) == 0;
}

// A scalar or a (flattened, as gguf-py's contents() gives nested arrays) array.
void flatten(const gguf::Value& v, std::vector<const gguf::Value*>& out) {
  if (v.type != gguf::ValueType::ARRAY) {
    out.push_back(&v);
    return;
  }
  for (const auto& e : v.array) flatten(e, out);
}

void check_scalar(const gguf::Value& v, const nlohmann::json& expected) {
  switch (v.type) {
    case gguf::ValueType::UINT8: case gguf::ValueType::UINT16: case gguf::ValueType::UINT32:
    case gguf::ValueType::UINT64:
      CHECK(v.u == expected.get<std::uint64_t>());
      break;
    case gguf::ValueType::INT8: case gguf::ValueType::INT16: case gguf::ValueType::INT32:
    case gguf::ValueType::INT64:
      CHECK(v.i == expected.get<std::int64_t>());
      break;
    case gguf::ValueType::FLOAT32:
      CHECK(static_cast<float>(v.f) == expected.get<float>());
      break;
    case gguf::ValueType::FLOAT64:
      CHECK(v.f == expected.get<double>());
      break;
    case gguf::ValueType::BOOL:
      CHECK((v.i != 0) == expected.get<bool>());
      break;
    case gguf::ValueType::STRING:
      CHECK(v.s == expected.get<std::string>());
      break;
    case gguf::ValueType::ARRAY:
      FAIL("not a scalar");
  }
}

void check_against_oracle(const OracleFile& oracle) {
  const gguf::File file(oracle.gguf);
  const auto& m = oracle.manifest;
  CHECK(file.version() == m["version"].get<std::uint32_t>());
  CHECK(file.alignment() == m["alignment"].get<std::uint32_t>());
  CHECK(file.data_offset() == m["data_offset"].get<std::uint64_t>());

  // Metadata: the same keys in the same order, types and values.
  REQUIRE(file.metadata().size() == m["metadata"].size());
  for (std::size_t k = 0; k < file.metadata().size(); ++k) {
    const auto& [key, value] = file.metadata()[k];
    const auto& expected = m["metadata"][k];
    INFO("metadata key " << key);
    REQUIRE(key == expected["key"].get<std::string>());
    // gguf-py lists the type, then for arrays the element type at each level.
    std::vector<std::uint32_t> types;
    for (const gguf::Value* level = &value;; level = &level->array.front()) {
      types.push_back(static_cast<std::uint32_t>(level->type));
      if (level->type != gguf::ValueType::ARRAY) break;
      if (level->array.empty()) {
        types.push_back(static_cast<std::uint32_t>(level->element_type));
        break;
      }
    }
    CHECK(types == expected["types"].get<std::vector<std::uint32_t>>());
    if (value.type != gguf::ValueType::ARRAY) {
      check_scalar(value, expected["value"]);
      continue;
    }
    std::vector<const gguf::Value*> flat;
    flatten(value, flat);
    REQUIRE(flat.size() == expected["value"].size());
    for (std::size_t e = 0; e < flat.size(); ++e) check_scalar(*flat[e], expected["value"][e]);
  }

  // Tensors: names, dims, types, offsets, and every value.
  REQUIRE(file.tensors().size() == m["tensors"].size());
  std::size_t at = 0;
  for (std::size_t k = 0; k < file.tensors().size(); ++k) {
    const gguf::TensorInfo& t = file.tensors()[k];
    const auto& expected = m["tensors"][k];
    INFO("tensor " << t.name);
    REQUIRE(t.name == expected["name"].get<std::string>());
    CHECK(t.dims == expected["dims"].get<std::vector<std::int64_t>>());
    CHECK(static_cast<std::uint32_t>(t.type) == expected["type"].get<std::uint32_t>());
    CHECK(t.offset == expected["offset"].get<std::uint64_t>());
    const std::int64_t n = t.numel();
    REQUIRE(n == expected["numel"].get<std::int64_t>());
    std::vector<float> got(static_cast<std::size_t>(n));
    t.to_f32(0, n, got.data());
    std::size_t mismatches = 0;
    for (std::int64_t e = 0; e < n; ++e) {
      if (!same_float(got[e], oracle.values[at + e]) && mismatches++ < 5) {
        UNSCOPED_INFO("element " << e << ": " << got[e] << " != gguf-py's " << oracle.values[at + e]);
      }
    }
    CHECK(mismatches == 0);
    at += static_cast<std::size_t>(n);
  }
  CHECK(at == oracle.values.size());
}

// ---- a byte-level writer for hand-made (hostile) files ------------------------------

struct Bytes {
  std::string b;
  Bytes& u8(std::uint8_t v) { return raw(&v, 1); }
  Bytes& u32(std::uint32_t v) { return raw(&v, 4); }
  Bytes& u64(std::uint64_t v) { return raw(&v, 8); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    b += s;
    return *this;
  }
  Bytes& raw(const void* p, std::size_t n) {
    b.append(static_cast<const char*>(p), n);
    return *this;
  }
  Bytes& pad_to(std::size_t alignment) {
    while (b.size() % alignment) b += '\0';
    return *this;
  }
};

Bytes header(std::uint64_t n_tensors, std::uint64_t n_kv, std::uint32_t version = 3) {
  Bytes h;
  h.raw("GGUF", 4).u32(version).u64(n_tensors).u64(n_kv);
  return h;
}

// A tensor info: name, dims, type, offset.
void tensor_info(Bytes& out, const std::string& name, const std::vector<std::uint64_t>& dims, std::uint32_t type,
                 std::uint64_t offset) {
  out.str(name).u32(static_cast<std::uint32_t>(dims.size()));
  for (auto d : dims) out.u64(d);
  out.u32(type).u64(offset);
}

// A valid file: one key, two F32 tensors of 8 elements, data after 32-byte alignment.
Bytes good_file() {
  Bytes f = header(2, 1);
  f.str("general.architecture").u32(8).str("llama");
  tensor_info(f, "a", {8}, 0, 0);
  tensor_info(f, "b", {4, 2}, 0, 32);
  f.pad_to(32);
  for (int i = 0; i < 16; ++i) {
    const float v = static_cast<float>(i);
    f.raw(&v, 4);
  }
  return f;
}

// The error opening `bytes` gives.
pllm::Error open_error(const std::string& bytes) {
  TempDir dir;
  const auto path = dir.write("bad.gguf", bytes);
  return error_of([&] { gguf::File file(path); });
}

void require_refused(const Bytes& bytes, const std::string& says, pllm_status status = PLLM_ERROR_INVALID_CONFIG) {
  const pllm::Error e = open_error(bytes.b);
  INFO(e.what());
  CHECK(e.status() == status);
  CHECK_THAT(e.what(), Contains("bad.gguf: ") && Contains(says));
}

}  // namespace

TEST_CASE("gguf: every metadata type and tensor type as gguf-py writes and reads them", "[gguf]") {
  TempDir dir;
  check_against_oracle(write_oracle_file(dir));
}

TEST_CASE("gguf: version 2 and a custom alignment", "[gguf]") {
  TempDir dir;
  const OracleFile oracle = write_oracle_file(dir, "--version 2 --alignment 64");
  REQUIRE(oracle.manifest["version"] == 2);
  REQUIRE(oracle.manifest["alignment"] == 64);
  check_against_oracle(oracle);
}

TEST_CASE("gguf: nested arrays keep their structure", "[gguf]") {
  TempDir dir;
  const gguf::File file(write_oracle_file(dir).gguf);
  const gguf::Value* nested = file.find_metadata("test.nested");
  REQUIRE(nested);
  REQUIRE(nested->type == gguf::ValueType::ARRAY);
  REQUIRE(nested->element_type == gguf::ValueType::ARRAY);
  REQUIRE(nested->array.size() == 3);
  std::vector<std::vector<std::int64_t>> got;
  for (const auto& inner : nested->array) {
    CHECK(inner.element_type == gguf::ValueType::INT32);
    got.emplace_back();
    for (const auto& e : inner.array) got.back().push_back(e.i);
  }
  CHECK(got == std::vector<std::vector<std::int64_t>>{{1, 2}, {3}, {4, 5, 6}});
  const gguf::Value* strings = file.find_metadata("test.nested_strings");
  REQUIRE(strings);
  REQUIRE(strings->array.size() == 2);
  CHECK(strings->array[0].array[1].s == "y");
  CHECK(strings->array[1].array[0].s == "z");
}

TEST_CASE("gguf: the type table is gguf-py's GGML_QUANT_SIZES", "[gguf]") {
  pagedllm::testing::require_python_modules("gguf");
  const auto r = pagedllm::testing::run_command(std::string(pagedllm::testing::kPython) + " -B " + kOracle + " sizes");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto sizes = nlohmann::json::parse(r.out);
  for (std::uint32_t id = 0; id < 256; ++id) {
    INFO("type " << id);
    const gguf::TypeTraits* traits = gguf::type_traits(id);
    const std::string key = std::to_string(id);
    if (!sizes.contains(key)) {
      CHECK(traits == nullptr);
      continue;
    }
    REQUIRE(traits != nullptr);
    CHECK(traits->block_size == sizes[key][0].get<std::uint32_t>());
    CHECK(traits->type_size == sizes[key][1].get<std::uint32_t>());
  }
}

TEST_CASE("gguf: element ranges and unsupported types", "[gguf]") {
  TempDir dir;
  const gguf::File file(write_oracle_file(dir).gguf);
  const gguf::TensorInfo& q = file.require("t.q4_k");
  std::vector<float> all(static_cast<std::size_t>(q.numel())), part(256);
  q.to_f32(0, q.numel(), all.data());
  q.to_f32(512, 256, part.data());  // a block in the middle: the same values
  CHECK(std::memcmp(part.data(), all.data() + 512, 256 * 4) == 0);
  CHECK_NOTHROW(file.require("t.f32").to_f32(0, 0, nullptr));  // nothing to write: found by gguf_fuzz
  CHECK_THAT(error_of([&] { q.to_f32(100, 256, part.data()); }).what(), Contains("not whole blocks of 256"));
  CHECK_THAT(error_of([&] { q.to_f32(1280, 512, all.data()); }).what(), Contains("out of range for 1536"));
  CHECK(error_of([&] { file.require("nope"); }).status() == PLLM_ERROR_NOT_FOUND);

  // A type the reader sizes but does not dequantize.
  Bytes f = header(1, 0);
  tensor_info(f, "q5", {32}, 6, 0);  // Q5_0: 22 bytes
  f.pad_to(32);
  f.b.append(22, '\0');
  const auto path = dir.write("q5.gguf", f.b);
  const gguf::File q5(path);
  const pllm::Error e = error_of([&] { q5.tensors()[0].to_f32(0, 32, all.data()); });
  CHECK(e.status() == PLLM_ERROR_UNSUPPORTED);
  CHECK_THAT(e.what(), Contains("tensor 'q5': type Q5_0 is not supported"));
}

TEST_CASE("gguf: a hand-made file parses, and every truncation of it is refused", "[gguf][hostile]") {
  const Bytes good = good_file();
  TempDir dir;
  const gguf::File file(dir.write("good.gguf", good.b));
  REQUIRE(file.tensors().size() == 2);
  CHECK(file.tensors()[1].dims == std::vector<std::int64_t>{4, 2});
  std::vector<float> v(8);
  file.tensors()[1].to_f32(0, 8, v.data());
  CHECK(v == std::vector<float>{8, 9, 10, 11, 12, 13, 14, 15});
  for (std::size_t cut = 0; cut < good.b.size(); ++cut) {
    INFO("truncated to " << cut << " bytes");
    const pllm::Error e = open_error(good.b.substr(0, cut));
    CHECK(e.status() == PLLM_ERROR_INVALID_CONFIG);
    const std::string what = e.what();
    CHECK((what.find("truncated") != std::string::npos || what.find("empty file") != std::string::npos));
  }
}

TEST_CASE("gguf: every truncation of gguf-py's file is refused or parses whole", "[gguf][hostile]") {
  TempDir dir;
  const OracleFile oracle = write_oracle_file(dir);
  const std::string bytes = slurp(oracle.gguf);
  // The end of the last tensor's data; gguf-py may pad after it.
  std::uint64_t end = 0;
  {
    const gguf::File file(oracle.gguf);
    for (const auto& t : file.tensors()) end = std::max(end, file.data_offset() + t.offset + t.nbytes);
  }
  // Shrinking one copy, longest cut first.
  const auto path = dir.write("cut.gguf", bytes);
  for (std::size_t cut = bytes.size(); cut-- > 0;) {
    INFO("truncated to " << cut << " bytes");
    std::filesystem::resize_file(path, cut);
    if (cut >= end) {
      CHECK_NOTHROW(gguf::File(path));
    } else {
      CHECK(error_of([&] { gguf::File file(path); }).status() == PLLM_ERROR_INVALID_CONFIG);
    }
  }
}

TEST_CASE("gguf: corrupt headers are refused with the field and offset", "[gguf][hostile]") {
  SECTION("magic") { require_refused(Bytes{}.raw("GGML", 4).u32(3).u64(0).u64(0), "offset 0: magic"); }
  SECTION("version 1") { require_refused(header(0, 0, 1), "GGUF version 1", PLLM_ERROR_UNSUPPORTED); }
  SECTION("unknown version") { require_refused(header(0, 0, 4), "offset 4: version: unknown GGUF version 4"); }
  SECTION("big-endian") {
    require_refused(header(0, 0, 0x03000000), "big-endian GGUF file (version 3)", PLLM_ERROR_UNSUPPORTED);
  }
  SECTION("huge n_tensors (allocation blowup)") {
    require_refused(header(UINT64_MAX / 2, 0), "offset 8: n_tensors: 9223372036854775807 exceeds the limit");
  }
  SECTION("n_tensors within the cap but past the file") {
    require_refused(header(1000, 0), "offset 8: n_tensors: 1000 items of at least 25 bytes each do not fit");
  }
  SECTION("huge n_kv (allocation blowup)") {
    require_refused(header(0, UINT64_MAX), "offset 16: n_kv: 18446744073709551615 exceeds the limit");
  }
  SECTION("n_kv within the cap but past the file") {
    require_refused(header(0, 60000), "offset 16: n_kv: 60000 items of at least 14 bytes each do not fit");
  }
}

TEST_CASE("gguf: corrupt metadata is refused with the field and offset", "[gguf][hostile]") {
  SECTION("key length overflows") {
    require_refused(header(0, 1).u64(UINT64_MAX).u64(0).u64(0),
                    "offset 24: metadata[0] key: string length 18446744073709551615 exceeds the limit");
  }
  SECTION("key runs past the end") {
    require_refused(header(0, 1).u64(1000).u64(0).u64(0), "metadata[0] key (1000 bytes of text): needs 1000 bytes");
  }
  SECTION("string value length wraps") {
    require_refused(header(0, 1).str("k").u32(8).u64(UINT64_MAX - 3).u64(0),
                    "metadata[0] 'k': string length 18446744073709551612 exceeds the limit");
  }
  SECTION("string value runs past the end") {
    require_refused(header(0, 1).str("k").u32(8).u64(100).u64(0), "metadata[0] 'k' (100 bytes of text): needs 100");
  }
  SECTION("unknown value type") {
    require_refused(header(0, 1).str("k").u32(13).u64(0), "offset 33: metadata[0] 'k' type: unknown value type 13");
  }
  SECTION("unknown array element type") {
    require_refused(header(0, 1).str("k").u32(9).u32(99).u64(0),
                    "metadata[0] 'k' (array element type): unknown value type 99");
  }
  SECTION("huge array length (allocation blowup)") {
    require_refused(header(0, 1).str("k").u32(9).u32(10).u64(UINT64_MAX / 4).u64(0),
                    "offset 41: metadata[0] 'k' (array length): 4611686018427387903 exceeds the limit of 4194304");
  }
  SECTION("array length within the cap but past the file") {
    require_refused(header(0, 1).str("k").u32(9).u32(10).u64(1000).u64(0),
                    "offset 41: metadata[0] 'k' (array length): 1000 items of at least 8 bytes each do not fit");
  }
  SECTION("more array elements in all than the cap (allocation blowup)") {
    Bytes f = header(0, 2).str("a").u32(9).u32(0).u64(3);
    f.b.append(3, '\1');
    f.str("b").u32(9).u32(0).u64(gguf::kMaxMetadataValues - 2);
    require_refused(f, "metadata[1] 'b' (array length): 4194302 exceeds the limit of 4194301");
  }
  SECTION("array of strings longer than the file") {
    require_refused(header(0, 1).str("k").u32(9).u32(8).u64(3).str("a"),
                    "metadata[0] 'k' (array length): 3 items of at least 8 bytes");
  }
  SECTION("arrays nested without end (stack exhaustion)") {
    Bytes f = header(0, 1).str("k").u32(9);
    for (int i = 0; i < 10000; ++i) f.u32(9).u64(1);
    require_refused(f, "arrays nested deeper than 8");
  }
  SECTION("bool neither 0 nor 1") { require_refused(header(0, 1).str("k").u32(7).u8(2), "BOOL value 2"); }
  SECTION("duplicate key") {
    require_refused(header(0, 2).str("k").u32(0).u8(1).str("k").u32(0).u8(2),
                    "metadata[1] 'k': the key appears twice");
  }
  SECTION("empty key") { require_refused(header(0, 1).str("").u32(0).u8(1).u64(0), "metadata[0] key: empty key"); }
  SECTION("alignment not a power of two") {
    require_refused(header(0, 1).str("general.alignment").u32(4).u32(48), "general.alignment 48 is not a power of two");
  }
  SECTION("alignment zero") {
    require_refused(header(0, 1).str("general.alignment").u32(4).u32(0), "general.alignment 0 is not a power of two");
  }
  SECTION("alignment of the wrong type") {
    require_refused(header(0, 1).str("general.alignment").u32(10).u64(32), "general.alignment is UINT64");
  }
}

TEST_CASE("gguf: corrupt tensor infos are refused with the field and offset", "[gguf][hostile]") {
  // Each file has room for the data its tensor would need, so only the named check fails.
  auto one_tensor = [](const std::vector<std::uint64_t>& dims, std::uint32_t type, std::uint64_t offset) {
    Bytes f = header(1, 0);
    tensor_info(f, "w", dims, type, offset);
    f.pad_to(32);
    f.b.append(256, '\0');
    return f;
  };
  SECTION("n_dims > 4") {
    require_refused(one_tensor({1, 1, 1, 1, 1}, 0, 0),
                    "offset 33: tensor_infos[0] 'w' n_dims: 5 exceeds GGML_MAX_DIMS");
  }
  SECTION("n_dims huge") {
    Bytes f = header(1, 0).str("w").u32(UINT32_MAX).u64(0).u64(0).u64(0);
    require_refused(f, "n_dims: 4294967295 exceeds GGML_MAX_DIMS");
  }
  SECTION("a dimension above INT64_MAX") {
    require_refused(one_tensor({1ull << 63}, 0, 0),
                    "tensor_infos[0] 'w' dims[0]: 9223372036854775808 exceeds INT64_MAX");
  }
  SECTION("dims product overflows") {
    require_refused(one_tensor({1ull << 32, 1ull << 32}, 0, 0),
                    "tensor_infos[0] 'w' dims[1]: the product of the dimensions overflows");
  }
  SECTION("byte size overflows") {
    require_refused(one_tensor({1ull << 62}, 0, 0), "tensor_infos[0] 'w' type: the byte size overflows");
  }
  SECTION("offset + size wraps") {
    require_refused(one_tensor({8}, 0, UINT64_MAX - 15),
                    "tensor_infos[0] 'w' offset: 18446744073709551600 + 32 bytes overflows");
  }
  SECTION("unknown tensor types, removed ones included") {
    for (std::uint32_t type : {4u, 5u, 31u, 36u, 42u, 1000u, UINT32_MAX}) {
      require_refused(one_tensor({32}, type, 0), "tensor_infos[0] 'w' type: unknown ggml type " + std::to_string(type));
    }
  }
  SECTION("a row that is not whole blocks") {
    require_refused(one_tensor({33, 2}, 2, 0), "Q4_0 packs blocks of 32 elements, but dims[0] = 33 is not a multiple");
  }
  SECTION("name length overflows") {
    require_refused(header(1, 0).u64(UINT64_MAX).u64(0).u64(0).u64(0),
                    "tensor_infos[0] name: string length 18446744073709551615");
  }
  SECTION("duplicate name") {
    Bytes f = header(2, 0);
    tensor_info(f, "w", {8}, 0, 0);
    tensor_info(f, "w", {8}, 0, 32);
    f.pad_to(32).b.append(64, '\0');
    require_refused(f, "tensor_infos[1] 'w': the name appears twice");
  }
  SECTION("offset not aligned") {
    require_refused(one_tensor({8}, 0, 4), "tensor 'w': offset 4 is not a multiple of the alignment 32");
  }
  SECTION("data past the end of the file") {
    require_refused(one_tensor({8}, 0, 256), "tensor 'w': bytes [256, +32) of the data section");
  }
  SECTION("offset far past the end") {
    require_refused(one_tensor({8}, 0, 1ull << 62), "tensor 'w': bytes [4611686018427387904, +32)");
  }
  SECTION("overlapping tensors") {
    Bytes f = header(2, 0);
    tensor_info(f, "a", {16}, 0, 0);
    tensor_info(f, "b", {8}, 0, 32);
    f.pad_to(32).b.append(128, '\0');
    require_refused(f, "tensor 'b' (bytes [32, 64)) overlaps tensor 'a' (bytes [0, 64))");
  }
  SECTION("data section start past the end") {
    Bytes f = header(1, 0);
    tensor_info(f, "w", {0}, 0, 0);
    require_refused(f, "data section: starts at byte 64");
  }
}

TEST_CASE("gguf: pagedllm-gguf-info prints the metadata and tensors, and refuses bad files", "[gguf]") {
  TempDir dir;
  const OracleFile oracle = write_oracle_file(dir);
  const std::string tool = PAGEDLLM_GGUF_INFO;
  const auto ok = pagedllm::testing::run_command(tool + " '" + oracle.gguf.string() + "'");
  INFO(ok.err);
  REQUIRE(ok.exit_code == 0);
  CHECK_THAT(ok.out, Contains("GGUF version 3, alignment 32, data at byte " +
                              std::to_string(oracle.manifest["data_offset"].get<std::uint64_t>()) + ", " +
                              std::to_string(oracle.manifest["metadata"].size()) + " metadata keys, 12 tensors"));
  CHECK_THAT(ok.out, Contains("  STRING general.architecture = \"llama\"\n"));
  CHECK_THAT(ok.out, Contains("  UINT64 test.u64 = 18000000000000000000\n"));
  CHECK_THAT(ok.out, Contains("  INT8 test.i8 = -100\n"));
  CHECK_THAT(ok.out, Contains("  BOOL test.bool_false = false\n"));
  CHECK_THAT(ok.out, Contains("  FLOAT64 test.f64 = 2.7182818284590451\n"));
  CHECK_THAT(ok.out,
             Contains("  ARRAY test.nested = [ARRAY x 3] [INT32 x 2] 1, 2, [INT32 x 1] 3, [INT32 x 3] 4, 5, 6\n"));
  CHECK_THAT(ok.out, Contains("  tensor t.q4_k Q4_K [512, 3] offset 2592, 864 bytes\n"));
  CHECK_THAT(ok.out, Contains("  tensor t.f32_4d F32 [4, 3, 1, 2] offset 928, 96 bytes\n"));

  const auto bad = dir.write("bad.gguf", header(0, UINT64_MAX).b);
  const auto refused = pagedllm::testing::run_command(tool + " '" + bad.string() + "'");
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, Contains("bad.gguf: offset 16: n_kv: 18446744073709551615 exceeds the limit"));
  CHECK(pagedllm::testing::run_command(tool).exit_code == 2);
}

TEST_CASE("gguf: a refused file leaves no mapping behind", "[gguf][hostile]") {
  using pagedllm::testing::process_mappings;
  TempDir dir;
  Bytes f = good_file();
  f.b.resize(f.b.size() - 4);  // refused after mapping: the last tensor runs past the end
  const auto path = dir.write("cut.gguf", f.b);
  CHECK_THROWS_AS(gguf::File(path), pllm::Error);  // warm-up: anything the first throw allocates
  const std::size_t before = process_mappings();
  for (int i = 0; i < 2000; ++i) CHECK_THROWS_AS(gguf::File(path), pllm::Error);
  // Found by gguf_fuzz: each refusal leaked a mapping. A little slack for the
  // allocator or a sanitizer runtime mapping something of its own meanwhile.
  CHECK(process_mappings() <= before + 4);
}
