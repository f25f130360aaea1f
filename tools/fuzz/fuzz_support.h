#pragma once
// What the fuzz targets share: a scratch directory for the parsers that read
// files (so production's own reading code runs, mmap included), and inputs cut in two.

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace pagedllm::fuzz {

// A directory of this process's own, removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::filesystem::path d = std::filesystem::path(tmp ? tmp : "/tmp") /
                              ("pagedllm-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("fuzz: cannot write " + path.string());
}

// A fuzz input cut at its first NUL byte: {before, after} (after empty when none).
inline std::pair<std::string_view, std::optional<std::string_view>> split_at_nul(const std::uint8_t* data,
                                                                                 std::size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const auto nul = all.find('\0');
  if (nul == std::string_view::npos) return {all, std::nullopt};
  return {all.substr(0, nul), all.substr(nul + 1)};
}

}  // namespace pagedllm::fuzz
