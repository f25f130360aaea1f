#include "core/engine/model_runner.h"

#include <string>

#include <fmt/format.h>

namespace pagedllm {
namespace {

// A [rows, columns] f32 tensor (logits: the sampler reads them through their strides).
bool is_f32_matrix(const pllm_tensor& t, std::int64_t rows, std::int64_t columns) {
  return t.dtype == PLLM_DTYPE_F32 && t.ndim == 2 && t.shape[0] == rows && t.shape[1] == columns;
}

}  // namespace

ForwardOutputs ModelRunner::execute(const ModelStep& step) const {
  run_block_operations(step);
  return forward(step.batch);
}

void ModelRunner::run_block_operations(const ModelStep& step) const {
  pllm_error error{};
  const auto run = [&](auto fn, std::span<const pllm_block_copy> pairs, const char* what) {
    if (pairs.empty()) return;
    check_plugin_call(fn(attention_.get(), pairs.data(), static_cast<std::int64_t>(pairs.size()), &error), error,
                      attention_.library(), what);
  };
  run(attention_.api().swap_out, step.swap_out, "swap_out");
  run(attention_.api().swap_in, step.swap_in, "swap_in");
  run(attention_.api().copy_blocks, step.copies, "copy_blocks");
}

void ModelRunner::plan(const pllm_batch& batch, const char* what) const {
  pllm_error error{};
  check_plugin_call(attention_.api().plan(attention_.get(), &batch, &error), error, attention_.library(), what);
}

ForwardOutputs ModelRunner::forward(const pllm_batch& batch) const {
  plan(batch, "plan");
  ForwardOutputs out;
  out.logits.struct_size = out.hidden.struct_size = sizeof(pllm_tensor);
  pllm_forward_output forward{sizeof(pllm_forward_output), &out.logits, &out.hidden};
  const pllm_attention_ref attention = attention_ref(attention_);
  pllm_error error{};
  check_plugin_call(model_.api().forward(model_.get(), &batch, &attention, &forward, &error), error, model_.library(),
                    "forward");
  if (batch.num_logits > 0 && !is_f32_matrix(out.logits, batch.num_logits, vocab_size_)) {
    throw PluginCallError(PLLM_ERROR_INTERNAL,
                          fmt::format("plugin '{}': forward returned logits that are not f32 [{}, {}]",
                                      model_.library().name(), batch.num_logits, vocab_size_));
  }
  // Hidden states with contiguous rows: a draft gathers its features from them.
  const bool hidden_ok = is_f32_matrix(out.hidden, batch.num_hidden, hidden_size_) && out.hidden.strides[1] == 1;
  if (batch.num_hidden > 0 && !hidden_ok) {
    throw PluginCallError(PLLM_ERROR_INTERNAL,
                          fmt::format("plugin '{}': forward returned hidden states that are not f32 [{}, {}]",
                                      model_.library().name(), batch.num_hidden, hidden_size_));
  }
  if (batch.num_hidden == 0) out.hidden = pllm_tensor{};
  return out;
}

pllm_tensor ModelRunner::draft(const SpeculatorInstance& speculator, const pllm_batch& batch,
                               const pllm_tensor* features, const std::int32_t* feature_rows) const {
  plan(batch, "plan (draft)");
  const pllm_attention_ref attention = attention_ref(attention_);
  const pllm_draft_args args{sizeof(pllm_draft_args), &batch, features, &attention, feature_rows};
  pllm_tensor logits{};
  logits.struct_size = sizeof logits;
  pllm_draft_output out{sizeof(pllm_draft_output), &logits};
  pllm_error error{};
  check_plugin_call(speculator.api().draft(speculator.get(), &args, &out, &error), error, speculator.library(),
                    "draft");
  if (batch.num_logits > 0 && !is_f32_matrix(logits, batch.num_logits, vocab_size_)) {
    throw PluginCallError(PLLM_ERROR_INTERNAL,
                          fmt::format("plugin '{}': draft returned logits that are not f32 [{}, {}]",
                                      speculator.library().name(), batch.num_logits, vocab_size_));
  }
  return logits;
}

}  // namespace pagedllm
