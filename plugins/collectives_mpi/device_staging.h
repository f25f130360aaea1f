#pragma once
// collectives_mpi on a CUDA device: MPI (Debian's Open MPI is not CUDA-aware) moves host memory,
// so each collective's device buffer passes through one page-locked host buffer — copied out on
// the caller's stream, the collective run on the host copy, copied back — and is complete on the
// device when the call returns, as collectives.h requires. Built only with CUDA.

#include <cstddef>
#include <string>

namespace pagedllm::collectives_mpi {

class DeviceStaging {
 public:
  // Errors (cudaSetDevice on a device that does not exist) throw pllm::Error naming cuda:`device`.
  explicit DeviceStaging(int device);
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;
  ~DeviceStaging();

  // The pinned host buffer, grown to at least `bytes` (its contents are not kept when it grows).
  void* host(std::size_t bytes, const std::string& what);
  // `bytes` of device memory at `device` copied into the host buffer, which is returned.
  void* to_host(const void* device, std::size_t bytes, void* stream, const std::string& what);
  // The same into `host`, a place inside the host buffer.
  void copy_to_host(void* host, const void* device, std::size_t bytes, void* stream, const std::string& what);
  // `bytes` of `host` (inside the host buffer) copied to `device`, complete when this returns.
  void to_device(void* device, const void* host, std::size_t bytes, void* stream, const std::string& what);

 private:
  int device_;
  void* host_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace pagedllm::collectives_mpi
