#pragma once
// Prefix-cache keys. A full block is keyed by a chained SHA-256 digest:
//   hash(block i) = SHA-256(parent, tokens of block i, extra key)
// so equal keys mean equal token prefixes from position 0 (not just equal block
// contents) under the same model/adapter. SHA-256 keeps users who choose their
// prompts from colliding with someone else's prefix.
//
// Byte encoding (unambiguous, fixed here because caches may outlive a process):
//   0x00                          when the block is the first (no parent), or
//   0x01 || parent digest (32 B)  otherwise;
//   then each token id as little-endian int32;
//   then the extra key's length as little-endian uint64, then its bytes.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "core/common/sha256.h"

namespace pagedllm {

struct BlockHash {
  Sha256Digest digest{};
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

// Bucket hash for unordered containers: the digest is already uniform, so its
// first 8 bytes are as good as any mix.
struct BlockHashBuckets {
  std::size_t operator()(const BlockHash& hash) const {
    std::size_t bucket = 0;
    std::memcpy(&bucket, hash.digest.data(), sizeof(bucket));
    return bucket;
  }
};

// The key of one full block whose predecessor has key `parent` (nullptr for the first block).
BlockHash hash_block(const BlockHash* parent, std::span<const std::int32_t> block_tokens,
                     std::string_view extra_key);

// Appends to `hashes` the keys of the full blocks of `tokens` that it does not
// hold yet; `hashes` must hold the keys of a prefix of the same tokens.
void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const std::int32_t> tokens,
                         int block_size, std::string_view extra_key);

}  // namespace pagedllm
