#pragma once
// The EAGLE-1 draft model on one CUDA device (what it computes: draft_head.h),
// next to the CPU's eagle_head.h. Built only with CUDA (PAGEDLLM_HAVE_CUDA).
//
// The weights (fc, fc.bias, layers.0) are resident on the device in the
// target's compute dtype (F32, F16 or BF16); the embedding and lm_head are the
// target's device tensors (get_tensor), read in place. The decoder layer, the
// GEMMs and the kernels are models_llama's CUDA ones (plugins/lib/llama_cuda), on
// the head's own stream; attention goes through the backend core passes, as KV
// layer target num_layers. Features arrive as host f32 rows and go up with the
// step's int32 inputs in one copy; the predicted features stay on the device
// for the chain; the logits come down into pinned memory, the call's one host
// synchronisation.
//
// A draft vocabulary (draft_vocab.h; empty: the whole vocabulary) gathers
// those lm_head rows into a compact [N, hidden] device matrix at load (one
// gather kernel), so a draft step computes and downloads N logits per row
// instead of vocab. They are scattered on the host (DraftVocabLogits, shared
// with the CPU head) rather than on the device: a device scatter would copy a
// vocab-wide row over PCIe instead of N floats, and the host keeps the -inf
// entries from one call to the next, so the scatter is N stores per row.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "pagedllm/sdk.h"
#include "draft_head.h"

namespace pagedllm::spec_eagle {

// Loads `draft_dir` onto cuda:`device_index` next to `target`, which must be
// there too. Throws pllm::Error: the checkpoint and config errors of the CPU
// head, PLLM_ERROR_UNSUPPORTED for a target whose embedding or lm_head is not
// on that device or not in its compute dtype, PLLM_ERROR_DEVICE for a device
// that cannot be used, PLLM_ERROR_OUT_OF_MEMORY naming what needed how many
// bytes, PLLM_ERROR_INVALID_ARGUMENT for a draft vocabulary id outside the
// vocabulary.
std::unique_ptr<DraftHead> load_cuda_eagle_head(const std::filesystem::path& draft_dir,
                                                const pllm_speculator_target& target, int device_index,
                                                std::vector<int32_t> draft_vocab, int num_threads);

}  // namespace pagedllm::spec_eagle
