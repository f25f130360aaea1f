#include "llama_common/config_keys.h"

#include <algorithm>
#include <iterator>

namespace pagedllm::llama {
namespace {

constexpr std::string_view kGenerationDefault =
    "a default sampling setting transformers 4 kept in config.json; the forward never reads it, and pagedllm takes "
    "sampling defaults from generation_config.json and the request";
constexpr std::string_view kTrainingOnly = "used only while training (initialisation, dropout, caching for backprop)";
constexpr std::string_view kOutputFormat = "which outputs transformers returns, not what it computes";
constexpr std::string_view kOtherHeads = "describes classification or encoder-decoder heads a causal LM does not have";

// Sorted by key (find_harmless_config_key searches it).
constexpr HarmlessKey kConfigKeys[] = {
    {"_attn_implementation", "which attention kernel transformers picks; all compute softmax(QK^T / sqrt(d)) V"},
    {"_commit_hash", "where the file came from"},
    {"_name_or_path", "where the file came from"},
    {"add_cross_attention", kOtherHeads},
    {"attention_dropout", kTrainingOnly},
    {"attn_implementation", "which attention kernel transformers picks; all compute softmax(QK^T / sqrt(d)) V"},
    {"bad_words_ids", kGenerationDefault},
    {"begin_suppress_tokens", kGenerationDefault},
    {"chunk_size_feed_forward", "transformers' memory-saving chunking of the MLP over positions: the same sums"},
    {"cross_attention_hidden_size", kOtherHeads},
    {"decoder_start_token_id", kOtherHeads},
    {"diversity_penalty", kGenerationDefault},
    {"do_sample", kGenerationDefault},
    {"early_stopping", kGenerationDefault},
    {"encoder_no_repeat_ngram_size", kGenerationDefault},
    {"exponential_decay_length_penalty", kGenerationDefault},
    {"finetuning_task", "a note on how the model was trained"},
    {"forced_bos_token_id", kGenerationDefault},
    {"forced_eos_token_id", kGenerationDefault},
    {"id2label", kOtherHeads},
    {"initializer_range", kTrainingOnly},
    {"is_decoder", "marks a decoder; a causal LM is one"},
    {"is_llama_config", "nanotron's export marker (SmolLM2): says the file is a plain LlamaConfig"},
    {"label2id", kOtherHeads},
    {"length_penalty", kGenerationDefault},
    {"max_length", kGenerationDefault},
    {"min_length", kGenerationDefault},
    {"no_repeat_ngram_size", kGenerationDefault},
    {"num_beam_groups", kGenerationDefault},
    {"num_beams", kGenerationDefault},
    {"num_labels", kOtherHeads},
    {"num_return_sequences", kGenerationDefault},
    {"output_attentions", kOutputFormat},
    {"output_hidden_states", kOutputFormat},
    {"output_scores", kGenerationDefault},
    {"pad_token_id", "padding only matters to batches padded to one length; pagedllm never pads a sequence"},
    {"prefix", "a text prefix some pipelines prepend; not part of the model"},
    {"pretraining_tp", "transformers 4 split the MLP's products into this many slices when > 1: the same sums"},
    {"problem_type", kOtherHeads},
    {"remove_invalid_values", kGenerationDefault},
    {"repetition_penalty", kGenerationDefault},
    {"return_dict", kOutputFormat},
    {"return_dict_in_generate", kGenerationDefault},
    {"sep_token_id", "a tokenizer id for paired inputs; not used by the forward"},
    {"suppress_tokens", kGenerationDefault},
    {"task_specific_params", "pipeline settings; not part of the model"},
    {"temperature", kGenerationDefault},
    {"tf_legacy_loss", kTrainingOnly},
    {"tie_encoder_decoder", kOtherHeads},
    {"tokenizer_class", "which tokenizer class transformers instantiates; pagedllm reads tokenizer.json itself"},
    {"top_k", kGenerationDefault},
    {"top_p", kGenerationDefault},
    {"torchscript", "how transformers exports the model"},
    {"transformers.js_config", "settings for transformers.js in the browser"},
    {"transformers_version", "the version that wrote the file (4.x and 5.x are read alike)"},
    {"typical_p", kGenerationDefault},
    {"use_bfloat16", "a TensorFlow-era storage hint; pagedllm reads each tensor in its stored dtype"},
    {"use_cache", "whether transformers keeps a KV cache; pagedllm always does, with the same results"},
};

// GGUF keys under "<architecture>.", as llama.cpp's llama-arch names them.
constexpr HarmlessKey kGgufArchKeys[] = {
    {"rope.scaling.finetuned", "informational: whether the model was fine-tuned at the scaled context"},
    {"tensor_data_layout", "informational (\"Meta AI original pth\"); llama.cpp's loader does not read it"},
};

template <std::size_t N>
const HarmlessKey* find_key(const HarmlessKey (&keys)[N], std::string_view key) {
  const auto it = std::lower_bound(std::begin(keys), std::end(keys), key,
                                   [](const HarmlessKey& k, std::string_view name) { return k.key < name; });
  return it != std::end(keys) && it->key == key ? it : nullptr;
}

static_assert(std::is_sorted(std::begin(kConfigKeys), std::end(kConfigKeys),
                             [](const HarmlessKey& a, const HarmlessKey& b) { return a.key < b.key; }));
static_assert(std::is_sorted(std::begin(kGgufArchKeys), std::end(kGgufArchKeys),
                             [](const HarmlessKey& a, const HarmlessKey& b) { return a.key < b.key; }));

}  // namespace

const HarmlessKey* find_harmless_config_key(std::string_view key) { return find_key(kConfigKeys, key); }

const HarmlessKey* find_harmless_gguf_arch_key(std::string_view arch_key) { return find_key(kGgufArchKeys, arch_key); }

}  // namespace pagedllm::llama
