// libFuzzer target over a GGUF file as models_llama and the engine read it: the SDK's
// reader (every small tensor of a type the Llama loader reads dequantized as it does:
// llama_common/gguf_dequantize.h, Q5_0 / Q2_K / IQ4_XS ... included), the model config made
// from its llama.* metadata (LlamaConfig::from_gguf), and the tokenizer and chat
// template made from its tokenizer.ggml.* metadata (Tokenizer::from_gguf, then an
// encode/decode). Each either succeeds or is refused with its documented error
// (pllm::Error, TokenizerError); any other exception, a crash or a sanitizer report is
// a finding. Run by tools/fuzz/run.sh (seeds: GGUF files written by the gguf package,
// make_corpus.py).

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_error.h"
#include "pagedllm/sdk/cpp/gguf.hpp"
#include "llama_common/gguf_dequantize.h"
#include "llama_common/llama_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The reader maps a path; an anonymous in-memory file gives it one.
  const int fd = memfd_create("fuzz_gguf", MFD_CLOEXEC);
  if (fd < 0) return 0;
  std::size_t written = 0;
  while (written < size) {
    const ssize_t n = ::write(fd, data + written, size - written);
    if (n <= 0) break;
    written += static_cast<std::size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    const pllm::gguf::File file(path);
    std::vector<float> values;
    for (const auto& t : file.tensors()) {
      if (t.numel() > (1 << 16)) continue;
      values.resize(static_cast<std::size_t>(t.numel()));
      (void)pagedllm::llama::dequantize_gguf(t.type, t.data, values.data(), t.numel());
    }
  } catch (const pllm::Error&) {
    // refused: what hostile input should get
  }
  try {
    (void)pagedllm::llama::LlamaConfig::from_gguf(path, "fuzz_gguf");
  } catch (const pllm::Error&) {
  }
  try {
    const auto tokenizer = pagedllm::tokenizer::Tokenizer::from_gguf(path);
    (void)tokenizer.decode(tokenizer.encode("Hello, world! 123 \xc3\xa9\n", true, false), true);
  } catch (const pagedllm::tokenizer::TokenizerError&) {
  }
  ::close(fd);
  return 0;
}
