// A safetensors file as the model plugins open it: the input is written to
// model.safetensors in a scratch directory and opened the way models_llama
// and spec_eagle do (pllm::safetensors::Checkpoint: mmap, the 8-byte header
// length, the JSON header, the tensor table and the data layout), then every
// tensor is looked up and read as f32.
// Properties: a bad file is a pllm::Error; every view of an accepted file lies
// inside the file (checked explicitly: a read past a mapping is no ASan error).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include <pagedllm/sdk/cpp/safetensors.hpp>

#include "tools/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path dir = [] {
    auto d = pagedllm::fuzz::scratch_dir() / "safetensors";
    std::filesystem::create_directories(d);
    return d;
  }();
  pagedllm::fuzz::write_file(dir / pllm::safetensors::kSingleFileName,
                             std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const pllm::safetensors::Checkpoint checkpoint(dir);
    const pllm::safetensors::File file(dir / pllm::safetensors::kSingleFileName);
    // Accepted: the tensors are the data area back to back, in file order.
    std::uint64_t header_len = 0;
    std::memcpy(&header_len, data, 8);
    std::uint64_t covered = 0;
    const std::byte* next = file.tensors().empty() ? nullptr : file.tensors()[0].data;
    for (const auto& tensor : file.tensors()) {
      if (tensor.data != next) __builtin_trap();
      next = tensor.data + tensor.nbytes;
      covered += tensor.nbytes;
    }
    if (8 + header_len + covered != size) __builtin_trap();
    std::vector<float> values;
    for (const auto& tensor : file.tensors()) {
      if (checkpoint.find(tensor.name) == nullptr) __builtin_trap();
      if (!pllm::is_float_dtype(tensor.dtype)) continue;  // integer tensors are bytes: to_f32 refuses them
      const std::int64_t count = std::min<std::int64_t>(tensor.numel(), 64);
      values.resize(static_cast<std::size_t>(count));
      tensor.to_f32(0, count, values.data());
      if (tensor.numel() > count) tensor.to_f32(tensor.numel() - count, count, values.data());
    }
  } catch (const pllm::Error&) {
  }
  return 0;
}
