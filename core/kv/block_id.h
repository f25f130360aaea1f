#pragma once
// Identifiers of KV blocks and the block-level operations a step hands to the
// attention backend (which owns the physical cache).

#include <cstdint>

namespace pagedllm {

// Index of a block in a pool (device or host). Blocks are numbered 0..N-1.
using BlockId = std::int32_t;

// Deliberately illegal: pads block-table rows and marks "no block", so a kernel
// that reads past a sequence's blocks fails loudly instead of reading block 0.
inline constexpr BlockId kInvalidBlockId = -1;

// Copy the contents of block `src` to block `dst` (copy-on-write within the
// device pool), or move a block between pools (swap: device -> host on swap
// out, host -> device on swap in).
struct BlockMapping {
  BlockId src = kInvalidBlockId;
  BlockId dst = kInvalidBlockId;
  friend bool operator==(const BlockMapping&, const BlockMapping&) = default;
};

}  // namespace pagedllm
