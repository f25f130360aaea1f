#pragma once
// The Llama architecture on the CPU: loads an HF LlamaForCausalLM directory
// into a compute-friendly layout and runs one batched, varlen forward per
// engine step (mixed prefill chunks and decodes), attending through the
// attention backend core passes in.
//
// Weights are copied once at load (the checkpoint is unmapped afterwards)
// into the fused layout of llama_common/weight_layout.h, the matrices
// in the weight dtype (the embedding's stored dtype by default: f32, bf16 or
// f16; model.dtype f32 widens), the norms in f32; activations, accumulation
// and the KV cache are f32. Every HF tensor is a contiguous row range of a
// fused matrix, so get_tensor() serves any name (a tied lm_head is the
// embedding itself), in the weight dtype.
//
// As rank r of a tensor-parallel group of N (a collectives ref at create;
// docs/tensor-parallel.md) it loads only its shard of an HF checkpoint: q/k/v
// by heads (heads [r H/N, (r+1) H/N); kv heads likewise, or, when N exceeds
// them, kv head r / (N / KV) replicated on N / KV ranks), gate/up by rows
// (intermediate columns), o/down by columns, embedding and lm_head by
// vocabulary (ceil(V / N) rows per rank); the norms whole. config() is the
// rank's view (its heads and intermediate size), so the KV cache core sizes
// from info() holds the rank's kv heads. forward() all-reduces the embedding
// rows and the outputs of o_proj and down_proj, and all-gathers the logits:
// every rank returns the whole [rows, vocab] logits.
//
// With quantization (int8_w8a8 / int8_weight_only), every decoder matrix and
// lm_head are quantized to int8 at load instead (per output row, weights.h);
// a tied lm_head gets an int8 copy of the embedding, which itself stays in
// the weight dtype (the token gather, get_tensor for a speculator).
//
// A compressed-tensors int8 checkpoint (llama_common/llama_config.h) keeps its
// int8 matrices as stored, values and scales, without requantizing; the
// matrices it left in float (its ignore list: lm_head, typically) stay in the
// weight dtype.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pagedllm/sdk.h"
#include "common/thread_pool.h"
#include "llama_cpu/buffer.h"
#include "llama_cpu/decoder_layer.h"
#include "llama_cpu/tensor_parallel_shard.h"
#include "llama_common/llama_forward.h"

namespace pagedllm::models_llama {

using llama_cpu::Buffer;
using llama::LlamaConfig;

class LlamaModel final : public llama::LlamaForward {
 public:
  // Loads and validates config and weights; reports progress through the
  // host. `weight_dtype`: F32, BF16, F16, or INVALID for the embedding's
  // stored dtype. `quantization`: int8 matrices multiplied that way, or none.
  // `bf16_compute`: how bf16 matrices are multiplied (llama_cpu/weights.h).
  LlamaModel(const std::filesystem::path& model_dir, int num_threads, pllm_dtype weight_dtype,
             std::optional<llama_cpu::Int8Compute> quantization = std::nullopt,
             const pllm_collectives_ref* collectives = nullptr,
             llama_cpu::Bf16Compute bf16_compute = llama_cpu::Bf16Compute::kVdpbf16ps);

  const LlamaConfig& config() const override { return config_; }
  pllm_dtype dtype() const override { return PLLM_DTYPE_F32; }
  std::string describe() const override;
  // The dtype of the weight matrices.
  pllm_dtype weight_dtype() const { return weight_dtype_; }
  // Bytes of weights held (the tied lm_head counted once).
  std::size_t weight_bytes() const;

  void forward(const pllm_batch& batch, pllm_attention_ref attention, pllm_forward_output& out) override;
  // A host view in its stored dtype (the weight dtype; f32 for norms); an
  // int8 matrix is refused (PLLM_ERROR_UNSUPPORTED). Under tensor parallelism,
  // this rank's block: the embedding and lm_head are its vocabulary rows
  // [vocab_first, vocab_first + vocab_rows) (TensorParallelShard).
  pllm_tensor tensor(std::string_view name) const override;

 private:
  // Where a checkpoint tensor lives in the f32 layout.
  struct Slot {
    void* data;
    pllm_dtype dtype;
    std::vector<int64_t> shape;
    llama_cpu::BlockType blocks;
  };

  // Logs what this tensor-parallel rank holds.
  void log_tensor_parallel_rank() const;
  void load_weights(const std::filesystem::path& model_dir, pllm_dtype weight_dtype);
  // On a compressed-tensors checkpoint: the matrices it stores int8 are made int8 storage (copied as stored
  // by the loader); refused when a fused matrix mixes int8 and float tensors.
  void keep_stored_int8(const llama::WeightSource& checkpoint, const std::vector<llama_cpu::WeightPart>& parts);
  // The checkpoint block of `slot` this rank loads (the whole tensor without tensor parallelism).
  llama_cpu::WeightPart shard_part(const llama::WeightSlot& slot, llama_cpu::WeightStorage* storage) const;
  llama_cpu::WeightsRef lm_head() const {
    return config_.tie_word_embeddings && !quantization_ ? embed_.ref() : lm_head_.ref();
  }

  LlamaConfig full_config_;  // the checkpoint's
  LlamaConfig config_;       // this rank's: its heads, kv heads and intermediate size
  // This rank's part of the model under tensor parallelism; none: the whole model.
  std::optional<llama_cpu::TensorParallelShard> shard_;
  int64_t vocab_first_ = 0, vocab_rows_ = 0;  // the embedding and lm_head rows held: all without a shard
  plugins::ThreadPool pool_;
  std::vector<double> inv_freq_;
  pllm_dtype weight_dtype_ = PLLM_DTYPE_F32;
  std::optional<llama_cpu::Int8Compute> quantization_;  // quantized at load (never on a pre-quantized checkpoint)
  llama_cpu::Int8Compute int8_compute_ = llama_cpu::Int8Compute::kW8A8;  // how int8 matrices are multiplied
  llama_cpu::Bf16Compute bf16_compute_;                                   // how bf16 matrices are multiplied
  std::string int8_matrices_;  // what the int8 matrices are, for log lines; "" when there are none
  std::string gguf_blocks_;    // the GGUF block types held as stored and how many matrices each ("" when none)
  llama_cpu::WeightStorage embed_, norm_, lm_head_;
  std::vector<llama_cpu::DecoderLayerWeights> layers_;
  std::map<std::string, Slot, std::less<>> slots_;

  // Forward scratch, sized for the largest step seen so far.
  llama_cpu::DecoderScratch scratch_;
  Buffer x_, rows_, logits_, hidden_, shard_logits_, gathered_logits_;
};

}  // namespace pagedllm::models_llama
