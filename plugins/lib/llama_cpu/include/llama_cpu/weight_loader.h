#pragma once
// Loading checkpoint tensors into the fused layout of the CPU forward: each
// tensor is a row range of a (possibly fused) matrix, so q/k/v or gate/up
// land in one matrix and make one GEMM. Each matrix is held in the dtype its
// WeightStorage was given (f32, bf16, f16 or int8): a tensor stored in that
// dtype (and in HF's order) is copied as is, any other is widened exactly (or
// dequantized: GGUF, compressed-tensors int8) to f32 and, for a 16-bit target,
// rounded to nearest even; for int8, a compressed-tensors int8 weight's values
// and scales are copied as stored, any other is quantized row by row
// (quantize_row_int8); for GGUF blocks (keep_gguf_blocks), the blocks of
// each row copied as stored (q/k rows un-permuted whole).

#include <cstdint>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "llama_common/weight_layout.h"
#include "llama_cpu/weights.h"

namespace pagedllm::llama_cpu {

// One checkpoint tensor (or a block of it) and where its rows go: rows
// [first_row, first_row + shape[0]) of `storage`, whose row width is shape[1]
// (1 for a vector). A tensor-parallel shard reads a block of the checkpoint's
// tensor: `source_shape` is the tensor's whole shape (empty: `shape`, the whole
// tensor) and the block starts at (source_first_row, source_first_col).
struct WeightPart {
  std::string name;
  std::vector<int64_t> shape;
  WeightStorage* storage;
  int64_t first_row;
  std::vector<int64_t> source_shape = {};
  int64_t source_first_row = 0;
  int64_t source_first_col = 0;

  int64_t width() const { return shape.size() > 1 ? shape[1] : 1; }
  const std::vector<int64_t>& checkpoint_shape() const { return source_shape.empty() ? shape : source_shape; }
  int64_t source_width() const {
    const std::vector<int64_t>& s = checkpoint_shape();
    return s.size() > 1 ? s[1] : 1;
  }
  // The checkpoint element where local row `row` of the block starts.
  int64_t source_offset(int64_t row) const { return (source_first_row + row) * source_width() + source_first_col; }
  // Where the tensor lives once loaded.
  void* data() const {
    return static_cast<std::byte*>(storage->data()) +
           weight_bytes_of(storage->dtype(), storage->blocks(), first_row * width());
  }
};

// One row of k weights to int8 (weights.h): s = max |w| / 127 and q = rint(w
// / s) (round half to even), both in double, s stored as f32; sum = sum of q.
void quantize_row_int8(const float* w, int64_t k, int8_t* q, float& scale, int32_t& sum);

// model.dtype auto on a GGUF file: each matrix (a storage of 2-D parts) whose
// tensors are all stored in one block type with kernels (weights.h BlockType)
// is held in those blocks as stored (set_blocks, before loading), when every
// part's columns start and end on block boundaries (a tensor-parallel shard's
// column block). Any other matrix stays in its dtype (dequantized at load):
// returns one line per reason it happened, naming the tensors ("" when every
// matrix is held as stored), and in `kept` the block types held and how many
// matrices each.
std::string keep_gguf_blocks(const llama::WeightSource& checkpoint, const std::vector<WeightPart>& parts,
                             std::string& kept);

struct LoadedWeights {
  uint64_t stored_bytes = 0;        // bytes the parts took in the checkpoint
  std::vector<std::string> unused;  // checkpoint tensors no part named
};

// Checks every part's name and shape against `checkpoint` before allocating
// anything (llama::check_checkpoint), sizes each storage once (in its dtype)
// to hold all its parts, and converts tensor by tensor in parallel chunks of
// whole rows on `pool`, reporting progress as "loading weights".
LoadedWeights load_weight_parts(const llama::WeightSource& checkpoint, const std::vector<WeightPart>& parts,
                                plugins::ThreadPool& pool);

}  // namespace pagedllm::llama_cpu
