#pragma once
// The checkpoint tensors of a Llama model under their HF names and shapes,
// whatever file format holds them: an HF directory of safetensors files, or one
// GGUF file (llama.cpp's format), whose tensors are renamed (token_embd ->
// model.embed_tokens, blk.N.attn_q -> model.layers.N.self_attn.q_proj, ...),
// given HF's [out, in] shape (GGUF lists dims innermost first), dequantized on
// demand (Q8_0, Q4_K, ...: gguf_types.hpp) and, for attn_q / attn_k, un-permuted:
// llama.cpp's convert_hf_to_gguf.py interleaves the two rotate-half halves of
// every head (row h*D + s*D/2 + i of HF becomes row h*D + 2i + s), and this
// reads them back in HF's order. Every loader (the CPU and CUDA models, the
// EAGLE heads) reads its tensors through this one interface. A compressed-tensors
// int8 checkpoint (config.json's quantization_config; llama_config.h) shows each
// quantized Linear as one tensor under its HF weight name, `<name>.weight`,
// whose `int8` holds the stored values and per-row scales (its `weight_scale`,
// `weight_packed` and `weight_shape` companions are not listed separately).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pagedllm/sdk.hpp"
#include "llama_common/llama_config.h"

namespace pagedllm::llama {

// The int8 values of a compressed-tensors weight (LlamaConfig::int8_checkpoint),
// for a loader that keeps them as stored: w[r, i] = q[r, i] * row_scales[r].
struct Int8Values {
  // q's elements [first, first + count) in HF's row-major order (unpacked from
  // pack-quantized int32 words where the file packs them).
  std::function<void(int64_t first, int64_t count, int8_t* dst)> read;
  std::vector<float> row_scales;  // the stored scales widened exactly to f32, one per row
};

// One checkpoint tensor in HF's layout.
struct SourceTensor {
  std::string name;             // HF's name
  std::vector<int64_t> shape;   // HF's shape
  // The stored dtype when it is a float dtype (f32, f16, bf16); PLLM_DTYPE_INVALID
  // for a quantized one.
  pllm_dtype dtype = PLLM_DTYPE_INVALID;
  // The stored elements in HF's order, when they can be copied as they are (a float
  // dtype and no permutation); null otherwise.
  const std::byte* data = nullptr;
  uint64_t nbytes = 0;          // bytes it takes in the file
  std::string where;            // "<file>: tensor '<stored name>'", the start of messages
  // Elements [first, first + count) in HF's row-major order, to f32; any range.
  // A compressed-tensors int8 weight dequantizes: f32(q) * scale, rounded once.
  std::function<void(int64_t first, int64_t count, float* dst)> convert;
  // A compressed-tensors int8 weight's values and scales; null for any other tensor.
  std::shared_ptr<const Int8Values> int8;
  // A GGUF quantized tensor's stored type (pllm::gguf::GgmlType's value; 0, F32,
  // for any other tensor) and a reader of its blocks as stored: the blocks of
  // columns [first_col, first_col + cols) of HF row `row` (both multiples of the
  // type's block size: blocks never straddle rows) copied to dst, from the GGUF
  // row that llama.cpp's converter permuted it to (q and k).
  uint32_t ggml_type = 0;
  std::function<void(int64_t row, int64_t first_col, int64_t cols, std::byte* dst)> read_blocks;
  // Why the tensor cannot be read ("" when it can): an integer tensor outside a
  // quantization config. check_checkpoint refuses it before allocating anything.
  std::string unreadable;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // `convert` after a bounds check (PLLM_ERROR_INVALID_ARGUMENT outside the tensor).
  void to_f32(int64_t first, int64_t count, float* dst) const;
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;

  const SourceTensor* find(std::string_view name) const;
  // The tensor `name` of exactly `shape`; a pllm::Error naming the file and the
  // tensor (PLLM_ERROR_NOT_FOUND when missing, PLLM_ERROR_INVALID_CONFIG on a
  // shape mismatch) otherwise.
  virtual const SourceTensor& require(std::string_view name, const std::vector<int64_t>& shape) const = 0;
  // Every tensor's name, in file order.
  std::vector<std::string> names() const;
  // What log lines name: the path, and the number of files.
  virtual std::string describe() const = 0;

 protected:
  void add(SourceTensor tensor);

 private:
  std::vector<SourceTensor> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

// True when `model_path` names a file (read as GGUF) rather than an HF directory.
bool is_gguf_path(const std::filesystem::path& model_path);

// The weights of `model_path` (an HF directory or a GGUF file) for a model of
// `config`. Throws pllm::Error naming the file.
std::unique_ptr<WeightSource> open_weight_source(const std::filesystem::path& model_path, const LlamaConfig& config);

// model.dtype "auto": the stored dtype of `embed` when it is a float dtype; f16
// for a quantized one (its dequantized values, d * q + m with f16 scales, keep
// about 11 significant bits, far finer than the 4-8 bit quantization itself).
pllm_dtype auto_weight_dtype(const SourceTensor& embed);

}  // namespace pagedllm::llama
