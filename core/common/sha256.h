#pragma once
// SHA-256 (FIPS 180-4). The prefix cache keys blocks by a chained digest so a
// client who chooses its prompt cannot make its blocks collide with another
// client's prefix; std::hash gives no such guarantee. Self-contained on purpose:
// core takes no crypto dependency for one hash function.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace pagedllm {

using Sha256Digest = std::array<std::uint8_t, 32>;

// Incremental hasher: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();

  void update(std::span<const std::uint8_t> bytes);
  void update(std::string_view text);

  // Pads, processes the last block and returns the digest. The hasher must not
  // be used afterwards.
  Sha256Digest finish();

 private:
  void process_block(const std::uint8_t* block);

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffer_size_ = 0;
  std::uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

// One-shot digest of `text`.
Sha256Digest sha256(std::string_view text);

// Lower-case hex of a digest, for logs and tests.
std::string to_hex(const Sha256Digest& digest);

}  // namespace pagedllm
