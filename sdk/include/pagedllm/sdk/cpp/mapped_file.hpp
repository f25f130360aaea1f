#pragma once
// A whole regular file mapped read-only (POSIX), unmapped by its destructor.
// The model readers (safetensors.hpp, gguf.hpp) hold one as a member, so a
// file they refuse from their constructor is unmapped too.
//
//   #include <pagedllm/sdk/cpp/mapped_file.hpp>
//
//   pllm::MappedFile f("model.bin", [](std::uint64_t size) {
//     if (size < 8) throw pllm::Error(PLLM_ERROR_INVALID_CONFIG, "too short");  // before mapping
//   });
//   const std::byte* p = f.data();   // f.size() bytes
//
// Errors are pllm::Error, their message starting with the path: a missing file
// is PLLM_ERROR_NOT_FOUND ("cannot open: ..."), any other open failure, a
// directory or other non-regular file ("not a regular file"), and a failed
// mmap ("cannot map: ...") are PLLM_ERROR_IO. An empty file cannot be mapped:
// refuse it in the size check for a better message.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "pagedllm/sdk/cpp/error.hpp"

namespace pllm {

class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path) : MappedFile(path, [](std::uint64_t) {}) {}

  // `check(size)` runs after the file is opened and before it is mapped; what
  // it throws propagates (the descriptor is closed, nothing is mapped).
  template <class Check>
  MappedFile(const std::filesystem::path& path, Check&& check) {
    const Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (fd.fd < 0) {
      const int err = errno;
      fail(path, err == ENOENT ? PLLM_ERROR_NOT_FOUND : PLLM_ERROR_IO, std::string("cannot open: ") + std::strerror(err));
    }
    struct stat st {};
    if (::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode)) fail(path, PLLM_ERROR_IO, "not a regular file");
    const auto size = static_cast<std::uint64_t>(st.st_size);
    check(size);
    void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (addr == MAP_FAILED) {
      const int err = errno;
      fail(path, PLLM_ERROR_IO, std::string("cannot map: ") + std::strerror(err));
    }
    addr_ = addr;  // the mapping keeps the file; fd closes on return
    size_ = size;
  }
  ~MappedFile() {
    if (addr_ != nullptr) ::munmap(addr_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return static_cast<const std::byte*>(addr_); }
  std::uint64_t size() const { return size_; }

 private:
  struct Fd {
    int fd;
    explicit Fd(int f) : fd(f) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  };
  [[noreturn]] static void fail(const std::filesystem::path& path, pllm_status status, const std::string& message) {
    throw Error(status, path.string() + ": " + message);
  }

  void* addr_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace pllm
