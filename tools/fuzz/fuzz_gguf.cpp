// libFuzzer target over the GGUF reader: any input either parses (and every small
// tensor of a supported type dequantizes) or is refused with a pllm::Error. Any
// other exception, a crash or a sanitizer report is a finding. Run by
// tools/fuzz/run.sh (seeds: GGUF files written by the gguf package, make_corpus.py).

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pagedllm/sdk/cpp/gguf.hpp"

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
  try {
    const pllm::gguf::File file("/proc/self/fd/" + std::to_string(fd));
    std::vector<float> values;
    for (const auto& t : file.tensors()) {
      if (t.numel() > (1 << 16)) continue;
      values.resize(static_cast<std::size_t>(t.numel()));
      try {
        t.to_f32(0, t.numel(), values.data());
      } catch (const pllm::Error& e) {
        if (e.status() != PLLM_ERROR_UNSUPPORTED) throw;
      }
    }
  } catch (const pllm::Error&) {
    // refused: what hostile input should get
  }
  ::close(fd);
  return 0;
}
