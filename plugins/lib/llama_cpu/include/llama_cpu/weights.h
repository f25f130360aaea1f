#pragma once
// Weight matrices of the CPU forward in their compute dtype: f32, bf16 or f16
// (16-bit patterns), or int8 (quantization: int8*). linear() reads bf16/f16
// weights directly, widening them exactly to f32 in registers (or, for bf16
// on AVX512-BF16, multiplying them on vdpbf16ps: Bf16Compute), so a 16-bit
// model streams half the bytes of its f32 widening per token. Norm weights are
// always f32.
//
// int8 (PLLM_DTYPE_I8): symmetric, per output channel (row): row j holds
// q[j, i] = rint(w[j, i] / s[j]) in [-127, 127] with s[j] = max_i |w[j, i]| / 127
// (computed in double, stored as f32; an all-zero row has s = 0, q = 0), next to
// s[j] and sum_i q[j, i] (the correction term of the W8A8 kernel's unsigned
// activations, cpu_kernels.h). Its Int8Compute says how linear() multiplies it.
// A pre-quantized (compressed-tensors) checkpoint's rows are held as stored:
// any int8 q (compressed-tensors' symmetric range is [-128, 127], s = max |w| /
// 127.5) with its stored scale widened to f32.
//
// GGUF blocks (a BlockType other than kNone): a GGUF file's quantized matrix
// held as the file stores it, row-major, each row k / block_elems blocks
// (blocks never straddle rows: GGUF requires dims[0] to be a multiple of the
// block size), ggml's byte layouts (llama_common/gguf_dequantize.h). linear()
// multiplies them as llama.cpp does (block_kernels.inc): the activations
// quantized per block, integer block dot products, f32 accumulation.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "llama_common/gguf_dequantize.h"
#include "pagedllm/sdk.h"
#include "pagedllm/sdk/cpp/float_convert.hpp"
#include "pagedllm/sdk/cpp/gguf_types.hpp"

namespace pagedllm::llama_cpu {

inline std::size_t weight_dtype_size(pllm_dtype dtype) {
  return dtype == PLLM_DTYPE_F32 ? 4 : dtype == PLLM_DTYPE_I8 ? 1 : 2;
}

// The GGUF block types linear() multiplies as stored, and the activation
// blocks each is multiplied with (block_kernels.inc):
//   kQ8_0, kQ4_0  32-element blocks, activations in 32-element blocks of int8
//                 (llama.cpp's Q8_0)
//   kQ5_0, kIQ4_NL  the same
//   kQ4_1, kQ5_1  the same with each activation block's sum (llama.cpp's Q8_1)
//   kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K, kIQ4_XS  256-element super-blocks,
//                 activations in 256-element blocks of int8 with sums per 16
//                 (llama.cpp's Q8_K)
// Every quantized type the loader reads (llama_common/gguf_dequantize.h) has
// one; the loader refuses the others (IQ1-IQ3, TQ*, MXFP4, ...).
enum class BlockType : uint8_t {
  kNone, kQ8_0, kQ4_0, kQ4_1, kQ4_K, kQ5_K, kQ6_K, kQ5_0, kQ5_1, kQ2_K, kQ3_K, kIQ4_NL, kIQ4_XS
};

struct BlockFormat {
  pllm::gguf::GgmlType ggml_type;
  int64_t elems;  // per block
  int64_t bytes;  // per block
  const char* name;
};

inline const BlockFormat& block_format(BlockType type) {
  using G = pllm::gguf::GgmlType;
  static constexpr BlockFormat kFormats[] = {
      {G::F32, 1, 4, "none"},          {G::Q8_0, 32, 34, "Q8_0"},   {G::Q4_0, 32, 18, "Q4_0"},
      {G::Q4_1, 32, 20, "Q4_1"},       {G::Q4_K, 256, 144, "Q4_K"}, {G::Q5_K, 256, 176, "Q5_K"},
      {G::Q6_K, 256, 210, "Q6_K"},     {G::Q5_0, 32, 22, "Q5_0"},   {G::Q5_1, 32, 24, "Q5_1"},
      {G::Q2_K, 256, 84, "Q2_K"},      {G::Q3_K, 256, 110, "Q3_K"}, {G::IQ4_NL, 32, 18, "IQ4_NL"},
      {G::IQ4_XS, 256, 136, "IQ4_XS"},
  };
  return kFormats[int(type)];
}

// The block type of a stored GGUF type; kNone for one linear() has no kernels for.
inline BlockType block_type_of(pllm::gguf::GgmlType ggml_type) {
  for (BlockType t : {BlockType::kQ8_0, BlockType::kQ4_0, BlockType::kQ4_1, BlockType::kQ5_0, BlockType::kQ5_1,
                      BlockType::kQ2_K, BlockType::kQ3_K, BlockType::kQ4_K, BlockType::kQ5_K, BlockType::kQ6_K,
                      BlockType::kIQ4_NL, BlockType::kIQ4_XS}) {
    if (block_format(t).ggml_type == ggml_type) return t;
  }
  return BlockType::kNone;
}

// Bytes of `count` elements of a matrix: in blocks, or dtype's elements.
inline std::size_t weight_bytes_of(pllm_dtype dtype, BlockType blocks, int64_t count) {
  if (blocks != BlockType::kNone) {
    const BlockFormat& f = block_format(blocks);
    return std::size_t(count / f.elems * f.bytes);
  }
  return std::size_t(count) * weight_dtype_size(dtype);
}

// How linear() multiplies int8 weights:
//   kW8A8       activations quantized too (per row, dynamically: symmetric,
//               max |a| / 127), integer dot products (vpdpbusd on
//               avx512vnni), one f32 rescale per output
//   kWeightOnly the int8 weights widened to f32 in registers, f32
//               activations and accumulation, one rescale per output
enum class Int8Compute { kW8A8, kWeightOnly };

// How linear() multiplies bf16 weights (models_llama's and spec_eagle's option
// cpu_bf16_compute):
//   kVdpbf16ps  on a CPU with AVX512-BF16 (the avx512bf16 level of cpu_isa.h):
//               every row of activations rounded to bf16 (to nearest even)
//               once per product, then multiplied with the weights in pairs
//               on vdpbf16ps (exact products, f32 accumulation), at any row
//               count, so a row's result is the same alone or in a batch of
//               up to kDotRowsMaxRows rows (cpu_kernels.h). What HF bf16 and
//               vLLM compute; about twice the exact path's multiply rate.
//               On lower levels kExact (rounding there would cost accuracy
//               and save nothing).
//   kExact      the weights widened to f32 exactly, f32 activations, f32
//               FMA / SGEMM on every level: HF's float32 forward of the same
//               weights, to f32 summation order.
enum class Bf16Compute { kVdpbf16ps, kExact };

// A row-major [n, k] weight matrix (or any run of rows of one): its first
// element and dtype (F32, BF16, F16 or I8; I8 with its per-row scales and sums),
// or its GGUF blocks (`blocks` other than kNone: dtype is then meaningless).
struct WeightsRef {
  const void* data = nullptr;
  pllm_dtype dtype = PLLM_DTYPE_F32;
  const float* scales = nullptr;    // I8: s[row]
  const int32_t* row_sums = nullptr;  // I8: sum of the row's q
  Int8Compute int8_compute = Int8Compute::kW8A8;
  Bf16Compute bf16_compute = Bf16Compute::kVdpbf16ps;  // BF16
  BlockType blocks = BlockType::kNone;

  // The matrix from row `row` of width `k` on.
  WeightsRef rows_from(int64_t row, int64_t k) const {
    WeightsRef r = *this;
    r.data = static_cast<const std::byte*>(data) + weight_bytes_of(dtype, blocks, row * k);
    if (scales) r.scales = scales + row;
    if (row_sums) r.row_sums = row_sums + row;
    return r;
  }
  // Row `row` (width k) as f32 into dst (exact, except int8: q * s rounded to
  // f32, and blocks: ggml's dequantization).
  void row_to_f32(int64_t row, int64_t k, float* dst) const {
    if (blocks != BlockType::kNone) {
      llama::dequantize_gguf(block_format(blocks).ggml_type, rows_from(row, k).data, dst, k);
      return;
    }
    if (dtype == PLLM_DTYPE_I8) {
      const auto* q = static_cast<const int8_t*>(rows_from(row, k).data);
      for (int64_t i = 0; i < k; ++i) dst[i] = float(q[i]) * scales[row];
      return;
    }
    pllm::to_f32(rows_from(row, k).data, dtype, dst, k);
  }
};

// Owns one weight matrix (or vector): `count` elements of `dtype` (or in GGUF
// blocks), 64-byte aligned. The loader sizes it (resize) in the dtype set
// beforehand.
class WeightStorage {
 public:
  explicit WeightStorage(pllm_dtype dtype = PLLM_DTYPE_F32) : dtype_(dtype) {}

  pllm_dtype dtype() const { return dtype_; }
  // Only before resize(): the dtype the loader converts into.
  void set_dtype(pllm_dtype dtype) { dtype_ = dtype; }
  // Only before loading: int8 storage, multiplied the way `compute` says.
  void set_int8(Int8Compute compute) {
    dtype_ = PLLM_DTYPE_I8;
    int8_compute_ = compute;
  }
  // Only before loading: the GGUF blocks of `type` as stored (kNone: dtype()).
  void set_blocks(BlockType type) { blocks_ = type; }
  BlockType blocks() const { return blocks_; }
  // How bf16 contents are multiplied (any time: it is read by ref()).
  void set_bf16_compute(Bf16Compute compute) { bf16_compute_ = compute; }
  // `count` elements; int8: in rows of `width`, with a scale and sum per row.
  void resize(std::size_t count, std::size_t width = 1) {
    data_.reset(static_cast<std::byte*>(
        ::operator new[](weight_bytes_of(dtype_, blocks_, int64_t(count)), std::align_val_t(64))));
    count_ = count;
    if (dtype_ == PLLM_DTYPE_I8) {
      scales_.assign(count / width, 0.0f);
      row_sums_.assign(count / width, 0);
    }
  }
  std::size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  std::size_t bytes() const {
    return weight_bytes_of(dtype_, blocks_, int64_t(count_)) + scales_.size() * (sizeof(float) + sizeof(int32_t));
  }

  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  // int8: the per-row scales and sums (empty otherwise).
  float* scales() { return scales_.data(); }
  int32_t* row_sums() { return row_sums_.data(); }
  WeightsRef ref() const {
    if (blocks_ != BlockType::kNone) {
      return {data_.get(), dtype_, nullptr, nullptr, int8_compute_, bf16_compute_, blocks_};
    }
    if (dtype_ != PLLM_DTYPE_I8) return {data_.get(), dtype_, nullptr, nullptr, int8_compute_, bf16_compute_};
    return {data_.get(), dtype_, scales_.data(), row_sums_.data(), int8_compute_};
  }
  // The f32 contents (norm weights); PLLM_DTYPE_F32 storage only.
  const float* f32() const { return reinterpret_cast<const float*>(data_.get()); }

 private:
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  pllm_dtype dtype_;
  Int8Compute int8_compute_ = Int8Compute::kW8A8;
  Bf16Compute bf16_compute_ = Bf16Compute::kVdpbf16ps;
  BlockType blocks_ = BlockType::kNone;
  std::unique_ptr<std::byte[], Free> data_;
  std::size_t count_ = 0;
  std::vector<float> scales_;
  std::vector<int32_t> row_sums_;
};

}  // namespace pagedllm::llama_cpu
