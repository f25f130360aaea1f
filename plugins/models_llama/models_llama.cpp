// models_llama: the Llama-family architecture (Llama 2/3, TinyLlama,
// Mistral-style GQA).
//
// Status: the plugin loads and validates its options, so configs naming it
// pass --check; it cannot create a model yet. Weight loading and the forward
// pass land with the "Llama on CPU, end to end" issue, and until then create()
// refuses with PLLM_ERROR_UNSUPPORTED rather than pretend.

#include "pagedllm/sdk.hpp"

namespace {

class LlamaModel : public pllm::ModelPlugin {
 public:
  // No options yet: any key is rejected as unknown.
  struct Options {
    static Options parse(pllm::OptionReader&) { return {}; }
  };

  LlamaModel(const Options&, const pllm_model_create_args& args) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                      std::string("cannot load ") + (args.model_path ? args.model_path : "(no path)") +
                          ": the Llama forward pass is not implemented yet");
  }

  pllm_model_info info() { return {}; }
  void forward(const pllm_batch&, pllm_attention_ref, pllm_forward_output&) {}
};

}  // namespace

PAGEDLLM_PLUGIN(LlamaModel, "models_llama", "0.1.0",
                "Llama-family models (HF LlamaForCausalLM layout); forward pass not implemented yet")
