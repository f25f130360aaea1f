#include "core/kv/block_hash.h"

#include <array>

#include "core/common/check.h"

namespace pagedllm {
namespace {

template <typename Unsigned>
void update_little_endian(Sha256& hasher, Unsigned value) {
  std::array<std::uint8_t, sizeof(Unsigned)> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<std::uint8_t>(value >> (8 * i));
  }
  hasher.update(bytes);
}

}  // namespace

BlockHash hash_block(const BlockHash* parent, std::span<const std::int32_t> block_tokens,
                     std::string_view extra_key) {
  Sha256 hasher;
  if (parent == nullptr) {
    update_little_endian<std::uint8_t>(hasher, 0);
  } else {
    update_little_endian<std::uint8_t>(hasher, 1);
    hasher.update(parent->digest);
  }
  for (const std::int32_t token : block_tokens) {
    update_little_endian(hasher, static_cast<std::uint32_t>(token));
  }
  update_little_endian(hasher, static_cast<std::uint64_t>(extra_key.size()));
  hasher.update(extra_key);
  return BlockHash{hasher.finish()};
}

void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const std::int32_t> tokens,
                         int block_size, std::string_view extra_key) {
  PAGEDLLM_CHECK(block_size > 0, "block_size={}", block_size);
  const std::size_t size = static_cast<std::size_t>(block_size);
  const std::size_t num_full_blocks = tokens.size() / size;
  while (hashes.size() < num_full_blocks) {
    const std::size_t index = hashes.size();
    const BlockHash* parent = index == 0 ? nullptr : &hashes[index - 1];
    hashes.push_back(hash_block(parent, tokens.subspan(index * size, size), extra_key));
  }
}

}  // namespace pagedllm
