#include "core/common/sha256.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/common/check.h"

namespace pagedllm {
namespace {

constexpr std::array<std::uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

constexpr std::array<std::uint32_t, 8> kInitialState = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

std::uint32_t load_big_endian(const std::uint8_t* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
         (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
}

}  // namespace

Sha256::Sha256() : state_(kInitialState) {}

void Sha256::update(std::span<const std::uint8_t> bytes) {
  PAGEDLLM_CHECK(!finished_, "update() after finish()");
  total_bytes_ += bytes.size();
  std::size_t offset = 0;
  if (buffer_size_ > 0) {
    const std::size_t take = std::min(bytes.size(), buffer_.size() - buffer_size_);
    std::memcpy(buffer_.data() + buffer_size_, bytes.data(), take);
    buffer_size_ += take;
    offset = take;
    if (buffer_size_ < buffer_.size()) return;
    process_block(buffer_.data());
    buffer_size_ = 0;
  }
  for (; offset + 64 <= bytes.size(); offset += 64) process_block(bytes.data() + offset);
  buffer_size_ = bytes.size() - offset;
  if (buffer_size_ > 0) std::memcpy(buffer_.data(), bytes.data() + offset, buffer_size_);
}

void Sha256::update(std::string_view text) {
  update(std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

Sha256Digest Sha256::finish() {
  PAGEDLLM_CHECK(!finished_, "finish() called twice");
  const std::uint64_t bit_length = total_bytes_ * 8;
  // Padding: one 0x80 byte, zeros up to 56 mod 64, then the 64-bit big-endian length.
  std::array<std::uint8_t, 72> padding{};
  padding[0] = 0x80;
  const std::size_t zeros = (buffer_size_ < 56 ? 56 - buffer_size_ : 120 - buffer_size_) - 1;
  for (int i = 0; i < 8; ++i) {
    padding[1 + zeros + static_cast<std::size_t>(i)] =
        static_cast<std::uint8_t>(bit_length >> (56 - 8 * i));
  }
  const std::uint64_t message_bytes = total_bytes_;
  update(std::span(padding.data(), 1 + zeros + 8));
  total_bytes_ = message_bytes;
  PAGEDLLM_CHECK(buffer_size_ == 0, "padding left {} bytes unprocessed", buffer_size_);
  finished_ = true;

  Sha256Digest digest{};
  for (std::size_t i = 0; i < state_.size(); ++i) {
    for (std::size_t b = 0; b < 4; ++b) {
      digest[4 * i + b] = static_cast<std::uint8_t>(state_[i] >> (24 - 8 * b));
    }
  }
  return digest;
}

void Sha256::process_block(const std::uint8_t* block) {
  std::array<std::uint32_t, 64> schedule{};
  for (std::size_t t = 0; t < 16; ++t) schedule[t] = load_big_endian(block + 4 * t);
  for (std::size_t t = 16; t < 64; ++t) {
    const std::uint32_t s0 = std::rotr(schedule[t - 15], 7) ^ std::rotr(schedule[t - 15], 18) ^
                             (schedule[t - 15] >> 3);
    const std::uint32_t s1 = std::rotr(schedule[t - 2], 17) ^ std::rotr(schedule[t - 2], 19) ^
                             (schedule[t - 2] >> 10);
    schedule[t] = schedule[t - 16] + s0 + schedule[t - 7] + s1;
  }

  std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  std::uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (std::size_t t = 0; t < 64; ++t) {
    const std::uint32_t sum1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
    const std::uint32_t choose = (e & f) ^ (~e & g);
    const std::uint32_t temp1 = h + sum1 + choose + kRoundConstants[t] + schedule[t];
    const std::uint32_t sum0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
    const std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const std::uint32_t temp2 = sum0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + temp1;
    d = c;
    c = b;
    b = a;
    a = temp1 + temp2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

Sha256Digest sha256(std::string_view text) {
  Sha256 hasher;
  hasher.update(text);
  return hasher.finish();
}

std::string to_hex(const Sha256Digest& digest) {
  static constexpr char kHexDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(digest.size() * 2);
  for (const std::uint8_t byte : digest) {
    hex.push_back(kHexDigits[byte >> 4]);
    hex.push_back(kHexDigits[byte & 0xf]);
  }
  return hex;
}

}  // namespace pagedllm
