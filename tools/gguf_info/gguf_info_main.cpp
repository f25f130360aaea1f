// pagedllm-gguf-info: prints what a GGUF file holds, as the SDK's reader
// (pagedllm/sdk/cpp/gguf.hpp) parses it, validation included.
//
//   pagedllm-gguf-info FILE.gguf
//
// Prints the version, alignment and data offset, every metadata key with its type
// and value (arrays: element type, length and the first 8 elements), and every
// tensor with its ggml dims (innermost first), type, offset in the data section and
// size. Exit status: 0 ok, 2 bad usage or a file the reader refuses (the message
// names the field and its offset), 1 other errors.

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "pagedllm/sdk/cpp/gguf.hpp"

namespace {

namespace gguf = pllm::gguf;

constexpr std::size_t kArrayShown = 8;

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string scalar(const gguf::Value& v) {
  switch (v.type) {
    case gguf::ValueType::UINT8: case gguf::ValueType::UINT16: case gguf::ValueType::UINT32:
    case gguf::ValueType::UINT64:
      return std::to_string(v.u);
    case gguf::ValueType::INT8: case gguf::ValueType::INT16: case gguf::ValueType::INT32:
    case gguf::ValueType::INT64:
      return std::to_string(v.i);
    case gguf::ValueType::FLOAT32: case gguf::ValueType::FLOAT64: {
      char buf[32];
      std::snprintf(buf, sizeof buf, v.type == gguf::ValueType::FLOAT32 ? "%.9g" : "%.17g", v.f);  // round-trips
      return buf;
    }
    case gguf::ValueType::BOOL: return v.i ? "true" : "false";
    case gguf::ValueType::STRING: return quoted(v.s);
    case gguf::ValueType::ARRAY: break;
  }
  std::string out = std::string("[") + gguf::value_type_name(v.element_type) + " x " + std::to_string(v.array.size()) +
                    "]";
  for (std::size_t k = 0; k < v.array.size() && k < kArrayShown; ++k) out += (k ? ", " : " ") + scalar(v.array[k]);
  if (v.array.size() > kArrayShown) out += ", ...";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: pagedllm-gguf-info FILE.gguf\n");
    return 2;
  }
  try {
    const gguf::File file(argv[1]);
    std::printf("%s: GGUF version %u, alignment %u, data at byte %llu, %zu metadata keys, %zu tensors\n", argv[1],
                file.version(), file.alignment(), static_cast<unsigned long long>(file.data_offset()),
                file.metadata().size(), file.tensors().size());
    for (const auto& [key, value] : file.metadata()) {
      std::printf("  %s %s = %s\n", gguf::value_type_name(value.type), key.c_str(), scalar(value).c_str());
    }
    for (const gguf::TensorInfo& t : file.tensors()) {
      std::string dims = "[";
      for (std::size_t d = 0; d < t.dims.size(); ++d) dims += (d ? ", " : "") + std::to_string(t.dims[d]);
      dims += "]";
      std::printf("  tensor %s %s %s offset %llu, %llu bytes\n", t.name.c_str(),
                  gguf::type_traits(static_cast<std::uint32_t>(t.type))->name, dims.c_str(),
                  static_cast<unsigned long long>(t.offset), static_cast<unsigned long long>(t.nbytes));
    }
    return 0;
  } catch (const pllm::Error& e) {
    std::fprintf(stderr, "pagedllm-gguf-info: %s\n", e.what());
    return e.status() == PLLM_ERROR_INVALID_CONFIG || e.status() == PLLM_ERROR_UNSUPPORTED ||
                   e.status() == PLLM_ERROR_NOT_FOUND || e.status() == PLLM_ERROR_IO
               ? 2
               : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pagedllm-gguf-info: %s\n", e.what());
    return 1;
  }
}
